/**
 * Gateway configuration: defaults, overridden by a JSON config file,
 * overridden by environment variables, overridden by command-line flags.
 * Tokens are the union of all three sources. Documented in docs/gateway.md.
 */
import { BraidError } from '../errors.js';
import { readFileSync } from 'node:fs';
import { allows, parseTokenSpec, type TokenSpec } from '../auth.js';

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
  /** Largest put body the gateway buffers to inject routing fields; other bodies are streamed. */
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
  bodyLimitBytes: 16 * 1024 * 1024,
  connectionsPerEngine: 64,
  logLevel: 'warn',
};

export const DEFAULT_DATABASE = 'default';
export const DEFAULT_BRANCH = 'main';

/** Settings given on the command line (commander has already merged its env fallbacks). */
export interface GatewayFlags {
  host?: string;
  port?: number;
  config?: string;
  engine?: string;
  token?: string[];
  rateLimit?: number;
  rateWindow?: number;
  authFailureLimit?: number;
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

function int(value: unknown, name: string): number | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  const n = typeof value === 'number' ? value : Number(value);
  if (!Number.isInteger(n) || n < 0) fail(`${name} must be a non-negative integer, got ${JSON.stringify(value)}`);
  return n;
}

function str(value: unknown, name: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string' || value === '') fail(`${name} must be a non-empty string`);
  return value;
}

/** Tokens as `secret`, `secret:scope` or (in the config file) `{token, scope}`. */
function tokenList(value: unknown, name: string): TokenSpec[] {
  if (value === undefined || value === null) return [];
  const raw = typeof value === 'string' ? value.split(',') : value;
  if (!Array.isArray(raw)) fail(`${name} must be a list of tokens`);
  const out: TokenSpec[] = [];
  raw.forEach((t, i) => {
    if (typeof t === 'string' && t.trim() === '') return;
    try {
      out.push(parseTokenSpec(typeof t === 'string' ? t.trim() : (t as { token?: unknown; scope?: unknown }), `${name}[${i}]`));
    } catch (err) {
      fail((err as Error).message);
    }
  });
  return out;
}

/** One entry per token; a token listed twice keeps its widest scope. */
function uniqueTokens(specs: TokenSpec[]): TokenSpec[] {
  const byToken = new Map<string, TokenSpec>();
  for (const spec of specs) {
    const seen = byToken.get(spec.token);
    if (!seen || allows(spec.scope, seen.scope)) byToken.set(spec.token, spec);
  }
  return [...byToken.values()];
}

/** Normalises an engine URL: http(s) only, no trailing slash, no query. */
export function normalizeEndpoint(value: string, name = 'endpoint'): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    fail(`${name} must be an absolute http(s) URL, got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') fail(`${name} must use http or https, got ${JSON.stringify(value)}`);
  if (url.search || url.hash) fail(`${name} must not have a query or fragment, got ${JSON.stringify(value)}`);
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
}

/** Checks a catalog and fills in endpoints from the default engine URL. */
export function parseCatalog(value: unknown, engineUrl: string): Catalog {
  if (typeof value !== 'object' || value === null || !Array.isArray((value as Catalog).databases)) {
    fail('catalog must be an object with a "databases" list');
  }
  const databases = (value as { databases: unknown[] }).databases;
  if (databases.length === 0) fail('catalog.databases must not be empty');
  const seenDb = new Set<string>();
  return {
    databases: databases.map((d, i) => {
      const where = `databases[${i}]`;
      if (typeof d !== 'object' || d === null) fail(`${where} must be an object`);
      const db = d as Record<string, unknown>;
      const database_id = str(db.database_id, `${where}.database_id`) ?? fail(`${where}.database_id is required`);
      if (seenDb.has(database_id)) fail(`database ${database_id} appears twice in the catalog`);
      seenDb.add(database_id);
      if (!Array.isArray(db.branches) || db.branches.length === 0) fail(`${where}.branches must be a non-empty list`);
      const seenBranch = new Set<string>();
      const branches = (db.branches as unknown[]).map((b, j) => {
        const bwhere = `${where}.branches[${j}]`;
        if (typeof b !== 'object' || b === null) fail(`${bwhere} must be an object`);
        const br = b as Record<string, unknown>;
        const branch_id = str(br.branch_id, `${bwhere}.branch_id`) ?? fail(`${bwhere}.branch_id is required`);
        if (seenBranch.has(branch_id)) fail(`branch ${database_id}/${branch_id} appears twice in the catalog`);
        seenBranch.add(branch_id);
        const endpoint = normalizeEndpoint(str(br.endpoint, `${bwhere}.endpoint`) ?? engineUrl, `${bwhere}.endpoint`);
        const out: CatalogBranch = { branch_id, endpoint };
        const upDb = str(br.upstream_database_id, `${bwhere}.upstream_database_id`);
        const upBranch = str(br.upstream_branch_id, `${bwhere}.upstream_branch_id`);
        if (upDb) out.upstream_database_id = upDb;
        if (upBranch) out.upstream_branch_id = upBranch;
        return out;
      });
      const default_branch = str(db.default_branch, `${where}.default_branch`);
      if (default_branch && !seenBranch.has(default_branch)) fail(`${where}.default_branch ${default_branch} is not one of its branches`);
      const out: CatalogDatabase = { database_id, branches };
      if (default_branch) out.default_branch = default_branch;
      if (db.discover_branches !== undefined) {
        if (typeof db.discover_branches !== 'boolean') fail(`${where}.discover_branches must be true or false`);
        out.discover_branches = db.discover_branches;
      }
      return out;
    }),
  };
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
    parsed = JSON.parse(text);
  } catch (err) {
    fail(`gateway config ${file} is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) fail(`gateway config ${file} must be a JSON object`);
  return parsed as Record<string, unknown>;
}

