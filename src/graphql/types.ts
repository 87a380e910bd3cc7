/**
 * GraphQL types shared by the native schema (route 7) and the bounded
 * schema (routes 6 and 1): hybrid search arguments (built from the one
 * HybridQuery definition, src/schemas/query.ts) and result rows, and the
 * mapping from GraphQL arguments to the engine's HybridQuery.
 */
import {
  GraphQLBoolean,
  GraphQLInputObjectType,
  GraphQLInt,
  GraphQLList,
  GraphQLNonNull,
  GraphQLObjectType,
  GraphQLString,
  type GraphQLFieldConfigArgumentMap,
  type GraphQLInputType,
} from 'graphql';
import type { BranchRef, Engine, HybridQuery as QueryInput, RequestKey } from '../native/engine.js';
import { HYBRID_QUERY_FIELDS, HybridQuery, REQUIRED_QUERY_FIELDS } from '../schemas/query.js';
import { BraidError } from '../errors.js';
import { GraphQLFloat, GraphQLJSON, GraphQLSafeInt } from './scalars.js';

/** What every resolver receives: the typed binding its services take and the branch the request addresses. */
export interface GraphQLContext {
  engine: Engine;
  branch: BranchRef;
  /** The endpoint reported by `branches` (same as GET /v1/branches). */
  endpoint: () => string;
  /**
   * The Idempotency-Key (scoped) and body hash of a keyed request: each
   * mutation field commits its own receipt with its write, so a retry after
   * a crash before the response's receipt replays the writes instead of
   * running them again.
   */
  requestKey?: RequestKey;
  /**
   * Runs the request's reads (searches and record reads) one after another
   * (oneAtATime): graphql-js starts every root field of a query at once, and
   * 32 aliased searches of 1,024 terms each held every worker of the engine
   * for seconds, so that other clients' requests, readiness included, waited
   * behind one request (docs/graphql.md, "Limits").
   */
  read: <T>(call: () => Promise<T>) => Promise<T>;
  /** Set once a mutation of the document has committed. */
  committed?: boolean;
}

/** A queue that runs each call once the one before it has settled. */
export function oneAtATime(): <T>(call: () => Promise<T>) => Promise<T> {
  let tail: Promise<unknown> = Promise.resolve();
  return <T>(call: () => Promise<T>): Promise<T> => {
    const run = tail.then(call);
    tail = run.catch(() => undefined);
    return run;
  };
}

export const ScoreComponents = new GraphQLObjectType({
  name: 'ScoreComponents',
  description: 'Per-signal scores of a hybrid result row; a signal that did not take part is null.',
  fields: {
    final_score: { type: new GraphQLNonNull(GraphQLFloat) },
    lexical: { type: GraphQLFloat },
    vector: { type: GraphQLFloat },
    relational: { type: GraphQLFloat },
    freshness_penalty: { type: GraphQLFloat },
  },
});

export const HybridRow = new GraphQLObjectType({
  name: 'HybridRow',
  description: 'One ranked row of a hybrid query (HybridQueryRow).',
  fields: {
    record_id: { type: new GraphQLNonNull(GraphQLString) },
    tenant_id: { type: new GraphQLNonNull(GraphQLString) },
    version_id: { type: new GraphQLNonNull(GraphQLSafeInt) },
    fields: { type: new GraphQLNonNull(GraphQLJSON), description: 'the record field map' },
    score: { type: new GraphQLNonNull(ScoreComponents) },
  },
});

export const SearchResult = new GraphQLObjectType({
  name: 'SearchResult',
  description: 'A page of hybrid results (QueryResponse).',
  fields: {
    results: { type: new GraphQLNonNull(new GraphQLList(new GraphQLNonNull(HybridRow))) },
    next_cursor: { type: GraphQLString, description: 'pass as `cursor` to read the next page; null on the last page' },
    explain: { type: new GraphQLNonNull(GraphQLJSON), description: 'the HybridExplain structure (docs/query.md)' },
  },
});

