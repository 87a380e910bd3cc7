/**
 * Depth and cost limits, checked on the parsed document before validation
 * and execution (docs/graphql.md, "Limits").
 *
 * - depth: a root field is at depth 1, each nested selection adds 1
 *   (fragments add nothing). Over `maxDepth`: graphql_too_deep.
 * - cost: every selected field costs the product of the list sizes above it:
 *   `results` counts the search's top_k (default 10, capped at 1000), any
 *   other list of objects counts `listSize` (10). Over `maxCost`:
 *   graphql_too_costly.
 * - introspection (`__schema`, `__type` and below) has its own bounds: each
 *   field costs 1, depth up to `introspectionMaxDepth`, and at most
 *   `introspectionMaxLists` nested lists of objects (types > fields > args).
 *
 * Each fragment is walked once per context (its depth, the list size it
 * inherits, the introspection state) and its cost memoised: a spread costs
 * its fragment's cost times the multiplier at the spread, without walking
 * it again. A document of fragments that each spread the previous one twice
 * (2^40 expansions from 400 tokens) is costed in time linear in its size,
 * and rejected by the cost limit, before validation ever sees it.
 *
 * - nesting: before the document is parsed, its tokens are read (without
 *   recursion) and the braces, brackets and parentheses counted: over
 *   `MAX_NESTING` levels is graphql_too_deep. graphql-js parses, validates
 *   and executes by recursion, so a document of a few thousand nested
 *   selection sets, list or object values or list types, well under
 *   `MAX_TOKENS`, would otherwise overflow the stack.
 */
import {
  GraphQLError,
  Kind,
  Lexer,
  Source,
  TokenKind,
  parse,
  SchemaMetaFieldDef,
  TypeMetaFieldDef,
  TypeNameMetaFieldDef,
  getNamedType,
  getNullableType,
  isCompositeType,
  isInterfaceType,
  isListType,
  isObjectType,
  type DocumentNode,
  type FieldNode,
  type FragmentDefinitionNode,
  type GraphQLField,
  type GraphQLNamedType,
  type GraphQLSchema,
  type OperationDefinitionNode,
  type SelectionSetNode,
} from 'graphql';
import { BraidError } from '../errors.js';

export interface Limits {
  maxDepth: number;
  maxCost: number;
  /** Assumed size of a list of objects other than search results. */
  listSize: number;
  introspectionMaxDepth: number;
  introspectionMaxLists: number;
  /**
   * Most root fields one operation runs, aliases and fragment spreads
   * counted each time (`__typename` aside): each is an engine call (a
   * search, a read, a write) or a walk of the schema, which the cost of its
   * selection does not weigh.
   */
  maxOperations: number;
  /** Most records one operation writes (`put` and `delete` 1 each, `put_batch` its list). */
  maxRecords: number;
  /**
   * Most values a list variable (`$vector: [Float!]`, `$records: [RecordInput!]`)
   * holds. graphql-js coerces a list element by element on the JavaScript
   * thread: a variable of a million numbers (8 MB) had held it for a second
   * (found by a fuzz review). No list argument takes more than a batch's
   * records or a vector's numbers.
   */
  maxListValues: number;
  /**
   * Whether a field under a list costs once per row (`results`: top_k) or
   * once. Route 6 answers the whole QueryResponse whatever is selected, so
   * there a selection's cost is its size after fragments expand, and the
   * answer is bounded by top_k (1..1000) as `/v1/nativeql`'s is: a selection
   * of `next_cursor` alone had passed where the same search selecting row
   * fields, with the same answer, was refused (a black-box review).
   */
  costPerRow: boolean;
}

/** Route 7 (POST /v1/graphql). */
export const DEFAULT_LIMITS: Limits = {
  maxDepth: 8,
  maxCost: 5000,
  listSize: 10,
  introspectionMaxDepth: 20,
  introspectionMaxLists: 3,
  maxOperations: 32,
  maxRecords: 10_000,
  maxListValues: 10_000,
  costPerRow: true,
};

/** Route 6 (POST /v1/graphql/bounded): the subset's natural depth is 4, and it runs one search. */
export const BOUNDED_LIMITS: Limits = { ...DEFAULT_LIMITS, maxDepth: 4, maxCost: 2000, costPerRow: false };

/** Upper bound on the tokens of a document (parse option maxTokens). */
export const MAX_TOKENS = 20_000;

/**
 * Upper bound on the nesting of braces, brackets and parentheses in a
 * document: far above what the depth limits let a selection reach, and as
 * deep as the engine reads a JSON value (128 levels).
 */
