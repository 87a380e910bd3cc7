//! Engine events: what a branch did that an operator wants to read in the
//! log (recovery at open, checkpoints, the indexer catching up or failing,
//! storage faults). Each branch keeps them in a bounded queue until
//! `Engine::events` drains it; the service logs them (src/engine-events.ts,
//! docs/operations.md "Engine events"). Events carry counts, sizes,
//! durations and error messages, never record contents.

use std::collections::VecDeque;

use parking_lot::Mutex;
use serde::Serialize;

use crate::storage::commit::now_ms;

/// Events a branch keeps before the oldest are dropped (and counted).
pub const QUEUE_CAPACITY: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointTrigger {
    /// The WAL segment reached `checkpoint_wal_bytes`.
    WalBytes,
    /// The WAL segment holds `checkpoint_rows` record versions.
    WalRows,
    /// `checkpoint_interval` passed with writes since the last one.
    Interval,
    /// `Engine::checkpoint` asked for one.
    Request,
    /// A snapshot links the checkpoint's files.
    Snapshot,
    /// The branch closed cleanly.
    Close,
}

/// Where a storage fault that makes a branch read-only happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultStage {
    /// Appending a group to the WAL or its fsync.
    Wal,
    /// The group is durable but the record files could not take it.
    Apply,
    /// The committer panicked (a bug): what it was doing is unknown, so the
    /// branch refuses writes until a restart replays the log.
    Panic,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The branch was opened: its checkpoint loaded and the WAL after it
    /// replayed (a torn tail cut makes it a warning).
    Recovery {
        checkpoint_generation: Option<u32>,
        /// Latest epoch of the loaded checkpoint.
        checkpoint_epoch: Option<u64>,
        segments_replayed: u64,
        commits_replayed: u64,
        truncated_bytes: u64,
        latest_epoch: u64,
        /// Rows the indexer has to catch up on (indexes rebuilt or behind).
        index_backlog_rows: u64,
        /// Loading the checkpoint image, then replaying the WAL after it;
        /// the rest of `duration_ms` opens the indexes.
        checkpoint_load_ms: f64,
        replay_ms: f64,
        duration_ms: f64,
    },
    Checkpoint {
        trigger: CheckpointTrigger,
        generation: u32,
        epoch: u64,
        bytes: u64,
        duration_ms: f64,
        /// Where the time went (writes wait for all of it).
        phases: CheckpointPhases,
    },
    CheckpointFailed {
        trigger: CheckpointTrigger,
        error: String,
    },
    /// Retention removed the versions below `horizon` (storage/retention.rs)
    /// and compacted the record files that left at least half empty.
    Retention {
        horizon: u64,
        versions: u64,
        files_compacted: u64,
        bytes_reclaimed: u64,
        duration_ms: f64,
    },
    /// Retention removed at least half the vectors of a column: the indexer
    /// rebuilt its arena without them and links its graph again (queries
    /// score the column exactly meanwhile).
    VectorsCompacted {
        /// `table.column`
        column: String,
        kept: u64,
        removed: u64,
        duration_ms: f64,
    },
    /// Compacting record files failed; they stay as they were and the next
    /// checkpoint tries again.
    RetentionFailed {
        error: String,
    },
    /// The indexer covered every row again after more than one round's worth
    /// of rows had been waiting.
    IndexCaughtUp {
        backlog_rows: u64,
        duration_ms: f64,
    },
    /// An indexer round left features unindexed (they stay reachable through
    /// the hot overlay) or its text commit failed.
    /// While rounds keep failing (a full disk fails every text commit) only
    /// the 1st, 2nd, 4th, ... and then every 256th failed round in a row is
    /// reported; `failed_features` counts those since the last report.
    IndexRoundFailed {
        failed_features: u64,
        text_commit_failed: bool,
        failed_features_total: u64,
        failed_rounds_in_a_row: u64,
    },
    /// The text index's files were damaged, or written in an older layout:
    /// the open removed it and the indexer rebuilds it from the record files (queries find the rows it
    /// has not reached through the hot overlay meanwhile).
    TextIndexRebuilt {
        error: String,
    },
    /// The indexer thread ended without being asked to: new rows are no
    /// longer indexed until a restart.
    IndexerStopped {
        failed_features_total: u64,
    },
    /// A write could not be made durable (or applied): the branch refuses
    /// writes until the engine restarts.
    StorageFailed {
        stage: FaultStage,
        error: String,
    },
    /// The queue was full and this many older events were dropped.
    EventsDropped {
        count: u64,
    },
}

