//! Counters of a branch's storage, kept with relaxed atomics: the committer
//! adds a few numbers per fsync group and per checkpoint, and never takes a
//! lock for them. `Engine::metrics` reads them (with the figures it derives
//! from the state) for `GET /metrics`; docs/operations.md lists every metric.
//!
//! Histograms have fixed upper bounds and count in integer units
//! (nanoseconds, writes); a snapshot reports them in the metric's unit
//! (seconds, writes) with cumulative bucket counts, as Prometheus reads them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::Serialize;

use crate::storage::state::State;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// Upper bounds of the WAL fsync histogram: 50 µs to 2.5 s.
const FSYNC_BOUNDS_NS: &[u64] = &[
    50 * US,
    100 * US,
    250 * US,
    500 * US,
    MS,
    2 * MS + 500 * US,
    5 * MS,
    10 * MS,
    25 * MS,
    50 * MS,
    100 * MS,
    250 * MS,
    500 * MS,
    1000 * MS,
    2500 * MS,
];

/// Upper bounds of the group-commit histogram: writes per fsync, up to the
/// default `group_commit_max`.
const GROUP_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Upper bounds of the checkpoint duration histogram: 5 ms to 60 s.
const CHECKPOINT_BOUNDS_NS: &[u64] = &[
    5 * MS,
    10 * MS,
    25 * MS,
    50 * MS,
    100 * MS,
    250 * MS,
    500 * MS,
    1000 * MS,
    2500 * MS,
    5000 * MS,
    10_000 * MS,
    30_000 * MS,
    60_000 * MS,
];

/// A histogram with fixed upper bounds, counted lock-free.
pub struct Histogram {
    bounds: &'static [u64],
    /// Observations per bucket (not cumulative); the last one holds those
    /// above every bound.
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
    /// Counted units per reported unit (1e9 nanoseconds per second); a
    /// division keeps bounds such as 50 µs exact (5e-5, not 5.000000000000001e-5).
    per_unit: f64,
}

/// A histogram as Prometheus reads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistogramSnapshot {
    /// Upper bounds, in the metric's unit.
    pub bounds: Vec<f64>,
    /// Observations at or below each bound (cumulative).
    pub cumulative: Vec<u64>,
    pub count: u64,
    pub sum: f64,
}

impl Histogram {
    fn new(bounds: &'static [u64], per_unit: f64) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds ascend");
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            per_unit,
        }
    }

    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.partition_point(|b| *b < value);
        self.counts[bucket].fetch_add(1, Relaxed);
        self.sum.fetch_add(value, Relaxed);
    }

    fn observe_duration(&self, d: Duration) {
        self.observe(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The count is the sum of the buckets read, so `+Inf` and `_count`
    /// agree even while observations go on.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = Vec::with_capacity(self.bounds.len());
        let mut running = 0;
        for c in &self.counts[..self.bounds.len()] {
            running += c.load(Relaxed);
            cumulative.push(running);
        }
        let count = running + self.counts[self.bounds.len()].load(Relaxed);
        HistogramSnapshot {
            bounds: self.bounds.iter().map(|b| *b as f64 / self.per_unit).collect(),
            cumulative,
            count,
            sum: self.sum.load(Relaxed) as f64 / self.per_unit,
        }
    }
}

/// The counters of one branch, shared by its committer and `Engine::metrics`.
pub struct BranchStats {
    /// Bytes of the WAL segment being written.
    pub wal_segment_bytes: AtomicU64,
    /// WAL bytes appended and made durable since the branch was opened.
    pub wal_appended_bytes: AtomicU64,
    /// The committer's `fdatasync` of each group.
    pub wal_fsync: Histogram,
    /// Write requests per fsync group.
    pub group_commit: Histogram,
    pub checkpoints: AtomicU64,
    pub checkpoint_failures: AtomicU64,
    pub checkpoint_duration: Histogram,
    /// Unix ms of the newest checkpoint (taken, or loaded at open); 0 when
    /// the branch has none.
    pub last_checkpoint_ms: AtomicU64,
    /// Image bytes of the newest checkpoint taken since open.
    pub last_checkpoint_bytes: AtomicU64,
    /// Retention since open: versions removed, record files compacted and
    /// the bytes they freed, passes whose compaction failed.
    pub purged_versions: AtomicU64,
    pub compacted_files: AtomicU64,
    pub reclaimed_bytes: AtomicU64,
    pub retention_failures: AtomicU64,
    /// Vectors of removed versions dropped by rebuilding their column.
    pub compacted_vectors: AtomicU64,
    /// Removed versions whose text documents retention had deleted.
    pub text_deletes: AtomicU64,
}

