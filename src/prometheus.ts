/**
 * `GET /metrics`: Prometheus text format (prom-client), for scraping. Every
 * metric is listed in docs/operations.md, "Prometheus metrics".
 *
 * - HTTP: requests and their latency per method, route pattern and status,
 *   and the requests in flight. The route label is the route's pattern
 *   (`/v1/records/put`; src/route-label.ts), or `unmatched` for a path no route has, so label
 *   sets stay bounded whatever clients send.
 * - Engine: per branch (database, branch: a handful, never tenants or
 *   records), read from the engine at scrape time: epochs, records and
 *   versions, indexes, text segments, receipts, indexer state and failures;
 *   and what the engine counts itself: WAL bytes, the fsync and group-commit
 *   histograms, checkpoints, index lag, vector graph sizes and memory
 *   estimates by structure. Other labels (`state`, `structure`) take a fixed
 *   set of values.
 * - The Node process: prom-client's default metrics (resident memory, heap,
 *   event-loop lag, CPU), prefixed `braid_`.
 */
import { routeLabel } from './route-label.js';
import { onRawAnswer, unansweredStatus } from './http-errors.js';
import client from 'prom-client';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Engine, EngineHistogram, EngineMetrics } from './native/engine.js';

export const HTTP_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const INDEXER_STATES = ['running', 'failing', 'stopped'] as const;

type Labels = Record<string, string>;

/** One line of a metric's exposition: its labels and value (`metricName` for a histogram's parts). */
interface Sample {
  metricName?: string;
  labels: Labels;
  value: number;
}

/** A histogram's lines (`_bucket` per bound and `+Inf`, `_sum`, `_count`), as prom-client writes its own. */
function pushHistogram(values: Sample[], name: string, labels: Labels, h: { bounds: number[]; cumulative: number[]; count: number; sum: number }): void {
  h.bounds.forEach((le, i) => {
    values.push({ metricName: `${name}_bucket`, labels: { ...labels, le: String(le) }, value: h.cumulative[i]! });
  });
  values.push({ metricName: `${name}_bucket`, labels: { ...labels, le: '+Inf' }, value: h.count });
  values.push({ metricName: `${name}_sum`, labels, value: h.sum });
  values.push({ metricName: `${name}_count`, labels, value: h.count });
}

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
 * `routeOf` names the route with a bounded label, `noRoute` the answers
 * written before there is a request to route (src/http-errors.ts, onRawAnswer).
 */
