/** Admin routes: snapshot (10), restore (3), and branch state (extension). */
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { errorResponses, idemErrorResponses } from '../schemas/common.js';
import { BranchStateRequest, RestoreRequest, RestoreResponse, SnapshotRequest, SnapshotResponse } from '../schemas/admin.js';
import { REPLAY_HEADER, requestKeyOf } from '../idempotency/index.js';
import { headerBranch } from '../services/branch.js';
import { restoreSnapshot, setBranchState, takeSnapshot } from '../services/admin.js';

/** The answer of a keyed request the engine had already run, marked as a replay; the flag is not part of the body. */
function answer<T extends { replayed: boolean }>(reply: FastifyReply, result: T): Omit<T, 'replayed'> {
  const { replayed, ...body } = result;
  if (replayed) reply.header(REPLAY_HEADER, 'true');
  return body;
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
  }, async (request, reply) => answer(reply, await takeSnapshot(engine, request.body.target, headerBranch(request.headers), requestKeyOf(request))));

  app.post('/v1/admin/restore', {
    schema: {
      summary: 'Restore a snapshot into a new branch, optionally verifying a record',
      body: RestoreRequest,
      response: { 200: RestoreResponse, ...idemErrorResponses },
    },
  }, async (request, reply) => answer(reply, await restoreSnapshot(engine, request.body, requestKeyOf(request))));

  app.post('/v1/admin/branch-state', {
    schema: {
      summary: 'Archive a branch (read-only) or make it active again (extension)',
      body: BranchStateRequest,
      response: { 200: BranchStateRequest, ...errorResponses },
    },
  }, async (request) => {
    const { database_id, branch_id, state } = request.body;
    await setBranchState(engine, state, { databaseId: database_id, branchId: branch_id });
    return request.body;
  });
}
