//! Planning and execution of a hybrid query.
//!
//! 1. validate the query against the table's schema and resolve the read
//!    epoch (cursor, `temporal_as_of` or latest);
//! 2. build the eligible-row bitmap: tenant mask, MVCC visibility at the read
//!    epoch, scalar equality bitmaps. Every access path is filtered by it
//!    before any row is opened;
//! 3. run the requested paths: BM25 (tantivy plus the hot overlay of rows it
//!    has not indexed yet), vectors (HNSW, or an exact scan when the eligible
//!    set is small or the graph lags), graph BFS from `graph_seed`;
//! 4. fuse (RRF or relative score), order by (final score desc, record id),
//!    page, re-check visibility of every returned row and materialise it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::bail;
use crate::error::{Code, Error, Result};
use crate::index::text;
use crate::index::vector;
use crate::names;
use crate::query::cursor::{self, CursorPayload};
use crate::query::explain::{self, Candidate, Explain, ScoreComponents};
use crate::query::fusion::{self, FusionMethod, Weights};
use crate::query::graph;
use crate::query::rank::rank;
use crate::schema::Metric;
use crate::storage::commit::now_ms;
use crate::storage::{Branch, ScalarKey, State};

pub const DEFAULT_TOP_K: i64 = 10;
pub const MAX_TOP_K: i64 = 1000;
pub const MAX_BUDGET: i64 = 10_000;
/// Eligible sets up to this size are always scored exactly instead of through HNSW.
pub const EXACT_THRESHOLD: u64 = 2048;
/// An exact scan costs about 0.13 to 0.5 µs per eligible row (384-d; it is
/// memory-bound), a filtered HNSW search about 3.5 ms at `ef` 320 over
/// 100,000 vectors, growing with `ef`, slowly with the graph, and inversely
/// with the share of the graph the filter accepts (it walks past rejected
/// rows). The two cross near `eligible² ≈ 12 × ef × graph size`: 7 on the
/// clustered vectors of `cargo run --release --example vecprobe -p
/// braid-engine`, above 24 on bench/hybrid.mjs's text-derived vectors, whose
/// graph walks are longer.
pub const HNSW_EXACT_RATIO: u64 = 12;
/// The smallest `ef` a vector search uses.
pub const MIN_EF: usize = 256;

/// Whether scoring `eligible` rows exactly is cheaper than a filtered HNSW
/// search of a graph of `graph` vectors with this `ef` (and it is exact).
pub fn prefer_exact(eligible: u64, graph: u64, ef: usize) -> bool {
    eligible <= EXACT_THRESHOLD
        || eligible.saturating_mul(eligible) < HNSW_EXACT_RATIO.saturating_mul(ef as u64).saturating_mul(graph)
}
pub const CURSOR_TTL_MS: u64 = 60 * 60 * 1000;
/// Most names `return_fields` may list.
pub const MAX_RETURN_FIELDS: usize = 1000;
/// The deepest a text-only list is widened to at once while paging.
pub const MAX_TEXT_DEPTH: usize = 1 << 20;
/// Distinct terms a text query may have (Elasticsearch's old
/// `max_clause_count`); each term costs a posting-list walk.
pub const MAX_QUERY_TERMS: usize = 1024;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HybridQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalar_eq: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_seed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temporal_as_of: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<bool>,
    /// Extension: `rrf` (default) or `relative_score`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fusion: Option<String>,
    /// Extension: weights of `relative_score` fusion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fusion_weights: Option<Weights>,
    /// Extension: candidates taken from the vector path (default max(10 * top_k, 100)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_budget: Option<i64>,
    /// Extension: hops of the graph neighbourhood (default 2, 1..=8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_depth: Option<i64>,
    /// Extension: which fields each result carries (default every field;
    /// `[]` none). Does not change the ranking, so not part of a cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_fields: Option<Vec<String>>,
}

