//! The committer: one thread per branch that owns the branch's open WAL
//! segment, group-commits writes and takes checkpoints.
//!
//! Group commit: writers hand jobs to one committer thread. It takes every
//! job waiting, validates them in order against the state plus what earlier
//! jobs of the same group staged (storage/admission.rs), appends one frame
//! per write request (one epoch each), calls `fdatasync` once for the group,
//! applies the commits to memory and only then answers each writer. A job
//! that fails validation writes nothing and does not disturb the others.
//!
//! How it talks to the others: `Branch::write` and `Branch::checkpoint`
//! (storage/branch.rs) send a `Request` down the branch's mpsc channel, each
//! with a reply: a write's is a `Reply` (a channel its caller blocks on, or
//! the binding's promise), a checkpoint's a channel; the branch dropping
//! its sender on close ends the loop (after a last checkpoint). Applying a
//! group and switching generations at a checkpoint take the `State`'s write
//! lock; after each applied group the committer wakes the indexer
//! (storage/indexer.rs) through the branch's `Shared`. A storage failure
//! sets `Shared::failed`, after which every write is refused until a
//! restart. It counts what it does in the branch's `BranchStats`
//! (storage/stats.rs: WAL bytes, fsyncs, group sizes, checkpoints) and
//! records what an operator should read in its event queue
//! (storage/events.rs).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use crate::error::{Code, Error, Result};
use crate::index::text::TextIndex;
use crate::storage::admission::{Stage, Staged};
use crate::storage::checkpoint;
use crate::storage::commit::{now_ms, Commit, EncodedRows, Receipt, ReceiptDraft};
use crate::storage::events::{CheckpointPhases, CheckpointTrigger, Event, FaultStage};
use crate::storage::pipeline::{
    ms, BranchConfig, CheckpointInfo, Reply, Shared, WriteOp, WriteOutcome, WriteResult, WriteTiming,
};
use crate::storage::retention;
use crate::storage::state::State;
use crate::storage::wal::{self, Wal};

/// One write request waiting for the committer.
pub(super) struct Job {
    pub(super) op: WriteOp,
    pub(super) enqueued: Instant,
    pub(super) reply: Reply,
}

pub(super) struct CheckpointJob {
    /// A directory to hard-link (or copy) the checkpoint's files into, for
    /// a snapshot; done before the committer takes the next write.
    pub(super) export: Option<PathBuf>,
    pub(super) reply: mpsc::SyncSender<Result<CheckpointInfo>>,
}

/// What the branch sends the committer.
pub(super) enum Request {
    Write(Job),
    Checkpoint(CheckpointJob),
}

/// Starts the committer thread on the open WAL segment of generation `gen`.
#[allow(clippy::too_many_arguments)]
pub(super) fn spawn(
    wal: Wal,
    gen: u32,
    dir: &Path,
    rx: mpsc::Receiver<Request>,
    state: Arc<RwLock<State>>,
    shared: Arc<Shared>,
    text: Arc<TextIndex>,
    config: BranchConfig,
    rows: u64,
) -> std::io::Result<JoinHandle<()>> {
    let log = Log {
        wal,
        gen,
        dir: dir.to_path_buf(),
        last_checkpoint: Instant::now(),
        rows,
        text,
        history_epochs: config.history_epochs,
        retired: Vec::new(),
        removed: Vec::new(),
        removed_below: 0,
        cleaning: None,
        vectors: None,
    };
    std::thread::Builder::new().name("braid-commit".into()).spawn(move || run_committer(log, rx, state, shared, config))
}

