/** Operations routes: metrics (12), readiness (13), branches (8). */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { branchOf } from '../app.js';
import { errorResponses } from '../schemas/common.js';
import { BranchesResponse, MetricsResponse, ReadyResponse } from '../schemas/ops.js';
import { BraidError } from '../errors.js';

export const SERVICE_NAME = 'braid-engine';

export async function opsRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const state = app.braid;

  const endpoint = (): string => {
    if (state.config.publicUrl) return state.config.publicUrl;
    const address = app.server.address();
    if (address && typeof address === 'object') {
      const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      return `http://${host}:${address.port}`;
    }
    return 'embedded';
  };

  app.get('/v1/metrics/public-safe', {
    schema: { summary: 'Public-safe metrics', response: { 200: MetricsResponse, ...errorResponses } },
  }, async (request) => {
    const m = state.engine.metrics(branchOf(request));
    return {
      durable_epoch: m.durable_epoch,
      gateway: false,
      index_count: m.index_count,
      latest_epoch: m.latest_epoch,
      module_count: m.module_count,
      rate_limit_enabled: false,
      rate_limit_requests: 0,
      recovery_state: m.recovery_state,
      requests: state.requests,
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
  });

  app.get('/v1/ready', {
    schema: { summary: 'Readiness', response: { ...errorResponses, 200: ReadyResponse, 503: ReadyResponse } },
  }, async (request, reply) => {
    let metrics: ReturnType<typeof state.engine.metrics> | undefined;
    let error = '';
    let code: string | undefined;
    try {
      metrics = state.engine.metrics(branchOf(request));
      if (metrics.recovery_state === 'failed') {
        error = 'storage failed; restart the engine to recover';
        code = 'storage_failure';
      } else if (metrics.indexer_state !== 'running') {
        error = metrics.indexer_state === 'stopped'
          ? 'the indexer has stopped: new writes are not indexed (queries still see them through the hot overlay); restart the engine'
          : `the indexer keeps failing (${metrics.failed_feature_count} features not indexed so far); see the engine log`;
        code = 'indexer_failed';
      }
    } catch (err) {
      // a malformed branch header is the client's error; a branch that does not (yet) exist is not ready
      if (err instanceof BraidError && err.status === 400) throw err;
      error = (err as Error).message;
      code = err instanceof BraidError ? err.code : 'internal_error';
    }
    if (state.closing) {
      error = 'engine is shutting down';
      code = 'shutting_down';
    }
    const branches = await state.engine.branches(endpoint()).catch(() => []);
    const ready = !error && metrics !== undefined;
    const status = ready ? 200 : 503;
    reply.status(status);
    return {
      catalog_databases: new Set(branches.map((b) => b.database_id)).size,
      durable_epoch: metrics?.durable_epoch ?? 0,
      engine_health_checked: metrics !== undefined,
      engine_status_code: status,
      engine_url: endpoint(),
      error,
      latest_epoch: metrics?.latest_epoch ?? 0,
      metered_requests: state.requests,
      ok: ready,
      ready,
      recovery_state: metrics?.recovery_state ?? 'unknown',
      service: SERVICE_NAME,
      indexer_state: metrics?.indexer_state ?? 'unknown',
      ...(code ? { code } : {}),
    };
  });

  app.get('/v1/branches', {
    schema: { summary: 'List branches', response: { 200: BranchesResponse, ...errorResponses } },
  }, async () => {
    return { branches: await state.engine.branches(endpoint()), gateway: false };
  });

  if (state.config.testHooks) {
    app.post('/v1/_test/panic', async () => state.engine.panicForTest());
    app.post('/v1/_test/fault', async (request) => {
      const { point, actions } = request.body as { point: string; actions: string };
      await state.engine.faultForTest(point, actions);
      return {};
    });
  }
}
