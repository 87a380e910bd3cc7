/**
 * buildApp: the engine's HTTP service, without listen. server.ts owns
 * listening, signals and shutdown.
 */
import { REQUEST_ID_HEADER, requestId } from './request-id.js';
import { lazyRequestLogger } from './request-logger.js';
import { HEADER_CONSTRAINTS, documentedBody } from './openapi-constraints.js';
import { checkBranchHeaders } from './names.js';
import { engineDocument } from './openapi.js';
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Braid } from './engine.js';
import { putBodyBranch, type BranchRef, type Engine } from './native/engine.js';
import { BraidError } from './errors.js';
import { labelKnownPath, routeLabel } from './route-label.js';
import { answerHalfClosed, continueIfExpected, deferContinue, answerPipelinedInOrder, clientErrorHandler, failureLevel, frameworkErrors, httpError, logRefusedCredential, onRawAnswer, refuseConnect, refuseExpectation, requestTimeoutOptions, sendRefusal } from './http-errors.js';
import { headerBranch, resolveNamedBranch } from './services/branch.js';
import type { ProcessState } from './services/ops.js';
import { DEFAULTS, type ServerConfig } from './config.js';
import { ajv } from './validation.js';
import { LazySerializers } from './lazy-serializers.js';
import { parseRequestJson } from './json.js';
import { recordRoutes } from './routes/records.js';
import { deprecationHeaders } from './deprecation.js';
import { opsRoutes } from './routes/ops.js';
import { prometheusRoutes } from './prometheus.js';
import { pollEngineEvents } from './engine-events.js';
import fp from './idempotency/plugin.js';
import { queryRoutes } from './routes/query.js';
import { graphqlRoutes } from './routes/graphql.js';
import { adminRoutes } from './routes/admin.js';
import { consoleRoutes, isConsoleRequest } from './routes/console.js';
import { idempotency } from './idempotency/index.js';
import swagger from '@fastify/swagger';
import { TokenSet, WWW_AUTHENTICATE, authorizationOf, bearerToken, requireScope, routeScope, tokenId, type Scope } from './auth.js';
import { checkRequestTarget, pathOf } from './request-target.js';

export interface AppOptions {
  engine: Braid;
  config?: Partial<ServerConfig>;
  /** Pino logger options; off by default. */
  logger?: boolean | object;
}

