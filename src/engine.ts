/**
 * The embedded API: Braid in-process, without HTTP. The HTTP routes use this
 * same class, so there is one path to the engine. Every method runs off the
 * JS thread and throws `BraidError` with the same stable codes as the HTTP
 * layer.
 *
 * The types are the binding's (`native/index.d.ts`, generated from
 * crates/node/src/types.rs): records and queries cross to the engine as
 * objects, vectors as numbers or a `Float32Array`, never as JSON text.
 */
import { BraidError, isErrorCode } from './errors.js';
import { loadNative, type NativeEngine, type Native } from './native/index.js';
import { parseNativeQuery } from './ql/index.js';
import { checkFieldNames } from './names.js';

export type {
  AccessPathExplain,
  AccessPathTiming,
  BranchSummary,
  ColumnDeclaration,
  ColumnSchema,
  Committed,
  DoctorReport,
  EngineEvent,
  EngineHistogram,
  EngineMetrics,
  CheckpointTrigger,
  HybridExplain,
  HybridQuery,
  HybridRow,
  LogReport,
  OpenOptions,
  PhaseTiming,
  PlannerCandidate,
  QueryResponse,
  ReceiptDraft,
  RecordInput,
  RecordKey,
  RecordOutput,
  Replayed,
  RequestKey,
  RestoreOutcome,
  ScoreComponents,
  SnapshotInfo,
  StoredReceipt,
  TableSchema,
  WriteTiming,
} from './native/index.js';

type BranchRef = Native.BranchRef;
export type { BranchRef };

export type Fields = Record<string, unknown>;

/** A write's outcome: committed now, or the stored reply of the same keyed write. */
export type WriteResult =
  | { committed: Native.Committed; replayed?: undefined }
  | { replayed: Native.Replayed; committed?: undefined };

/**
 * The binding rejects with a JavaScript Error carrying the engine's stable
 * `code` (and `index` for a batch); that becomes a `BraidError`. Anything
 * else the binding throws is an argument its types refuse (a number where a
 * string belongs), which only an embedded caller can send: invalid_request.
 */
function braidError(err: unknown): BraidError {
  if (err instanceof BraidError) return err;
  const e = err as { code?: unknown; message?: unknown; index?: unknown };
  const message = typeof e?.message === 'string' ? e.message : String(err);
  const index = typeof e?.index === 'number' ? e.index : undefined;
  if (typeof e?.code === 'string' && isErrorCode(e.code)) return new BraidError(e.code, message, index);
  return new BraidError('invalid_request', message);
}

async function settle<T>(promise: () => Promise<T>): Promise<T> {
  try {
    return await promise();
  } catch (err) {
    throw braidError(err);
  }
}

function settleSync<T>(call: () => T): T {
  try {
    return call();
  } catch (err) {
    throw braidError(err);
  }
}

/** The binding's write result as the union it is: exactly one side is set. */
function writeResult(result: Native.WriteResult): WriteResult {
  if (result.committed) return { committed: result.committed };
  if (result.replayed) return { replayed: result.replayed };
  throw new BraidError('internal_error', 'the engine answered a write with neither a commit nor a replay');
}

/**
 * Inspects every write-ahead log of a data directory. With `salvage`, cuts
 * each corrupt log at its first damaged frame after copying it aside; salvage
 * needs the directory unlocked (no server running on it).
 */
export function doctor(dataDir: string, options: { salvage?: boolean } = {}): Native.DoctorReport {
  return settleSync(() => loadNative().doctor(dataDir, options.salvage ?? false));
}

type Receipted = BranchRef & { receipt?: Native.ReceiptDraft };

export class Braid {
  readonly dataDir: string;
  private readonly native: NativeEngine;
  private closed = false;

  private constructor(native: NativeEngine, dataDir: string) {
    this.native = native;
    this.dataDir = dataDir;
  }

  /** Opens (or creates) a Braid data directory. */
  static open(options: Native.OpenOptions): Braid {
    let native: NativeEngine;
    try {
      native = loadNative().NativeEngine.open(options);
    } catch (err) {
      const e = braidError(err);
      // an engine that cannot open is a store that cannot serve
      const code = e.code === 'invalid_request' ? 'storage_failure' : e.code;
      throw new BraidError(code, `cannot open ${options.dataDir}: ${e.message}`);
    }
    return new Braid(native, options.dataDir);
  }

  private get engine(): NativeEngine {
    if (this.closed) throw new BraidError('shutting_down', 'the engine is closed');
    return this.native;
  }

  /** Full replacement write of one record; resolves once it is durable. */
  put(record: Native.RecordInput, options?: Receipted): Promise<WriteResult> {
    return this.putBatch([record], options);
  }

