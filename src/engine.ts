/**
 * The embedded API: Braid in-process, without HTTP. Each method is one call
 * of the same service the HTTP routes, GraphQL and the CLI call
 * (src/services), so the embedded API answers as they do, with the same
 * stable codes; `BraidError` on failure.
 *
 *   front door (this class, a route, a resolver, the CLI)
 *     -> service (src/services: checks, keyed writes, shaping)
 *     -> typed binding (src/native/engine.ts: Engine)
 *     -> the Rust engine
 *
 * The types are the binding's (`native/index.d.ts`, generated from
 * crates/node/src/types.rs): records and queries cross to the engine as
 * objects, vectors as numbers or a `Float32Array`, never as JSON text.
 */
import { Engine, braidError, type BranchRef, type WriteResult } from './native/engine.js';
import type { Native } from './native/index.js';
import { deleteRecord, getRecord, putRecords } from './services/records.js';
import { explainQuery, runNativeQuery, runQuery, tables } from './services/queries.js';
import { listSnapshots, restoreSnapshot, setBranchState, takeSnapshot, type RestoreResult, type SnapshotResult } from './services/admin.js';
import { listBranches } from './services/ops.js';
import { BraidError } from './errors.js';

export { doctor, Engine } from './native/engine.js';
export type * from './native/engine.js';
export type { RestoreResult, SnapshotResult } from './services/admin.js';

/**
 * Most array elements and object properties one argument of the embedded
 * API holds, as in the binding (crates/node/src/js.rs): as many values as a
 * 16 MiB request body could. Checked here too, before the TypeScript layer
 * walks the argument (a query's schema check, the packing of long number
 * arrays): a sparse array of length 2^32 - 1 in a query had held the thread
 * for a minute and ended the process out of heap. Typed arrays are not
 * counted.
 */
const MAX_ARGUMENT_VALUES = 16 * 1024 * 1024;

/**
 * Refuses `value` past MAX_ARGUMENT_VALUES, reading an array's length before
 * its elements. With `records`, `value` is a batch's list: a record that
 * cannot be read (a getter that throws, a revoked proxy) is refused with its
 * index, as the binding refuses a bad record; otherwise what reading throws
 * becomes `invalid_request` in `call`, never a bare TypeError.
 */
function checkArgumentSize(value: unknown, what: string, code: 'invalid_record' | 'invalid_query', records = false): void {
  let budget = MAX_ARGUMENT_VALUES;
  const pending: Array<{ value: unknown; depth: number; record: number }> = [{ value, depth: 0, record: -1 }];
  const spend = (n: number) => {
    budget -= n;
    if (budget < 0) {
      throw new BraidError(code, `${what} holds more than ${MAX_ARGUMENT_VALUES} values (array elements and object properties), the most a call may pass`);
    }
  };
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const { value: v, depth, record } = next;
    // deeper than the binding reads (128 levels, refused there): no need to count
    if (v === null || typeof v !== 'object' || ArrayBuffer.isView(v) || depth > 128) continue;
    try {
      if (Array.isArray(v)) {
        spend(v.length);
        v.forEach((item, i) => {
          if (item !== null && typeof item === 'object') pending.push({ value: item, depth: depth + 1, record: depth === 0 ? i : record });
        });
      } else {
        const keys = Object.keys(v);
        spend(keys.length + 1);
        for (const key of keys) {
          const item = (v as Record<string, unknown>)[key];
          if (item !== null && typeof item === 'object') pending.push({ value: item, depth: depth + 1, record });
        }
      }
    } catch (err) {
      if (!records || record < 0 || err instanceof BraidError) throw err;
      const message = err instanceof Error ? err.message : String(err);
      throw new BraidError('invalid_request', `${what}[${record}] could not be read: ${message}`, record);
    }
  }
}

/** Runs `run` as one call of the embedded API, after checking the call's `options` (checkOptions). */
function call<T>(run: () => Promise<T>, options?: unknown): Promise<T> {
  try {
    checkOptions(options);
    return run().catch((err: unknown) => {
      throw braidError(err);
    });
  } catch (err) {
    return Promise.reject(braidError(err));
  }
}

/** Options of a write: its branch, and for a keyed write its request key (a retry answers `replayed`). */
export type WriteOptions = BranchRef & { requestKey?: Native.RequestKey };

