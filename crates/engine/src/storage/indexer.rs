//! The indexer: one background thread per branch that feeds the text index
//! (tantivy) and the vector graphs (HNSW) from the applied rows, behind the
//! writes, dumps the graphs as they grow, and drops expired idempotency
//! receipts from memory.
//!
//! How it talks to the others: the committer (storage/committer.rs) wakes it
//! through the branch's `Shared` (`wake` and its condvar) after each applied
//! group; otherwise it wakes on its own to commit the text index every
//! `text_commit_interval` (`idle_commit_interval` while no query reads the
//! branch and writes go on), and at least once a second. A round copies its
//! work out of the `State` under a read lock and does the slow part outside
//! it. Progress is published as watermarks (`Shared::vector_watermark` and
//! the text index's own) that queries, metrics and `Branch::wait_indexed`
//! compare with the row count. Failures are counted in
//! `Shared::failed_features` and `failing_rounds` (read back as
//! `IndexerHealth`), and `Shared::indexer_alive` falls when the thread ends.
//! `Branch::close` sets `Shared::stop`: the indexer then commits the text
//! documents it was handed and ends, without catching up (a start resumes
//! from the watermarks).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use serde_json::Value;

use crate::index::text::TextIndex;
use crate::index::vector::VectorIndex;
use crate::storage::commit::now_ms;
use crate::storage::events::{Event, EventQueue};
use crate::storage::pipeline::{graph_name, ms, BranchConfig, Shared};
use crate::storage::retention;
use crate::storage::state::State;

/// Starts the indexer thread; it dumps vector graphs into `graphs_dir`.
pub(super) fn spawn(
    state: Arc<RwLock<State>>,
    shared: Arc<Shared>,
    text: Arc<TextIndex>,
    config: BranchConfig,
    graphs_dir: PathBuf,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("braid-index".into())
        .spawn(move || run_indexer(state, shared, text, &config, &graphs_dir))
}

/// Graphs with rows to link this round, by dump name (their vectors are
/// read from the column's arena, not copied), and the row they are linked
/// below.
struct VectorBatch {
    upto: u32,
    graphs: Vec<(String, Arc<VectorIndex>)>,
}

/// Text documents of a run of rows, copied out of the state under a read
/// lock, and the rows whose fields could not be read from the record files.
#[derive(Default)]
struct TextBatch {
    /// For the current part.
    docs: Vec<TextFeature>,
    /// Superseded versions, for the history part.
    superseded: Vec<TextFeature>,
    unreadable: u64,
}

/// One row's text for the text index.
struct TextFeature {
    row: u32,
    table: Arc<str>,
    tenant: Arc<str>,
    /// (column, text) of each of the row's text columns.
    columns: Vec<(String, String)>,
}

/// Most rows a search-idle branch's text index holds uncommitted: a bulk
/// load commits every this many rows (tantivy's writer keeps them in memory
/// until then, up to its budget), a stream of single-record writes far less
/// often than every `text_commit_interval`.
const IDLE_COMMIT_ROWS: u32 = 16_384;

/// How long the text index's `uncommitted` rows may wait: the commit
/// interval while the branch is `searched`, its writes have paused for that
/// long (none since `grown_at`) or it holds [`IDLE_COMMIT_ROWS`], else
/// (search-idle, writes going on) the idle interval
/// (`BranchConfig::search_idle_after`).
fn commit_interval(config: &BranchConfig, searched: bool, grown_at: Instant, uncommitted: u32) -> Duration {
    let interval = config.text_commit_interval;
    if searched || grown_at.elapsed() >= interval || uncommitted >= IDLE_COMMIT_ROWS {
        interval
    } else {
        interval.max(config.idle_commit_interval)
    }
}

/// [`commit_interval`] of the branch as it is now.
fn commit_due(config: &BranchConfig, shared: &Shared, text: &TextIndex, grown_at: Instant) -> Duration {
    let searched = shared.searched_within(config.search_idle_after);
    commit_interval(config, searched, grown_at, text.pending_upto().saturating_sub(text.watermark()))
}

