//! Vector similarity over hnsw_rs, one graph per (table, vector column).
//!
//! Every version's vector is inserted under its row id, so a read at an older
//! epoch finds the vectors it had; which rows may be returned is decided by a
//! filter over the eligible-row bitmap inside the graph search. Small eligible
//! sets and rows the graph has not reached yet are scored exactly instead.
//!
//! Scores are similarities, higher is better: cosine similarity for `cosine`
//! (vectors are normalised on the way in), the dot product for `dot`, and
//! `1 / (1 + euclidean distance)` for `l2`.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use hnsw_rs::anndists::dist::distances::Distance;
use hnsw_rs::prelude::{AnnT, Hnsw, HnswIo};
use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::schema::Metric;

pub const MAX_NB_CONNECTION: usize = 16;
pub const EF_CONSTRUCTION: usize = 200;
pub const MAX_LAYER: usize = 16;

/// The distance hnsw_rs orders by: lower is closer, and never negative
/// (hnsw_rs asserts that). Cosine is `1 - cos` clamped at 0; the dot product
/// maps through a strictly decreasing positive function so the graph sees
/// the same order. Never panics on odd input (zero vectors are orthogonal).
#[derive(Debug, Clone, Copy)]
pub struct MetricDist(pub Metric);

/// Lanes of the distance kernels. f32 addition is not associative, so a
/// plain `.sum()` compiles to one scalar chain; sixteen independent
/// accumulators let LLVM use SIMD registers (SSE2 everywhere on x86-64, and
/// 256-bit AVX2 when [`kernel`] finds it at run time).
const LANES: usize = 16;

#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (xs, ys) = (a[..n].chunks_exact(LANES), b[..n].chunks_exact(LANES));
    let tail: f32 = xs.remainder().iter().zip(ys.remainder()).map(|(x, y)| x * y).sum();
    let mut acc = [0f32; LANES];
    for (x, y) in xs.zip(ys) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn l2_squared_lanes(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (xs, ys) = (a[..n].chunks_exact(LANES), b[..n].chunks_exact(LANES));
    let tail: f32 = xs.remainder().iter().zip(ys.remainder()).map(|(x, y)| (x - y) * (x - y)).sum();
    let mut acc = [0f32; LANES];
    for (x, y) in xs.zip(ys) {
        for i in 0..LANES {
            let d = x[i] - y[i];
            acc[i] += d * d;
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn l2_squared_avx2(a: &[f32], b: &[f32]) -> f32 {
    l2_squared_lanes(a, b)
}

/// Whether the AVX2 builds of the kernels may run here (the check is cached
/// by std after the first call).
#[inline(always)]
fn kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if kernel() {
        // SAFETY: the CPU has AVX2 (checked just above); the function is
        // otherwise the portable kernel.
        return unsafe { dot_avx2(a, b) };
    }
    dot_lanes(a, b)
}

fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if kernel() {
        // SAFETY: as in `dot`.
        return unsafe { l2_squared_avx2(a, b) };
    }
    l2_squared_lanes(a, b)
}

impl Distance<f32> for MetricDist {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        let d = match self.0 {
            Metric::Cosine => 1.0 - dot(a, b),
            Metric::Dot => dot_distance(dot(a, b)),
            Metric::L2 => l2_squared(a, b).sqrt(),
        };
        // finite inputs can still overflow (1e30 * 1e30); hnsw_rs panics on
        // NaN, so an undefined distance is the farthest one
        if d.is_nan() {
            f32::MAX
        } else {
            d.max(0.0)
        }
    }
}

/// Strictly decreasing in the dot product, positive, continuous at 0 (= 1).
fn dot_distance(d: f32) -> f32 {
    if d >= 0.0 {
        1.0 / (1.0 + d)
    } else {
        1.0 - d
    }
}

