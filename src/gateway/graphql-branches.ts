/**
 * GraphQL `branches` through a gateway, answered by the gateway: the
 * branches of its catalog by their catalog names, as GET /v1/branches lists
 * them. Passed on, the engine's answer listed every branch it holds by its
 * own names and its own address, those a catalog with `discover_branches:
 * false` hides included (found by a black-box test).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { type DocumentNode, GraphQLList, GraphQLNonNull, GraphQLObjectType, GraphQLSchema, execute, validate } from 'graphql';
import { graphqlRootFields } from '../auth.js';
import { BraidError } from '../errors.js';
import { formatGraphQLError } from '../graphql/errors.js';
import { BranchType } from '../graphql/schema.js';
import type { Engines } from './engines.js';
import { catalogBranches } from './ops.js';

const BRANCHES = 'branches';
/** What a document answered here may select at its root. */
const ANSWERED_HERE = new Set<string | undefined>([BRANCHES, '__typename']);

interface Context {
  engines: Engines;
  request: FastifyRequest;
}

const schema = new GraphQLSchema({
  query: new GraphQLObjectType<unknown, Context>({
    name: 'Query',
    fields: {
      branches: {
        type: new GraphQLNonNull(new GraphQLList(new GraphQLNonNull(BranchType))),
        resolve: (_source, _args, ctx: Context) => catalogBranches(ctx.engines, ctx.request),
      },
    },
  }),
});

/** Whether the gateway answers this document itself: some operation of it selects `branches`. */
export function asksForBranches(document: DocumentNode): boolean {
  return graphqlRootFields(document).some((fields) => fields.has(BRANCHES));
}

/**
 * Answers a document that selects `branches` as route 7 would: 200 with
 * `data` and any `errors`. A document that also selects anything else is
 * `400 graphql_not_allowed`: the rest would have to run at an engine.
 */
export async function answerBranches(
  reply: FastifyReply,
  engines: Engines,
  request: FastifyRequest,
  body: Record<string, unknown>,
  document: DocumentNode,
): Promise<FastifyReply> {
  if (!graphqlRootFields(document).every((fields) => [...fields].every((name) => ANSWERED_HERE.has(name)))) {
    throw new BraidError(
      'graphql_not_allowed',
      'through a gateway, `branches` is answered by the gateway from its catalog (as GET /v1/branches): ask for it in a document that selects nothing else',
    );
  }
  const invalid = validate(schema, document);
  if (invalid.length > 0) return reply.status(200).send({ errors: invalid.map(formatGraphQLError) });
  const result = await execute({
    schema,
    document,
    variableValues: body.variables as Record<string, unknown> | undefined,
    operationName: typeof body.operationName === 'string' ? body.operationName : undefined,
    contextValue: { engines, request } satisfies Context,
  });
  return reply.status(200).send(result.errors ? { data: result.data ?? null, errors: result.errors.map(formatGraphQLError) } : { data: result.data });
}
