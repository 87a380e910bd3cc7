//! What a branch and its two threads share, below all three: the branch's
//! configuration, the write and checkpoint types that cross between them,
//! `Shared` (flags, watermarks, counters and events) and the indexer's
//! health. storage/branch.rs (the public API), storage/admission.rs,
//! storage/committer.rs and storage/indexer.rs all build on this module and
//! none of them on each other's internals the other way round.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use serde::Serialize;

use crate::error::{Code, Error, Result};
use crate::model::RecordInput;
use crate::schema::Column;
use crate::storage::commit::{now_ms, Receipt, ReceiptDraft};
use crate::storage::events::{CheckpointPhases, EventQueue};
use crate::storage::stats::BranchStats;
#[derive(Debug, Clone)]
pub struct BranchConfig {
    pub max_vector_dim: u32,
    pub max_batch: usize,
    /// Most columns a table may have, declared and inferred: each is an index,
    /// and the GraphQL schema has a field for each.
    pub max_columns: usize,
    pub receipt_retention_ms: u64,
    /// The most bytes a branch's receipts hold in memory before a keyed
    /// read stores its answer's digest instead of the answer (a draft's
    /// `digest`): a retry then runs the read again and replays it when it
    /// answers the same. Write receipts (their epoch and count) are always
    /// stored whole. Without it, each keyed read held up to 1 MiB of its
    /// answer for the receipts' whole retention, so memory grew with the
    /// number of keyed reads (found by a black-box review). Every checkpoint
    /// image holds the receipts and writes wait for the image, so the default
    /// is small: at 64 MiB a soak test's images grew from 7 to 54 MB and its
    /// checkpoints from 0.5 to 1.8 s under a stream of keyed queries.
    pub receipt_memory_bytes: u64,
    /// How many epochs of history stay readable; `None` keeps all.
    pub history_epochs: Option<u64>,
    pub text_commit_interval: Duration,
    /// A branch no query has read (and no caller has waited on its indexes)
    /// for this long is search-idle, as Elasticsearch's shards are after
    /// `index.search.idle.after`: while its writes go on, its text index
    /// commits only every `idle_commit_interval`. Each commit starts a new
    /// tantivy segment, whose writer costs a few megabytes of zeroed tables
    /// however few documents it gets; under a stream of single-record
    /// writes, four commits a second had taken a fifth of the core. Queries
    /// are complete either way (rows the index lacks are scored by the hot
    /// overlay); the first query of an idle branch wakes the indexer, which
    /// commits at once and goes back to `text_commit_interval`.
    pub search_idle_after: Duration,
    /// How long a search-idle branch's uncommitted text may wait while
    /// writes keep coming (once they pause for `text_commit_interval`, it
    /// is committed then).
    pub idle_commit_interval: Duration,
    pub group_commit_max: usize,
    /// A checkpoint is taken once the WAL segment holds this many bytes...
    pub checkpoint_wal_bytes: u64,
    /// ...or this many record versions, which bounds what a start replays
    /// whatever the records' size (replay costs about the same per row for
    /// a short record as for a long one: about 10 us a row on a 2-core AMD
    /// EPYC, so 50,000 rows are about half a second of a restart)...
    pub checkpoint_rows: u64,
    /// ...or this long after the last one, when anything was written since.
    pub checkpoint_interval: Duration,
    /// Between checkpoints, the vectors written since the last checkpoint or
    /// flush are appended to the generation's vector file once they reach
    /// this many bytes, and read from it from then on
    /// (`checkpoint::flush_vectors`): the process holds at most this much
    /// of them, not every vector of up to `checkpoint_rows` records.
    pub vector_flush_bytes: u64,
    /// Checkpoint when the branch closes cleanly, so the next start replays
    /// nothing. (Off only in tests that need a log to inspect.)
    pub checkpoint_on_close: bool,
    /// The indexer dumps a vector graph once it has grown by this many rows
    /// and by a quarter since its last dump, so a crash rebuilds at most
    /// that much of it.
    pub graph_dump_rows: u32,
    /// When the branches' indexers may start (shared by every branch of an
    /// engine; open unless the engine was opened with indexing deferred).
    pub indexing: IndexingGate,
}

/// Whether the indexers may run yet. A server opens its engine with the
/// gate closed and opens it once it listens, so that the catch-up after a
/// crash (the text index's and the graphs' tails, on every core) does not
/// take the cores while the server is still starting: on 2 cores it had
/// made the time from open to listening three times longer. Queries before
/// then are still complete: rows no index holds yet are scanned exactly.
#[derive(Debug, Clone)]
pub struct IndexingGate(Arc<(Mutex<bool>, Condvar)>);

