/**
 * Gateway configuration: defaults, overridden by a JSON config file,
 * overridden by environment variables, overridden by command-line flags.
 * Tokens are the union of all three sources. Documented in docs/gateway.md.
 */
import { BraidError } from '../errors.js';
import { readFileSync } from 'node:fs';
import { conflictingScopes, parseTokenSpec, sendableToken, type TokenSpec } from '../auth.js';
import { NAME_PATTERN, isName } from '../names.js';
import {
  choiceSetting,
  defaultMaxConnections,
  LOG_LEVELS,
  MAX_BODY_BYTES,
  MAX_OPEN_CONNECTIONS,
  MAX_PORT,
  MAX_TIMER_MS,
  MAX_WHOLE,
  MAX_WINDOW_MS,
  numberSetting,
  textSetting,
  tokensSetting,
  urlSetting,
} from '../settings.js';

/** Keep-alive connections one engine pool may hold at most. */
const MAX_CONNECTIONS = 65_535;

/** One routable branch of the catalog. */
export interface CatalogBranch {
  branch_id: string;
  /** Engine base URL (http://host:port); defaults to the gateway's engine URL. */
  endpoint: string;
  /** Database name on the engine, when it differs from the catalog's (default: the catalog name). */
  upstream_database_id?: string;
  /** Branch name on the engine, when it differs from the catalog's (default: the catalog name). */
  upstream_branch_id?: string;
}

export interface CatalogDatabase {
  database_id: string;
  /** Branch used when a request names this database but no branch (default "main"). */
  default_branch?: string;
  branches: CatalogBranch[];
  /**
   * Whether branches the engine reports under this database's name (a
   * restored branch, say) are routable without listing them (default true);
   * false makes `branches` the exact list.
   */
  discover_branches?: boolean;
}

export interface Catalog {
  databases: CatalogDatabase[];
}

export interface GatewayConfig {
  host: string;
  port: number;
  /** Bearer tokens accepted from clients, with their scopes. Never empty once resolved. */
  tokens: TokenSpec[];
  /** Failed authentications allowed per client address per window before 429 (0: no limit). */
  authFailureMax: number;
  authFailureWindowMs: number;
  /** Requests per token per window; 0 turns the limiter off. */
  rateLimitMax: number;
  rateWindowMs: number;
  /** Default engine: the single-engine catalog, and the endpoint of catalog branches without one. */
  engineUrl: string;
  /** When set, sent to engines as `Authorization: Bearer <engineToken>` instead of the client's header. */
  engineToken: string | undefined;
  catalog: Catalog;
  /** Database used when a request has no x-braid-database header. */
  defaultDatabase: string;
  /** Period of the background readiness check of each engine. */
  readyIntervalMs: number;
  /** Connect timeout toward an engine. */
  connectTimeoutMs: number;
  /** Headers and body timeout of a proxied request. */
  upstreamTimeoutMs: number;
  /** Longest a client may take to send a whole request (headers and body); 0 for no limit. */
  requestTimeoutMs: number;
  /** Most client connections held open at once (0: no cap); past it a new connection is closed as it is accepted. */
  maxConnections: number;
  /** Largest request body on any route (400 body_too_large past it; ./body.ts). */
  bodyLimitBytes: number;
  /** Keep-alive connections per engine endpoint. */
  connectionsPerEngine: number;
  logLevel: string;
}

export const GATEWAY_DEFAULTS: Omit<GatewayConfig, 'catalog' | 'tokens'> = {
  host: '127.0.0.1',
  port: 8081,
  rateLimitMax: 100,
  rateWindowMs: 1000,
  authFailureMax: 20,
  authFailureWindowMs: 60_000,
  engineUrl: 'http://127.0.0.1:8080',
  engineToken: undefined,
  defaultDatabase: 'default',
  readyIntervalMs: 500,
  connectTimeoutMs: 2000,
  upstreamTimeoutMs: 60_000,
  requestTimeoutMs: 60_000,
  maxConnections: defaultMaxConnections(),
  bodyLimitBytes: 16 * 1024 * 1024,
  connectionsPerEngine: 64,
  logLevel: 'warn',
};

export const DEFAULT_DATABASE = 'default';
export const DEFAULT_BRANCH = 'main';

