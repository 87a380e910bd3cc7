//! The binding's typed contract: every argument and result of
//! `NativeEngine` as a `#[napi(object)]`, from which `napi build` writes
//! `native/index.d.ts`, the types `src/engine.ts` uses.
//!
//! Results are converted field by field from the engine's own types (no
//! JSON between). Names are the wire names of the spec (snake_case), so
//! each multi-word field carries its `js_name`; only the options a
//! JavaScript caller writes by hand (`OpenOptions`, `BranchRef`) are
//! camelCase.
//!
//! Arguments that hold user JSON (records, queries, column declarations,
//! receipts) are read by `js.rs` into the engine's serde types, which keep
//! the engine's validation and its error messages; their interfaces here
//! are the TypeScript view of those serde types (`input_types_match_the_engine`
//! checks the two agree). Counts and epochs are `f64`: JavaScript numbers.

#![allow(clippy::needless_pass_by_value)]

use braid_engine::query::explain as ex;
use braid_engine::query::QueryResponse as EngineResponse;
use braid_engine::storage::WriteResult as EngineWrite;
use napi::bindgen_prelude::{Either, Null};
use napi_derive::napi;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

// ---------------------------------------------------------------- options

/// How `NativeEngine.open` opens a data directory; unset fields keep the
/// engine's defaults (docs/operations.md).
#[napi(object)]
pub struct OpenOptions {
    /// Directory holding the catalog, branches and snapshots.
    pub data_dir: String,
    /// Most dimensions of a vector (default 4,096), a whole number of at least 1.
    pub max_vector_dim: Option<f64>,
    /// Most records per write (default 10,000), a whole number of at least 1.
    pub max_batch: Option<f64>,
    /// Most columns per table (default 1,024), a whole number of at least 1.
    pub max_columns: Option<f64>,
    pub receipt_retention_ms: Option<f64>,
    /// Bytes a branch's idempotency receipts may hold in memory before a keyed read stores its answer's
    /// digest instead of the answer (default 8 MiB), a whole number.
    pub receipt_memory_bytes: Option<f64>,
    /// Epochs of history kept readable by temporal queries; unlimited when unset.
    pub history_epochs: Option<f64>,
    pub text_commit_interval_ms: Option<f64>,
    /// A checkpoint is taken once a branch's WAL segment holds this many bytes (default 64 MiB)...
    pub checkpoint_bytes: Option<f64>,
    /// ...or once it holds this many record versions (default 50,000), which bounds what a start replays...
    pub checkpoint_rows: Option<f64>,
    /// ...or this long after the last one when anything was written (default 5 minutes).
    pub checkpoint_interval_ms: Option<f64>,
    /// Indexers wait for `startIndexing()` (the server calls it once it listens); default false.
    pub defer_indexing: Option<bool>,
}

/// The branch a call addresses; unset is the default database and `main`.
#[napi(object)]
#[derive(Clone, Default)]
pub struct BranchRef {
    pub database_id: Option<String>,
    pub branch_id: Option<String>,
}

// ------------------------------------------------- user JSON (read by js.rs)

/// A record to write: a full replacement of the record's fields.
#[napi(object, object_to_js = false)]
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(test), allow(dead_code))] // read as JSON by js.rs; built by the test below
pub struct RecordInput {
    pub table: String,
    #[napi(js_name = "tenant_id")]
    pub tenant_id: String,
    pub id: String,
    #[napi(ts_type = "Record<string, unknown>")]
    pub fields: Option<Map<String, Value>>,
}

#[napi(object)]
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordKey {
    pub table: String,
    #[napi(js_name = "tenant_id")]
    pub tenant_id: String,
    pub id: String,
}

/// What the service stores with a keyed write: the reply it will replay.
#[napi(object, object_to_js = false)]
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(test), allow(dead_code))] // read as JSON by js.rs; built by the test below
pub struct ReceiptDraft {
    pub key: String,
    #[napi(js_name = "body_hash")]
    pub body_hash: String,
    pub status: u32,
    #[napi(ts_type = "unknown")]
    pub body: Value,
    /// Stored instead of `body` once the branch's receipts hold their
    /// memory budget (a keyed read's digest of its answer).
    #[napi(ts_type = "unknown")]
    pub digest: Option<Value>,
}

