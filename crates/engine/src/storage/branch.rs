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
//! They talk through what storage/pipeline.rs holds (below all three, so no
//! module imports back up): `Branch::write` and
//! `Branch::checkpoint` send requests down an mpsc channel to the committer
//! and block on a reply channel; the `State` sits behind an `RwLock` that
//! the committer writes and everyone reads; and `Shared` carries the flags,
//! watermarks, counters (storage/stats.rs) and events (storage/events.rs)
//! the threads and readers share.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use rayon::prelude::*;

use crate::bail;
use crate::error::{Code, Error, Result};
use crate::index::arena::VectorArena;
use crate::index::text::TextIndex;
use crate::index::vector::{ReadGraph, VectorIndex};
use crate::schema::Metric;
use crate::storage::checkpoint;
use crate::storage::commit::{now_ms, Commit, EncodedRows, FieldSpans};
use crate::storage::committer::{self, CheckpointJob, Job, Request};
use crate::storage::events::{Event, Recorded};
use crate::storage::indexer;
use crate::storage::records::{RecordFiles, RecordLoc};
use crate::storage::state::State;
use crate::storage::stats::BranchStats;
use crate::storage::wal::{self, Wal};

pub(crate) use crate::storage::pipeline::Shared;
use crate::storage::pipeline::{graph_name, ms};
pub use crate::storage::pipeline::{
    BranchConfig, CheckpointInfo, IndexerHealth, Reply, WriteOp, WriteOutcome, WriteResult, WriteTiming,
    INDEXER_FAILING_ROUNDS,
};

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

/// A graph read while the log's tail replays: its dump's name, the arena
/// it was read over, and the graph when the dump could be read.
type Preloaded = (String, Arc<VectorArena>, Option<ReadGraph>);

/// Reads the dumped graphs of the vector columns a checkpoint image holds on
/// a thread of its own, beside the replay of the log's tail, which adds the
/// vectors of the nodes a dump newer than the image links; they are checked
/// against the arena after it (at 1,000,000 records reading the graph took
/// 200 ms of a 950 ms open).
fn preload_vector_graphs(state: &State, dir: &Path) -> Option<JoinHandle<Vec<Preloaded>>> {
    let columns: Vec<(String, Metric, Arc<VectorArena>)> = state
        .tables
        .iter()
        .flat_map(|(table, data)| {
            data.vectors.iter().map(move |(column, vc)| (graph_name(table, column), vc.index.metric, vc.data.arena()))
        })
        .collect();
    if columns.is_empty() {
        return None;
    }
    let dir = dir.to_path_buf();
    let load = move || {
        columns
            .into_iter()
            .map(|(name, metric, arena)| {
                let graph = VectorIndex::read(&dir, &name, metric, arena.clone());
                (name, arena, graph)
            })
            .collect()
    };
    std::thread::Builder::new().name("braid-graphs".into()).spawn(load).ok()
}

/// Replaces the empty graphs built during replay with the ones dumped as
/// they grew (loaded beside the replay when `preloaded`, else now), when
/// they are usable; returns the row from which the indexer must catch up.
fn load_vector_graphs(state: &mut State, dir: &Path, rows: u32, preloaded: Option<JoinHandle<Vec<Preloaded>>>) -> u32 {
    // a thread that panicked loaded nothing: every graph is loaded here
    let mut preloaded: HashMap<String, (Arc<VectorArena>, Option<ReadGraph>)> = preloaded
        .and_then(|thread| thread.join().ok())
        .unwrap_or_default()
        .into_iter()
        .map(|(name, arena, graph)| (name, (arena, graph)))
        .collect();
    let mut from = rows;
    for (table, data) in state.tables.iter_mut() {
        for (column, vc) in data.vectors.iter_mut() {
            let name = graph_name(table, column);
            let loaded = match preloaded.remove(&name) {
                // the same column's arena (retention did not rebuild it meanwhile)
                Some((arena, graph)) if Arc::ptr_eq(&arena, &vc.data.arena()) => graph.and_then(|g| g.accept(rows)),
                _ => VectorIndex::load(dir, &name, vc.index.metric, vc.data.arena(), rows),
            };
            if let Some(loaded) = loaded {
                vc.index = Arc::new(loaded);
            }
            from = from.min(vc.index.watermark());
        }
    }
    from
}

/// WAL frames to decode together: about 4 MiB of them, so the commits
/// decoded at once stay small next to the log.
fn replay_chunks(payloads: &[(Vec<u8>, u64)]) -> impl Iterator<Item = &[(Vec<u8>, u64)]> {
    const CHUNK_BYTES: usize = 4 << 20;
    let mut rest = payloads;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let take = rest
            .iter()
            .position(|(p, _)| {
                bytes += p.len();
                bytes >= CHUNK_BYTES
            })
            .map_or(rest.len(), |i| i + 1);
        let (chunk, tail) = rest.split_at(take);
        rest = tail;
        Some(chunk)
    })
}