/// Puts a vector in the form the index stores: unit length for cosine.
pub fn prepare(metric: Metric, mut v: Vec<f32>) -> Vec<f32> {
    if metric == Metric::Cosine {
        let norm = dot(&v, &v).sqrt();
        if norm > 0.0 && norm.is_finite() {
            v.iter_mut().for_each(|x| *x /= norm);
        }
    }
    v
}

/// Similarity (higher is better) from a distance of [`MetricDist`].
pub fn similarity_from_distance(metric: Metric, distance: f32) -> f32 {
    match metric {
        Metric::Cosine => 1.0 - distance,
        Metric::Dot if distance <= 1.0 => 1.0 / distance.max(f32::MIN_POSITIVE) - 1.0,
        Metric::Dot => 1.0 - distance,
        Metric::L2 => 1.0 / (1.0 + distance),
    }
}

pub fn similarity(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    similarity_from_distance(metric, MetricDist(metric).eval(a, b))
}

pub struct VectorIndex {
    pub metric: Metric,
    pub dim: u32,
    hnsw: Hnsw<'static, f32, MetricDist>,
    inserted: AtomicUsize,
    /// Every row below this id that has a vector in this column is in the graph.
    watermark: AtomicU32,
    /// Watermark of the last dump on disk.
    dumped: AtomicU32,
}

/// Sidecar of a dumped graph: which generation of files holds it and up to
/// which row. Written (atomically) after the graph files, so it never points
/// at a partial dump.
#[derive(Debug, Serialize, Deserialize)]
struct DumpMeta {
    generation: u64,
    watermark: u32,
    metric: Metric,
    dim: u32,
    count: usize,
}

impl VectorIndex {
    pub fn new(metric: Metric, dim: u32, expected: usize) -> VectorIndex {
        let hnsw = Hnsw::new(MAX_NB_CONNECTION, expected.max(1024), MAX_LAYER, EF_CONSTRUCTION, MetricDist(metric));
        VectorIndex {
            metric,
            dim,
            hnsw,
            inserted: AtomicUsize::new(0),
            watermark: AtomicU32::new(0),
            dumped: AtomicU32::new(0),
        }
    }

    pub fn watermark(&self) -> u32 {
        self.watermark.load(Ordering::Acquire)
    }

    pub fn set_watermark(&self, upto: u32) {
        self.watermark.fetch_max(upto, Ordering::AcqRel);
    }

    /// Loads the graph dumped under `name` in `dir`, if there is a usable one
    /// covering at most `max_rows` rows. A missing, stale or damaged dump
    /// gives `None` and the caller rebuilds from the log.
    pub fn load(dir: &Path, name: &str, metric: Metric, dim: u32, max_rows: u32) -> Option<VectorIndex> {
        let meta: DumpMeta = serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.json"))).ok()?).ok()?;
        if meta.metric != metric || meta.dim != dim || meta.watermark > max_rows {
            return None;
        }
        let basename = format!("{name}.g{}", meta.generation);
        let loaded = std::panic::catch_unwind(|| {
            // hnsw_rs ties the graph's lifetime to its reader; the reader is
            // small and lives as long as the graph, so it is leaked once per load
            let io: &'static HnswIo = Box::leak(Box::new(HnswIo::new(dir, &basename)));
            io.load_hnsw_with_dist::<f32, MetricDist>(MetricDist(metric)).ok()
        })
        .ok()
        .flatten()?;
        let count = loaded.get_nb_point();
        Some(VectorIndex {
            metric,
            dim,
            hnsw: loaded,
            inserted: AtomicUsize::new(count),
            watermark: AtomicU32::new(meta.watermark),
            dumped: AtomicU32::new(meta.watermark),
        })
    }

