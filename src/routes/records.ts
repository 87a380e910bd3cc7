/** Record routes: put (11), insert (5, deprecated), put-batch (9), get (14). */
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { ErrorObject } from 'ajv';
import { RecordInput, type RecordGetRequest, errorResponses, idemErrorResponses } from '../schemas/common.js';
import {
  EpochResponse,
  GetRequest,
  GetResponse,
  PutBatchRequest,
  PutBatchResponse,
  PutBody,
  RecordPutRequest,
  type PutBatchRequest as PutBatchRequestT,
  type PutBody as PutBodyT,
} from '../schemas/records.js';
import { compile, recordsValidationError, validationError } from '../validation.js';
import type { BranchRef, Engine, RequestKey, WriteResult } from '../native/engine.js';
import { replay, writeKeyOf } from '../idempotency/index.js';
import { keepBodyBytes, ownsBody, sendJson, withBody } from './body-bytes.js';
import { headerBranch, resolveBranch } from '../services/branch.js';
import { getJson, getRecord, putBatchJson, putJson, putRecords, type WriteOptions } from '../services/records.js';
import { parseRequestJson } from '../json.js';

const wrapperValidator = compile(RecordPutRequest);
const bareValidator = compile(RecordInput);

/** Route 11 takes the wrapper or a bare RecordInput: validate against the one the body is. */
function putValidator() {
  return (data: unknown) => {
    const isWrapper = typeof data === 'object' && data !== null && 'record' in data;
    const fn = isWrapper ? wrapperValidator : bareValidator;
    // a refusal of the record is the batch of one's record 0
    const indexOf = (path: string) => (!isWrapper || path === '/record' || path.startsWith('/record/') ? 0 : undefined);
    return fn(data) ? { value: data } : { error: recordsValidationError(fn.errors, indexOf) };
  };
}

/** Answers a single-record write: `{epoch}`, or the stored response when the engine replayed a receipt. */
function epochReply(reply: FastifyReply, result: WriteResult) {
  if (result.replayed) return replay(reply, result.replayed.status, result.replayed.body);
  return { epoch: result.committed.epoch };
}

/** What a retry of a keyed single-record write answers; the commit fills in the epoch (the binding copies it). */
const EPOCH_REPLY: Readonly<Record<string, unknown>> = Object.freeze({ epoch: null });

/** What a retry of a keyed put-batch answers; the commit fills in both. */
const PUT_BATCH_REPLY: Readonly<Record<string, unknown>> = Object.freeze({ epoch: null, record_count: null });

const putBatchValidator = compile(PutBatchRequest);

/** The record a put-batch refusal's path is in (`/records/<i>...`). */
function batchIndex(path: string): number | undefined {
  const match = /^\/records\/(\d+)(?:\/|$)/.exec(path);
  return match ? Number(match[1]) : undefined;
}

/**
 * A put-batch body the engine could not read as it is (see putBatchJson),
 * read the way every other route reads its body: the JSON parser, the
 * schema, then the records service. Its refusal is the request's answer.
 */
async function putBatchChecked(engine: Engine, bytes: Buffer, options: WriteOptions) {
  const body = parseRequestJson(bytes);
  if (!putBatchValidator(body)) throw recordsValidationError(putBatchValidator.errors, batchIndex);
  const { records, include_write_timing } = body as PutBatchRequestT;
  return { result: await putRecords(engine, records, options), includeWriteTiming: include_write_timing ?? false };
}

const checkPut = putValidator();

/** The schema's refusal of a put body (or an internal error, were it accepted). */
function refusal(checked: ReturnType<typeof checkPut>): Error {
  return ('error' in checked && checked.error) || new Error('a put body without JSON passed the schema');
}

/**
 * A put body the engine could not read as it is (see putJson): the JSON
 * parser, the schema, then the records service, as every other route reads
 * its body. Its refusal is the request's answer.
 */
async function putChecked(engine: Engine, bytes: Buffer, headers: BranchRef, requestKey: RequestKey | undefined) {
  const checked = checkPut(parseRequestJson(bytes));
  if ('error' in checked) throw checked.error;
  const body = checked.value as PutBodyT;
  return 'record' in body
    ? putRecords(engine, [body.record], { branch: resolveBranch(headers, body), requestKey, reply: EPOCH_REPLY })
    : putRecords(engine, [body], { branch: headers, requestKey, reply: EPOCH_REPLY });
}

const getValidator = compile(GetRequest);

/**
 * A get body the engine could not read as it is (see getJson): the schema,
 * then the records service, as every other route reads its body. Its refusal
 * is the request's answer.
 */