export const MAX_NESTING = 128;

/**
 * Throws graphql_too_deep when the document's braces, brackets and
 * parentheses nest deeper than MAX_NESTING. A lexical error or a document of
 * more than MAX_TOKENS tokens ends the scan: parse() reports those.
 */
function checkNesting(query: string): void {
  const lexer = new Lexer(new Source(query));
  let depth = 0;
  try {
    for (let tokens = 0; tokens < MAX_TOKENS; tokens++) {
      const token = lexer.advance();
      if (token.kind === TokenKind.EOF) return;
      if (token.kind === TokenKind.BRACE_L || token.kind === TokenKind.BRACKET_L || token.kind === TokenKind.PAREN_L) {
        depth += 1;
        if (depth > MAX_NESTING) {
          throw new BraidError(
            'graphql_too_deep',
            `the document nests braces, brackets and parentheses more than ${MAX_NESTING} levels deep (line ${token.line}, column ${token.column})`,
          );
        }
      } else if (token.kind === TokenKind.BRACE_R || token.kind === TokenKind.BRACKET_R || token.kind === TokenKind.PAREN_R) {
        depth -= 1;
      }
    }
  } catch (err) {
    if (!(err instanceof GraphQLError)) throw err;
  }
}

/**
 * Parses a GraphQL document within the nesting and token bounds: a document
 * nested too deeply is graphql_too_deep, one that does not parse (or has too
 * many tokens) graphql_bad_request with the line and column.
 */
export function parseDocument(query: string): DocumentNode {
  checkNesting(query);
  try {
    return parse(query, { maxTokens: MAX_TOKENS });
  } catch (err) {
    if (!(err instanceof GraphQLError)) throw err;
    const loc = err.locations?.[0];
    throw new BraidError('graphql_bad_request', loc ? `${err.message} (line ${loc.line}, column ${loc.column})` : err.message);
  }
}

const DEFAULT_TOP_K = 10;
const MAX_TOP_K = 1000;

