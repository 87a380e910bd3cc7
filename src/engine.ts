/**
 * The embedded API: Braid in-process, without HTTP. The HTTP routes use this
 * same class, so there is one path to the engine. Every method runs off the
 * JS thread and throws `BraidError` with the same stable codes as the HTTP
 * layer.
 */
import type { Static } from 'typebox';
import { BraidError, isErrorCode } from './errors.js';
import { encodeRequestJson } from './json.js';
import type { HybridExplain as HybridExplainSchema } from './schemas/query.js';
import { loadNative, type NativeEngineHandle } from './native/index.js';
import { parseNativeQuery } from './ql/index.js';
import { checkFieldNames } from './names.js';

export type Fields = Record<string, unknown>;

export interface RecordInput {
  table: string;
  tenant_id: string;
  id: string;
  fields?: Fields;
}

export interface RecordKey {
  table: string;
  tenant_id: string;
  id: string;
}

export interface RecordOutput {
  fields: Fields;
  id: string;
  table: string;
  tenant_id: string;
  version_id: number;
}

export interface BranchRef {
  databaseId?: string;
  branchId?: string;
}

/** What the service asks the engine to store with a keyed write. */
export interface ReceiptDraft {
  key: string;
  body_hash: string;
  status: number;
  body: unknown;
}

export interface WriteTiming {
  queue_ms: number;
  validate_ms: number;
  encode_ms: number;
  wal_fsync_ms: number;
  apply_ms: number;
  group_size: number;
}

export interface Committed {
  epoch: number;
  record_count: number;
  changed: boolean;
  timing: WriteTiming;
}

export type WriteResult = { committed: Committed; replayed?: undefined } | { replayed: { status: number; body: unknown }; committed?: undefined };

export interface HybridQuery {
  table?: string;
  tenant_id?: string;
  text?: string | null;
  text_field?: string | null;
  vector?: number[] | null;
  vector_field?: string | null;
  scalar_eq?: Record<string, unknown>;
  graph_seed?: string | null;
  temporal_as_of?: number | null;
  freshness?: string;
  top_k?: number;
  cursor?: string | null;
  explain?: boolean;
  fusion?: string;
  fusion_weights?: { lexical?: number; vector?: number; relational?: number };
  candidate_budget?: number;
  graph_depth?: number;
  /** The fields each result carries (default every field; `[]` none). */
  return_fields?: string[];
}

export interface ScoreComponents {
  final_score: number;
  freshness_penalty: number | null;
  lexical: number | null;
  relational: number | null;
  vector: number | null;
}

export interface HybridRow {
  fields: Fields;
  record_id: string;
  score: ScoreComponents;
  tenant_id: string;
  version_id: number;
}

/** Every field of the spec's HybridExplain; meanings in docs/query.md. */
export type HybridExplain = Static<typeof HybridExplainSchema>;

export interface QueryResponse {
  explain: HybridExplain;
  next_cursor: string | null;
  results: HybridRow[];
}

export interface ColumnDeclaration {
  type: 'string' | 'text' | 'number' | 'bool' | 'vector' | 'edges' | 'json';
  dim?: number;
  metric?: 'cosine' | 'dot' | 'l2';
  text?: boolean;
  scalar?: boolean;
}

export interface TableSchema {
  name: string;
  columns: Record<string, { type: string; dim?: number; metric?: string; text: boolean; scalar: boolean }>;
}

export interface SnapshotInfo {
  name: string;
  database_id: string;
  branch_id: string;
  epoch: number;
  wal_bytes: number;
  created_ms: number;
}

/**
 * The idempotency key (scoped by the service) and body hash of a keyed
 * snapshot or restore; the engine writes it with what the request creates.
 */
export interface RequestKey {
  key: string;
  body_hash: string;
}

export interface RestoreOutcome {
  restored: boolean;
  source: string;
  target: string;
  epoch: number;
  /** With `verify`: the record as the restored branch holds it, or null. */
  verified?: RecordOutput | null;
  /** True when the same keyed request had already run (its first result). */
  replayed: boolean;
}

export interface BranchSummary {
  branch_id: string;
  database_id: string;
  endpoint: string;
  latest_epoch: number;
  parent_branch_id: string | null;
  state: string;
}

