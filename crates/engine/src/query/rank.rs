//! Ranking: a validated query's candidates from each access path, fused and
//! ordered into one list.
//!
//! [`rank`] runs in two halves around the branch's state lock:
//! 1. under the read lock, [`prepare`] builds the eligible rows (tenant
//!    mask, visibility at the epoch, scalar bitmaps) and does each path's
//!    work that needs rows: the text overlay of rows tantivy has not
//!    indexed yet, exact vector scoring (or the overlay beside HNSW), the
//!    graph walk;
//! 2. after it, [`search_text`] (tantivy) and [`search_vectors`] (HNSW)
//!    search their indexes with the eligible set as a filter, and
//!    [`fuse_and_order`] fuses the lists and orders them.
//!
//! Each step records what it did in the query's [`Explain`], in the order
//! the access paths are listed there.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use roaring::RoaringBitmap;
use serde_json::Value;

use crate::error::Result;
use crate::index::text::{self, QueryStats, TextSearch};
use crate::index::vector::{self, VectorIndex};
use crate::query::explain::Explain;
use crate::query::fusion::{self, Path, PathList};
use crate::query::graph;
use crate::query::plan::{prefer_exact, Freshness, Plan, MIN_EF};
use crate::storage::{Branch, State, TableData};

type Hits = Vec<(u32, f32)>;

/// One row of a ranked list: its scores and where they came from. Its
/// record id and version are read from the branch's row metadata when a
/// page needs them (a row's key and version never change), not for every
/// candidate the paths returned.
#[derive(Debug, Clone)]
pub(super) struct RankedRow {
    pub(super) row: u32,
    pub(super) fused: fusion::Fused,
    pub(super) penalty: Option<f64>,
    pub(super) overlay: bool,
    pub(super) source: &'static str,
}

/// A ranked list computed once and shared by the pages of one cursor.
pub struct Ranked {
    pub(super) rows: Vec<RankedRow>,
    pub(super) explain: Explain,
    /// The text path returned only its best `text_depth` rows of more.
    pub(super) text_truncated: bool,
    /// What the list was ranked with besides the epoch, for a cursor to pin.
    pub(super) pins: Pins,
    /// An HNSW walk found some of its rows: ranked again, even with the same
    /// pins, a grown graph may find others.
    pub(super) approximate: bool,
}

/// What a ranked list depends on besides the read epoch, so that a later
/// page ranked again gets the same list: the index watermarks (a row at or
/// above one is scored by the hot overlay, below it by the index, whose BM25
/// lengths are quantised) and the BM25 statistics (kept for the latest epoch,
/// so writes change them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pins {
    pub text_watermark: u32,
    pub vector_watermark: u32,
    /// Documents, tokens and each query term's document frequency, in the
    /// plan's term order; none without text.
    pub stats: Option<(u64, u64, Vec<u64>)>,
}

impl Pins {
    /// The statistics for `terms`, when these pins hold them for as many terms.
    fn stats_for(&self, terms: &[String]) -> Option<QueryStats> {
        let (docs, tokens, df) = self.stats.as_ref()?;
        (df.len() == terms.len()).then(|| QueryStats {
            docs: *docs,
            tokens: *tokens,
            df: terms.iter().cloned().zip(df.iter().copied()).collect(),
        })
    }
}

impl Ranked {
    /// Heap bytes this list holds, near enough to budget by.
    pub(super) fn approx_bytes(&self) -> usize {
        let rows = self.rows.len() * std::mem::size_of::<RankedRow>();
        // the explain is a fixed set of small fields plus its access paths
        rows + std::mem::size_of::<Ranked>() + 4096
    }
}

/// How far each index has taken the branch's rows: rows at or above a
/// watermark are only in the hot overlay.
#[derive(Clone, Copy)]
struct Watermarks {
    text: u32,
    vector: u32,
}

