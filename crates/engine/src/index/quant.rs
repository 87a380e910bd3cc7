//! Distances from a float query to 8-bit codes ([`Code`]), with a bound on
//! how far each is from the distance to the vector itself.
//!
//! A code is `dim` bytes `c` with `v ≈ scale · c`, each component off by at
//! most `scale / 2`. The query stays in f32 (asymmetric distance), so the
//! only error is the code's: for cosine and dot it is at most
//! `‖q‖₁ · scale / 2`; for L2, `(‖q‖₁ + ‖scale · c‖₁) · scale + dim · scale² / 4`.
//! Both paths that read codes end with the vectors: a graph walk re-ranks
//! the candidates it found, and an exact scan re-scores every row whose
//! bound reaches the best rows (so it stays exact; see
//! `query::rank::vector_exact`).

use super::arena::{Code, VectorArena};
use super::hnsw::distance;
use super::prefetch::{line, prefetch};
use super::vector::{dot, dot_q8, dot_q8f};
use crate::schema::Metric;

/// A query prepared for code distances.
pub struct CodedQuery<'a> {
    pub metric: Metric,
    pub vector: &'a [f32],
    sqnorm: f32,
    l1: f32,
    /// The query in 16 bits, `vector ≈ qscale · q16`, for the integer
    /// kernel (twice the values per instruction of a float one); empty for
    /// a query used a few times ([`CodedQuery::brief`]), which multiplies
    /// floats (qscale 0).
    q16: Vec<i16>,
    qscale: f32,
}

/// The largest 16-bit query component: 4,096 products of it and a code
/// byte sum to less than 2³¹.
const Q16_MAX: f32 = 16_383.0;

/// One point as the walk reads it: its code when it has one, else its vector.
#[derive(Clone, Copy)]
pub enum Point<'a> {
    Code(&'a [i8], &'a Code),
    Vector(&'a [f32]),
}

impl Point<'_> {
    /// Asks the CPU to start loading all of the point's bytes.
    #[inline(always)]
    pub fn prefetch_all(&self) {
        match self {
            Point::Code(bytes, _) => {
                let start = bytes.as_ptr().cast::<u8>();
                for offset in (0..bytes.len()).step_by(64) {
                    line(start.wrapping_add(offset));
                }
            }
            Point::Vector(v) => prefetch(v),
        }
    }
}

/// The code of `slot` if it has one, else its vector.
#[inline(always)]
pub fn point(arena: &VectorArena, slot: u32) -> Option<Point<'_>> {
    match arena.code(slot) {
        Some((bytes, code)) => Some(Point::Code(bytes, code)),
        None => arena.vector(slot).map(Point::Vector),
    }
}

/// Writes into `out` what the graph build compares `slot` by: its code
/// decoded (`scale · c`) when it has one, else its vector. The build reads
/// codes only, so it never brings a vector's page in: vectors a checkpoint
/// mapped from their file stay in the page cache, not in the process's
/// memory, and only a query's final scoring reads them.
pub fn decoded(arena: &VectorArena, slot: u32, out: &mut Vec<f32>) -> bool {
    out.clear();
    match arena.code(slot) {
        Some((bytes, code)) => out.extend(bytes.iter().map(|&c| f32::from(c) * code.scale)),
        None => match arena.vector(slot) {
            Some(v) => out.extend_from_slice(v),
            None => return false,
        },
    }
    true
}

/// Whether the graph build sees two slots as one point (copies): equal
/// codes, bytes and scale, which is all the build compares them by; a slot
/// without a code yet (mapped from a checkpoint, not yet encoded) by its
/// vector. Vectors that differ only below the codes' resolution count as
/// copies: no distance the build computes tells them apart either. Reading
/// the vectors of equal codes "to be sure" brought vector files into the
/// process: one read maps a whole page-cache folio (up to 2 MiB), and
/// loading WordNet's 100,000 glosses, whose copies are many, held 55 MB of
/// vector file pages at the end of the writes for it (bench/JOURNAL.md, "The seventh session").
pub fn same_vector(arena: &VectorArena, a: u32, b: u32) -> bool {
    match (arena.code(a), arena.code(b)) {
        (Some((x, cx)), Some((y, cy))) => x == y && cx.scale.to_bits() == cy.scale.to_bits(),
        _ => matches!((arena.vector(a), arena.vector(b)), (Some(x), Some(y)) if x == y),
    }
}

