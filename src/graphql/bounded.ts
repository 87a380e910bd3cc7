/**
 * The bounded GraphQL subset (route 6, exported by route 1): one query
 * operation with exactly one root field, `search`, selecting within
 * `results { record_id tenant_id version_id fields score { ... } } next_cursor explain`.
 * Its arguments (literals or variables) become the HybridQuery; the route
 * answers with the full QueryResponse, exactly as POST /v1/nativeql does.
 */
import {
  GraphQLObjectType,
  GraphQLSchema,
  Kind,
  getArgumentValues,
  getVariableValues,
  specifiedRules,
  validate,
  type DocumentNode,
  type FieldNode,
  type FragmentDefinitionNode,
  type OperationDefinitionNode,
  type SelectionSetNode,
  type ASTNode,
} from 'graphql';
import type { HybridQuery } from '../native/engine.js';
import { BraidError } from '../errors.js';
import { checkLimits, BOUNDED_LIMITS, type Limits } from './bounds.js';
import { jsonVariablesProvided } from './scalars.js';
import { HybridRow, ScoreComponents, SearchResult, searchArgs, toHybridQuery } from './types.js';

export const BOUNDED_ADAPTER = 'braid-bounded-graphql/1';

const searchField = {
  type: SearchResult,
  description: 'Hybrid query; the bounded route answers with the full QueryResponse whatever the selection.',
  args: searchArgs({ withTable: true }),
};

export const boundedSchema = new GraphQLSchema({
  query: new GraphQLObjectType({ name: 'Query', fields: { search: searchField } }),
});

/** The fields each type of the bounded subset may select. */
const ALLOWED: Record<string, string[]> = {
  Query: ['search'],
  SearchResult: Object.keys(SearchResult.getFields()),
  HybridRow: Object.keys(HybridRow.getFields()),
  ScoreComponents: Object.keys(ScoreComponents.getFields()),
};

const notAllowed = (message: string) => new BraidError('graphql_not_allowed', `${message} (POST /v1/graphql/bounded runs one hybrid search; use POST /v1/graphql for anything else)`);

function directiveCheck(node: { directives?: readonly { name: { value: string } }[] }): void {
  const d = node.directives?.[0];
  if (d) throw notAllowed(`directives are not allowed: @${d.name.value}`);
}

/** Checks a selection set against ALLOWED, expanding fragments; returns nothing or throws graphql_not_allowed. */
function checkSelection(
  set: SelectionSetNode,
  typeName: string,
  fragments: Map<string, FragmentDefinitionNode>,
  visiting: Set<string>,
  fieldsSeen: { count: number },
  checked: Map<string, number> = new Map(),
): void {
  const allowed = ALLOWED[typeName] ?? [];
  for (const sel of set.selections) {
    directiveCheck(sel);
    if (sel.kind === Kind.FIELD) {
      const name = sel.name.value;
      if (sel.alias) throw notAllowed(`aliases are not allowed: "${sel.alias.value}: ${name}"`);
      if (!allowed.includes(name)) {
        throw notAllowed(`field "${name}" is not allowed on ${typeName}; allowed: ${allowed.join(', ')}`);
      }
      if (typeName === 'Query') fieldsSeen.count += 1;
      if (fieldsSeen.count > 1) throw notAllowed(`exactly one top-level field, search, is allowed`);
      if (sel.arguments?.length && typeName !== 'Query') {
        throw notAllowed(`arguments are only allowed on search, not on "${name}"`);
      }
      if (sel.selectionSet) {
        const fieldType = nextType(typeName, name);
        if (fieldType) checkSelection(sel.selectionSet, fieldType, fragments, visiting, { count: 0 }, checked);
      }
      continue;
    }
    const condition = sel.kind === Kind.INLINE_FRAGMENT ? sel.typeCondition?.name.value : fragments.get(sel.name.value)?.typeCondition.name.value;
    if (sel.kind === Kind.FRAGMENT_SPREAD && condition === undefined) throw notAllowed(`unknown fragment "${sel.name.value}"`);
    if (condition !== undefined && condition !== typeName) throw notAllowed(`fragments on type ${condition} are not allowed here (only on ${typeName})`);
    if (sel.kind === Kind.INLINE_FRAGMENT) {
      checkSelection(sel.selectionSet, typeName, fragments, visiting, fieldsSeen, checked);
    } else {
      const name = sel.name.value;
      if (visiting.has(name)) throw notAllowed(`fragment "${name}" spreads itself`);
      // each fragment is checked once; a later spread adds the top-level
      // fields it was found to hold (so 2^n spreads cost n checks)
      const known = checked.get(name);
      if (known !== undefined) {
        fieldsSeen.count += known;
        if (fieldsSeen.count > 1) throw notAllowed(`exactly one top-level field, search, is allowed`);
        continue;
      }
      const frag = fragments.get(name)!;
      directiveCheck(frag);
      visiting.add(name);
      const own = { count: 0 };
      checkSelection(frag.selectionSet, typeName, fragments, visiting, own, checked);
      visiting.delete(name);
      checked.set(name, own.count);
      fieldsSeen.count += own.count;
      if (fieldsSeen.count > 1) throw notAllowed(`exactly one top-level field, search, is allowed`);
    }
  }
}