impl Log {
    /// Removes the versions below the horizon `history_epochs` gives
    /// (storage/retention.rs). A failure to compact is reported and leaves
    /// the files as they were; the checkpoint goes on.
    fn retain(&mut self, state: &RwLock<State>, shared: &Shared, history_epochs: u64) {
        let started = Instant::now();
        let horizon = state.read().latest_epoch.saturating_sub(history_epochs);
        match retention::run(state, &self.text, horizon) {
            Ok(mut done) => {
                if done.versions == 0 && done.files_compacted == 0 {
                    return;
                }
                shared.stats.record_retention(
                    done.versions,
                    done.removed.len() as u64,
                    done.files_compacted,
                    done.bytes_reclaimed,
                );
                shared.events.push(Event::Retention {
                    horizon,
                    versions: done.versions,
                    files_compacted: done.files_compacted,
                    bytes_reclaimed: done.bytes_reclaimed,
                    duration_ms: ms(started.elapsed()),
                });
                self.retired.append(&mut done.retired);
                self.removed.append(&mut done.removed);
                self.removed_below = horizon;
                if done.versions > 0 {
                    shared.vectors_compaction_due.store(true, Ordering::Release);
                    shared.wake_indexer();
                }
            }
            Err(err) => {
                shared.stats.retention_failures.fetch_add(1, Ordering::Relaxed);
                shared.events.push(Event::RetentionFailed { error: err.message.clone() });
            }
        }
    }
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
    let taken = log.checkpoint(state, shared, export);
    if !matches!(trigger, CheckpointTrigger::WalBytes | CheckpointTrigger::WalRows | CheckpointTrigger::Interval) {
        // one asked for (a request, a snapshot, the close) ends with the
        // files it covers gone, as its caller may list the directory next
        log.finish_cleanup();
    }
    match &taken {
        Ok(info) => {
            shared.stats.record_checkpoint(now_ms(), info.bytes, started.elapsed(), log.wal.end());
            shared.events.push(Event::Checkpoint {
                trigger,
                generation: info.gen,
                epoch: info.epoch,
                bytes: info.bytes,
                duration_ms: info.duration_ms,
                phases: info.phases,
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
    /// Record versions in the open segment (what a start would replay).
    rows: u64,
    /// For retention: its deletes, and which rows it has been handed.
    text: Arc<TextIndex>,
    history_epochs: Option<u64>,
    /// Record files retention compacted away: deleted once a checkpoint that
    /// no longer names them is durable.
    retired: Vec<PathBuf>,
    /// Rows retention removed and the horizon: their text documents are
    /// deleted once a checkpoint holding the removal is durable.
    removed: Vec<u32>,
    removed_below: u64,
    /// Deleting the WAL segment and image the last checkpoint covers, on a
    /// thread of its own ([`Log::remove_covered`]).
    cleaning: Option<std::thread::JoinHandle<()>>,
    /// The vector file of the open generation, from its first flush until
    /// the checkpoint that ends the generation is durable.
    vectors: Option<checkpoint::VectorFile>,
}

impl Log {
    /// Deletes the WAL segments and images checkpoint `gen` covers, on a
    /// thread of its own: unlinking a 64 MiB segment took 56-71 ms, which
    /// the committer spent with writes waiting. Anything left by a crash
    /// meanwhile is deleted at the next start (`checkpoint::remove_stale`).
    fn remove_covered(&mut self, gen: u32) {
        self.finish_cleanup();
        let dir = self.dir.clone();
        let cleaning = std::thread::Builder::new().name("braid-cleanup".into()).spawn(move || {
            let _ = checkpoint::remove_covered(&dir, gen);
        });
        match cleaning {
            Ok(handle) => self.cleaning = Some(handle),
            Err(_) => {
                let _ = checkpoint::remove_covered(&self.dir, gen);
            }
        }
    }

    /// Waits for the last checkpoint's deletions.
    fn finish_cleanup(&mut self) {
        if let Some(handle) = self.cleaning.take() {
            let _ = handle.join();
        }
    }

    /// Seals the vectors written since the last checkpoint or flush to the
    /// open generation's vector file once they reach `vector_flush_bytes`
    /// (`checkpoint::flush_vectors`): from then on they are read from the
    /// file, and the process's own copies are freed. True when it flushed.
    fn flush_vectors_if_due(&mut self, state: &RwLock<State>, shared: &Shared, config: &BranchConfig) -> Result<bool> {
        if checkpoint::unsealed_bytes(&state.read()) < config.vector_flush_bytes {
            return Ok(false);
        }
        // no vector column is rebuilt while this runs, as for a checkpoint
        let _columns_held = shared.checkpointing.lock();
        let gen = state.read().records.open_gen();
        let sealed = checkpoint::flush_vectors(&self.dir, gen, &mut self.vectors, state)?;
        checkpoint::install_vectors(&mut state.write(), &sealed)?;
        Ok(true)
    }

    fn due(&self, config: &BranchConfig) -> bool {
        let written = self.wal.end() > wal::HEADER_LEN;
        written
            && (self.wal.end() >= config.checkpoint_wal_bytes
                || self.rows >= config.checkpoint_rows
                || self.last_checkpoint.elapsed() >= config.checkpoint_interval)
    }

    /// Takes a checkpoint starting generation `self.gen + 1` (see
    /// storage/checkpoint.rs for the steps and why each crash point is safe).
    /// Nothing in memory changes until the image is durable, so a failure
    /// leaves the branch as it was, still writing to the current segment.
    fn checkpoint(&mut self, state: &RwLock<State>, shared: &Shared, export: Option<&Path>) -> Result<CheckpointInfo> {
        let started = Instant::now();
        let mut phases = CheckpointPhases::default();
        let mut phase = Instant::now();
        let mut lap = |into: &mut f64| {
            *into = ms(phase.elapsed());
            phase = Instant::now();
        };
        let next = self.gen + 1;
        // no vector column is rebuilt while this runs (pipeline.rs)
        let _columns_held = shared.checkpointing.lock();
        if let Some(n) = self.history_epochs {
            self.retain(state, shared, n);
        }
        lap(&mut phases.retention_ms);
        let (record_file, sealed_gen) = {
            let mut st = state.write();
            st.records.flush()?;
            st.records.stamp_length()?;
            (st.records.open_file(), st.records.open_gen())
        };
        crate::faults::check("checkpoint::records")?;
        record_file.sync_all()?;
        lap(&mut phases.records_sync_ms);
        let sealed = checkpoint::write_vectors(&self.dir, sealed_gen, &mut self.vectors, state)?;
        lap(&mut phases.vectors_ms);
        let new_path = self.dir.join(checkpoint::wal_name(next));
        let (new_wal, _) = Wal::open(&new_path)?;
        let written = (|| {
            let (image, epoch) = {
                let st = state.read();
                (checkpoint::capture(&self.dir, &st, next, &sealed)?, st.latest_epoch)
            };
            let bytes = image.bytes();
            lap(&mut phases.image_ms);
            checkpoint::commit(image)?;
            lap(&mut phases.image_sync_ms);
            Ok::<_, Error>((bytes, epoch))
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
        lap(&mut phases.switch_ms);
        self.vectors = None;
        self.wal = new_wal;
        self.gen = next;
        self.last_checkpoint = Instant::now();
        self.rows = 0;
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
        // the image covers every older segment and image, and names none of
        // the record files retention compacted away
        self.remove_covered(next);
        self.retired.retain(|path| std::fs::remove_file(path).is_err() && path.exists());
        if self.history_epochs.is_some() {
            // vector files no column reads since retention rebuilt it
            let _ = checkpoint::remove_unnamed(&self.dir, &state.read());
        }
        if !self.removed.is_empty() {
            // a closed index keeps the documents; no query is offered them,
            // and the next start deletes them
            let _ = self.text.delete_rows(&self.removed, self.removed_below);
            self.removed = Vec::new();
        }
        lap(&mut phases.cleanup_ms);
        // what retention removed, and what the writes since the last
        // checkpoint freed on threads that are idle now
        crate::memory::release_freed();
        lap(&mut phases.release_ms);
        Ok(CheckpointInfo { gen: next, epoch, bytes, duration_ms: ms(started.elapsed()), phases, exported })
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
        // a panic (a bug) must not end the thread: writes would then be
        // refused as if the branch were closing, forever. What the panicked
        // step did is unknown (its frames may be durable, its rows half
        // applied), so the branch refuses writes, as after a failed fsync,
        // until a restart replays the log; reads go on.
        let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            committer_step(&mut log, &rx, &state, &shared, &config, &mut deferred, &mut checkpoints, &mut retry_at)
        }));
        match step {
            Ok(Step::Go) => {}
            Ok(Step::Stop) => break,
            Err(_) => {
                shared.failed.store(true, Ordering::Release);
                shared.events.push(Event::StorageFailed {
                    stage: FaultStage::Panic,
                    error: "the committer panicked; the branch refuses writes until the engine restarts".into(),
                });
            }
        }
    }
    // a clean close checkpoints, so the next start replays nothing
    if config.checkpoint_on_close && log.wal.end() > wal::HEADER_LEN {
        if shared.failed.load(Ordering::Acquire) {
            // the log cannot be trusted past what it last made durable, so
            // no image is taken from it; said, as a close that did not do
            // its work (a black-box review saw it skipped without a word)
            shared.events.push(Event::CheckpointFailed {
                trigger: CheckpointTrigger::Close,
                error: "the branch's storage failed earlier (storage_failed): the close takes no checkpoint, and the next start replays the WAL".into(),
            });
        } else {
            let _ = take_checkpoint(&mut log, &state, &shared, None, CheckpointTrigger::Close);
        }
    }
    log.finish_cleanup();
}

/// What the committer loop does after a step.
enum Step {
    Go,
    Stop,
}

/// One turn of the committer: the checkpoints asked for or due, then one
/// group of writes (or a wait for one).
#[allow(clippy::too_many_arguments)]
fn committer_step(
    log: &mut Log,
    rx: &mpsc::Receiver<Request>,
    state: &RwLock<State>,
    shared: &Shared,
    config: &BranchConfig,
    deferred: &mut VecDeque<Job>,
    checkpoints: &mut Vec<CheckpointJob>,
    retry_at: &mut Instant,
) -> Step {
    if shared.failed.load(Ordering::Acquire) {
        for job in checkpoints.drain(..) {
            let _ = job.reply.send(Err(Error::new(Code::StorageFailure, "branch storage failed earlier")));
        }
    }
    for job in checkpoints.drain(..) {
        let trigger = if job.export.is_some() { CheckpointTrigger::Snapshot } else { CheckpointTrigger::Request };
        let done = take_checkpoint(log, state, shared, job.export.as_deref(), trigger);
        if done.is_err() {
            *retry_at = Instant::now() + Duration::from_secs(1);
        }
        let _ = job.reply.send(done);
    }
    let due = log.due(config) && Instant::now() >= *retry_at && !shared.failed.load(Ordering::Acquire);
    if due {
        let trigger = if log.wal.end() >= config.checkpoint_wal_bytes {
            CheckpointTrigger::WalBytes
        } else if log.rows >= config.checkpoint_rows {
            CheckpointTrigger::WalRows
        } else {
            CheckpointTrigger::Interval
        };
        if take_checkpoint(log, state, shared, None, trigger).is_err() {
            *retry_at = Instant::now() + Duration::from_secs(5);
        }
    } else if Instant::now() >= *retry_at && !shared.failed.load(Ordering::Acquire) {
        // a failed flush loses nothing (the log holds the vectors): tried again later
        if log.flush_vectors_if_due(state, shared, config).is_err() {
            *retry_at = Instant::now() + Duration::from_secs(5);
        }
    }
    let first = match deferred.pop_front() {
        Some(job) => job,
        None => {
            match rx.recv_timeout(config.checkpoint_interval.clamp(Duration::from_millis(10), Duration::from_secs(1))) {
                Ok(Request::Write(job)) => job,
                Ok(Request::Checkpoint(job)) => {
                    checkpoints.push(job);
                    return Step::Go;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return Step::Go,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Step::Stop,
            }
        }
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
    log.rows += commit_group(&mut log.wal, jobs, deferred, state, shared, config);
    Step::Go
}

/// Validates, logs (one fsync), applies and answers one group of writes;
/// returns the record versions it logged.
fn commit_group(
    wal: &mut Wal,
    jobs: Vec<Job>,
    deferred: &mut VecDeque<Job>,
    state: &RwLock<State>,
    shared: &Shared,
    config: &BranchConfig,
) -> u64 {
    if shared.failed.load(Ordering::Acquire) {
        for job in jobs {
            job.reply.send(Err(Error::new(Code::StorageFailure, "branch storage failed earlier; restart to recover")));
        }
        return 0;
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
                    job.reply.send(Ok(WriteResult::Replayed(receipt)));
                }
                Ok(Staged::Noop(epoch)) => {
                    let outcome = WriteOutcome { epoch, record_count: 0, changed: false, timing, receipt: None };
                    job.reply.send(Ok(WriteResult::Committed(outcome)));
                }
                Err(err) => {
                    job.reply.send(Err(err));
                }
            }
        }
    }
    if pending.is_empty() {
        return 0;
    }
    let mut frames = Vec::new();
    let mut ends = Vec::with_capacity(pending.len());
    let durable_end = wal.end();
    let mut base = durable_end;
    // every commit's payload, kept for the record files, which take the
    // rows' field bytes from it
    let mut payloads = Vec::new();
    let mut spans = Vec::with_capacity(pending.len());
    for (_, commit, _, _, timing) in pending.iter_mut() {
        let started = Instant::now();
        let at = payloads.len();
        spans.push(commit.encode(&mut payloads));
        let before = frames.len();
        wal.encode(&payloads[at..], &mut frames);
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
        refuse_group(wal, durable_end, pending, shared, FaultStage::Wal, err, what);
        return 0;
    }
    shared.stats.record_group(wal.end() - durable_end, wal.end(), sync_took, pending.len());
    let apply_started = Instant::now();
    let applied = {
        let mut st = state.write();
        let commits: Vec<&Commit> = pending.iter().map(|(_, commit, ..)| commit).collect();
        let encoded: Vec<EncodedRows> = spans.iter().map(|spans| EncodedRows { bytes: &payloads, spans }).collect();
        st.write_records(&encoded).map(|locs| st.apply_group(&commits, &ends, &locs))
    };
    if let Err(err) = applied {
        // the record file could not take the group's fields, so none of it
        // was applied: refused like a failed fsync
        let what = format!("the record file could not take the write ({})", err.message);
        refuse_group(wal, durable_end, pending, shared, FaultStage::Apply, err, what);
        return 0;
    }
    let apply_ms = ms(apply_started.elapsed());
    shared.wake_indexer();
    let group_size = pending.len() as f64;
    let rows = pending.iter().map(|(_, commit, ..)| commit.rows.len() as u64).sum();
    for (job, commit, count, receipt, mut timing) in pending {
        timing.wal_fsync_ms = fsync_ms;
        timing.apply_ms = apply_ms;
        timing.group_size = group_size;
        // a keyed delete of a record that is not there commits its receipt
        // alone: it changed nothing, as the same delete without a key says
        let changed = !commit.rows.is_empty() || !commit.schemas.is_empty();
        let outcome = WriteOutcome { epoch: commit.epoch, record_count: count, changed, timing, receipt };
        job.reply.send(Ok(WriteResult::Committed(outcome)));
    }
    rows
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
        job.reply.send(Err(err.clone()));
    }
}
