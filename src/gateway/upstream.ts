/**
 * One engine endpoint behind the gateway: a keep-alive undici Pool, a
 * periodic readiness check of the engine's GET /v1/ready, and the error
 * classification of failed upstream requests.
 */
import { Pool, type Dispatcher } from 'undici';
import { BraidError } from '../errors.js';
import { BRANCH_HEADER, DATABASE_HEADER, type Route } from './routing.js';

export interface Readiness {
  /** A check has completed at least once. */
  checked: boolean;
  /** The engine answered (any status). */
  reachable: boolean;
  /** The engine answered 200 with ready: true. */
  ready: boolean;
  /** The engine's status code; 0 when it could not be reached. */
  statusCode: number;
  /** Empty, or why the engine is not ready. */
  error: string;
  /** The engine's error code, when it sent one. */
  code: string | undefined;
  /** The engine's readiness body, when it sent JSON. */
  body: Record<string, unknown> | undefined;
  checkedAt: number;
}

export interface UpstreamOptions {
  connectTimeoutMs: number;
  upstreamTimeoutMs: number;
  connections: number;
  readyIntervalMs: number;
  /** Authorization header value of background checks (none: no header). */
  probeAuthorization: string | undefined;
}

/** Error codes that mean the engine could not be reached or dropped the connection. */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH',
  'ENETDOWN', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_SOCKET', 'UND_ERR_CLOSED', 'UND_ERR_DESTROYED',
]);

function errorCodes(err: unknown): string[] {
  const out: string[] = [];
  const visit = (e: unknown, depth: number) => {
    if (!e || typeof e !== 'object' || depth > 3) return;
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') out.push(code);
    visit((e as { cause?: unknown }).cause, depth + 1);
    const errors = (e as { errors?: unknown }).errors;
    if (Array.isArray(errors)) for (const inner of errors) visit(inner, depth + 1);
  };
  visit(err, 0);
  return out;
}

/** True when an upstream failure means the engine is unreachable (502 upstream_unreachable). */
export function isUnreachable(err: unknown): boolean {
  return errorCodes(err).some((c) => UNREACHABLE_CODES.has(c));
}

/** Short description of an upstream failure for error messages. */
export function describe(err: unknown): string {
  const codes = errorCodes(err);
  const message = err instanceof Error && err.message ? err.message : String(err);
  return codes[0] && !message.includes(codes[0]) ? `${codes[0]}: ${message}` : message;
}

/** Maps a failed upstream request to the gateway's error. */
export function upstreamFailure(endpoint: string, err: unknown): BraidError {
  if (isUnreachable(err)) return new BraidError('upstream_unreachable', `engine ${endpoint} is unreachable (${describe(err)})`);
  return new BraidError('upstream_error', `request to engine ${endpoint} failed (${describe(err)})`);
}

/**
 * Codes of an engine's `GET /v1/ready` that describe the addressed branch,
 * not the engine (src/services/ops.ts): its absence, its failed storage
 * (writes refused, reads served) and its indexer. Requests still reach the
 * engine, which answers each for its own branch.
 */
const BRANCH_STATES: ReadonlySet<string> = new Set(['branch_not_found', 'storage_failure', 'indexer_failed']);

export class Upstream {
  readonly pool: Pool;
  /** Path prefix of the endpoint ("" for http://host:port). */
  readonly prefix: string;
  readiness: Readiness = {
    checked: false, reachable: false, ready: false, statusCode: 0, error: 'not checked yet', code: undefined, body: undefined, checkedAt: 0,
  };
  private inFlight: Promise<Readiness> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(readonly endpoint: string, private readonly probe: Route, private readonly options: UpstreamOptions) {
    const url = new URL(endpoint);
    this.prefix = url.pathname.replace(/\/+$/, '');
    this.pool = new Pool(url.origin, {
      connections: options.connections,
      pipelining: 1,
      keepAliveTimeout: 30_000,
      keepAliveMaxTimeout: 60_000,
      connect: { timeout: options.connectTimeoutMs },
      headersTimeout: options.upstreamTimeoutMs,
      bodyTimeout: options.upstreamTimeoutMs,
    });
  }

  /** The timeouts of a request a caller waits on briefly: the readiness check, a branch listing (5 s at most). */
  private get quick(): { headersTimeout: number; bodyTimeout: number } {
    const ms = Math.min(this.options.upstreamTimeoutMs, 5000);
    return { headersTimeout: ms, bodyTimeout: ms };
  }

