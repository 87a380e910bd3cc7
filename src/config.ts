/**
 * Server configuration: defaults, overridden by environment variables,
 * overridden by command-line flags. Documented in docs/operations.md.
 */
import type { TokenSpec } from './auth.js';
import { choiceSetting, defaultMaxConnections, LOG_LEVELS, MAX_BODY_BYTES, MAX_OPEN_CONNECTIONS, MAX_PORT, MAX_TIMER_MS, MAX_WHOLE, numberSetting, textSetting, tokensSetting, urlSetting } from './settings.js';

export interface ServerConfig {
  host: string;
  port: number;
  dataDir: string;
  /** When non-empty, requests must carry `Authorization: Bearer <one of these>` (`secret` or `secret:scope`). */
  authTokens: Array<string | TokenSpec>;
  bodyLimitBytes: number;
  /** Longest a client may take to send a whole request (headers and body); 0 for no limit. */
  requestTimeoutMs: number;
  /** Most connections held open at once (0: no cap); past it a new connection is closed as it is accepted. */
  maxConnections: number;
  maxBatch: number;
  maxVectorDim: number;
  /** Most columns a table may have (declared and inferred). */
  maxColumns: number;
  receiptRetentionMs: number;
  /** Bytes a branch's receipts may hold before a keyed read stores its answer's digest (engine default when unset). */
  receiptMemoryBytes: number | undefined;
  historyEpochs: number | undefined;
  /** WAL bytes per branch after which a checkpoint is taken (engine default when unset). */
  checkpointBytes: number | undefined;
  /** Record versions per branch after which a checkpoint is taken (engine default when unset): bounds what a restart replays. */
  checkpointRows: number | undefined;
  /** Longest time between checkpoints of a branch that is written to. */
  checkpointIntervalMs: number | undefined;
  /** Public URL of this engine, reported by branches and readiness. */
  publicUrl: string | undefined;
  logLevel: string;
  /** Enables test-only hooks (a route that makes the engine panic). */
  testHooks: boolean;
}

export const DEFAULTS: ServerConfig = {
  host: '127.0.0.1',
  port: 8080,
  dataDir: './data',
  authTokens: [],
  bodyLimitBytes: 16 * 1024 * 1024,
  requestTimeoutMs: 60_000,
  maxConnections: defaultMaxConnections(),
  maxBatch: 10_000,
  maxVectorDim: 4096,
  maxColumns: 1024,
  receiptRetentionMs: 24 * 60 * 60 * 1000,
  receiptMemoryBytes: undefined,
  historyEpochs: undefined,
  checkpointBytes: undefined,
  checkpointRows: undefined,
  checkpointIntervalMs: undefined,
  publicUrl: undefined,
  logLevel: 'warn',
  testHooks: false,
};

/** Settings given on the `braid serve` command line, as text (checked here like the environment's). */
export interface ServerFlags {
  host?: string;
  port?: string;
  dataDir?: string;
  authToken?: string[];
  historyEpochs?: string;
  checkpointBytes?: string;
  checkpointRows?: string;
  logLevel?: string;
}

/** The largest of the limits (batch, vector dimension, columns), which the engine holds as u32; the least is 1, since 0 would refuse every write, or every vector. */
const LIMIT_MAX = 4_294_967_295;

/** How each setting that a flag and a variable can both give is read, from either (ranges: docs/operations.md). */
const read = {
  host: (value: unknown, name: string) => textSetting(value, name),
  port: (value: unknown, name: string) => numberSetting(value, name, 0, MAX_PORT),
  dataDir: (value: unknown, name: string) => textSetting(value, name),
  authTokens: (value: unknown, name: string) => tokensSetting(value, name),
  // 0 keeps the latest versions only
  historyEpochs: (value: unknown, name: string) => numberSetting(value, name, 0, MAX_WHOLE),
  // 0 would checkpoint after every commit
  checkpointBytes: (value: unknown, name: string) => numberSetting(value, name, 1, MAX_WHOLE),
  checkpointRows: (value: unknown, name: string) => numberSetting(value, name, 1, MAX_WHOLE),
  logLevel: (value: unknown, name: string) => choiceSetting(value, name, LOG_LEVELS),
};

