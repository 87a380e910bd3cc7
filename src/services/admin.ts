/**
 * Snapshots, restores with verification, branch state and table
 * declarations, for every front door (REST admin routes, GraphQL admin
 * mutations, the CLI, the embedded API).
 *
 * A keyed request (Idempotency-Key) passes its key to the engine, which
 * writes it with the snapshot or the new branch: the same request again
 * answers the first result (`replayed: true`) instead of a 409.
 */
import type { Static } from 'typebox';
import type { RestoreRequest, RestoreResponse, SnapshotResponse } from '../schemas/admin.js';
import type { BranchRef, ColumnDeclaration, Engine, RequestKey, SnapshotInfo, TableSchema, WriteResult } from '../native/engine.js';

/** A snapshot as every door answers it; `replayed` when a keyed request had already taken it. */
export type SnapshotResult = Static<typeof SnapshotResponse> & { replayed: boolean };
/** A restore as every door answers it; `replayed` when a keyed request had already made the branch. */
export type RestoreResult = Static<typeof RestoreResponse> & { replayed: boolean };
export type { RestoreRequest };

/** Takes snapshot `target` of a branch at its latest epoch. */
export async function takeSnapshot(engine: Engine, target: string, branch?: BranchRef, requestKey?: RequestKey): Promise<SnapshotResult> {
  const info = await engine.snapshot(target, branch, requestKey);
  return { snapshot: true, target: info.name, database_id: info.database_id, branch_id: info.branch_id, epoch: info.epoch, replayed: info.replayed };
}

/** Every snapshot of the data directory. */
export function listSnapshots(engine: Engine): Promise<SnapshotInfo[]> {
  return engine.snapshots();
}

/**
 * Restores snapshot `source` into a new branch `target` and, with
 * `verify_record`, reads that record back from the new branch. It is one
 * engine call that checks every name (the verify key's included) before it
 * creates anything, so a restore either fails whole, before the branch
 * exists, or answers its verification: `passed` when the record is visible
 * in the new branch, `failed` when it is not (a missing table included).
 */
export async function restoreSnapshot(engine: Engine, request: RestoreRequest, requestKey?: RequestKey): Promise<RestoreResult> {
  const verify = request.verify_record ?? undefined;
  const outcome = await engine.restore(request.source, request.target, verify, requestKey);
  let verification: RestoreResult['verification'] = null;
  if (verify) {
    const record = outcome.verified ?? null;
    const request = { table: verify.table, tenant_id: verify.tenant_id, id: verify.id };
    verification = { record, record_visible: record !== null, request, status: record !== null ? 'passed' : 'failed' };
  }
  return { restored: outcome.restored, source: outcome.source, target: outcome.target, verification, epoch: outcome.epoch, replayed: outcome.replayed };
}

/** Archives a branch (read-only) or makes it active again. */
export function setBranchState(engine: Engine, state: 'active' | 'archived', branch: BranchRef): Promise<void> {
  return engine.setBranchArchived(state === 'archived', branch);
}

/** Declares a table or adds columns to it; answers the table as the catalog now holds it. */
export async function declareTable(
  engine: Engine,
  table: string,
  columns: Record<string, ColumnDeclaration>,
  branch?: BranchRef,
): Promise<{ result: WriteResult; table: TableSchema }> {
  const result = await engine.declareTable(table, columns, branch);
  const schema = (await engine.schemas(branch)).find((t) => t.name === table);
  return { result, table: schema ?? { name: table, columns: {} } };
}