export function instrumentHttp(app: FastifyInstance, registry: client.Registry, prefix: string, routeOf: (request: FastifyRequest) => string, noRoute = 'unmatched'): void {
  const registers = [registry];
  const requests = new RequestSeries(registry, prefix);
  // read at scrape time: no gauge update per request
  let inFlight = 0;
  new client.Gauge({
    name: `${prefix}http_requests_in_flight`,
    help: 'HTTP requests received and not yet answered',
    registers,
    collect() {
      this.set(inFlight);
    },
  });
  app.addHook('onRequest', (request, reply, done) => {
    inFlight += 1;
    // a response closes whether it was sent or its connection went first:
    // fastify's onResponse runs only for one that was sent, and a client
    // that left (or a request cut off by the request timeout) had been in
    // flight for good (found by a black-box review)
    reply.raw.once('close', () => {
      inFlight -= 1;
      if (!reply.raw.writableFinished) requests.observe(request.method, routeOf(request), unansweredStatus(request.raw.socket), reply.elapsedTime / 1000);
    });
    done();
  });
  app.addHook('onResponse', (request, reply, done) => {
    // fastify's own clock, started as the request arrived
    requests.observe(request.method, routeOf(request), reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
  // answered with no request of fastify's (unparseable, 431, CONNECT, Expect): no route, no clock
  onRawAnswer(app.server, (method, status) => requests.observe(method, noRoute, status, 0));
  countDroppedConnections(app, registers, prefix);
}

/** Longest a dropped connection waits for its warning: one line for every burst, not one a connection. */
const DROP_WARNING_MS = 10_000;

/**
 * Connections closed as they were accepted because `BRAID_MAX_CONNECTIONS`
 * were open (Node's `drop` event): counted, and said at warn at most once
 * every 10 s with how many and the cap. A client had seen only resets, and
 * the server no trace of them (found by a black-box review; PostgreSQL
 * answers "too many clients already" and logs it).
 */
function countDroppedConnections(app: FastifyInstance, registers: client.Registry[], prefix: string): void {
  const dropped = new client.Counter({
    name: `${prefix}http_connections_dropped_total`,
    help: 'client connections closed as they were accepted, because the connection cap (BRAID_MAX_CONNECTIONS) was reached',
    registers,
  });
  let unsaid = 0;
  let warned = 0;
  app.server.on('drop', () => {
    dropped.inc();
    unsaid += 1;
    const now = Date.now();
    if (now - warned < DROP_WARNING_MS) return;
    app.log.warn({ dropped: unsaid, max_connections: app.server.maxConnections }, 'connections dropped: the connection cap was reached');
    unsaid = 0;
    warned = now;
  });
}

/** One (method, route, status)'s count and latency histogram. */
interface RequestTally {
  labels: Labels;
  count: number;
  sum: number;
  /** Requests per bucket of HTTP_BUCKETS (not cumulative), then those above the last. */
  buckets: Float64Array;
}

/**
 * `<prefix>http_requests_total` and `<prefix>http_request_duration_seconds`,
 * counted in plain numbers per (method, route, status) and handed to the
 * registry at scrape time, in the format of prom-client's own counter and
 * histogram. prom-client's classes check and hash their labels on every
 * increment, a child's included: a few microseconds a request, paid on the
 * server's one JavaScript thread (bench/JOURNAL.md, "The twenty-third
 * session").
 */
class RequestSeries {
  private readonly tallies = new Map<string, RequestTally>();

  constructor(registry: client.Registry, prefix: string) {
    const metric = (name: string, help: string, type: 'counter' | 'histogram', values: () => Sample[]) => {
      // the registry formats any metric with a name, help, type and get(); its typings name only prom-client's classes
      registry.registerMetric({ name, help, type, aggregator: 'sum', get: async () => ({ name, help, type, aggregator: 'sum', values: values() }) } as unknown as client.Metric);
    };
    const total = `${prefix}http_requests_total`;
    metric(total, 'HTTP requests answered, by method, route and status', 'counter', () =>
      [...this.tallies.values()].map((t) => ({ labels: t.labels, value: t.count })));
    const duration = `${prefix}http_request_duration_seconds`;
    metric(duration, 'Time from receiving a request to sending its response, by method, route and status', 'histogram', () => {
      const values: Sample[] = [];
      for (const t of this.tallies.values()) {
        let below = 0;
        const cumulative = HTTP_BUCKETS.map((_, i) => (below += t.buckets[i]!));
        pushHistogram(values, duration, t.labels, { bounds: HTTP_BUCKETS, cumulative, count: t.count, sum: t.sum });
      }
      return values;
    });
  }

  observe(method: string, route: string, status: number, seconds: number): void {
    const key = `${method} ${route} ${status}`;
    let t = this.tallies.get(key);
    if (t === undefined) {
      t = { labels: { method, route, status: String(status) }, count: 0, sum: 0, buckets: new Float64Array(HTTP_BUCKETS.length + 1) };
      this.tallies.set(key, t);
    }
    t.count += 1;
    t.sum += seconds;
    let i = 0;
    while (i < HTTP_BUCKETS.length && seconds > HTTP_BUCKETS[i]!) i += 1;
    t.buckets[i]! += 1;
  }
}

/**
 * A counter or histogram counted inside the engine. prom-client's own
 * classes can only be incremented or observed here, not set, so this hands
 * the registry the samples read at scrape time (a histogram's `_bucket`,
 * `_sum` and `_count`) and prom-client formats them like its own.
 */
class EngineSeries {
  readonly aggregator = 'sum';
  private values: Sample[] = [];

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'counter' | 'histogram',
    registry: client.Registry,
  ) {
    // the registry formats any metric with a name, help, type and get(); its typings name only prom-client's classes
    registry.registerMetric(this as unknown as client.Metric);
  }

  reset(): void {
    this.values = [];
  }

  add(labels: Labels, value: number): void {
    this.values.push({ labels, value });
  }

  addHistogram(labels: Labels, h: EngineHistogram): void {
    pushHistogram(this.values, this.name, labels, h);
  }

  async get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: Sample[] }> {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: this.values };
  }
}

const MEMORY_STRUCTURES = ['rows', 'keys', 'vectors', 'vector_graphs', 'receipts', 'text_row_maps'] as const;

