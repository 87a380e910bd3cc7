//! A branch: its WAL, its state, the committer thread that group-commits
//! writes and takes checkpoints, and the indexer thread that feeds text and
//! vector indexes.
//!
//! Group commit: writers hand jobs to one committer thread. It takes every
//! job waiting, validates them in order against the state plus what earlier
//! jobs of the same group staged, appends one frame per write request (one
//! epoch each), calls `fdatasync` once for the group, applies the commits to
//! memory and only then answers each writer. A job that fails validation
//! writes nothing and does not disturb the others.
//!
//! The committer counts what it does in the branch's `BranchStats`
//! (storage/stats.rs: WAL bytes, fsyncs, group sizes, checkpoints); both
//! threads record what an operator should read in the branch's event queue
//! (storage/events.rs).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use serde::Serialize;
use serde_json::Value;

use crate::bail;
use crate::error::{Code, Error, Result};
use crate::index::text::TextIndex;
use crate::index::vector::VectorIndex;
use crate::model::RecordInput;
use crate::names;
use crate::schema::{Column, TableSchema};
use crate::storage::checkpoint;
use crate::storage::commit::{now_ms, Commit, Receipt, ReceiptDraft, WalRow};
use crate::storage::events::{CheckpointTrigger, Event, EventQueue, FaultStage, Recorded};
use crate::storage::records::RecordFiles;
use crate::storage::state::{key_string, State};
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

