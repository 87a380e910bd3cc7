//! A branch: its directory, configuration and public API. Opening one
//! recovers it (the latest checkpoint, then every WAL segment after it, then
//! the vector graphs dumped at the last clean close) and starts its two
//! threads; closing one stops them and dumps the graphs.
//!
//! The work is split by thread:
//! - storage/committer.rs owns the open WAL segment: it group-commits the
//!   writes and takes the checkpoints, validating each write with
//!   storage/admission.rs;
//! - storage/indexer.rs feeds the text index and the vector graphs behind
//!   the writes.
//!
//! They talk through what this module holds: `Branch::write` and
//! `Branch::checkpoint` send requests down an mpsc channel to the committer
//! and block on a reply channel; the `State` sits behind an `RwLock` that
//! the committer writes and everyone reads; and `Shared` carries the flags,
//! watermarks, counters (storage/stats.rs) and events (storage/events.rs)
//! the threads and readers share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use serde::Serialize;

use crate::bail;
use crate::error::{Code, Error, Result};
use crate::index::text::TextIndex;
use crate::index::vector::VectorIndex;
use crate::model::RecordInput;
use crate::schema::Column;
use crate::storage::checkpoint;
use crate::storage::commit::{now_ms, Commit, Receipt, ReceiptDraft};
use crate::storage::committer::{self, CheckpointJob, Job, Request};
use crate::storage::events::{Event, EventQueue, Recorded};
use crate::storage::indexer;
use crate::storage::records::RecordFiles;
use crate::storage::state::State;
use crate::storage::stats::BranchStats;
use crate::storage::wal::{self, Wal};

#[derive(Debug, Clone)]
pub struct BranchConfig {
    pub max_vector_dim: u32,
    pub max_batch: usize,
    pub receipt_retention_ms: u64,
    /// How many epochs of history stay readable; `None` keeps all.
    pub history_epochs: Option<u64>,
    pub text_commit_interval: Duration,
    pub group_commit_max: usize,
    /// A checkpoint is taken once the WAL segment holds this many bytes...
    pub checkpoint_wal_bytes: u64,
    /// ...or this long after the last one, when anything was written since.
    pub checkpoint_interval: Duration,
    /// Checkpoint when the branch closes cleanly, so the next start replays
    /// nothing. (Off only in tests that need a log to inspect.)
    pub checkpoint_on_close: bool,
    /// The indexer dumps a vector graph once it has grown by this many rows
    /// and by a quarter since its last dump, so a crash rebuilds at most
    /// that much of it.
    pub graph_dump_rows: u32,
}

