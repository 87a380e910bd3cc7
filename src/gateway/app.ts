/**
 * buildGateway: the gateway's HTTP service, without listen. Every request
 * needs a configured bearer token (401), then passes the per-token rate
 * limiter (429), then is either served here (metrics, branches, readiness)
 * or proxied to the engine of the catalog branch it addresses.
 */
import Fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import rateLimit from '@fastify/rate-limit';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { Dispatcher } from 'undici';
import { BraidError, isErrorCode } from '../errors.js';
import { BranchesResponse, MetricsResponse, ReadyResponse } from '../schemas/ops.js';
import { TokenSet, tokenId } from './auth.js';
import { graphqlScope, requireScope, routeScope, type Scope } from '../auth.js';
import { parseDocument } from '../graphql/bounds.js';
import type { GatewayConfig } from './config.js';
import { BRANCH_HEADER, DATABASE_HEADER, Router, headerValue, parsePutBody, type Route } from './routing.js';
import { Upstream, upstreamFailure } from './upstream.js';
import client from 'prom-client';
import { HTTP_BUCKETS, createRegistry, instrumentHttp } from '../prometheus.js';
import { REQUEST_ID_HEADER, requestId } from '../request-id.js';
import { CONSOLE_PATH, consoleRoutes, isConsoleRequest } from '../routes/console.js';
import { securedDocument } from '../openapi.js';
import { checkBranchHeaders } from '../names.js';

const GET = ['GET', 'HEAD'];
const POST = ['POST'];
/**
 * The paths Braid serves and their methods, as the engine serves them (a
 * test checks the two agree): a known path asked with another method is
 * answered 405 here, before it is routed by its branch headers. The paths
 * are also the route label of the gateway's metrics (any other is "other").
 */
export const API_METHODS: ReadonlyMap<string, readonly string[]> = new Map([
  ['/v1/graphql/schema', GET], ['/v1/nativeql', POST], ['/v1/query', POST], ['/v1/admin/restore', POST], ['/v1/explain', POST],
  ['/v1/insert', POST], ['/v1/graphql/bounded', POST], ['/v1/graphql', POST], ['/v1/branches', GET],
  ['/v1/records/put-batch', POST], ['/v1/admin/snapshot', POST], ['/v1/records/put', POST],
  ['/v1/metrics/public-safe', GET], ['/v1/ready', GET], ['/v1/records/get', POST], ['/v1/admin/branch-state', POST],
  ['/v1/openapi.json', GET], ['/metrics', GET],
]);

export const GATEWAY_SERVICE_NAME = 'braid-gateway';

export interface GatewayOptions {
  config: GatewayConfig;
  /** Pino logger options; off by default. */
  logger?: boolean | object;
}

/** Counters and wiring shared by the gateway's routes. */
export interface GatewayState {
  config: GatewayConfig;
  router: Router;
  upstreams: Map<string, Upstream>;
  /** Every request the gateway received. */
  requests: number;
  /** Requests with a valid token, counted against that token's rate limit. */
  metered: number;
  /** Set once close() starts: requests still arriving get 503 shutting_down. */
  closing: boolean;
}

declare module 'fastify' {
  interface FastifyInstance {
    gateway: GatewayState;
  }
}

/** Headers that describe one connection and are not forwarded in either direction. */
const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer',
  'transfer-encoding', 'upgrade', 'host', 'expect', 'http2-settings',
]);
/** Response headers the gateway's own server sets. */
const RESPONSE_SKIP = new Set([...HOP_BY_HOP, 'date']);

/** Header names a `Connection` header lists: hop-by-hop for this message too (RFC 9110 7.6.1). */
function connectionTokens(value: string | string[] | undefined): Set<string> {
  const joined = Array.isArray(value) ? value.join(',') : value ?? '';
  return new Set(joined.split(',').map((t) => t.trim().toLowerCase()).filter(Boolean));
}

const PUT_PATH = '/v1/records/put';
const GRAPHQL_PATH = '/v1/graphql';
/** Set toward engines: a digest of the client's token (see src/idempotency). */
export const PRINCIPAL_HEADER = 'x-braid-principal';
/** Engine answers up to this size are buffered and sent in one write instead of streamed. */
const SMALL_BODY_BYTES = 64 * 1024;