/// How long the indexer may sleep before a commit of what the text index
/// holds falls due: when the interval in force ends, or when the writes
/// will have paused for the commit interval (a search-idle branch commits
/// then).
fn until_commit(last_commit: Instant, due: Duration, grown_at: Instant, interval: Duration) -> Duration {
    let at_due = due.saturating_sub(last_commit.elapsed());
    if due > interval {
        at_due.min(interval.saturating_sub(grown_at.elapsed()))
    } else {
        at_due
    }
}

/// Commits the text index when it holds something uncommitted and the
/// commit interval `due` has passed; `Some(committed)` when it tried. A
/// failed commit keeps its documents in the writer for the next one;
/// failing again and again shows in readiness.
fn commit_if_due(text: &TextIndex, last_commit: &mut Instant, due: Duration) -> Option<bool> {
    if !text.has_uncommitted() || last_commit.elapsed() < due {
        return None;
    }
    let committed = text.commit().is_ok();
    *last_commit = Instant::now();
    Some(committed)
}

/// Hands one batch of rows to the text index: the versions it moves to the
/// history part, then the current part's documents. A failure stops the
/// batch: the writers cannot be trusted past their last commits
/// (`TextIndex::recover` puts them back there, and the rows are handed
/// again from the watermark).
fn feed_text(text: &TextIndex, batch: &TextBatch) -> crate::error::Result<()> {
    let moved: Vec<u32> = batch.superseded.iter().map(|f| f.row).collect();
    text.supersede(&moved)?;
    for f in &batch.superseded {
        let columns: Vec<(&str, &str)> = f.columns.iter().map(|(c, t)| (c.as_str(), t.as_str())).collect();
        text.add_superseded(f.row, &f.table, &f.tenant, &columns)?;
    }
    for f in &batch.docs {
        let columns: Vec<(&str, &str)> = f.columns.iter().map(|(c, t)| (c.as_str(), t.as_str())).collect();
        text.add_row(f.row, &f.table, &f.tenant, &columns)?;
    }
    Ok(())
}

/// The longest wait before a text index that keeps failing is put back
/// again (the waits double from the commit interval).
const TEXT_RETRY_MAX: Duration = Duration::from_secs(5);

/// Rows a round links into the graphs.
const INDEX_ROUND_ROWS: u32 = 4096;
/// Rows a round hands to the text index: more than the graphs take, since
/// a text document costs far less than linking a vector. The two advance
/// apart, so the text index (and with it retention, which removes only rows
/// the text index was handed) keeps up with writes that the graphs lag.
const TEXT_ROUND_ROWS: u32 = 4 * INDEX_ROUND_ROWS;

fn collect_vectors(state: &State, from: u32) -> VectorBatch {
    let total = state.rows.len() as u32;
    let upto = total.min(from.saturating_add(INDEX_ROUND_ROWS)).max(from);
    let graphs = state
        .tables
        .iter()
        .flat_map(|(table, t)| t.vectors.iter().map(move |(column, vc)| (graph_name(table, column), vc)))
        .filter(|(_, vc)| vc.index.watermark() < upto && from < upto)
        .map(|(name, vc)| (name, vc.index.clone()))
        .collect();
    VectorBatch { upto, graphs }
}

/// The text documents of rows `from..upto`: the current part's, and the
/// history part's (versions superseded by a row below `upto`: those indexed
/// in an earlier batch move there, and those of this batch go there at once).
fn collect_text(state: &State, from: u32, upto: u32) -> TextBatch {
    let upto = upto.min(state.rows.len() as u32);
    let mut batch = TextBatch::default();
    for row_id in from..upto {
        let row = &state.rows[row_id as usize];
        if row.loc.is_purged() {
            // removed by retention, as every version before it: in no index
            continue;
        }
        let versions = state.keys.rows(row.key);
        let at = versions.binary_search(&row_id).ok();
        // the version this one supersedes, indexed in an earlier batch
        if let Some(prev) = at.and_then(|i| i.checked_sub(1)).map(|i| versions[i]).filter(|p| *p < from) {
            if let Some(text) = text_of(state, prev, &mut batch.unreadable) {
                batch.superseded.push(text);
            }
        }
        let Some(text) = text_of(state, row_id, &mut batch.unreadable) else { continue };
        match at.and_then(|i| versions.get(i + 1)).is_some_and(|next| *next < upto) {
            true => batch.superseded.push(text),
            false => batch.docs.push(text),
        }
    }
    batch
}

