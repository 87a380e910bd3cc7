//! Access paths: BM25 text (tantivy), vectors (hnsw_rs), scalar equality and
//! tenant masks (roaring bitmaps, kept in `storage::state`), and the graph
//! neighbourhood over edge columns.

pub mod graph;
pub mod text;
pub mod vector;
