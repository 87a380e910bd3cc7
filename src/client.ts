/**
 * A small typed HTTP client of a running Braid engine (or gateway), over
 * fetch. Failures throw `BraidError` with the server's stable code; the
 * server's whole error body (e.g. `line`/`column` of `ql_syntax_error`) is
 * kept on `RemoteBraidError.body`. Used by the CLI (src/cli.ts).
 */
import type { Static } from 'typebox';
import { BraidError, isErrorCode, type ErrorCode } from './errors.js';
import { holdsNonFinite } from './json.js';
import type { BranchRef, BranchSummary, HybridExplain, HybridQuery, QueryResponse, RecordInput, RecordKey, RecordOutput } from './native/engine.js';
import type { RestoreResponse, SnapshotResponse } from './schemas/admin.js';
import type { MetricsResponse, ReadyResponse } from './schemas/ops.js';

export const DEFAULT_URL = 'http://127.0.0.1:8080';

export interface ClientOptions {
  /** Base URL of the engine or gateway, e.g. `http://127.0.0.1:8080`. */
  url: string;
  /** Bearer token sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** Branch every call addresses unless the call names another. */
  branch?: BranchRef;
  /** Longest wait for a whole answer, in ms; a server that accepts and never answers is `upstream_unreachable` after it. None by default. */
  timeoutMs?: number;
}

export type SnapshotResult = Static<typeof SnapshotResponse>;
export type RestoreResult = Static<typeof RestoreResponse>;
export type Metrics = Static<typeof MetricsResponse>;
export type Readiness = Static<typeof ReadyResponse>;

export interface PutBatchResult {
  epoch: number;
  record_count: number;
  write_timing?: Record<string, number>;
}

/** An error answered by the server: its code, status and whole body. */
const POSITIVE = '\u0000braid:+1e999\u0000';
const NEGATIVE = '\u0000braid:-1e999\u0000';

/**
 * A request body's JSON text. `JSON.stringify` writes NaN and the infinities
 * as `null`, so a vector of `[Infinity, 1]` (or `1e400` read from a file)
 * was stored as `[null, 1]` through the client and the CLI, where the server
 * and the embedded API refuse it (a black-box review: `braid import --url`
 * wrote nulls, exit 0). They are written as `1e999` and `-1e999` (NaN as
 * `1e999`), numbers past a double's range, which the server refuses with the
 * code it gives any non-finite number (`vector_not_finite` in a vector). A
 * body without one is written as `JSON.stringify` writes it.
 */
export function requestJson(body: unknown): string {
  if (!holdsNonFinite(body)) return JSON.stringify(body);
  const text = JSON.stringify(body, (_key, value: unknown) => (typeof value === 'number' && !Number.isFinite(value) ? (value < 0 ? NEGATIVE : POSITIVE) : value));
  return text.replaceAll(JSON.stringify(POSITIVE), '1e999').replaceAll(JSON.stringify(NEGATIVE), '-1e999');
}

export class RemoteBraidError extends BraidError {
  readonly httpStatus: number;
  readonly body: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, httpStatus: number, body: Record<string, unknown>) {
    super(code, message, typeof body.index === 'number' ? body.index : undefined);
    this.name = 'RemoteBraidError';
    this.httpStatus = httpStatus;
    this.body = body;
  }
}

export class BraidClient {
  readonly url: string;
  private readonly token: string | undefined;
  private readonly branch: BranchRef;
  private readonly timeoutMs: number | undefined;

  constructor(options: ClientOptions) {
    this.url = options.url.replace(/\/+$/, '');
    this.token = options.token;
    this.branch = options.branch ?? {};
    this.timeoutMs = options.timeoutMs;
  }