/// The scoped idempotency key and body hash of a keyed snapshot or restore.
#[napi(object)]
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestKey {
    pub key: String,
    #[napi(js_name = "body_hash")]
    pub body_hash: String,
}

#[napi(object, object_to_js = false)]
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(test), allow(dead_code))] // read as JSON by js.rs; built by the test below
pub struct FusionWeights {
    pub lexical: Option<f64>,
    pub vector: Option<f64>,
    pub relational: Option<f64>,
}

/// A hybrid query (docs/query.md has every field's meaning and default).
#[napi(object, object_to_js = false)]
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(test), allow(dead_code))] // read as JSON by js.rs; built by the test below
pub struct HybridQuery {
    pub table: Option<String>,
    #[napi(js_name = "tenant_id")]
    pub tenant_id: Option<String>,
    #[napi(ts_type = "string | null")]
    pub text: Option<String>,
    #[napi(js_name = "text_field", ts_type = "string | null")]
    pub text_field: Option<String>,
    /// A `Float32Array` crosses without a copy into text; plain numbers work too.
    #[napi(ts_type = "Float32Array | Float64Array | number[] | null")]
    pub vector: Option<Vec<f64>>,
    #[napi(js_name = "vector_field", ts_type = "string | null")]
    pub vector_field: Option<String>,
    #[napi(js_name = "scalar_eq", ts_type = "Record<string, unknown>")]
    pub scalar_eq: Option<Map<String, Value>>,
    #[napi(js_name = "graph_seed", ts_type = "string | null")]
    pub graph_seed: Option<String>,
    #[napi(js_name = "temporal_as_of", ts_type = "number | null")]
    pub temporal_as_of: Option<f64>,
    pub freshness: Option<String>,
    #[napi(js_name = "top_k")]
    pub top_k: Option<f64>,
    #[napi(ts_type = "string | null")]
    pub cursor: Option<String>,
    pub explain: Option<bool>,
    /// Extension: `rrf` (default) or `relative_score`.
    pub fusion: Option<String>,
    #[napi(js_name = "fusion_weights")]
    pub fusion_weights: Option<FusionWeights>,
    /// Extension: candidates taken from the vector path.
    #[napi(js_name = "candidate_budget")]
    pub candidate_budget: Option<f64>,
    /// Extension: hops of the graph neighbourhood (1..=8).
    #[napi(js_name = "graph_depth")]
    pub graph_depth: Option<f64>,
    /// The fields each result carries (default every field; `[]` none).
    #[napi(js_name = "return_fields")]
    pub return_fields: Option<Vec<String>>,
}

/// A column of `declareTable`.
#[napi(object, object_to_js = false)]
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(test), allow(dead_code))] // read as JSON by js.rs; built by the test below
pub struct ColumnDeclaration {
    #[napi(js_name = "type", ts_type = "'string' | 'text' | 'number' | 'bool' | 'vector' | 'edges' | 'json'")]
    #[serde(rename = "type")]
    pub ty: String,
    pub dim: Option<u32>,
    #[napi(ts_type = "'cosine' | 'dot' | 'l2'")]
    pub metric: Option<String>,
    pub text: Option<bool>,
    pub scalar: Option<bool>,
}

// ---------------------------------------------------------------- writes

#[napi(object)]
pub struct WriteTiming {
    #[napi(js_name = "queue_ms")]
    pub queue_ms: f64,
    #[napi(js_name = "validate_ms")]
    pub validate_ms: f64,
    #[napi(js_name = "encode_ms")]
    pub encode_ms: f64,
    #[napi(js_name = "wal_fsync_ms")]
    pub wal_fsync_ms: f64,
    #[napi(js_name = "apply_ms")]
    pub apply_ms: f64,
    /// How many write requests shared this fsync.
    #[napi(js_name = "group_size")]
    pub group_size: f64,
}