/** The operation a request runs: by operationName, or the only one. */
export function selectOperation(document: DocumentNode, operationName?: string | null): OperationDefinitionNode | undefined {
  const ops = document.definitions.filter((d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION);
  if (operationName) return ops.find((o) => o.name?.value === operationName);
  return ops.length === 1 ? ops[0] : undefined;
}

interface Walk {
  schema: GraphQLSchema;
  limits: Limits;
  fragments: Map<string, FragmentDefinitionNode>;
  variables: Record<string, unknown>;
  defaults: Map<string, number>;
  cost: number;
  depth: number;
  /** Fragment cost (at multiplier 1) and deepest depth, per fragment and context. */
  memo: Map<string, { cost: number; depth: number }>;
}

function fieldDef(parent: GraphQLNamedType | undefined, name: string, isRoot: boolean): GraphQLField<unknown, unknown> | undefined {
  if (name === '__typename') return TypeNameMetaFieldDef;
  if (isRoot && name === '__schema') return SchemaMetaFieldDef;
  if (isRoot && name === '__type') return TypeMetaFieldDef;
  if (parent && (isObjectType(parent) || isInterfaceType(parent))) return parent.getFields()[name];
  return undefined;
}

function topK(field: FieldNode, w: Walk): number | undefined {
  const arg = field.arguments?.find((a) => a.name.value === 'top_k');
  if (!arg) return undefined;
  let value: unknown;
  if (arg.value.kind === Kind.INT) value = Number(arg.value.value);
  else if (arg.value.kind === Kind.VARIABLE) {
    // a variable sent as null overrides its default (GraphQL's rule), and a
    // null top_k runs as omitted: the default of 10, not the document's
    const name = arg.value.name.value;
    value = Object.hasOwn(w.variables, name) ? w.variables[name] : w.defaults.get(name);
  }
  if (typeof value !== 'number' || !Number.isInteger(value)) return undefined;
  return Math.min(Math.max(value, 1), MAX_TOP_K);
}

function tooDeep(field: FieldNode, depth: number, limit: number, introspection: boolean): BraidError {
  const what = introspection ? 'introspection depth' : 'query depth';
  const loc = field.loc ? ` (line ${field.loc.startToken.line}, column ${field.loc.startToken.column})` : '';
  return new BraidError(
    'graphql_too_deep',
    `${what} exceeds the limit of ${limit}: field "${field.name.value}"${loc} is at depth ${depth}`,
  );
}

function tooCostly(w: Walk): BraidError {
  if (!w.limits.costPerRow) {
    return new BraidError('graphql_too_costly', `query cost exceeds the limit of ${w.limits.maxCost}: the selection holds more fields than that once its fragments expand`);
  }
  return new BraidError(
    'graphql_too_costly',
    `query cost exceeds the limit of ${w.limits.maxCost}: every selected field costs the product of the list sizes above it ` +
      `(results: top_k, default ${DEFAULT_TOP_K}; other lists: ${w.limits.listSize}); select fewer fields or lower top_k`,
  );
}

function walk(
  w: Walk,
  set: SelectionSetNode,
  parent: GraphQLNamedType | undefined,
  depth: number,
  multiplier: number,
  rows: number,
  intro: { lists: number } | null,
  visiting: Set<string>,
): void {
  for (const sel of set.selections) {
    if (sel.kind === Kind.INLINE_FRAGMENT) {
      const type = sel.typeCondition ? w.schema.getType(sel.typeCondition.name.value) : parent;
      walk(w, sel.selectionSet, type ?? undefined, depth, multiplier, rows, intro, visiting);
      continue;
    }
    if (sel.kind === Kind.FRAGMENT_SPREAD) {
      const name = sel.name.value;
      const frag = w.fragments.get(name);
      if (!frag || visiting.has(name)) continue; // unknown or cyclic: rejected before the walk
      const key = `${name}|${depth}|${rows}|${intro ? intro.lists : '-'}`;
      let summary = w.memo.get(key);
      if (!summary) {
        // walk the fragment once on its own, at multiplier 1
        const inner: Walk = { ...w, cost: 0, depth: 0 };
        visiting.add(name);
        walk(inner, frag.selectionSet, w.schema.getType(frag.typeCondition.name.value) ?? undefined, depth, 1, rows, intro, visiting);
        visiting.delete(name);
        summary = { cost: inner.cost, depth: inner.depth };
        w.memo.set(key, summary);
      }
      w.depth = Math.max(w.depth, summary.depth);
      w.cost += summary.cost * multiplier;
      if (w.cost > w.limits.maxCost) throw tooCostly(w);
      continue;
    }
    const name = sel.name.value;
    const d = depth + 1;
    const def = fieldDef(parent, name, depth === 0);
    const isIntro = intro !== null || (depth === 0 && (name === '__schema' || name === '__type'));
    if (isIntro) {
      if (d > w.limits.introspectionMaxDepth) throw tooDeep(sel, d, w.limits.introspectionMaxDepth, true);
      w.cost += 1;
    } else {
      if (d > w.limits.maxDepth) throw tooDeep(sel, d, w.limits.maxDepth, false);
      w.depth = Math.max(w.depth, d);
      w.cost += multiplier;
    }
    if (w.cost > w.limits.maxCost) throw tooCostly(w);
    if (!sel.selectionSet) continue;
    const type = def?.type;
    const named = type ? getNamedType(type) : undefined;
    const isObjectList = type !== undefined && isListType(getNullableType(type)) && named !== undefined && isCompositeType(named);
    const childRows = topK(sel, w) ?? (def?.args.some((a) => a.name === 'top_k') ? DEFAULT_TOP_K : rows);
    let childMultiplier = multiplier;
    let childIntro = intro ?? (isIntro ? { lists: 0 } : null);
    if (isObjectList) {
      if (childIntro) {
        childIntro = { lists: childIntro.lists + 1 };
        if (childIntro.lists > w.limits.introspectionMaxLists) {
          throw new BraidError(
            'graphql_too_costly',
            `introspection nests more than ${w.limits.introspectionMaxLists} lists of objects (at "${name}"); the standard introspection query needs 3`,
          );
        }
      } else {
        childMultiplier = w.limits.costPerRow ? multiplier * (name === 'results' ? childRows : w.limits.listSize) : multiplier;
      }
    }
    walk(w, sel.selectionSet, named, d, childMultiplier, childRows, childIntro, visiting);
  }
}

/**
 * Throws graphql_too_deep or graphql_too_costly when `operation` crosses a
 * limit; returns its depth and cost otherwise.
 */
export function checkLimits(
  schema: GraphQLSchema,
  document: DocumentNode,
  operation: OperationDefinitionNode,
  variables: Record<string, unknown>,
  limits: Limits,
): { depth: number; cost: number } {
  // before anything walks the variables: a list variable is coerced value by value
  for (const v of operation.variableDefinitions ?? []) {
    const value = variables[v.variable.name.value];
    const list = v.type.kind === Kind.LIST_TYPE || (v.type.kind === Kind.NON_NULL_TYPE && v.type.type.kind === Kind.LIST_TYPE);
    if (list && Array.isArray(value) && value.length > limits.maxListValues) {
      throw new BraidError(
        'graphql_too_costly',
        `variable $${v.variable.name.value} holds ${value.length} values; a list variable holds at most ${limits.maxListValues} ` +
          '(the most records a batch takes, and more numbers than a vector has)',
      );
    }
  }
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const def of document.definitions) if (def.kind === Kind.FRAGMENT_DEFINITION) fragments.set(def.name.value, def);
  const defaults = new Map<string, number>();
  for (const v of operation.variableDefinitions ?? []) {
    if (v.defaultValue?.kind === Kind.INT) defaults.set(v.variable.name.value, Number(v.defaultValue.value));
  }
  const root = operation.operation === 'mutation' ? schema.getMutationType() : operation.operation === 'subscription' ? schema.getSubscriptionType() : schema.getQueryType();
  const w: Walk = { schema, limits, fragments, variables, defaults, cost: 0, depth: 0, memo: new Map() };
  walk(w, operation.selectionSet, root ?? undefined, 0, 1, DEFAULT_TOP_K, null, new Set());
  // a variable left out takes its default from the document: count that list
  const values: Record<string, unknown> = {};
  for (const v of operation.variableDefinitions ?? []) {
    if (v.defaultValue) values[v.variable.name.value] = v.defaultValue.kind === Kind.LIST ? v.defaultValue.values : v.defaultValue;
  }
  Object.assign(values, variables);
  const work = rootWork(operation.selectionSet, fragments, values, new Map(), new Set());
  if (work.fields > limits.maxOperations) {
    throw new BraidError(
      'graphql_too_costly',
      `the operation runs ${work.fields} root fields (aliases and fragment spreads counted each time); the limit is ${limits.maxOperations}, ` +
        'since each is an engine call: send several requests, or one search with a larger top_k',
    );
  }
  if (work.records > limits.maxRecords) {
    throw new BraidError(
      'batch_too_large',
      `the operation writes ${work.records} records; one request writes at most ${limits.maxRecords}, as put-batch does`,
    );
  }
  return { depth: w.depth, cost: w.cost };
}