impl IndexingGate {
    pub fn new(open: bool) -> IndexingGate {
        IndexingGate(Arc::new((Mutex::new(open), Condvar::new())))
    }

    pub fn open(&self) {
        let (open, changed) = &*self.0;
        *open.lock() = true;
        changed.notify_all();
    }

    /// Blocks until the gate opens or `stop` is set (which is looked at
    /// every 50 ms); true when the gate is open.
    pub fn wait(&self, stop: &AtomicBool) -> bool {
        let (open, changed) = &*self.0;
        let mut is_open = open.lock();
        while !*is_open && !stop.load(Ordering::Acquire) {
            changed.wait_for(&mut is_open, Duration::from_millis(50));
        }
        *is_open
    }
}

impl Default for BranchConfig {
    fn default() -> Self {
        BranchConfig {
            max_vector_dim: 4096,
            max_batch: 10_000,
            max_columns: 1024,
            receipt_retention_ms: 24 * 3600 * 1000,
            receipt_memory_bytes: 8 << 20,
            history_epochs: None,
            text_commit_interval: Duration::from_millis(250),
            search_idle_after: Duration::from_secs(30),
            idle_commit_interval: Duration::from_secs(10),
            group_commit_max: 1024,
            checkpoint_wal_bytes: 64 << 20,
            checkpoint_rows: 50_000,
            checkpoint_interval: Duration::from_secs(300),
            vector_flush_bytes: 8 << 20,
            checkpoint_on_close: true,
            graph_dump_rows: 65_536,
            indexing: IndexingGate::new(true),
        }
    }
}

pub enum WriteOp {
    Put { records: Vec<RecordInput>, receipt: Option<ReceiptDraft> },
    Delete { table: String, tenant_id: String, id: String, receipt: Option<ReceiptDraft> },
    Declare { table: String, columns: BTreeMap<String, Column> },
    Receipt { receipt: ReceiptDraft },
}

/// Measured durations of one write, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WriteTiming {
    pub queue_ms: f64,
    pub validate_ms: f64,
    pub encode_ms: f64,
    pub wal_fsync_ms: f64,
    pub apply_ms: f64,
    /// How many write requests shared this fsync.
    pub group_size: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WriteOutcome {
    pub epoch: u64,
    pub record_count: usize,
    /// False when the write changed nothing (deleting an absent record).
    pub changed: bool,
    pub timing: WriteTiming,
    pub receipt: Option<Receipt>,
}

#[derive(Debug, Clone)]
pub enum WriteResult {
    Committed(WriteOutcome),
    Replayed(Receipt),
}

/// Where the committer sends a write's outcome, once its group is durable
/// and applied (or the write is refused). `Branch::write` blocks on a
/// channel behind one; the Node binding gives one that settles the caller's
/// promise, so no thread waits out the fsync. It runs on the committer
/// thread, between two groups: it must hand the outcome on and return.
///
/// A reply dropped unanswered (the branch closed with the write still
/// queued) answers `shutting_down`, so a caller is never left waiting.
pub struct Reply(Option<Box<dyn FnOnce(Result<WriteResult>) + Send>>);

impl Reply {
    pub fn new(answer: impl FnOnce(Result<WriteResult>) + Send + 'static) -> Reply {
        Reply(Some(Box::new(answer)))
    }

    pub fn send(mut self, outcome: Result<WriteResult>) {
        if let Some(answer) = self.0.take() {
            answer(outcome);
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(answer) = self.0.take() {
            // dropped as the committer unwinds from a panic: the write may or
            // may not be in the log, which only a restart's replay can tell
            answer(Err(if std::thread::panicking() {
                Error::new(
                    Code::InternalPanic,
                    "the engine panicked while committing this write; whether it is durable is known after a restart",
                )
            } else {
                Error::new(Code::ShuttingDown, "branch closed before the write finished")
            }));
        }
    }
}

/// What a checkpoint wrote.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointInfo {
    /// The generation it starts: WAL segments from here on are the tail.
    pub gen: u32,
    /// The state it holds is exactly the commits up to this epoch.
    pub epoch: u64,
    pub bytes: u64,
    pub duration_ms: f64,
    pub phases: CheckpointPhases,
    /// Files a copy of the branch at `epoch` needs, when asked to export.
    #[serde(skip)]
    pub exported: Vec<PathBuf>,
}

