//! Hybrid queries: planning, access paths, fusion, explain and paging.

pub mod cursor;
pub mod execute;
pub mod explain;
pub mod fusion;
pub mod graph;
pub mod plan;
mod rank;

pub use execute::RankedCache;
pub use explain::{Explain, ScoreComponents};
pub use plan::{HybridQuery, HybridRow, QueryResponse};
