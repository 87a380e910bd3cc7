/**
 * Server configuration: defaults, overridden by environment variables,
 * overridden by command-line flags. Documented in docs/operations.md.
 */
import { BraidError } from './errors.js';

export interface ServerConfig {
  host: string;
  port: number;
  dataDir: string;
  /** When non-empty, requests must carry `Authorization: Bearer <one of these>`. */
  authTokens: string[];
  bodyLimitBytes: number;
  /** Longest a client may take to send a whole request (headers and body); 0 for no limit. */
  requestTimeoutMs: number;
  maxBatch: number;
  maxVectorDim: number;
  /** Most columns a table may have (declared and inferred). */
  maxColumns: number;
  receiptRetentionMs: number;
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
  maxBatch: 10_000,
  maxVectorDim: 4096,
  maxColumns: 1024,
  receiptRetentionMs: 24 * 60 * 60 * 1000,
  historyEpochs: undefined,
  checkpointBytes: undefined,
  checkpointRows: undefined,
  checkpointIntervalMs: undefined,
  publicUrl: undefined,
  logLevel: 'warn',
  testHooks: false,
};

function int(value: string | undefined, name: string): number | undefined {
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new BraidError('invalid_config', `${name} must be a non-negative integer, got ${JSON.stringify(value)}`);
  return n;
}

/** A limit: a whole number from 1 (0 would refuse every write, or every vector). */
function limit(value: string | undefined, name: string): number | undefined {
  const n = int(value, name);
  if (n !== undefined && (n < 1 || n > 4_294_967_295)) {
    throw new BraidError('invalid_config', `${name} must be a whole number from 1 to 4294967295, got ${JSON.stringify(value)}`);
  }
  return n;
}

function list(value: string | undefined): string[] | undefined {
  if (value === undefined) return undefined;
  return value.split(',').map((t) => t.trim()).filter(Boolean);
}

/** Reads BRAID_* environment variables over the defaults. */
export function fromEnv(env: NodeJS.ProcessEnv = process.env, base: ServerConfig = DEFAULTS): ServerConfig {
  return {
    host: env.BRAID_HOST ?? base.host,
    port: int(env.BRAID_PORT ?? env.PORT, 'BRAID_PORT') ?? base.port,
    dataDir: env.BRAID_DATA_DIR ?? base.dataDir,
    authTokens: list(env.BRAID_AUTH_TOKENS) ?? base.authTokens,
    bodyLimitBytes: int(env.BRAID_BODY_LIMIT_BYTES, 'BRAID_BODY_LIMIT_BYTES') ?? base.bodyLimitBytes,
    requestTimeoutMs: int(env.BRAID_REQUEST_TIMEOUT_MS, 'BRAID_REQUEST_TIMEOUT_MS') ?? base.requestTimeoutMs,
    maxBatch: limit(env.BRAID_MAX_BATCH, 'BRAID_MAX_BATCH') ?? base.maxBatch,
    maxVectorDim: limit(env.BRAID_MAX_VECTOR_DIM, 'BRAID_MAX_VECTOR_DIM') ?? base.maxVectorDim,
    maxColumns: limit(env.BRAID_MAX_COLUMNS, 'BRAID_MAX_COLUMNS') ?? base.maxColumns,
    receiptRetentionMs: int(env.BRAID_RECEIPT_RETENTION_MS, 'BRAID_RECEIPT_RETENTION_MS') ?? base.receiptRetentionMs,
    historyEpochs: int(env.BRAID_HISTORY_EPOCHS, 'BRAID_HISTORY_EPOCHS') ?? base.historyEpochs,
    checkpointBytes: int(env.BRAID_CHECKPOINT_BYTES, 'BRAID_CHECKPOINT_BYTES') ?? base.checkpointBytes,
    checkpointRows: int(env.BRAID_CHECKPOINT_ROWS, 'BRAID_CHECKPOINT_ROWS') ?? base.checkpointRows,
    checkpointIntervalMs: int(env.BRAID_CHECKPOINT_INTERVAL_MS, 'BRAID_CHECKPOINT_INTERVAL_MS') ?? base.checkpointIntervalMs,
    publicUrl: env.BRAID_PUBLIC_URL ?? base.publicUrl,
    logLevel: env.BRAID_LOG_LEVEL ?? base.logLevel,
    testHooks: env.BRAID_TEST_HOOKS === '1' || base.testHooks,
  };
}