impl HybridQuery {
    /// Identifies the query for its cursors: everything but cursor, explain
    /// and the projection (pages of one cursor may ask for other fields).
    pub fn fingerprint(&self) -> String {
        let mut q = self.clone();
        q.cursor = None;
        q.explain = None;
        q.return_fields = None;
        let digest = Sha256::digest(serde_json::to_vec(&q).expect("query serialises"));
        digest[..12].iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct HybridRow {
    pub fields: Map<String, Value>,
    pub record_id: String,
    pub score: ScoreComponents,
    pub tenant_id: String,
    pub version_id: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct QueryResponse {
    pub explain: Explain,
    pub next_cursor: Option<String>,
    pub results: Vec<HybridRow>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Read at the latest epoch and cover index lag with the hot overlay.
    Latest,
    /// Only what the indexes hold: no overlay, waits for nothing.
    Indexed,
}

impl Freshness {
    pub(super) fn name(self) -> &'static str {
        match self {
            Freshness::Latest => "latest",
            Freshness::Indexed => "indexed",
        }
    }
}

/// A validated query.
pub(super) struct Plan {
    pub(super) table: String,
    pub(super) tenant: String,
    pub(super) terms: Option<Vec<String>>,
    pub(super) text_field: Option<String>,
    pub(super) vector: Option<(String, Metric, Vec<f32>)>,
    pub(super) scalar: Vec<(String, ScalarKey, String)>,
    pub(super) graph: Option<(String, u32, Vec<String>)>,
    pub(super) top_k: usize,
    pub(super) budget: usize,
    pub(super) freshness: Freshness,
    pub(super) fusion: FusionMethod,
    pub(super) weights: Weights,
    /// Fields each result carries; `None` is every field.
    pub(super) return_fields: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
pub(super) struct RankedRow {
    pub(super) row: u32,
    pub(super) record_id: Arc<str>,
    pub(super) version_id: u32,
    pub(super) fused: fusion::Fused,
    pub(super) penalty: Option<f64>,
    pub(super) overlay: bool,
    pub(super) source: String,
}

/// A ranked list computed once and shared by the pages of one cursor.
pub struct Ranked {
    pub(super) rows: Vec<RankedRow>,
    pub(super) explain: Explain,
    /// The text path returned only its best `text_depth` rows of more.
    pub(super) text_truncated: bool,
}

/// Ranked lists kept for cursor paging: page 2 reads the same list page 1
/// did, so concurrent writes cannot duplicate or skip rows.
#[derive(Default)]
struct CacheInner {
    map: HashMap<String, (Arc<Ranked>, usize)>,
    order: VecDeque<String>,
    bytes: usize,
}

/// The cache is bounded in bytes: a few huge ranked lists (filter-only
/// queries return every match) must not hold memory that many small ones
/// would share. A list larger than the whole budget is not cached; its pages
/// are recomputed at the cursor's pinned epoch, which gives the same list.
pub struct RankedCache {
    inner: Mutex<CacheInner>,
    capacity_bytes: usize,
}

/// Default budget of the cursor cache.
pub const RANKED_CACHE_BYTES: usize = 64 << 20;

impl Default for RankedCache {
    fn default() -> Self {
        RankedCache::with_capacity(RANKED_CACHE_BYTES)
    }
}

impl Ranked {
    /// Heap bytes this list holds, near enough to budget by.
    fn approx_bytes(&self) -> usize {
        let rows: usize =
            self.rows.iter().map(|r| std::mem::size_of::<RankedRow>() + r.record_id.len() + r.source.capacity()).sum();
        // the explain is a fixed set of small fields plus its access paths
        rows + std::mem::size_of::<Ranked>() + 4096
    }
}

impl RankedCache {
    pub fn with_capacity(capacity_bytes: usize) -> Self {
        RankedCache { inner: Mutex::new(CacheInner::default()), capacity_bytes }
    }

    fn get(&self, key: &str) -> Option<Arc<Ranked>> {
        self.inner.lock().map.get(key).map(|(r, _)| r.clone())
    }

    fn put(&self, key: String, ranked: Arc<Ranked>) {
        let size = ranked.approx_bytes() + key.len();
        if size > self.capacity_bytes {
            return;
        }
        let mut guard = self.inner.lock();
        let CacheInner { map, order, bytes } = &mut *guard;
        if let Some((_, old)) = map.insert(key.clone(), (ranked, size)) {
            *bytes -= old;
        } else {
            order.push_back(key);
        }
        *bytes += size;
        while *bytes > self.capacity_bytes {
            let Some(old) = order.pop_front() else { break };
            if let Some((_, n)) = map.remove(&old) {
                *bytes -= n;
            }
        }
    }

    /// Bytes the cached lists hold (by `approx_bytes`).
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn validate(q: &HybridQuery, state: &State, text_analyzer: &mut tantivy::tokenizer::TextAnalyzer) -> Result<Plan> {
    let Some(table) = q.table.clone() else { bail!(InvalidQuery, "table is required") };
    names::check_table(&table)?;
    let Some(tenant) = q.tenant_id.clone() else { bail!(InvalidQuery, "tenant_id is required") };
    names::check_key("tenant_id", &tenant)?;
    let Some(schema) = state.schemas.get(&table) else { bail!(UnknownTable, "table {table:?} does not exist") };
    let top_k = q.top_k.unwrap_or(DEFAULT_TOP_K);
    if !(1..=MAX_TOP_K).contains(&top_k) {
        bail!(TopKOutOfRange, "top_k must be between 1 and {MAX_TOP_K}, got {top_k}");
    }
    let top_k = top_k as usize;
    let budget = match q.candidate_budget {
        Some(b) if !(1..=MAX_BUDGET).contains(&b) => {
            bail!(InvalidQuery, "candidate_budget must be between 1 and {MAX_BUDGET}, got {b}")
        }
        Some(b) => b as usize,
        None => (top_k * 10).max(100),
    };
    let freshness = match q.freshness.as_deref() {
        None | Some("latest") => Freshness::Latest,
        Some("indexed") => Freshness::Indexed,
        Some(other) => bail!(InvalidQuery, "freshness must be latest or indexed, got {other:?}"),
    };
    let fusion = match q.fusion.as_deref() {
        None => FusionMethod::Rrf,
        Some(f) => FusionMethod::parse(f).ok_or_else(|| {
            Error::new(Code::InvalidQuery, format!("fusion must be rrf or relative_score, got {f:?}"))
        })?,
    };
    let weights = q.fusion_weights.unwrap_or_default();
    if [weights.lexical, weights.vector, weights.relational].iter().any(|w| !w.is_finite() || *w < 0.0) {
        bail!(InvalidQuery, "fusion_weights must be finite and non-negative");
    }
    if let Some(field) = &q.text_field {
        match schema.columns.get(field) {
            Some(c) if c.text => {}
            Some(_) => bail!(UnknownColumn, "column {field:?} of table {table:?} is not text-indexed"),
            None => bail!(UnknownColumn, "table {table:?} has no column {field:?}"),
        }
    }
    let terms = match q.text.as_ref() {
        None => None,
        Some(t) => {
            let mut toks = text::tokens(text_analyzer, t);
            toks.sort();
            toks.dedup();
            if toks.len() > MAX_QUERY_TERMS {
                bail!(TooManyTerms, "text has {} distinct terms; at most {MAX_QUERY_TERMS} are allowed", toks.len());
            }
            Some(toks)
        }
    };
    let vector = match &q.vector {
        None => {
            if let Some(field) = &q.vector_field {
                if !schema.vector_columns().any(|(n, ..)| n == field) {
                    bail!(UnknownColumn, "table {table:?} has no vector column {field:?}");
                }
            }
            None
        }
        Some(v) => {
            let column = match &q.vector_field {
                Some(field) => schema.vector_columns().find(|(n, ..)| n == field).ok_or_else(|| {
                    Error::new(Code::UnknownColumn, format!("table {table:?} has no vector column {field:?}"))
                })?,
                None => schema
                    .vector_columns()
                    .next()
                    .ok_or_else(|| Error::new(Code::UnknownColumn, format!("table {table:?} has no vector column")))?,
            };
            let (name, dim, metric) = column;
            if v.len() != dim as usize {
                bail!(
                    VectorDimensionMismatch,
                    "column {name:?} holds {dim}-dimensional vectors, the query has {}",
                    v.len()
                );
            }
            if let Some(i) = v.iter().position(|x| !(*x as f32).is_finite()) {
                bail!(
                    VectorNotFinite,
                    "vector[{i}] = {} is not a finite 32-bit float (|x| must be below 3.4e38)",
                    v[i]
                );
            }
            let prepared = vector::prepare(metric, v.iter().map(|x| *x as f32).collect());
            Some((name.to_string(), metric, prepared))
        }
    };
    let mut scalar = Vec::new();
    for (col, value) in q.scalar_eq.iter().flatten() {
        match schema.columns.get(col) {
            Some(c) if c.scalar => {}
            Some(c) => bail!(UnknownColumn, "column {col:?} is a {} column, not a scalar one", c.ty.name()),
            None => bail!(UnknownColumn, "table {table:?} has no column {col:?}"),
        }
        let Some(key) = ScalarKey::of(value) else {
            bail!(InvalidQuery, "scalar_eq.{col} must be a string, number or bool")
        };
        scalar.push((col.clone(), key, format!("{col} = {value}")));
    }
    let graph = match &q.graph_seed {
        None => None,
        Some(seed) => {
            names::check_key("graph_seed", seed)?;
            let depth = q.graph_depth.unwrap_or(graph::DEFAULT_DEPTH as i64);
            if !(1..=8).contains(&depth) {
                bail!(InvalidQuery, "graph_depth must be between 1 and 8, got {depth}");
            }
            let edges: Vec<String> = schema.edge_columns().map(str::to_string).collect();
            Some((seed.clone(), depth as u32, edges))
        }
    };
    if let Some(fields) = &q.return_fields {
        if fields.len() > MAX_RETURN_FIELDS {
            bail!(InvalidQuery, "return_fields lists {} fields, at most {MAX_RETURN_FIELDS}", fields.len());
        }
        if let Some(col) = fields.iter().find(|f| !schema.columns.contains_key(*f)) {
            bail!(UnknownColumn, "table {table:?} has no column {col:?} (in return_fields)");
        }
    }
    Ok(Plan {
        table,
        tenant,
        terms,
        text_field: q.text_field.clone(),
        vector,
        scalar,
        graph,
        top_k,
        budget,
        freshness,
        fusion,
        weights,
        return_fields: q.return_fields.clone(),
    })
}

/// Resolves the read epoch and checks it against the retained history.
fn read_epoch(q: &HybridQuery, state: &State, horizon: u64, pinned: Option<u64>) -> Result<u64> {
    if let Some(e) = pinned {
        if e < horizon {
            bail!(CursorExpired, "the cursor's epoch {e} is below the retained horizon {horizon}");
        }
        return Ok(e);
    }
    match q.temporal_as_of {
        None => Ok(state.latest_epoch),
        Some(e) if e < 0 => bail!(InvalidQuery, "temporal_as_of must be >= 0, got {e}"),
        Some(e) if (e as u64) > state.latest_epoch => {
            bail!(TemporalInFuture, "temporal_as_of {e} is after the latest epoch {}", state.latest_epoch)
        }
        Some(e) if (e as u64) < horizon => {
            bail!(TemporalBeforeHorizon, "temporal_as_of {e} is below the retained horizon {horizon}")
        }
        Some(e) => Ok(e as u64),
    }
}

pub struct QueryContext<'a> {
    pub branch: &'a Branch,
    pub branch_key: &'a str,
    pub secret: &'a [u8],
    pub cache: &'a RankedCache,
}

pub fn execute(ctx: &QueryContext<'_>, q: &HybridQuery) -> Result<QueryResponse> {
    let started = Instant::now();
    let fingerprint = q.fingerprint();
    let pinned = match &q.cursor {
        None => None,
        Some(c) => {
            let payload = cursor::decode(ctx.secret, c)?;
            if payload.b != ctx.branch_key {
                bail!(InvalidCursor, "the cursor belongs to branch {}", payload.b);
            }
            if payload.h != fingerprint {
                bail!(CursorQueryMismatch, "the cursor was issued for a different query");
            }
            if now_ms().saturating_sub(payload.t) > CURSOR_TTL_MS {
                bail!(CursorExpired, "the cursor is older than {} minutes", CURSOR_TTL_MS / 60_000);
            }
            Some(payload)
        }
    };
    let (plan, epoch, schema_epoch, horizon) = {
        let state = ctx.branch.state.read();
        let mut analyzer = text::analyzer();
        let plan = validate(q, &state, &mut analyzer)?;
        let horizon = ctx.branch.horizon(&state);
        let epoch = read_epoch(q, &state, horizon, pinned.as_ref().map(|p| p.e))?;
        (plan, epoch, state.schema_epoch, horizon)
    };
    let validate_ms = ms(started);
    let cache_key = format!("{}|{}|{}", ctx.branch_key, fingerprint, epoch);
    let lookup_started = Instant::now();
    // The text path contributes its best `candidate_budget` rows. A text-only
    // list is a prefix of every deeper one (the text order is total), so a
    // page past its end widens it at the pinned epoch; a hybrid list is the
    // fusion of each path's budget and ends there (as Elasticsearch's
    // rank_window_size does), since a deeper path would re-rank it.
    let text_only = plan.terms.is_some() && plan.vector.is_none() && plan.graph.is_none();
    let needed = pinned.as_ref().map_or(0, |p| p.o) + plan.top_k + 1;
    let text_depth = if text_only && needed > plan.budget {
        (needed * 2).min(MAX_TEXT_DEPTH).max(needed)
    } else {
        plan.budget.max(plan.top_k)
    };
    let cached = pinned
        .as_ref()
        .and_then(|_| ctx.cache.get(&cache_key))
        .filter(|r| !(text_only && r.text_truncated && r.rows.len() < needed));
    let cache_hit = cached.is_some();
    let ranked = match cached {
        Some(r) => r,
        None => Arc::new(rank(ctx.branch, &plan, epoch, text_depth)?),
    };
    let mut ex = ranked.explain.clone();
    if cache_hit {
        // a later page read the ranked list its first page computed: no access
        // path ran for it, and its timings are its own
        ex.phase_timings.clear();
        ex.access_path_timings.clear();
        ex.opened_candidate_streams.clear();
        ex.access_paths.iter_mut().for_each(|p| p.opened = false);
        ex.lexical_scored_documents = 0;
        ex.segments_scanned = 0;
        ex.phase("cursor_cache_lookup", lookup_started);
    }
    ex.phase_timings.insert(0, explain::PhaseTiming { elapsed_ms: validate_ms, phase: "validate".into() });
    if plan.terms.is_some() {
        ex.lexical_cache_hits = cache_hit as u64;
        ex.lexical_cache_misses = !cache_hit as u64;
    }
    ex.read_epoch = epoch;
    ex.schema_epoch = schema_epoch;
    ex.policy_epoch = horizon;
    ex.module_versions = crate::module_versions();

    // paging
    let page_started = Instant::now();
    let offset = match &pinned {
        None => 0,
        Some(p) if cache_hit => p.o,
        Some(p) => seek(&ranked.rows, p.s, &p.id),
    };
    let end = (offset + plan.top_k).min(ranked.rows.len());
    let page = &ranked.rows[offset.min(end)..end];
    ex.phase("page", page_started);

    // final visibility guard and materialisation
    let guard_started = Instant::now();
    let mut results = Vec::with_capacity(page.len());
    let mut removed = 0;
    {
        let state = ctx.branch.state.read();
        for r in page {
            let row = &state.rows[r.row as usize];
            let key = state.key_entry(r.row);
            if !row.visible_at(epoch) || *key.table != *plan.table || *key.tenant != *plan.tenant {
                removed += 1;
                continue;
            }
            // only the returned rows are read from the record files, and of
            // them only the requested fields decoded
            let fields = match &plan.return_fields {
                None => state.fields(r.row, None)?,
                Some(names) => {
                    let mut found = state.fields(r.row, Some(names))?;
                    names.iter().filter_map(|n| Some((n.clone(), found.remove(n)?))).collect()
                }
            };
            results.push(HybridRow {
                fields,
                record_id: r.record_id.to_string(),
                score: components(r),
                tenant_id: plan.tenant.clone(),
                version_id: r.version_id,
            });
        }
    }
    ex.final_visibility_guard_count = page.len() as u64;
    ex.final_visibility_guard_removed = removed;
    ex.materialized_count = results.len() as u64;
    ex.returned_count = results.len() as u64;
    ex.phase("visibility_guard_and_materialize", guard_started);

    if q.explain.unwrap_or(false) {
        let upto = (offset + plan.top_k * 2).min(ranked.rows.len()).min(offset + 100);
        ex.planner_candidates = ranked.rows[offset.min(upto)..upto]
            .iter()
            .map(|r| Candidate {
                freshness: if r.overlay { "hot_overlay" } else { "indexed" }.to_string(),
                record_id: r.record_id.to_string(),
                score_components: components(r),
                score_upper_bound: Some(r.fused.upper_bound),
                source: r.source.clone(),
                version_id: r.version_id,
                visibility_checked: true,
            })
            .collect();
    }

    let next_cursor = if end < ranked.rows.len() && !page.is_empty() {
        let last = &page[page.len() - 1];
        let payload = CursorPayload {
            v: 1,
            b: ctx.branch_key.to_string(),
            e: epoch,
            o: end,
            s: last.fused.final_score,
            id: last.record_id.to_string(),
            h: fingerprint,
            t: pinned.as_ref().map_or_else(now_ms, |p| p.t),
        };
        if !cache_hit {
            ctx.cache.put(cache_key, ranked.clone());
        }
        Some(cursor::encode(ctx.secret, &payload))
    } else {
        None
    };
    ex.phase("total", started);
    Ok(QueryResponse { explain: ex, next_cursor, results })
}

fn components(r: &RankedRow) -> ScoreComponents {
    ScoreComponents {
        final_score: r.fused.final_score,
        freshness_penalty: r.penalty,
        lexical: r.fused.lexical,
        relational: r.fused.relational,
        vector: r.fused.vector,
    }
}

/// Position just after (score, id) in a list ordered by score desc, id asc.
fn seek(rows: &[RankedRow], score: f64, id: &str) -> usize {
    rows.iter()
        .position(|r| r.fused.final_score < score || (r.fused.final_score == score && &*r.record_id > id))
        .unwrap_or(rows.len())
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    fn ranked(rows: usize) -> Arc<Ranked> {
        let row = RankedRow {
            row: 0,
            record_id: Arc::from("some-record-id"),
            version_id: 1,
            fused: fusion::Fused::default(),
            penalty: None,
            overlay: false,
            source: "text".to_string(),
        };
        Arc::new(Ranked { rows: vec![row; rows], explain: Explain::default(), text_truncated: false })
    }

    /// Regression: the cache was bounded by entries, so 256 filter-only lists
    /// of every match could hold gigabytes.
    #[test]
    fn the_cursor_cache_is_bounded_in_bytes() {
        let cache = RankedCache::with_capacity(1 << 20);
        for i in 0..200 {
            cache.put(format!("k{i}"), ranked(1000));
            assert!(cache.bytes() <= 1 << 20, "{} bytes after {i} puts", cache.bytes());
        }
        assert!(cache.len() > 1 && cache.len() < 200);
        assert!(cache.get("k199").is_some(), "the newest list stays");
        assert!(cache.get("k0").is_none(), "the oldest went first");
        // a list larger than the whole budget is not cached at all
        cache.put("huge".into(), ranked(100_000));
        assert!(cache.get("huge").is_none());
        assert!(cache.bytes() <= 1 << 20);
    }
}