export interface EngineMetrics {
  durable_epoch: number;
  latest_epoch: number;
  index_count: number;
  module_count: number;
  schema_count: number;
  schema_epoch: number;
  segment_count: number;
  record_count: number;
  version_count: number;
  branch_count: number;
  recovery_state: string;
  recovered_truncated_bytes: number;
  /** `running`, `failing` (recent index rounds kept failing) or `stopped`. */
  indexer_state: 'running' | 'failing' | 'stopped';
  /** Features (row x indexed column) an index could not take. */
  failed_feature_count: number;
  /** Idempotency receipts held in memory (expired ones are dropped). */
  receipt_count: number;
  // Counted by the engine for `GET /metrics` (src/prometheus.ts); route 12 does not carry them.
  wal: {
    /** Bytes of the WAL segment being written. */
    segment_bytes: number;
    /** WAL bytes appended and fsynced since the engine opened the branch. */
    appended_bytes: number;
    fsync_seconds: EngineHistogram;
    /** Write requests per fsync group. */
    group_commit_writes: EngineHistogram;
  };
  checkpoints: {
    /** Checkpoints taken since open. */
    count: number;
    failures: number;
    duration_seconds: EngineHistogram;
    last_bytes: number;
    /** When the newest checkpoint was written (also one loaded at open); null while there is none. */
    last_unix_seconds: number | null;
    age_seconds: number | null;
  };
  /** Rows committed but not yet searchable in the text index / the vector graphs. */
  index_lag: { text_rows: number; vector_rows: number };
  vector_graphs: { graphs: number; points: number; max_points: number };
  /** Estimated heap bytes per structure (element counts x sizes; crates/engine/src/storage/stats.rs). */
  memory: { rows: number; keys: number; vectors: number; vector_graphs: number; receipts: number };
}

/** A histogram counted in the engine: cumulative counts per upper bound, as Prometheus reads them. */
export interface EngineHistogram {
  bounds: number[];
  cumulative: number[];
  count: number;
  sum: number;
}

export type CheckpointTrigger = 'wal_bytes' | 'interval' | 'request' | 'snapshot' | 'close';

/**
 * Something a branch did that belongs in the operator's log
 * (crates/engine/src/storage/events.rs; docs/operations.md, "Engine events").
 * Counts, sizes, durations and error messages only, never record contents.
 */
export type EngineEvent = {
  database_id: string;
  branch_id: string;
  /** When the engine recorded it (unix ms). */
  at_ms: number;
  level: 'info' | 'warn' | 'error';
} & (
  | {
      event: 'recovery';
      checkpoint_generation: number | null;
      checkpoint_epoch: number | null;
      segments_replayed: number;
      commits_replayed: number;
      truncated_bytes: number;
      latest_epoch: number;
      index_backlog_rows: number;
      duration_ms: number;
    }
  | { event: 'checkpoint'; trigger: CheckpointTrigger; generation: number; epoch: number; bytes: number; duration_ms: number }
  | { event: 'checkpoint_failed'; trigger: CheckpointTrigger; error: string }
  | { event: 'index_caught_up'; backlog_rows: number; duration_ms: number }
  | { event: 'index_round_failed'; failed_features: number; text_commit_failed: boolean; failed_features_total: number }
  | { event: 'indexer_stopped'; failed_features_total: number }
  | { event: 'storage_failed'; stage: 'wal' | 'apply'; error: string }
  | { event: 'events_dropped'; count: number }
);

/** What `braid doctor` found in one write-ahead log (docs/operations.md). */
export interface LogReport {
  owner: string;
  path: string;
  format_version: number;
  bytes: number;
  frames: number;
  good_end: number;
  end:
    | { kind: 'clean' }
    | { kind: 'torn_tail'; offset: number; bytes: number }
    | { kind: 'corrupt'; offset: number; seq: number; resumes_at: number; frames_after: number };
  action: 'none' | 'salvaged';
  backup: string | null;
}

export interface DoctorReport {
  data_dir: string;
  healthy: boolean;
  logs: LogReport[];
}

/**
 * Inspects every write-ahead log of a data directory. With `salvage`, cuts
 * each corrupt log at its first damaged frame after copying it aside; salvage
 * needs the directory unlocked (no server running on it).
 */
