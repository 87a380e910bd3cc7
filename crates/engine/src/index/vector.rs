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

use std::sync::atomic::{AtomicUsize, Ordering};

use hnsw_rs::anndists::dist::distances::Distance;
use hnsw_rs::prelude::Hnsw;
use roaring::RoaringBitmap;

use crate::schema::Metric;

pub const MAX_NB_CONNECTION: usize = 16;
pub const EF_CONSTRUCTION: usize = 200;
pub const MAX_LAYER: usize = 16;

/// The distance hnsw_rs orders by: lower is closer. Never panics on odd input
/// (zero vectors score as orthogonal).
#[derive(Debug, Clone, Copy)]
pub struct MetricDist(pub Metric);

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl Distance<f32> for MetricDist {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        match self.0 {
            Metric::Cosine => 1.0 - dot(a, b),
            Metric::Dot => -dot(a, b),
            Metric::L2 => a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>().sqrt(),
        }
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
        Metric::Dot => -distance,
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
}

impl VectorIndex {
    pub fn new(metric: Metric, dim: u32, expected: usize) -> VectorIndex {
        let hnsw = Hnsw::new(MAX_NB_CONNECTION, expected.max(1024), MAX_LAYER, EF_CONSTRUCTION, MetricDist(metric));
        VectorIndex { metric, dim, hnsw, inserted: AtomicUsize::new(0) }
    }

    /// Inserts a prepared vector under its row id.
    pub fn insert(&self, row: u32, v: &[f32]) {
        self.hnsw.insert_slice((v, row as usize));
        self.inserted.fetch_add(1, Ordering::Relaxed);
    }

    /// Inserts many prepared vectors using hnsw_rs's parallel insert.
    pub fn insert_many(&self, items: &[(u32, std::sync::Arc<[f32]>)]) {
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
    fn similarities_order_like_distances() {
        let a = prepare(Metric::Cosine, vec![1.0, 0.0]);
        let b = prepare(Metric::Cosine, vec![1.0, 1.0]);
        let c = prepare(Metric::Cosine, vec![-1.0, 0.0]);
        assert!(similarity(Metric::Cosine, &a, &b) > similarity(Metric::Cosine, &a, &c));
        assert!((similarity(Metric::Cosine, &a, &a) - 1.0).abs() < 1e-6);
        assert_eq!(similarity(Metric::L2, &[0.0, 0.0], &[3.0, 4.0]), 1.0 / 6.0);
        assert_eq!(similarity(Metric::Dot, &[1.0, 2.0], &[3.0, 4.0]), 11.0);
        // zero vectors must not panic
        let z = prepare(Metric::Cosine, vec![0.0, 0.0]);
        assert_eq!(similarity(Metric::Cosine, &z, &a), 0.0);
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