struct Job {
    op: WriteOp,
    enqueued: Instant,
    reply: mpsc::SyncSender<Result<WriteResult>>,
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

struct CheckpointJob {
    /// A directory to hard-link (or copy) the checkpoint's files into, for
    /// a snapshot; done before the committer takes the next write.
    export: Option<PathBuf>,
    reply: mpsc::SyncSender<Result<CheckpointInfo>>,
}

enum Request {
    Write(Job),
    Checkpoint(CheckpointJob),
}

pub(crate) struct Shared {
    stop: AtomicBool,
    failed: AtomicBool,
    pub archived: AtomicBool,
    wake: Mutex<bool>,
    wake_cv: Condvar,
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

fn graph_name(table: &str, column: &str) -> String {
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
        let committer = {
            let (state, shared, config) = (state.clone(), shared.clone(), config.clone());
            let log = Log { wal, gen: wal_gen, dir: dir.to_path_buf(), last_checkpoint: Instant::now() };
            std::thread::Builder::new()
                .name("braid-commit".into())
                .spawn(move || run_committer(log, rx, state, shared, config))?
        };
        let indexer = {
            let (state, shared, text, config) = (state.clone(), shared.clone(), text.clone(), config.clone());
            let graphs_dir = dir.join(VECTOR_DIR);
            std::thread::Builder::new()
                .name("braid-index".into())
                .spawn(move || run_indexer(state, shared, text, &config, &graphs_dir))?
        };
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
            self.wake_indexer();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn wake_indexer(&self) {
        *self.shared.wake.lock() = true;
        self.shared.wake_cv.notify_one();
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
        self.wake_indexer();
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

enum Staged {
    Commit(Box<Commit>, usize, Option<Receipt>),
    Replay(Receipt),
    Noop(u64),
}

fn staged(commit: Commit, count: usize, receipt: Option<Receipt>) -> Staged {
    Staged::Commit(Box::new(commit), count, receipt)
}

/// What a staged write did, for its receipt.
#[derive(Clone, Copy)]
struct Outcome {
    epoch: u64,
    count: usize,
    changed: bool,
}

/// Validation of a group of jobs against the state and what earlier jobs of
/// the same group staged.
struct Stage<'a> {
    state: &'a State,
    config: &'a BranchConfig,
    epoch: u64,
    schemas: HashMap<String, TableSchema>,
    versions: HashMap<String, u32>,
    receipts: HashSet<String>,
}

impl<'a> Stage<'a> {
    fn new(state: &'a State, config: &'a BranchConfig) -> Self {
        Stage {
            state,
            config,
            epoch: state.latest_epoch,
            schemas: HashMap::new(),
            versions: HashMap::new(),
            receipts: HashSet::new(),
        }
    }

    fn schema(&self, table: &str) -> Option<&TableSchema> {
        self.schemas.get(table).or_else(|| self.state.schemas.get(table))
    }

    /// True when `op` carries an idempotency key a job of this group staged.
    fn in_flight(&self, op: &WriteOp) -> bool {
        let draft = match op {
            WriteOp::Put { receipt, .. } | WriteOp::Delete { receipt, .. } => receipt.as_ref(),
            WriteOp::Receipt { receipt } => Some(receipt),
            WriteOp::Declare { .. } => None,
        };
        draft.is_some_and(|d| self.receipts.contains(&d.key))
    }

    fn check_receipt(&self, draft: &Option<ReceiptDraft>) -> Result<Option<Staged>> {
        let Some(draft) = draft else { return Ok(None) };
        let cutoff = now_ms().saturating_sub(self.config.receipt_retention_ms);
        match self.state.receipts.get(&draft.key) {
            Some(r) if r.created_ms >= cutoff && r.body_hash == draft.body_hash => Ok(Some(Staged::Replay(r.clone()))),
            Some(r) if r.created_ms >= cutoff => Err(Error::new(
                Code::IdempotencyKeyReused,
                "idempotency key was already used with a different request body",
            )),
            _ => Ok(None),
        }
    }

    /// The receipt a write stores. A write route's body has placeholders for
    /// what only the commit knows: `epoch`, and for GraphQL mutations
    /// `record_count` and `changed`; members the body has are filled in. A
    /// receipt on its own (`outcome` None) stores the response as it is.
    fn receipt(&mut self, draft: Option<ReceiptDraft>, outcome: Option<Outcome>) -> Option<Receipt> {
        let mut draft = draft?;
        if let (Some(obj), Some(o)) = (draft.body.as_object_mut(), outcome) {
            for (name, value) in [
                ("epoch", Value::from(o.epoch)),
                ("record_count", Value::from(o.count)),
                ("changed", Value::from(o.changed)),
            ] {
                if obj.contains_key(name) {
                    obj.insert(name.into(), value);
                }
            }
        }
        self.receipts.insert(draft.key.clone());
        Some(Receipt {
            key: draft.key,
            body_hash: draft.body_hash,
            status: draft.status,
            body: draft.body,
            created_ms: now_ms(),
        })
    }

    fn admit(&mut self, op: WriteOp) -> Result<Staged> {
        match op {
            WriteOp::Put { records, receipt } => {
                if let Some(s) = self.check_receipt(&receipt)? {
                    return Ok(s);
                }
                self.put(records, receipt)
            }
            WriteOp::Delete { table, tenant_id, id, receipt } => {
                if let Some(s) = self.check_receipt(&receipt)? {
                    return Ok(s);
                }
                names::check_table(&table)?;
                names::check_key("tenant_id", &tenant_id)?;
                names::check_key("id", &id)?;
                let key = key_string(&table, &tenant_id, &id);
                let exists = self.versions.contains_key(&key)
                    || self.state.visible_version(&table, &tenant_id, &id, self.state.latest_epoch).is_some();
                if !exists {
                    if receipt.is_none() {
                        return Ok(Staged::Noop(self.epoch));
                    }
                    let r = self.receipt(receipt, Some(Outcome { epoch: self.epoch, count: 0, changed: false }));
                    let commit = Commit {
                        epoch: self.epoch,
                        at_ms: now_ms(),
                        schemas: vec![],
                        rows: vec![],
                        receipt: r.clone(),
                    };
                    return Ok(staged(commit, 0, r));
                }
                let version_id = self.next_version(&key);
                self.epoch += 1;
                let rows = vec![WalRow { table, tenant_id, id, version_id, deleted: true, fields: Default::default() }];
                let r = self.receipt(receipt, Some(Outcome { epoch: self.epoch, count: 1, changed: true }));
                Ok(staged(
                    Commit { epoch: self.epoch, at_ms: now_ms(), schemas: vec![], rows, receipt: r.clone() },
                    1,
                    r,
                ))
            }
            WriteOp::Declare { table, columns } => {
                names::check_table(&table)?;
                let mut schema = self.schema(&table).cloned().unwrap_or_else(|| TableSchema::new(&table));
                let existed = self.schema(&table).is_some();
                let mut changed = !existed;
                for (name, column) in columns {
                    names::check_identifier("column", &name)?;
                    match schema.columns.get(&name) {
                        Some(existing) if *existing == column => {}
                        Some(existing) => bail!(
                            SchemaTypeMismatch,
                            "column {name:?} is already declared as {} (text={}, scalar={}); existing columns cannot be changed",
                            existing.ty.name(),
                            existing.text,
                            existing.scalar
                        ),
                        None => {
                            schema.columns.insert(name, column);
                            changed = true;
                        }
                    }
                }
                if !changed {
                    return Ok(Staged::Noop(self.epoch));
                }
                self.epoch += 1;
                self.schemas.insert(table, schema.clone());
                Ok(staged(
                    Commit { epoch: self.epoch, at_ms: now_ms(), schemas: vec![schema], rows: vec![], receipt: None },
                    0,
                    None,
                ))
            }
            WriteOp::Receipt { receipt } => {
                if let Some(s) = self.check_receipt(&Some(receipt.clone()))? {
                    return Ok(s);
                }
                let r = self.receipt(Some(receipt), None);
                Ok(staged(
                    Commit { epoch: self.epoch, at_ms: now_ms(), schemas: vec![], rows: vec![], receipt: r.clone() },
                    0,
                    r,
                ))
            }
        }
    }

    fn next_version(&mut self, key: &str) -> u32 {
        let next = match self.versions.get(key) {
            Some(v) => v + 1,
            None => self.state.last_version_id(key) + 1,
        };
        self.versions.insert(key.to_string(), next);
        next
    }

    fn put(&mut self, records: Vec<RecordInput>, receipt: Option<ReceiptDraft>) -> Result<Staged> {
        if records.is_empty() {
            bail!(BatchEmpty, "a write needs at least one record");
        }
        if records.len() > self.config.max_batch {
            bail!(BatchTooLarge, "{} records exceed the batch limit of {}", records.len(), self.config.max_batch);
        }
        // validate everything before staging anything, so a bad record leaves
        // the stage untouched
        let mut schemas: HashMap<String, TableSchema> = HashMap::new();
        for (i, record) in records.iter().enumerate() {
            record.validate_names().map_err(|e| e.at_index(i))?;
            let schema = match schemas.get_mut(&record.table) {
                Some(s) => s,
                None => {
                    let base = self.schema(&record.table).cloned();
                    let s = base.unwrap_or_else(|| TableSchema::new(&record.table));
                    schemas.entry(record.table.clone()).or_insert(s)
                }
            };
            schema.admit(&record.fields, self.config.max_vector_dim).map_err(|e| e.at_index(i))?;
        }
        let changed: Vec<TableSchema> = schemas.into_values().filter(|s| self.schema(&s.name) != Some(s)).collect();
        for s in &changed {
            self.schemas.insert(s.name.clone(), s.clone());
        }
        self.epoch += 1;
        let count = records.len();
        let rows = records
            .into_iter()
            .map(|r| {
                let version_id = self.next_version(&key_string(&r.table, &r.tenant_id, &r.id));
                WalRow {
                    table: r.table,
                    tenant_id: r.tenant_id,
                    id: r.id,
                    version_id,
                    deleted: false,
                    fields: r.fields,
                }
            })
            .collect();
        let r = self.receipt(receipt, Some(Outcome { epoch: self.epoch, count, changed: true }));
        Ok(staged(Commit { epoch: self.epoch, at_ms: now_ms(), schemas: changed, rows, receipt: r.clone() }, count, r))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// When a file was last written, in unix ms (now when unknown).
fn written_ms(path: &Path) -> u64 {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let since_epoch = modified.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    since_epoch.map_or_else(now_ms, |d| d.as_millis() as u64)
}

/// Takes a checkpoint and records it (or its failure) in the branch's
/// counters and events.
fn take_checkpoint(
    log: &mut Log,
    state: &RwLock<State>,
    shared: &Shared,
    export: Option<&Path>,
    trigger: CheckpointTrigger,
) -> Result<CheckpointInfo> {
    let started = Instant::now();
    let taken = log.checkpoint(state, export);
    match &taken {
        Ok(info) => {
            shared.stats.record_checkpoint(now_ms(), info.bytes, started.elapsed(), log.wal.end());
            shared.events.push(Event::Checkpoint {
                trigger,
                generation: info.gen,
                epoch: info.epoch,
                bytes: info.bytes,
                duration_ms: info.duration_ms,
            });
        }
        Err(err) => {
            shared.stats.checkpoint_failures.fetch_add(1, Ordering::Relaxed);
            shared.events.push(Event::CheckpointFailed { trigger, error: err.message.clone() });
        }
    }
    taken
}

/// The committer's WAL segment and what it needs to take checkpoints.
struct Log {
    wal: Wal,
    gen: u32,
    dir: PathBuf,
    last_checkpoint: Instant,
}

impl Log {
    fn due(&self, config: &BranchConfig) -> bool {
        let written = self.wal.end() > wal::HEADER_LEN;
        written
            && (self.wal.end() >= config.checkpoint_wal_bytes
                || self.last_checkpoint.elapsed() >= config.checkpoint_interval)
    }

    /// Takes a checkpoint starting generation `self.gen + 1` (see
    /// storage/checkpoint.rs for the steps and why each crash point is safe).
    /// Nothing in memory changes until the image is durable, so a failure
    /// leaves the branch as it was, still writing to the current segment.
    fn checkpoint(&mut self, state: &RwLock<State>, export: Option<&Path>) -> Result<CheckpointInfo> {
        let started = Instant::now();
        let next = self.gen + 1;
        let (record_file, sealed_gen) = {
            let mut st = state.write();
            st.records.flush()?;
            (st.records.open_file(), st.records.open_gen())
        };
        crate::faults::check("checkpoint::records")?;
        record_file.sync_all()?;
        let sealed = checkpoint::write_vectors(&self.dir, sealed_gen, &state.read())?;
        let new_path = self.dir.join(checkpoint::wal_name(next));
        let (new_wal, _) = Wal::open(&new_path)?;
        let written = (|| {
            let (image, epoch) = {
                let st = state.read();
                (checkpoint::capture(&st, next, &sealed)?, st.latest_epoch)
            };
            checkpoint::write(&self.dir, next, &image)?;
            Ok::<_, Error>((image.len() as u64, epoch))
        })();
        let (bytes, epoch) = match written {
            Ok(w) => w,
            Err(e) => {
                drop(new_wal);
                let _ = std::fs::remove_file(&new_path);
                return Err(e);
            }
        };
        // durable: switch to the new generation
        {
            let mut st = state.write();
            st.records.start_next(next)?;
            checkpoint::install_vectors(&mut st, &sealed)?;
            st.wal_end = new_wal.end();
        }
        self.wal = new_wal;
        self.gen = next;
        self.last_checkpoint = Instant::now();
        let exported = match export {
            Some(to) => {
                let st = state.read();
                let files = checkpoint::files(&self.dir, next, &st);
                drop(st);
                wal::link_or_copy(&files, to)?;
                files
            }
            None => Vec::new(),
        };
        // the image covers every older segment and image
        let _ = checkpoint::remove_covered(&self.dir, next);
        Ok(CheckpointInfo { gen: next, epoch, bytes, duration_ms: ms(started.elapsed()), exported })
    }
}

fn run_committer(
    mut log: Log,
    rx: mpsc::Receiver<Request>,
    state: Arc<RwLock<State>>,
    shared: Arc<Shared>,
    config: BranchConfig,
) {
    let mut deferred: VecDeque<Job> = VecDeque::new();
    let mut checkpoints: Vec<CheckpointJob> = Vec::new();
    // after a failed checkpoint, wait before trying again
    let mut retry_at = Instant::now();
    loop {
        if shared.failed.load(Ordering::Acquire) {
            for job in checkpoints.drain(..) {
                let _ = job.reply.send(Err(Error::new(Code::StorageFailure, "branch storage failed earlier")));
            }
        }
        for job in checkpoints.drain(..) {
            let trigger = if job.export.is_some() { CheckpointTrigger::Snapshot } else { CheckpointTrigger::Request };
            let done = take_checkpoint(&mut log, &state, &shared, job.export.as_deref(), trigger);
            if done.is_err() {
                retry_at = Instant::now() + Duration::from_secs(1);
            }
            let _ = job.reply.send(done);
        }
        let due = log.due(&config) && Instant::now() >= retry_at && !shared.failed.load(Ordering::Acquire);
        if due {
            let trigger = match log.wal.end() >= config.checkpoint_wal_bytes {
                true => CheckpointTrigger::WalBytes,
                false => CheckpointTrigger::Interval,
            };
            if take_checkpoint(&mut log, &state, &shared, None, trigger).is_err() {
                retry_at = Instant::now() + Duration::from_secs(5);
            }
        }
        let first = match deferred.pop_front() {
            Some(job) => job,
            None => match rx
                .recv_timeout(config.checkpoint_interval.clamp(Duration::from_millis(10), Duration::from_secs(1)))
            {
                Ok(Request::Write(job)) => job,
                Ok(Request::Checkpoint(job)) => {
                    checkpoints.push(job);
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
        };
        let mut jobs = vec![first];
        while jobs.len() < config.group_commit_max {
            if let Some(job) = deferred.pop_front() {
                jobs.push(job);
                continue;
            }
            match rx.try_recv() {
                Ok(Request::Write(job)) => jobs.push(job),
                Ok(Request::Checkpoint(job)) => {
                    // taken right after this group
                    checkpoints.push(job);
                    break;
                }
                Err(_) => break,
            }
        }
        commit_group(&mut log.wal, jobs, &mut deferred, &state, &shared, &config);
    }
    // a clean close checkpoints, so the next start replays nothing
    if config.checkpoint_on_close && !shared.failed.load(Ordering::Acquire) && log.wal.end() > wal::HEADER_LEN {
        let _ = take_checkpoint(&mut log, &state, &shared, None, CheckpointTrigger::Close);
    }
}

/// Validates, logs (one fsync), applies and answers one group of writes.
fn commit_group(
    wal: &mut Wal,
    jobs: Vec<Job>,
    deferred: &mut VecDeque<Job>,
    state: &RwLock<State>,
    shared: &Shared,
    config: &BranchConfig,
) {
    if shared.failed.load(Ordering::Acquire) {
        for job in jobs {
            let _ = job
                .reply
                .send(Err(Error::new(Code::StorageFailure, "branch storage failed earlier; restart to recover")));
        }
        return;
    }
    let mut pending: Vec<(Job, Commit, usize, Option<Receipt>, WriteTiming)> = Vec::new();
    {
        let st = state.read();
        let mut stage = Stage::new(&st, config);
        for job in jobs {
            let started = Instant::now();
            let queue_ms = ms(started - job.enqueued);
            if stage.in_flight(&job.op) {
                // the same key is staged in this group: answer it from the
                // receipt once that write is applied
                deferred.push_back(job);
                continue;
            }
            let Job { op, enqueued, reply } = job;
            let job = Job { op: WriteOp::Receipt { receipt: ReceiptDraft::empty() }, enqueued, reply };
            let staged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stage.admit(op)))
                .unwrap_or_else(|_| Err(Error::new(Code::InternalPanic, "panic while validating a write")));
            let timing = WriteTiming { queue_ms, validate_ms: ms(started.elapsed()), ..Default::default() };
            match staged {
                Ok(Staged::Commit(commit, count, receipt)) => pending.push((job, *commit, count, receipt, timing)),
                Ok(Staged::Replay(receipt)) => {
                    let _ = job.reply.send(Ok(WriteResult::Replayed(receipt)));
                }
                Ok(Staged::Noop(epoch)) => {
                    let outcome = WriteOutcome { epoch, record_count: 0, changed: false, timing, receipt: None };
                    let _ = job.reply.send(Ok(WriteResult::Committed(outcome)));
                }
                Err(err) => {
                    let _ = job.reply.send(Err(err));
                }
            }
        }
    }
    if pending.is_empty() {
        return;
    }
    let mut frames = Vec::new();
    let mut ends = Vec::with_capacity(pending.len());
    let durable_end = wal.end();
    let mut base = durable_end;
    for (_, commit, _, _, timing) in pending.iter_mut() {
        let started = Instant::now();
        let payload = serde_json::to_vec(commit).expect("commits serialise");
        let before = frames.len();
        wal.encode(&payload, &mut frames);
        base += (frames.len() - before) as u64;
        ends.push(base);
        timing.encode_ms = ms(started.elapsed());
    }
    let fsync_started = Instant::now();
    // the write timing covers append and fsync; the histogram the fsync alone
    let mut sync_took = Duration::ZERO;
    let durable = wal.append(&frames).and_then(|_| {
        let sync_started = Instant::now();
        let synced = wal.sync();
        sync_took = sync_started.elapsed();
        synced
    });
    let fsync_ms = ms(fsync_started.elapsed());
    if let Err(err) = durable {
        // PostgreSQL's lesson: after a failed write or fsync nothing about
        // the file's tail can be trusted
        let what = format!("the write-ahead log could not be made durable ({})", err.message);
        return refuse_group(wal, durable_end, pending, shared, FaultStage::Wal, err, what);
    }
    shared.stats.record_group(wal.end() - durable_end, wal.end(), sync_took, pending.len());
    let apply_started = Instant::now();
    let applied = {
        let mut st = state.write();
        let known_keys = st.keys.len();
        let commits: Vec<&Commit> = pending.iter().map(|(_, commit, ..)| commit).collect();
        let applied = st.write_records(&commits).map(|locs| {
            for ((commit, end), locs) in commits.iter().zip(&ends).zip(&locs) {
                st.apply_written(commit, *end, locs);
            }
        });
        shared.stats.add_keys(&st.keys[known_keys..]);
        applied
    };
    if let Err(err) = applied {
        // the record file could not take the group's fields, so none of it
        // was applied: refused like a failed fsync
        let what = format!("the record file could not take the write ({})", err.message);
        return refuse_group(wal, durable_end, pending, shared, FaultStage::Apply, err, what);
    }
    let apply_ms = ms(apply_started.elapsed());
    *shared.wake.lock() = true;
    shared.wake_cv.notify_one();
    let group_size = pending.len() as f64;
    for (job, commit, count, receipt, mut timing) in pending {
        timing.wal_fsync_ms = fsync_ms;
        timing.apply_ms = apply_ms;
        timing.group_size = group_size;
        let outcome = WriteOutcome { epoch: commit.epoch, record_count: count, changed: true, timing, receipt };
        let _ = job.reply.send(Ok(WriteResult::Committed(outcome)));
    }
}

/// Refuses a whole group after a storage failure: none of it is
/// acknowledged or applied; its frames are cut from the log so a restart
/// cannot bring back a write that was never acknowledged; and the branch
/// refuses writes until a restart re-reads the log.
fn refuse_group(
    wal: &mut Wal,
    durable_end: u64,
    pending: Vec<(Job, Commit, usize, Option<Receipt>, WriteTiming)>,
    shared: &Shared,
    stage: FaultStage,
    err: Error,
    what: String,
) {
    shared.failed.store(true, Ordering::Release);
    shared.events.push(Event::StorageFailed { stage, error: err.message.clone() });
    let cut = match wal.rollback(durable_end) {
        Ok(()) => "its frames were cut from the log".to_string(),
        Err(e) => format!("cutting its frames from the log failed too ({})", e.message),
    };
    shared.stats.wal_segment_bytes.store(wal.end(), Ordering::Relaxed);
    let err = Error::new(
        Code::StorageFailure,
        format!("{what}; the write was not applied and {cut}; the branch refuses writes until the engine restarts"),
    );
    for (job, ..) in pending {
        let _ = job.reply.send(Err(err.clone()));
    }
}

/// Work for one indexer round, copied out of the state under a read lock.
struct IndexBatch {
    upto: u32,
    text: Vec<TextFeature>,
    /// Graphs with rows below `upto` to link, by dump name (their vectors
    /// are read from the column's arena, not copied).
    vectors: Vec<(String, Arc<VectorIndex>)>,
    /// Rows whose fields could not be read from the record files.
    unreadable: u64,
}

/// One (row, text column) document for the text index.
struct TextFeature {
    row: u32,
    table: Arc<str>,
    tenant: Arc<str>,
    column: String,
    text: String,
}

const INDEX_ROUND_ROWS: u32 = 4096;

fn collect_batch(state: &State, from_text: u32, from_vec: u32) -> IndexBatch {
    let total = state.rows.len() as u32;
    let start = from_text.min(from_vec);
    let upto = total.min(start.saturating_add(INDEX_ROUND_ROWS));
    let mut text = Vec::new();
    let mut unreadable = 0;
    let vectors = state
        .tables
        .iter()
        .flat_map(|(table, t)| t.vectors.iter().map(move |(column, vc)| (graph_name(table, column), vc)))
        .filter(|(_, vc)| vc.index.watermark() < upto && from_vec < upto)
        .map(|(name, vc)| (name, vc.index.clone()))
        .collect();
    for row_id in start..upto {
        let row = &state.rows[row_id as usize];
        if row.deleted {
            continue;
        }
        let key = &state.keys[row.key as usize];
        let Some(schema) = state.schemas.get(&*key.table) else { continue };
        if row_id >= from_text {
            let columns: Vec<String> = schema.text_columns().map(str::to_string).collect();
            let fields = match columns.is_empty() {
                true => Default::default(),
                false => state.fields(row_id, Some(&columns)).unwrap_or_else(|_| {
                    unreadable += 1;
                    Default::default()
                }),
            };
            for col in columns {
                if let Some(Value::String(s)) = fields.get(&col) {
                    text.push(TextFeature {
                        row: row_id,
                        table: key.table.clone(),
                        tenant: key.tenant.clone(),
                        column: col.clone(),
                        text: s.clone(),
                    });
                }
            }
        }
    }
    IndexBatch { upto, text, vectors, unreadable }
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

/// Drops receipts past their retention from memory (the log keeps them
/// until retention removes versions; a restart skips expired ones).
fn expire_receipts(state: &RwLock<State>, retention_ms: u64) {
    let cutoff = now_ms().saturating_sub(retention_ms);
    if state.read().receipts.values().any(|r| r.created_ms < cutoff) {
        state.write().receipts.retain(|_, r| r.created_ms >= cutoff);
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
    let interval = config.text_commit_interval;
    let sweep_every = Duration::from_millis(config.receipt_retention_ms.clamp(100, 60_000));
    let mut last_sweep = Instant::now();
    let mut last_commit = Instant::now();
    let mut backlog = Backlog::default();
    loop {
        fail::fail_point!("indexer::round");
        let failed_before = shared.failed_features.load(Ordering::Relaxed);
        if last_sweep.elapsed() >= sweep_every {
            expire_receipts(&state, config.receipt_retention_ms);
            last_sweep = Instant::now();
        }
        let stopping = shared.stop.load(Ordering::Acquire);
        let from_text = text.pending_upto();
        let from_vec = shared.vector_watermark.load(Ordering::Acquire);
        let total = state.read().rows.len() as u32;
        backlog.note(total.saturating_sub(text.watermark().min(from_vec)), &shared.events);
        // None: nothing was attempted this round; Some(true): something failed
        let mut round_failed: Option<bool> = None;
        if from_text < total || from_vec < total {
            let batch = collect_batch(&state.read(), from_text, from_vec);
            let mut failed = batch.unreadable;
            for (_, index) in &batch.vectors {
                // a row the graph fails on (a panic while linking it) is
                // counted in failed_feature_count; the others go in
                failed += index.insert_below_row(batch.upto);
            }
            for vc in state.read().tables.values().flat_map(|t| t.vectors.values()) {
                vc.index.set_watermark(batch.upto);
            }
            for (name, index) in &batch.vectors {
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
            shared.vector_watermark.store(batch.upto.max(from_vec), Ordering::Release);
            for f in &batch.text {
                if text.add(f.row, &f.table, &f.tenant, &f.column, &f.text).is_err() {
                    // the row stays searchable through the hot overlay only
                    failed += 1;
                }
            }
            text.mark_pending(batch.upto.max(from_text));
            shared.failed_features.fetch_add(failed, Ordering::Relaxed);
            round_failed = Some(failed > 0);
        }
        let lagging = text.pending_upto() > text.watermark();
        let mut text_commit_failed = false;
        if lagging && (stopping || last_commit.elapsed() >= interval) {
            // a failed commit keeps its documents in the writer for the next
            // one; failing again and again shows in readiness
            let committed = text.commit().is_ok();
            text_commit_failed = !committed;
            round_failed = Some(round_failed.unwrap_or(false) || !committed);
            last_commit = Instant::now();
            if stopping && !committed {
                break;
            }
        }
        match round_failed {
            Some(true) => _ = shared.failing_rounds.fetch_add(1, Ordering::Relaxed),
            Some(false) => shared.failing_rounds.store(0, Ordering::Relaxed),
            None => {}
        }
        if round_failed == Some(true) {
            let failed_features_total = shared.failed_features.load(Ordering::Relaxed);
            shared.events.push(Event::IndexRoundFailed {
                failed_features: failed_features_total - failed_before,
                text_commit_failed,
                failed_features_total,
            });
        }
        let indexed = text.watermark().min(shared.vector_watermark.load(Ordering::Acquire));
        backlog.note((state.read().rows.len() as u32).saturating_sub(indexed), &shared.events);
        if stopping {
            let total = state.read().rows.len() as u32;
            if text.pending_upto() >= total && text.watermark() >= text.pending_upto() {
                break;
            }
            continue;
        }
        let caught_up = text.pending_upto() >= state.read().rows.len() as u32;
        let mut woken = shared.wake.lock();
        if !*woken && caught_up {
            let wait = if lagging { interval.saturating_sub(last_commit.elapsed()) } else { Duration::from_secs(1) };
            shared.wake_cv.wait_for(&mut woken, wait.max(Duration::from_millis(1)));
        }
        *woken = false;
    }
}