export function doctor(dataDir: string, options: { salvage?: boolean } = {}): DoctorReport {
  return unwrap<DoctorReport>(loadNative().doctor(dataDir, options.salvage ?? false));
}

export interface OpenOptions {
  /** Directory holding the catalog, branches and snapshots. */
  dataDir: string;
  maxVectorDim?: number;
  maxBatch?: number;
  receiptRetentionMs?: number;
  /** Epochs of history kept readable by temporal queries; unlimited when unset. */
  historyEpochs?: number;
  textCommitIntervalMs?: number;
  /** A checkpoint is taken once a branch's WAL segment holds this many bytes (default 64 MiB)... */
  checkpointBytes?: number;
  /** ...or this long after the last one when anything was written (default 5 minutes). */
  checkpointIntervalMs?: number;
}

type Envelope<T> = { ok: T } | { err: { code: string; message: string; index: number | null } };

function route(ref: BranchRef | undefined): { database_id?: string; branch_id?: string } {
  return { database_id: ref?.databaseId, branch_id: ref?.branchId };
}

export function unwrap<T>(raw: string): T {
  const envelope = JSON.parse(raw) as Envelope<T>;
  if ('ok' in envelope) return envelope.ok;
  const { code, message, index } = envelope.err;
  throw new BraidError(isErrorCode(code) ? code : 'internal_error', message, index ?? undefined);
}

export class Braid {
  readonly dataDir: string;
  private readonly native: NativeEngineHandle;
  private closed = false;

  private constructor(native: NativeEngineHandle, dataDir: string) {
    this.native = native;
    this.dataDir = dataDir;
  }

  /** Opens (or creates) a Braid data directory. */
  static open(options: OpenOptions): Braid {
    const config = {
      data_dir: options.dataDir,
      max_vector_dim: options.maxVectorDim,
      max_batch: options.maxBatch,
      receipt_retention_ms: options.receiptRetentionMs,
      history_epochs: options.historyEpochs,
      text_commit_interval_ms: options.textCommitIntervalMs,
      checkpoint_bytes: options.checkpointBytes,
      checkpoint_interval_ms: options.checkpointIntervalMs,
    };
    let native: NativeEngineHandle;
    try {
      native = loadNative().NativeEngine.open(JSON.stringify(config));
    } catch (err) {
      const message = (err as Error).message;
      const code = message.split(':')[0] ?? '';
      throw new BraidError(isErrorCode(code) ? code : 'storage_failure', `cannot open ${options.dataDir}: ${message}`);
    }
    return new Braid(native, options.dataDir);
  }

  private async call<T>(op: string, payload: unknown): Promise<T> {
    if (this.closed) throw new BraidError('shutting_down', 'the engine is closed');
    return unwrap<T>(await this.native.call(op, encodeRequestJson(payload)));
  }

  private callSync<T>(op: string, payload: unknown): T {
    if (this.closed) throw new BraidError('shutting_down', 'the engine is closed');
    return unwrap<T>(this.native.callSync(op, encodeRequestJson(payload)));
  }

  /** Full replacement write of one record; resolves once it is durable. */
  put(record: RecordInput, options?: BranchRef & { receipt?: ReceiptDraft }): Promise<WriteResult> {
    return this.putBatch([record], options);
  }

  /** Atomic write of many records at one epoch. */
  async putBatch(records: RecordInput[], options?: BranchRef & { receipt?: ReceiptDraft }): Promise<WriteResult> {
    checkFieldNames(records);
    return this.call('put', { ...route(options), records, receipt: options?.receipt });
  }

  /** Writes a tombstone version; later reads and newer epochs no longer see the record. */
  delete(key: RecordKey, options?: BranchRef & { receipt?: ReceiptDraft }): Promise<WriteResult> {
    return this.call('delete', { ...route(options), ...key, receipt: options?.receipt });
  }

  /** The visible version of a record, at the latest epoch or at `epoch`. */
  async get(key: RecordKey, options?: BranchRef & { epoch?: number }): Promise<RecordOutput | null> {
    const out = await this.call<{ record: RecordOutput | null }>('get', { ...route(options), ...key, epoch: options?.epoch });
    return out.record;
  }

  /** Runs a hybrid query. */
  query(query: HybridQuery, options?: BranchRef): Promise<QueryResponse> {
    return this.call('query', { ...route(options), query });
  }