/** What a wrong argument is, for its message: `null`, `an array` or its type. */
function describe(value: unknown): string {
  return value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value;
}

/** The numeric open options (Native.OpenOptions), whose values the binding checks further. */
const NUMBER_OPTIONS = [
  'maxVectorDim', 'maxBatch', 'maxColumns', 'receiptRetentionMs', 'receiptMemoryBytes', 'historyEpochs',
  'textCommitIntervalMs', 'checkpointBytes', 'checkpointRows', 'checkpointIntervalMs',
] as const;

/**
 * Open options that are not an object, or an option of the wrong type, are
 * `invalid_record`, as the binding refuses a bad value: the binding's own
 * conversion had failed as `storage_failure` (503, which says to retry) with
 * its Rust text (found by black-box tests).
 */
function checkOpenOptions(options: unknown): void {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new BraidError('invalid_record', `open options must be an object such as {dataDir: './data'}, got ${describe(options)}`);
  }
  const o = options as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (key !== 'dataDir' && key !== 'deferIndexing' && !(NUMBER_OPTIONS as readonly string[]).includes(key)) {
      throw new BraidError('invalid_record', `unknown open option ${JSON.stringify(key)}; the options are dataDir, deferIndexing, ${NUMBER_OPTIONS.join(', ')}`);
    }
  }
  if (typeof o.dataDir !== 'string') throw new BraidError('invalid_record', `dataDir must be a string naming a directory, got ${describe(o.dataDir)}`);
  if (o.dataDir.includes('\0')) throw new BraidError('invalid_record', 'dataDir must not hold a NUL character, which no path can');
  for (const name of NUMBER_OPTIONS) {
    if (o[name] !== undefined && o[name] !== null && typeof o[name] !== 'number') throw new BraidError('invalid_record', `${name} must be a number, got ${describe(o[name])}`);
  }
  if (o.deferIndexing !== undefined && o.deferIndexing !== null && typeof o.deferIndexing !== 'boolean') {
    throw new BraidError('invalid_record', `deferIndexing must be true or false, got ${describe(o.deferIndexing)}`);
  }
}

/** Every option a call of the embedded API takes (`epoch`: get; `verify`: restore). */
const CALL_OPTIONS: readonly string[] = ['databaseId', 'branchId', 'requestKey', 'epoch', 'verify'];

/**
 * Options that are not an object, or a branch named by something other than
 * a string, are `invalid_request`: the binding had read a string given as
 * options (`put(record, 'b1')`) as no options at all, and the write went to
 * `main` (found by a black-box review). `null` is no options, as the
 * binding's own types allow.
 */
function checkOptions(options: unknown): void {
  if (options === undefined || options === null) return;
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new BraidError('invalid_request', `options must be an object such as {branchId: 'main'}, got ${describe(options)}`);
  }
  // a misspelt option (`brnachId`) had been ignored and the write gone to main, and an option
  // inherited from Object.prototype had been followed (found by a black-box review)
  for (const key of Object.keys(options)) {
    if (!CALL_OPTIONS.includes(key)) throw new BraidError('invalid_request', `unknown option ${JSON.stringify(key)}; the options are ${CALL_OPTIONS.join(', ')}`);
  }
  for (const key of CALL_OPTIONS) {
    if (!Object.hasOwn(options, key) && (options as Record<string, unknown>)[key] !== undefined) {
      throw new BraidError('invalid_request', `option ${key} is inherited from the options' prototype, not given: pass it as the object's own property`);
    }
  }
  const { databaseId, branchId } = options as { databaseId?: unknown; branchId?: unknown };
  for (const [name, value] of [['databaseId', databaseId], ['branchId', branchId]] as const) {
    if (value !== undefined && value !== null && typeof value !== 'string') {
      throw new BraidError('invalid_request', `options.${name} must be a string, got ${describe(value)}`);
    }
  }
}

export class Braid {
  /**
   * The typed binding under this API, which `buildApp` hands its routes'
   * services. Calling it directly skips the services' checks.
   */
  readonly engine: Engine;

  private constructor(engine: Engine) {
    this.engine = engine;
  }

  /** Opens (or creates) a Braid data directory. */
  static open(options: Native.OpenOptions): Braid {
    try {
      checkOpenOptions(options);
      return new Braid(Engine.open(options));
    } catch (err) {
      throw braidError(err);
    }
  }