/**
 * A JSON schema of the HybridQuery definition (src/schemas/query.ts) as a
 * GraphQL input type: strings, integers, numbers and booleans as the
 * GraphQL scalars, a union with null as the nullable type, arrays as
 * lists, maps as JSON, objects as input objects named after their field.
 */
function inputType(schema: JsonSchema, field: string): GraphQLInputType {
  const members = schema.anyOf?.filter((m) => m.type !== 'null');
  if (members?.length === 1) return inputType(members[0]!, field);
  switch (schema.type) {
    case 'string':
      return GraphQLString;
    case 'integer':
      return GraphQLInt;
    case 'number':
      return GraphQLFloat;
    case 'boolean':
      return GraphQLBoolean;
    case 'array':
      return new GraphQLList(new GraphQLNonNull(inputType(schema.items!, field)));
    case 'object':
      if (!schema.properties) return GraphQLJSON;
      return inputObject(schema, field);
    default:
      throw new BraidError('internal_error', `the HybridQuery field ${field} has no GraphQL input type`);
  }
}

interface JsonSchema {
  type?: string;
  anyOf?: JsonSchema[];
  items?: JsonSchema;
  properties?: Record<string, JsonSchema>;
  description?: string;
}

const inputObjects = new Map<string, GraphQLInputObjectType>();

/** `fusion_weights` -> `FusionWeightsInput`, built once. */
function inputObject(schema: JsonSchema, field: string): GraphQLInputObjectType {
  const name = `${field.split('_').map((w) => w[0]!.toUpperCase() + w.slice(1)).join('')}Input`;
  let type = inputObjects.get(name);
  if (!type) {
    const fields = Object.fromEntries(Object.entries(schema.properties!).map(([k, v]) => [k, { type: inputType(v, k), description: v.description }]));
    type = new GraphQLInputObjectType({ name, description: schema.description, fields });
    inputObjects.set(name, type);
  }
  return type;
}

/** Every HybridQuery field as a GraphQL argument, in the definition's order. */
const queryArgs: GraphQLFieldConfigArgumentMap = Object.fromEntries(
  HYBRID_QUERY_FIELDS.map((name) => {
    const schema = HybridQuery.properties[name] as JsonSchema;
    const type = inputType(schema, name);
    const description = schema.description ?? schema.anyOf?.find((m) => m.description)?.description;
    return [name, { type: REQUIRED_QUERY_FIELDS.includes(name) ? new GraphQLNonNull(type) : type, description }];
  }),
);

/**
 * The HybridQuery arguments, one per field. `table` is left out for the
 * per-table `<table>_search` fields; `scalarEq` replaces the JSON type of
 * scalar_eq with a typed input there.
 */
export function searchArgs(options: { withTable: boolean; scalarEq?: GraphQLInputType }): GraphQLFieldConfigArgumentMap {
  const args: GraphQLFieldConfigArgumentMap = { ...queryArgs };
  if (!options.withTable) delete args.table;
  if (options.scalarEq) args.scalar_eq = { ...args.scalar_eq!, type: options.scalarEq };
  return args;
}

function dropNulls(value: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) if (v !== null && v !== undefined) out[k] = v;
  return out;
}

/**
 * GraphQL arguments -> HybridQuery. An argument given as null is treated as
 * omitted (the engine default applies), inside fusion_weights too. A filter
 * is not: `scalar_eq: {year: null}`, typed or JSON, goes to the engine as
 * written, which refuses it as every route does, instead of a dropped
 * condition silently widening the answer. (A typed field whose variable was
 * not sent is absent, not null, and filters nothing.)
 */
export function toHybridQuery(args: Record<string, unknown>, table?: string): QueryInput {
  const q = dropNulls(args);
  if (q.fusion_weights && typeof q.fusion_weights === 'object') q.fusion_weights = dropNulls(q.fusion_weights as Record<string, unknown>);
  if (table !== undefined) q.table = table;
  return q as QueryInput;
}