    /// Dumps the graph when it has grown since the last dump. Must not run
    /// concurrently with inserts (the indexer is stopped or is the caller).
    pub fn dump(&self, dir: &Path, name: &str) -> Result<()> {
        let watermark = self.watermark();
        if watermark == self.dumped.load(Ordering::Acquire) || self.is_empty() {
            return Ok(());
        }
        std::fs::create_dir_all(dir)?;
        let meta_path = dir.join(format!("{name}.json"));
        let previous: Option<DumpMeta> = std::fs::read(&meta_path).ok().and_then(|b| serde_json::from_slice(&b).ok());
        let generation = previous.as_ref().map_or(1, |m| m.generation + 1);
        let basename = format!("{name}.g{generation}");
        self.hnsw.file_dump(dir, &basename).map_err(|e| Error::storage(format!("vector dump: {e}")))?;
        for ext in ["hnsw.graph", "hnsw.data"] {
            std::fs::File::open(dir.join(format!("{basename}.{ext}")))?.sync_all()?;
        }
        let meta = DumpMeta { generation, watermark, metric: self.metric, dim: self.dim, count: self.len() };
        let tmp = dir.join(format!("{name}.json.tmp"));
        std::fs::write(&tmp, serde_json::to_vec(&meta).expect("meta serialises"))?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &meta_path)?;
        crate::storage::wal::sync_dir(&meta_path)?;
        if let Some(old) = previous {
            for ext in ["hnsw.graph", "hnsw.data"] {
                let _ = std::fs::remove_file(dir.join(format!("{name}.g{}.{ext}", old.generation)));
            }
        }
        self.dumped.store(watermark, Ordering::Release);
        Ok(())
    }

    /// Inserts a prepared vector under its row id.
    pub fn insert(&self, row: u32, v: &[f32]) {
        fail::fail_point!("vector::insert");
        self.hnsw.insert_slice((v, row as usize));
        self.inserted.fetch_add(1, Ordering::Relaxed);
    }

    /// Inserts many prepared vectors using hnsw_rs's parallel insert.
    pub fn insert_many(&self, items: &[(u32, std::sync::Arc<[f32]>)]) {
        fail::fail_point!("vector::insert");
        let data: Vec<(&[f32], usize)> = items.iter().map(|(r, v)| (&v[..], *r as usize)).collect();
        self.hnsw.parallel_insert_slice(&data);
        self.inserted.fetch_add(items.len(), Ordering::Relaxed);
    }

    pub fn len(&self) -> usize {
        self.inserted.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate top-`k` among eligible rows: (row, similarity), best first.
    pub fn search(&self, query: &[f32], k: usize, ef: usize, eligible: &RoaringBitmap) -> Vec<(u32, f32)> {
        let filter = |id: &usize| eligible.contains(*id as u32);
        let hits = self.hnsw.search_filter(query, k, ef.max(k), Some(&filter));
        hits.into_iter().map(|n| (n.d_id as u32, similarity_from_distance(self.metric, n.distance))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_kernels_agree_with_the_plain_sums_at_every_remainder() {
        for len in 0..70 {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain_dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            let plain_l2: f32 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
            for (got, want) in
                [(dot(&a, &b), plain_dot), (dot_lanes(&a, &b), plain_dot), (l2_squared(&a, &b), plain_l2)]
            {
                assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "len {len}: {got} vs {want}");
            }
        }
        // mismatched lengths use the common prefix, never read past either
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[1.0]), 1.0);
    }

    #[test]
    fn similarities_order_like_distances() {
        let a = prepare(Metric::Cosine, vec![1.0, 0.0]);
        let b = prepare(Metric::Cosine, vec![1.0, 1.0]);
        let c = prepare(Metric::Cosine, vec![-1.0, 0.0]);
        assert!(similarity(Metric::Cosine, &a, &b) > similarity(Metric::Cosine, &a, &c));
        assert!((similarity(Metric::Cosine, &a, &a) - 1.0).abs() < 1e-6);
        assert_eq!(similarity(Metric::L2, &[0.0, 0.0], &[3.0, 4.0]), 1.0 / 6.0);
        assert!((similarity(Metric::Dot, &[1.0, 2.0], &[3.0, 4.0]) - 11.0).abs() < 1e-4);
        assert!((similarity(Metric::Dot, &[1.0, 2.0], &[-3.0, -4.0]) + 11.0).abs() < 1e-4);
        assert!(similarity(Metric::Dot, &[1.0], &[2.0]) > similarity(Metric::Dot, &[1.0], &[1.0]));
        for m in [Metric::Cosine, Metric::Dot, Metric::L2] {
            let (a, b) = (prepare(m, vec![0.3, 0.7, 0.1]), prepare(m, vec![-5.0, 2.0, 9.0]));
            assert!(MetricDist(m).eval(&a, &a) >= 0.0 && MetricDist(m).eval(&a, &b) >= 0.0);
        }
        // zero vectors must not panic
        let z = prepare(Metric::Cosine, vec![0.0, 0.0]);
        assert_eq!(similarity(Metric::Cosine, &z, &a), 0.0);
    }

    #[test]
    fn graphs_of_every_metric_build_on_awkward_data() {
        // regression: hnsw_rs asserts non-negative distances; near-identical
        // cosine vectors and negative dot products used to panic the indexer
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            let index = VectorIndex::new(metric, 3, 100);
            let items: Vec<(u32, std::sync::Arc<[f32]>)> = (0..2000u32)
                .map(|i| (i, std::sync::Arc::from(prepare(metric, vec![(i % 7) as f32, (i % 11) as f32 - 5.0, 1.0]))))
                .collect();
            index.insert_many(&items);
            let mut all = RoaringBitmap::new();
            all.insert_range(0..2000);
            let q = prepare(metric, vec![3.0, -2.0, 1.0]);
            assert_eq!(index.search(&q, 5, 64, &all).len(), 5);
        }
    }

    #[test]
    fn dump_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let index = VectorIndex::new(Metric::L2, 2, 100);
        for i in 0..200u32 {
            index.insert(i, &[i as f32, (i % 7) as f32]);
        }
        index.set_watermark(200);
        index.dump(dir.path(), "t.emb").unwrap();
        // a second dump after growth replaces the first generation
        index.insert(200, &[500.0, 0.0]);
        index.set_watermark(201);
        index.dump(dir.path(), "t.emb").unwrap();
        assert!(!dir.path().join("t.emb.g1.hnsw.graph").exists());
        let loaded = VectorIndex::load(dir.path(), "t.emb", Metric::L2, 2, 1000).expect("loads");
        assert_eq!(loaded.watermark(), 201);
        assert_eq!(loaded.len(), 201);
        let mut all = RoaringBitmap::new();
        all.insert_range(0..1000);
        assert_eq!(loaded.search(&[500.0, 0.0], 1, 64, &all)[0].0, 200);
        // stale or mismatched dumps are refused
        assert!(VectorIndex::load(dir.path(), "t.emb", Metric::L2, 2, 100).is_none());
        assert!(VectorIndex::load(dir.path(), "t.emb", Metric::Cosine, 2, 1000).is_none());
        assert!(VectorIndex::load(dir.path(), "missing", Metric::L2, 2, 1000).is_none());
        // a damaged dump is refused, not a panic
        std::fs::write(dir.path().join("t.emb.g2.hnsw.data"), b"garbage").unwrap();
        assert!(VectorIndex::load(dir.path(), "t.emb", Metric::L2, 2, 1000).is_none());
    }

    #[test]
    fn filtered_search_respects_eligibility() {
        let index = VectorIndex::new(Metric::L2, 2, 100);
        for i in 0..100u32 {
            index.insert(i, &[i as f32, 0.0]);
        }
        let mut eligible = RoaringBitmap::new();
        eligible.insert_range(50..100);
        let hits = index.search(&[0.0, 0.0], 3, 64, &eligible);
        let rows: Vec<u32> = hits.iter().map(|h| h.0).collect();
        assert_eq!(rows, vec![50, 51, 52]);
    }
}
