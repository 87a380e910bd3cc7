/**
 * `GET /metrics`: Prometheus text format (prom-client), for scraping. Every
 * metric is listed in docs/operations.md, "Prometheus metrics".
 *
 * - HTTP: requests and their latency per method, route pattern and status,
 *   and the requests in flight. The route label is the route's pattern
 *   (`/v1/records/put`), or `unmatched` for a path no route has, so label
 *   sets stay bounded whatever clients send.
 * - Engine: per branch (database, branch: a handful, never tenants or
 *   records), read from the engine at scrape time: epochs, records and
 *   versions, indexes, text segments, receipts, indexer state and failures.
 * - The Node process: prom-client's default metrics (resident memory, heap,
 *   event-loop lag, CPU), prefixed `braid_`.
 */
import client from 'prom-client';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Braid } from './engine.js';

export const HTTP_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const INDEXER_STATES = ['running', 'failing', 'stopped'] as const;

/** A registry with prom-client's default process metrics under `prefix`. */
export function createRegistry(prefix: string): client.Registry {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry, prefix });
  return registry;
}

/**
 * Counts and times every request of `app` (its hooks must not be
 * encapsulated): `<prefix>http_requests_total`,
 * `<prefix>http_request_duration_seconds` and `<prefix>http_requests_in_flight`.
 * `routeOf` names the route with a bounded label.
 */
export function instrumentHttp(app: FastifyInstance, registry: client.Registry, prefix: string, routeOf: (request: FastifyRequest) => string): void {
  const registers = [registry];
  const labelNames = ['method', 'route', 'status'] as const;
  const requests = new client.Counter({ name: `${prefix}http_requests_total`, help: 'HTTP requests answered, by method, route and status', labelNames, registers });
  const duration = new client.Histogram({
    name: `${prefix}http_request_duration_seconds`,
    help: 'Time from receiving a request to sending its response, by method, route and status',
    labelNames,
    buckets: HTTP_BUCKETS,
    registers,
  });
  const inFlight = new client.Gauge({ name: `${prefix}http_requests_in_flight`, help: 'HTTP requests received and not yet answered', registers });
  const started = new WeakMap<object, bigint>();
  app.addHook('onRequest', async (request) => {
    started.set(request, process.hrtime.bigint());
    inFlight.inc();
  });
  app.addHook('onResponse', async (request, reply) => {
    const t = started.get(request);
    if (t === undefined) return;
    started.delete(request);
    inFlight.dec();
    const labels = { method: request.method, route: routeOf(request), status: String(reply.statusCode) };
    requests.inc(labels);
    duration.observe(labels, Number(process.hrtime.bigint() - t) / 1e9);
  });
}

export async function prometheusRoutes(app: FastifyInstance, options: { engine: Braid }): Promise<void> {
  const { engine } = options;
  const registry = createRegistry('braid_');
  const registers = [registry];
  instrumentHttp(app, registry, 'braid_', (request) => request.routeOptions.url ?? 'unmatched');

  const branch = ['database', 'branch'] as const;
  const gauge = (name: string, help: string, extra: readonly string[] = []) =>
    new client.Gauge({ name, help, labelNames: [...branch, ...extra], registers });
  const engineGauges = {
    latest: gauge('braid_branch_latest_epoch', 'Latest committed epoch of the branch'),
    durable: gauge('braid_branch_durable_epoch', 'Latest epoch on disk (fsynced) of the branch'),
    records: gauge('braid_branch_records', 'Records (live keys) of the branch'),
    versions: gauge('braid_branch_versions', 'Record versions the branch keeps'),
    tables: gauge('braid_branch_tables', 'Tables declared or written in the branch'),
    indexes: gauge('braid_branch_indexes', 'Indexes of the branch (tenant masks, text scopes, vector and scalar columns)'),
    segments: gauge('braid_branch_text_segments', 'Tantivy segments of the branch text index'),
    receipts: gauge('braid_branch_idempotency_receipts', 'Idempotency receipts held in memory'),
    failed: gauge('braid_branch_index_failed_features', 'Features (row x indexed column) an index could not take since the engine started'),
    indexer: gauge('braid_branch_indexer_state', '1 for the state the branch indexer is in (running, failing, stopped), else 0', ['state']),
    recovered: gauge('braid_branch_recovered_truncated_bytes', 'Bytes of a torn log tail cut at the last open'),
  };

  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    for (const g of Object.values(engineGauges)) g.reset();
    for (const b of await engine.branches()) {
      const labels = { database: b.database_id, branch: b.branch_id };
      const m = engine.metrics({ databaseId: b.database_id, branchId: b.branch_id });
      engineGauges.latest.set(labels, m.latest_epoch);
      engineGauges.durable.set(labels, m.durable_epoch);
      engineGauges.records.set(labels, m.record_count);
      engineGauges.versions.set(labels, m.version_count);
      engineGauges.tables.set(labels, m.schema_count);
      engineGauges.indexes.set(labels, m.index_count);
      engineGauges.segments.set(labels, m.segment_count);
      engineGauges.receipts.set(labels, m.receipt_count);
      engineGauges.failed.set(labels, m.failed_feature_count);
      engineGauges.recovered.set(labels, m.recovered_truncated_bytes);
      for (const state of INDEXER_STATES) engineGauges.indexer.set({ ...labels, state }, m.indexer_state === state ? 1 : 0);
    }
    return reply.type(registry.contentType).send(await registry.metrics());
  });
}
