/**
 * GraphQL `branches` through a gateway, answered by the gateway: the
 * branches of its catalog by their catalog names, as GET /v1/branches lists
 * them. Passed on, the engine's answer listed every branch it holds by its
 * own names and its own address, those a catalog with `discover_branches:
 * false` hides included (found by a black-box test).
 */
import type { FastifyRequest } from 'fastify';
import {
  type DocumentNode,
  type FragmentDefinitionNode,
  GraphQLList,
  GraphQLNonNull,
  GraphQLObjectType,
  GraphQLSchema,
  Kind,
  OperationTypeNode,
  type SelectionNode,
  execute,
  validate,
  visit,
} from 'graphql';
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

/** The local answer to a document's `branches` fields, and how to merge it into the engine's answer. */
export interface BranchesAnswer {
  /** The whole answer, when the document selects nothing else. */
  whole?: Record<string, unknown>;
  /** Otherwise the values of its `branches` fields by response name, to put into the engine's `data`. */
  fields?: Record<string, unknown>;
}

/**
 * Answers the `branches` fields of a document as route 7 would. A document
 * that selects nothing else is answered whole here. One that also selects
 * other fields runs at the engine, and its `branches` fields (selected
 * directly at the root, so each runs alone) are answered here and put into
 * the engine's answer (`mergeBranches`). One that selects `branches` through
 * a fragment among other fields is `400 graphql_not_allowed`: the fragment
 * cannot be split from the rest.
 */
export async function answerBranches(
  engines: Engines,
  request: FastifyRequest,
  body: Record<string, unknown>,
  document: DocumentNode,
): Promise<BranchesAnswer> {
  const context: Context = { engines, request };
  if (graphqlRootFields(document).every((fields) => [...fields].every((name) => ANSWERED_HERE.has(name)))) {
    const invalid = validate(schema, document);
    if (invalid.length > 0) return { whole: { errors: invalid.map(formatGraphQLError) } };
    const result = await execute({
      schema,
      document,
      variableValues: body.variables as Record<string, unknown> | undefined,
      operationName: typeof body.operationName === 'string' ? body.operationName : undefined,
      contextValue: context,
    });
    return { whole: result.errors ? { data: result.data ?? null, errors: result.errors.map(formatGraphQLError) } : { data: result.data } };
  }
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const d of document.definitions) if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d);
  const fields: Record<string, unknown> = {};
  for (const op of document.definitions) {
    if (op.kind !== Kind.OPERATION_DEFINITION) continue;
    for (const selection of op.selectionSet.selections) {
      if (selection.kind !== Kind.FIELD) {
        if (graphqlRootFields({ kind: Kind.DOCUMENT, definitions: [{ ...op, selectionSet: { kind: Kind.SELECTION_SET, selections: [selection] } }, ...fragments.values()] }).some((f) => f.has(BRANCHES))) {
          throw new BraidError(
            'graphql_not_allowed',
            'through a gateway, `branches` is answered by the gateway from its catalog (as GET /v1/branches): select it at the root of the operation, not through a fragment, when the document selects other fields too',
          );
        }
        continue;
      }
      if (selection.name.value !== BRANCHES) continue;
      // the field alone, with the fragments its selection spreads
      const used = new Set<string>();
      const pending = [selection as SelectionNode];
      while (pending.length > 0) {
        visit(pending.pop()!, {
          FragmentSpread(node) {
            const fragment = fragments.get(node.name.value);
            if (fragment && !used.has(node.name.value)) {
              used.add(node.name.value);
              pending.push(...fragment.selectionSet.selections);
            }
          },
        });
      }
      const alone: DocumentNode = {
        kind: Kind.DOCUMENT,
        definitions: [
          { kind: Kind.OPERATION_DEFINITION, operation: OperationTypeNode.QUERY, variableDefinitions: op.variableDefinitions, selectionSet: { kind: Kind.SELECTION_SET, selections: [selection] } },
          ...[...used].map((name) => fragments.get(name)!),
        ],
      };
      const result = await execute({ schema, document: alone, variableValues: body.variables as Record<string, unknown> | undefined, contextValue: context });
      const name = selection.alias?.value ?? BRANCHES;
      fields[name] = result.data?.[name] ?? null;
    }
  }
  return { fields };
}

/**
 * The engine's answer to a document whose `branches` fields were answered
 * here (`answerBranches`), with those fields replaced; the engine's answer
 * as it is when it has no `data` object (the document failed there).
 */
export function mergeBranches(payload: Buffer, fields: Record<string, unknown>): Buffer {
  let answer: unknown;
  try {
    answer = JSON.parse(payload.toString('utf8'));
  } catch {
    return payload;
  }
  if (typeof answer !== 'object' || answer === null) return payload;
  const data = (answer as { data?: unknown }).data;
  if (typeof data !== 'object' || data === null) return payload;
  for (const [name, value] of Object.entries(fields)) if (name in data) (data as Record<string, unknown>)[name] = value;
  return Buffer.from(JSON.stringify(answer));
}
