/** Admin routes: snapshot (10), restore (3), and branch state (extension). */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { branchOf } from '../app.js';
import { errorResponses, idemErrorResponses } from '../schemas/common.js';
import { BranchStateRequest, RestoreRequest, RestoreResponse, SnapshotRequest, SnapshotResponse } from '../schemas/admin.js';
import type { Braid } from '../engine.js';

/** Restores and, when asked, reads `verify_record` back from the new branch. */
export async function restoreWithVerification(engine: Braid, body: RestoreRequest) {
  const outcome = await engine.restore(body.source, body.target);
  let verification = null;
  if (body.verify_record) {
    const snapshot = (await engine.snapshots()).find((s) => s.name === body.source);
    const record = await engine.get(body.verify_record, { databaseId: snapshot?.database_id, branchId: body.target });
    verification = {
      record,
      record_visible: record !== null,
      request: body.verify_record,
      status: record !== null ? ('passed' as const) : ('failed' as const),
    };
  }
  return { restored: outcome.restored, source: outcome.source, target: outcome.target, verification, epoch: outcome.epoch };
}

export async function adminRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const { engine } = app.braid;

  app.post('/v1/admin/snapshot', {
    schema: {
      summary: 'Take a consistent snapshot of a branch at its latest epoch',
      body: SnapshotRequest,
      response: { 200: SnapshotResponse, ...idemErrorResponses },
    },
  }, async (request) => {
    const info = await engine.snapshot(request.body.target, branchOf(request));
    return { snapshot: true, target: info.name, database_id: info.database_id, branch_id: info.branch_id, epoch: info.epoch };
  });

  app.post('/v1/admin/restore', {
    schema: {
      summary: 'Restore a snapshot into a new branch, optionally verifying a record',
      body: RestoreRequest,
      response: { 200: RestoreResponse, ...idemErrorResponses },
    },
  }, async (request) => restoreWithVerification(engine, request.body));

  app.post('/v1/admin/branch-state', {
    schema: {
      summary: 'Archive a branch (read-only) or make it active again (extension)',
      body: BranchStateRequest,
      response: { 200: BranchStateRequest, ...errorResponses },
    },
  }, async (request) => {
    const { database_id, branch_id, state } = request.body;
    await engine.setBranchArchived(state === 'archived', { databaseId: database_id, branchId: branch_id });
    return request.body;
  });
}
