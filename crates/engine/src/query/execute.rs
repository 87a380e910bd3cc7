//! Executing a hybrid query: validate and plan it (query/plan.rs), rank its
//! candidates (query/rank.rs) or take the ranked list a cursor's first page
//! left in the cache, then page, re-check visibility and materialise the rows.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::bail;
use crate::error::Result;
use crate::index::text;
use crate::query::cursor::{self, CursorPayload};
use crate::query::explain::{self, Candidate, ScoreComponents};
use crate::query::plan::{read_epoch, validate, HybridQuery, HybridRow, QueryResponse, CURSOR_TTL_MS, MAX_TEXT_DEPTH};
use crate::query::rank::{rank, FilterPage, Pins, Ranked, RankedRow};
use crate::storage::commit::now_ms;
use crate::storage::{Branch, State};

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

pub struct QueryContext<'a> {
    pub branch: &'a Branch,
    pub branch_key: &'a str,
    pub secret: &'a [u8],
    pub cache: &'a RankedCache,
}

pub fn execute(ctx: &QueryContext<'_>, q: &HybridQuery) -> Result<QueryResponse> {
    let started = Instant::now();
    if let Some(fault) = crate::faults::injected("query::run") {
        bail!(StorageFailure, "{}", fault.error("query::run"));
    }
    let pinned = match &q.cursor {
        None => None,
        Some(c) => {
            let payload = cursor::decode(ctx.secret, c)?;
            if payload.b != ctx.branch_key {
                bail!(InvalidCursor, "the cursor belongs to branch {}", payload.b);
            }
            if now_ms().saturating_sub(payload.t) > CURSOR_TTL_MS {
                bail!(CursorExpired, "the cursor is older than {} minutes", CURSOR_TTL_MS / 60_000);
            }
            Some(payload)
        }
    };
    let (plan, fingerprint, epoch, schema_epoch, horizon) = {
        let state = ctx.branch.state.read();
        let mut analyzer = text::analyzer();
        let plan = validate(q, &state, &mut analyzer)?;
        let fingerprint = q.canonical_fingerprint(&plan);
        // cursors of earlier releases (a cursor lives an hour) carry the
        // fingerprint of the query as written
        if pinned
            .as_ref()
            .is_some_and(|p| p.h != fingerprint && p.h != q.fingerprint() && p.h != q.legacy_fingerprint())
        {
            bail!(CursorQueryMismatch, "the cursor was issued for a different query");
        }
        let horizon = ctx.branch.horizon(&state);
        let epoch = read_epoch(q, &state, horizon, pinned.as_ref().map(|p| p.e))?;
        (plan, fingerprint, epoch, state.schema_epoch, horizon)
    };
    let validate_ms = ms(started);
    let cache_key = format!("{}|{}|{}", ctx.branch_key, fingerprint, epoch);
    let lookup_started = Instant::now();
    // In a hybrid list the text path contributes its best `candidate_budget`
    // rows: the list is the fusion of each path's budget and ends there (as
    // Elasticsearch's rank_window_size does), since a deeper path would
    // re-rank it. A text-only list is a prefix of every deeper one (the text
    // order is total), so it is ranked twice as deep as the page needs, and
    // a page past its end widens it at the pinned epoch: a top 10 ranks 22
    // rows, not the budget's 100, and the text pruning works against the 22nd
    // best (as Elasticsearch ranks `from + size`).
    let text_only = plan.terms.is_some() && plan.vector.is_none() && plan.graph.is_none();
    let filter_only = plan.terms.is_none() && plan.vector.is_none() && plan.graph.is_none();
    let needed = pinned.as_ref().map_or(0, |p| p.o) + plan.top_k + 1;
    let text_depth = if text_only {
        (needed * 2).min(MAX_TEXT_DEPTH).max(needed)
    } else {
        // every path of a hybrid list contributes the same budget, whatever
        // the page size, so the list and its scores do not depend on top_k
        plan.budget
    };
    // a filter-only page is listed after the cursor's row, at its cost
    // (rank.rs, FilterPage), never cached: its list is that page's
    let filter_page = FilterPage {
        after_row: match (&pinned, filter_only) {
            (Some(p), true) => ctx.branch.state.read().visible_version(&plan.table, &plan.tenant, &p.id, epoch),
            _ => None,
        },
        // as deep as the explain's planner candidates look, and one more to
        // know whether a page follows
        depth: plan.top_k * 2 + 1,
    };
    let cached = pinned
        .as_ref()
        .filter(|_| !filter_only)
        .and_then(|_| ctx.cache.get(&cache_key))
        .filter(|r| !(text_only && r.text_truncated && r.rows.len() < needed));
    let cache_hit = cached.is_some();
    // a later page ranks with what its first page did (a cursor from before
    // pins were kept: with today's)
    let pins = pinned.as_ref().and_then(|p| {
        let (text_watermark, vector_watermark) = p.w?;
        Some(Pins { text_watermark, vector_watermark, stats: p.bm.clone() })
    });
    let ranked = match cached {
        Some(r) => r,
        None => Arc::new(rank(ctx.branch, &plan, epoch, text_depth, filter_page, pins.as_ref())?),
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
    // a text without a word to search ("!!!") runs no text path: neither a hit nor a miss
    if plan.terms.as_ref().is_some_and(|terms| !terms.is_empty()) {
        ex.lexical_cache_hits = cache_hit as u64;
        ex.lexical_cache_misses = !cache_hit as u64;
    }
    if plan.terms.is_none() {
        // the text path fills it when it runs; a query without text reports
        // the same figure, which describes the index, not the query
        ex.lexical_indexed_documents = ctx.branch.text.scope_documents(&plan.table, &plan.tenant);
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
        Some(p) => {
            let state = ctx.branch.state.read();
            // a text-only list keeps equal scores in row order (rank.rs,
            // order_rows): seek past the cursor's row, the version of its
            // record at the pinned epoch
            let after_row = match text_only || filter_only {
                true => state.visible_version(&plan.table, &plan.tenant, &p.id, epoch),
                false => None,
            };
            seek(&state, &ranked.rows, p.s, &p.id, after_row)
        }
    };
    let end = (offset + plan.top_k).min(ranked.rows.len());
    let page = &ranked.rows[offset.min(end)..end];
    ex.phase("page", page_started);

    // final visibility guard and materialisation
    let guard_started = Instant::now();
    let mut results = Vec::with_capacity(page.len());
    let mut removed = 0;
    let mut last_id = None;
    {
        let state = ctx.branch.state.read();
        for r in page {
            let row = &state.rows[r.row as usize];
            let key = state.key_entry(r.row);
            // (inline up to 24 bytes: most ids allocate nothing here)
            last_id = Some(compact_str::CompactString::from(key.id));
            if !row.visible_at(epoch) || **key.table != *plan.table || **key.tenant != *plan.tenant {
                removed += 1;
                continue;
            }
            // only the returned rows are read from the record files, and of
            // them only the requested fields decoded; ids and scores alone
            // come from memory
            let fields = match &plan.return_fields {
                None => state.fields(r.row, None)?,
                Some(names) if names.is_empty() => Default::default(),
                Some(names) => {
                    let mut found = state.fields(r.row, Some(names))?;
                    names.iter().filter_map(|n| Some((n.clone(), found.remove(n)?))).collect()
                }
            };
            results.push(HybridRow {
                fields,
                record_id: key.id.to_string(),
                score: components(r),
                tenant_id: plan.tenant.clone(),
                version_id: row.version_id,
            });
        }
    }
    ex.final_visibility_guard_count = page.len() as u64;
    ex.final_visibility_guard_removed = removed;
    // `return_fields: []` reads no record file: nothing was materialized
    let loaded = !plan.return_fields.as_ref().is_some_and(Vec::is_empty);
    ex.materialized_count = if loaded { results.len() as u64 } else { 0 };
    ex.returned_count = results.len() as u64;
    ex.phase("visibility_guard_and_materialize", guard_started);

    if q.explain.unwrap_or(false) {
        let upto = (offset + plan.top_k * 2).min(ranked.rows.len()).min(offset + 100);
        let state = ctx.branch.state.read();
        ex.planner_candidates = ranked.rows[offset.min(upto)..upto]
            .iter()
            .map(|r| Candidate {
                freshness: if r.overlay { "hot_overlay" } else { "indexed" }.to_string(),
                record_id: state.key_entry(r.row).id.to_string(),
                score_components: components(r),
                score_upper_bound: Some(r.fused.upper_bound),
                source: r.source.to_string(),
                version_id: state.rows[r.row as usize].version_id,
                visibility_checked: true,
            })
            .collect();
    }

    let next_cursor = if let (true, Some(last_id)) = (end < ranked.rows.len(), last_id) {
        let last = &page[page.len() - 1];
        let payload = CursorPayload {
            v: 1,
            b: ctx.branch_key.to_string(),
            e: epoch,
            o: end,
            s: last.fused.final_score,
            id: last_id.to_string(),
            h: fingerprint,
            t: pinned.as_ref().map_or_else(now_ms, |p| p.t),
            w: Some((ranked.pins.text_watermark, ranked.pins.vector_watermark)),
            bm: ranked.pins.stats.clone(),
        };
        // Ranked again with the cursor's epoch and pins, a list is the same
        // list, unless an HNSW walk found some of its rows (a graph that grew
        // meanwhile may find others): such a first page's list is kept for the
        // pages after it. Any other list is kept once a client pages (a page
        // reached through a cursor), to spare ranking it again: most queries
        // are never paged, and caching every first page's list held up to the
        // cache's bound for nothing.
        if !cache_hit && !filter_only && (pinned.is_some() || ranked.approximate) {
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
/// Where the page after a cursor's last row, (score, id), starts: past
/// every row ranked before it, equal scores ordered by record id, or with
/// `after_row` (a text-only list) by row.
fn seek(state: &State, rows: &[RankedRow], score: f64, id: &str, after_row: Option<u32>) -> usize {
    let after = |r: &RankedRow| match after_row {
        Some(last) => r.row > last,
        None => state.key_entry(r.row).id > id,
    };
    rows.iter()
        .position(|r| r.fused.final_score < score || (r.fused.final_score == score && after(r)))
        .unwrap_or(rows.len())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

#[cfg(test)]
mod cache_tests {
    use super::*;
    use crate::query::explain::Explain;
    use crate::query::fusion;

    fn ranked(rows: usize) -> Arc<Ranked> {
        let row = RankedRow { row: 0, fused: fusion::Fused::default(), penalty: None, overlay: false, source: "text" };
        Arc::new(Ranked {
            rows: vec![row; rows],
            explain: Explain::default(),
            text_truncated: false,
            pins: Pins::default(),
            approximate: false,
        })
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
