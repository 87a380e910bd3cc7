/**
 * The typed binding: the napi `NativeEngine` with its rejections turned into
 * `BraidError`s (the engine's stable codes) and its write result as the
 * union it is. Nothing else: no validation, no shaping, no HTTP. The
 * services (src/services) are its only callers besides the embedded API's
 * plain pass-throughs; a route never reaches it directly.
 *
 * The types are the binding's (`native/index.d.ts`, generated from
 * crates/node/src/types.rs): records and queries cross to the engine as
 * objects, vectors as numbers or a `Float32Array`, never as JSON text.
 */
import { existsSync, statSync, type Stats } from 'node:fs';
import path from 'node:path';
import { BraidError, isErrorCode } from '../errors.js';
import { loadNative, type NativeEngine, type Native } from './index.js';

export type {
  AccessPathExplain,
  AccessPathTiming,
  BranchRef,
  BranchSummary,
  ColumnDeclaration,
  ColumnSchema,
  Committed,
  DoctorReport,
  EngineEvent,
  EngineMetrics,
  EngineHistogram,
  CheckpointTrigger,
  HybridExplain,
  HybridQuery,
  HybridRow,
  LogReport,
  OpenOptions,
  PhaseTiming,
  PutBatchOutcome,
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
} from './index.js';

