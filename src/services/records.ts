/**
 * Records: put (one or a batch), delete and get, for every front door.
 *
 * A keyed write (a request with an Idempotency-Key) hands its key to the
 * engine with the records: the engine commits the receipt in the same WAL
 * frame as the write, so a crash keeps both or neither, and a retry is
 * answered from the receipt (`replayed`) without writing again. The reply a
 * retry gets is the caller's (`reply`); its `epoch`, `record_count` and
 * `changed` members are filled in by the commit.
 */
import { checkFieldNames } from '../names.js';
import { resolveNamedBranch } from './branch.js';
import type { BranchRef, Engine, ReceiptDraft, RecordInput, RecordKey, RecordOutput, RequestKey, WriteResult } from '../native/engine.js';

export interface WriteOptions {
  branch?: BranchRef;
  /** The scoped Idempotency-Key and body hash of a keyed request (src/idempotency). */
  requestKey?: RequestKey;
  /** What a retry of the keyed request answers (default `{epoch, record_count, changed}`). */
  reply?: Readonly<Record<string, unknown>>;
}

const DEFAULT_REPLY = { epoch: 0, record_count: 0, changed: true };

/** The receipt a keyed write commits with its records; none for a write without a key. */
export function writeReceipt(options: WriteOptions | undefined): ReceiptDraft | undefined {
  const key = options?.requestKey;
  return key && { key: key.key, body_hash: key.body_hash, status: 200, body: options.reply ?? { ...DEFAULT_REPLY } };
}

/** Full replacement write of `records`, atomic at one epoch; resolves once durable. */
export function putRecords(engine: Engine, records: RecordInput[], options?: WriteOptions): Promise<WriteResult> {
  // the engine checks a field key only when its value types a column; a bad
  // one rejects like the engine's refusals (no async layer on this hot path)
  try {
    checkFieldNames(records);
  } catch (err) {
    return Promise.reject(err);
  }
  return engine.put(records, options?.branch, writeReceipt(options));
}

/**
 * Full replacement write of the records of a put-batch request body, read
 * by the engine from its bytes; null, having written nothing, when the body
 * needs the service's own reading (then parse it and call putRecords).
 * `freeBody` frees the body once the records are read (Engine.putBatchJson).
 */
export function putBatchJson(engine: Engine, body: Buffer, options?: WriteOptions, freeBody = false): Promise<{ result: WriteResult; includeWriteTiming: boolean } | null> {
  return engine.putBatchJson(body, options?.branch, writeReceipt(options), freeBody);
}

/**
 * Full replacement write of the record of a put request body (a record, or
 * `{record}` with or without branch names), read by the engine from its
 * bytes; null, having written nothing, when the body needs the service's own
 * reading. A body that names its branch is checked against `options.branch`
 * (the request's headers) by the one branch rule, resolveBranch, before the
 * engine writes it there.
 */
export async function putJson(engine: Engine, body: Buffer, options?: WriteOptions): Promise<WriteResult | null> {
  const first = await engine.putJson(body, options?.branch, writeReceipt(options));
  if (first === null || !('named' in first)) return first;
  const { named } = first;
  const branch = resolveNamedBranch(options?.branch ?? {}, named);
  const written = await engine.putJson(body, branch, writeReceipt(options), named);
  return written !== null && 'named' in written ? null : written;
}

/** Writes a tombstone version of the record. */
export function deleteRecord(engine: Engine, key: RecordKey, options?: WriteOptions): Promise<WriteResult> {
  return engine.delete(key, options?.branch, writeReceipt(options));
}

/**
 * The answer of a `/v1/records/get` request body as JSON text, the engine
 * reading the body and writing the answer; null when the body needs the
 * service's own reading (the route's schema, then getRecord).
 */
export function getJson(engine: Engine, body: Buffer, branch?: BranchRef): Promise<Buffer | null> {
  return engine.getJson(body, branch);
}

/** The visible version of a record, at the latest epoch or at `epoch`; null when there is none. */
export function getRecord(engine: Engine, key: RecordKey, branch?: BranchRef, epoch?: number): Promise<RecordOutput | null> {
  return engine.get(key, branch, epoch);
}