/** Per-process counters and state shared by the routes. */
export interface ServiceState extends ProcessState {
  /** The typed binding the routes hand their services. */
  engine: Engine;
  config: ServerConfig;
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

/**
 * The branch a keyed request's receipt lives in: the one its write goes to
 * (src/services/branch.ts). A restore addresses no existing branch and reads
 * no branch header (docs/storage.md): its receipts live in the default
 * branch, so a header naming a branch that does not exist is ignored with a
 * key as it is without one.
 */
function receiptBranch(request: FastifyRequest): BranchRef {
  if (request.routeOptions.url === '/v1/admin/restore') return {};
  const headers = headerBranch(request.headers);
  // a put wrapper may name its branch (its body's bytes, which the engine
  // reads; the header's branch alone had been searched, so a retry of a
  // write to the named branch was judged by another branch's receipts)
  if (request.routeOptions.url === '/v1/records/put' && Buffer.isBuffer(request.body)) {
    const named = putBodyBranch(request.body);
    if (named) return resolveNamedBranch(headers, named);
  }
  return headers;
}

export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const config: ServerConfig = { ...DEFAULTS, ...options.config };
  // compiled on first use and once the server listens, not as it boots
  const serializers = new LazySerializers();
  const app = Fastify({
    schemaController: { compilersFactory: { buildSerializer: serializers.factory } },
    logger: options.logger ?? false,
    // one line per request from the onResponse hook below instead of fastify's two
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'request_id' }),
    genReqId: requestId,
    // a request's pino child is made at its first log line, not for every request
    childLoggerFactory: lazyRequestLogger,
    bodyLimit: config.bodyLimitBytes,
    // a client that stalls mid-request is answered 408 request_timeout and
    // disconnected, instead of holding its buffered body forever
    requestTimeout: config.requestTimeoutMs,
    http: requestTimeoutOptions(config.requestTimeoutMs),
    // and what Node's HTTP parser refuses gets a {code, error} body too
    clientErrorHandler,
    // fastify's own drain answer has no `code`; the onRequest hook below
    // answers 503 shutting_down instead
    return503OnClosing: false,
    // what fastify answers before any hook runs (a path that does not decode) gets a {code, error} body too
    frameworkErrors,
  }).withTypeProvider<TypeBoxTypeProvider>();
  app.addHook('onListen', async () => serializers.warm());
  refuseConnect(app.server);
  refuseExpectation(app.server);
  answerHalfClosed(app.server);
  deferContinue(app.server);
  if (config.maxConnections > 0) app.server.maxConnections = config.maxConnections;
  answerPipelinedInOrder(app.server);
  app.setValidatorCompiler(({ schema }) => ajv.compile(schema));
  app.removeContentTypeParser('text/plain');
  // keep the raw body: idempotency receipts hash exactly what the client sent
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    // bytes, not a string: text that is not UTF-8 is refused instead of decoded with U+FFFD
    const raw = body as Buffer;
    request.rawBody = raw;
    try {
      done(null, parseRequestJson(raw));
    } catch (err) {
      done(err as Error, undefined);
    }
  });

  const engine = options.engine.engine;
  /**
   * Where this engine answers, as branches report it: the public URL, else
   * the address it listens on, and the last one it listened on while it
   * drains (a closing server has none: its 503 readiness had said
   * `embedded`; found by a black-box review).
   */
  let listenedOn: string | undefined;
  const endpoint = (): string => {
    if (config.publicUrl) return config.publicUrl;
    const address = app.server.address();
    if (address && typeof address === 'object') {
      const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      listenedOn = `http://${host}:${address.port}`;
    }
    return listenedOn ?? 'embedded';
  };
  app.server.on('listening', endpoint);
  const state: ServiceState = { engine, config, requests: 0, closing: false, endpoint };
  // answers written with no request of fastify's (src/http-errors.ts) are requests answered too
  onRawAnswer(app.server, () => {
    state.requests += 1;
  });
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
    const pathname = pathOf(request.url);
    const methods = methodsOf.get(pathname);
    if (!methods) return new BraidError('route_not_found', `no route ${request.method} ${pathname}`);
    const allowed = [...methods].sort();
    labelKnownPath(request, pathname);
    reply.header('allow', allowed.join(', '));
    return new BraidError('method_not_allowed', `${request.method} is not allowed on ${pathname}; use ${allowed.join(' or ')}`);
  };
  // before any route, so every route's errors (GET /metrics's included) are {code, error}
  app.setErrorHandler((err, request, reply) => {
    const braidErr = httpError(err);
    if (braidErr.status >= 500) request.log[failureLevel(braidErr.code)]({ err, code: braidErr.code }, 'request failed');
    logRefusedCredential(request, braidErr.code);
    // A body over the limit is refused while its client may still be sending
    // it. fastify would close the connection, and a close with the upload
    // unread resets it, which can destroy the answer before the client reads
    // it (the gateway, streaming a body, saw only the reset: 502). Without
    // the close Node reads the rest and drops it, bounded by the request
    // timeout, and the client gets its 400.
    if (braidErr.code === 'body_too_large' && !state.closing) reply.removeHeader('connection');
    return sendRefusal(request, reply, braidErr.status, braidErr.toBody());
  });

  // first, so its timings and counts cover every request, refused ones included
  await app.register(fp(prometheusRoutes), { engine });
  // the engine's own events (recovery, checkpoints, indexer, faults) in this log
  pollEngineEvents(app, engine);

  // hooks that need not wait take fastify's callback: an async hook costs
  // every request a promise and a microtask turn
  const admit = (request: FastifyRequest, reply: FastifyReply): void => {
    state.requests += 1;
    // first: every answer on a deprecated path says so, a refusal below included
    const deprecation = deprecationHeaders(request.url);
    if (deprecation) reply.headers(deprecation);
    checkRequestTarget(request);
    if (state.closing && pathOf(request.url) !== '/v1/ready') {
      reply.header('connection', 'close');
      throw new BraidError('shutting_down', 'the engine is shutting down; retry against another engine or after the restart');
    }
    request.principal = principalOf(request);
    // the console's files hold no data; the page sends its token with each API call
    if (tokens && !isConsoleRequest(request)) {
      let auth: { token: string; scope: Scope };
      try {
        auth = tokens.check(authorizationOf(request.raw));
      } catch (err) {
        reply.header('www-authenticate', WWW_AUTHENTICATE);
        throw err;
      }
      request.scope = auth.scope;
      // the gateway (an admin token) names the client it serves; others are who their token says
      request.principal = auth.scope === 'admin' && request.principal ? request.principal : tokenId(auth.token);
      // the route fastify will run, not the target as written
      const pathname = (request.is404 ? undefined : request.routeOptions.url) ?? pathOf(request.url);
      // a GraphQL document is checked by the route once it is parsed
      if (!(request.method === 'POST' && pathname === '/v1/graphql')) {
        requireScope(auth.scope, routeScope(request.method, pathname), `${request.method} ${pathname}`);
      }
    }
    // answered before the body is read: a method fastify expects a body with
    // (QUERY) would otherwise fail content-type parsing first
    if (request.is404) throw unrouted(request, reply);
    checkBranchHeaders(request.headers);
    continueIfExpected(request, reply, config.bodyLimitBytes);
  };
  app.addHook('onRequest', (request, reply, done) => {
    try {
      admit(request, reply);
    } catch (err) {
      done(err as Error);
      return;
    }
    done();
  });

  app.setNotFoundHandler((request, reply) => {
    throw unrouted(request, reply);
  });

  // Draining: once close() starts, in-flight requests finish but their
  // keep-alive connections are closed after the response, so close() ends.
  app.addHook('preClose', async () => {
    state.closing = true;
  });
  app.addHook('onSend', (request, reply, payload, done) => {
    if (state.closing) reply.header('connection', 'close');
    reply.header(REQUEST_ID_HEADER, request.id);
    done(null, payload);
  });
  // the request log line (level info): no bodies, headers or tokens
  app.addHook('onResponse', (request, reply, done) => {
    // pino's check; the line's fields are not built when info is not logged
    if ((request.log as { isLevelEnabled?: (level: string) => boolean }).isLevelEnabled?.('info') ?? true) {
      request.log.info(
        { method: request.method, route: routeLabel(request), status: reply.statusCode, duration_ms: Number(reply.elapsedTime.toFixed(3)) },
        'request',
      );
    }
    done();
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
  await app.register(idempotency, { engine, branchOf: receiptBranch });
  await app.register(recordRoutes);
  await app.register(opsRoutes);
  await app.register(queryRoutes);
  await app.register(graphqlRoutes);
  await app.register(adminRoutes);
  await app.register(consoleRoutes);
  return app;
}
