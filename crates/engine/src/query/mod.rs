//! Hybrid queries: planning, access paths, fusion, explain and paging.

pub mod cursor;
pub mod explain;
pub mod fusion;
pub mod plan;

pub use explain::{Explain, ScoreComponents};
pub use plan::{HybridQuery, HybridRow, QueryResponse, RankedCache};