/// A write that committed (and is durable).
#[napi(object)]
pub struct Committed {
    pub epoch: f64,
    #[napi(js_name = "record_count")]
    pub record_count: f64,
    /// False when the write changed nothing (deleting an absent record).
    pub changed: bool,
    pub timing: WriteTiming,
}

/// The stored reply of a keyed write that had already run.
#[napi(object)]
pub struct Replayed {
    pub status: u32,
    #[napi(ts_type = "unknown")]
    pub body: Value,
}

/// Exactly one of the two is set.
#[napi(object)]
pub struct WriteResult {
    pub committed: Option<Committed>,
    pub replayed: Option<Replayed>,
}

/// The branch a put body names, which the service checks before the engine
/// writes the body (`putJson`).
#[napi(object)]
pub struct NamedBranch {
    pub named: BranchRef,
}

/// A put-batch body the engine read and wrote, and what it asked for.
#[napi(object)]
pub struct PutBatchOutcome {
    pub result: WriteResult,
    pub include_write_timing: bool,
}

impl From<EngineWrite> for WriteResult {
    fn from(result: EngineWrite) -> Self {
        match result {
            EngineWrite::Committed(o) => WriteResult {
                committed: Some(Committed {
                    epoch: o.epoch as f64,
                    record_count: o.record_count as f64,
                    changed: o.changed,
                    timing: WriteTiming {
                        queue_ms: o.timing.queue_ms,
                        validate_ms: o.timing.validate_ms,
                        encode_ms: o.timing.encode_ms,
                        wal_fsync_ms: o.timing.wal_fsync_ms,
                        apply_ms: o.timing.apply_ms,
                        group_size: o.timing.group_size,
                    },
                }),
                replayed: None,
            },
            EngineWrite::Replayed(r) => WriteResult {
                committed: None,
                replayed: Some(Replayed { status: r.status.into(), body: r.body_value() }),
            },
        }
    }
}

// ---------------------------------------------------------------- reads

#[napi(object)]
pub struct RecordOutput {
    #[napi(ts_type = "Record<string, unknown>")]
    pub fields: Map<String, Value>,
    pub id: String,
    pub table: String,
    #[napi(js_name = "tenant_id")]
    pub tenant_id: String,
    #[napi(js_name = "version_id")]
    pub version_id: u32,
}

impl From<braid_engine::RecordOutput> for RecordOutput {
    fn from(r: braid_engine::RecordOutput) -> Self {
        RecordOutput { fields: r.fields, id: r.id, table: r.table, tenant_id: r.tenant_id, version_id: r.version_id }
    }
}

/// A live idempotency receipt.
#[napi(object)]
pub struct StoredReceipt {
    pub status: u32,
    #[napi(ts_type = "unknown")]
    pub body: Value,
    #[napi(js_name = "body_hash")]
    pub body_hash: String,
}

#[napi(object, use_nullable = true)]
pub struct ScoreComponents {
    #[napi(js_name = "final_score")]
    pub final_score: f64,
    #[napi(js_name = "freshness_penalty")]
    pub freshness_penalty: Option<f64>,
    pub lexical: Option<f64>,
    pub relational: Option<f64>,
    pub vector: Option<f64>,
}

impl From<ex::ScoreComponents> for ScoreComponents {
    fn from(s: ex::ScoreComponents) -> Self {
        ScoreComponents {
            final_score: s.final_score,
            freshness_penalty: s.freshness_penalty,
            lexical: s.lexical,
            relational: s.relational,
            vector: s.vector,
        }
    }
}

#[napi(object)]
pub struct HybridRow {
    #[napi(ts_type = "Record<string, unknown>")]
    pub fields: Map<String, Value>,
    #[napi(js_name = "record_id")]
    pub record_id: String,
    pub score: ScoreComponents,
    #[napi(js_name = "tenant_id")]
    pub tenant_id: String,
    #[napi(js_name = "version_id")]
    pub version_id: u32,
}

