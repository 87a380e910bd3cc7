/** Operations routes: metrics (12), readiness (13), branches (8). */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { errorResponses } from '../schemas/common.js';
import { BranchesResponse, MetricsResponse, ReadyResponse } from '../schemas/ops.js';
import { headerBranch } from '../services/branch.js';
import { listBranches, publicMetrics, readiness } from '../services/ops.js';

export async function opsRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const state = app.braid;
  const { engine } = state;

  app.get('/v1/metrics/public-safe', {
    schema: { summary: 'Public-safe metrics', response: { 200: MetricsResponse, ...errorResponses } },
  }, async (request) => publicMetrics(engine, headerBranch(request.headers), state));

  app.get('/v1/ready', {
    schema: { summary: 'Readiness', response: { ...errorResponses, 200: ReadyResponse, 503: ReadyResponse } },
  }, async (request, reply) => {
    const body = await readiness(engine, headerBranch(request.headers), state);
    reply.status(body.ready ? 200 : 503);
    return body;
  });

  app.get('/v1/branches', {
    schema: { summary: 'List branches', response: { 200: BranchesResponse, ...errorResponses } },
  }, async () => ({ branches: await listBranches(engine, state.endpoint()), gateway: false }));

  if (state.config.testHooks) {
    app.post('/v1/_test/panic', async () => engine.panicForTest());
    app.post('/v1/_test/fault', async (request) => {
      const { point, actions } = request.body as { point: string; actions: string };
      await engine.faultForTest(point, actions);
      return {};
    });
  }
}