interface RootWork {
  fields: number;
  records: number;
}

/**
 * The root fields `set` runs and the records they write, fragments counted
 * at each spread (each fragment walked once: memoised, so a chain of
 * fragments that each spread the next twice is counted in linear time).
 */
function rootWork(
  set: SelectionSetNode,
  fragments: Map<string, FragmentDefinitionNode>,
  variables: Record<string, unknown>,
  memo: Map<string, RootWork>,
  visiting: Set<string>,
): RootWork {
  const work: RootWork = { fields: 0, records: 0 };
  const add = (w: RootWork) => {
    work.fields += w.fields;
    work.records += w.records;
  };
  for (const sel of set.selections) {
    if (sel.kind === Kind.INLINE_FRAGMENT) {
      add(rootWork(sel.selectionSet, fragments, variables, memo, visiting));
    } else if (sel.kind === Kind.FRAGMENT_SPREAD) {
      const name = sel.name.value;
      const frag = fragments.get(name);
      if (!frag || visiting.has(name)) continue; // unknown or cyclic: rejected by validation
      let counted = memo.get(name);
      if (!counted) {
        visiting.add(name);
        counted = rootWork(frag.selectionSet, fragments, variables, memo, visiting);
        visiting.delete(name);
        memo.set(name, counted);
      }
      add(counted);
    } else if (sel.name.value !== '__typename') {
      // introspection (`__schema`, `__type`) too: aliased, it multiplies like any field
      work.fields += 1;
      work.records += recordsWritten(sel, variables);
    }
  }
  return work;
}

/** Records a root mutation field writes: 1 for `put` and `delete`, the list's length for `put_batch`. */
function recordsWritten(field: FieldNode, variables: Record<string, unknown>): number {
  const name = field.name.value;
  if (name === 'put' || name === 'delete') return 1;
  if (name !== 'put_batch') return 0;
  const value = field.arguments?.find((a) => a.name.value === 'records')?.value;
  if (value?.kind === Kind.LIST) return value.values.length;
  if (value?.kind === Kind.VARIABLE) {
    const list = variables[value.name.value];
    return Array.isArray(list) ? list.length : 1;
  }
  // a single object stands for a list of one
  return value ? 1 : 0;
}