/// What the branch, its committer and its indexer share.
pub(crate) struct Shared {
    /// Set by `Branch::close`: the indexer finishes and ends.
    pub(super) stop: AtomicBool,
    /// Set by the committer after a storage failure: writes are refused.
    pub(super) failed: AtomicBool,
    pub archived: AtomicBool,
    /// True when the indexer has work; it sleeps on `wake_cv` otherwise.
    pub(super) wake: Mutex<bool>,
    pub(super) wake_cv: Condvar,
    /// Every row below this id is in its vector graphs.
    pub vector_watermark: AtomicU32,
    /// Set by retention when it removed versions: the indexer rebuilds the
    /// vector columns whose slots are at least half removed versions
    /// (storage/indexer.rs, `compact_vectors`).
    pub vectors_compaction_due: AtomicBool,
    /// Held by the committer for a whole checkpoint and by the indexer while
    /// it rebuilds a vector column, so a column never changes between the
    /// image naming its vector files and the deletion of the files no column
    /// reads (or between writing a column's new vectors and sealing them).
    pub(super) checkpointing: Mutex<()>,
    /// (row, column) features an index failed to take.
    pub failed_features: std::sync::atomic::AtomicU64,
    /// False once the indexer thread has ended without being asked to.
    pub indexer_alive: AtomicBool,
    /// Indexer rounds in a row in which some feature failed.
    pub failing_rounds: AtomicU32,
    /// When a query last read the branch or a caller last waited on its
    /// indexes (ms since the epoch; 0: never since it opened).
    pub(super) searched_ms: AtomicU64,
    pub stats: BranchStats,
    pub events: EventQueue,
}

impl Shared {
    /// A branch's shared state as it opens: its graphs hold the rows below
    /// `vector_watermark`, and the indexer's first round (it starts woken)
    /// compacts the vector columns when `compaction_due`.
    pub(super) fn new(vector_watermark: u32, compaction_due: bool) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            archived: AtomicBool::new(false),
            wake: Mutex::new(true),
            wake_cv: Condvar::new(),
            vector_watermark: AtomicU32::new(vector_watermark),
            vectors_compaction_due: AtomicBool::new(compaction_due),
            checkpointing: Mutex::new(()),
            failed_features: Default::default(),
            indexer_alive: AtomicBool::new(true),
            failing_rounds: AtomicU32::new(0),
            searched_ms: AtomicU64::new(0),
            stats: BranchStats::default(),
            events: EventQueue::default(),
        }
    }

    /// Wakes the indexer for a round now.
    pub(super) fn wake_indexer(&self) {
        *self.wake.lock() = true;
        self.wake_cv.notify_one();
    }

    /// Notes that a query reads the branch (or a caller waits on its
    /// indexes); when it was search-idle (`idle_after`), wakes the indexer
    /// to commit what the text index holds.
    pub(crate) fn note_search(&self, idle_after: Duration) {
        let now = now_ms();
        let before = self.searched_ms.swap(now, Ordering::Relaxed);
        if now.saturating_sub(before) >= ms_of(idle_after) {
            self.wake_indexer();
        }
    }

    /// Whether a query read the branch (or a caller waited on its indexes)
    /// within `idle_after`.
    pub(super) fn searched_within(&self, idle_after: Duration) -> bool {
        now_ms().saturating_sub(self.searched_ms.load(Ordering::Relaxed)) < ms_of(idle_after)
    }
}

fn ms_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Rounds in a row with failures after which the indexer counts as failing.
pub const INDEXER_FAILING_ROUNDS: u32 = 3;

/// How the indexer of a branch is doing, for readiness and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexerHealth {
    Running,
    /// Every recent round failed to index some feature.
    Failing,
    /// The thread ended: nothing new gets indexed until a restart.
    Stopped,
}

impl IndexerHealth {
    pub fn as_str(self) -> &'static str {
        match self {
            IndexerHealth::Running => "running",
            IndexerHealth::Failing => "failing",
            IndexerHealth::Stopped => "stopped",
        }
    }
}

/// The name a vector graph of `table.column` is dumped under.
pub(super) fn graph_name(table: &str, column: &str) -> String {
    format!("{table}.{column}")
}

/// A duration in milliseconds, as timings and events report it.
pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_search_of_an_idle_branch_wakes_its_indexer_and_later_ones_do_not() {
        let idle_after = Duration::from_secs(30);
        let s = Shared::new(0, false);
        *s.wake.lock() = false;
        assert!(!s.searched_within(idle_after), "a branch no query has read is idle");
        s.note_search(idle_after);
        assert!(*s.wake.lock(), "the indexer is woken to commit");
        assert!(s.searched_within(idle_after));
        *s.wake.lock() = false;
        s.note_search(idle_after);
        assert!(!*s.wake.lock(), "a searched branch's indexer keeps its pace");
        // idle again once the last search is older than idle_after
        s.searched_ms.store(now_ms() - 31_000, Ordering::Relaxed);
        assert!(!s.searched_within(idle_after));
        s.note_search(idle_after);
        assert!(*s.wake.lock());
    }
}