/// A commit read back from the log, with where its rows' encoded fields
/// are: in its frame, or for a frame of JSON (written before the binary
/// encoding) in `reencoded`, the binary encoding made of it here.
struct Decoded {
    commit: Commit,
    reencoded: Option<Vec<u8>>,
    spans: FieldSpans,
}

fn decode_for_replay(payload: &[u8]) -> Result<Decoded> {
    let (commit, spans) = Commit::decode_spans(payload)?;
    Ok(match spans {
        Some(spans) => Decoded { commit, reencoded: None, spans },
        None => {
            let mut bytes = Vec::new();
            let spans = commit.encode(&mut bytes);
            Decoded { commit, reencoded: Some(bytes), spans }
        }
    })
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
        // before anything is removed: a start from a log that does not
        // continue its checkpoint would drop the writes in between, and
        // remove_stale below every record file past the older base
        checkpoint::check_tail(dir, ckpt)?;
        checkpoint::remove_stale(dir, base)?;
        let mut state = match ckpt {
            Some(gen) => checkpoint::load(dir, gen)?,
            None => State::new(RecordFiles::open(dir, &[], 0)?),
        };
        // files retention compacted away, when a crash came before their
        // deletion
        checkpoint::remove_unnamed(dir, &state)?;
        let checkpoint_epoch = ckpt.map(|_| state.latest_epoch);
        let checkpoint_ms = ms(started.elapsed());
        let graphs = preload_vector_graphs(&state, &dir.join(VECTOR_DIR));
        // replay every segment from the checkpoint on; the last one stays
        // open for appends
        let mut segments = checkpoint::wal_generations(dir)?;
        if segments.is_empty() {
            segments.push(base);
        }
        let mut truncated = 0;
        let mut commits_replayed = 0;
        let mut open_wal = None;
        // record versions in the segment left open: a checkpoint is due once
        // they reach `checkpoint_rows`
        let mut open_rows = 0;
        // epochs only grow along the log: a commit that changes something
        // takes a new one, a receipt alone keeps the one before it
        let mut last_epoch = state.latest_epoch;
        for (i, gen) in segments.iter().enumerate() {
            let (wal, replay) = Wal::open(&dir.join(checkpoint::wal_name(*gen)))?;
            truncated += replay.truncated;
            commits_replayed += replay.payloads.len() as u64;
            state.wal_end = wal.end();
            // frames are decoded on all cores, a few MiB at a time, and
            // applied in log order
            for chunk in replay_chunks(&replay.payloads) {
                let decoded: Vec<Result<Decoded>> = chunk
                    .par_iter()
                    .map(|(payload, end)| {
                        decode_for_replay(payload).map_err(|e| {
                            Error::storage(format!("corrupt commit in segment {gen} at offset {end}: {}", e.message))
                        })
                    })
                    .collect();
                let decoded = decoded.into_iter().collect::<Result<Vec<Decoded>>>()?;
                // a segment copied or put back from elsewhere would apply its
                // writes a second time, out of place (found by a black-box
                // review: a copy of the last segment under the next name was
                // replayed, and every record it held got a second version)
                for (d, (_, end)) in decoded.iter().zip(chunk) {
                    let changes = !d.commit.rows.is_empty() || !d.commit.schemas.is_empty();
                    if d.commit.epoch < last_epoch || (changes && d.commit.epoch == last_epoch) {
                        return Err(Error::new(
                            Code::WalCorrupt,
                            format!(
                                "{}: the commit at offset {end} has epoch {}, not after epoch {last_epoch} before it: \
                                 the segment does not continue the log (a copy, or a file put back?); acknowledged \
                                 writes would be applied out of place. Move it away, or restore a snapshot into a new \
                                 branch (docs/operations.md)",
                                dir.join(checkpoint::wal_name(*gen)).display(),
                                d.commit.epoch
                            ),
                        ));
                    }
                    last_epoch = d.commit.epoch;
                }
                if i + 1 == segments.len() {
                    open_rows += decoded.iter().map(|d| d.commit.rows.len() as u64).sum::<u64>();
                }
                let commits: Vec<&Commit> = decoded.iter().map(|d| &d.commit).collect();
                let encoded: Vec<EncodedRows> = decoded
                    .iter()
                    .zip(chunk)
                    .map(|(d, (payload, _))| EncodedRows {
                        bytes: d.reencoded.as_deref().unwrap_or(payload),
                        spans: &d.spans,
                    })
                    .collect();
                let ends: Vec<u64> = chunk.iter().map(|(_, end)| *end).collect();
                let locs = state.write_records(&encoded)?;
                state.apply_group(&commits, &ends, &locs);
            }
            if i + 1 == segments.len() {
                open_wal = Some((wal, *gen));
            }
        }
        let (wal, wal_gen) = open_wal.expect("at least one segment");
        let replay_ms = ms(started.elapsed()) - checkpoint_ms;
        let cutoff = now_ms().saturating_sub(config.receipt_retention_ms);
        state.receipts.expire(cutoff);
        let rows = state.rows.len() as u32;
        let vector_watermark = load_vector_graphs(&mut state, &dir.join(VECTOR_DIR), rows, graphs);

        let text_dir = dir.join("text");
        let (mut text, text_rebuilt) = TextIndex::open(&text_dir)?;
        if text.watermark() > rows {
            // the index claims rows the log does not have: rebuild it
            drop(text);
            std::fs::remove_dir_all(&text_dir)?;
            text = TextIndex::open(&text_dir)?.0;
        }
        // a column retention left half empty before a restart is compacted
        let shared = Arc::new(Shared::new(vector_watermark, state.purged_rows > 0));
        shared.stats.wal_segment_bytes.store(wal.end(), Ordering::Relaxed);
        if let Some(gen) = ckpt {
            shared.stats.last_checkpoint_ms.store(written_ms(&dir.join(checkpoint::file_name(gen))), Ordering::Relaxed);
        }
        // the rows the indexers have yet to reach, those retention removed aside
        let indexed = vector_watermark.min(text.watermark()) as usize;
        let backlog = (indexed..rows as usize).filter(|&row| state.rows.get(row).loc != RecordLoc::PURGED).count();
        shared.events.push(Event::Recovery {
            checkpoint_generation: ckpt,
            checkpoint_epoch,
            segments_replayed: segments.len() as u64,
            commits_replayed,
            truncated_bytes: truncated,
            latest_epoch: state.latest_epoch,
            index_backlog_rows: backlog as u64,
            checkpoint_load_ms: checkpoint_ms,
            replay_ms,
            duration_ms: ms(started.elapsed()),
        });
        if let Some(error) = text_rebuilt {
            shared.events.push(Event::TextIndexRebuilt { error });
        }
        if text.purged() < state.horizon {
            // retention removed versions whose text deletes a crash kept from
            // reaching a commit: delete them again (the indexer commits)
            let purged: Vec<u32> =
                (0..text.watermark().min(rows)).filter(|r| state.rows[*r as usize].loc.is_purged()).collect();
            text.delete_rows(&purged, state.horizon)?;
        }
        let state = Arc::new(RwLock::new(state));
        let text = Arc::new(text);
        let (tx, rx) = mpsc::channel::<Request>();
        let committer = committer::spawn(
            wal,
            wal_gen,
            dir,
            rx,
            state.clone(),
            shared.clone(),
            text.clone(),
            config.clone(),
            open_rows,
        )?;
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
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(
            op,
            Reply::new(move |outcome| {
                let _ = tx.send(outcome);
            }),
        );
        rx.recv().map_err(|_| Error::new(Code::ShuttingDown, "branch closed before the write finished"))?
    }

    /// Hands a write to the committer and returns at once; `reply` gets its
    /// outcome when its group is durable and applied, or when it is refused
    /// (at once, when the branch is archived or closing).
    pub fn submit(&self, op: WriteOp, reply: Reply) {
        if self.shared.archived.load(Ordering::Acquire) {
            return reply.send(Err(Error::new(Code::BranchArchived, "branch is archived and read-only")));
        }
        let tx = self.tx.lock();
        let Some(tx) = tx.as_ref() else {
            return reply.send(Err(Error::new(Code::ShuttingDown, "branch is closing")));
        };
        let job = Job { op, enqueued: Instant::now(), reply };
        if let Err(mpsc::SendError(Request::Write(job))) = tx.send(Request::Write(job)) {
            job.reply.send(Err(Error::new(Code::ShuttingDown, "branch is closing")));
        }
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
            // a closed branch's indexers have stopped: waiting on would only
            // hold the caller (and a process exiting) until the deadline
            if Instant::now() >= deadline || self.tx.lock().is_none() {
                return false;
            }
            // a caller that waits on the indexes wants them committed now
            self.shared.note_search(self.config.search_idle_after);
            self.shared.wake_indexer();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The readable horizon: epochs below it are rejected by temporal reads.
    /// It is the retention setting's (`history_epochs` behind the latest
    /// epoch) or, when higher, the one retention last removed history below
    /// (a restart with a longer setting cannot bring that back).
    pub fn horizon(&self, state: &State) -> u64 {
        let configured = match self.config.history_epochs {
            Some(n) => state.latest_epoch.saturating_sub(n),
            None => 0,
        };
        configured.max(state.horizon)
    }

    /// Stops accepting writes, finishes the queued ones, commits the text
    /// index and joins the threads.
    /// Tells the branch's threads to finish (the committer its queue and
    /// checkpoint, the indexer its round) without waiting for them: an
    /// engine closing many branches tells them all first, so they wind
    /// down together instead of one after another.
    pub fn begin_close(&self) {
        self.tx.lock().take();
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake_indexer();
    }

    pub fn close(&self) {
        self.begin_close();
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

/// When a file was last written, in unix ms (now when unknown).
fn written_ms(path: &Path) -> u64 {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let since_epoch = modified.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    since_epoch.map_or_else(now_ms, |d| d.as_millis() as u64)
}