/// The text path's work under the lock: the overlay's hits and the
/// statistics tantivy scores with.
struct TextPrep {
    hits: Hits,
    stats: QueryStats,
    columns: Vec<String>,
    build_ms: f64,
    /// The filter leads the index search ([`filter_leads`]).
    lead: bool,
    /// A read below the latest epoch: versions superseded since they were
    /// indexed may be eligible, so the index's history part is searched too.
    history: bool,
}

/// How many postings of the query's terms a walk reads for the cost of
/// seeking one term's postings to one eligible document. Measured on 100,000
/// WordNet glosses (120 known-item queries, each unfiltered and under three
/// filters; a seek cost 14-114 ns, less where the postings are dense): the
/// seeks won in 12 of 58 queries whose postings were 2-4 times the seeks, 31
/// of 52 at 4-8 times and every one past 16; at 4 the text path's mean was
/// 0.338 ms against 0.328 choosing the faster of the two for each query,
/// 0.412 always walking and 2.04 always seeking (bench/JOURNAL.md, "The
/// thirty-first session").
const POSTINGS_PER_SEEK: u64 = 4;

/// Whether the filter leads the text search ([`TextSearch::lead`]): each
/// eligible row the index holds is found in its segment and each term's
/// postings sought to it, when those seeks (the eligible rows times the
/// query's terms) cost less than walking the postings of the terms (the
/// tenant's live documents with each term), whose pruning cannot skip much
/// while few of the documents it meets are eligible. Before, such a query
/// scored the eligible rows from their stored text (a record read and its
/// tokens, about 3.5 µs a row under the state's read lock): a text query
/// whose words are in most of the corpus under a filter keeping 1-2% of it
/// took 3-6 ms either way at 100,000 WordNet records, now about 1.
fn filter_leads(indexed_eligible: u64, terms: &[String], stats: &QueryStats) -> bool {
    let postings: u64 = terms.iter().map(|t| stats.df.get(t).copied().unwrap_or(0)).sum();
    indexed_eligible.saturating_mul(terms.len() as u64).saturating_mul(POSTINGS_PER_SEEK) <= postings
}

/// The vector path's work under the lock: exact hits (every eligible row,
/// or only the overlay's when HNSW searches the rest).
struct VectorPrep {
    hits: Hits,
    hnsw: Option<(Arc<VectorIndex>, Arc<RoaringBitmap>)>,
    build_ms: f64,
}

/// What the locked half found.
struct Prepared {
    eligible: Arc<RoaringBitmap>,
    text: Option<TextPrep>,
    vector: Option<VectorPrep>,
    graph: Option<Hits>,
    /// A query with no text, vector or graph: the page's eligible rows in
    /// row order ([`FilterPage`]), and how many rows are eligible.
    filter_rows: Option<(Vec<u32>, u64)>,
    /// How many index paths found each overlay row (its freshness penalty).
    overlay_rows: HashMap<u32, u8>,
}

/// Which rows a filter-only list holds: its rows are all one tie, listed in
/// row order (the order the versions were written), so a page is the
/// `depth` eligible rows after the previous page's last row, found in the
/// bitmap without looking at any other: its cost is the page, not the
/// number of matches (sorting every match by record id had cost 48 ms for
/// 70,000 matches of 100,000 records, and 156 ms at 200,000).
#[derive(Clone, Copy)]
pub(super) struct FilterPage {
    pub after_row: Option<u32>,
    pub depth: usize,
}

