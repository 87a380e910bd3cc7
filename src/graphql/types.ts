/**
 * GraphQL types shared by the native schema (route 7) and the bounded
 * schema (routes 6 and 1): hybrid search arguments and result rows, and the
 * mapping from GraphQL arguments to the engine's HybridQuery.
 */
import {
  GraphQLBoolean,
  GraphQLFloat,
  GraphQLInputObjectType,
  GraphQLInt,
  GraphQLList,
  GraphQLNonNull,
  GraphQLObjectType,
  GraphQLString,
  type GraphQLFieldConfigArgumentMap,
  type GraphQLInputType,
} from 'graphql';
import type { Braid, BranchRef, HybridQuery, RequestKey } from '../engine.js';
import { GraphQLJSON } from './scalars.js';

/** What every resolver receives: the engine and the branch the request addresses. */
export interface GraphQLContext {
  engine: Braid;
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
    version_id: { type: new GraphQLNonNull(GraphQLInt) },
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

export const FusionWeightsInput = new GraphQLInputObjectType({
  name: 'FusionWeightsInput',
  description: 'Relative weights of the signals in score fusion.',
  fields: {
    lexical: { type: GraphQLFloat },
    vector: { type: GraphQLFloat },
    relational: { type: GraphQLFloat },
  },
});

/**
 * The HybridQuery arguments, one per field. `table` is left out for the
 * per-table `<table>_search` fields; `scalarEq` replaces the JSON type of
 * scalar_eq with a typed input there.
 */
export function searchArgs(options: { withTable: boolean; scalarEq?: GraphQLInputType }): GraphQLFieldConfigArgumentMap {
  const args: GraphQLFieldConfigArgumentMap = {};
  if (options.withTable) args.table = { type: new GraphQLNonNull(GraphQLString), description: 'table to search' };
  Object.assign(args, {
    tenant_id: { type: new GraphQLNonNull(GraphQLString), description: 'tenant scope' },
    text: { type: GraphQLString, description: 'BM25 text query' },
    text_field: { type: GraphQLString, description: 'text-indexed column to search; all text columns when omitted' },
    vector: { type: new GraphQLList(new GraphQLNonNull(GraphQLFloat)), description: 'query vector' },
    vector_field: { type: GraphQLString, description: 'vector column to score; the first vector column when omitted' },
    scalar_eq: {
      type: options.scalarEq ?? GraphQLJSON,
      description: 'equality predicates keyed by scalar column, e.g. {lang: "en"}',
    },
    graph_seed: { type: GraphQLString, description: 'record id to expand the edges graph from' },
    temporal_as_of: { type: GraphQLInt, description: 'read the state as of this epoch' },
    freshness: { type: GraphQLString, description: 'latest (default) or indexed' },
    top_k: { type: GraphQLInt, description: 'rows per page, 1..1000, default 10' },
    cursor: { type: GraphQLString, description: 'next_cursor of the previous page' },
    explain: { type: GraphQLBoolean, description: 'also fill explain.planner_candidates' },
    fusion: { type: GraphQLString, description: 'rrf (default) or relative_score' },
    fusion_weights: { type: FusionWeightsInput },
    candidate_budget: { type: GraphQLInt, description: 'vector candidates, 1..10000' },
    graph_depth: { type: GraphQLInt, description: 'graph hops, 1..8, default 2' },
    return_fields: {
      type: new GraphQLList(new GraphQLNonNull(GraphQLString)),
      description: 'the fields each result carries (default every field; [] none)',
    },
  });
  return args;
}

function dropNulls(value: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) if (v !== null && v !== undefined) out[k] = v;
  return out;
}

/**
 * GraphQL arguments -> HybridQuery. An argument given as null is treated as
 * omitted (the engine default applies), inside fusion_weights and typed
 * scalar_eq inputs too; a JSON scalar_eq is passed through as written.
 */
export function toHybridQuery(args: Record<string, unknown>, table?: string, typedScalarEq = false): HybridQuery {
  const q = dropNulls(args);
  if (q.fusion_weights && typeof q.fusion_weights === 'object') q.fusion_weights = dropNulls(q.fusion_weights as Record<string, unknown>);
  if (typedScalarEq && q.scalar_eq && typeof q.scalar_eq === 'object') q.scalar_eq = dropNulls(q.scalar_eq as Record<string, unknown>);
  if (table !== undefined) q.table = table;
  return q as HybridQuery;
}
