/**
 * The routes the gateway answers itself, from what its engines say:
 * metrics (route 12), branches (8) across every engine, readiness (13), the
 * OpenAPI document with the gateway's bearer security, and its own
 * Prometheus metrics.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { BraidError } from '../errors.js';
import { compile } from '../validation.js';
import { securedDocument } from '../openapi.js';
import { BranchesResponse, MetricsResponse, ReadyResponse } from '../schemas/ops.js';
import { isObject, listedKey, type Engines } from './engines.js';
import type { GatewayMetrics } from './metrics.js';
import { headerValue, type Route } from './routing.js';

export const GATEWAY_SERVICE_NAME = 'braid-gateway';

export interface OpsOptions {
  metrics: GatewayMetrics;
}

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);

/** Sends an engine's non-200 JSON answer back as is (or 502 when it is not JSON). */
function relayError(reply: FastifyReply, route: Route, res: { status: number; body: unknown }) {
  if (isObject(res.body)) return reply.status(res.status).send(res.body);
  throw new BraidError('upstream_error', `engine ${route.endpoint} answered ${res.status} without a JSON body`);
}

/** The readiness of a branch neither the catalog nor its engines have: no engine was asked. */
function unroutedReadiness(err: BraidError, catalogDatabases: number, metered: number) {
  return {
    catalog_databases: catalogDatabases,
    durable_epoch: 0,
    engine_health_checked: false,
    engine_status_code: 0,
    engine_url: '',
    error: err.message,
    latest_epoch: 0,
    metered_requests: metered,
    ok: false,
    ready: false,
    recovery_state: 'unknown',
    service: GATEWAY_SERVICE_NAME,
    code: err.code,
  };
}

export async function gatewayOpsRoutes(app: FastifyInstance, options: OpsOptions): Promise<void> {
  const state = app.gateway;
  const { config, engines } = state;

  app.get('/v1/metrics/public-safe', {
    schema: { response: { 200: MetricsResponse } },
  }, async (request, reply) => {
    const route = await engines.route(request);
    const res = await engines.getJson(request, route, '/v1/metrics/public-safe');
    if (res.status !== 200 || !isObject(res.body)) return relayError(reply, route, res);
    const metrics = {
      ...res.body,
      gateway: true,
      rate_limit_enabled: state.limiter,
      rate_limit_requests: state.limiter ? config.rateLimitMax : 0,
      requests: state.requests,
      service: GATEWAY_SERVICE_NAME,
    };
    // an engine's answer out of shape is the engine's failure (502), not the gateway's own 500
    // when its serializer meets it (found by a black-box review)
    const shaped = compile(MetricsResponse);
    if (!shaped(metrics)) {
      const first = shaped.errors?.[0];
      throw new BraidError('upstream_error', `engine ${route.endpoint} answered its metrics out of shape (${first ? `${first.instancePath || 'the body'} ${first.message}` : 'unknown'})`);
    }
    return metrics;
  });

  app.get('/v1/branches', {
    schema: { response: { 200: BranchesResponse } },
  }, async (request) => ({ branches: await catalogBranches(engines, request), gateway: true }));

  app.get('/v1/ready', {
    schema: { response: { 200: ReadyResponse, 503: ReadyResponse } },
  }, async (request, reply) => {
    let route: Route;
    try {
      route = await engines.route(request);
    } catch (err) {
      if (!(err instanceof BraidError && err.code === 'branch_not_found')) throw err;
      // as the engine answers a branch it lacks: not ready, with the readiness body and the code
      return reply.status(503).send(unroutedReadiness(err, engines.router.databaseCount, state.metered));
    }
    const up = engines.upstreamOf(route);
    // draining: not ready, whatever the engine says (its last known state, no new check)
    const r = state.closing
      ? { ...up.readiness, ready: false, error: 'gateway is shutting down', code: 'shutting_down' }
      : await up.check(route, engines.authorization ?? headerValue(request.headers.authorization));
    const body = r.body ?? {};
    reply.status(r.ready ? 200 : 503);
    return {
      catalog_databases: engines.router.databaseCount,
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
    const route = await engines.route(request);
    const res = await engines.getJson(request, route, '/v1/openapi.json');
    if (res.status !== 200 || !isObject(res.body)) return relayError(reply, route, res);
    return securedDocument(res.body);
  });

  const { registry } = options.metrics;
  app.get('/metrics', async (_request, reply) => reply.type(registry.contentType).send(await registry.metrics()));
}

/**
 * The branches a gateway's clients may reach, by their catalog names, with
 * what their engines say of them: GET /v1/branches and GraphQL `branches`
 * (graphql-branches.ts) through the gateway.
 */
export async function catalogBranches(engines: Engines, request: FastifyRequest) {
  const perEndpoint = await engines.list(request);
  return engines.router.all().map((route) => {
    const listed = perEndpoint.get(route.endpoint);
    const engine = typeof listed === 'object' ? listed.get(listedKey(route.upstreamDatabaseId, route.upstreamBranchId)) : undefined;
    return {
      branch_id: route.branch_id,
      database_id: route.database_id,
      endpoint: route.endpoint,
      latest_epoch: num(engine?.latest_epoch),
      // while the engine does not answer, the parent it last listed (found by a black-box review: every
      // branch read as a root then)
      parent_branch_id: engine ? (typeof engine.parent_branch_id === 'string' ? engine.parent_branch_id : null) : engines.lastParent(route),
      // the engine's state; "missing" when the engine has no such branch, "unreachable" when it did not
      // answer, "error" when it answered without its list (a refused token, for instance)
      state: engine ? String(engine.state) : typeof listed === 'object' ? 'missing' : (listed ?? 'unreachable'),
    };
  });
}