/// Computes the ranked list of a query at `epoch`, with the text path
/// contributing its best `text_depth` rows; with `pins` (a later page's), as
/// its first page ranked it.
pub(super) fn rank(
    branch: &Branch,
    plan: &Plan,
    epoch: u64,
    text_depth: usize,
    filter_page: FilterPage,
    pins: Option<&Pins>,
) -> Result<Ranked> {
    branch.shared.note_search(branch.config.search_idle_after);
    let mut ex = Explain {
        candidate_budget: plan.budget as u64,
        freshness_mode: plan.freshness.name().to_string(),
        fusion_method: plan.fusion.name().to_string(),
        failed_feature_count: branch.shared.failed_features.load(std::sync::atomic::Ordering::Relaxed),
        ..Default::default()
    };
    let prepared = {
        // the watermarks are read under the state lock, with the columns the
        // plan captures: a vector column rebuilt by retention resets the
        // vector watermark under the write lock (storage/indexer.rs)
        let state = branch.state.read();
        let now = Watermarks { text: branch.text.watermark(), vector: branch.vector_watermark() };
        // a watermark only falls when its index is rebuilt (retention, or a
        // text index found ahead of the log at a start): then the lower one
        let marks = match pins {
            Some(p) => Watermarks { text: p.text_watermark.min(now.text), vector: p.vector_watermark.min(now.vector) },
            None => now,
        };
        let pinned_stats = match (pins, &plan.terms) {
            (Some(p), Some(terms)) => p.stats_for(terms),
            _ => None,
        };
        (prepare(&state, plan, epoch, marks, pinned_stats, filter_page, &mut ex), marks)
    };
    let (prepared, marks) = prepared;
    let Prepared { eligible, text, vector, graph, filter_rows, overlay_rows } = prepared;
    let stats = text.as_ref().map(|t| {
        let terms = plan.terms.as_deref().unwrap_or_default();
        (t.stats.docs, t.stats.tokens, terms.iter().map(|term| t.stats.df.get(term).copied().unwrap_or(0)).collect())
    });
    let pins = Pins { text_watermark: marks.text, vector_watermark: marks.vector, stats };
    let approximate = vector.as_ref().is_some_and(|v| v.hnsw.is_some());

    let mut text_truncated = false;
    let text_hits = match text {
        Some(prep) => Some(search_text(branch, plan, prep, eligible, marks, text_depth, &mut text_truncated, &mut ex)?),
        None => None,
    };
    let vector_hits = vector.map(|prep| search_vectors(plan, prep, &mut ex));
    let lists = Lists { text: text_hits, vector: vector_hits, graph };
    let rows = fuse_and_order(branch, plan, lists, filter_rows, &overlay_rows, &mut ex);
    Ok(Ranked { rows, explain: ex, text_truncated, pins, approximate })
}

/// The locked half: eligible rows, then each requested path's row work.
fn prepare(
    state: &State,
    plan: &Plan,
    epoch: u64,
    marks: Watermarks,
    pinned_stats: Option<QueryStats>,
    filter_page: FilterPage,
    ex: &mut Explain,
) -> Prepared {
    let plan_started = Instant::now();
    let empty = TableData::default();
    let table = state.tables.get(&plan.table).unwrap_or(&empty);
    let no_rows = RoaringBitmap::new();
    let mask = table.tenants.get(plan.tenant.as_str()).unwrap_or(&no_rows);
    let eligible = Arc::new(eligible_rows(state, table, mask, plan, epoch, plan_started, ex));
    ex.phase("plan", plan_started);

    let mut overlay_rows = HashMap::new();
    let mut pending = 0u64;
    let text = match &plan.terms {
        Some(terms) => {
            let stats = pinned_stats
                .unwrap_or_else(|| table.text_stats.snapshot(&plan.tenant, plan.text_field.as_deref(), terms));
            let mut prep =
                text_overlay(state, mask, plan, terms, stats, &eligible, marks, &mut overlay_rows, &mut pending, ex);
            prep.history = epoch < state.latest_epoch;
            Some(prep)
        }
        None => {
            ex.skipped("text", "no text in query");
            None
        }
    };
    let vector = match &plan.vector {
        Some((column, metric, query)) => {
            let prep = table.vectors.get(column).map(|vc| {
                pending += (mask & &vc.rows).range(marks.vector..).count() as u64;
                vector_exact(vc, *metric, query, plan, &eligible, marks, &mut overlay_rows, ex)
            });
            if prep.is_none() {
                ex.skipped("vector", "the column holds no vectors yet");
            }
            prep
        }
        None => {
            ex.skipped("vector", "no vector in query");
            None
        }
    };
    ex.pending_feature_count = pending;
    let graph = graph_hits(state, plan, epoch, &eligible, ex);
    let filter_only = plan.terms.is_none() && plan.vector.is_none() && plan.graph.is_none();
    let filter_rows = filter_only.then(|| {
        let from = filter_page.after_row.map_or(0, |r| r.saturating_add(1));
        (eligible.range(from..).take(filter_page.depth).collect(), eligible.len())
    });
    Prepared { eligible, text, vector, graph, filter_rows, overlay_rows }
}

