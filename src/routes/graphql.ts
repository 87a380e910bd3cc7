/**
 * GraphQL routes: schema export (1), bounded adapter (6), native GraphQL (7).
 * docs/graphql.md describes the schemas, limits and error codes.
 */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  GraphQLError,
  KnownFragmentNamesRule,
  NoFragmentCyclesRule,
  execute,
  printSchema,
  specifiedRules,
  validate,
  version,
  type DocumentNode,
  type GraphQLSchema,
} from 'graphql';
import { graphqlScope, requireScope } from '../auth.js';
import { BraidError, isErrorCode } from '../errors.js';
import { errorResponses, idemErrorResponses } from '../schemas/common.js';
import { QueryResponse } from '../schemas/query.js';
import { compile, validationError } from '../validation.js';
import { BOUNDED_ADAPTER, boundedQuery, boundedSchema } from '../graphql/bounded.js';
import { BOUNDED_LIMITS, DEFAULT_LIMITS, checkLimits, parseDocument, selectOperation, type Limits } from '../graphql/bounds.js';
import { braidGraphQLError, formatGraphQLError, type GraphQlErrorBody } from '../graphql/errors.js';
import { GraphQlQueryRequest, GraphQlResponse, GraphQlSchemaResponse } from '../graphql/http.js';
import { jsonVariablesProvided } from '../graphql/scalars.js';
import { SchemaCache } from '../graphql/schema.js';
import { oneAtATime, type GraphQLContext } from '../graphql/types.js';
import { requestKeyOf } from '../idempotency/index.js';
import { headerBranch } from '../services/branch.js';
import { runQuery } from '../services/queries.js';

export const GRAPHQL_EXECUTION = `graphql-js/${version} in-process against braid-engine`;

export interface GraphQLRouteOptions {
  /** Limits of POST /v1/graphql (defaults: DEFAULT_LIMITS). */
  limits?: Partial<Limits>;
  /** Limits of POST /v1/graphql/bounded (defaults: BOUNDED_LIMITS). */
  boundedLimits?: Partial<Limits>;
}

/** A body that is not a GraphQL request is graphql_bad_request, naming what is wrong. */
function requestValidator() {
  const fn = compile(GraphQlQueryRequest);
  return (data: unknown) =>
    fn(data)
      ? { value: data }
      : { error: new BraidError('graphql_bad_request', `not a GraphQL request: ${validationError(fn.errors).message}`) };
}

/**
 * Fragment names that are unknown or spread in a cycle, checked before the
 * limits walk: both rules are linear in the document.
 */
function fragmentErrors(schema: GraphQLSchema, document: DocumentNode): readonly GraphQLError[] {
  return validate(schema, document, [KnownFragmentNamesRule, NoFragmentCyclesRule]);
}

/** The GraphQL-over-HTTP media type of a GraphQL response. */
const GRAPHQL_RESPONSE_TYPE = 'application/graphql-response+json; charset=utf-8';

/** Whether a client accepts GraphQL-over-HTTP answers (and so gets 4xx for requests that never executed). */
function acceptsGraphQlResponse(accept: string | undefined): boolean {
  return (accept ?? '').includes('application/graphql-response+json');
}

/** A request-level failure of route 7 in its 200 body (spec 4.3.3). */
function graphqlFailure(err: BraidError): { errors: GraphQlErrorBody[] } {
  return { errors: [braidGraphQLError(err)] };
}

