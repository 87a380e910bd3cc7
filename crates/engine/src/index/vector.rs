//! Vector similarity: one graph per (table, vector column) over the
//! column's [`VectorArena`], which holds each vector once.
//!
//! Every version's vector has its own slot, so a read at an older epoch
//! finds the vectors it had; which rows may be returned is decided by a
//! filter over the eligible-row bitmap inside the graph search. Small
//! eligible sets and rows the graph has not reached yet are scored exactly
//! instead.
//!
//! Scores are similarities, higher is better: cosine similarity for `cosine`
//! (vectors are normalised on the way in), the dot product for `dot`, and
//! `1 / (1 + euclidean distance)` for `l2`.

use std::io::{BufReader, BufWriter};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};

use super::arena::VectorArena;
use super::hnsw::{self, Hnsw};
use super::quant::{point, CodedQuery};
use crate::error::{Error, Result};
use crate::schema::Metric;

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
#[target_feature(enable = "avx2,fma")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let whole = n - n % 32;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    // SAFETY: every load reads 8 floats at an offset below `whole`, so
    // inside both slices; unaligned loads need no alignment.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i < whole {
            for (j, lane) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_ps(pa.add(i + 8 * j));
                let y = _mm256_loadu_ps(pb.add(i + 8 * j));
                *lane = _mm256_fmadd_ps(x, y, *lane);
            }
            i += 32;
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), sum);
        lanes.iter().sum::<f32>() + dot_lanes(&a[whole..n], &b[whole..n])
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn l2_squared_avx2(a: &[f32], b: &[f32]) -> f32 {
    l2_squared_lanes(a, b)
}

#[inline(always)]
fn dot_q8f_lanes(q: &[f32], c: &[i8]) -> f32 {
    let n = q.len().min(c.len());
    let (xs, ys) = (q[..n].chunks_exact(LANES), c[..n].chunks_exact(LANES));
    let tail: f32 = xs.remainder().iter().zip(ys.remainder()).map(|(x, y)| x * f32::from(*y)).sum();
    let mut acc = [0f32; LANES];
    for (x, y) in xs.zip(ys) {
        for i in 0..LANES {
            acc[i] += x[i] * f32::from(y[i]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_q8f_avx2(q: &[f32], c: &[i8]) -> f32 {
    use std::arch::x86_64::*;
    let n = q.len().min(c.len());
    let whole = n - n % 32;
    let (pq, pc) = (q.as_ptr(), c.as_ptr());
    // SAFETY: every load reads 8 floats or 8 bytes at an offset below
    // `whole`, so inside both slices; unaligned loads need no alignment.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i < whole {
            for (j, lane) in acc.iter_mut().enumerate() {
                let bytes = _mm_loadl_epi64(pc.add(i + 8 * j).cast::<__m128i>());
                let y = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
                let x = _mm256_loadu_ps(pq.add(i + 8 * j));
                *lane = _mm256_fmadd_ps(x, y, *lane);
            }
            i += 32;
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), sum);
        lanes.iter().sum::<f32>() + dot_q8f_lanes(&q[whole..n], &c[whole..n])
    }
}

/// `q · c` of a float query and an 8-bit code (for a query used a few
/// times, where rounding it to 16 bits first would cost more than it saves).
pub(crate) fn dot_q8f(q: &[f32], c: &[i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if kernel() {
        // SAFETY: as in `dot`.
        return unsafe { dot_q8f_avx2(q, c) };
    }
    dot_q8f_lanes(q, c)
}

#[inline(always)]
fn dot_q8_lanes(q: &[i16], c: &[i8]) -> i64 {
    let n = q.len().min(c.len());
    let (xs, ys) = (q[..n].chunks_exact(LANES), c[..n].chunks_exact(LANES));
    let tail: i64 = xs.remainder().iter().zip(ys.remainder()).map(|(x, y)| i64::from(*x) * i64::from(*y)).sum();
    let mut acc = [0i32; LANES];
    for (x, y) in xs.zip(ys) {
        for i in 0..LANES {
            acc[i] += i32::from(x[i]) * i32::from(y[i]);
        }
    }
    acc.iter().map(|a| i64::from(*a)).sum::<i64>() + tail
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot_q8_avx2(q: &[i16], c: &[i8]) -> i64 {
    use std::arch::x86_64::*;
    let n = q.len().min(c.len());
    let whole = n - n % 32;
    let (pq, pc) = (q.as_ptr(), c.as_ptr());
    // SAFETY: every load reads 16 values at an offset below `whole`, so
    // inside both slices; unaligned loads need no alignment.
    unsafe {
        let mut acc = [_mm256_setzero_si256(); 2];
        let mut i = 0;
        while i < whole {
            for (j, lane) in acc.iter_mut().enumerate() {
                let codes = _mm256_cvtepi8_epi16(_mm_loadu_si128(pc.add(i + 16 * j).cast::<__m128i>()));
                let query = _mm256_loadu_si256(pq.add(i + 16 * j).cast::<__m256i>());
                *lane = _mm256_add_epi32(*lane, _mm256_madd_epi16(codes, query));
            }
            i += 32;
        }
        let mut lanes = [0i32; 8];
        _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), _mm256_add_epi32(acc[0], acc[1]));
        lanes.iter().map(|l| i64::from(*l)).sum::<i64>() + dot_q8_lanes(&q[whole..n], &c[whole..n])
    }
}

/// `q · c` of a query quantised to 16 bits (at most ±16,383, so no lane's
/// sum of up to 4,096 / 16 products overflows 32 bits) and an 8-bit code.
pub(crate) fn dot_q8(q: &[i16], c: &[i8]) -> i64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { dot_q8_avx2(q, c) };
    }
    dot_q8_lanes(q, c)
}