/// The tenant's rows visible at `epoch` that pass every scalar predicate;
/// explains the tenant mask, scalar and temporal paths.
fn eligible_rows(
    state: &State,
    table: &TableData,
    mask: &RoaringBitmap,
    plan: &Plan,
    epoch: u64,
    mask_started: Instant,
    ex: &mut Explain,
) -> RoaringBitmap {
    let mask_ms = ms(mask_started);
    let temporal_started = Instant::now();
    let at_latest = epoch == state.latest_epoch;
    let base: RoaringBitmap = if at_latest { &table.live & mask } else { visible_at(state, table, mask, epoch) };
    let temporal_ms = ms(temporal_started);
    ex.tenant_mask_visible_records = base.len();
    let scalar_started = Instant::now();
    let mut eligible = base;
    for (col, key, text, value) in &plan.scalar {
        match table.scalar.get(col).and_then(|m| m.values().get(key)) {
            Some(rows) => rows.intersect(&mut eligible),
            None => eligible.clear(),
        }
        if key.needs_check() {
            // a long string's rows are found by its digest: keep those whose
            // field is the string (a row that cannot be read does not match)
            eligible =
                eligible.iter().filter(|row| state.field(*row, col).ok().flatten().as_ref() == Some(value)).collect();
        }
        ex.scalar_filter_predicates.push(text.clone());
    }
    ex.scalar_filter_applied = !plan.scalar.is_empty();
    ex.scalar_filter_visible_records = eligible.len();
    ex.scalar_filter_removed_records = ex.tenant_mask_visible_records - eligible.len();
    let scalar_ms = ms(scalar_started);
    // the mask is looked up (build) and intersected with the live set or
    // filtered by epoch (open); at an older epoch the latter is the temporal path
    ex.path("tenant_mask", ex.tenant_mask_visible_records, true, mask_ms, if at_latest { temporal_ms } else { 0.0 });
    if ex.scalar_filter_applied {
        ex.path("scalar", eligible.len(), true, 0.0, scalar_ms);
    } else {
        ex.skipped("scalar", "no scalar_eq predicates");
    }
    if !at_latest {
        ex.path("temporal", ex.tenant_mask_visible_records, true, 0.0, temporal_ms);
    }
    eligible
}