/// The text of one version's text columns, `None` when it has none (a
/// delete, a version retention removed, or no text).
fn text_of(state: &State, row_id: u32, unreadable: &mut u64) -> Option<TextFeature> {
    let row = &state.rows[row_id as usize];
    if row.deleted || row.loc.is_purged() {
        // a version retention removed is in no index
        return None;
    }
    let key = state.keys.get(row.key);
    let schema = state.schemas.get(&**key.table)?;
    let columns: Vec<String> = schema.text_columns().map(str::to_string).collect();
    if columns.is_empty() {
        return None;
    }
    let mut fields = state.fields(row_id, Some(&columns)).unwrap_or_else(|_| {
        *unreadable += 1;
        Default::default()
    });
    let texts: Vec<(String, String)> = columns
        .into_iter()
        .filter_map(|col| match fields.remove(&col) {
            Some(Value::String(s)) => Some((col, s)),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| TextFeature {
        row: row_id,
        table: key.table.clone(),
        tenant: key.tenant.clone(),
        columns: texts,
    })
}

/// Builds the scalar columns a start left unbuilt (`ScalarColumn`), one at
/// a time under the state's read lock, so a write waits for at most one
/// column's build and a filter finds its column built.
fn build_scalar_columns(state: &RwLock<State>) {
    let unbuilt: Vec<(String, String)> = state
        .read()
        .tables
        .iter()
        .flat_map(|(table, data)| {
            data.scalar.iter().filter(|(_, c)| !c.is_built()).map(move |(column, _)| (table.clone(), column.clone()))
        })
        .collect();
    for (table, column) in unbuilt {
        if let Some(c) = state.read().tables.get(&table).and_then(|t| t.scalar.get(&column)) {
            c.values();
        }
    }
}

/// Marks the indexer stopped when its thread ends, however it ends.
struct AliveGuard(Arc<Shared>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.indexer_alive.store(false, Ordering::Release);
        if !self.0.stop.load(Ordering::Acquire) {
            let failed_features_total = self.0.failed_features.load(Ordering::Relaxed);
            self.0.events.push(Event::IndexerStopped { failed_features_total });
        }
    }
}

/// A backlog of the indexer: more rows behind than one round takes. It ends,
/// with an `index_caught_up` event, when the indexes cover every row again.
#[derive(Default)]
struct Backlog {
    /// When it started and the most rows it had.
    open: Option<(Instant, u64)>,
}

impl Backlog {
    /// Notes how many rows the indexes are behind.
    fn note(&mut self, behind: u32, events: &EventQueue) {
        let behind = u64::from(behind);
        match &mut self.open {
            None if behind > u64::from(INDEX_ROUND_ROWS) => self.open = Some((Instant::now(), behind)),
            Some((since, peak)) if behind == 0 => {
                events.push(Event::IndexCaughtUp { backlog_rows: *peak, duration_ms: ms(since.elapsed()) });
                self.open = None;
            }
            Some((_, peak)) => *peak = (*peak).max(behind),
            None => {}
        }
    }
}

/// Drops receipts past their retention from memory (the next checkpoint's
/// image leaves them out and deletes the WAL segments that held them; a
/// restart before it skips expired ones).
fn expire_receipts(state: &RwLock<State>, retention_ms: u64) {
    let cutoff = now_ms().saturating_sub(retention_ms);
    if state.read().receipts.values().any(|r| r.created_ms < cutoff) {
        state.write().receipts.expire(cutoff);
    }
}