/** Reads BRAID_* environment variables over the defaults; a bad value is `invalid_config` naming it. */
export function fromEnv(env: NodeJS.ProcessEnv = process.env, base: ServerConfig = DEFAULTS): ServerConfig {
  const portName = env.BRAID_PORT === undefined && env.PORT !== undefined ? 'PORT' : 'BRAID_PORT';
  return {
    host: read.host(env.BRAID_HOST, 'BRAID_HOST') ?? base.host,
    port: read.port(env.BRAID_PORT ?? env.PORT, portName) ?? base.port,
    dataDir: read.dataDir(env.BRAID_DATA_DIR, 'BRAID_DATA_DIR') ?? base.dataDir,
    authTokens: read.authTokens(env.BRAID_AUTH_TOKENS, 'BRAID_AUTH_TOKENS') ?? base.authTokens,
    bodyLimitBytes: numberSetting(env.BRAID_BODY_LIMIT_BYTES, 'BRAID_BODY_LIMIT_BYTES', 1, MAX_BODY_BYTES) ?? base.bodyLimitBytes,
    requestTimeoutMs: numberSetting(env.BRAID_REQUEST_TIMEOUT_MS, 'BRAID_REQUEST_TIMEOUT_MS', 0, MAX_TIMER_MS) ?? base.requestTimeoutMs,
    maxConnections: numberSetting(env.BRAID_MAX_CONNECTIONS, 'BRAID_MAX_CONNECTIONS', 0, MAX_OPEN_CONNECTIONS) ?? base.maxConnections,
    maxBatch: numberSetting(env.BRAID_MAX_BATCH, 'BRAID_MAX_BATCH', 1, LIMIT_MAX) ?? base.maxBatch,
    maxVectorDim: numberSetting(env.BRAID_MAX_VECTOR_DIM, 'BRAID_MAX_VECTOR_DIM', 1, LIMIT_MAX) ?? base.maxVectorDim,
    maxColumns: numberSetting(env.BRAID_MAX_COLUMNS, 'BRAID_MAX_COLUMNS', 1, LIMIT_MAX) ?? base.maxColumns,
    receiptRetentionMs: numberSetting(env.BRAID_RECEIPT_RETENTION_MS, 'BRAID_RECEIPT_RETENTION_MS', 0, MAX_WHOLE) ?? base.receiptRetentionMs,
    receiptMemoryBytes: numberSetting(env.BRAID_RECEIPT_MEMORY_BYTES, 'BRAID_RECEIPT_MEMORY_BYTES', 0, MAX_WHOLE) ?? base.receiptMemoryBytes,
    historyEpochs: read.historyEpochs(env.BRAID_HISTORY_EPOCHS, 'BRAID_HISTORY_EPOCHS') ?? base.historyEpochs,
    checkpointBytes: read.checkpointBytes(env.BRAID_CHECKPOINT_BYTES, 'BRAID_CHECKPOINT_BYTES') ?? base.checkpointBytes,
    checkpointRows: read.checkpointRows(env.BRAID_CHECKPOINT_ROWS, 'BRAID_CHECKPOINT_ROWS') ?? base.checkpointRows,
    checkpointIntervalMs: numberSetting(env.BRAID_CHECKPOINT_INTERVAL_MS, 'BRAID_CHECKPOINT_INTERVAL_MS', 1, MAX_WHOLE) ?? base.checkpointIntervalMs,
    // reported as written, once it is known to be a URL
    publicUrl: urlSetting(env.BRAID_PUBLIC_URL, 'BRAID_PUBLIC_URL') ? env.BRAID_PUBLIC_URL : base.publicUrl,
    logLevel: read.logLevel(env.BRAID_LOG_LEVEL, 'BRAID_LOG_LEVEL') ?? base.logLevel,
    testHooks: env.BRAID_TEST_HOOKS === '1' || base.testHooks,
  };
}

/**
 * The configuration of `braid serve`: flags over the environment over the
 * defaults. Every setting given is checked, a variable a flag overrides too.
 */
export function resolveServerConfig(flags: ServerFlags, env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const base = fromEnv(env);
  return {
    ...base,
    host: read.host(flags.host, '--host') ?? base.host,
    port: read.port(flags.port, '--port') ?? base.port,
    dataDir: read.dataDir(flags.dataDir, '--data-dir') ?? base.dataDir,
    authTokens: read.authTokens(flags.authToken, '--auth-token') ?? base.authTokens,
    historyEpochs: read.historyEpochs(flags.historyEpochs, '--history-epochs') ?? base.historyEpochs,
    checkpointBytes: read.checkpointBytes(flags.checkpointBytes, '--checkpoint-bytes') ?? base.checkpointBytes,
    checkpointRows: read.checkpointRows(flags.checkpointRows, '--checkpoint-rows') ?? base.checkpointRows,
    logLevel: read.logLevel(flags.logLevel, '--log-level') ?? base.logLevel,
  };
}