  private async request<T>(method: 'GET' | 'POST', route: string, body?: unknown, ref?: BranchRef): Promise<T> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    const databaseId = ref?.databaseId ?? this.branch.databaseId;
    const branchId = ref?.branchId ?? this.branch.branchId;
    if (databaseId) headers['x-braid-database'] = databaseId;
    if (branchId) headers['x-braid-branch'] = branchId;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const signal = this.timeoutMs === undefined ? undefined : AbortSignal.timeout(this.timeoutMs);
    // a server that accepts and never answers had held the caller forever (found by a black-box review)
    const timedOut = (err: unknown) =>
      (err as Error).name === 'TimeoutError' ? new BraidError('upstream_unreachable', `${this.url} did not answer ${method} ${route} within ${this.timeoutMs} ms`) : undefined;
    let res: Response;
    try {
      res = await fetch(this.url + route, { method, headers, body: body === undefined ? undefined : requestJson(body), signal });
    } catch (err) {
      const cause = (err as Error & { cause?: { code?: string; message?: string } }).cause;
      const why = cause?.code ?? cause?.message ?? (err as Error).message;
      throw timedOut(err) ?? new BraidError('upstream_unreachable', `cannot reach ${this.url}: ${why}`);
    }
    let text: string;
    try {
      text = await res.text();
    } catch (err) {
      throw timedOut(err) ?? err;
    }
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      throw new RemoteBraidError('upstream_error', `${method} ${route}: ${res.status} with a body that is not JSON`, res.status, { body: text });
    }
    // /v1/ready answers its readiness body with 503 too
    if (res.ok || (route === '/v1/ready' && res.status === 503 && parsed && typeof parsed === 'object' && 'ready' in parsed)) return parsed as T;
    const errBody = (parsed && typeof parsed === 'object' ? parsed : {}) as Record<string, unknown>;
    const code = typeof errBody.code === 'string' && isErrorCode(errBody.code) ? errBody.code : 'upstream_error';
    const message = typeof errBody.error === 'string' ? errBody.error : `${method} ${route} answered ${res.status}`;
    throw new RemoteBraidError(code, message, res.status, errBody);
  }

  /** Route 11: full replacement write of one record. */
  put(record: RecordInput, ref?: BranchRef): Promise<{ epoch: number }> {
    return this.request('POST', '/v1/records/put', { record }, ref);
  }

  /** Route 9: atomic write of many records at one epoch. */
  putBatch(records: RecordInput[], options: BranchRef & { includeWriteTiming?: boolean } = {}): Promise<PutBatchResult> {
    const body = options.includeWriteTiming ? { records, include_write_timing: true } : { records };
    return this.request('POST', '/v1/records/put-batch', body, options);
  }

  /** Route 14: the visible record, or null. */
  async get(key: RecordKey, ref?: BranchRef): Promise<RecordOutput | null> {
    return (await this.request<{ record: RecordOutput | null }>('POST', '/v1/records/get', key, ref)).record;
  }

  /** Route 2: a native query language statement. */
  nativeQuery(text: string, ref?: BranchRef): Promise<QueryResponse> {
    return this.request('POST', '/v1/nativeql', { query: text }, ref);
  }

  /** `POST /v1/query` (extension): a hybrid query given as JSON, answered like route 2. */
  query(query: HybridQuery, ref?: BranchRef): Promise<QueryResponse> {
    return this.request('POST', '/v1/query', query, ref);
  }

  /** Route 4: the explain of a hybrid query. */
  explain(query: HybridQuery, ref?: BranchRef): Promise<HybridExplain> {
    return this.request('POST', '/v1/explain', query, ref);
  }

  /** Route 10: snapshot `target` of a branch at its latest epoch. */
  snapshot(target: string, ref?: BranchRef): Promise<SnapshotResult> {
    return this.request('POST', '/v1/admin/snapshot', { target }, ref);
  }

  /** Route 3: restore snapshot `source` into a new branch `target`, optionally reading a record back. */
  restore(source: string, target: string, verifyRecord?: RecordKey): Promise<RestoreResult> {
    return this.request('POST', '/v1/admin/restore', verifyRecord ? { source, target, verify_record: verifyRecord } : { source, target });
  }

  /** Route 8: every branch. */
  async branches(): Promise<BranchSummary[]> {
    return (await this.request<{ branches: BranchSummary[] }>('GET', '/v1/branches')).branches;
  }

  /** Route 12. */
  metrics(ref?: BranchRef): Promise<Metrics> {
    return this.request('GET', '/v1/metrics/public-safe', undefined, ref);
  }

  /** Route 13: the readiness body (also when the server answers 503). */
  ready(): Promise<Readiness> {
    return this.request('GET', '/v1/ready');
  }
}