type BranchRef = Native.BranchRef;

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
export function braidError(err: unknown): BraidError {
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
/** Whether the directory `dataDir` is one Braid wrote: it holds `catalog.json` or `db/` (`braid doctor`, `braid serve`). */
export function holdsBraidData(dataDir: string): boolean {
  return existsSync(path.join(dataDir, 'catalog.json')) || existsSync(path.join(dataDir, 'db'));
}

export function doctor(dataDir: string, options: { salvage?: boolean } = {}): Native.DoctorReport {
  // a mistyped path has no logs to check: that is not a healthy data directory
  let stat: Stats | undefined;
  try {
    stat = statSync(dataDir);
  } catch (err) {
    throw new BraidError('invalid_request', `no data directory at ${dataDir}: ${(err as Error).message}`);
  }
  if (!stat.isDirectory()) throw new BraidError('invalid_request', `${dataDir} is not a directory`);
  // nor is a directory Braid never wrote (doctor on /etc had called it healthy)
  if (!holdsBraidData(dataDir)) {
    throw new BraidError('invalid_request', `${dataDir} is not a Braid data directory (it has no catalog.json and no db/)`);
  }
  return settleSync(() => loadNative().doctor(dataDir, options.salvage ?? false));
}

/**
 * The branch a `/v1/records/put` body's wrapper names (`database_id`,
 * `branch_id`), read by the engine without reading its record; null for a
 * bare record, a wrapper naming none, or a body out of the wrapper's shape.
 */
export function putBodyBranch(body: Buffer): BranchRef | null {
  return settleSync(() => loadNative().putBodyBranch(body));
}

/** One open data directory, as the binding serves it. Every promise runs off the JS thread. */
export class Engine {
  readonly dataDir: string;
  private readonly native: NativeEngine;
  private closed = false;

  private constructor(native: NativeEngine, dataDir: string) {
    this.native = native;
    this.dataDir = dataDir;
  }

  /** Opens (or creates) a Braid data directory. */
  static open(options: Native.OpenOptions): Engine {
    return Engine.start(options, (native) => native.open(options));
  }

  /**
   * Starts opening a data directory on a thread of the engine's and returns
   * at once (bad options still throw here). Calls wait for the open and fail
   * as it failed; `ready()` resolves once it is done.
   */
  static openInBackground(options: Native.OpenOptions): Engine {
    return Engine.start(options, (native) => native.openInBackground(options));
  }

  /** An engine over what `open` makes of the binding's factories; their errors as `openError`. */
  private static start(options: Native.OpenOptions, open: (native: ReturnType<typeof loadNative>['NativeEngine']) => NativeEngine): Engine {
    let native: NativeEngine;
    try {
      native = open(loadNative().NativeEngine);
    } catch (err) {
      throw openError(options.dataDir, err);
    }
    return new Engine(native, options.dataDir);
  }

  /** Resolves once the engine is open; rejects with the open's error. */
  async ready(): Promise<void> {
    try {
      await this.engine.ready();
    } catch (err) {
      throw openError(this.dataDir, err);
    }
  }

  private get engine(): NativeEngine {
    if (this.closed) throw new BraidError('shutting_down', 'the engine is closed');
    return this.native;
  }

  /** Writes records atomically at one epoch, with a keyed request's receipt in the same commit; resolves once durable. */
  async put(records: Native.RecordInput[], branch?: BranchRef, receipt?: Native.ReceiptDraft): Promise<WriteResult> {
    return writeResult(await settle(() => this.engine.put(branch, packRecords(records), receipt)));
  }

  /**
   * Writes the records of a put-batch request body, which the engine reads
   * from its bytes off the JS thread. Resolves null, having written nothing,
   * when the body needs the service's own reading (invalid JSON, a schema
   * violation, a key JSON.parse treats specially: crates/engine/src/wire.rs).
   * With `freeBody`, the body's memory is freed as soon as the engine has
   * read the records from it, before they are committed; pass it only for a
   * buffer that is the whole of an ArrayBuffer nothing else reads (empty
   * after).
   */
  async putBatchJson(body: Buffer, branch?: BranchRef, receipt?: Native.ReceiptDraft, freeBody = false): Promise<{ result: WriteResult; includeWriteTiming: boolean } | null> {
    const outcome = await settle(() => this.engine.putBatchJson(branch, body, receipt, freeBody));
    return outcome && { result: writeResult(outcome.result), includeWriteTiming: outcome.includeWriteTiming };
  }

  /**
   * Writes the record of a `/v1/records/put` body, read by the engine from
   * its bytes (off the JS thread when the body is large). Resolves null,
   * having written nothing, when the body needs the service's own reading
   * (crates/engine/src/wire.rs), and `{named}`, having written nothing, when
   * the body names its branch and `named` (that answer, passed back once the
   * branch is checked) is not given.
   */
  async putJson(body: Buffer, branch?: BranchRef, receipt?: Native.ReceiptDraft, named?: BranchRef): Promise<WriteResult | Native.NamedBranch | null> {
    const outcome = await settle(() => this.engine.putJson(branch, body, receipt, named));
    return outcome && ('named' in outcome ? outcome : writeResult(outcome));
  }

  /** Writes a tombstone version; later reads and newer epochs no longer see the record. */
  async delete(key: Native.RecordKey, branch?: BranchRef, receipt?: Native.ReceiptDraft): Promise<WriteResult> {
    return writeResult(await settle(() => this.engine.delete(branch, key, receipt)));
  }

  /** The visible version of a record, at the latest epoch or at `epoch`. */
  get(key: Native.RecordKey, branch?: BranchRef, epoch?: number): Promise<Native.RecordOutput | null> {
    return settle(() => this.engine.get(branch, key, epoch));
  }

  /**
   * The record a `/v1/records/get` request body names, which the engine
   * reads from its bytes, resolved as the route's JSON answer (`{"record":
   * ...}`) to send as it is; null, having read nothing, when the body needs
   * the service's own reading (crates/engine/src/wire.rs).
   */
  getJson(body: Buffer, branch?: BranchRef): Promise<Buffer | null> {
    return settle(() => this.engine.getJson(branch, body));
  }

  /** Runs a hybrid query; the engine checks every value of it. */
  query(query: Native.HybridQuery, branch?: BranchRef): Promise<Native.QueryResponse> {
    return settle(() => this.engine.query(branch, packQuery(query)));
  }

  /** Runs a hybrid query and resolves its response as JSON bytes, to send as they are. */
  queryToJson(query: Native.HybridQuery, branch?: BranchRef): Promise<Buffer> {
    return settle(() => this.engine.queryToJson(branch, packQuery(query)));
  }

  /**
   * Runs the hybrid query of a `/v1/query` request body, which the engine
   * reads from its bytes, and resolves the response as JSON bytes to send as
   * they are. Resolves null, having run nothing, when the body needs the
   * service's own reading (invalid JSON, a schema violation, a key JSON.parse
   * treats specially: crates/engine/src/wire.rs).
   */
  queryJson(body: Buffer, branch?: BranchRef): Promise<Buffer | null> {
    return settle(() => this.engine.queryJson(branch, body));
  }

  /** As queryJson, for a `/v1/explain` body: resolves the query's explain alone as JSON bytes, or null. */
  explainJson(body: Buffer, branch?: BranchRef): Promise<Buffer | null> {
    return settle(() => this.engine.explainJson(branch, body));
  }

  /** Declares a table or adds columns to it. */
  async declareTable(table: string, columns: Record<string, Native.ColumnDeclaration>, branch?: BranchRef): Promise<WriteResult> {
    return writeResult(await settle(() => this.engine.declareTable(branch, table, columns)));
  }

  schemas(branch?: BranchRef): Promise<Native.TableSchema[]> {
    return settle(() => this.engine.schemas(branch));
  }

  /** Takes snapshot `target` of a branch at its latest epoch; with a request key, the same request again answers that snapshot. */
  async snapshot(target: string, branch?: BranchRef, requestKey?: Native.RequestKey): Promise<Native.SnapshotInfo & { replayed: boolean }> {
    const info = await settle(() => this.engine.snapshot(branch, target, requestKey));
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
  restore(source: string, target: string, verify?: Native.RecordKey, requestKey?: Native.RequestKey): Promise<Native.RestoreOutcome> {
    return settle(() => this.engine.restore(source, target, verify, requestKey));
  }

  branches(endpoint: string): Promise<Native.BranchSummary[]> {
    return settle(() => this.engine.branches(endpoint));
  }

  /** Archives a branch (read-only) or makes it active again. */
  setBranchArchived(archived: boolean, branch?: BranchRef): Promise<void> {
    return settle(() => this.engine.setBranchArchived(branch, archived));
  }

  metrics(branch?: BranchRef): Native.EngineMetrics {
    return settleSync(() => this.engine.metrics(branch));
  }

  /** The engine's events since the last call, oldest first; readable after `close`. */
  events(): Native.EngineEvent[] {
    return settleSync(() => this.native.events());
  }

  /** A live idempotency receipt by its scoped key. */
  receipt(key: string, branch?: BranchRef): Promise<Native.StoredReceipt | null> {
    return settle(() => this.engine.receipt(branch, key));
  }

  /** Stores a receipt for a keyed request that writes no rows. */
  async recordReceipt(receipt: Native.ReceiptDraft, branch?: BranchRef): Promise<WriteResult> {
    return writeResult(await settle(() => this.engine.recordReceipt(branch, receipt)));
  }

  /** Lets the indexers of an engine opened with `deferIndexing` start (nothing when they run). */
  startIndexing(): void {
    // as every call after close but events() (found by a black-box test: it returned)
    settleSync(() => this.engine.startIndexing());
  }

  /** Waits until the text and vector indexes cover every committed write. */
  waitIndexed(timeoutMs = 30_000): Promise<boolean> {
    return settle(() => this.engine.waitIndexed(timeoutMs));
  }

  /** Test hook: configures a storage fail point (crates/engine/src/storage/faults.rs); `'off'` turns it off. */
  faultForTest(point: string, actions: string): Promise<void> {
    return settle(async () => this.engine.faultForTest(point, actions));
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

/** An engine that cannot open is a store that cannot serve. */
function openError(dataDir: string, err: unknown): BraidError {
  const e = braidError(err);
  const code = e.code === 'invalid_request' ? 'storage_failure' : e.code;
  return new BraidError(code, `cannot open ${dataDir}: ${e.message}`);
}

// -- numbers across the binding
//
// The binding reads a plain array one napi call per element, and a
// Float64Array in one call (crates/node/src/js.rs reads its numbers exactly
// as it reads plain ones, integers included, so nothing changes but the
// cost). A put-batch of 1,000 records with 256-d vectors parsed from JSON
// spent about 30 ms in those calls.

/** Arrays this long or longer, of numbers only, cross as a Float64Array. */
const PACK_MIN_LENGTH = 16;

function packed(value: unknown): unknown {
  if (!Array.isArray(value) || value.length < PACK_MIN_LENGTH) return value;
  for (const x of value) if (typeof x !== 'number') return value;
  return Float64Array.from(value as number[]);
}

const isPlain = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && [Object.prototype, null].includes(Object.getPrototypeOf(value));

/**
 * The records with each long number array among their fields as a
 * Float64Array. The caller's objects are not changed; anything but plain
 * objects (a class with `toJSON`, say) crosses as it is.
 */
function packRecords(records: Native.RecordInput[]): Native.RecordInput[] {
  if (!Array.isArray(records)) return records;
  return records.map((record) => {
    const fields: unknown = isPlain(record) ? record.fields : undefined;
    if (!isPlain(fields)) return record;
    let out: Record<string, unknown> | undefined;
    for (const [name, value] of Object.entries(fields)) {
      const p = packed(value);
      if (p === value) continue;
      out ??= { ...fields };
      out[name] = p;
    }
    return out ? { ...record, fields: out } : record;
  });
}

/** The query with a number-array vector as a Float64Array. */
function packQuery(query: Native.HybridQuery): Native.HybridQuery {
  if (!isPlain(query)) return query;
  const vector: unknown = query.vector;
  const p = packed(vector);
  return p === vector ? query : { ...query, vector: p as number[] };
}
