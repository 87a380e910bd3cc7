/**
 * Operations: the public-safe metrics of a branch (route 12), readiness
 * (route 13) and the branch list (route 8; GraphQL `branches`; the CLI).
 * What only the HTTP process knows (requests served, whether it is
 * draining, the URL it answers on) is passed in.
 */
import type { Static } from 'typebox';
import { BraidError } from '../errors.js';
import type { MetricsResponse, ReadyResponse } from '../schemas/ops.js';
import type { BranchRef, BranchSummary, Engine, EngineMetrics } from '../native/engine.js';

export const SERVICE_NAME = 'braid-engine';

/** What the serving process knows about itself. */
export interface ProcessState {
  /** Requests this process has received. */
  requests: number;
  /** Set once shutdown began. */
  closing: boolean;
  /** The URL this engine answers on, as branches report it (`embedded` in-process). */
  endpoint: () => string;
}

export type PublicMetrics = Static<typeof MetricsResponse>;
export type Readiness = Static<typeof ReadyResponse>;

/** Route 12: the addressed branch's figures that are safe to show anyone. */
export function publicMetrics(engine: Engine, branch: BranchRef | undefined, process: Pick<ProcessState, 'requests'>): PublicMetrics {
  const m = engine.metrics(branch);
  return {
    durable_epoch: m.durable_epoch,
    gateway: false,
    index_count: m.index_count,
    latest_epoch: m.latest_epoch,
    module_count: m.module_count,
    rate_limit_enabled: false,
    rate_limit_requests: 0,
    recovery_state: m.recovery_state,
    requests: process.requests,
    schema_count: m.schema_count,
    segment_count: m.segment_count,
    service: SERVICE_NAME,
    schema_epoch: m.schema_epoch,
    record_count: m.record_count,
    version_count: m.version_count,
    branch_count: m.branch_count,
    indexer_state: m.indexer_state,
    failed_feature_count: m.failed_feature_count,
    receipt_count: m.receipt_count,
  };
}

/** Why a branch whose figures could be read is not ready, if it is not. */
function notReadyReason(metrics: EngineMetrics): { error: string; code: string } | undefined {
  if (metrics.recovery_state === 'failed') return { error: 'storage failed; restart the engine to recover', code: 'storage_failure' };
  if (metrics.indexer_state === 'running') return undefined;
  const error = metrics.indexer_state === 'stopped'
    ? 'the indexer has stopped: new writes are not indexed (queries still see them through the hot overlay); restart the engine'
    : metrics.failed_feature_count > 0
      ? `the indexer keeps failing (${metrics.failed_feature_count} features not indexed so far); see the engine log`
      // a round that failed as a whole (a text index commit on a full disk) leaves no feature counted
      : 'the indexer keeps failing (its rounds fail as a whole, such as a text index commit); see the engine log';
  return { error, code: 'indexer_failed' };
}

/** Databases with a branch open, read from the default branch's figures (0 when there are none to read). */
function databaseCount(engine: Engine): number {
  try {
    return engine.metrics(undefined).database_count;
  } catch {
    return 0;
  }
}

/**
 * Route 13: whether the addressed branch can serve, with the figures behind
 * the answer. A malformed branch name is the client's error (thrown); a
 * branch that does not exist (yet) or has failed is not ready (`ready:
 * false`, with the code of why).
 */
export async function readiness(engine: Engine, branch: BranchRef | undefined, process: ProcessState): Promise<Readiness> {
  let metrics: EngineMetrics | undefined;
  let failure: { error: string; code: string } | undefined;
  try {
    metrics = engine.metrics(branch);
    failure = notReadyReason(metrics);
  } catch (err) {
    if (err instanceof BraidError && err.status === 400) throw err;
    failure = { error: (err as Error).message, code: err instanceof BraidError ? err.code : 'internal_error' };
  }
  if (process.closing) failure = { error: 'engine is shutting down', code: 'shutting_down' };
  const endpoint = process.endpoint();
  const ready = failure === undefined && metrics !== undefined;
  const status = ready ? 200 : 503;
  // everything here is read on the JS thread: readiness never waits for a
  // worker, which a burst of slow queries may hold for seconds
  return {
    catalog_databases: metrics?.database_count ?? databaseCount(engine),
    durable_epoch: metrics?.durable_epoch ?? 0,
    engine_health_checked: metrics !== undefined,
    engine_status_code: status,
    engine_url: endpoint,
    error: failure?.error ?? '',
    latest_epoch: metrics?.latest_epoch ?? 0,
    metered_requests: process.requests,
    ok: ready,
    ready,
    recovery_state: metrics?.recovery_state ?? 'unknown',
    service: SERVICE_NAME,
    indexer_state: metrics?.indexer_state ?? 'unknown',
    ...(failure ? { code: failure.code } : {}),
  };
}

/** Every branch with its latest epoch, parent and state; `endpoint` is where each is served. */
export function listBranches(engine: Engine, endpoint: string): Promise<BranchSummary[]> {
  return engine.branches(endpoint);
}
