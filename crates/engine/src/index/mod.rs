//! Access paths: BM25 text (tantivy), vectors (an HNSW graph over each
//! column's vector arena), scalar equality and tenant masks (roaring bitmaps,
//! kept in `storage::state`), and the graph neighbourhood over edge columns.

pub mod arena;
pub mod graph;
pub mod hnsw;
pub mod text;
pub mod vector;
