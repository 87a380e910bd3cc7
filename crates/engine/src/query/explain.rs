//! The explain structure: every field is filled from what the query did.
//! Field meanings are documented in docs/query.md.

use serde::Serialize;

#[derive(Debug, Clone, Serialize, Default)]
pub struct ScoreComponents {
    pub final_score: f64,
    pub freshness_penalty: Option<f64>,
    pub lexical: Option<f64>,
    pub relational: Option<f64>,
    pub vector: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AccessPathTiming {
    pub access_path_id: String,
    pub build_ms: f64,
    pub open_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AccessPathExplain {
    pub access_path_id: String,
    pub candidates: u64,
    pub opened: bool,
    pub visibility_checked_before_open: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseTiming {
    pub elapsed_ms: f64,
    pub phase: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    pub freshness: String,
    pub record_id: String,
    pub score_components: ScoreComponents,
    pub score_upper_bound: Option<f64>,
    pub source: String,
    pub version_id: u32,
    pub visibility_checked: bool,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Explain {
    pub access_path_timings: Vec<AccessPathTiming>,
    pub access_paths: Vec<AccessPathExplain>,
    pub candidate_budget: u64,
    pub deduped_candidate_count: u64,
    pub dirty_feature_count: u64,
    pub early_stop_reason: Option<String>,
    pub exact_fallback_triggered: bool,
    pub failed_feature_count: u64,
    pub final_visibility_guard_count: u64,
    pub final_visibility_guard_removed: u64,
    pub freshness_mode: String,
    pub fusion_method: String,
    /// Records whose edges the graph walk read (what its time grows with).
    pub graph_nodes_read: u64,
    pub hot_overlay_searched: bool,
    pub lexical_cache_hits: u64,
    pub lexical_cache_misses: u64,
    pub lexical_indexed_documents: u64,
    pub lexical_scored_documents: u64,
    pub materialized_count: u64,
    pub missing_feature_count: u64,
    pub module_versions: Vec<String>,
    pub opened_candidate_streams: Vec<String>,
    pub pending_feature_count: u64,
    pub phase_timings: Vec<PhaseTiming>,
    pub planner_candidates: Vec<Candidate>,
    pub policy_epoch: u64,
    pub read_epoch: u64,
    pub returned_count: u64,
    pub scalar_filter_applied: bool,
    pub scalar_filter_predicates: Vec<String>,
    pub scalar_filter_removed_records: u64,
    pub scalar_filter_visible_records: u64,
    pub schema_epoch: u64,
    pub segments_scanned: u64,
    pub selected_strategy: Option<String>,
    pub skipped_access_paths: Vec<String>,
    pub tenant_mask_visible_records: u64,
    pub text_candidates: u64,
    pub vector_candidates: u64,
}

impl Explain {
    pub fn phase(&mut self, phase: &str, started: std::time::Instant) {
        self.phase_timings
            .push(PhaseTiming { elapsed_ms: started.elapsed().as_secs_f64() * 1000.0, phase: phase.to_string() });
    }

    /// Records an access path that was not opened (nothing of it ran).
    pub fn skipped(&mut self, id: &str, reason: &str) {
        self.access_paths.push(AccessPathExplain {
            access_path_id: id.to_string(),
            candidates: 0,
            opened: false,
            visibility_checked_before_open: true,
        });
        self.skipped_access_paths.push(format!("{id}: {reason}"));
    }

    pub fn path(&mut self, id: &str, candidates: u64, opened: bool, build_ms: f64, open_ms: f64) {
        self.access_paths.push(AccessPathExplain {
            access_path_id: id.to_string(),
            candidates,
            opened,
            visibility_checked_before_open: true,
        });
        self.access_path_timings.push(AccessPathTiming { access_path_id: id.to_string(), build_ms, open_ms });
        if opened && candidates > 0 {
            self.opened_candidate_streams.push(id.to_string());
        }
    }
}
