/**
 * The gateway's authentication and authorisation, an onRequest and a
 * preParsing hook with the rate limiter's between them: first a configured
 * bearer token (401; src/auth.ts checks it in constant time), then the
 * token's budget (429), then the method the path allows (405), the branch
 * headers (400) and the scope the route needs (403). Unknown tokens are 401,
 * never 429 -- unless one address keeps failing: past `authFailureMax`
 * failures in a window it gets 429 before its tokens are even checked
 * (guessing tokens).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { TokenSet, WWW_AUTHENTICATE, authorizationOf, requireScope, routeScope, type Scope } from '../auth.js';
import { BraidError } from '../errors.js';
import { checkBranchHeaders } from '../names.js';
import { isConsoleRequest } from '../routes/console.js';
import { API_METHODS, pathOf } from './routing.js';
import type { GatewayConfig } from './config.js';

export interface Authenticated {
  token: string;
  scope: Scope;
}

const GRAPHQL_PATH = '/v1/graphql';
/** Addresses with failed authentications remembered at most; the oldest is forgotten first. */
const MAX_FAILING_ADDRESSES = 100_000;

const authenticated = new WeakMap<FastifyRequest, Authenticated>();

/** The token and scope a request was let in with; undefined for the console's files and refused requests. */
export function authOf(request: FastifyRequest): Authenticated | undefined {
  return authenticated.get(request);
}

/** Adds the authentication hook to `app` (not a plugin: it must cover every route of the app). */
export function authenticateRequests(app: FastifyInstance, state: { readonly config: GatewayConfig; metered: number }): void {
  const { config } = state;
  const tokens = new TokenSet(config.tokens);
  const failures = new Map<string, { count: number; until: number }>();
  app.addHook('onRequest', async (request, reply) => {
    // the console's files hold no data and a browser cannot send a token to load a page;
    // the page sends its token with each API call, which is checked here like any other
    if (isConsoleRequest(request)) return;
    const now = Date.now();
    const failed = failures.get(request.ip);
    if (failed && failed.until <= now) failures.delete(request.ip);
    else if (failed && config.authFailureMax > 0 && failed.count >= config.authFailureMax) {
      const retry = Math.ceil((failed.until - now) / 1000);
      reply.header('retry-after', String(retry));
      throw new BraidError('rate_limited', `too many failed authentications from this address; retry in ${retry} s`);
    }
    let auth: Authenticated;
    try {
      auth = tokens.check(authorizationOf(request.raw));
    } catch (err) {
      const entry = failures.get(request.ip) ?? { count: 0, until: now + config.authFailureWindowMs };
      entry.count += 1;
      failures.set(request.ip, entry);
      if (failures.size > MAX_FAILING_ADDRESSES) failures.delete(failures.keys().next().value as string);
      reply.header('www-authenticate', WWW_AUTHENTICATE);
      throw err;
    }
    authenticated.set(request, auth);
    state.metered += 1;
  });
}

/**
 * Adds the authorisation hook to `app`: a preParsing hook, so it runs after
 * the rate limiter's route-level onRequest hooks and before a body is read.
 * A refused request (405, 400, 403) of a valid token counts against its
 * budget and carries the `x-ratelimit-*` headers like any other.
 */
export function authorizeRequests(app: FastifyInstance): void {
  app.addHook('preParsing', async (request, reply, payload) => {
    const auth = authOf(request);
    if (!auth) return payload; // the console's files
    const pathname = pathOf(request.url);
    const methods = API_METHODS.get(pathname);
    if (methods && !methods.includes(request.method)) {
      reply.header('allow', methods.join(', '));
      throw new BraidError('method_not_allowed', `${request.method} is not allowed on ${pathname}; use ${methods.join(' or ')}`);
    }
    checkBranchHeaders(request.headers);
    // GraphQL documents are scoped by what they run, once the proxy has read the body
    if (!(request.method === 'POST' && pathname === GRAPHQL_PATH)) {
      requireScope(auth.scope, routeScope(request.method, pathname), `${request.method} ${pathname}`);
    }
    return payload;
  });
}