const FILE_KEYS = new Set([
  'host', 'port', 'tokens', 'rate_limit', 'auth_failures', 'engine_url', 'engine_token', 'default_database', 'databases', 'catalog',
  'ready_interval_ms', 'connect_timeout_ms', 'upstream_timeout_ms', 'request_timeout_ms', 'body_limit_bytes', 'connections_per_engine', 'log_level',
]);

/**
 * Resolves the gateway configuration from a config file (flags.config or
 * BRAID_GATEWAY_CONFIG), the environment and flags.
 */
export function resolveGatewayConfig(flags: GatewayFlags = {}, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  const configPath = flags.config ?? (env.BRAID_GATEWAY_CONFIG || undefined);
  const file = configPath ? readConfigFile(configPath) : {};
  for (const key of Object.keys(file)) {
    if (!FILE_KEYS.has(key)) fail(`unknown key ${JSON.stringify(key)} in gateway config${configPath ? ` ${configPath}` : ''}`);
  }
  const rl = file.rate_limit;
  if (rl !== undefined && (typeof rl !== 'object' || rl === null)) fail('rate_limit must be an object {max, window_ms}');
  const rateFile = (rl ?? {}) as Record<string, unknown>;
  const af = file.auth_failures;
  if (af !== undefined && (typeof af !== 'object' || af === null)) fail('auth_failures must be an object {max, window_ms}');
  const authFile = (af ?? {}) as Record<string, unknown>;
  const d = GATEWAY_DEFAULTS;

  const engineUrl = normalizeEndpoint(
    flags.engine ?? (env.BRAID_ENGINE_URL || undefined) ?? str(file.engine_url, 'engine_url') ?? d.engineUrl,
    'engine URL',
  );
  const catalogSource = file.catalog ?? (file.databases !== undefined ? { databases: file.databases } : undefined);
  const catalog = catalogSource === undefined ? singleEngineCatalog(engineUrl) : parseCatalog(catalogSource, engineUrl);

  const tokens = uniqueTokens([
    ...tokenList(file.tokens, 'tokens'),
    ...tokenList(env.BRAID_GATEWAY_TOKENS, 'BRAID_GATEWAY_TOKENS'),
    ...tokenList(flags.token, '--token'),
  ]);
  if (tokens.length === 0) {
    fail('the gateway needs at least one bearer token: --token, BRAID_GATEWAY_TOKENS or "tokens" in the config file');
  }

  const defaultDatabase = str(file.default_database, 'default_database')
    ?? (catalog.databases.some((db) => db.database_id === DEFAULT_DATABASE) ? DEFAULT_DATABASE : catalog.databases[0]!.database_id);
  if (!catalog.databases.some((db) => db.database_id === defaultDatabase)) {
    fail(`default_database ${defaultDatabase} is not in the catalog`);
  }

  const pick = (flag: number | undefined, envName: string, fileValue: unknown, fileName: string, fallback: number): number =>
    flag ?? int(env[envName], envName) ?? int(fileValue, fileName) ?? fallback;

  const rateWindowMs = pick(flags.rateWindow, 'BRAID_RATE_WINDOW_MS', rateFile.window_ms, 'rate_limit.window_ms', d.rateWindowMs);
  if (rateWindowMs === 0) fail('the rate window must be at least 1 ms');

  return {
    host: flags.host ?? (env.BRAID_GATEWAY_HOST || undefined) ?? str(file.host, 'host') ?? d.host,
    port: pick(flags.port, 'BRAID_GATEWAY_PORT', file.port, 'port', d.port),
    tokens,
    authFailureMax: pick(flags.authFailureLimit, 'BRAID_AUTH_FAILURE_LIMIT', authFile.max, 'auth_failures.max', d.authFailureMax),
    authFailureWindowMs: int(authFile.window_ms, 'auth_failures.window_ms') || d.authFailureWindowMs,
    rateLimitMax: pick(flags.rateLimit, 'BRAID_RATE_LIMIT', rateFile.max, 'rate_limit.max', d.rateLimitMax),
    rateWindowMs,
    engineUrl,
    engineToken: (env.BRAID_ENGINE_TOKEN || undefined) ?? str(file.engine_token, 'engine_token') ?? d.engineToken,
    catalog,
    defaultDatabase,
    readyIntervalMs: int(file.ready_interval_ms, 'ready_interval_ms') || d.readyIntervalMs,
    connectTimeoutMs: int(file.connect_timeout_ms, 'connect_timeout_ms') || d.connectTimeoutMs,
    upstreamTimeoutMs: int(file.upstream_timeout_ms, 'upstream_timeout_ms') || d.upstreamTimeoutMs,
    requestTimeoutMs: int(file.request_timeout_ms, 'request_timeout_ms') ?? d.requestTimeoutMs,
    bodyLimitBytes: int(file.body_limit_bytes, 'body_limit_bytes') || d.bodyLimitBytes,
    connectionsPerEngine: int(file.connections_per_engine, 'connections_per_engine') || d.connectionsPerEngine,
    logLevel: flags.logLevel ?? (env.BRAID_LOG_LEVEL || undefined) ?? str(file.log_level, 'log_level') ?? d.logLevel,
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
    tokens: uniqueTokens(partial.tokens.map((t) => (typeof t === 'string' ? parseTokenSpec(t) : t))),
    engineUrl,
    catalog,
    defaultDatabase: partial.defaultDatabase ?? (catalog.databases.some((db) => db.database_id === DEFAULT_DATABASE) ? DEFAULT_DATABASE : catalog.databases[0]!.database_id),
  };
}
