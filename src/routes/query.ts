/** Query routes: explain (4), the native query language (2) and the JSON query (extension). */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { errorResponses, idemErrorResponses } from '../schemas/common.js';
import { HybridExplain, HybridQuery, type HybridQuery as HybridQueryT, NativeQlRequest, QueryResponse } from '../schemas/query.js';
import { keepBodyBytes, sendJson, withBody } from './body-bytes.js';
import { headerBranch } from '../services/branch.js';
import type { BranchRef } from '../native/engine.js';
import { explainQuery, explainQueryJson, runNativeQueryJson, runQuery, runQueryJson } from '../services/queries.js';

/**
 * The query bodies are checked by the query service, for every front door
 * alike (src/services/queries.ts); the schema documents them.
 */
const checkedByService = () => (value: unknown) => ({ value });

/**
 * The handler of a query route whose body the engine reads from its bytes:
 * `fromBytes` answers the JSON bytes (the engine's answer as bytes, sent as
 * they are, or the service's own when the engine left the body to it), and
 * `parsed` a request that had no JSON body at all (no content type: the
 * schema's refusal).
 */
function fromBodyBytes<T>(
  parsed: (query: HybridQueryT, branch: BranchRef | undefined) => Promise<T>,
  fromBytes: (body: Buffer, branch: BranchRef | undefined) => Promise<Buffer | T>,
) {
  return async (request: FastifyRequest, reply: FastifyReply) =>
    withBody(request, async () => {
      const body = request.body as unknown;
      const branch = headerBranch(request.headers);
      if (!Buffer.isBuffer(body)) return parsed(body as HybridQueryT, branch);
      const answer = await fromBytes(body, branch);
      return Buffer.isBuffer(answer) ? sendJson(reply, answer) : answer;
    });
}

export async function queryRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const { engine } = app.braid;

  app.post('/v1/nativeql', {
    schema: {
      summary: 'Run a native query language statement',
      body: NativeQlRequest,
      response: { 200: QueryResponse, ...idemErrorResponses },
    },
  }, async (request, reply) => sendJson(reply, await runNativeQueryJson(engine, request.body.query, headerBranch(request.headers))));

  // the JSON form of route 2: the body route 4 takes, the answer route 2
  // gives. The engine reads the body's bytes and writes the answer's
  // (runQueryJson), so its own content-type parser, in a context of its own.
  await app.register(async (bytesContext) => {
    keepBodyBytes(bytesContext);
    // route 4 reads its body as /v1/query does, the explain alone answered
    bytesContext.post('/v1/explain', {
      schema: {
        summary: 'Explain a hybrid query: the HybridExplain fields at top level',
        body: HybridQuery,
        response: { 200: HybridExplain, ...errorResponses },
      },
      validatorCompiler: checkedByService,
    }, fromBodyBytes(
      (query, branch) => explainQuery(engine, query, branch),
      (body, branch) => explainQueryJson(engine, body, branch),
    ));
    bytesContext.post('/v1/query', {
      schema: {
        summary: 'Run a hybrid query given as JSON: results, next_cursor and explain (extension)',
        body: HybridQuery,
        response: { 200: QueryResponse, ...idemErrorResponses },
      },
      validatorCompiler: checkedByService,
    }, fromBodyBytes(
      (query, branch) => runQuery(engine, query, branch),
      (body, branch) => runQueryJson(engine, body, branch),
    ));
  });
}