/**
 * Settings given on the command line: text from `braid gateway`, numbers
 * from a program. The environment's variables are read by
 * {@link resolveGatewayConfig}, not by the command line parser.
 */
export interface GatewayFlags {
  host?: string;
  port?: number | string;
  config?: string;
  engine?: string;
  token?: string[];
  rateLimit?: number | string;
  rateWindow?: number | string;
  authFailureLimit?: number | string;
  logLevel?: string;
}

/** A gateway setting it cannot start with: `invalid_config` of the one error table. */
export class GatewayConfigError extends BraidError {
  constructor(message: string) {
    super('invalid_config', message);
    this.name = 'GatewayConfigError';
  }
}

function fail(message: string): never {
  throw new GatewayConfigError(message);
}

/**
 * One entry per token, from every source. A token listed in two sources with
 * the same scope is one entry; with two scopes the gateway refuses to start
 * (see conflictingScopes): no choice between them would be the one meant.
 */
function uniqueTokens(sources: Array<{ name: string; specs: TokenSpec[] | undefined }>): TokenSpec[] {
  const all = sources.flatMap(({ name, specs }) => (specs ?? []).map((spec, i) => ({ spec, where: `${name}[${i}]` })));
  const conflict = conflictingScopes(all);
  if (conflict) fail(`gateway tokens are invalid: ${conflict}`);
  return [...new Map(all.map(({ spec }) => [spec.token, spec])).values()];
}

/** Normalises an engine URL: http(s) only, no trailing slash, no query. */
export function normalizeEndpoint(value: string, name = 'endpoint'): string {
  return endpointOf(checked(() => urlSetting(value, name) ?? fail(`${name} is required`)));
}

/** An engine URL as the catalog holds it: no trailing slash. */
function endpointOf(url: URL): string {
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
}

/** Runs `read`, turning a setting it refuses (src/settings.ts) into a GatewayConfigError. */
function checked<T>(read: () => T): T {
  try {
    return read();
  } catch (err) {
    if (err instanceof BraidError && err.code === 'invalid_config' && !(err instanceof GatewayConfigError)) fail(err.message);
    throw err;
  }
}

/** Checks a catalog and fills in endpoints from the default engine URL; `at` is where it was given (`catalog`). */
export function parseCatalog(value: unknown, engineUrl: string, at = 'catalog'): Catalog {
  return checked(() => {
    checkShape(value, CATALOG_SHAPE, at);
    return readCatalog(value as { databases: unknown[] }, engineUrl, `${at}.databases`);
  });
}

/** A name of the catalog (a database or branch, the catalog's or the engine's): the engine's name rule. */
function catalogName(value: unknown, where: string): string | undefined {
  const name = textSetting(value, where);
  if (name !== undefined && !isName(name)) fail(`${where} ${JSON.stringify(name)} must be a name matching ${NAME_PATTERN}`);
  return name;
}

function readCatalog(value: { databases: unknown[] }, engineUrl: string, at: string): Catalog {
  const { databases } = value;
  if (!Array.isArray(databases)) fail(`${at} must be a list of databases`);
  if (databases.length === 0) fail(`${at} must not be empty`);
  const seenDb = new Set<string>();
  return {
    databases: databases.map((d, i) => {
      const where = `${at}[${i}]`;
      const db = d as Record<string, unknown>;
      const database_id = catalogName(db.database_id, `${where}.database_id`) ?? fail(`${where}.database_id is required`);
      if (seenDb.has(database_id)) fail(`database ${database_id} appears twice in the catalog`);
      seenDb.add(database_id);
      if (!Array.isArray(db.branches) || db.branches.length === 0) fail(`${where}.branches must be a non-empty list`);
      const seenBranch = new Set<string>();
      const branches = (db.branches as unknown[]).map((b, j) => {
        const bwhere = `${where}.branches[${j}]`;
        const br = b as Record<string, unknown>;
        const branch_id = catalogName(br.branch_id, `${bwhere}.branch_id`) ?? fail(`${bwhere}.branch_id is required`);
        if (seenBranch.has(branch_id)) fail(`branch ${database_id}/${branch_id} appears twice in the catalog`);
        seenBranch.add(branch_id);
        const endpoint = normalizeEndpoint(textSetting(br.endpoint, `${bwhere}.endpoint`) ?? engineUrl, `${bwhere}.endpoint`);
        const out: CatalogBranch = { branch_id, endpoint };
        const upDb = catalogName(br.upstream_database_id, `${bwhere}.upstream_database_id`);
        const upBranch = catalogName(br.upstream_branch_id, `${bwhere}.upstream_branch_id`);
        if (upDb) out.upstream_database_id = upDb;
        if (upBranch) out.upstream_branch_id = upBranch;
        return out;
      });
      const default_branch = catalogName(db.default_branch, `${where}.default_branch`);
      if (default_branch && !seenBranch.has(default_branch)) fail(`${where}.default_branch ${default_branch} is not one of its branches`);
      const out: CatalogDatabase = { database_id, branches };
      if (default_branch) out.default_branch = default_branch;
      if (db.discover_branches !== undefined) out.discover_branches = db.discover_branches as boolean;
      return out;
    }),
  };
}