  /** Starts the periodic readiness check. */
  start(): void {
    if (this.timer || this.closed) return;
    void this.check();
    this.timer = setInterval(() => void this.check(), this.options.readyIntervalMs);
    this.timer.unref();
  }

  /**
   * True while the engine's last readiness answer was a 5xx about the whole
   * engine (shutting down, or failing to read its store): proxying is gated
   * with 503 not_ready. Other failed answers (401, 404) do not gate; the
   * request will show why. Nor does an answer about the probed branch alone
   * ({@link BRANCH_STATES}): the probe is the first catalog branch on this
   * engine, and its absence, failed storage or stopped indexer must not
   * close the engine's other branches, nor its own reads, which the engine
   * serves (a black-box review saw every branch of an engine refused, and
   * opened again whenever a client's readiness check of a healthy branch
   * reset the state).
   */
  get notReady(): boolean {
    const r = this.readiness;
    return r.reachable && !r.ready && r.statusCode >= 500 && !(r.code !== undefined && BRANCH_STATES.has(r.code));
  }

  /** Headers that route a request of `route` on the engine. */
  static routeHeaders(route: Route): Record<string, string> {
    return { [DATABASE_HEADER]: route.upstreamDatabaseId, [BRANCH_HEADER]: route.upstreamBranchId };
  }

  /**
   * Checks the engine's GET /v1/ready now (joining a check already running).
   * `authorization` overrides the probe's header (the gateway's own /v1/ready
   * forwards the client's when no engine token is configured).
   */
  check(route: Route = this.probe, authorization = this.options.probeAuthorization): Promise<Readiness> {
    const shared = route === this.probe && authorization === this.options.probeAuthorization;
    if (shared && this.inFlight) return this.inFlight;
    const run = this.runCheck(route, authorization).then((r) => {
      if (shared || r.ready || !r.reachable) this.readiness = r;
      return r;
    });
    if (shared) {
      this.inFlight = run;
      void run.finally(() => {
        if (this.inFlight === run) this.inFlight = undefined;
      });
    }
    return run;
  }

  private async runCheck(route: Route, authorization: string | undefined): Promise<Readiness> {
    const headers: Record<string, string> = { ...Upstream.routeHeaders(route) };
    if (authorization) headers.authorization = authorization;
    const base = { checked: true, checkedAt: Date.now() };
    try {
      const res = await this.pool.request({
        method: 'GET',
        path: `${this.prefix}/v1/ready`,
        headers,
        ...this.quick,
      });
      const text = await res.body.text();
      let body: Record<string, unknown> | undefined;
      try {
        const parsed: unknown = JSON.parse(text);
        if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) body = parsed as Record<string, unknown>;
      } catch {
        body = undefined;
      }
      const ready = res.statusCode === 200 && body?.ready !== false;
      const engineError = typeof body?.error === 'string' ? body.error : '';
      const code = typeof body?.code === 'string' ? body.code : undefined;
      return {
        ...base,
        reachable: true,
        ready,
        statusCode: res.statusCode,
        error: ready ? '' : `engine ${this.endpoint} is not ready: ${engineError || `GET /v1/ready answered ${res.statusCode}`}`,
        code: ready ? undefined : code,
        body,
      };
    } catch (err) {
      return {
        ...base,
        reachable: false,
        ready: false,
        statusCode: 0,
        error: `engine ${this.endpoint} is unreachable (${describe(err)})`,
        code: undefined,
        body: undefined,
      };
    }
  }

  /** Sends a request to the engine (path is relative to the endpoint, with its query). */
  request(options: Omit<Dispatcher.RequestOptions, 'origin' | 'path'> & { path: string }): Promise<Dispatcher.ResponseData> {
    return this.pool.request({ ...options, path: `${this.prefix}${options.path}` });
  }

  /** GETs a JSON route; resolves with status and parsed body (undefined when not JSON). */
  /**
   * GETs a JSON route. `quick` bounds the wait as the readiness check does
   * (5 s at most): a branch listing that a request waits on, where one
   * stalled engine had held every look-up of an unknown branch, and
   * `GET /v1/branches`, for the whole upstream timeout (60 s; a black-box
   * review).
   */
  async getJson(path: string, headers: Record<string, string | string[]>, quick = false): Promise<{ status: number; body: unknown; headers: Record<string, unknown> }> {
    const res = await this.request({ method: 'GET', path, headers, ...(quick ? this.quick : {}) });
    const text = await res.body.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    return { status: res.statusCode, body, headers: res.headers };
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.pool.close().catch(() => this.pool.destroy());
  }
}