fn run_indexer(
    state: Arc<RwLock<State>>,
    shared: Arc<Shared>,
    text: Arc<TextIndex>,
    config: &BranchConfig,
    graphs_dir: &Path,
) {
    let _alive = AliveGuard(shared.clone());
    if !config.indexing.wait(&shared.stop) {
        // closed before indexing was allowed: what was committed stays
        // for the next start's indexer, as after a crash
        return;
    }
    build_scalar_columns(&state);
    let interval = config.text_commit_interval;
    let sweep_every = Duration::from_millis(config.receipt_retention_ms.clamp(100, 60_000));
    let mut last_sweep = Instant::now();
    let mut last_commit = Instant::now();
    // when the branch last had rows the indexer had not seen
    let mut grown_at = Instant::now();
    let mut rows_seen = 0u32;
    let mut backlog = Backlog::default();
    // failed features as of the last index_round_failed event
    let mut failed_reported = shared.failed_features.load(Ordering::Relaxed);
    // the text index failed (its writers, or a commit) and no commit has
    // succeeded since: a round until then is not a healthy one, even when
    // the rows it handed over went in, so readiness does not flap between
    // the failing commits (a round's handing over and the next commit)
    let mut text_failing = false;
    // when a text index that failed is next put back (a round's failure
    // waits, not for the next write's wake-up: a writer that cannot be
    // opened, out of descriptors, is not retried per write)
    let mut retry_text_at = Instant::now();
    // doubled at each failure in a row, up to TEXT_RETRY_MAX
    let mut retry_text_after = interval;
    loop {
        fail::fail_point!("indexer::round");
        if last_sweep.elapsed() >= sweep_every {
            expire_receipts(&state, config.receipt_retention_ms);
            last_sweep = Instant::now();
        }
        if shared.vectors_compaction_due.swap(false, Ordering::AcqRel) {
            let started = Instant::now();
            // not while a checkpoint writes and seals vector files
            let rebuilt = {
                let _no_checkpoint = shared.checkpointing.lock();
                retention::compact_vectors(&state, &shared)
            };
            if !rebuilt.is_empty() {
                // the old columns' graphs and codes were freed here
                crate::memory::release_freed();
            }
            for (column, kept, removed) in rebuilt {
                shared.stats.compacted_vectors.fetch_add(removed, Ordering::Relaxed);
                shared.events.push(Event::VectorsCompacted {
                    column,
                    kept,
                    removed,
                    duration_ms: ms(started.elapsed()),
                });
            }
        }
        // vectors mapped from a checkpoint get their 8-bit codes here, off
        // the commit path (vectors written since the start get them as
        // they are stored); walks and scans read vectors until then
        let arenas: Vec<_> =
            state.read().tables.values().flat_map(|t| t.vectors.values()).map(|vc| vc.data.arena()).collect();
        for arena in arenas {
            arena.encode_pending();
        }
        if shared.stop.load(Ordering::Acquire) {
            // closing: commit what the text index was handed and end. The
            // rows behind (text and graph) are derived data that the next
            // start indexes from the watermarks; catching up here had a
            // close after a crash restart link 370,000 vectors for four
            // minutes, past any orchestrator's grace period, after which
            // a SIGKILL lost the graph dump and the next start began again
            if text.has_uncommitted() {
                let _ = text.commit();
            }
            break;
        }
        // a writer that failed is put back at its last commit first, and
        // the rows from the watermark on are handed to it again
        let text_recovered = !text.failed() || (Instant::now() >= retry_text_at && text.recover().is_ok());
        let from_text = text.pending_upto();
        let from_vec = shared.vector_watermark.load(Ordering::Acquire);
        let total = state.read().rows.len() as u32;
        if total != rows_seen {
            rows_seen = total;
            grown_at = Instant::now();
        }
        backlog.note(total.saturating_sub(text.watermark().min(from_vec)), &shared.events);
        // None: nothing was attempted this round; Some(true): something failed
        let mut round_failed: Option<bool> = (!text_recovered).then_some(true);
        let mut text_commit_failed = false;
        let mut text_committed = false;
        if from_text < total || from_vec < total {
            let mut failed = 0;
            // the text first: its round is short, and retention waits on it;
            // read a run of INDEX_ROUND_ROWS at a time, so the state's read
            // lock (which writes wait for) is held no longer than before
            let text_end =
                if text_recovered { total.min(from_text.saturating_add(TEXT_ROUND_ROWS)) } else { from_text };
            let mut text_from = from_text;
            while text_from < text_end {
                let upto = text_end.min(text_from.saturating_add(INDEX_ROUND_ROWS));
                let batch = collect_text(&state.read(), text_from, upto);
                if feed_text(&text, &batch).is_err() {
                    // nothing from the watermark on is searchable through the
                    // index but through the hot overlay, until a later round
                    // has put the writers back and handed these rows again
                    round_failed = Some(true);
                    break;
                }
                // a row whose record entry cannot be read has no document
                failed += batch.unreadable;
                text.mark_pending(upto);
                text_from = upto;
            }
            // and searchable before the graphs' longer round
            let due = commit_due(config, &shared, &text, grown_at);
            if let Some(committed) = commit_if_due(&text, &mut last_commit, due) {
                text_commit_failed = !committed;
                text_committed = committed;
                round_failed = Some(!committed);
            }
            let batch = collect_vectors(&state.read(), from_vec);
            for (_, index) in &batch.graphs {
                // a row the graph fails on (a panic while linking it) is
                // counted in failed_feature_count; the others go in
                failed += index.insert_below_row(batch.upto);
            }
            for vc in state.read().tables.values().flat_map(|t| t.vectors.values()) {
                vc.index.set_watermark(batch.upto);
            }
            for (name, index) in &batch.graphs {
                // this thread is the only inserter, so the graph holds still
                let dumped = index.dumped();
                // a quarter of its last dump, at least graph_dump_rows: dumps
                // cost little next to the inserts between them
                if index.watermark() - dumped >= config.graph_dump_rows.max(dumped / 4) {
                    // a failed dump leaves the previous one; a restart
                    // rebuilds what it lacks
                    let _ = index.dump(graphs_dir, name);
                }
            }
            shared.vector_watermark.store(batch.upto, Ordering::Release);
            shared.failed_features.fetch_add(failed, Ordering::Relaxed);
            round_failed = Some(round_failed.unwrap_or(false) || failed > 0);
        }
        let lagging = text.has_uncommitted();
        let due = commit_due(config, &shared, &text, grown_at);
        if let Some(committed) = commit_if_due(&text, &mut last_commit, due) {
            text_commit_failed |= !committed;
            text_committed |= committed;
            round_failed = Some(round_failed.unwrap_or(false) || !committed);
        }
        if text_committed && !text.failed() {
            text_failing = false;
        } else if round_failed == Some(true) && (text_commit_failed || !text_recovered || text.failed()) {
            text_failing = true;
        }
        if text_failing && round_failed == Some(false) {
            round_failed = None;
        }
        let text_stuck = !text_recovered || text.failed();
        if !text_stuck {
            retry_text_after = interval;
        } else if Instant::now() >= retry_text_at {
            retry_text_at = Instant::now() + retry_text_after;
            retry_text_after = (retry_text_after * 2).min(TEXT_RETRY_MAX.max(interval));
        }
        let in_a_row = match round_failed {
            Some(true) => shared.failing_rounds.fetch_add(1, Ordering::Relaxed) + 1,
            Some(false) => {
                shared.failing_rounds.store(0, Ordering::Relaxed);
                0
            }
            None => 0,
        };
        if in_a_row > 0 && report_failed_round(in_a_row) {
            let failed_features_total = shared.failed_features.load(Ordering::Relaxed);
            shared.events.push(Event::IndexRoundFailed {
                failed_features: failed_features_total - failed_reported,
                text_commit_failed,
                failed_features_total,
                failed_rounds_in_a_row: u64::from(in_a_row),
            });
            failed_reported = failed_features_total;
        }
        // merges finished since the last commit
        text.refresh();
        let indexed = text.watermark().min(shared.vector_watermark.load(Ordering::Acquire));
        backlog.note((state.read().rows.len() as u32).saturating_sub(indexed), &shared.events);
        let rows = state.read().rows.len() as u32;
        // a graph rebuilt from 0 (after a crash, or by retention) goes on
        // round after round without waiting
        let caught_up =
            (text.pending_upto() >= rows || text_stuck) && shared.vector_watermark.load(Ordering::Acquire) >= rows;
        let mut woken = shared.wake.lock();
        if !*woken && caught_up {
            let wait = if text_stuck {
                retry_text_at.saturating_duration_since(Instant::now())
            } else if lagging {
                until_commit(last_commit, due, grown_at, interval)
            } else {
                Duration::from_secs(1)
            };
            shared.wake_cv.wait_for(&mut woken, wait.max(Duration::from_millis(1)));
        }
        *woken = false;
    }
}