impl Event {
    pub fn level(&self) -> Level {
        match self {
            Event::Recovery { truncated_bytes, .. } if *truncated_bytes > 0 => Level::Warn,
            Event::Recovery { .. }
            | Event::Checkpoint { .. }
            | Event::Retention { .. }
            | Event::VectorsCompacted { .. }
            | Event::IndexCaughtUp { .. } => Level::Info,
            Event::IndexRoundFailed { .. }
            | Event::EventsDropped { .. }
            | Event::RetentionFailed { .. }
            | Event::TextIndexRebuilt { .. } => Level::Warn,
            Event::CheckpointFailed { .. } | Event::IndexerStopped { .. } | Event::StorageFailed { .. } => Level::Error,
        }
    }
}

/// Where a checkpoint's time went, in ms (every phase holds up the writes
/// that arrive meanwhile: the committer takes the checkpoint between two
/// write groups).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CheckpointPhases {
    /// Retention's pass, when a horizon is set.
    pub retention_ms: f64,
    /// fsync of the record file the checkpoint seals.
    pub records_sync_ms: f64,
    /// Writing and fsyncing the vectors written since the last checkpoint.
    pub vectors_ms: f64,
    /// Creating the next WAL segment, capturing the image and writing it.
    pub image_ms: f64,
    /// fsync of the image, its rename and the directory's fsync.
    pub image_sync_ms: f64,
    /// Switching to the new generation (under the state's write lock).
    pub switch_ms: f64,
    /// Deleting the WAL segments, images and files the new image covers
    /// (and a snapshot's links).
    pub cleanup_ms: f64,
    /// Handing memory freed since the last checkpoint back to the system
    /// (`memory::release_freed`).
    pub release_ms: f64,
}

/// An event with when it happened and its level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recorded {
    pub at_ms: u64,
    pub level: Level,
    #[serde(flatten)]
    pub event: Event,
}

impl Recorded {
    pub fn new(event: Event) -> Recorded {
        Recorded { at_ms: now_ms(), level: event.level(), event }
    }
}

/// A bounded queue of one branch's events. Pushed rarely (at open, per
/// checkpoint, on failures and catch-ups), so a mutex is fine here.
#[derive(Default)]
pub struct EventQueue {
    inner: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Recorded>,
    dropped: u64,
}

impl EventQueue {
    pub fn push(&self, event: Event) {
        let mut q = self.inner.lock();
        if q.events.len() >= QUEUE_CAPACITY {
            q.events.pop_front();
            q.dropped += 1;
        }
        q.events.push_back(Recorded::new(event));
    }

    /// Everything recorded since the last drain, oldest first, after an
    /// `events_dropped` event when some were dropped.
    pub fn drain(&self) -> Vec<Recorded> {
        let mut q = self.inner.lock();
        let mut out = Vec::with_capacity(q.events.len() + 1);
        if q.dropped > 0 {
            out.push(Recorded::new(Event::EventsDropped { count: std::mem::take(&mut q.dropped) }));
        }
        out.extend(q.events.drain(..));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_the_oldest_and_says_how_many() {
        let q = EventQueue::default();
        for i in 0..QUEUE_CAPACITY as u64 + 3 {
            q.push(Event::IndexCaughtUp { backlog_rows: i, duration_ms: 0.0 });
        }
        let drained = q.drain();
        assert_eq!(drained.len(), QUEUE_CAPACITY + 1);
        assert_eq!(drained[0].event, Event::EventsDropped { count: 3 });
        assert_eq!(drained[0].level, Level::Warn);
        assert_eq!(drained[1].event, Event::IndexCaughtUp { backlog_rows: 3, duration_ms: 0.0 });
        assert!(q.drain().is_empty(), "a drain empties the queue and the dropped count");
    }

    #[test]
    fn events_serialise_flat_with_their_name_and_level() {
        let e = Recorded::new(Event::Checkpoint {
            trigger: CheckpointTrigger::WalBytes,
            generation: 3,
            epoch: 40,
            bytes: 1234,
            duration_ms: 2.5,
            phases: CheckpointPhases { records_sync_ms: 1.5, ..Default::default() },
        });
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "checkpoint");
        assert_eq!(v["level"], "info");
        assert_eq!(v["trigger"], "wal_bytes");
        assert_eq!(v["generation"], 3);
        assert_eq!(v["phases"]["records_sync_ms"], 1.5);
        let torn = Event::Recovery {
            checkpoint_generation: None,
            checkpoint_epoch: None,
            segments_replayed: 1,
            commits_replayed: 2,
            truncated_bytes: 7,
            latest_epoch: 2,
            index_backlog_rows: 2,
            checkpoint_load_ms: 0.0,
            replay_ms: 0.5,
            duration_ms: 1.0,
        };
        assert_eq!(torn.level(), Level::Warn, "a cut torn tail is worth a warning");
    }
}