impl Default for BranchConfig {
    fn default() -> Self {
        BranchConfig {
            max_vector_dim: 4096,
            max_batch: 10_000,
            receipt_retention_ms: 24 * 3600 * 1000,
            history_epochs: None,
            text_commit_interval: Duration::from_millis(250),
            group_commit_max: 1024,
            checkpoint_wal_bytes: 64 << 20,
            checkpoint_interval: Duration::from_secs(300),
            checkpoint_on_close: true,
            graph_dump_rows: 65_536,
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

/// What a checkpoint wrote.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointInfo {
    /// The generation it starts: WAL segments from here on are the tail.
    pub gen: u32,
    /// The state it holds is exactly the commits up to this epoch.
    pub epoch: u64,
    pub bytes: u64,
    pub duration_ms: f64,
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
    /// (row, column) features an index failed to take.
    pub failed_features: std::sync::atomic::AtomicU64,
    /// False once the indexer thread has ended without being asked to.
    pub indexer_alive: AtomicBool,
    /// Indexer rounds in a row in which some feature failed.
    pub failing_rounds: AtomicU32,
    pub stats: BranchStats,
    pub events: EventQueue,
}

impl Shared {
    /// Wakes the indexer for a round now.
    pub(super) fn wake_indexer(&self) {
        *self.wake.lock() = true;
        self.wake_cv.notify_one();
    }
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

pub struct Branch {
    pub dir: PathBuf,
    pub state: Arc<RwLock<State>>,
    pub text: Arc<TextIndex>,
    pub(crate) shared: Arc<Shared>,
    pub config: BranchConfig,
    tx: Mutex<Option<mpsc::Sender<Request>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// WAL bytes cut from a torn tail when this branch was opened.
    pub recovered_truncated_bytes: u64,
}

/// The single log of data directories written before checkpoints existed;
/// opening one renames it to the first WAL segment.
pub const WAL_FILE: &str = "wal.log";
pub const VECTOR_DIR: &str = "vectors";

/// The name a vector graph of `table.column` is dumped under.
pub(super) fn graph_name(table: &str, column: &str) -> String {
    format!("{table}.{column}")
}

/// Replaces the empty graphs built during replay with the ones dumped at the
/// last clean close, when they are usable; returns the row from which the
/// indexer must catch up.
fn load_vector_graphs(state: &mut State, dir: &Path, rows: u32) -> u32 {
    let mut from = rows;
    for (table, data) in state.tables.iter_mut() {
        for (column, vc) in data.vectors.iter_mut() {
            let metric = vc.index.metric;
            if let Some(loaded) = VectorIndex::load(dir, &graph_name(table, column), metric, vc.data.arena(), rows) {
                vc.index = Arc::new(loaded);
            }
            from = from.min(vc.index.watermark());
        }
    }
    from
}

impl Branch {
    pub fn open(dir: &Path, config: BranchConfig) -> Result<Branch> {
        let started = Instant::now();
        wal::create_private_dir(dir)?;
        let ckpt = checkpoint::latest(dir)?;
        let legacy = dir.join(WAL_FILE);
        if legacy.exists() {
            if ckpt.is_some() || !checkpoint::wal_generations(dir)?.is_empty() {
                return Err(Error::storage(format!(
                    "{} exists beside WAL segments; move one of them away (docs/storage.md)",
                    legacy.display()
                )));
            }
            // a directory from before checkpoints: its log is segment 0
            std::fs::rename(&legacy, dir.join(checkpoint::wal_name(0)))?;
            crate::fsutil::sync_dir(&legacy)?;
        }
        let base = ckpt.unwrap_or(0);
        checkpoint::remove_stale(dir, base)?;
        let mut state = match ckpt {
            Some(gen) => checkpoint::load(dir, gen)?,
            None => State::new(RecordFiles::open(dir, &[], 0)?),
        };
        let checkpoint_epoch = ckpt.map(|_| state.latest_epoch);
        // replay every segment from the checkpoint on; the last one stays
        // open for appends
        let mut segments = checkpoint::wal_generations(dir)?;
        if segments.is_empty() {
            segments.push(base);
        }
        let mut truncated = 0;
        let mut commits_replayed = 0;
        let mut open_wal = None;
        for (i, gen) in segments.iter().enumerate() {
            let (wal, replay) = Wal::open(&dir.join(checkpoint::wal_name(*gen)))?;
            truncated += replay.truncated;
            commits_replayed += replay.payloads.len() as u64;
            state.wal_end = wal.end();
            for (payload, end) in &replay.payloads {
                let commit: Commit = serde_json::from_slice(payload)
                    .map_err(|e| Error::storage(format!("corrupt commit in segment {gen} at offset {end}: {e}")))?;
                state.apply(&commit, *end)?;
            }
            if i + 1 == segments.len() {
                open_wal = Some((wal, *gen));
            }
        }
        let (wal, wal_gen) = open_wal.expect("at least one segment");
        let cutoff = now_ms().saturating_sub(config.receipt_retention_ms);
        state.receipts.retain(|_, r| r.created_ms >= cutoff);
        let rows = state.rows.len() as u32;
        let vector_watermark = load_vector_graphs(&mut state, &dir.join(VECTOR_DIR), rows);

        let text_dir = dir.join("text");
        let mut text = TextIndex::open(&text_dir)?;
        if text.watermark() > rows {
            // the index claims rows the log does not have: rebuild it
            drop(text);
            std::fs::remove_dir_all(&text_dir)?;
            text = TextIndex::open(&text_dir)?;
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            archived: AtomicBool::new(false),
            wake: Mutex::new(true),
            wake_cv: Condvar::new(),
            vector_watermark: AtomicU32::new(vector_watermark),
            failed_features: Default::default(),
            indexer_alive: AtomicBool::new(true),
            failing_rounds: AtomicU32::new(0),
            stats: BranchStats::default(),
            events: EventQueue::default(),
        });
        shared.stats.wal_segment_bytes.store(wal.end(), Ordering::Relaxed);
        shared.stats.add_keys(&state.keys);
        if let Some(gen) = ckpt {
            shared.stats.last_checkpoint_ms.store(written_ms(&dir.join(checkpoint::file_name(gen))), Ordering::Relaxed);
        }
        shared.events.push(Event::Recovery {
            checkpoint_generation: ckpt,
            checkpoint_epoch,
            segments_replayed: segments.len() as u64,
            commits_replayed,
            truncated_bytes: truncated,
            latest_epoch: state.latest_epoch,
            index_backlog_rows: u64::from(rows.saturating_sub(vector_watermark.min(text.watermark()))),
            duration_ms: ms(started.elapsed()),
        });
        let state = Arc::new(RwLock::new(state));
        let text = Arc::new(text);
        let (tx, rx) = mpsc::channel::<Request>();
        let committer = committer::spawn(wal, wal_gen, dir, rx, state.clone(), shared.clone(), config.clone())?;
        let indexer =
            indexer::spawn(state.clone(), shared.clone(), text.clone(), config.clone(), dir.join(VECTOR_DIR))?;
        Ok(Branch {
            dir: dir.to_path_buf(),
            state,
            text,
            shared,
            config,
            tx: Mutex::new(Some(tx)),
            threads: Mutex::new(vec![committer, indexer]),
            recovered_truncated_bytes: truncated,
        })
    }

    pub fn set_archived(&self, archived: bool) {
        self.shared.archived.store(archived, Ordering::Release);
    }

    pub fn is_failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    pub fn indexer_health(&self) -> IndexerHealth {
        if !self.shared.indexer_alive.load(Ordering::Acquire) && !self.shared.stop.load(Ordering::Acquire) {
            IndexerHealth::Stopped
        } else if self.shared.failing_rounds.load(Ordering::Relaxed) >= INDEXER_FAILING_ROUNDS {
            IndexerHealth::Failing
        } else {
            IndexerHealth::Running
        }
    }

    /// Submits a write and waits until it is durable (or rejected).
    pub fn write(&self, op: WriteOp) -> Result<WriteResult> {
        if self.shared.archived.load(Ordering::Acquire) {
            bail!(BranchArchived, "branch is archived and read-only");
        }
        let (reply, rx) = mpsc::sync_channel(1);
        {
            let tx = self.tx.lock();
            let Some(tx) = tx.as_ref() else { bail!(ShuttingDown, "branch is closing") };
            tx.send(Request::Write(Job { op, enqueued: Instant::now(), reply }))
                .map_err(|_| Error::new(Code::ShuttingDown, "branch is closing"))?;
        }
        rx.recv().map_err(|_| Error::new(Code::ShuttingDown, "branch closed before the write finished"))?
    }

    /// Takes a checkpoint now, between two write groups; with `export`,
    /// links the files that hold the branch at the checkpoint's epoch into
    /// that directory before any later write.
    pub fn checkpoint(&self, export: Option<&Path>) -> Result<CheckpointInfo> {
        let (reply, rx) = mpsc::sync_channel(1);
        {
            let tx = self.tx.lock();
            let Some(tx) = tx.as_ref() else { bail!(ShuttingDown, "branch is closing") };
            tx.send(Request::Checkpoint(CheckpointJob { export: export.map(Path::to_path_buf), reply }))
                .map_err(|_| Error::new(Code::ShuttingDown, "branch is closing"))?;
        }
        rx.recv().map_err(|_| Error::new(Code::ShuttingDown, "branch closed before the checkpoint finished"))?
    }

    pub fn vector_watermark(&self) -> u32 {
        self.shared.vector_watermark.load(Ordering::Acquire)
    }

    /// The counters the committer keeps (storage/stats.rs).
    pub fn stats(&self) -> &BranchStats {
        &self.shared.stats
    }

    /// The events recorded since the last call, oldest first (storage/events.rs).
    pub fn drain_events(&self) -> Vec<Recorded> {
        self.shared.events.drain()
    }

    /// Blocks until the text and vector indexes cover every applied row.
    pub fn wait_indexed(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let rows = self.state.read().rows.len() as u32;
            if self.text.watermark() >= rows && self.vector_watermark() >= rows {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.shared.wake_indexer();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The readable horizon: epochs below it are rejected by temporal reads.
    pub fn horizon(&self, state: &State) -> u64 {
        match self.config.history_epochs {
            Some(n) => state.latest_epoch.saturating_sub(n),
            None => 0,
        }
    }

    /// Stops accepting writes, finishes the queued ones, commits the text
    /// index and joins the threads.
    pub fn close(&self) {
        self.tx.lock().take();
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake_indexer();
        for handle in self.threads.lock().drain(..) {
            let _ = handle.join();
        }
        let _ = self.text.close();
        // the indexer has stopped: dump the vector graphs so the next start
        // loads them instead of rebuilding
        let state = self.state.read();
        for (table, data) in &state.tables {
            for (column, vc) in &data.vectors {
                let _ = vc.index.dump(&self.dir.join(VECTOR_DIR), &graph_name(table, column));
            }
        }
    }
}

impl Drop for Branch {
    fn drop(&mut self) {
        self.close();
    }
}

/// A duration in milliseconds, as timings and events report it.
pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// When a file was last written, in unix ms (now when unknown).
fn written_ms(path: &Path) -> u64 {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let since_epoch = modified.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    since_epoch.map_or_else(now_ms, |d| d.as_millis() as u64)
}