function toBraidError(err: unknown): BraidError {
  if (err instanceof BraidError) return err;
  const e = err as FastifyError;
  switch (e?.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new BraidError('body_too_large', 'request body is larger than the configured limit');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new BraidError('unsupported_media_type', e.message);
    default:
      break;
  }
  if (typeof e?.code === 'string' && isErrorCode(e.code)) return new BraidError(e.code, e.message);
  if (typeof e?.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return new BraidError('invalid_request', e.message || 'bad request');
  }
  return new BraidError('internal_error', (e as Error | undefined)?.message || 'internal error');
}

/** Reads a request body up to `limit` bytes. */
async function readBody(raw: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(raw.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    throw new BraidError('body_too_large', `request body is larger than the limit of ${limit} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of raw) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new BraidError('body_too_large', `request body is larger than the limit of ${limit} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks, size);
}

function hasBody(headers: IncomingHttpHeaders): boolean {
  if (headers['transfer-encoding'] !== undefined) return true;
  const length = headers['content-length'];
  return length !== undefined && length !== '0';
}

/**
 * The scope a GraphQL request body needs; a body or document that does not
 * parse needs only `read` (the engine rejects it without running anything).
 */
function graphqlDocumentScope(bytes: Buffer): Scope {
  let body: unknown;
  try {
    body = JSON.parse(bytes.toString('utf8'));
  } catch {
    return 'read';
  }
  if (!isObject(body) || typeof body.query !== 'string') return 'read';
  try {
    const operationName = typeof body.operationName === 'string' ? body.operationName : undefined;
    return graphqlScope(parseDocument(body.query), operationName);
  } catch {
    return 'read';
  }
}

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export async function buildGateway(options: GatewayOptions): Promise<FastifyInstance> {
  const { config } = options;
  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: config.bodyLimitBytes,
    // fastify's own drain answer has no `code`; the first onRequest hook
    // below answers 503 shutting_down instead
    return503OnClosing: false,
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'request_id' }),
    // the client's X-Request-Id when it is a plain token, else a new one; the
    // engine gets it too, so one id names the request in both logs
    genReqId: requestId,
  });
  app.addHook('onSend', async (request, reply, payload) => {
    // draining: keep-alive connections close after their response, so close() ends
    if (state.closing) reply.header('connection', 'close');
    reply.header(REQUEST_ID_HEADER, request.id);
    return payload;
  });
  app.addHook('onResponse', async (request, reply) => {
    request.log.info({ method: request.method, status: reply.statusCode, duration_ms: Number(reply.elapsedTime.toFixed(3)) }, 'request');
  });

  const router = new Router(config.catalog, config.defaultDatabase);
  const tokens = new TokenSet(config.tokens);
  const engineAuthorization = config.engineToken ? `Bearer ${config.engineToken}` : undefined;
  const upstreams = new Map<string, Upstream>();
  for (const [endpoint, probe] of router.endpoints()) {
    upstreams.set(endpoint, new Upstream(endpoint, probe, {
      connectTimeoutMs: config.connectTimeoutMs,
      upstreamTimeoutMs: config.upstreamTimeoutMs,
      connections: config.connectionsPerEngine,
      readyIntervalMs: config.readyIntervalMs,
      // without an engine token, clients' headers are forwarded; checks use the first client token
      probeAuthorization: engineAuthorization ?? `Bearer ${config.tokens[0]!.token}`,
    }));
  }
  const state: GatewayState = { config, router, upstreams, requests: 0, metered: 0, closing: false };
  app.decorate('gateway', state);
  const upstreamOf = (route: Route): Upstream => upstreams.get(route.endpoint)!;

  // Prometheus metrics (GET /metrics, docs/gateway.md "Metrics"): first, so
  // refused requests (401, 403, 429) are counted too. Every path is proxied,
  // so the route label is the path when it is one Braid has, else "other".
  const registry = createRegistry('braid_gateway_');
  instrumentHttp(app, registry, 'braid_gateway_', (request) => {
    if (isConsoleRequest(request)) return CONSOLE_PATH;
    const pathname = request.url.split('?', 1)[0]!;
    return API_METHODS.has(pathname) ? pathname : 'other';
  });
  const upstreamDuration = new client.Histogram({
    name: 'braid_gateway_upstream_request_duration_seconds',
    help: 'Proxied requests: time until the engine answered with its status line and headers, by engine and status',
    labelNames: ['engine', 'status'],
    buckets: HTTP_BUCKETS,
    registers: [registry],
  });
  const upstreamErrors = new client.Counter({
    name: 'braid_gateway_upstream_errors_total',
    help: 'Proxied requests the engine did not answer, by engine and code (upstream_unreachable, upstream_error)',
    labelNames: ['engine', 'code'],
    registers: [registry],
  });
  const engineReady = new client.Gauge({
    name: 'braid_gateway_engine_ready',
    help: '1 when the last readiness check of the engine passed, else 0',
    labelNames: ['engine'],
    registers: [registry],
    collect() {
      for (const [endpoint, up] of upstreams) this.set({ engine: endpoint }, up.readiness.ready ? 1 : 0);
    },
  });
  void engineReady;

  app.addHook('onReady', async () => {
    for (const up of upstreams.values()) up.start();
  });
  app.addHook('preClose', async () => {
    state.closing = true;
  });
  app.addHook('onClose', async () => {
    await Promise.all([...upstreams.values()].map((up) => up.close()));
  });

  // Bodies are not parsed. Small ones (known length up to SMALL_BODY_BYTES) are
  // read into a Buffer, so the engine gets headers and body in one write;
  // larger or chunked ones stream from the client to the engine.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (request: FastifyRequest, payload: IncomingMessage, done: (err: Error | null, body?: unknown) => void) => {
    const length = Number(request.headers['content-length']);
    if (!Number.isInteger(length) || length > SMALL_BODY_BYTES) return done(null);
    const chunks: Buffer[] = [];
    let size = 0;
    payload.on('data', (chunk: Buffer) => {
      size += chunk.length;
      chunks.push(chunk);
    });
    payload.on('end', () => done(null, Buffer.concat(chunks, size)));
    payload.on('error', (err) => done(err));
  });

  // Authentication runs first, as an application-level hook: the limiter's
  // route-level hooks run after it, so unknown tokens are 401, never 429 --
  // unless one address keeps failing: past `authFailureMax` failures in a
  // window it gets 429 before its tokens are even checked (guessing tokens).
  const tokenOf = new WeakMap<FastifyRequest, { token: string; scope: Scope }>();
  const failures = new Map<string, { count: number; until: number }>();
  app.addHook('onRequest', async (request, reply) => {
    state.requests += 1;
    // readiness answers not ready itself, in its own shape
    if (state.closing && request.url.split('?', 1)[0] !== '/v1/ready') {
      reply.header('connection', 'close');
      throw new BraidError('shutting_down', 'the gateway is shutting down; retry against another gateway or after the restart');
    }
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
    let auth: { token: string; scope: Scope };
    try {
      auth = tokens.check(request.headers.authorization);
    } catch (err) {
      const entry = failures.get(request.ip) ?? { count: 0, until: now + config.authFailureWindowMs };
      entry.count += 1;
      failures.set(request.ip, entry);
      // bounded: forget the oldest address when many fail at once
      if (failures.size > 100_000) failures.delete(failures.keys().next().value as string);
      reply.header('www-authenticate', 'Bearer realm="braid"');
      throw err;
    }
    tokenOf.set(request, auth);
    const pathname = request.url.split('?', 1)[0]!;
    const methods = API_METHODS.get(pathname);
    if (methods && !methods.includes(request.method)) {
      reply.header('allow', methods.join(', '));
      throw new BraidError('method_not_allowed', `${request.method} is not allowed on ${pathname}; use ${methods.join(' or ')}`);
    }
    checkBranchHeaders(request.headers);
    // GraphQL documents are scoped by what they run, once the body is read (proxy)
    if (!(request.method === 'POST' && pathname === GRAPHQL_PATH)) {
      requireScope(auth.scope, routeScope(request.method, pathname), `${request.method} ${pathname}`);
    }
    state.metered += 1;
  });

  const limiterOn = config.rateLimitMax > 0;
  if (limiterOn) {
    await app.register(rateLimit, {
      global: true,
      hook: 'onRequest',
      max: config.rateLimitMax,
      timeWindow: config.rateWindowMs,
      keyGenerator: (request) => tokenOf.get(request)?.token ?? '',
      errorResponseBuilder: (_request, context) =>
        new BraidError('rate_limited', `rate limit of ${context.max} requests per ${config.rateWindowMs} ms exceeded for this token; retry in ${context.after}`),
    });
  }

  app.setErrorHandler((err, request, reply) => {
    const braidErr = toBraidError(err);
    if (braidErr.status >= 500 && braidErr.code !== 'upstream_unreachable' && braidErr.code !== 'not_ready' && braidErr.code !== 'shutting_down') {
      request.log.error({ err }, 'gateway request failed');
    }
    return reply.status(braidErr.status).send(braidErr.toBody());
  });

  /** The catalog branch named by the request's headers. */
  const routeOf = (request: FastifyRequest, databaseId?: string, branchId?: string): Route =>
    router.resolve(databaseId ?? headerValue(request.headers[DATABASE_HEADER]), branchId ?? headerValue(request.headers[BRANCH_HEADER]));

  // Branches the engines report (a restore makes one): learned whenever a
  // request names a branch the gateway does not know (one look-up at a time,
  // shared by the requests that wait for it) and whenever GET /v1/branches
  // lists them.
  let discovering: Promise<void> | undefined;
  type Listed = { branch_id: string; database_id: string; latest_epoch: number; parent_branch_id: string | null; state: string };
  /** Each engine's `GET /v1/branches` (undefined when it did not answer); teaches the router. */
  const listEngines = async (request: FastifyRequest): Promise<Map<string, Map<string, Listed> | undefined>> => {
    const perEndpoint = new Map<string, Map<string, Listed> | undefined>();
    await Promise.all([...router.endpoints()].map(async ([endpoint, probe]) => {
      const up = upstreams.get(endpoint)!;
      let listed: Map<string, Listed> | undefined;
      try {
        const headers = upstreamHeaders(request, probe);
        delete headers['content-length'];
        const res = await up.getJson('/v1/branches', headers);
        if (res.status === 200 && isObject(res.body) && Array.isArray(res.body.branches)) {
          const branches = (res.body.branches as unknown[]).filter(
            (b): b is Listed => isObject(b) && typeof b.database_id === 'string' && typeof b.branch_id === 'string',
          );
          listed = new Map(branches.map((b) => [`${b.database_id}\u0000${b.branch_id}`, b]));
          router.learn(endpoint, branches);
        }
      } catch {
        void up.check();
      }
      perEndpoint.set(endpoint, listed);
    }));
    return perEndpoint;
  };
  /** Like routeOf; a branch it does not know is looked up on the engines first. */
  const routeFor = async (request: FastifyRequest, databaseId?: string, branchId?: string): Promise<Route> => {
    try {
      return routeOf(request, databaseId, branchId);
    } catch (err) {
      if (!(err instanceof BraidError && err.code === 'branch_not_found')) throw err;
      // a look-up already under way may have asked before the branch existed:
      // when it does not find it, ask once more
      const joined = discovering !== undefined;
      for (const last of joined ? [false, true] : [true]) {
        discovering ??= listEngines(request).then(() => undefined).finally(() => (discovering = undefined));
        await discovering;
        try {
          return routeOf(request, databaseId, branchId);
        } catch (again) {
          if (last) throw again;
        }
      }
      throw err;
    }
  };

  /** Request headers toward the engine: client headers minus hop-by-hop ones, with the route injected. */
  const upstreamHeaders = (request: FastifyRequest, route: Route): Record<string, string | string[]> => {
    const out: Record<string, string | string[]> = {};
    const named = connectionTokens(request.headers.connection);
    for (const [name, value] of Object.entries(request.headers)) {
      if (value === undefined || HOP_BY_HOP.has(name) || named.has(name)) continue;
      out[name] = value;
    }
    out[DATABASE_HEADER] = route.upstreamDatabaseId;
    out[BRANCH_HEADER] = route.upstreamBranchId;
    // who the client is, for the engine's idempotency scoping when every
    // client reaches it with the one engine token (never the token itself)
    const auth = tokenOf.get(request);
    if (auth) out[PRINCIPAL_HEADER] = tokenId(auth.token);
    else delete out[PRINCIPAL_HEADER];
    if (engineAuthorization) out.authorization = engineAuthorization;
    out[REQUEST_ID_HEADER] = request.id;
    const forwarded = headerValue(request.headers['x-forwarded-for']);
    out['x-forwarded-for'] = forwarded ? `${forwarded}, ${request.ip}` : request.ip;
    return out;
  };

  /** Sends an engine's non-200 JSON answer back as is (or 502 when it is not JSON). */
  const relayError = (reply: FastifyReply, route: Route, res: { status: number; body: unknown }) => {
    if (isObject(res.body)) return reply.status(res.status).send(res.body);
    throw new BraidError('upstream_error', `engine ${route.endpoint} answered ${res.status} without a JSON body`);
  };

  const getFromEngine = async (up: Upstream, route: Route, path: string, headers: Record<string, string | string[]>) => {
    delete headers['content-length'];
    try {
      return await up.getJson(path, headers);
    } catch (err) {
      void up.check();
      throw upstreamFailure(route.endpoint, err);
    }
  };

  app.get('/v1/metrics/public-safe', {
    schema: { response: { 200: MetricsResponse } },
  }, async (request, reply) => {
    const route = await routeFor(request);
    const up = upstreamOf(route);
    const res = await getFromEngine(up, route, '/v1/metrics/public-safe', upstreamHeaders(request, route));
    if (res.status !== 200 || !isObject(res.body)) return relayError(reply, route, res);
    return {
      ...res.body,
      gateway: true,
      rate_limit_enabled: limiterOn,
      rate_limit_requests: limiterOn ? config.rateLimitMax : 0,
      requests: state.requests,
      service: GATEWAY_SERVICE_NAME,
    };
  });

  app.get('/v1/branches', {
    schema: { response: { 200: BranchesResponse } },
  }, async (request) => {
    const perEndpoint = await listEngines(request);
    const branches = router.all().map((route) => {
      const listed = perEndpoint.get(route.endpoint);
      const engine = listed?.get(`${route.upstreamDatabaseId}\u0000${route.upstreamBranchId}`);
      return {
        branch_id: route.branch_id,
        database_id: route.database_id,
        endpoint: route.endpoint,
        latest_epoch: num(engine?.latest_epoch),
        parent_branch_id: typeof engine?.parent_branch_id === 'string' ? engine.parent_branch_id : null,
        // the engine's state; "missing" when the engine has no such branch, "unreachable" when it did not answer
        state: engine ? String(engine.state) : listed ? 'missing' : 'unreachable',
      };
    });
    return { branches, gateway: true };
  });

  app.get('/v1/ready', {
    schema: { response: { 200: ReadyResponse, 503: ReadyResponse } },
  }, async (request, reply) => {
    const route = await routeFor(request);
    const up = upstreamOf(route);
    // draining: not ready, whatever the engine says (its last known state, no new check)
    const r = state.closing
      ? { ...up.readiness, ready: false, error: 'gateway is shutting down', code: 'shutting_down' }
      : await up.check(route, engineAuthorization ?? headerValue(request.headers.authorization));
    const body = r.body ?? {};
    reply.status(r.ready ? 200 : 503);
    return {
      catalog_databases: router.databaseCount,
      durable_epoch: num(body.durable_epoch),
      engine_health_checked: r.checked,
      engine_status_code: r.statusCode,
      engine_url: route.endpoint,
      error: r.error,
      latest_epoch: num(body.latest_epoch),
      metered_requests: state.metered,
      ok: r.ready,
      ready: r.ready,
      recovery_state: typeof body.recovery_state === 'string' ? body.recovery_state : r.reachable ? 'unknown' : 'unreachable',
      service: GATEWAY_SERVICE_NAME,
      ...(r.ready ? {} : { code: r.code ?? 'not_ready' }),
    };
  });

  // The engine's OpenAPI document, declaring the bearer token every request
  // through the gateway needs (an engine without tokens does not declare it).
  app.get('/v1/openapi.json', async (request, reply) => {
    const route = await routeFor(request);
    const res = await getFromEngine(upstreamOf(route), route, '/v1/openapi.json', upstreamHeaders(request, route));
    if (res.status !== 200 || !isObject(res.body)) return relayError(reply, route, res);
    return securedDocument(res.body);
  });

  /** Everything else goes to the engine: status, headers and body stream back. */
  const proxy = async (request: FastifyRequest, reply: FastifyReply) => {
    const raw = request.raw;
    const pathname = request.url.split('?', 1)[0];
    // the gateway routes a put by its body: a body it cannot read would pass
    // unrouted, so compressed bodies are refused on every route
    const encoding = request.headers['content-encoding'];
    if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
      throw new BraidError('unsupported_content_encoding', `Content-Encoding ${encoding} is not accepted: send the body uncompressed`);
    }
    let route: Route;
    let body: Buffer | IncomingMessage | undefined;
    const buffered = Buffer.isBuffer(request.body) ? request.body : undefined;
    if (request.method === 'POST' && pathname === PUT_PATH) {
      const bytes = buffered ?? await readBody(raw, config.bodyLimitBytes);
      const parsed = parsePutBody(bytes);
      // the body may name the branch (SDKs inject it); it must agree with the headers
      for (const [named, header, what] of [[parsed?.databaseId, DATABASE_HEADER, 'database_id'], [parsed?.branchId, BRANCH_HEADER, 'branch_id']] as const) {
        const sent = headerValue(request.headers[header]);
        if (named !== undefined && sent !== undefined && named !== sent) {
          throw new BraidError('branch_mismatch', `body ${what} "${named}" disagrees with the request's ${header} header "${sent}"`);
        }
      }
      route = await routeFor(request, parsed?.databaseId, parsed?.branchId);
      body = parsed ? parsed.rewrite(route) : bytes;
    } else if (request.method === 'POST' && pathname === GRAPHQL_PATH) {
      // a GraphQL document needs the scope of what it runs
      const bytes = buffered ?? await readBody(raw, config.bodyLimitBytes);
      requireScope(tokenOf.get(request)!.scope, graphqlDocumentScope(bytes), 'this GraphQL operation');
      route = await routeFor(request);
      body = bytes;
    } else {
      route = await routeFor(request);
      body = buffered ?? (hasBody(request.headers) ? raw : undefined);
    }
    const up = upstreamOf(route);
    if (up.notReady) throw new BraidError('not_ready', up.readiness.error);

    const headers = upstreamHeaders(request, route);
    if (Buffer.isBuffer(body)) headers['content-length'] = String(body.length);
    else if (body === undefined) delete headers['content-length'];

    let res: Dispatcher.ResponseData;
    const sent = process.hrtime.bigint();
    try {
      res = await up.request({ method: request.method as Dispatcher.HttpMethod, path: request.url, headers, body });
    } catch (err) {
      void up.check();
      const failure = upstreamFailure(route.endpoint, err);
      upstreamErrors.inc({ engine: route.endpoint, code: failure.code });
      throw failure;
    }
    upstreamDuration.observe({ engine: route.endpoint, status: String(res.statusCode) }, Number(process.hrtime.bigint() - sent) / 1e9);
    if (res.statusCode === 503) void up.check();
    // Small answers with a known length are read first and sent in one write;
    // anything else streams through.
    let payload: Buffer | Dispatcher.ResponseData['body'] = res.body;
    const length = Number(res.headers['content-length']);
    if (request.method !== 'HEAD' && Number.isInteger(length) && length <= SMALL_BODY_BYTES) {
      try {
        payload = Buffer.from(await res.body.arrayBuffer());
      } catch (err) {
        void up.check();
        throw upstreamFailure(route.endpoint, err);
      }
    }
    reply.status(res.statusCode);
    const named = connectionTokens(res.headers.connection);
    for (const [name, value] of Object.entries(res.headers)) {
      if (value !== undefined && !RESPONSE_SKIP.has(name) && !named.has(name)) reply.header(name, value);
    }
    // Every Braid body is JSON: label an unlabelled one so, rather than fastify's octet-stream default.
    if (res.headers['content-type'] === undefined && Buffer.isBuffer(payload) && payload.length > 0) {
      reply.header('content-type', 'application/json; charset=utf-8');
    }
    return reply.send(payload);
  };

  app.get('/metrics', async (_request, reply) => reply.type(registry.contentType).send(await registry.metrics()));
  // the same console as the engine's, served here (not proxied): it needs no engine, and with a
  // catalog of several engines there is no one engine to ask for it
  await app.register(consoleRoutes, { routeConfig: { rateLimit: false } });
  app.all('/*', proxy);
  app.setNotFoundHandler(limiterOn ? { preHandler: app.rateLimit() } : {}, proxy);

  return app;
}