/// Whether the `in_a_row`-th failed round in a row is reported: the 1st,
/// 2nd, 4th, 8th and so on, then every 256th. A full disk fails every round
/// (four a second, each retrying the text commit), and one event each had
/// filled the log with the same warning.
fn report_failed_round(in_a_row: u32) -> bool {
    in_a_row.is_power_of_two() || in_a_row.is_multiple_of(256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_rounds_in_a_row_are_reported_ever_more_rarely() {
        let reported: Vec<u32> = (1..=1024).filter(|&n| report_failed_round(n)).collect();
        assert_eq!(reported, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024]);
    }

    fn config() -> BranchConfig {
        BranchConfig {
            text_commit_interval: Duration::from_millis(250),
            idle_commit_interval: Duration::from_secs(10),
            ..BranchConfig::default()
        }
    }

    fn ago(d: Duration) -> Instant {
        Instant::now().checked_sub(d).expect("the clock is past the process start")
    }

    #[test]
    fn a_searched_branch_commits_at_the_interval_and_an_idle_one_only_once_writes_pause() {
        let c = config();
        let writing = Instant::now();
        let paused = ago(Duration::from_secs(1));
        assert_eq!(commit_interval(&c, true, writing, 10), c.text_commit_interval);
        assert_eq!(commit_interval(&c, true, paused, 10), c.text_commit_interval);
        assert_eq!(commit_interval(&c, false, writing, 10), c.idle_commit_interval);
        assert_eq!(commit_interval(&c, false, paused, 10), c.text_commit_interval);
        // a bulk load on an idle branch commits every IDLE_COMMIT_ROWS rows
        assert_eq!(commit_interval(&c, false, writing, IDLE_COMMIT_ROWS - 1), c.idle_commit_interval);
        assert_eq!(commit_interval(&c, false, writing, IDLE_COMMIT_ROWS), c.text_commit_interval);
        // an idle interval shorter than the commit interval does not commit more often
        let short = BranchConfig { idle_commit_interval: Duration::from_millis(10), ..config() };
        assert_eq!(commit_interval(&short, false, writing, 10), short.text_commit_interval);
    }

    #[test]
    fn an_idle_branchs_indexer_sleeps_until_its_writes_would_have_paused() {
        let c = config();
        let interval = c.text_commit_interval;
        // searched: until the interval since the last commit ends
        let wait = until_commit(ago(Duration::from_millis(100)), interval, Instant::now(), interval);
        assert!(wait <= Duration::from_millis(150) && wait > Duration::from_millis(100), "{wait:?}");
        assert_eq!(until_commit(ago(Duration::from_secs(1)), interval, Instant::now(), interval), Duration::ZERO);
        // idle, its last commit long ago: not at once (the idle interval has
        // not been reached), but no later than the writes' pause would make it due
        let wait =
            until_commit(ago(Duration::from_secs(5)), c.idle_commit_interval, ago(Duration::from_millis(50)), interval);
        assert!(wait <= Duration::from_millis(200) && wait > Duration::from_millis(150), "{wait:?}");
        // idle and the idle interval over: at once
        let wait = until_commit(ago(Duration::from_secs(11)), c.idle_commit_interval, Instant::now(), interval);
        assert_eq!(wait, Duration::ZERO);
    }
}
