/**
 * How a start-up setting of `braid serve` or `braid gateway` is read: a
 * flag, an environment variable or a gateway config file key, each checked
 * here and refused with `invalid_config` naming where it came from and the
 * value given. docs/operations.md, "Settings are checked".
 *
 * - Absent (undefined) is unset: the next source or the default applies.
 *   Set but empty (`BRAID_PORT=`) is refused, never taken as unset: a
 *   variable set to nothing is a script that lost a value. A gateway config
 *   file is checked as a whole first (src/gateway/config.ts): no unknown
 *   key at any depth, numbers as JSON numbers, no null.
 * - Whole numbers are plain decimal digits within a range: Number() had read
 *   `0x50` as port 80, `1e30` as history epochs and an empty string as 0.
 */
import { readFileSync } from 'node:fs';
import { BraidError, type ErrorCode } from './errors.js';
import { conflictingScopes, parseTokenSpec, type TokenSpec } from './auth.js';

/** The largest whole number a JavaScript number holds exactly (and the engine takes). */
export const MAX_WHOLE = Number.MAX_SAFE_INTEGER;
/** The longest delay a Node timer takes; a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2_147_483_647;
export const MAX_PORT = 65_535;
/** The largest request body a server may be told to take (1 GiB); a body is held in memory whole. */
export const MAX_BODY_BYTES = 1024 ** 3;
/** The longest rate-limit or lockout window (24 h), so that Retry-After stays a plain number of seconds. */
export const MAX_WINDOW_MS = 24 * 60 * 60 * 1000;
/** The most connections a server may be told to hold open at once (0: no cap). */
export const MAX_OPEN_CONNECTIONS = 1_000_000;

/**
 * The connections a server holds open at once by default: half the
 * process's soft limit of open files (`ulimit -n`), the other half left for
 * the engine's own files (logs, record, vector and text index files of every
 * branch), or 10,000 when the limit cannot be read. A black-box review held
 * 20,000 idle connections, the whole limit, and the server could answer
 * nothing until they closed; past the cap Node closes a new connection as it
 * is accepted.
 */
export function defaultMaxConnections(limits = '/proc/self/limits'): number {
  try {
    const line = readFileSync(limits, 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
    if (soft === 'unlimited') return MAX_OPEN_CONNECTIONS;
    const n = Number(soft);
    if (Number.isSafeInteger(n) && n > 0) return Math.max(64, Math.floor(n / 2));
  } catch {
    // not Linux, or no /proc
  }
  return 10_000;
}

/** pino's levels, quietest first. */
export const LOG_LEVELS = ['silent', 'fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const;

function refuse(name: string, problem: string, code: ErrorCode = 'invalid_config'): never {
  throw new BraidError(code, `${name} ${problem}`);
}

const absent = (value: unknown): value is undefined | null => value === undefined || value === null;

/** A non-empty string, or undefined when absent. */
export function textSetting(value: unknown, name: string, code: ErrorCode = 'invalid_config'): string | undefined {
  if (absent(value)) return undefined;
  if (typeof value !== 'string') refuse(name, `must be a string, got ${JSON.stringify(value)}`, code);
  if (value.trim() === '') refuse(name, 'is set but empty; unset it to take the default', code);
  return value;
}

/** A whole number from `min` to `max`: decimal digits as text, or a JSON number from a config file. */
export function numberSetting(value: unknown, name: string, min: number, max: number): number | undefined {
  if (absent(value)) return undefined;
  if (typeof value === 'string') textSetting(value, name);
  const n = typeof value === 'number' ? value : typeof value === 'string' && /^[0-9]+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    refuse(name, `must be a whole number from ${min} to ${max} in decimal digits, got ${JSON.stringify(value)}`);
  }
  return n;
}

/** One of `choices`. */
export function choiceSetting<T extends string>(value: unknown, name: string, choices: readonly T[]): T | undefined {
  const text = textSetting(value, name);
  if (text === undefined) return undefined;
  if (!(choices as readonly string[]).includes(text)) refuse(name, `must be one of ${choices.join(', ')}, got ${JSON.stringify(text)}`);
  return text as T;
}

/** An absolute http or https URL without query or fragment. */
export function urlSetting(value: unknown, name: string, code: ErrorCode = 'invalid_config'): URL | undefined {
  const text = textSetting(value, name, code);
  if (text === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    refuse(name, `must be an absolute http(s) URL, got ${JSON.stringify(text)}`, code);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') refuse(name, `must use http or https, got ${JSON.stringify(text)}`, code);
  if (url.search || url.hash) refuse(name, `must not have a query or fragment, got ${JSON.stringify(text)}`, code);
  // fetch refuses a URL with credentials in it, which had read as a server that cannot be reached
  if (url.username || url.password) refuse(name, 'must not hold a user name or password (a bearer token is given on its own)', code);
  return url;
}

/**
 * Bearer tokens: a comma-separated string (an environment variable), or a
 * list of `secret[:scope]` strings and, in a config file, `{token, scope}`
 * objects. Blank entries are skipped; a setting that names no token at all
 * is refused, since an engine without tokens accepts any request.
 */
export function tokensSetting(value: unknown, name: string): TokenSpec[] | undefined {
  if (absent(value)) return undefined;
  // a comma separates tokens in every source, a flag's values and a file's list included (a
  // bearer token cannot hold one, RFC 6750 2.1): `--auth-token a,b` had been one token "a,b"
  const raw: unknown = typeof value === 'string' ? value.split(',') : Array.isArray(value) ? value.flatMap((v: unknown) => (typeof v === 'string' ? v.split(',') : [v])) : value;
  if (!Array.isArray(raw)) refuse(name, 'must be a list of tokens');
  const tokens: TokenSpec[] = [];
  raw.forEach((entry: unknown, i) => {
    if (typeof entry === 'string' && entry.trim() === '') return;
    const spec = typeof entry === 'string' ? entry.trim() : (entry as { token?: unknown; scope?: unknown });
    tokens.push(parseTokenSpec(spec, `${name}[${i}]`));
  });
  if (tokens.length === 0) refuse(name, `is set but names no token, got ${JSON.stringify(value)}`);
  const conflict = conflictingScopes(tokens.map((spec, i) => ({ spec, where: `${name}[${i}]` })));
  if (conflict) refuse(name, `is invalid: ${conflict}`);
  return tokens;
}


/** A failure to listen (port taken, host unknown), as the setting it is about. */
export function listenFailure(err: unknown, host: string, port: number): unknown {
  const e = err as NodeJS.ErrnoException;
  if (typeof e?.code !== 'string' || typeof e.syscall !== 'string') return err;
  return new BraidError('invalid_config', `cannot listen on host ${JSON.stringify(host)} port ${port}: ${e.message}`);
}