impl<'a> CodedQuery<'a> {
    pub fn new(metric: Metric, vector: &'a [f32]) -> CodedQuery<'a> {
        let l1 = vector.iter().map(|x| x.abs()).sum();
        let max = vector.iter().fold(0f32, |m, x| m.max(x.abs()));
        let qscale = if max > 0.0 && max.is_finite() { max / Q16_MAX } else { 0.0 };
        let q16 = vector
            .iter()
            .map(|x| if qscale > 0.0 { (x / qscale).round().clamp(-Q16_MAX, Q16_MAX) as i16 } else { 0 })
            .collect();
        CodedQuery { metric, vector, sqnorm: dot(vector, vector), l1, q16, qscale }
    }

    /// A query for a few distances (the graph build's neighbour choices):
    /// no 16-bit copy to allocate and fill, no L1 norm (a serial sum, as
    /// long as the distances it is made for), and the squared norm only for
    /// L2. Its distances are those of [`CodedQuery::new`]; it has no
    /// [`CodedQuery::error`] bound.
    pub fn brief(metric: Metric, vector: &'a [f32]) -> CodedQuery<'a> {
        let sqnorm = if metric == Metric::L2 { dot(vector, vector) } else { 0.0 };
        CodedQuery { metric, vector, sqnorm, l1: f32::NAN, q16: Vec::new(), qscale: 0.0 }
    }

    /// The graph's distance ([`distance`]) to `p`: approximate for a code,
    /// exact for a vector.
    #[inline(always)]
    pub fn distance(&self, p: Point<'_>) -> f32 {
        match p {
            Point::Vector(v) => distance(self.metric, self.vector, v),
            Point::Code(bytes, code) => {
                let d = if self.q16.is_empty() {
                    code.scale * dot_q8f(self.vector, bytes)
                } else {
                    code.scale * self.qscale * dot_q8(&self.q16, bytes) as f32
                };
                let d = match self.metric {
                    Metric::Cosine => 1.0 - d,
                    Metric::Dot => -d,
                    Metric::L2 => self.sqnorm - 2.0 * d + code.sqnorm,
                };
                if d.is_nan() {
                    f32::INFINITY
                } else {
                    d
                }
            }
        }
    }

    /// The lowest and highest distance to `p`'s vector, given `distance`
    /// (this query's [`Self::distance`] to `p`): off by at most
    /// [`Self::error`] either way. A code whose sums overflow (components
    /// near f32's limits) bounds nothing: `(-inf, inf)`, so its vector is
    /// always scored.
    #[inline(always)]
    pub fn bounds(&self, p: Point<'_>, distance: f32) -> (f32, f32) {
        let error = self.error(p);
        let (low, high) = (distance - error, distance + error);
        if low.is_finite() && high.is_finite() {
            (low, high)
        } else {
            (f32::NEG_INFINITY, f32::INFINITY)
        }
    }

    /// At most how far `distance` to `p` is from the distance to the
    /// point's vector: the code's rounding, plus room for the f32 rounding
    /// of both sums (0 for a vector).
    #[inline(always)]
    pub fn error(&self, p: Point<'_>) -> f32 {
        let Point::Code(bytes, code) = p else { return 0.0 };
        let s = code.scale;
        // the largest |v_i| is 127 · s; each sum of `dim` products is off
        // by at most about dim · ε · Σ|terms| (ε = 2⁻²⁴), counted twice
        let terms = self.l1 * 127.0 * s;
        let float = |magnitude: f32| 1.2e-7 * (bytes.len() as f32 + 4.0) * magnitude + 1e-6;
        // the query's own rounding: each component off by at most qscale / 2
        let query = 0.5001 * self.qscale * code.l1;
        match self.metric {
            Metric::Cosine | Metric::Dot => 0.5001 * self.l1 * s + query + float(terms + 1.0),
            Metric::L2 => {
                (self.l1 + code.l1) * s * 1.0001
                    + bytes.len() as f32 * s * s * 0.2501
                    + 2.0 * query
                    + float(self.sqnorm + code.sqnorm + 2.0 * terms)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::vector::prepare;
    use rand::{Rng, SeedableRng};

    #[test]
    fn a_code_distance_is_within_its_bound_of_the_vector_distance() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            for dim in [1usize, 3, 31, 32, 33, 100, 256, 384] {
                let arena = VectorArena::new(dim);
                let spread: f32 = if metric == Metric::L2 { 50.0 } else { 1.0 };
                let points: Vec<Vec<f32>> = (0..200)
                    .map(|i| {
                        let v: Vec<f32> = (0..dim)
                            .map(|j| if i % 7 == 0 && j % 2 == 0 { 0.0 } else { rng.gen_range(-spread..spread) })
                            .collect();
                        prepare(metric, v)
                    })
                    .collect();
                for (row, p) in points.iter().enumerate() {
                    arena.push(row as u32, p);
                }
                assert_eq!(arena.coded(), points.len());
                for q in points.iter().take(20) {
                    let query = CodedQuery::new(metric, q);
                    for (slot, p) in points.iter().enumerate() {
                        let exact = distance(metric, q, p);
                        let coded = point(&arena, slot as u32).unwrap();
                        assert!(matches!(coded, Point::Code(..)));
                        let (approx, err) = (query.distance(coded), query.error(coded));
                        assert!(
                            (exact - approx).abs() <= err,
                            "{metric:?} dim {dim}: exact {exact}, approx {approx}, bound {err}"
                        );
                        // a brief query skips only the query's own rounding,
                        // so the full query's bound holds for it too
                        let brief = CodedQuery::brief(metric, q);
                        let approx_brief = brief.distance(coded);
                        assert!(
                            (exact - approx_brief).abs() <= err,
                            "{metric:?} dim {dim}: brief {approx_brief} vs {exact}"
                        );
                        // the bound is a small part of the sum it bounds
                        let magnitude: f32 = q.iter().zip(p).map(|(x, y)| (x * y).abs()).sum::<f32>()
                            + if metric == Metric::L2 { exact } else { 0.0 };
                        let largest = p.iter().fold(0f32, |m, x| m.max(x.abs()));
                        let l1 = |v: &[f32]| v.iter().map(|x| x.abs()).sum::<f32>();
                        let reach = if metric == Metric::L2 { l1(q) + l1(p) } else { l1(q) };
                        assert!(
                            err <= 0.01 * (1.0 + magnitude + reach * largest),
                            "{metric:?} dim {dim}: bound {err} is loose"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn zero_vectors_get_zero_codes() {
        let arena = VectorArena::new(4);
        arena.push(0, &[0.0; 4]);
        let (bytes, code) = arena.code(0).unwrap();
        assert_eq!(bytes, &[0i8; 4]);
        assert_eq!(code.scale, 0.0);
        let q = [1.0, 0.0, 0.0, 0.0];
        let query = CodedQuery::new(Metric::Dot, &q);
        assert_eq!(query.distance(point(&arena, 0).unwrap()), 0.0);
    }
}