  /**
   * Runs a native query language statement (docs/ql.md). A statement that does
   * not parse rejects with `QlSyntaxError` (HTTP: `400 ql_syntax_error`).
   */
  async nativeQuery(text: string, options?: BranchRef): Promise<QueryResponse> {
    if (this.closed) throw new BraidError('shutting_down', 'the engine is closed');
    return this.query(parseNativeQuery(text), options);
  }

  /** Declares a table or adds columns to it. */
  declareTable(table: string, columns: Record<string, ColumnDeclaration>, options?: BranchRef): Promise<WriteResult> {
    return this.call('declare', { ...route(options), table, columns });
  }

  async schemas(options?: BranchRef): Promise<TableSchema[]> {
    return (await this.call<{ tables: TableSchema[] }>('schemas', route(options))).tables;
  }

  /** Takes snapshot `target` of a branch at its latest epoch. */
  /**
   * Takes snapshot `target` of a branch at its latest epoch. With a request
   * key, the key is written with the snapshot and the same request again
   * answers that snapshot (`replayed: true`).
   */
  snapshot(target: string, options?: BranchRef & { requestKey?: RequestKey }): Promise<SnapshotInfo & { replayed: boolean }> {
    return this.call('snapshot', { ...route(options), target, request_key: options?.requestKey });
  }

  async snapshots(): Promise<SnapshotInfo[]> {
    return (await this.call<{ snapshots: SnapshotInfo[] }>('snapshots', {})).snapshots;
  }

  /**
   * Restores snapshot `source` into a new branch `target`; with `verify`,
   * reads that record back from the new branch. Names are checked before
   * anything is created. With a request key, as for `snapshot`.
   */
  restore(source: string, target: string, options?: { verify?: RecordKey; requestKey?: RequestKey }): Promise<RestoreOutcome> {
    return this.call('restore', { source, target, verify: options?.verify, request_key: options?.requestKey });
  }

  async branches(endpoint = 'embedded'): Promise<BranchSummary[]> {
    return (await this.call<{ branches: BranchSummary[] }>('branches', { endpoint })).branches;
  }

  /** Archives a branch (read-only) or makes it active again. */
  async setBranchArchived(archived: boolean, options?: BranchRef): Promise<void> {
    await this.call('set_branch_state', { ...route(options), archived });
  }

  metrics(options?: BranchRef): EngineMetrics {
    return this.callSync('metrics', route(options));
  }

  /**
   * The engine's events since the last call, oldest first: recovery at
   * open, checkpoints, index catch-up and failures, storage faults. The
   * server logs them; embedded users may read them here (each branch keeps
   * the latest 256). Readable after `close`, whose checkpoint is an event too.
   */
  events(): EngineEvent[] {
    return unwrap<{ events: EngineEvent[] }>(this.native.callSync('events', '{}')).events;
  }

  /** A live idempotency receipt by its scoped key. */
  async receipt(key: string, options?: BranchRef): Promise<{ status: number; body: unknown; body_hash: string } | null> {
    return (await this.call<{ receipt: { status: number; body: unknown; body_hash: string } | null }>('receipt', { ...route(options), key })).receipt;
  }

  /** Stores a receipt for a keyed request that writes no rows. */
  recordReceipt(receipt: ReceiptDraft, options?: BranchRef): Promise<WriteResult> {
    return this.call('record_receipt', { ...route(options), receipt });
  }

  /** Waits until the text and vector indexes cover every committed write. */
  async waitIndexed(timeoutMs = 30_000): Promise<boolean> {
    return (await this.call<{ indexed: boolean }>('wait_indexed', { timeout_ms: timeoutMs })).indexed;
  }

  /**
   * Test hook: configures a storage fail point (crates/engine/src/storage/faults.rs),
   * e.g. `faultForTest('wal::sync', 'return(eio)')`; `'off'` turns it off.
   */
  async faultForTest(point: string, actions: string): Promise<void> {
    await this.call('fault', { point, actions });
  }

  /** Test hook: makes the engine panic inside a call. */
  panicForTest(): Promise<unknown> {
    return this.call('panic', {});
  }

  /** Finishes queued writes, commits indexes and releases the data directory. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.native.close();
  }
}
