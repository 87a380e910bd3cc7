/** Query routes: explain (4), the native query language (2) and the JSON query (extension). */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { branchOf } from '../app.js';
import { errorResponses, idemErrorResponses } from '../schemas/common.js';
import { HybridExplain, HybridQuery, NativeQlRequest, QueryResponse } from '../schemas/query.js';
import { parseNativeQuery } from '../ql/index.js';

export async function queryRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const { engine } = app.braid;

  app.post('/v1/explain', {
    schema: {
      summary: 'Explain a hybrid query: the HybridExplain fields at top level',
      body: HybridQuery,
      response: { 200: HybridExplain, ...errorResponses },
    },
  }, async (request) => {
    const result = await engine.query({ ...request.body, explain: true }, branchOf(request));
    return result.explain;
  });

  app.post('/v1/nativeql', {
    schema: {
      summary: 'Run a native query language statement',
      body: NativeQlRequest,
      response: { 200: QueryResponse, ...idemErrorResponses },
    },
  }, async (request) => {
    const query = parseNativeQuery(request.body.query);
    return engine.query(query, branchOf(request));
  });

  // the JSON form of route 2: the body route 4 takes, the answer route 2 gives
  app.post('/v1/query', {
    schema: {
      summary: 'Run a hybrid query given as JSON: results, next_cursor and explain (extension)',
      body: HybridQuery,
      response: { 200: QueryResponse, ...idemErrorResponses },
    },
  }, async (request) => engine.query(request.body, branchOf(request)));
}