export async function prometheusRoutes(app: FastifyInstance, options: { engine: Engine }): Promise<void> {
  const { engine } = options;
  const registry = createRegistry('braid_');
  const registers = [registry];
  instrumentHttp(app, registry, 'braid_', routeLabel);

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
    walSegment: gauge('braid_branch_wal_segment_bytes', 'Bytes of the WAL segment being written (a checkpoint starts a new one)'),
    textLag: gauge('braid_branch_text_index_lag_rows', 'Rows committed but not yet searchable in the text index (covered by the hot overlay meanwhile)'),
    vectorLag: gauge('braid_branch_vector_index_lag_rows', 'Rows committed but not yet in the vector graphs (covered by an exact scan meanwhile)'),
    graphs: gauge('braid_branch_vector_graphs', 'HNSW graphs of the branch (one per vector column)'),
    graphPoints: gauge('braid_branch_vector_graph_points', 'Points in all HNSW graphs of the branch'),
    graphPointsMax: gauge('braid_branch_vector_graph_points_max', 'Points in the largest HNSW graph of the branch'),
    checkpointAge: gauge('braid_branch_checkpoint_age_seconds', 'Seconds since the newest checkpoint was written; absent while the branch has none'),
    checkpointTime: gauge('braid_branch_last_checkpoint_timestamp_seconds', 'Unix time the newest checkpoint was written; absent while the branch has none'),
    checkpointBytes: gauge('braid_branch_last_checkpoint_bytes', 'Image bytes of the newest checkpoint taken since the engine started'),
    horizon: gauge('braid_branch_retention_horizon_epoch', 'Reads below this epoch are refused: retention removed what only they could see (0: all history is readable)'),
    purged: gauge('braid_branch_retention_purged_versions', 'Record versions retention removed from the branch (memory, indexes and disk)'),
    memory: gauge(
      'braid_branch_memory_bytes',
      'Estimated heap bytes of the branch state by structure (rows, keys, vectors, vector_graphs, receipts, text_row_maps): element counts x sizes, not measured; vector_graphs counts the nodes and neighbour lists of the HNSW graphs (they hold no vectors); text_row_maps the row-to-document pairs of merged text index segments',
      ['structure'],
    ),
  };
  const series = (name: string, help: string, type: 'counter' | 'histogram') => new EngineSeries(name, help, type, registry);
  const engineSeries = {
    walAppended: series('braid_branch_wal_appended_bytes_total', 'WAL bytes appended and fsynced since the engine started', 'counter'),
    fsync: series('braid_branch_wal_fsync_duration_seconds', 'Duration of the committer\'s fsync of the WAL, one per group commit', 'histogram'),
    group: series('braid_branch_group_commit_writes', 'Write requests that shared one WAL fsync (group commit)', 'histogram'),
    checkpoints: series('braid_branch_checkpoints_total', 'Checkpoints taken since the engine started', 'counter'),
    checkpointFailures: series('braid_branch_checkpoint_failures_total', 'Checkpoints that failed since the engine started (retried; the WAL keeps everything)', 'counter'),
    checkpointDuration: series('braid_branch_checkpoint_duration_seconds', 'Duration of a checkpoint', 'histogram'),
    compacted: series('braid_branch_retention_compacted_files_total', 'Record files retention compacted since the engine started', 'counter'),
    reclaimed: series('braid_branch_retention_reclaimed_bytes_total', 'Bytes of record files retention freed since the engine started', 'counter'),
    compactedVectors: series('braid_branch_retention_compacted_vectors_total', 'Vectors of removed versions dropped by rebuilding their column since the engine started', 'counter'),
    textDeletes: series('braid_branch_retention_text_deletes_total', 'Removed versions whose text documents were deleted from the text index since the engine started', 'counter'),
    retentionFailures: series('braid_branch_retention_failures_total', 'Retention passes whose compaction failed since the engine started (the files stay; retried at the next checkpoint)', 'counter'),
  };

  /** The figures the engine counts itself. */
  const setCounted = (labels: Labels, m: EngineMetrics): void => {
    engineGauges.walSegment.set(labels, m.wal.segment_bytes);
    engineGauges.textLag.set(labels, m.index_lag.text_rows);
    engineGauges.vectorLag.set(labels, m.index_lag.vector_rows);
    engineGauges.graphs.set(labels, m.vector_graphs.graphs);
    engineGauges.graphPoints.set(labels, m.vector_graphs.points);
    engineGauges.graphPointsMax.set(labels, m.vector_graphs.max_points);
    if (m.checkpoints.age_seconds !== null) engineGauges.checkpointAge.set(labels, m.checkpoints.age_seconds);
    if (m.checkpoints.last_unix_seconds !== null) engineGauges.checkpointTime.set(labels, m.checkpoints.last_unix_seconds);
    engineGauges.checkpointBytes.set(labels, m.checkpoints.last_bytes);
    engineGauges.horizon.set(labels, m.retention.horizon_epoch);
    engineGauges.purged.set(labels, m.retention.purged_versions);
    for (const structure of MEMORY_STRUCTURES) engineGauges.memory.set({ ...labels, structure }, m.memory[structure]);
    engineSeries.walAppended.add(labels, m.wal.appended_bytes);
    engineSeries.fsync.addHistogram(labels, m.wal.fsync_seconds);
    engineSeries.group.addHistogram(labels, m.wal.group_commit_writes);
    engineSeries.checkpoints.add(labels, m.checkpoints.count);
    engineSeries.checkpointFailures.add(labels, m.checkpoints.failures);
    engineSeries.checkpointDuration.addHistogram(labels, m.checkpoints.duration_seconds);
    engineSeries.compacted.add(labels, m.retention.compacted_files);
    engineSeries.reclaimed.add(labels, m.retention.reclaimed_bytes);
    engineSeries.compactedVectors.add(labels, m.retention.compacted_vectors);
    engineSeries.textDeletes.add(labels, m.retention.text_deletes);
    engineSeries.retentionFailures.add(labels, m.retention.failures);
  };

  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    const branches = await engine.branches('embedded');
    // from here to the registry's read nothing awaits, so concurrent scrapes do not mix
    for (const g of Object.values(engineGauges)) g.reset();
    for (const s of Object.values(engineSeries)) s.reset();
    for (const b of branches) {
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
      setCounted(labels, m);
    }
    return reply.type(registry.contentType).send(await registry.metrics());
  });
}