export async function graphqlRoutes(fastify: FastifyInstance, options: GraphQLRouteOptions = {}): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const state = app.braid;
  const { engine } = state;
  // a document writes no more records than one put-batch may (BRAID_MAX_BATCH)
  const maxListValues = Math.max(state.config.maxBatch, state.config.maxVectorDim);
  const limits: Limits = { ...DEFAULT_LIMITS, maxRecords: state.config.maxBatch, maxListValues, ...options.limits };
  const boundedLimits: Limits = { ...BOUNDED_LIMITS, maxListValues, ...options.boundedLimits };
  const cache = new SchemaCache(engine);
  const boundedSdl = printSchema(boundedSchema);

  app.get('/v1/graphql/schema', {
    schema: {
      summary: 'Export the bounded GraphQL schema (SDL) and the table names of the branch',
      response: { 200: GraphQlSchemaResponse, ...errorResponses },
    },
  }, async (request) => {
    return { adapter: BOUNDED_ADAPTER, execution: GRAPHQL_EXECUTION, schema: boundedSdl, tables: await cache.tableNames(headerBranch(request.headers)) };
  });

  app.post('/v1/graphql/bounded', {
    schema: {
      summary: 'Bounded GraphQL adapter: one hybrid search, answered with the full QueryResponse',
      body: GraphQlQueryRequest,
      response: { 200: QueryResponse, ...errorResponses },
    },
    validatorCompiler: requestValidator,
  }, async (request) => {
    const { query, variables, operationName } = request.body;
    const document = parseDocument(query);
    const fragments = fragmentErrors(boundedSchema, document);
    if (fragments.length) throw new BraidError('graphql_validation_failed', fragments.map((e) => e.message).join('; '));
    const hybrid = boundedQuery(document, variables, operationName, boundedLimits);
    return runQuery(engine, hybrid, headerBranch(request.headers));
  });

  app.post('/v1/graphql', {
    schema: {
      summary: 'Run a GraphQL query, mutation or admin operation against the catalog-generated schema',
      body: GraphQlQueryRequest,
      // the one body, of the type the client accepts (onSend below)
      response: {
        200: { content: { 'application/json': { schema: GraphQlResponse }, 'application/graphql-response+json': { schema: GraphQlResponse } } },
        ...idemErrorResponses,
      },
    },
    validatorCompiler: requestValidator,
    // an answer (an idempotent replay too) is of the type the client accepts
    onSend: async (request, reply, payload) => {
      if (reply.statusCode === 200 && acceptsGraphQlResponse(request.headers.accept)) void reply.type(GRAPHQL_RESPONSE_TYPE);
      return payload;
    },
  }, async (request) => {
    const { query, variables, operationName } = request.body;
    const branch = headerBranch(request.headers);
    const schema = await cache.get(branch);
    // GraphQL over HTTP: a client that accepts application/graphql-response+json
    // gets its answers as that type, and a 4xx status for a request that never
    // executed (it does not parse or validate, is over a limit, or its
    // variables do not coerce)
    const graphqlOverHttp = acceptsGraphQlResponse(request.headers.accept);
    // parse, validation and limit failures are GraphQL errors in the 200 body
    // on this route (spec 4.3.3); the bounded route answers them with a 400
    const unexecuted = (errors: readonly GraphQLError[]) => {
      if (!graphqlOverHttp) return { errors: errors.map(formatGraphQLError) };
      const first = formatGraphQLError(errors[0]!);
      throw new BraidError(isErrorCode(first.extensions.code) ? first.extensions.code : 'graphql_validation_failed', errors.map((e) => e.message).join('; '));
    };
    let document: DocumentNode;
    try {
      document = parseDocument(query);
      const fragments = fragmentErrors(schema, document);
      if (fragments.length) return unexecuted(fragments);
      const operation = selectOperation(document, operationName);
      // no operation to pick: execution reports it as a GraphQL error below
      if (operation) checkLimits(schema, document, operation, variables ?? {}, limits);
    } catch (err) {
      if (err instanceof BraidError && !graphqlOverHttp) return graphqlFailure(err);
      throw err;
    }
    // a token needs the scope of what the document runs (src/auth.ts)
    if (request.scope) requireScope(request.scope, graphqlScope(document, operationName), 'this GraphQL operation');
    const invalid = validate(schema, document, [...specifiedRules, jsonVariablesProvided(variables)]);
    if (invalid.length) return unexecuted(invalid);
    // an operation of a type the schema does not have (subscription) does not
    // validate either: graphql-js reported it from execution, with data: null
    const operation = selectOperation(document, operationName);
    if (operation && !schema.getRootType(operation.operation)) {
      return unexecuted([new GraphQLError(`this schema has no ${operation.operation} operations`, { nodes: operation })]);
    }
    const contextValue: GraphQLContext = { engine, branch, endpoint: state.endpoint, requestKey: requestKeyOf(request), read: oneAtATime() };
    const result = await execute({
      schema,
      document,
      variableValues: variables ?? undefined,
      operationName: operationName ?? undefined,
      contextValue,
    });
    // no data at all: the variables did not coerce (or no operation was
    // picked), so nothing executed
    if (!('data' in result) && result.errors?.length) return unexecuted(result.errors);
    // a keyed document that failed after committing some of its mutations
    // marks its key (src/idempotency): another body under it is then 409
    if (contextValue.committed && result.errors?.length && request.idempotency) request.idempotency.partial = true;
    const body: { data?: Record<string, unknown> | null; errors?: GraphQlErrorBody[] } = {};
    if ('data' in result) body.data = result.data ?? null;
    if (result.errors?.length) {
      body.errors = result.errors.map(formatGraphQLError);
      for (const [i, e] of body.errors.entries()) {
        if (e.extensions.code === 'internal_error' || e.extensions.code === 'internal_panic') {
          request.log.error({ err: result.errors[i]!.originalError }, 'graphql resolver failed');
        }
      }
    }
    return body;
  });
}