  /** Atomic write of many records at one epoch. */
  async putBatch(records: Native.RecordInput[], options?: Receipted): Promise<WriteResult> {
    checkFieldNames(records);
    return writeResult(await settle(() => this.engine.put(options, records, options?.receipt)));
  }

  /** Writes a tombstone version; later reads and newer epochs no longer see the record. */
  async delete(key: Native.RecordKey, options?: Receipted): Promise<WriteResult> {
    return writeResult(await settle(() => this.engine.delete(options, key, options?.receipt)));
  }

  /** The visible version of a record, at the latest epoch or at `epoch`. */
  get(key: Native.RecordKey, options?: BranchRef & { epoch?: number }): Promise<Native.RecordOutput | null> {
    return settle(() => this.engine.get(options, key, options?.epoch));
  }

  /** Runs a hybrid query. */
  query(query: Native.HybridQuery, options?: BranchRef): Promise<Native.QueryResponse> {
    return settle(() => this.engine.query(options, query));
  }

  /**
   * Runs a native query language statement (docs/ql.md). A statement that does
   * not parse rejects with `QlSyntaxError` (HTTP: `400 ql_syntax_error`).
   */
  async nativeQuery(text: string, options?: BranchRef): Promise<Native.QueryResponse> {
    const engine = this.engine;
    const query = parseNativeQuery(text);
    return settle(() => engine.query(options, query));
  }

  /** Declares a table or adds columns to it. */
  async declareTable(table: string, columns: Record<string, Native.ColumnDeclaration>, options?: BranchRef): Promise<WriteResult> {
    return writeResult(await settle(() => this.engine.declareTable(options, table, columns)));
  }

  schemas(options?: BranchRef): Promise<Native.TableSchema[]> {
    return settle(() => this.engine.schemas(options));
  }

  /**
   * Takes snapshot `target` of a branch at its latest epoch. With a request
   * key, the key is written with the snapshot and the same request again
   * answers that snapshot (`replayed: true`).
   */
  async snapshot(target: string, options?: BranchRef & { requestKey?: Native.RequestKey }): Promise<Native.SnapshotInfo & { replayed: boolean }> {
    const info = await settle(() => this.engine.snapshot(options, target, options?.requestKey));
    return { ...info, replayed: info.replayed ?? false };
  }

  snapshots(): Promise<Native.SnapshotInfo[]> {
    return settle(() => this.engine.snapshots());
  }

  /**
   * Restores snapshot `source` into a new branch `target`; with `verify`,
   * reads that record back from the new branch. Names are checked before
   * anything is created. With a request key, as for `snapshot`.
   */
  restore(source: string, target: string, options?: { verify?: Native.RecordKey; requestKey?: Native.RequestKey }): Promise<Native.RestoreOutcome> {
    return settle(() => this.engine.restore(source, target, options?.verify, options?.requestKey));
  }

  branches(endpoint = 'embedded'): Promise<Native.BranchSummary[]> {
    return settle(() => this.engine.branches(endpoint));
  }

  /** Archives a branch (read-only) or makes it active again. */
  setBranchArchived(archived: boolean, options?: BranchRef): Promise<void> {
    return settle(() => this.engine.setBranchArchived(options, archived));
  }

  metrics(options?: BranchRef): Native.EngineMetrics {
    return settleSync(() => this.engine.metrics(options));
  }

  /**
   * The engine's events since the last call, oldest first: recovery at
   * open, checkpoints, index catch-up and failures, storage faults. The
   * server logs them; embedded users may read them here (each branch keeps
   * the latest 256). Readable after `close`, whose checkpoint is an event too.
   */
  events(): Native.EngineEvent[] {
    return settleSync(() => this.native.events());
  }

  /** A live idempotency receipt by its scoped key. */
  receipt(key: string, options?: BranchRef): Promise<Native.StoredReceipt | null> {
    return settle(() => this.engine.receipt(options, key));
  }

  /** Stores a receipt for a keyed request that writes no rows. */
  async recordReceipt(receipt: Native.ReceiptDraft, options?: BranchRef): Promise<WriteResult> {
    return writeResult(await settle(() => this.engine.recordReceipt(options, receipt)));
  }

  /** Waits until the text and vector indexes cover every committed write. */
  waitIndexed(timeoutMs = 30_000): Promise<boolean> {
    return settle(() => this.engine.waitIndexed(timeoutMs));
  }

  /**
   * Test hook: configures a storage fail point (crates/engine/src/storage/faults.rs),
   * e.g. `faultForTest('wal::sync', 'return(eio)')`; `'off'` turns it off.
   */
  faultForTest(point: string, actions: string): Promise<void> {
    return settle(() => this.engine.faultForTest(point, actions));
  }

  /** Test hook: makes the engine panic inside a call. */
  panicForTest(): Promise<void> {
    return settle(() => this.engine.panicForTest());
  }

  /** Finishes queued writes, commits indexes and releases the data directory. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.native.close();
  }
}
