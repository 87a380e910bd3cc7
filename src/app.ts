/**
 * buildApp: the engine's HTTP service, without listen. server.ts owns
 * listening, signals and shutdown.
 */
import { REQUEST_ID_HEADER, requestId } from './request-id.js';
import { HEADER_CONSTRAINTS, documentedBody } from './openapi-constraints.js';
import { BRANCH_HEADER, DATABASE_HEADER, checkBranchHeaders } from './names.js';
import { engineDocument } from './openapi.js';
import Fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Braid, BranchRef } from './engine.js';
import { BraidError, isErrorCode } from './errors.js';
import { DEFAULTS, type ServerConfig } from './config.js';
import { ajv, validationError } from './validation.js';
import { recordRoutes } from './routes/records.js';
import { opsRoutes } from './routes/ops.js';
import { prometheusRoutes } from './prometheus.js';
import { pollEngineEvents } from './engine-events.js';
import fp from './idempotency/plugin.js';
import { queryRoutes } from './routes/query.js';
import { graphqlRoutes } from './routes/graphql.js';
import { adminRoutes } from './routes/admin.js';
import { consoleRoutes, isConsoleRequest } from './routes/console.js';
import { idempotency } from './idempotency/index.js';
import sjson from 'secure-json-parse';
import { QlSyntaxError, formatQlError } from './ql/index.js';
import swagger from '@fastify/swagger';
import { TokenSet, bearerToken, requireScope, routeScope, tokenId, type Scope } from './auth.js';

export interface AppOptions {
  engine: Braid;
  config?: Partial<ServerConfig>;
  /** Pino logger options; off by default. */
  logger?: boolean | object;
}

/** Per-process counters and state shared by the routes. */
export interface ServiceState {
  engine: Braid;
  config: ServerConfig;
  requests: number;
  closing: boolean;
}

declare module 'fastify' {
  interface FastifyInstance {
    braid: ServiceState;
  }
  interface FastifyRequest {
    /** The scope of the request's token; undefined when the engine requires none. */
    scope?: Scope;
    /** Who sent the request, for idempotency scoping: a digest of its token, or the gateway's x-braid-principal. */
    principal?: string;
  }
}

/** The client a request speaks for, before authentication: the gateway's header, or a digest of the bearer token. */
function principalOf(request: FastifyRequest): string | undefined {
  const named = request.headers['x-braid-principal'];
  if (typeof named === 'string' && /^[0-9a-f]{1,64}$/.test(named)) return named;
  const token = bearerToken(request.headers.authorization);
  return token === undefined ? undefined : tokenId(token);
}

export type App = FastifyInstance & { withTypeProvider: () => FastifyInstance };

/** The branch a request addresses through headers (body fields win on put). */
export function branchOf(request: FastifyRequest): BranchRef {
  const header = (name: string): string | undefined => {
    const v = request.headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  return { databaseId: header(DATABASE_HEADER), branchId: header(BRANCH_HEADER) };
}

/**
 * The branch of a put whose body names one (`branch_id` / `database_id`,
 * which SDKs and the gateway inject). The headers and the body must agree:
 * the gateway routes by its catalog and sets the headers, so a body that
 * names another branch is refused (400 branch_mismatch) rather than allowed
 * to reach a branch the catalog does not expose.
 */
export function putBranch(headers: BranchRef, body: { database_id?: string; branch_id?: string }): BranchRef {
  const pick = (what: string, header: string | undefined, named: string | undefined): string | undefined => {
    if (header !== undefined && named !== undefined && header !== named) {
      throw new BraidError('branch_mismatch', `body ${what} "${named}" disagrees with the request's x-braid-${what === 'branch_id' ? 'branch' : 'database'} header "${header}"`);
    }
    return named ?? header;
  };
  return { databaseId: pick('database_id', headers.databaseId, body.database_id), branchId: pick('branch_id', headers.branchId, body.branch_id) };
}

/** The branch a keyed request's receipt lives in: the one its write goes to. */
function receiptBranch(request: FastifyRequest): BranchRef {
  const headers = branchOf(request);
  const body = request.body as { record?: unknown; database_id?: string; branch_id?: string } | undefined;
  if (request.routeOptions.url === '/v1/records/put' && body && typeof body === 'object' && 'record' in body) {
    return putBranch(headers, body);
  }
  return headers;
}

function errorReply(err: FastifyError | BraidError | Error): BraidError {
  if (err instanceof BraidError) return err;
  const e = err as FastifyError & { validation?: unknown[]; validationContext?: string };
  if (e.validation) return validationError(e.validation as never, e.validationContext ?? 'body');
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new BraidError('invalid_json', e.message.toLowerCase());
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new BraidError('body_too_large', 'request body is larger than the configured limit');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new BraidError('unsupported_media_type', 'request body must be application/json');
    default:
      break;
  }
  if (e instanceof SyntaxError || e.statusCode === 400) return new BraidError('invalid_json', e.message);
  if (typeof e.code === 'string' && isErrorCode(e.code)) return new BraidError(e.code, e.message);
  return new BraidError('internal_error', e.message || 'internal error');
}