/// Whether the AVX2 (with FMA) builds of the kernels may run here (the check is cached
/// by std after the first call).
#[inline(always)]
fn kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if kernel() {
        // SAFETY: the CPU has AVX2 (checked just above); the function is
        // otherwise the portable kernel.
        return unsafe { dot_avx2(a, b) };
    }
    dot_lanes(a, b)
}

pub(crate) fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if kernel() {
        // SAFETY: as in `dot`.
        return unsafe { l2_squared_avx2(a, b) };
    }
    l2_squared_lanes(a, b)
}

/// Puts a vector in the form the index stores: unit length for cosine.
/// The norm is taken in f64: squares of finite f32 components overflow f32
/// from about 1.8e19 and underflow to 0 below about 1e-23, which had made
/// `[1e20, 1e20, 1e20]` a vector of zeros' norm (every cosine 1 or -1) and
/// `[1e-25, ...]` a zero vector (every cosine 0).
pub fn prepare(metric: Metric, mut v: Vec<f32>) -> Vec<f32> {
    if metric == Metric::Cosine {
        let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
        if norm > 0.0 && norm.is_finite() {
            v.iter_mut().for_each(|x| *x = (f64::from(*x) / norm) as f32);
        }
    }
    v
}

/// Similarity (higher is better) from a graph distance ([`hnsw::distance`]).
pub fn similarity_from_distance(metric: Metric, distance: f32) -> f32 {
    match metric {
        Metric::Cosine => (1.0 - distance).clamp(-1.0, 1.0),
        Metric::Dot => -distance,
        Metric::L2 => 1.0 / (1.0 + distance.max(0.0).sqrt()),
    }
}

/// The similarity the exact scan gives; the graph's hits carry the same
/// value for the same pair (both go through [`hnsw::distance`]).
pub fn similarity(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    let distance = hnsw::distance(metric, a, b);
    if metric == Metric::L2 && distance >= f32::MAX {
        return l2_similarity_wide(a, b);
    }
    similarity_from_distance(metric, distance)
}

/// The l2 similarity of two vectors whose squared distance is past f32's
/// range (saturated by [`hnsw::distance`]): taken in f64, so rows farther
/// than about 1.8e19 still order by distance instead of tying at one
/// score. (A dot product past f32's range saturates: the score itself is
/// an f32.)
#[cold]
fn l2_similarity_wide(a: &[f32], b: &[f32]) -> f32 {
    let squared: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = f64::from(x) - f64::from(y);
            d * d
        })
        .sum();
    (1.0 / (1.0 + squared.sqrt())) as f32
}