async function getChecked(engine: Engine, body: unknown, branch: BranchRef) {
  if (!getValidator(body)) throw validationError(getValidator.errors);
  return { record: await getRecord(engine, body as RecordGetRequest, branch) };
}

export async function recordRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const { engine } = app.braid;

  app.post('/v1/insert', {
    schema: {
      summary: 'Deprecated: write one record (use /v1/records/put)',
      deprecated: true,
      body: RecordInput,
      response: { 200: EpochResponse, ...idemErrorResponses },
    },
    // the body is the record: a refusal of it is the batch of one's record 0
    schemaErrorFormatter: (errors) => recordsValidationError(errors as ErrorObject[], () => 0),
    // every answer carries Deprecation and Link (src/deprecation.ts, set as the request arrives)
  }, async (request, reply) => {
    const branch = headerBranch(request.headers);
    return epochReply(reply, await putRecords(engine, [request.body], { branch, requestKey: writeKeyOf(request), reply: EPOCH_REPLY }));
  });

  // put and put-batch bodies are read as bytes, which the engine parses
  // (put-batch bodies, megabytes of vectors, and large put bodies off the JS
  // thread; its own content-type parser, so only in this encapsulated
  // context)
  await app.register(async (bytesContext) => {
    keepBodyBytes(bytesContext);
    bytesContext.post('/v1/records/put', {
      schema: {
        summary: 'Full replacement write of one record',
        body: PutBody,
        response: { 200: EpochResponse, ...idemErrorResponses },
      },
      // checked by the engine's reading, else by putChecked below
      validatorCompiler: () => (value: unknown) => ({ value }),
    }, async (request, reply) => withBody(request, async () => {
      const body = request.body as unknown;
      const headers = headerBranch(request.headers);
      const requestKey = writeKeyOf(request);
      // no JSON body at all (no content type): the schema's refusal
      if (!Buffer.isBuffer(body)) throw refusal(checkPut(body));
      const result = await putJson(engine, body, { branch: headers, requestKey, reply: EPOCH_REPLY })
        ?? await putChecked(engine, body, headers, requestKey);
      return epochReply(reply, result);
    }));

    bytesContext.post('/v1/records/put-batch', {
      schema: {
        summary: 'Atomic write of many records at one epoch',
        body: PutBatchRequest,
        response: { 200: PutBatchResponse, ...idemErrorResponses },
      },
      // checked by the engine's reading, else by putBatchChecked below
      validatorCompiler: () => (value: unknown) => ({ value }),
    }, async (request, reply) => withBody(request, async () => {
      const started = performance.now();
      const options = {
        branch: headerBranch(request.headers),
        requestKey: writeKeyOf(request),
        // a replayed batch answers with the committed epoch and count, both
        // filled in by the commit; its write_timing is not replayed because
        // the replay wrote nothing
        reply: PUT_BATCH_REPLY,
      };
      const body = request.body as unknown;
      if (!Buffer.isBuffer(body)) {
        putBatchValidator(body);
        throw recordsValidationError(putBatchValidator.errors, batchIndex);
      }
      // the body is read once: a body of its own is freed as the records are read
      const read = await putBatchJson(engine, body, options, ownsBody(request));
      const { result, includeWriteTiming } = read ?? await putBatchChecked(engine, body, options);
      if (result.replayed) return replay(reply, result.replayed.status, result.replayed.body);
      const { epoch, record_count, timing } = result.committed;
      if (!includeWriteTiming) return { epoch, record_count };
      const write_timing = {
        queue_ms: timing.queue_ms,
        validate_ms: timing.validate_ms,
        encode_ms: timing.encode_ms,
        wal_fsync_ms: timing.wal_fsync_ms,
        apply_ms: timing.apply_ms,
        total_ms: performance.now() - started,
      };
      return { epoch, record_count, write_timing };
    }));

    // the engine reads the key from the body and writes the answer's JSON,
    // which is sent as it is (docs/api.md, "How a request is served")
    bytesContext.post('/v1/records/get', {
      schema: {
        summary: 'Exact get of the visible version of a record',
        body: GetRequest,
        response: { 200: GetResponse, ...errorResponses },
      },
      // checked by the engine's reading, else by getChecked below
      validatorCompiler: () => (value: unknown) => ({ value }),
    }, async (request, reply) => withBody(request, async () => {
      const body = request.body as unknown;
      const branch = headerBranch(request.headers);
      if (!Buffer.isBuffer(body)) return getChecked(engine, body, branch);
      const answer = await getJson(engine, body, branch);
      if (answer === null) return getChecked(engine, parseRequestJson(body), branch);
      return sendJson(reply, answer);
    }));
  });
}
