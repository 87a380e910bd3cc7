/** Record routes: put (11), insert (5, deprecated), put-batch (9), get (14). */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { branchOf } from '../app.js';
import { RecordInput, errorResponses, idemErrorResponses } from '../schemas/common.js';
import {
  EpochResponse,
  GetRequest,
  GetResponse,
  PutBatchRequest,
  PutBatchResponse,
  PutBody,
  RecordPutRequest,
  type PutBody as PutBodyT,
} from '../schemas/records.js';
import { compile, validationError } from '../validation.js';
import type { WriteResult } from '../engine.js';

const wrapperValidator = compile(RecordPutRequest);
const bareValidator = compile(RecordInput);

/** Route 11 takes the wrapper or a bare RecordInput: validate against the one the body is. */
function putValidator() {
  return (data: unknown) => {
    const isWrapper = typeof data === 'object' && data !== null && 'record' in data;
    const fn = isWrapper ? wrapperValidator : bareValidator;
    return fn(data) ? { value: data } : { error: validationError(fn.errors) };
  };
}

function epochOf(result: WriteResult): number {
  return result.committed ? result.committed.epoch : ((result.replayed.body as { epoch: number }).epoch ?? 0);
}

export async function recordRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const { engine } = app.braid;

  app.post('/v1/records/put', {
    schema: {
      summary: 'Full replacement write of one record',
      body: PutBody,
      response: { 200: EpochResponse, ...idemErrorResponses },
    },
    validatorCompiler: putValidator,
  }, async (request) => {
    const body = request.body as PutBodyT;
    const headers = branchOf(request);
    if ('record' in body) {
      const result = await engine.put(body.record, {
        databaseId: body.database_id ?? headers.databaseId,
        branchId: body.branch_id ?? headers.branchId,
      });
      return { epoch: epochOf(result) };
    }
    return { epoch: epochOf(await engine.put(body, headers)) };
  });

  app.post('/v1/insert', {
    schema: {
      summary: 'Deprecated: write one record (use /v1/records/put)',
      deprecated: true,
      body: RecordInput,
      response: { 200: EpochResponse, ...idemErrorResponses },
    },
  }, async (request, reply) => {
    reply.header('Deprecation', 'true');
    reply.header('Link', '</v1/records/put>; rel="successor-version"');
    return { epoch: epochOf(await engine.put(request.body, branchOf(request))) };
  });

  app.post('/v1/records/put-batch', {
    schema: {
      summary: 'Atomic write of many records at one epoch',
      body: PutBatchRequest,
      response: { 200: PutBatchResponse, ...idemErrorResponses },
    },
  }, async (request) => {
    const started = performance.now();
    const result = await engine.putBatch(request.body.records, branchOf(request));
    if (result.replayed) return result.replayed.body as never;
    const { epoch, record_count, timing } = result.committed;
    if (!request.body.include_write_timing) return { epoch, record_count };
    const write_timing = {
      queue_ms: timing.queue_ms,
      validate_ms: timing.validate_ms,
      encode_ms: timing.encode_ms,
      wal_fsync_ms: timing.wal_fsync_ms,
      apply_ms: timing.apply_ms,
      total_ms: performance.now() - started,
    };
    return { epoch, record_count, write_timing };
  });

  app.post('/v1/records/get', {
    schema: {
      summary: 'Exact get of the visible version of a record',
      body: GetRequest,
      response: { 200: GetResponse, ...errorResponses },
    },
  }, async (request) => {
    return { record: await engine.get(request.body, branchOf(request)) };
  });
}