#[napi(object)]
pub struct AccessPathTiming {
    #[napi(js_name = "access_path_id")]
    pub access_path_id: String,
    #[napi(js_name = "build_ms")]
    pub build_ms: f64,
    #[napi(js_name = "open_ms")]
    pub open_ms: f64,
}

#[napi(object)]
pub struct AccessPathExplain {
    #[napi(js_name = "access_path_id")]
    pub access_path_id: String,
    pub candidates: f64,
    pub opened: bool,
    #[napi(js_name = "visibility_checked_before_open")]
    pub visibility_checked_before_open: bool,
}

#[napi(object)]
pub struct PhaseTiming {
    #[napi(js_name = "elapsed_ms")]
    pub elapsed_ms: f64,
    pub phase: String,
}

#[napi(object, use_nullable = true)]
pub struct PlannerCandidate {
    pub freshness: String,
    #[napi(js_name = "record_id")]
    pub record_id: String,
    #[napi(js_name = "score_components")]
    pub score_components: ScoreComponents,
    #[napi(js_name = "score_upper_bound")]
    pub score_upper_bound: Option<f64>,
    pub source: String,
    #[napi(js_name = "version_id")]
    pub version_id: u32,
    #[napi(js_name = "visibility_checked")]
    pub visibility_checked: bool,
}

/// Every field of the spec's HybridExplain; meanings in docs/query.md.
#[napi(object, use_nullable = true)]
pub struct HybridExplain {
    #[napi(js_name = "access_path_timings")]
    pub access_path_timings: Vec<AccessPathTiming>,
    #[napi(js_name = "access_paths")]
    pub access_paths: Vec<AccessPathExplain>,
    #[napi(js_name = "candidate_budget")]
    pub candidate_budget: f64,
    #[napi(js_name = "deduped_candidate_count")]
    pub deduped_candidate_count: f64,
    #[napi(js_name = "dirty_feature_count")]
    pub dirty_feature_count: f64,
    #[napi(js_name = "early_stop_reason")]
    pub early_stop_reason: Option<String>,
    #[napi(js_name = "exact_fallback_triggered")]
    pub exact_fallback_triggered: bool,
    #[napi(js_name = "failed_feature_count")]
    pub failed_feature_count: f64,
    #[napi(js_name = "final_visibility_guard_count")]
    pub final_visibility_guard_count: f64,
    #[napi(js_name = "final_visibility_guard_removed")]
    pub final_visibility_guard_removed: f64,
    #[napi(js_name = "freshness_mode")]
    pub freshness_mode: String,
    #[napi(js_name = "fusion_method")]
    pub fusion_method: String,
    #[napi(js_name = "hot_overlay_searched")]
    pub hot_overlay_searched: bool,
    #[napi(js_name = "graph_nodes_read")]
    pub graph_nodes_read: f64,
    #[napi(js_name = "lexical_cache_hits")]
    pub lexical_cache_hits: f64,
    #[napi(js_name = "lexical_cache_misses")]
    pub lexical_cache_misses: f64,
    #[napi(js_name = "lexical_indexed_documents")]
    pub lexical_indexed_documents: f64,
    #[napi(js_name = "lexical_scored_documents")]
    pub lexical_scored_documents: f64,
    #[napi(js_name = "materialized_count")]
    pub materialized_count: f64,
    #[napi(js_name = "missing_feature_count")]
    pub missing_feature_count: f64,
    #[napi(js_name = "module_versions")]
    pub module_versions: Vec<String>,
    #[napi(js_name = "opened_candidate_streams")]
    pub opened_candidate_streams: Vec<String>,
    #[napi(js_name = "pending_feature_count")]
    pub pending_feature_count: f64,
    #[napi(js_name = "phase_timings")]
    pub phase_timings: Vec<PhaseTiming>,
    #[napi(js_name = "planner_candidates")]
    pub planner_candidates: Vec<PlannerCandidate>,
    #[napi(js_name = "policy_epoch")]
    pub policy_epoch: f64,
    #[napi(js_name = "read_epoch")]
    pub read_epoch: f64,
    #[napi(js_name = "returned_count")]
    pub returned_count: f64,
    #[napi(js_name = "scalar_filter_applied")]
    pub scalar_filter_applied: bool,
    #[napi(js_name = "scalar_filter_predicates")]
    pub scalar_filter_predicates: Vec<String>,
    #[napi(js_name = "scalar_filter_removed_records")]
    pub scalar_filter_removed_records: f64,
    #[napi(js_name = "scalar_filter_visible_records")]
    pub scalar_filter_visible_records: f64,
    #[napi(js_name = "schema_epoch")]
    pub schema_epoch: f64,
    #[napi(js_name = "segments_scanned")]
    pub segments_scanned: f64,
    #[napi(js_name = "selected_strategy")]
    pub selected_strategy: Option<String>,
    #[napi(js_name = "skipped_access_paths")]
    pub skipped_access_paths: Vec<String>,
    #[napi(js_name = "tenant_mask_visible_records")]
    pub tenant_mask_visible_records: f64,
    #[napi(js_name = "text_candidates")]
    pub text_candidates: f64,
    #[napi(js_name = "vector_candidates")]
    pub vector_candidates: f64,
}