/// The rows of `mask` visible at an older `epoch`, from whichever side of
/// it has fewer of them. Rows are appended in commit order, so those
/// written by `epoch` are the row ids below a bound found by binary search
/// (a row retention removed reads as epoch 0, and is below it). Then
/// either each of those is checked, or, when fewer were written since, the
/// rows live now that were written by then are taken and, for each row
/// written since, the version it superseded or deleted, when that one was
/// visible at `epoch`: a read a moment back (a cursor's next page after new
/// writes) costs the writes since, not the tenant's whole history.
fn visible_at(state: &State, table: &TableData, mask: &RoaringBitmap, epoch: u64) -> RoaringBitmap {
    let (mut lo, mut hi) = (0u32, state.rows.len() as u32);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if state.rows[mid as usize].epoch <= epoch {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let written = lo;
    if mask.range_cardinality(written..) >= mask.range_cardinality(..written) {
        return mask.range(..written).filter(|r| state.rows[*r as usize].visible_at(epoch)).collect();
    }
    let mut rows = &table.live & mask;
    rows.remove_range(written..);
    for later in mask.range(written..) {
        let versions = state.key_entry(later).rows;
        let Ok(at) = versions.binary_search(&later) else { continue };
        let Some(&before) = at.checked_sub(1).and_then(|i| versions.get(i)) else { continue };
        if before < written && state.rows[before as usize].visible_at(epoch) {
            rows.insert(before);
        }
    }
    rows
}

/// The hot overlay: eligible rows tantivy has not indexed yet, scored here
/// with the query's BM25 statistics.
#[allow(clippy::too_many_arguments)]
fn text_overlay(
    state: &State,
    mask: &RoaringBitmap,
    plan: &Plan,
    terms: &[String],
    stats: QueryStats,
    eligible: &RoaringBitmap,
    marks: Watermarks,
    overlay_rows: &mut HashMap<u32, u8>,
    pending: &mut u64,
    ex: &mut Explain,
) -> TextPrep {
    let t = Instant::now();
    let columns: Vec<String> = match &plan.text_field {
        Some(f) => vec![f.clone()],
        None => {
            state.schemas.get(&plan.table).map(|s| s.text_columns().map(str::to_string).collect()).unwrap_or_default()
        }
    };
    let mut hits = Vec::new();
    // this table and tenant's rows the text index has not committed yet
    *pending += mask.range(marks.text..).count() as u64;
    let lead = !terms.is_empty() && filter_leads(eligible.range_cardinality(..marks.text), terms, &stats);
    // the rows above the index's watermark, scored from their text
    let upto = if plan.freshness == Freshness::Latest { u32::MAX } else { marks.text };
    if !terms.is_empty() && marks.text < upto {
        let mut analyzer = text::analyzer();
        let weights = stats.weights(terms);
        for row_id in eligible.range(marks.text..upto) {
            let fields = state.fields(row_id, Some(&columns)).unwrap_or_default();
            let mut score = 0.0;
            for col in &columns {
                if let Some(s) = fields.get(col).and_then(Value::as_str) {
                    score += text::bm25_text(&weights, terms, &mut analyzer, s);
                    ex.lexical_scored_documents += 1;
                }
            }
            ex.dirty_feature_count += 1;
            ex.hot_overlay_searched = true;
            if score > 0.0 {
                hits.push((row_id, score));
                *overlay_rows.entry(row_id).or_default() += 1;
            }
        }
    }
    TextPrep { hits, stats, columns, build_ms: ms(t), lead, history: false }
}

/// Rows (8 bytes each) whose (row, slot) list an exact vector scan keeps
/// per thread between queries, so a scan does not fault a new one in (see
/// `vector::exact_top`'s buffers).
const SCAN_ROWS_KEPT: usize = 1 << 20;

thread_local! {
    static SCAN_ROWS: std::cell::RefCell<Vec<(u32, u32)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Exact vector scores: of every eligible row when that is cheaper than
/// HNSW (or the graph lags behind), else of the overlay only, with HNSW to
/// search the rest after the lock.
#[allow(clippy::too_many_arguments)]
fn vector_exact(
    vc: &crate::storage::state::VectorColumn,
    metric: crate::schema::Metric,
    query: &[f32],
    plan: &Plan,
    eligible: &RoaringBitmap,
    marks: Watermarks,
    overlay_rows: &mut HashMap<u32, u8>,
    ex: &mut Explain,
) -> VectorPrep {
    let t = Instant::now();
    let mut with_vec = eligible & &vc.rows;
    ex.missing_feature_count = eligible.len() - with_vec.len();
    if plan.freshness != Freshness::Latest {
        with_vec.remove_range(marks.vector..);
    }
    let lagging = with_vec.range(marks.vector..).count() as u64;
    let ef = plan.budget.max(MIN_EF);
    let exact = prefer_exact(with_vec.len(), vc.index.len() as u64, ef) || lagging * 2 > with_vec.len();
    // each row's vector is looked up once; the scoring loop then reads the
    // vectors in row order
    let rows: Box<dyn Iterator<Item = u32>> =
        if exact { Box::new(with_vec.iter()) } else { Box::new(with_vec.range(marks.vector..)) };
    let hits = SCAN_ROWS.with_borrow_mut(|scan| {
        scan.clear();
        scan.extend(rows.filter_map(|row| Some((row, vc.data.slot(row)?))));
        // the best budget + 1 rows, exactly (one more tells the budget was
        // filled), and any rows their codes could not rule out
        let hits = vector::exact_top(vc.data.arena_ref(), metric, query, scan, plan.budget + 1);
        for &(row_id, _) in scan.iter().filter(|(row, _)| *row >= marks.vector) {
            *overlay_rows.entry(row_id).or_default() += 1;
            ex.dirty_feature_count += 1;
            ex.hot_overlay_searched = true;
        }
        if scan.capacity() > SCAN_ROWS_KEPT {
            *scan = Vec::new();
        }
        hits
    });
    let hnsw = if exact {
        ex.exact_fallback_triggered = true;
        None
    } else {
        Some((vc.index.clone(), Arc::new(with_vec)))
    };
    VectorPrep { hits, hnsw, build_ms: ms(t) }
}

/// Rows the graph walk from `graph_seed` reaches, scored by hops.
fn graph_hits(state: &State, plan: &Plan, epoch: u64, eligible: &RoaringBitmap, ex: &mut Explain) -> Option<Hits> {
    let Some((seed, depth, edges)) = &plan.graph else {
        ex.skipped("graph", "no graph_seed in query");
        return None;
    };
    if edges.is_empty() {
        ex.skipped("graph", "table has no edge columns");
        return Some(Vec::new());
    }
    let t = Instant::now();
    let enough = graph::Enough { eligible, rows: plan.budget };
    let (reached, stopped, read) =
        graph::neighbourhood(state, &plan.table, &plan.tenant, seed, epoch, *depth, edges, &enough);
    ex.graph_nodes_read = read;
    let walk_ms = ms(t);
    let t = Instant::now();
    let mut hits: Hits = reached
        .into_iter()
        .filter(|(row, _)| eligible.contains(*row))
        .map(|(row, hops)| (row, graph::relational_score(hops)))
        .collect();
    // like every path, the graph contributes its best `candidate_budget`
    // rows (fewest hops, then lowest row)
    let cut = keep_best(&mut hits, plan.budget);
    if stopped == Some(graph::Stopped::ReadLimit) {
        ex.early_stop_reason = Some("graph_read_limit".into());
    } else if cut || stopped.is_some() {
        ex.early_stop_reason = Some("candidate_budget".into());
    }
    // build: filtering and scoring what the walk (open) reached
    ex.path("graph", hits.len() as u64, true, ms(t), walk_ms);
    Some(hits)
}

/// tantivy's best rows below the text watermark, added to the overlay's,
/// cut to `text_depth`.
#[allow(clippy::too_many_arguments)]
fn search_text(
    branch: &Branch,
    plan: &Plan,
    prep: TextPrep,
    eligible: Arc<RoaringBitmap>,
    marks: Watermarks,
    text_depth: usize,
    truncated: &mut bool,
    ex: &mut Explain,
) -> Result<Hits> {
    let t = Instant::now();
    let TextPrep { mut hits, stats, columns, build_ms, lead, history } = prep;
    let terms = plan.terms.as_deref().unwrap_or_default();
    let opened = !terms.is_empty();
    if opened {
        let found = branch.text.search(&TextSearch {
            history,
            table: &plan.table,
            tenant: &plan.tenant,
            columns: &columns,
            terms,
            stats: &stats,
            eligible,
            upto: marks.text,
            depth: Some(text_depth),
            lead,
        })?;
        ex.lexical_scored_documents += found.scored_documents;
        ex.segments_scanned = found.segments;
        *truncated = found.truncated;
        hits.extend(found.rows);
    }
    ex.lexical_indexed_documents = branch.text.scope_documents(&plan.table, &plan.tenant);
    // the index's best rows and the overlay's (disjoint: the index reads
    // rows below the watermark the overlay started from)
    if keep_best(&mut hits, text_depth) {
        *truncated = true;
    }
    if *truncated {
        // a text-only list is ranked to the depth its page needs, not to the
        // budget (execute.rs): say which cut it (found by a black-box
        // review: "candidate_budget" was reported with 8 rows of a 100 budget)
        let text_only = plan.vector.is_none() && plan.graph.is_none();
        ex.early_stop_reason = Some(if text_only { "page_depth" } else { "candidate_budget" }.into());
    }
    ex.text_candidates = hits.len() as u64;
    if opened {
        ex.path("text", hits.len() as u64, true, build_ms, ms(t));
    } else {
        ex.skipped("text", "the text has no searchable terms");
    }
    Ok(hits)
}

/// HNSW's hits added to the exact ones, deduplicated and cut to the budget.
fn search_vectors(plan: &Plan, prep: VectorPrep, ex: &mut Explain) -> Hits {
    let t = Instant::now();
    let VectorPrep { mut hits, hnsw, build_ms } = prep;
    if let (Some((index, filter)), Some((_, _, query))) = (&hnsw, &plan.vector) {
        hits.extend(index.search(query, plan.budget, plan.budget.max(MIN_EF), filter));
    } else if hits.len() > plan.budget + 1 {
        // an exact scan scored every eligible row once (no duplicates):
        // keep the best budget + 1 (one more tells the budget was filled)
        // in linear time instead of sorting them all
        hits.select_nth_unstable_by(plan.budget, hit_order);
        hits.truncate(plan.budget + 1);
    }
    sort_hits(&mut hits);
    hits.dedup_by_key(|h| h.0);
    if hits.len() > plan.budget {
        hits.truncate(plan.budget);
        ex.early_stop_reason = Some("candidate_budget".into());
    } else if hnsw.is_some() && hits.len() == plan.budget {
        ex.early_stop_reason = Some("candidate_budget".into());
    }
    ex.vector_candidates = hits.len() as u64;
    let id = if hnsw.is_some() { "vector_hnsw" } else { "vector_exact" };
    // build: exact scoring under the lock; open: the graph walk, or the
    // selection of the best exact hits
    ex.path(id, hits.len() as u64, true, build_ms, ms(t));
    hits
}

/// Each path's hits, `None` for a path the query did not ask for.
struct Lists {
    text: Option<Hits>,
    vector: Option<Hits>,
    graph: Option<Hits>,
}

/// Fuses the paths' lists (or takes the filter's rows) and orders them by
/// final score desc, then record id.
fn fuse_and_order(
    branch: &Branch,
    plan: &Plan,
    lists: Lists,
    filter_rows: Option<(Vec<u32>, u64)>,
    overlay_rows: &HashMap<u32, u8>,
    ex: &mut Explain,
) -> Vec<RankedRow> {
    let fuse_started = Instant::now();
    let mut paths = Vec::new();
    // a text-only list is the prefix of any deeper one a later page ranks
    let text_only = lists.text.is_some() && lists.vector.is_none() && lists.graph.is_none();
    for (path, name, hits) in [
        (Path::Lexical, "text", &lists.text),
        (Path::Vector, "vector", &lists.vector),
        (Path::Relational, "graph", &lists.graph),
    ] {
        if let Some(hits) = hits {
            paths.push((name, PathList { path, hits, open_ended: text_only }));
        }
    }
    let names: Vec<&str> = paths.iter().map(|(name, _)| *name).collect();
    let path_lists: Vec<PathList<'_>> = paths.into_iter().map(|(_, list)| list).collect();
    let fused = fusion::fuse(plan.fusion, &plan.weights, &path_lists);
    ex.deduped_candidate_count = filter_rows.as_ref().map_or(fused.len() as u64, |(_, eligible)| *eligible);
    ex.selected_strategy = Some(strategy(&names, plan, ex));

    let index_paths = plan.terms.is_some() as u8 + plan.vector.is_some() as u8;
    let by_row = text_only || filter_rows.is_some();
    let mut rows: Vec<RankedRow> = match filter_rows {
        Some((filter_rows, _)) => filter_rows
            .into_iter()
            .map(|row| RankedRow {
                row,
                fused: fusion::Fused { final_score: 1.0, upper_bound: 1.0, ..Default::default() },
                penalty: Some(0.0),
                overlay: false,
                source: "filter",
            })
            .collect(),
        None => fused
            .into_iter()
            .map(|(row, f)| {
                let overlay = overlay_rows.get(&row).copied().unwrap_or(0);
                RankedRow {
                    row,
                    penalty: Some(if index_paths == 0 { 0.0 } else { overlay as f64 / index_paths as f64 }),
                    overlay: overlay > 0,
                    source: source_name(&f),
                    fused: f,
                }
            })
            .collect(),
    };
    order_rows(&branch.state.read(), &mut rows, by_row);
    ex.phase("fuse_and_rank", fuse_started);
    rows
}

/// The paths that found a row, as the explain's `source` names them.
fn source_name(f: &fusion::Fused) -> &'static str {
    match (f.lexical.is_some(), f.vector.is_some(), f.relational.is_some()) {
        (true, false, false) => "text",
        (false, true, false) => "vector",
        (false, false, true) => "graph",
        (true, true, false) => "text+vector",
        (true, false, true) => "text+graph",
        (false, true, true) => "vector+graph",
        (true, true, true) => "text+vector+graph",
        (false, false, false) => "",
    }
}

/// Orders a ranked list by final score desc, then record id, then row. The
/// ids are read only for rows that tie on score (a fused list rarely has
/// ties, a filter-only list is all one tie), so ordering the candidates of
/// a path costs no lookups of their metadata.
///
/// A text-only list (`by_row`) keeps equal scores in row order, the text
/// path's own (a filter-only list too: [`FilterPage`]): paging ranks that list deeper, and the text path cuts a run
/// of equal scores by row, so a deeper list begins with the rows a shallower
/// one served only in that order (by id, rows of the run past the first cut
/// would sort in among them, and pages repeated and skipped rows).
fn order_rows(state: &State, rows: &mut [RankedRow], by_row: bool) {
    rows.sort_unstable_by(|a, b| b.fused.final_score.total_cmp(&a.fused.final_score).then(a.row.cmp(&b.row)));
    if by_row {
        return;
    }
    let mut start = 0;
    while start < rows.len() {
        let score = rows[start].fused.final_score;
        let end = start + rows[start..].iter().take_while(|r| r.fused.final_score.total_cmp(&score).is_eq()).count();
        if end - start > 1 {
            rows[start..end]
                .sort_by(|a, b| state.key_entry(a.row).id.cmp(state.key_entry(b.row).id).then(a.row.cmp(&b.row)));
        }
        start = end;
    }
}

/// The explain's `selected_strategy`: the paths that ran and the fusion.
fn strategy(names: &[&str], plan: &Plan, ex: &Explain) -> String {
    // a path asked for but not run (text with no searchable terms) is not
    // part of the strategy
    let ran = |name: &str| ex.access_paths.iter().any(|p| p.opened && p.access_path_id.starts_with(name));
    let names: Vec<&str> = names.iter().copied().filter(|n| ran(n)).collect();
    if names.is_empty() {
        return if plan.terms.is_none() && plan.vector.is_none() && plan.graph.is_none() {
            "filter_scan".into()
        } else {
            "none".into()
        };
    }
    let parts: Vec<String> = names
        .iter()
        .map(|n| match *n {
            "vector" if ex.exact_fallback_triggered => "vector_exact".to_string(),
            "vector" => "vector_hnsw".to_string(),
            "text" => "text_bm25".to_string(),
            "graph" => "graph_bfs".to_string(),
            other => other.to_string(),
        })
        .collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("hybrid({})+{}", parts.join("+"), plan.fusion.name())
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// Best first; ties by row so the order is total and repeatable.
fn hit_order(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

fn sort_hits(hits: &mut [(u32, f32)]) {
    hits.sort_by(hit_order);
}

/// Keeps the best `n` hits, sorted (selected in linear time, then only
/// those sorted); true when some were dropped.
fn keep_best(hits: &mut Hits, n: usize) -> bool {
    let cut = hits.len() > n;
    if cut {
        hits.select_nth_unstable_by(n, hit_order);
        hits.truncate(n);
    }
    sort_hits(hits);
    cut
}
