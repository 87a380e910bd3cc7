/** Admin routes: snapshot (10), restore (3), and branch state (extension). */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { branchOf } from '../app.js';
import { errorResponses, idemErrorResponses } from '../schemas/common.js';
import { BranchStateRequest, RestoreRequest, RestoreResponse, SnapshotRequest, SnapshotResponse } from '../schemas/admin.js';
import type { Braid, RequestKey } from '../engine.js';
import { REPLAY_HEADER } from '../idempotency/index.js';

/**
 * Restores and, when asked, reads `verify_record` back from the new branch,
 * in one engine call that checks every name before creating anything. A
 * keyed request passes its key, which the engine writes with the branch.
 */
export async function restoreWithVerification(engine: Braid, body: RestoreRequest, requestKey?: RequestKey) {
  const outcome = await engine.restore(body.source, body.target, { verify: body.verify_record, requestKey });
  let verification = null;
  if (body.verify_record) {
    const record = outcome.verified ?? null;
    verification = {
      record,
      record_visible: record !== null,
      request: body.verify_record,
      status: record !== null ? ('passed' as const) : ('failed' as const),
    };
  }
  return { restored: outcome.restored, source: outcome.source, target: outcome.target, verification, epoch: outcome.epoch, replayed: outcome.replayed };
}

/** The key a keyed admin request hands the engine (see src/idempotency). */
function requestKeyOf(request: FastifyRequest): RequestKey | undefined {
  const ctx = request.idempotency;
  return ctx ? { key: ctx.scopedKey, body_hash: ctx.bodyHash } : undefined;
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
  }, async (request, reply) => {
    const info = await engine.snapshot(request.body.target, { ...branchOf(request), requestKey: requestKeyOf(request) });
    if (info.replayed) reply.header(REPLAY_HEADER, 'true');
    return { snapshot: true, target: info.name, database_id: info.database_id, branch_id: info.branch_id, epoch: info.epoch };
  });

  app.post('/v1/admin/restore', {
    schema: {
      summary: 'Restore a snapshot into a new branch, optionally verifying a record',
      body: RestoreRequest,
      response: { 200: RestoreResponse, ...idemErrorResponses },
    },
  }, async (request, reply) => {
    const { replayed, ...result } = await restoreWithVerification(engine, request.body, requestKeyOf(request));
    if (replayed) reply.header(REPLAY_HEADER, 'true');
    return result;
  });

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