impl From<ex::Explain> for HybridExplain {
    fn from(e: ex::Explain) -> Self {
        let n = |v: u64| v as f64;
        HybridExplain {
            access_path_timings: e
                .access_path_timings
                .into_iter()
                .map(|t| AccessPathTiming {
                    access_path_id: t.access_path_id,
                    build_ms: t.build_ms,
                    open_ms: t.open_ms,
                })
                .collect(),
            access_paths: e
                .access_paths
                .into_iter()
                .map(|p| AccessPathExplain {
                    access_path_id: p.access_path_id,
                    candidates: n(p.candidates),
                    opened: p.opened,
                    visibility_checked_before_open: p.visibility_checked_before_open,
                })
                .collect(),
            candidate_budget: n(e.candidate_budget),
            deduped_candidate_count: n(e.deduped_candidate_count),
            dirty_feature_count: n(e.dirty_feature_count),
            early_stop_reason: e.early_stop_reason,
            exact_fallback_triggered: e.exact_fallback_triggered,
            failed_feature_count: n(e.failed_feature_count),
            final_visibility_guard_count: n(e.final_visibility_guard_count),
            final_visibility_guard_removed: n(e.final_visibility_guard_removed),
            freshness_mode: e.freshness_mode,
            fusion_method: e.fusion_method,
            hot_overlay_searched: e.hot_overlay_searched,
            graph_nodes_read: n(e.graph_nodes_read),
            lexical_cache_hits: n(e.lexical_cache_hits),
            lexical_cache_misses: n(e.lexical_cache_misses),
            lexical_indexed_documents: n(e.lexical_indexed_documents),
            lexical_scored_documents: n(e.lexical_scored_documents),
            materialized_count: n(e.materialized_count),
            missing_feature_count: n(e.missing_feature_count),
            module_versions: e.module_versions,
            opened_candidate_streams: e.opened_candidate_streams,
            pending_feature_count: n(e.pending_feature_count),
            phase_timings: e
                .phase_timings
                .into_iter()
                .map(|p| PhaseTiming { elapsed_ms: p.elapsed_ms, phase: p.phase })
                .collect(),
            planner_candidates: e
                .planner_candidates
                .into_iter()
                .map(|c| PlannerCandidate {
                    freshness: c.freshness,
                    record_id: c.record_id,
                    score_components: c.score_components.into(),
                    score_upper_bound: c.score_upper_bound,
                    source: c.source,
                    version_id: c.version_id,
                    visibility_checked: c.visibility_checked,
                })
                .collect(),
            policy_epoch: n(e.policy_epoch),
            read_epoch: n(e.read_epoch),
            returned_count: n(e.returned_count),
            scalar_filter_applied: e.scalar_filter_applied,
            scalar_filter_predicates: e.scalar_filter_predicates,
            scalar_filter_removed_records: n(e.scalar_filter_removed_records),
            scalar_filter_visible_records: n(e.scalar_filter_visible_records),
            schema_epoch: n(e.schema_epoch),
            segments_scanned: n(e.segments_scanned),
            selected_strategy: e.selected_strategy,
            skipped_access_paths: e.skipped_access_paths,
            tenant_mask_visible_records: n(e.tenant_mask_visible_records),
            text_candidates: n(e.text_candidates),
            vector_candidates: n(e.vector_candidates),
        }
    }
}