export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const config: ServerConfig = { ...DEFAULTS, ...options.config };
  const app = Fastify({
    logger: options.logger ?? false,
    // one line per request from the onResponse hook below instead of fastify's two
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'request_id' }),
    genReqId: requestId,
    bodyLimit: config.bodyLimitBytes,
    // fastify's own drain answer has no `code`; the onRequest hook below
    // answers 503 shutting_down instead
    return503OnClosing: false,
  }).withTypeProvider<TypeBoxTypeProvider>();
  app.setValidatorCompiler(({ schema }) => ajv.compile(schema));
  app.removeContentTypeParser('text/plain');
  // keep the raw body: idempotency receipts hash exactly what the client sent
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const raw = body as string;
    request.rawBody = raw;
    if (raw.trim() === '') {
      done(new BraidError('invalid_json', 'request body is empty but content-type is application/json'), undefined);
      return;
    }
    try {
      done(null, sjson.parse(raw, undefined, { protoAction: 'error', constructorAction: 'error' }));
    } catch (err) {
      done(new BraidError('invalid_json', `body is not valid json: ${(err as Error).message.toLowerCase()}`), undefined);
    }
  });

  const state: ServiceState = { engine: options.engine, config, requests: 0, closing: false };
  // without tokens (development) the engine accepts any request, as the spec allows
  const tokens = config.authTokens.length > 0 ? new TokenSet(config.authTokens) : undefined;
  app.decorate('braid', state);
  // the methods of each path (before any route is added), for the 405 of a known path asked with another method
  const methodsOf = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    const methods = methodsOf.get(route.url) ?? new Set<string>();
    for (const method of [route.method].flat()) methods.add(method);
    methodsOf.set(route.url, methods);
  });
  /** The error of a request no route takes: 405 with `Allow` for a path served with other methods, else 404. */
  const unrouted = (request: FastifyRequest, reply: FastifyReply): BraidError => {
    const pathname = request.url.split('?', 1)[0]!;
    const methods = methodsOf.get(pathname);
    if (!methods) return new BraidError('route_not_found', `no route ${request.method} ${pathname}`);
    const allowed = [...methods].sort();
    reply.header('allow', allowed.join(', '));
    return new BraidError('method_not_allowed', `${request.method} is not allowed on ${pathname}; use ${allowed.join(' or ')}`);
  };
  // first, so its timings and counts cover every request, refused ones included
  await app.register(fp(prometheusRoutes), { engine: options.engine });
  // the engine's own events (recovery, checkpoints, indexer, faults) in this log
  pollEngineEvents(app, options.engine);

  app.addHook('onRequest', async (request, reply) => {
    state.requests += 1;
    const encoding = request.headers['content-encoding'];
    if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
      throw new BraidError('unsupported_content_encoding', `Content-Encoding ${encoding} is not accepted: send the body uncompressed`);
    }
    if (state.closing && request.url.split('?')[0] !== '/v1/ready') {
      reply.header('connection', 'close');
      throw new BraidError('shutting_down', 'the engine is shutting down; retry against another engine or after the restart');
    }
    request.principal = principalOf(request);
    // the console's files hold no data; the page sends its token with each API call
    if (tokens && !isConsoleRequest(request)) {
      const auth = tokens.check(request.headers.authorization);
      request.scope = auth.scope;
      // the gateway (an admin token) names the client it serves; others are who their token says
      request.principal = auth.scope === 'admin' && request.principal ? request.principal : tokenId(auth.token);
      const pathname = request.url.split('?', 1)[0]!;
      // a GraphQL document is checked by the route once it is parsed
      if (!(request.method === 'POST' && pathname === '/v1/graphql')) {
        requireScope(auth.scope, routeScope(request.method, pathname), `${request.method} ${pathname}`);
      }
    }
    // answered before the body is read: a method fastify expects a body with
    // (QUERY) would otherwise fail content-type parsing first
    if (request.is404) throw unrouted(request, reply);
    checkBranchHeaders(request.headers);
  });

  app.setErrorHandler((err, request, reply) => {
    if (err instanceof QlSyntaxError) return reply.status(400).send(formatQlError(err));
    const braidErr = errorReply(err as Error);
    if (braidErr.status >= 500) request.log.error({ err }, 'request failed');
    const body: Record<string, unknown> = braidErr.toBody();
    if (braidErr.index !== undefined) body.index = braidErr.index;
    return reply.status(braidErr.status).send(body);
  });

  app.setNotFoundHandler((request, reply) => {
    throw unrouted(request, reply);
  });

  // Draining: once close() starts, in-flight requests finish but their
  // keep-alive connections are closed after the response, so close() ends.
  app.addHook('preClose', async () => {
    state.closing = true;
  });
  app.addHook('onSend', async (request, reply, payload) => {
    if (state.closing) reply.header('connection', 'close');
    reply.header(REQUEST_ID_HEADER, request.id);
    return payload;
  });
  // the request log line (level info): no bodies, headers or tokens
  app.addHook('onResponse', async (request, reply) => {
    request.log.info(
      { method: request.method, route: request.routeOptions.url ?? 'unmatched', status: reply.statusCode, duration_ms: Number(reply.elapsedTime.toFixed(3)) },
      'request',
    );
  });

  // OpenAPI 3.1 document of every route, generated from the route schemas (docs/api.md, "OpenAPI")
  await app.register(swagger, {
    // bearer security only when this engine checks tokens (src/openapi.ts)
    openapi: engineDocument(tokens !== undefined),
    // documentation only (validation is unchanged): the branch headers every route takes, Idempotency-Key on the keyed routes
    transform: ({ schema, url }) => {
      const keyed = schema?.response !== undefined && 409 in (schema.response as object);
      const headers = {
        type: 'object',
        properties: {
          'x-braid-database': { ...HEADER_CONSTRAINTS.name, description: 'database to address (default: default)' },
          'x-braid-branch': { ...HEADER_CONSTRAINTS.name, description: 'branch to address (default: main)' },
          ...(keyed ? { 'idempotency-key': { ...HEADER_CONSTRAINTS.idempotencyKey, description: '1-255 printable ASCII characters; replays the first response of the same key and body' } } : {}),
        },
      };
      // the names, ranges and enums the engine enforces (src/openapi-constraints.ts)
      const body = schema && 'body' in schema ? { body: documentedBody(schema.body, config) } : {};
      return { schema: { ...schema, ...body, headers } as typeof schema, url };
    },
  });
  app.get('/v1/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  if (config.testHooks) {
    // test hook (BRAID_TEST_HOOKS=1): the process dies after a request's
    // work and before its idempotency receipt is stored (the next onSend hook)
    app.addHook('onSend', async (request, _reply, payload) => {
      if (request.headers['x-braid-test-crash'] === 'before-receipt') process.kill(process.pid, 'SIGKILL');
      return payload;
    });
  }
  await app.register(idempotency, { engine: options.engine, branchOf: receiptBranch });
  await app.register(recordRoutes);
  await app.register(opsRoutes);
  await app.register(queryRoutes);
  await app.register(graphqlRoutes);
  await app.register(adminRoutes);
  await app.register(consoleRoutes);
  return app;
}