function nextType(typeName: string, field: string): string | undefined {
  if (typeName === 'Query' && field === 'search') return 'SearchResult';
  if (typeName === 'SearchResult' && field === 'results') return 'HybridRow';
  if (typeName === 'HybridRow' && field === 'score') return 'ScoreComponents';
  return undefined;
}

const where = (node: ASTNode | undefined) => (node?.loc ? ` at line ${node.loc.startToken.line}, column ${node.loc.startToken.column}` : '');

/**
 * Checks that `document` stays within the bounded subset and turns it into
 * the HybridQuery it asks for. Throws graphql_not_allowed (outside the
 * subset), graphql_too_deep / graphql_too_costly (limits),
 * graphql_validation_failed (invalid against the bounded schema or its
 * variables) or graphql_bad_request (operationName mismatch).
 */
export function boundedQuery(
  document: DocumentNode,
  variables: Record<string, unknown> | null | undefined,
  operationName: string | null | undefined,
  limits: Limits = BOUNDED_LIMITS,
): HybridQuery {
  const operations: OperationDefinitionNode[] = [];
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const def of document.definitions) {
    if (def.kind === Kind.OPERATION_DEFINITION) operations.push(def);
    else if (def.kind === Kind.FRAGMENT_DEFINITION) fragments.set(def.name.value, def);
    else throw notAllowed(`only a query operation is allowed, not a ${def.kind} definition`);
  }
  if (operations.length !== 1) throw notAllowed(`exactly one operation is allowed, got ${operations.length}`);
  const op = operations[0]!;
  if (operationName && op.name?.value !== operationName) {
    throw new BraidError('graphql_bad_request', `operationName "${operationName}" does not match the operation${op.name ? ` "${op.name.value}"` : ''} in the document`);
  }
  if (op.operation !== 'query') throw notAllowed(`${op.operation} operations are not allowed${where(op)}`);
  directiveCheck(op);
  for (const v of op.variableDefinitions ?? []) directiveCheck(v);
  const seen = { count: 0 };
  checkSelection(op.selectionSet, 'Query', fragments, new Set(), seen);
  if (seen.count !== 1) throw notAllowed(`exactly one top-level field, search, is allowed; got ${seen.count}`);

  checkLimits(boundedSchema, document, op, variables ?? {}, limits);

  const errors = validate(boundedSchema, document, [...specifiedRules, jsonVariablesProvided(variables)]);
  if (errors.length) {
    throw new BraidError('graphql_validation_failed', errors.map((e) => e.message + where(e.nodes?.[0])).join('; '));
  }
  const coerced = getVariableValues(boundedSchema, op.variableDefinitions ?? [], variables ?? {}, { maxErrors: 10 });
  if (coerced.errors) throw new BraidError('graphql_validation_failed', coerced.errors.map((e) => e.message).join('; '));

  const field = findSearch(op.selectionSet, fragments)!;
  const args = getArgumentValues(boundedSchema.getQueryType()!.getFields().search!, field, coerced.coerced);
  return toHybridQuery(args);
}

function findSearch(set: SelectionSetNode, fragments: Map<string, FragmentDefinitionNode>): FieldNode | undefined {
  for (const sel of set.selections) {
    if (sel.kind === Kind.FIELD) return sel;
    const inner = sel.kind === Kind.INLINE_FRAGMENT ? sel.selectionSet : fragments.get(sel.name.value)?.selectionSet;
    const found = inner && findSearch(inner, fragments);
    if (found) return found;
  }
  return undefined;
}