  /**
   * Starts opening a data directory in the background and returns at once;
   * calls wait for the open, and `ready()` resolves when it is done (or
   * rejects as it failed). The server builds its routes meanwhile.
   */
  static openInBackground(options: Native.OpenOptions): Braid {
    try {
      checkOpenOptions(options);
      return new Braid(Engine.openInBackground(options));
    } catch (err) {
      throw braidError(err);
    }
  }

  /** Resolves once the data directory is open (immediately after `open`). */
  ready(): Promise<void> {
    return this.engine.ready();
  }

  get dataDir(): string {
    return this.engine.dataDir;
  }

  /** Full replacement write of one record; resolves once it is durable. */
  put(record: Native.RecordInput, options?: WriteOptions): Promise<WriteResult> {
    return call(() => {
      try {
        checkArgumentSize(record, 'record', 'invalid_record');
      } catch (err) {
        // a put is a batch of one: its refusal carries index 0, as put(null) does (found by a black-box test)
        const refused = braidError(err);
        throw new BraidError(refused.code, `records[0]: ${refused.message}`, 0);
      }
      return putRecords(this.engine, [record], { branch: options, requestKey: options?.requestKey });
    }, options);
  }

  /** Atomic write of many records at one epoch. */
  putBatch(records: Native.RecordInput[], options?: WriteOptions): Promise<WriteResult> {
    return call(() => {
      // as POST /v1/records/put-batch says it (found by a black-box test: JavaScript's own TypeError text)
      if (!Array.isArray(records)) throw new BraidError('invalid_request', `records must be an array, got ${describe(records)}`);
      checkArgumentSize(records, 'records', 'invalid_record', true);
      return putRecords(this.engine, records, { branch: options, requestKey: options?.requestKey });
    }, options);
  }

  /** Writes a tombstone version; later reads and newer epochs no longer see the record. */
  delete(key: Native.RecordKey, options?: WriteOptions): Promise<WriteResult> {
    return call(() => deleteRecord(this.engine, key, { branch: options, requestKey: options?.requestKey }), options);
  }

  /** The visible version of a record, at the latest epoch or at `epoch`. */
  get(key: Native.RecordKey, options?: BranchRef & { epoch?: number }): Promise<Native.RecordOutput | null> {
    return call(() => {
      if (key === null || typeof key !== 'object') throw new BraidError('invalid_request', `the key must be an object {table, tenant_id, id}, got ${describe(key)}`);
      const epoch = (options as { epoch?: unknown } | null | undefined)?.epoch;
      if (epoch !== undefined && typeof epoch !== 'number') throw new BraidError('invalid_request', `options.epoch must be a number, got ${describe(epoch)}`);
      return getRecord(this.engine, key, options, options?.epoch);
    }, options);
  }

  /** Runs a hybrid query. */
  query(query: Native.HybridQuery, options?: BranchRef): Promise<Native.QueryResponse> {
    return call(() => {
      checkArgumentSize(query, 'query', 'invalid_query');
      return runQuery(this.engine, query, options, 'query');
    }, options);
  }

  /** Runs a hybrid query for its explain alone (planner candidates included). */
  explain(query: Native.HybridQuery, options?: BranchRef): Promise<Native.HybridExplain> {
    return call(() => {
      checkArgumentSize(query, 'query', 'invalid_query');
      return explainQuery(this.engine, query, options, 'query');
    }, options);
  }

  /**
   * Runs a native query language statement (docs/ql.md). A statement that does
   * not parse rejects with `QlSyntaxError` (code `ql_syntax_error`).
   */
  nativeQuery(text: string, options?: BranchRef): Promise<Native.QueryResponse> {
    return call(() => {
      // as POST /v1/nativeql answers {"query": 42} (found by a black-box test: ql_syntax_error here)
      if (typeof text !== 'string') throw new BraidError('invalid_request', `the statement must be a string, got ${describe(text)}`);
      return runNativeQuery(this.engine, text, options);
    }, options);
  }

  /** Declares a table or adds columns to it. */
  declareTable(table: string, columns: Record<string, Native.ColumnDeclaration>, options?: BranchRef): Promise<WriteResult> {
    // the write alone: the service's read of the table after it (for the
    // routes' answers) could be refused by a close() in between, which had
    // reported a declaration that committed as shutting_down
    return call(() => {
      checkArgumentSize(columns, 'columns', 'invalid_record');
      return this.engine.declareTable(table, columns, options);
    }, options);
  }

