/**
 * The gateway's Prometheus metrics (GET /metrics, docs/gateway.md "Metrics"):
 * requests by route and status, proxied requests' time to the engine's
 * answer and failures by engine, each engine's readiness. Every path is
 * proxied, so the route label is the path when it is one Braid has, else
 * "other".
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import client from 'prom-client';
import { HTTP_BUCKETS, createRegistry, instrumentHttp } from '../prometheus.js';
import { CONSOLE_PATH, isConsoleRequest } from '../routes/console.js';
import type { Engines } from './engines.js';
import { API_METHODS, pathOf } from './routing.js';

const PREFIX = 'braid_gateway_';

export interface GatewayMetrics {
  registry: client.Registry;
  /** Proxied requests: seconds until the engine's status line and headers, by engine and status. */
  upstreamDuration: client.Histogram<'engine' | 'status'>;
  /** Proxied requests the engine did not answer, by engine and error code. */
  upstreamErrors: client.Counter<'engine' | 'code'>;
}

/** A request's route, as metrics and the request log name it: a path Braid serves, `/console`, else `other`. */
export function routeOf(request: FastifyRequest): string {
  if (isConsoleRequest(request)) return CONSOLE_PATH;
  const pathname = pathOf(request.url);
  return API_METHODS.has(pathname) ? pathname : 'other';
}

/** Instruments `app`'s requests; call it first, so refused requests (401, 403, 429) are counted too. */
export function gatewayMetrics(app: FastifyInstance, engines: Engines): GatewayMetrics {
  const registry = createRegistry(PREFIX);
  instrumentHttp(app, registry, PREFIX, routeOf, 'other');
  const upstreamDuration = new client.Histogram({
    name: `${PREFIX}upstream_request_duration_seconds`,
    help: 'Proxied requests: time until the engine answered with its status line and headers, by engine and status',
    labelNames: ['engine', 'status'] as const,
    buckets: HTTP_BUCKETS,
    registers: [registry],
  });
  const upstreamErrors = new client.Counter({
    name: `${PREFIX}upstream_errors_total`,
    help: 'Proxied requests the engine did not answer, by engine and code (upstream_unreachable, upstream_error)',
    labelNames: ['engine', 'code'] as const,
    registers: [registry],
  });
  // read at each scrape; registering it is all it needs
  new client.Gauge({
    name: `${PREFIX}engine_ready`,
    help: '1 when the last readiness check of the engine passed, else 0',
    labelNames: ['engine'],
    registers: [registry],
    collect() {
      for (const [endpoint, up] of engines.upstreams) this.set({ engine: endpoint }, up.readiness.ready ? 1 : 0);
    },
  });
  return { registry, upstreamDuration, upstreamErrors };
}