/// Rows ahead whose code or vector an exact scan asks for while scoring
/// one: the eligible rows' slots are spread over the arena.
const SCAN_AHEAD: usize = 8;
/// Rows whose bounds an exact scan keeps buffers for, per thread, between
/// scans (12 bytes a row): memory freed goes back to the OS at once (the
/// addon's allocator setting), so a scan that allocated its buffers anew
/// faulted them in again each time, about 0.3-0.45 ms of a 25,000-row scan.
const SCAN_SCRATCH_ROWS: usize = 1 << 20;

/// Each row's (lowest, highest) distance, and the highest ones to select from.
type ScanScratch = (Vec<(f32, f32)>, Vec<f32>);

thread_local! {
    static SCAN_SCRATCH: std::cell::RefCell<ScanScratch> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Rows ahead whose vector the re-scoring asks for (a vector is several
/// times a code's lines, so fewer are in flight).
const RESCORE_AHEAD: usize = 2;

/// Exact similarities of at least the `keep` best of `scan`'s (row, slot)
/// pairs, and of every row whose code could not rule it out: the rows are
/// first scored through their 8-bit codes with a bound on each score's
/// error ([`CodedQuery::error`]); a row whose best possible distance is
/// worse than the `keep`-th best worst possible one cannot be among the
/// best `keep`, and the others are scored with their vectors. So the
/// result holds the same best `keep` rows (and scores) as scoring every
/// row with its vector, while reading a quarter of the bytes for most.
pub fn exact_top(
    arena: &VectorArena,
    metric: Metric,
    query: &[f32],
    scan: &[(u32, u32)],
    keep: usize,
) -> Vec<(u32, f32)> {
    let _reading = arena.reading();
    // the vectors of `rows` (from their file when one holds them:
    // [`VectorArena::read_vector`]), a few rows ahead asked for while
    // scoring one
    let score = |rows: &[(u32, u32)], out: &mut Vec<(u32, f32)>| {
        let mut buf = vec![0f32; arena.dim()];
        out.reserve(rows.len());
        for (i, &(row, slot)) in rows.iter().enumerate() {
            if let Some(ahead) = rows.get(i + RESCORE_AHEAD).and_then(|&(_, s)| arena.vector(s)) {
                super::prefetch::prefetch(ahead);
            }
            if let Some(v) = arena.read_vector(slot, &mut buf) {
                out.push((row, similarity(metric, query, v)));
            }
        }
    };
    let mut hits = Vec::new();
    if scan.len() <= keep || keep == 0 {
        score(scan, &mut hits);
        return hits;
    }
    let coded = CodedQuery::new(metric, query);
    // (lowest, highest) possible distance of each row
    let bound_rows = |rows: &[(u32, u32)], out: &mut [(f32, f32)]| {
        for (i, (&(_, slot), bound)) in rows.iter().zip(out.iter_mut()).enumerate() {
            if let Some((_, ahead)) = rows.get(i + SCAN_AHEAD) {
                arena.prefetch_code(*ahead, true);
            }
            *bound = match point(arena, slot) {
                Some(p) => coded.bounds(p, coded.distance(p)),
                None => (f32::INFINITY, f32::INFINITY),
            };
        }
    };
    let candidates: Vec<(u32, u32)> = SCAN_SCRATCH.with_borrow_mut(|(bounds, highest)| {
        bounds.clear();
        bounds.resize(scan.len(), (0.0, 0.0));
        bound_rows(scan, bounds);
        highest.clear();
        highest.extend(bounds.iter().map(|b| b.1));
        let threshold = *highest.select_nth_unstable_by(keep - 1, f32::total_cmp).1;
        let candidates = scan.iter().zip(bounds.iter()).filter(|(_, b)| b.0 <= threshold).map(|(r, _)| *r).collect();
        if bounds.capacity() > SCAN_SCRATCH_ROWS {
            *bounds = Vec::new();
            *highest = Vec::new();
        }
        candidates
    });
    score(&candidates, &mut hits);
    hits
}

pub struct VectorIndex {
    pub metric: Metric,
    pub dim: u32,
    graph: Hnsw,
    arena: Arc<VectorArena>,
    /// Every row below this id that has a vector in this column is in the graph.
    watermark: AtomicU32,
    /// Watermark of the last dump on disk.
    dumped: AtomicU32,
}

/// Sidecar of a dumped graph: which generation of files holds it and up to
/// which row. Written (atomically) after the graph file, so it never points
/// at a partial dump.
#[derive(Debug, Serialize, Deserialize)]
struct DumpMeta {
    generation: u64,
    watermark: u32,
    metric: Metric,
    dim: u32,
    count: usize,
    /// CRC-32 of the row of each slot in the graph: a dump is only loaded
    /// over an arena that gives its slots to the same rows (retention
    /// rebuilds a column's arena without the removed vectors). Absent in
    /// dumps from before retention, which never renumbered slots.
    #[serde(default)]
    rows_crc: Option<u32>,
}

/// CRC-32 of the rows of the first `count` slots of `arena`.
fn rows_crc(arena: &VectorArena, count: usize) -> Option<u32> {
    let mut crc = crc32fast::Hasher::new();
    for slot in 0..count {
        crc.update(&arena.row(slot as u32)?.to_le_bytes());
    }
    Some(crc.finalize())
}

/// A dumped graph read by [`VectorIndex::read`], not yet checked against
/// the arena's vectors.
pub struct ReadGraph {
    meta: DumpMeta,
    graph: Hnsw,
    arena: Arc<VectorArena>,
    metric: Metric,
    dim: u32,
}

impl ReadGraph {
    /// The graph, if it covers at most `max_rows` rows, the arena holds a
    /// vector for each of its nodes, and gives its slots to the rows it was
    /// dumped with.
    pub fn accept(self, max_rows: u32) -> Option<VectorIndex> {
        let ReadGraph { meta, graph, arena, metric, dim } = self;
        if meta.watermark > max_rows || meta.count > arena.len() {
            return None;
        }
        if meta.rows_crc.is_some_and(|crc| rows_crc(&arena, meta.count) != Some(crc)) {
            return None;
        }
        Some(VectorIndex {
            metric,
            dim,
            graph,
            arena,
            watermark: AtomicU32::new(meta.watermark),
            dumped: AtomicU32::new(meta.watermark),
        })
    }
}

impl VectorIndex {
    pub fn new(metric: Metric, dim: u32, arena: Arc<VectorArena>) -> VectorIndex {
        VectorIndex {
            metric,
            dim,
            graph: Hnsw::new(metric, arena.clone()),
            arena,
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

    /// Rows of the graph's last dump on disk.
    pub fn dumped(&self) -> u32 {
        self.dumped.load(Ordering::Acquire)
    }

    /// Loads the graph dumped under `name` in `dir` over `arena`, if there is
    /// a usable one covering at most `max_rows` rows. A missing, stale or
    /// damaged dump gives `None` and the caller rebuilds from the vectors.
    pub fn load(dir: &Path, name: &str, metric: Metric, arena: Arc<VectorArena>, max_rows: u32) -> Option<VectorIndex> {
        VectorIndex::read(dir, name, metric, arena)?.accept(max_rows)
    }

    /// The first half of [`VectorIndex::load`]: reads the dump's links over
    /// `arena`, which may still be missing vectors the graph links (a
    /// start's replay adds them); [`ReadGraph::accept`] checks the rest.
    pub fn read(dir: &Path, name: &str, metric: Metric, arena: Arc<VectorArena>) -> Option<ReadGraph> {
        let dim = arena.dim() as u32;
        let meta: DumpMeta = serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.json"))).ok()?).ok()?;
        if meta.metric != metric || meta.dim != dim {
            return None;
        }
        let file = std::fs::File::open(dir.join(graph_file(name, meta.generation))).ok()?;
        let graph = Hnsw::read_links(metric, arena.clone(), &mut BufReader::new(file))?;
        (graph.len() == meta.count).then_some(ReadGraph { meta, graph, arena, metric, dim })
    }

    /// Dumps the graph's links when it has grown since the last dump. Must
    /// not run concurrently with inserts (the indexer is stopped or is the
    /// caller).
    pub fn dump(&self, dir: &Path, name: &str) -> Result<()> {
        let watermark = self.watermark();
        if watermark == self.dumped.load(Ordering::Acquire) || self.is_empty() {
            return Ok(());
        }
        std::fs::create_dir_all(dir)?;
        let meta_path = dir.join(format!("{name}.json"));
        let previous: Option<DumpMeta> = std::fs::read(&meta_path).ok().and_then(|b| serde_json::from_slice(&b).ok());
        let generation = previous.as_ref().map_or(1, |m| m.generation + 1);
        let path = dir.join(graph_file(name, generation));
        let mut out = BufWriter::new(std::fs::File::create(&path)?);
        self.graph.write_to(&mut out).map_err(|e| Error::storage(format!("vector dump: {e}")))?;
        out.into_inner().map_err(|e| Error::storage(format!("vector dump: {e}")))?.sync_all()?;
        let count = self.len();
        let meta = DumpMeta {
            generation,
            watermark,
            metric: self.metric,
            dim: self.dim,
            count,
            rows_crc: rows_crc(&self.arena, count),
        };
        let tmp = dir.join(format!("{name}.json.tmp"));
        std::fs::write(&tmp, serde_json::to_vec(&meta).expect("meta serialises"))?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &meta_path)?;
        crate::fsutil::sync_dir(&meta_path)?;
        if let Some(old) = previous {
            let _ = std::fs::remove_file(dir.join(graph_file(name, old.generation)));
        }
        self.dumped.store(watermark, Ordering::Release);
        Ok(())
    }

    /// Links the arena's vectors of rows below `upto` into the graph, on all
    /// cores; returns how many could not be linked.
    pub fn insert_below_row(&self, upto: u32) -> u64 {
        // slots are given in row order, so the rows below `upto` are a prefix
        let (mut lo, mut hi) = (self.graph_slots(), self.arena.len() as u32);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.arena.row(mid) {
                Some(row) if row < upto => lo = mid + 1,
                _ => hi = mid,
            }
        }
        self.graph.insert_upto(lo)
    }

    fn graph_slots(&self) -> u32 {
        self.graph.len() as u32
    }

    /// Bytes of the graph's nodes and links.
    pub fn heap_bytes(&self) -> usize {
        self.graph.heap_bytes()
    }

    /// Vectors in the graph.
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate top-`k` among eligible rows: (row, similarity), best first.
    ///
    /// A walk that finds fewer than `k` rows while the graph holds more
    /// eligible ones (a region the links do not reach, such as thousands of
    /// copies of one vector) is replaced by an exact scan of the eligible
    /// linked rows: a query gets as many rows as there are, never a short
    /// list because of the graph's shape. So is a walk whose candidates
    /// the codes could not tell apart ([`Hnsw::search_checked`]).
    pub fn search(&self, query: &[f32], k: usize, ef: usize, eligible: &RoaringBitmap) -> Vec<(u32, f32)> {
        let arena = &self.arena;
        let _reading = arena.reading();
        let linked = self.graph_slots();
        let accept = |slot: u32| arena.row(slot).is_some_and(|row| eligible.contains(row));
        let (found, tied) = self.graph.search_checked(query, k, ef.max(k), &accept);
        let hits: Vec<(u32, f32)> = found
            .into_iter()
            .filter_map(|(slot, d)| {
                let score = match arena.vector(slot) {
                    Some(v) if self.metric == Metric::L2 && d >= f32::MAX => l2_similarity_wide(query, v),
                    _ => similarity_from_distance(self.metric, d),
                };
                Some((arena.row(slot)?, score))
            })
            .collect();
        if hits.len() >= k && !tied {
            return hits;
        }
        let Some(last) = linked.checked_sub(1).and_then(|slot| arena.row(slot)) else { return hits };
        let reachable = eligible.range_cardinality(..=last);
        if hits.len() as u64 >= reachable.min(k as u64) && !tied {
            return hits;
        }
        let scan = self.linked_slots(eligible, last, linked);
        let mut exact = exact_top(arena, self.metric, query, &scan, k);
        exact.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        exact.truncate(k);
        exact
    }

    /// (row, slot) of each row of `eligible` up to `last` in the first
    /// `linked` slots. Slots are given in row order, so each row's slot is
    /// found by a binary search from the previous one's.
    fn linked_slots(&self, eligible: &RoaringBitmap, last: u32, linked: u32) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut from = 0u32;
        for row in eligible.range(..=last) {
            let (mut lo, mut hi) = (from, linked);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match self.arena.row(mid) {
                    Some(r) if r < row => lo = mid + 1,
                    _ => hi = mid,
                }
            }
            if lo < linked && self.arena.row(lo) == Some(row) {
                out.push((row, lo));
                from = lo + 1;
            } else {
                from = lo;
            }
        }
        out
    }
}

