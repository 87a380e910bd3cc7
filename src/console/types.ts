/**
 * The console's view of the public API: the parts of the route answers it
 * reads. test/console.test.ts checks with tsc that the routes' own schemas
 * (src/schemas) are assignable to these, so a renamed field fails the type
 * check instead of leaving a blank in the page.
 */

export interface BranchSummary {
  branch_id: string;
  database_id: string;
  endpoint: string;
  latest_epoch: number;
  parent_branch_id: string | null;
  state: string;
}

export interface BranchesResponse {
  branches: BranchSummary[];
  gateway: boolean;
}

/** GET /v1/metrics/public-safe */
export interface PublicMetrics {
  durable_epoch: number;
  gateway: boolean;
  index_count: number;
  latest_epoch: number;
  recovery_state: string;
  requests: number;
  schema_count: number;
  segment_count: number;
  service: string;
  record_count?: number;
  version_count?: number;
  indexer_state?: string;
  failed_feature_count?: number;
}

export interface Column {
  name: string;
  type: string;
  dim: number | null;
  metric: string | null;
  text: boolean;
  scalar: boolean;
}

export interface Table {
  name: string;
  columns: Column[];
}

export interface RecordOutput {
  fields: Record<string, unknown>;
  id: string;
  table: string;
  tenant_id: string;
  version_id: number;
}

export interface ScoreComponents {
  final_score: number;
  freshness_penalty: number | null;
  lexical: number | null;
  relational: number | null;
  vector: number | null;
}

export interface HybridRow {
  fields: Record<string, unknown>;
  record_id: string;
  score: ScoreComponents;
  tenant_id: string;
  version_id: number;
}

export interface HybridExplain {
  access_path_timings: Array<{ access_path_id: string; build_ms: number; open_ms: number }>;
  access_paths: Array<{ access_path_id: string; candidates: number; opened: boolean }>;
  candidate_budget: number;
  deduped_candidate_count: number;
  dirty_feature_count: number;
  early_stop_reason: string | null;
  exact_fallback_triggered: boolean;
  failed_feature_count: number;
  final_visibility_guard_count: number;
  final_visibility_guard_removed: number;
  freshness_mode: string;
  fusion_method: string;
  hot_overlay_searched: boolean;
  lexical_scored_documents: number;
  graph_nodes_read: number;
  materialized_count: number;
  missing_feature_count: number;
  pending_feature_count: number;
  phase_timings: Array<{ elapsed_ms: number; phase: string }>;
  read_epoch: number;
  returned_count: number;
  scalar_filter_applied: boolean;
  scalar_filter_predicates: string[];
  scalar_filter_removed_records: number;
  segments_scanned: number;
  selected_strategy: string | null;
  skipped_access_paths: string[];
  tenant_mask_visible_records: number;
  text_candidates: number;
  vector_candidates: number;
}

export interface QueryResponse {
  explain: HybridExplain;
  next_cursor: string | null;
  results: HybridRow[];
}

/** An error answer: `{code, error}` on every route (docs/errors.md). */
export interface ErrorBody {
  code: string;
  error: string;
}
