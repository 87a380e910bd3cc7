/** Schemas of hybrid queries: explain (4), nativeql (2), the JSON query (extension) and the bounded GraphQL adapter (6). */
import { Type, type Static } from 'typebox';

const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()]);

export const HybridQuery = Type.Object(
  {
    cursor: Type.Optional(Nullable(Type.String({ description: 'next_cursor of the previous page' }))),
    explain: Type.Optional(Type.Boolean({ description: 'also fill planner_candidates' })),
    freshness: Type.Optional(Type.String({ description: 'latest (default) or indexed' })),
    graph_seed: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    scalar_eq: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    table: Type.Optional(Type.String()),
    temporal_as_of: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
    tenant_id: Type.Optional(Type.String()),
    text: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    text_field: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    top_k: Type.Optional(Type.Integer({ description: '1..1000, default 10' })),
    vector: Type.Optional(Type.Union([Type.Array(Type.Number()), Type.Null()])),
    vector_field: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    fusion: Type.Optional(Type.String({ description: 'extension: rrf (default) or relative_score' })),
    fusion_weights: Type.Optional(
      Type.Object(
        {
          lexical: Type.Optional(Type.Number()),
          vector: Type.Optional(Type.Number()),
          relational: Type.Optional(Type.Number()),
        },
        { additionalProperties: false },
      ),
    ),
    candidate_budget: Type.Optional(Type.Integer({ description: 'extension: vector candidates, 1..10000' })),
    graph_depth: Type.Optional(Type.Integer({ description: 'extension: graph hops, 1..8, default 2' })),
    return_fields: Type.Optional(
      Type.Array(Type.String({ minLength: 1 }), {
        maxItems: 1000,
        description: 'extension: the fields each result carries (default every field; [] none)',
      }),
    ),
  },
  { additionalProperties: false },
);
export type HybridQuery = Static<typeof HybridQuery>;

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