#[napi(object, use_nullable = true)]
pub struct QueryResponse {
    pub explain: HybridExplain,
    #[napi(js_name = "next_cursor")]
    pub next_cursor: Option<String>,
    pub results: Vec<HybridRow>,
}

impl From<EngineResponse> for QueryResponse {
    fn from(r: EngineResponse) -> Self {
        QueryResponse {
            explain: r.explain.into(),
            next_cursor: r.next_cursor,
            results: r
                .results
                .into_iter()
                .map(|row| HybridRow {
                    fields: row.fields,
                    record_id: row.record_id,
                    score: row.score.into(),
                    tenant_id: row.tenant_id,
                    version_id: row.version_id,
                })
                .collect(),
        }
    }
}

// ---------------------------------------------------------------- schemas

#[napi(object)]
pub struct ColumnSchema {
    #[napi(js_name = "type")]
    pub ty: String,
    pub dim: Option<u32>,
    #[napi(ts_type = "'cosine' | 'dot' | 'l2'")]
    pub metric: Option<String>,
    /// Indexed for BM25.
    pub text: bool,
    /// Indexed for equality filters.
    pub scalar: bool,
}

#[napi(object)]
pub struct TableSchema {
    pub name: String,
    pub columns: std::collections::HashMap<String, ColumnSchema>,
}

impl From<braid_engine::schema::TableSchema> for TableSchema {
    fn from(t: braid_engine::schema::TableSchema) -> Self {
        use braid_engine::schema::ColumnType;
        let columns = t
            .columns
            .into_iter()
            .map(|(name, c)| {
                let (dim, metric) = match &c.ty {
                    ColumnType::Vector { dim, metric } => {
                        (Some(*dim), serde_json::to_value(metric).ok().and_then(|v| v.as_str().map(str::to_string)))
                    }
                    _ => (None, None),
                };
                (name, ColumnSchema { ty: c.ty.name().to_string(), dim, metric, text: c.text, scalar: c.scalar })
            })
            .collect();
        TableSchema { name: t.name, columns }
    }
}

// ---------------------------------------------------------------- admin

#[napi(object)]
pub struct SnapshotInfo {
    pub name: String,
    #[napi(js_name = "database_id")]
    pub database_id: String,
    #[napi(js_name = "branch_id")]
    pub branch_id: String,
    pub epoch: f64,
    /// Length of the log of a snapshot taken before checkpoints existed; 0 for newer ones.
    #[napi(js_name = "wal_bytes")]
    pub wal_bytes: f64,
    /// Bytes of the snapshot's files.
    pub bytes: f64,
    #[napi(js_name = "created_ms")]
    pub created_ms: f64,
    /// True when a keyed request that already ran was answered again (`snapshot` only).
    pub replayed: Option<bool>,
}

impl SnapshotInfo {
    pub fn new(m: braid_engine::engine::SnapshotMeta, replayed: Option<bool>) -> Self {
        SnapshotInfo {
            name: m.name,
            database_id: m.database_id,
            branch_id: m.branch_id,
            epoch: m.epoch as f64,
            wal_bytes: m.wal_bytes as f64,
            bytes: m.bytes as f64,
            created_ms: m.created_ms as f64,
            replayed,
        }
    }
}

#[napi(object)]
pub struct RestoreOutcome {
    pub restored: bool,
    pub source: String,
    pub target: String,
    pub epoch: f64,
    /// With `verify`: the record as the restored branch holds it, or null.
    pub verified: Option<Either<RecordOutput, Null>>,
    /// True when the same keyed request had already run (its first result).
    pub replayed: bool,
}