impl Default for BranchStats {
    fn default() -> Self {
        BranchStats {
            wal_segment_bytes: AtomicU64::new(0),
            wal_appended_bytes: AtomicU64::new(0),
            wal_fsync: Histogram::new(FSYNC_BOUNDS_NS, 1e9),
            group_commit: Histogram::new(GROUP_BOUNDS, 1.0),
            checkpoints: AtomicU64::new(0),
            checkpoint_failures: AtomicU64::new(0),
            checkpoint_duration: Histogram::new(CHECKPOINT_BOUNDS_NS, 1e9),
            last_checkpoint_ms: AtomicU64::new(0),
            last_checkpoint_bytes: AtomicU64::new(0),
            purged_versions: AtomicU64::new(0),
            compacted_files: AtomicU64::new(0),
            reclaimed_bytes: AtomicU64::new(0),
            retention_failures: AtomicU64::new(0),
            compacted_vectors: AtomicU64::new(0),
            text_deletes: AtomicU64::new(0),
        }
    }
}

impl BranchStats {
    /// One durable group: `appended` bytes, the segment now `segment_end`
    /// long, its fsync time and how many write requests shared it.
    pub fn record_group(&self, appended: u64, segment_end: u64, fsync: Duration, writes: usize) {
        self.wal_appended_bytes.fetch_add(appended, Relaxed);
        self.wal_segment_bytes.store(segment_end, Relaxed);
        self.wal_fsync.observe_duration(fsync);
        self.group_commit.observe(writes as u64);
    }

    pub fn record_checkpoint(&self, at_ms: u64, bytes: u64, took: Duration, segment_end: u64) {
        self.checkpoints.fetch_add(1, Relaxed);
        self.checkpoint_duration.observe_duration(took);
        self.last_checkpoint_ms.store(at_ms, Relaxed);
        self.last_checkpoint_bytes.store(bytes, Relaxed);
        self.wal_segment_bytes.store(segment_end, Relaxed);
    }

    pub fn record_retention(&self, versions: u64, text_deletes: u64, files: u64, bytes: u64) {
        self.purged_versions.fetch_add(versions, Relaxed);
        self.text_deletes.fetch_add(text_deletes, Relaxed);
        self.compacted_files.fetch_add(files, Relaxed);
        self.reclaimed_bytes.fetch_add(bytes, Relaxed);
    }

    pub fn retention(&self, horizon_epoch: u64, purged_versions: u64) -> RetentionFigures {
        RetentionFigures {
            horizon_epoch,
            purged_versions,
            purged_versions_since_open: self.purged_versions.load(Relaxed),
            compacted_files: self.compacted_files.load(Relaxed),
            reclaimed_bytes: self.reclaimed_bytes.load(Relaxed),
            compacted_vectors: self.compacted_vectors.load(Relaxed),
            text_deletes: self.text_deletes.load(Relaxed),
            failures: self.retention_failures.load(Relaxed),
        }
    }

    /// Counts the key text of `keys` (new keys of a commit, or every key
    /// at open) held outside their entries: ids longer than an entry holds;
    /// table and tenant names are shared by all keys.
    pub fn wal(&self) -> WalFigures {
        WalFigures {
            segment_bytes: self.wal_segment_bytes.load(Relaxed),
            appended_bytes: self.wal_appended_bytes.load(Relaxed),
            fsync_seconds: self.wal_fsync.snapshot(),
            group_commit_writes: self.group_commit.snapshot(),
        }
    }