/**
 * What a config file may hold: its keys, nested ones included, and the JSON
 * type of each value. Ranges and formats are checked where each setting is
 * read (src/settings.ts); this refuses what those would not see: a
 * misspelt key anywhere (`rate_limit.windw_ms` had been ignored, leaving the
 * default), a number written as a string, or null.
 */
type Shape = 'string' | 'number' | 'boolean' | 'tokens' | readonly [Shape] | { readonly [key: string]: Shape };

const BRANCH_SHAPE: Shape = { branch_id: 'string', endpoint: 'string', upstream_database_id: 'string', upstream_branch_id: 'string' };
const DATABASE_SHAPE: Shape = { database_id: 'string', default_branch: 'string', discover_branches: 'boolean', branches: [BRANCH_SHAPE] };
const CATALOG_SHAPE: Shape = { databases: [DATABASE_SHAPE] };
const WINDOW_SHAPE: Shape = { max: 'number', window_ms: 'number' };
const FILE_SHAPE: Shape = {
  host: 'string', port: 'number', tokens: 'tokens', rate_limit: WINDOW_SHAPE, auth_failures: WINDOW_SHAPE, engine_url: 'string',
  engine_token: 'string', default_database: 'string', databases: [DATABASE_SHAPE], catalog: CATALOG_SHAPE, ready_interval_ms: 'number',
  connect_timeout_ms: 'number', upstream_timeout_ms: 'number', request_timeout_ms: 'number', body_limit_bytes: 'number',
  connections_per_engine: 'number', log_level: 'string', max_connections: 'number',
};

/** Checks `value` against `shape`; `at` is its path in the file (`databases[0].branches[1]`). */
function checkShape(value: unknown, shape: Shape, at: string): void {
  if (value === null) fail(`${at} is null; leave the key out to take its default`);
  if (shape === 'tokens') return; // a string or a list of them and {token, scope}: tokensSetting reads it
  if (typeof shape === 'string') {
    if (typeof value !== shape) fail(`${at} must be a JSON ${shape}, got ${JSON.stringify(value)}`);
    return;
  }
  if (Array.isArray(shape)) {
    if (!Array.isArray(value)) fail(`${at} must be a list`);
    for (const [i, item] of value.entries()) checkShape(item, shape[0], `${at}[${i}]`);
    return;
  }
  if (typeof value !== 'object' || Array.isArray(value)) fail(`${at} must be an object`);
  const fields = shape as { readonly [key: string]: Shape };
  for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
    const path = at ? `${at}.${key}` : key;
    const inner = Object.hasOwn(fields, key) ? fields[key] : undefined;
    if (inner === undefined) fail(`unknown key ${JSON.stringify(path)}`);
    // unset (a programmatic catalog's optional field); JSON has no undefined
    if (item !== undefined) checkShape(item, inner, path);
  }
}

/** The catalog of a single engine: database "default", branch "main". */
export function singleEngineCatalog(engineUrl: string): Catalog {
  return { databases: [{ database_id: DEFAULT_DATABASE, branches: [{ branch_id: DEFAULT_BRANCH, endpoint: engineUrl }] }] };
}

/** Reads and parses a JSON config file. */
export function readConfigFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    fail(`cannot read gateway config ${file}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    // a byte order mark, as some editors save JSON, is not JSON.parse's (request bodies take one too)
    parsed = JSON.parse(text.startsWith('\uFEFF') ? text.slice(1) : text);
  } catch (err) {
    fail(`gateway config ${file} is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) fail(`gateway config ${file} must be a JSON object`);
  return parsed as Record<string, unknown>;
}