fn graph_file(name: &str, generation: u64) -> String {
    format!("{name}.g{generation}.graph")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coded_scan_keeps_exactly_the_best_rows_of_a_full_scan() {
        use rand::{Rng, SeedableRng};
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            for dim in [2usize, 17, 64, 384] {
                let arena = VectorArena::new(dim);
                let centre: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let mut scan = Vec::new();
                for row in 0..3000u32 {
                    // near copies of one point (scores within the codes'
                    // error of each other) and exact duplicates (ties)
                    let v: Vec<f32> = if row % 10 == 0 {
                        centre.clone()
                    } else {
                        centre.iter().map(|x| x + rng.gen_range(-0.05..0.05)).collect()
                    };
                    scan.push((row * 3, arena.push(row * 3, &prepare(metric, v))));
                }
                let query = prepare(metric, centre.iter().map(|x| x + rng.gen_range(-0.02..0.02)).collect());
                let mut all: Vec<(u32, f32)> = scan
                    .iter()
                    .map(|&(row, slot)| (row, similarity(metric, &query, arena.vector(slot).unwrap())))
                    .collect();
                all.sort_by(order);
                for keep in [1usize, 11, 321, 2999, 3000, 5000] {
                    let mut got = exact_top(&arena, metric, &query, &scan, keep);
                    assert!(got.len() >= keep.min(scan.len()));
                    got.sort_by(order);
                    got.truncate(keep);
                    assert_eq!(got, all[..keep.min(all.len())], "{metric:?} dim {dim} keep {keep}");
                }
            }
        }
    }

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
    fn the_integer_kernel_is_exact_at_every_remainder_and_at_the_extremes() {
        for len in (0..70).chain([4096]) {
            let q: Vec<i16> = (0..len).map(|i| ((i as f32 * 0.37).sin() * 16_383.0) as i16).collect();
            let c: Vec<i8> = (0..len).map(|i| ((i as f32 * 0.11).cos() * 127.0) as i8).collect();
            let plain: i64 = q.iter().zip(&c).map(|(x, y)| i64::from(*x) * i64::from(*y)).sum();
            assert_eq!(dot_q8(&q, &c), plain, "len {len}");
            assert_eq!(dot_q8_lanes(&q, &c), plain, "len {len}");
            let qf: Vec<f32> = q.iter().map(|x| f32::from(*x)).collect();
            let float = dot_q8f(&qf, &c);
            assert!((f64::from(float) - plain as f64).abs() <= 1e-5 * (plain as f64).abs().max(1e4), "len {len}");
        }
        // the largest sum a 4,096-d query and code can give does not overflow
        let (q, c) = (vec![16_383i16; 4096], vec![-127i8; 4096]);
        assert_eq!(dot_q8(&q, &c), -16_383 * 127 * 4096);
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
        // zero vectors must not panic
        let z = prepare(Metric::Cosine, vec![0.0, 0.0]);
        assert_eq!(similarity(Metric::Cosine, &z, &a), 0.0);
        // overflowing products are the least similar, never NaN
        for m in [Metric::Cosine, Metric::Dot, Metric::L2] {
            let s = similarity(m, &[1e30, -1e30], &[1e30, 1e30]);
            assert!(!s.is_nan(), "{m:?}");
        }
    }

    /// Finite f32 components near the ends of the range: the sums overflow
    /// or underflow f32 but every score is still finite and right (found by a
    /// black-box test: a dot column holding [3e38, 3e38] made every vector
    /// query of its table fail, and cosine scores of [1e20, ...] or
    /// [1e-25, ...] came out as exactly 1, -1 or 0).
    #[test]
    fn scores_stay_finite_and_right_at_the_ends_of_the_f32_range() {
        let unit = |v: Vec<f32>| prepare(Metric::Cosine, v);
        let b = unit(vec![1.0, 1.0, 0.0]);
        let expected = similarity(Metric::Cosine, &unit(vec![1.0, 1.0, 1.0]), &b);
        for scale in [1e20f32, 3e19, 1e-25, 1e-40, 3e38] {
            let q = unit(vec![scale, scale, scale]);
            let got = similarity(Metric::Cosine, &q, &b);
            assert!((got - expected).abs() < 1e-6, "{scale}: {got} against {expected}");
            let stored = unit(vec![scale, scale, 0.0]);
            assert!(
                (similarity(Metric::Cosine, &unit(vec![1.0, 0.0, 0.0]), &stored) - 0.70710677).abs() < 1e-6,
                "{scale}"
            );
        }
        // a dot product past f32's range saturates instead of becoming infinite
        assert_eq!(similarity(Metric::Dot, &[3e38, 3e38], &[1.0, 1.0]), f32::MAX);
        assert_eq!(similarity(Metric::Dot, &[3e38, 3e38], &[-1.0, -1.0]), -f32::MAX);
        // and infinities of both signs in the f32 sums no longer make NaN
        assert_eq!(similarity(Metric::Dot, &[3e38, 3e38, -3e38, -3e38], &[1.0, 1.0, 1.0, 1.0]), 0.0);
        assert!(
            similarity(Metric::Dot, &[3e38, 3e38], &[2.0, 2.0]) >= similarity(Metric::Dot, &[1.0, 1.0], &[1.0, 1.0])
        );
        let far = similarity(Metric::L2, &[3e38, 3e38], &[-3e38, -3e38]);
        assert!(far.is_finite() && far > 0.0 && far < 1e-18, "{far}");
        // and l2 past f32's range still orders by distance, not a tie
        let (q, near, farther) = ([1e19f32, 0.0], [1e21f32, 0.0], [1e30f32, 0.0]);
        assert!(similarity(Metric::L2, &q, &near) > similarity(Metric::L2, &q, &farther));
        assert!(similarity(Metric::L2, &q, &[2e19, 0.0]) > similarity(Metric::L2, &q, &near));
        // the exact scan keeps a row whose code cannot bound it
        let arena = VectorArena::new(2);
        let rows: Vec<Vec<f32>> = vec![vec![3e38, 3e38], vec![1.0, 1.0], vec![-1.0, 2.0], vec![0.5, 0.1]];
        for (i, v) in rows.iter().enumerate() {
            arena.push(i as u32, v);
        }
        let scan: Vec<(u32, u32)> = (0..4).map(|i| (i, i)).collect();
        let mut top = exact_top(&arena, Metric::Dot, &[1.0, 1.0], &scan, 2);
        top.sort_by(|a, b| b.1.total_cmp(&a.1));
        assert_eq!(top[0], (0, f32::MAX));
        assert_eq!(top[1].0, 1);
        assert!(top.iter().all(|(_, s)| s.is_finite()));
    }

    fn index_of(metric: Metric, points: &[Vec<f32>]) -> VectorIndex {
        let arena = Arc::new(VectorArena::new(points[0].len()));
        for (row, p) in points.iter().enumerate() {
            arena.push(row as u32, &prepare(metric, p.clone()));
        }
        VectorIndex::new(metric, points[0].len() as u32, arena)
    }

    #[test]
    fn graphs_of_every_metric_build_on_awkward_data() {
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            let points: Vec<Vec<f32>> =
                (0..2000u32).map(|i| vec![(i % 7) as f32, (i % 11) as f32 - 5.0, 1.0]).collect();
            let index = index_of(metric, &points);
            assert_eq!(index.insert_below_row(2000), 0);
            let mut all = RoaringBitmap::new();
            all.insert_range(0..2000);
            let q = prepare(metric, vec![3.0, -2.0, 1.0]);
            assert_eq!(index.search(&q, 5, 64, &all).len(), 5);
        }
    }

    #[test]
    fn inserts_stop_at_the_row_asked_for() {
        let points: Vec<Vec<f32>> = (0..100u32).map(|i| vec![i as f32, 1.0]).collect();
        let index = index_of(Metric::L2, &points);
        index.insert_below_row(40);
        assert_eq!(index.len(), 40);
        index.insert_below_row(1000);
        assert_eq!(index.len(), 100);
    }

    #[test]
    fn dump_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let points: Vec<Vec<f32>> = (0..201u32).map(|i| vec![i as f32, (i % 7) as f32]).collect();
        let index = index_of(Metric::L2, &points[..200]);
        let arena = index.arena.clone();
        index.insert_below_row(200);
        index.set_watermark(200);
        index.dump(dir.path(), "t.emb").unwrap();
        // a second dump after growth replaces the first generation
        arena.push(200, &[500.0, 0.0]);
        index.insert_below_row(201);
        index.set_watermark(201);
        index.dump(dir.path(), "t.emb").unwrap();
        assert!(!dir.path().join("t.emb.g1.graph").exists());
        let loaded = VectorIndex::load(dir.path(), "t.emb", Metric::L2, arena.clone(), 1000).expect("loads");
        assert_eq!(loaded.watermark(), 201);
        assert_eq!(loaded.len(), 201);
        let mut all = RoaringBitmap::new();
        all.insert_range(0..1000);
        assert_eq!(loaded.search(&[500.0, 0.0], 1, 64, &all)[0].0, 200);
        // stale or mismatched dumps are refused
        assert!(VectorIndex::load(dir.path(), "t.emb", Metric::L2, arena.clone(), 100).is_none());
        assert!(VectorIndex::load(dir.path(), "t.emb", Metric::Cosine, arena.clone(), 1000).is_none());
        assert!(VectorIndex::load(dir.path(), "missing", Metric::L2, arena.clone(), 1000).is_none());
        // an arena that gives the slots to other rows (a column retention
        // rebuilt) does not take a graph dumped over the old one
        let renumbered = Arc::new(VectorArena::new(2));
        for (slot, p) in points.iter().enumerate() {
            renumbered.push(if slot == 7 { 1_000 } else { slot as u32 }, p);
        }
        assert!(VectorIndex::load(dir.path(), "t.emb", Metric::L2, renumbered, 2000).is_none());
        let same = Arc::new(VectorArena::new(2));
        for (slot, p) in points.iter().enumerate() {
            same.push(slot as u32, p);
        }
        assert!(VectorIndex::load(dir.path(), "t.emb", Metric::L2, same, 1000).is_some());
        // a damaged dump is refused, not a panic
        std::fs::write(dir.path().join("t.emb.g2.graph"), b"garbage").unwrap();
        assert!(VectorIndex::load(dir.path(), "t.emb", Metric::L2, arena, 1000).is_none());
    }

    #[test]
    fn filtered_search_respects_eligibility() {
        let points: Vec<Vec<f32>> = (0..100u32).map(|i| vec![i as f32, 0.0]).collect();
        let index = index_of(Metric::L2, &points);
        index.insert_below_row(100);
        let mut eligible = RoaringBitmap::new();
        eligible.insert_range(50..100);
        let hits = index.search(&[0.0, 0.0], 3, 64, &eligible);
        let rows: Vec<u32> = hits.iter().map(|h| h.0).collect();
        assert_eq!(rows, vec![50, 51, 52]);
    }
}