    pub fn checkpoints(&self, now_ms: u64) -> CheckpointFigures {
        let last = self.last_checkpoint_ms.load(Relaxed);
        CheckpointFigures {
            count: self.checkpoints.load(Relaxed),
            failures: self.checkpoint_failures.load(Relaxed),
            duration_seconds: self.checkpoint_duration.snapshot(),
            last_bytes: self.last_checkpoint_bytes.load(Relaxed),
            last_unix_seconds: (last > 0).then(|| last as f64 / 1000.0),
            age_seconds: (last > 0).then(|| now_ms.saturating_sub(last) as f64 / 1000.0),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct WalFigures {
    pub segment_bytes: u64,
    pub appended_bytes: u64,
    pub fsync_seconds: HistogramSnapshot,
    pub group_commit_writes: HistogramSnapshot,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckpointFigures {
    /// Checkpoints taken since open.
    pub count: u64,
    pub failures: u64,
    pub duration_seconds: HistogramSnapshot,
    pub last_bytes: u64,
    /// When the newest checkpoint was written; None when there is none.
    pub last_unix_seconds: Option<f64>,
    pub age_seconds: Option<f64>,
}

/// What retention has removed (storage/retention.rs).
#[derive(Debug, Clone, Serialize)]
pub struct RetentionFigures {
    /// Reads below this epoch are refused (0: every epoch is readable).
    pub horizon_epoch: u64,
    /// Versions removed from the branch (kept across restarts).
    pub purged_versions: u64,
    /// Since the engine started: versions removed, record files compacted,
    /// bytes those files no longer take, passes whose compaction failed.
    pub purged_versions_since_open: u64,
    pub compacted_files: u64,
    pub reclaimed_bytes: u64,
    /// Vectors of removed versions dropped by rebuilding their column.
    pub compacted_vectors: u64,
    /// Removed versions whose text documents were deleted from the text
    /// index (only versions of tables with text columns have any).
    pub text_deletes: u64,
    pub failures: u64,
}

/// Rows committed but not yet in an index (searchable there).
#[derive(Debug, Clone, Serialize)]
pub struct IndexLag {
    /// Rows past the text index's last commit.
    pub text_rows: u64,
    /// Rows past the vector graphs' watermark.
    pub vector_rows: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct VectorGraphs {
    pub graphs: u64,
    /// Points in every graph of the branch.
    pub points: u64,
    /// Points in the largest graph.
    pub max_points: u64,
}

/// Estimated heap bytes per structure of the branch state: element counts
/// (or capacities) times element sizes, plus the text lengths the engine
/// tracks; allocator overhead and structures not listed are not counted.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryEstimate {
    /// Row metadata: one `Row` per version.
    pub rows: u64,
    /// Keys: entries, their text, their version lists and the key map.
    pub keys: u64,
    /// Vectors in the process's own memory (written since the last
    /// checkpoint: the ones a checkpoint wrote, and ones loaded from it, are
    /// read from its memory-mapped vector files), their 8-bit codes and the
    /// row-to-slot maps.
    pub vectors: u64,
    /// The HNSW graphs' nodes and neighbour lists (they hold no vectors).
    pub vector_graphs: u64,
    /// Idempotency receipts: map entries and the bytes of their keys,
    /// body hashes and responses.
    pub receipts: u64,
    /// The text index's (row, document) pairs of its segments out of row
    /// order, which searches a filter leads read (8 bytes a document).
    pub text_row_maps: u64,
}

pub fn vector_graphs(state: &State) -> VectorGraphs {
    let sizes: Vec<u64> =
        state.tables.values().flat_map(|t| t.vectors.values()).map(|vc| vc.index.len() as u64).collect();
    VectorGraphs {
        graphs: sizes.len() as u64,
        points: sizes.iter().sum(),
        max_points: sizes.iter().copied().max().unwrap_or(0),
    }
}

pub fn memory(state: &State, text_row_maps: u64) -> MemoryEstimate {
    let columns = || state.tables.values().flat_map(|t| t.vectors.values());
    MemoryEstimate {
        rows: state.rows.heap_bytes() as u64,
        keys: state.keys.heap_bytes() as u64,
        vectors: columns().map(|vc| vc.data.heap_bytes() as u64).sum(),
        vector_graphs: columns().map(|vc| vc.index.heap_bytes() as u64).sum(),
        receipts: state.receipts.heap_bytes(),
        text_row_maps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_count_what_lies_above_every_bound() {
        let h = Histogram::new(&[1, 2, 4], 1.0);
        for v in [0, 1, 2, 3, 4, 5, 100] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.bounds, vec![1.0, 2.0, 4.0]);
        // 0 and 1 are <= 1; 2 is <= 2; 3 and 4 are <= 4; 5 and 100 only in +Inf
        assert_eq!(s.cumulative, vec![2, 3, 5]);
        assert_eq!(s.count, 7);
        assert_eq!(s.sum, 115.0);
    }

    #[test]
    fn nanosecond_histograms_report_seconds() {
        let stats = BranchStats::default();
        stats.record_group(100, 116, Duration::from_micros(700), 3);
        stats.record_group(50, 166, Duration::from_millis(3), 1);
        let wal = stats.wal();
        assert_eq!((wal.appended_bytes, wal.segment_bytes), (150, 166));
        assert_eq!(wal.fsync_seconds.count, 2);
        assert!((wal.fsync_seconds.sum - 0.0037).abs() < 1e-9, "{}", wal.fsync_seconds.sum);
        assert_eq!(wal.fsync_seconds.bounds[0], 0.00005, "bounds are exact in seconds");
        let le_1ms = wal.fsync_seconds.bounds.iter().position(|b| *b == 0.001).unwrap();
        assert_eq!(wal.fsync_seconds.cumulative[le_1ms], 1);
        assert_eq!(wal.group_commit_writes.cumulative[..3], [1, 1, 2], "1 write, then 3 writes (<= 4)");
        assert_eq!(wal.group_commit_writes.sum, 4.0);
    }

    #[test]
    fn checkpoint_age_exists_once_a_checkpoint_does() {
        let stats = BranchStats::default();
        let none = stats.checkpoints(10_000);
        assert_eq!((none.count, none.age_seconds, none.last_unix_seconds), (0, None, None));
        stats.record_checkpoint(7_000, 4096, Duration::from_millis(20), 16);
        let one = stats.checkpoints(10_000);
        assert_eq!((one.count, one.last_bytes), (1, 4096));
        assert_eq!((one.age_seconds, one.last_unix_seconds), (Some(3.0), Some(7.0)));
        assert_eq!(one.duration_seconds.count, 1);
        assert_eq!(stats.wal().segment_bytes, 16, "a checkpoint starts a new segment");
    }
}