/**
 * The token the gateway sends to engines: a bearer token by the rules of
 * every other (src/auth.ts), the secret alone -- a control character or a
 * space had been taken, and every proxied request then failed with 502.
 */
function engineTokenSetting(value: unknown, name: string): string | undefined {
  const token = textSetting(value, name);
  return token === undefined ? undefined : sendableToken(token, name);
}

/** The first of `values` that is set; each was checked when the list was built, the ones it overrides too. */
function firstOf<T>(...values: Array<T | undefined>): T | undefined {
  return values.find((v) => v !== undefined);
}

/**
 * Resolves the gateway configuration from a config file (flags.config or
 * BRAID_GATEWAY_CONFIG), the environment and flags. Every setting given is
 * checked (src/settings.ts), one a flag overrides too; a bad one is a
 * GatewayConfigError naming it and its value.
 */
export function resolveGatewayConfig(flags: GatewayFlags = {}, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  return checked(() => resolve(flags, env));
}

function resolve(flags: GatewayFlags, env: NodeJS.ProcessEnv): GatewayConfig {
  const configPath = firstOf(textSetting(flags.config, '--config'), textSetting(env.BRAID_GATEWAY_CONFIG, 'BRAID_GATEWAY_CONFIG'));
  const file = configPath ? readConfigFile(configPath) : {};
  try {
    checkShape(file, FILE_SHAPE, '');
  } catch (err) {
    if (err instanceof GatewayConfigError) fail(`${err.message} in gateway config ${configPath}`);
    throw err;
  }
  if (file.catalog !== undefined && file.databases !== undefined) {
    fail(`gateway config ${configPath} gives both "catalog" and "databases"; give the catalog once`);
  }
  const rateFile = (file.rate_limit ?? {}) as Record<string, unknown>;
  const authFile = (file.auth_failures ?? {}) as Record<string, unknown>;
  const d = GATEWAY_DEFAULTS;
  /** A whole number given by a flag, a variable or a file key, in that order of precedence. */
  const number = (sources: { flag?: [unknown, string]; env?: string; file: [unknown, string] }, min: number, max: number, fallback: number): number =>
    firstOf(
      sources.flag ? numberSetting(sources.flag[0], sources.flag[1], min, max) : undefined,
      sources.env ? numberSetting(env[sources.env], sources.env, min, max) : undefined,
      numberSetting(sources.file[0], sources.file[1], min, max),
    ) ?? fallback;

  const engineUrl = endpointOf(
    firstOf(urlSetting(flags.engine, '--engine'), urlSetting(env.BRAID_ENGINE_URL, 'BRAID_ENGINE_URL'), urlSetting(file.engine_url, 'engine_url'))
      ?? new URL(d.engineUrl),
  );
  const catalog = file.catalog !== undefined
    ? parseCatalog(file.catalog, engineUrl, 'catalog')
    : file.databases !== undefined
      ? readCatalog({ databases: file.databases as unknown[] }, engineUrl, 'databases')
      : singleEngineCatalog(engineUrl);

  const tokens = uniqueTokens([
    { name: 'tokens', specs: tokensSetting(file.tokens, 'tokens') },
    { name: 'BRAID_GATEWAY_TOKENS', specs: tokensSetting(env.BRAID_GATEWAY_TOKENS, 'BRAID_GATEWAY_TOKENS') },
    { name: '--token', specs: tokensSetting(flags.token, '--token') },
  ]);
  if (tokens.length === 0) {
    fail('the gateway needs at least one bearer token: --token, BRAID_GATEWAY_TOKENS or "tokens" in the config file');
  }

  const defaultDatabase = catalogName(file.default_database, 'default_database')
    ?? (catalog.databases.some((db) => db.database_id === DEFAULT_DATABASE) ? DEFAULT_DATABASE : catalog.databases[0]!.database_id);
  if (!catalog.databases.some((db) => db.database_id === defaultDatabase)) {
    fail(`default_database ${defaultDatabase} is not in the catalog`);
  }

  return {
    host: firstOf(textSetting(flags.host, '--host'), textSetting(env.BRAID_GATEWAY_HOST, 'BRAID_GATEWAY_HOST'), textSetting(file.host, 'host')) ?? d.host,
    port: number({ flag: [flags.port, '--port'], env: 'BRAID_GATEWAY_PORT', file: [file.port, 'port'] }, 0, MAX_PORT, d.port),
    tokens,
    authFailureMax: number(
      { flag: [flags.authFailureLimit, '--auth-failure-limit'], env: 'BRAID_AUTH_FAILURE_LIMIT', file: [authFile.max, 'auth_failures.max'] },
      0,
      MAX_WHOLE,
      d.authFailureMax,
    ),
    authFailureWindowMs: number({ file: [authFile.window_ms, 'auth_failures.window_ms'] }, 1, MAX_WINDOW_MS, d.authFailureWindowMs),
    rateLimitMax: number({ flag: [flags.rateLimit, '--rate-limit'], env: 'BRAID_RATE_LIMIT', file: [rateFile.max, 'rate_limit.max'] }, 0, MAX_WHOLE, d.rateLimitMax),
    rateWindowMs: number(
      { flag: [flags.rateWindow, '--rate-window'], env: 'BRAID_RATE_WINDOW_MS', file: [rateFile.window_ms, 'rate_limit.window_ms'] },
      1,
      MAX_WINDOW_MS,
      d.rateWindowMs,
    ),
    engineUrl,
    engineToken: firstOf(engineTokenSetting(env.BRAID_ENGINE_TOKEN, 'BRAID_ENGINE_TOKEN'), engineTokenSetting(file.engine_token, 'engine_token')) ?? d.engineToken,
    catalog,
    defaultDatabase,
    readyIntervalMs: number({ file: [file.ready_interval_ms, 'ready_interval_ms'] }, 1, MAX_TIMER_MS, d.readyIntervalMs),
    connectTimeoutMs: number({ file: [file.connect_timeout_ms, 'connect_timeout_ms'] }, 1, MAX_TIMER_MS, d.connectTimeoutMs),
    upstreamTimeoutMs: number({ file: [file.upstream_timeout_ms, 'upstream_timeout_ms'] }, 1, MAX_TIMER_MS, d.upstreamTimeoutMs),
    requestTimeoutMs: number({ file: [file.request_timeout_ms, 'request_timeout_ms'] }, 0, MAX_TIMER_MS, d.requestTimeoutMs),
    maxConnections: number({ env: 'BRAID_MAX_CONNECTIONS', file: [file.max_connections, 'max_connections'] }, 0, MAX_OPEN_CONNECTIONS, d.maxConnections),
    bodyLimitBytes: number({ file: [file.body_limit_bytes, 'body_limit_bytes'] }, 1, MAX_BODY_BYTES, d.bodyLimitBytes),
    connectionsPerEngine: number({ file: [file.connections_per_engine, 'connections_per_engine'] }, 1, MAX_CONNECTIONS, d.connectionsPerEngine),
    logLevel:
      firstOf(choiceSetting(flags.logLevel, '--log-level', LOG_LEVELS), choiceSetting(env.BRAID_LOG_LEVEL, 'BRAID_LOG_LEVEL', LOG_LEVELS), choiceSetting(file.log_level, 'log_level', LOG_LEVELS))
      ?? d.logLevel,
  };
}

/** Fills a partial configuration (programmatic use) with defaults and a single-engine catalog. */
export function gatewayConfig(partial: Omit<Partial<GatewayConfig>, 'tokens'> & { tokens: Array<string | TokenSpec> }): GatewayConfig {
  const engineUrl = normalizeEndpoint(partial.engineUrl ?? GATEWAY_DEFAULTS.engineUrl, 'engine URL');
  const catalog = partial.catalog ? parseCatalog(partial.catalog, engineUrl) : singleEngineCatalog(engineUrl);
  if (partial.tokens.length === 0) fail('the gateway needs at least one bearer token');
  return {
    ...GATEWAY_DEFAULTS,
    ...partial,
    tokens: uniqueTokens([{ name: 'tokens', specs: partial.tokens.map((t) => (typeof t === 'string' ? parseTokenSpec(t) : t)) }]),
    engineUrl,
    catalog,
    defaultDatabase: partial.defaultDatabase ?? (catalog.databases.some((db) => db.database_id === DEFAULT_DATABASE) ? DEFAULT_DATABASE : catalog.databases[0]!.database_id),
  };
}
