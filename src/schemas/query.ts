/** Schemas of hybrid queries: explain (4), nativeql (2), the JSON query (extension) and the bounded GraphQL adapter (6). */
import { Type, type Static, type TSchema } from 'typebox';
import type { HybridQuery as BindingQuery } from '../native/index.js';

/**
 * Every field of a hybrid query, once. The field names and their TypeScript
 * types are the binding's (`HybridQuery` in native/index.d.ts, generated from
 * crates/node/src/types.rs): `satisfies` below fails the build when the two
 * name different fields, and test/query-definition.test.ts checks that the
 * types agree. The JSON schema of the REST bodies (this object), the GraphQL
 * search arguments (src/graphql/types.ts) and the field list the QL docs
 * test walks are all built from it; the QL grammar (src/ql/parser.ts) is
 * the one other place a new field goes.
 *
 * The schema states the shape a query must have, which the service checks
 * for every front door (src/services/queries.ts: `unknown_field`,
 * `invalid_request`). Ranges, names, limits and enums are the engine's to
 * judge, with its own codes (`top_k_out_of_range`, `invalid_query`, ...);
 * the OpenAPI document states them (src/openapi-constraints.ts).
 */
const Nullable = <T extends TSchema>(t: T, description: string) => Type.Union([t, Type.Null()], { description });

const hybridQueryFields = {
  table: Type.Optional(Type.String({ description: 'table to search' })),
  tenant_id: Type.Optional(Type.String({ description: 'tenant scope' })),
  text: Type.Optional(Nullable(Type.String(), 'BM25 text query')),
  text_field: Type.Optional(Nullable(Type.String(), 'text-indexed column to search; all text columns when omitted')),
  vector: Type.Optional(Nullable(Type.Array(Type.Number()), 'query vector')),
  vector_field: Type.Optional(Nullable(Type.String(), 'vector column to score; the first vector column when omitted')),
  scalar_eq: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: 'equality predicates keyed by scalar column, e.g. {"lang": "en"}' })),
  graph_seed: Type.Optional(Nullable(Type.String(), 'record id to expand the edges graph from')),
  temporal_as_of: Type.Optional(Nullable(Type.Integer(), 'read the state as of this epoch')),
  freshness: Type.Optional(Type.String({ description: 'latest (default) or indexed' })),
  top_k: Type.Optional(Type.Integer({ description: 'rows per page, 1..1000, default 10' })),
  cursor: Type.Optional(Nullable(Type.String(), 'next_cursor of the previous page')),
  explain: Type.Optional(Type.Boolean({ description: 'also fill explain.planner_candidates' })),
  fusion: Type.Optional(Type.String({ description: 'extension: rrf (default) or relative_score' })),
  fusion_weights: Type.Optional(
    Type.Object(
      {
        lexical: Type.Optional(Type.Number()),
        vector: Type.Optional(Type.Number()),
        relational: Type.Optional(Type.Number()),
      },
      { additionalProperties: false, description: 'extension: relative weights of the signals in score fusion' },
    ),
  ),
  candidate_budget: Type.Optional(Type.Integer({ description: 'extension: candidates each ranked access path (text, vector, graph) contributes to fusion, 1..10000' })),
  graph_depth: Type.Optional(Type.Integer({ description: 'extension: graph hops, 1..8, default 2' })),
  return_fields: Type.Optional(
    Type.Array(Type.String(), { description: 'extension: the fields each result carries (default every field; [] none; at most 1000)' }),
  ),
} satisfies { [K in keyof BindingQuery]-?: TSchema };

export const HybridQuery = Type.Object(hybridQueryFields, { additionalProperties: false });
export type HybridQuery = Static<typeof HybridQuery>;

/** The fields of a hybrid query, in the order documents list them. */
export const HYBRID_QUERY_FIELDS = Object.keys(hybridQueryFields) as Array<keyof BindingQuery>;

/** Fields the engine refuses a query without (invalid_query); GraphQL declares them non-null. */
export const REQUIRED_QUERY_FIELDS: ReadonlyArray<keyof BindingQuery> = ['table', 'tenant_id'];

const NullableNumber = Type.Union([Type.Number(), Type.Null()]);

export const HybridScoreComponents = Type.Object({
  final_score: Type.Number(),
  freshness_penalty: NullableNumber,
  lexical: NullableNumber,
  relational: NullableNumber,
  vector: NullableNumber,
});

export const HybridQueryRow = Type.Object({
  fields: Type.Record(Type.String(), Type.Unknown()),
  record_id: Type.String(),
  score: HybridScoreComponents,
  tenant_id: Type.String(),
  version_id: Type.Integer(),
});

const Candidate = Type.Object({
  freshness: Type.String(),
  record_id: Type.String(),
  score_components: HybridScoreComponents,
  score_upper_bound: NullableNumber,
  source: Type.String(),
  version_id: Type.Integer(),
  visibility_checked: Type.Boolean(),
});

export const HybridExplain = Type.Object({
  access_path_timings: Type.Array(Type.Object({ access_path_id: Type.String(), build_ms: Type.Number(), open_ms: Type.Number() })),
  access_paths: Type.Array(
    Type.Object({
      access_path_id: Type.String(),
      candidates: Type.Integer(),
      opened: Type.Boolean(),
      visibility_checked_before_open: Type.Boolean(),
    }),
  ),
  candidate_budget: Type.Integer(),
  deduped_candidate_count: Type.Integer(),
  dirty_feature_count: Type.Integer(),
  early_stop_reason: Type.Union([Type.String(), Type.Null()]),
  exact_fallback_triggered: Type.Boolean(),
  failed_feature_count: Type.Integer(),
  final_visibility_guard_count: Type.Integer(),
  final_visibility_guard_removed: Type.Integer(),
  freshness_mode: Type.String(),
  fusion_method: Type.String(),
  graph_nodes_read: Type.Integer(),
  hot_overlay_searched: Type.Boolean(),
  lexical_cache_hits: Type.Integer(),
  lexical_cache_misses: Type.Integer(),
  lexical_indexed_documents: Type.Integer(),
  lexical_scored_documents: Type.Integer(),
  materialized_count: Type.Integer(),
  missing_feature_count: Type.Integer(),
  module_versions: Type.Array(Type.String()),
  opened_candidate_streams: Type.Array(Type.String()),
  pending_feature_count: Type.Integer(),
  phase_timings: Type.Array(Type.Object({ elapsed_ms: Type.Number(), phase: Type.String() })),
  planner_candidates: Type.Array(Candidate),
  policy_epoch: Type.Integer(),
  read_epoch: Type.Integer(),
  returned_count: Type.Integer(),
  scalar_filter_applied: Type.Boolean(),
  scalar_filter_predicates: Type.Array(Type.String()),
  scalar_filter_removed_records: Type.Integer(),
  scalar_filter_visible_records: Type.Integer(),
  schema_epoch: Type.Integer(),
  segments_scanned: Type.Integer(),
  selected_strategy: Type.Union([Type.String(), Type.Null()]),
  skipped_access_paths: Type.Array(Type.String()),
  tenant_mask_visible_records: Type.Integer(),
  text_candidates: Type.Integer(),
  vector_candidates: Type.Integer(),
});

export const QueryResponse = Type.Object({
  explain: HybridExplain,
  next_cursor: Type.Union([Type.String(), Type.Null()]),
  results: Type.Array(HybridQueryRow),
});

export const NativeQlRequest = Type.Object(
  { query: Type.String({ description: 'native query language text (docs/ql.md)' }) },
  { additionalProperties: false },
);
