//! Fusion of ranked candidate lists into one score.
//!
//! - `rrf` (default): `final = sum over paths of 1 / (60 + rank)`, rank from 1.
//! - `relative_score`: each path's scores are min-max normalised to [0, 1]
//!   within the candidate list and combined as a weighted mean over the paths
//!   the query requested. An open-ended list (a text-only query's, which
//!   paging deepens) is normalised against 0 instead of its lowest score.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

pub const RRF_K: f64 = 60.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FusionMethod {
    Rrf,
    RelativeScore,
}

impl FusionMethod {
    pub fn parse(s: &str) -> Option<FusionMethod> {
        match s {
            "rrf" => Some(FusionMethod::Rrf),
            "relative_score" => Some(FusionMethod::RelativeScore),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FusionMethod::Rrf => "rrf",
            FusionMethod::RelativeScore => "relative_score",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weights {
    #[serde(default = "one")]
    pub lexical: f64,
    #[serde(default = "one")]
    pub vector: f64,
    #[serde(default = "one")]
    pub relational: f64,
}

fn one() -> f64 {
    1.0
}

impl Default for Weights {
    fn default() -> Self {
        Weights { lexical: 1.0, vector: 1.0, relational: 1.0 }
    }
}

/// The ranked output of one access path: (row, raw score), best first.
pub struct PathList<'a> {
    pub path: Path,
    pub hits: &'a [(u32, f32)],
    /// The list is a prefix of a deeper one that a later page may rank (a
    /// text-only query's): `relative_score` divides by its best score, which
    /// every depth shares, instead of min-max normalising, whose minimum
    /// falls as the list deepens and would rescore the rows already served.
    pub open_ended: bool,
}

impl<'a> PathList<'a> {
    pub fn new(path: Path, hits: &'a [(u32, f32)]) -> PathList<'a> {
        PathList { path, hits, open_ended: false }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    Lexical,
    Vector,
    Relational,
}

#[derive(Debug, Clone, Default)]
pub struct Fused {
    pub final_score: f64,
    pub lexical: Option<f64>,
    pub vector: Option<f64>,
    pub relational: Option<f64>,
    /// Upper bound of the final score had the row ranked first in every
    /// requested path it is missing from.
    pub upper_bound: f64,
}

fn weight(weights: &Weights, path: Path) -> f64 {
    match path {
        Path::Lexical => weights.lexical,
        Path::Vector => weights.vector,
        Path::Relational => weights.relational,
    }
}

/// Fuses the lists. Component scores are the paths' raw scores (BM25,
/// similarity, 1/hops); `final_score` is the fused value.
pub fn fuse(method: FusionMethod, weights: &Weights, lists: &[PathList<'_>]) -> HashMap<u32, Fused> {
    let mut out: HashMap<u32, Fused> = HashMap::new();
    // each path's share of the weights, taken against the largest first:
    // weights near f64's limit (1e308) summed to infinity, and every
    // relative_score came out 0
    let top = lists.iter().map(|l| weight(weights, l.path)).fold(0.0, f64::max);
    let share = |path: Path| if top > 0.0 { weight(weights, path) / top } else { 0.0 };
    let total_weight: f64 = lists.iter().map(|l| share(l.path)).sum::<f64>().max(f64::MIN_POSITIVE);
    for list in lists {
        let (min, max) = list
            .hits
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, s)| (lo.min(*s as f64), hi.max(*s as f64)));
        let min = if list.open_ended { min.min(0.0) } else { min };
        for (rank, (row, raw)) in list.hits.iter().enumerate() {
            let entry = out.entry(*row).or_default();
            let raw = *raw as f64;
            match list.path {
                Path::Lexical => entry.lexical = Some(raw),
                Path::Vector => entry.vector = Some(raw),
                Path::Relational => entry.relational = Some(raw),
            }
            entry.final_score += match method {
                FusionMethod::Rrf => 1.0 / (RRF_K + rank as f64 + 1.0),
                FusionMethod::RelativeScore => {
                    let norm = if max > min { (raw - min) / (max - min) } else { 1.0 };
                    share(list.path) * norm / total_weight
                }
            };
        }
    }
    for fused in out.values_mut() {
        let mut bound = fused.final_score;
        for list in lists {
            let present = match list.path {
                Path::Lexical => fused.lexical.is_some(),
                Path::Vector => fused.vector.is_some(),
                Path::Relational => fused.relational.is_some(),
            };
            if !present {
                bound += match method {
                    FusionMethod::Rrf => 1.0 / (RRF_K + 1.0),
                    FusionMethod::RelativeScore => share(list.path) / total_weight,
                };
            }
        }
        fused.upper_bound = bound;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_score_weights_near_the_f64_limit_fuse_as_equal_ones_do() {
        let text = [(1, 9.0), (2, 5.0), (3, 1.0)];
        let vec = [(2, 0.9), (3, 0.8), (1, 0.1)];
        let lists = [PathList::new(Path::Lexical, &text), PathList::new(Path::Vector, &vec)];
        let equal = |w: f64| {
            let weights = Weights { lexical: w, vector: w, ..Weights::default() };
            let fused = fuse(FusionMethod::RelativeScore, &weights, &lists);
            let mut scores: Vec<(u32, f64)> = fused.iter().map(|(r, f)| (*r, f.final_score)).collect();
            scores.sort_by_key(|(r, _)| *r);
            scores
        };
        let one = equal(1.0);
        for w in [1e10, 1e300, 1e308, f64::MAX] {
            let big = equal(w);
            for (a, b) in one.iter().zip(&big) {
                assert_eq!(a.0, b.0);
                assert!((a.1 - b.1).abs() < 1e-12, "weight {w}: {a:?} against {b:?}");
            }
        }
        assert!(one.iter().any(|(_, s)| *s > 0.5));
    }

    #[test]
    fn rrf_rewards_agreement() {
        let text = [(1, 9.0), (2, 5.0), (3, 1.0)];
        let vec = [(2, 0.9), (3, 0.8), (1, 0.1)];
        let fused = fuse(
            FusionMethod::Rrf,
            &Weights::default(),
            &[PathList::new(Path::Lexical, &text), PathList::new(Path::Vector, &vec)],
        );
        // 2 is 2nd and 1st; 1 is 1st and 3rd
        assert!(fused[&2].final_score > fused[&1].final_score);
        assert!((fused[&2].final_score - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-12);
        assert_eq!(fused[&1].lexical, Some(9.0));
        assert_eq!(fused[&1].relational, None);
    }

    #[test]
    fn relative_score_uses_weights() {
        let text = [(1, 10.0), (2, 0.0)];
        let vec = [(2, 1.0), (1, 0.0)];
        let lists = [PathList::new(Path::Lexical, &text), PathList::new(Path::Vector, &vec)];
        let w = Weights { lexical: 3.0, vector: 1.0, relational: 1.0 };
        let fused = fuse(FusionMethod::RelativeScore, &w, &lists);
        assert!((fused[&1].final_score - 0.75).abs() < 1e-12);
        assert!((fused[&2].final_score - 0.25).abs() < 1e-12);
    }

    #[test]
    fn upper_bound_counts_missing_paths() {
        let text = [(1, 1.0)];
        let vec = [(2, 1.0)];
        let fused = fuse(
            FusionMethod::Rrf,
            &Weights::default(),
            &[PathList::new(Path::Lexical, &text), PathList::new(Path::Vector, &vec)],
        );
        assert!((fused[&1].upper_bound - 2.0 / 61.0).abs() < 1e-12);
    }
}