  schemas(options?: BranchRef): Promise<Native.TableSchema[]> {
    return call(() => tables(this.engine, options), options);
  }

  /**
   * Takes snapshot `target` of a branch at its latest epoch: `{snapshot,
   * target, database_id, branch_id, epoch}` as POST /v1/admin/snapshot
   * answers it. With a request key, the same request again answers that
   * snapshot (`replayed: true`).
   */
  snapshot(target: string, options?: BranchRef & { requestKey?: Native.RequestKey }): Promise<SnapshotResult> {
    return call(() => takeSnapshot(this.engine, target, options, options?.requestKey), options);
  }

  /** Every snapshot, with its size and when it was taken. */
  snapshots(): Promise<Native.SnapshotInfo[]> {
    return listSnapshots(this.engine);
  }

  /**
   * Restores snapshot `source` into a new branch `target`, as POST
   * /v1/admin/restore does; with `verify`, reads that record back from the
   * new branch (`verification.status` `passed` or `failed`). Names are
   * checked before anything is created. With a request key, as for `snapshot`.
   */
  restore(source: string, target: string, options?: { verify?: Native.RecordKey; requestKey?: Native.RequestKey }): Promise<RestoreResult> {
    return call(() => restoreSnapshot(this.engine, { source, target, verify_record: options?.verify }, options?.requestKey), options);
  }

  /** Every branch with its latest epoch, parent and state; `endpoint` is what each reports as its address. */
  branches(endpoint = 'embedded'): Promise<Native.BranchSummary[]> {
    return call(() => listBranches(this.engine, endpoint));
  }

  /** Archives a branch (read-only) or makes it active again. */
  setBranchArchived(archived: boolean, options?: BranchRef): Promise<void> {
    return call(() => {
      // a string 'false' had archived the branch
      if (typeof archived !== 'boolean') throw new BraidError('invalid_request', `archived must be true or false, got ${describe(archived)}`);
      return setBranchState(this.engine, archived ? 'archived' : 'active', options ?? {});
    }, options);
  }

  /** The branch's figures: epochs, counts, recovery and indexer state (synchronous). */
  metrics(options?: BranchRef): Native.EngineMetrics {
    try {
      checkOptions(options);
    } catch (err) {
      throw braidError(err);
    }
    return this.engine.metrics(options);
  }

  /**
   * The engine's events since the last call, oldest first: recovery at
   * open, checkpoints, index catch-up and failures, storage faults. The
   * server logs them; embedded users may read them here (each branch keeps
   * the latest 256). Readable after `close`, whose checkpoint is an event too.
   */
  events(): Native.EngineEvent[] {
    return this.engine.events();
  }

  /** A live idempotency receipt by its scoped key. */
  receipt(key: string, options?: BranchRef): Promise<Native.StoredReceipt | null> {
    return call(() => this.engine.receipt(key, options), options);
  }

  /** Waits until the text and vector indexes cover every committed write. */
  waitIndexed(timeoutMs = 30_000): Promise<boolean> {
    return call(() => {
      // the binding's own refusal would be its conversion text
      if (typeof timeoutMs !== 'number' || !Number.isSafeInteger(timeoutMs) || timeoutMs < 0) {
        throw new BraidError('invalid_request', `timeoutMs must be a whole number of milliseconds, 0 or more, got ${typeof timeoutMs === 'number' ? timeoutMs : describe(timeoutMs)}`);
      }
      return this.engine.waitIndexed(timeoutMs);
    });
  }

  /**
   * Test hook: configures a storage fail point (crates/engine/src/storage/faults.rs),
   * e.g. `faultForTest('wal::sync', 'return(eio)')`; `'off'` turns it off.
   */
  faultForTest(point: string, actions: string): Promise<void> {
    return this.engine.faultForTest(point, actions);
  }

  /** Test hook: makes the engine panic inside a call. */
  panicForTest(): Promise<void> {
    return this.engine.panicForTest();
  }

  /**
   * Lets the indexers start, for an engine opened with `deferIndexing: true`
   * (the server's, once it listens); nothing when they already run.
   */
  startIndexing(): void {
    this.engine.startIndexing();
  }

  /** Finishes queued writes, commits indexes and releases the data directory. */
  close(): void {
    this.engine.close();
  }
}
