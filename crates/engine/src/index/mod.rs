//! Access paths: BM25 text (tantivy), vectors (an HNSW graph over each
//! column's vector arena), scalar equality and tenant masks (roaring bitmaps,
//! kept in `storage::state`). The graph neighbourhood over edge columns is a
//! walk over the stored rows at query time (`query::graph`), not an index;
//! nothing here depends on `storage`.

pub mod arena;
pub mod hnsw;
pub mod prefetch;
pub mod quant;
pub mod text;
pub mod vector;