impl From<braid_engine::engine::RestoreOutcome> for RestoreOutcome {
    fn from(r: braid_engine::engine::RestoreOutcome) -> Self {
        RestoreOutcome {
            restored: r.restored,
            source: r.source,
            target: r.target,
            epoch: r.epoch as f64,
            verified: r.verified.map(|v| match v {
                Some(record) => Either::A(record.into()),
                None => Either::B(Null),
            }),
            replayed: r.replayed,
        }
    }
}

#[napi(object, use_nullable = true)]
pub struct BranchSummary {
    #[napi(js_name = "branch_id")]
    pub branch_id: String,
    #[napi(js_name = "database_id")]
    pub database_id: String,
    pub endpoint: String,
    #[napi(js_name = "latest_epoch")]
    pub latest_epoch: f64,
    #[napi(js_name = "parent_branch_id")]
    pub parent_branch_id: Option<String>,
    pub state: String,
}

impl From<braid_engine::engine::BranchSummary> for BranchSummary {
    fn from(b: braid_engine::engine::BranchSummary) -> Self {
        BranchSummary {
            branch_id: b.branch_id,
            database_id: b.database_id,
            endpoint: b.endpoint,
            latest_epoch: b.latest_epoch as f64,
            parent_branch_id: b.parent_branch_id,
            state: b.state,
        }
    }
}

/// One stable error code and its HTTP status (docs/errors.md).
#[napi(object)]
pub struct ErrorCodeStatus {
    pub code: String,
    pub status: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interfaces of user JSON are the engine's serde types seen from
    /// TypeScript: every field named here is one the engine reads.
    #[test]
    fn input_types_match_the_engine() {
        let query = HybridQuery {
            table: Some("t".into()),
            tenant_id: Some("a".into()),
            text: Some("x".into()),
            text_field: Some("title".into()),
            vector: Some(vec![1.0]),
            vector_field: Some("v".into()),
            scalar_eq: Some(Map::new()),
            graph_seed: Some("r".into()),
            temporal_as_of: Some(1.0),
            freshness: Some("latest".into()),
            top_k: Some(10.0),
            cursor: Some("c".into()),
            explain: Some(true),
            fusion: Some("rrf".into()),
            fusion_weights: Some(FusionWeights { lexical: Some(1.0), vector: Some(1.0), relational: Some(1.0) }),
            candidate_budget: Some(100.0),
            graph_depth: Some(2.0),
            return_fields: Some(vec![]),
        };
        // integral numbers arrive as integers (js.rs), as the engine's i64 fields want
        let mut value = serde_json::to_value(&query).unwrap();
        for k in ["temporal_as_of", "top_k", "candidate_budget", "graph_depth"] {
            value[k] = serde_json::json!(value[k].as_f64().unwrap() as i64);
        }
        let engine: braid_engine::query::HybridQuery = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&engine).unwrap().as_object().unwrap().len(), value.as_object().unwrap().len());

        let record = RecordInput { table: "t".into(), tenant_id: "a".into(), id: "1".into(), fields: Some(Map::new()) };
        let _: braid_engine::RecordInput = serde_json::from_value(serde_json::to_value(&record).unwrap()).unwrap();
        let key = RecordKey { table: "t".into(), tenant_id: "a".into(), id: "1".into() };
        let _: braid_engine::RecordKey = serde_json::from_value(serde_json::to_value(&key).unwrap()).unwrap();
        let draft =
            ReceiptDraft { key: "k".into(), body_hash: "h".into(), status: 200, body: Value::Null, digest: None };
        let _: braid_engine::storage::ReceiptDraft =
            serde_json::from_value(serde_json::to_value(&draft).unwrap()).unwrap();
        let request = RequestKey { key: "k".into(), body_hash: "h".into() };
        let _: braid_engine::engine::RequestKey =
            serde_json::from_value(serde_json::to_value(&request).unwrap()).unwrap();
        let column = ColumnDeclaration {
            ty: "vector".into(),
            dim: Some(3),
            metric: Some("l2".into()),
            text: None,
            scalar: None,
        };
        let _: braid_engine::schema::ColumnDeclaration =
            serde_json::from_value(serde_json::to_value(&column).unwrap()).unwrap();
    }
}
