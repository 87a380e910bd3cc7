//! Braid's engine: durable multi-tenant records with full history, and hybrid
//! queries over them. No napi here; `crates/node` binds it for Node.
//!
//! Layout: `storage` (WAL, MVCC state, group commit, indexer), `schema`,
//! `index` (text, vector, graph), `query` (plan, fusion, explain, cursor),
//! `engine` (catalog of databases, branches and snapshots).

pub mod doctor;
pub mod engine;
pub mod error;
pub mod faults;
pub mod fields;
pub mod fsutil;
pub mod index;
pub mod memory;
pub mod model;
pub mod names;
pub mod query;
pub mod schema;
pub mod storage;
pub mod wire;

pub use engine::{BranchEvent, BranchSummary, Engine, EngineConfig, Metrics, RestoreOutcome};
pub use error::{Code, Error, Result};
pub use fields::{Field, Fields};
pub use model::{RecordInput, RecordKey, RecordOutput};

/// A hash map for the maps the commit path and replay update per row and per
/// token (the key directory, BM25 document frequencies): foldhash is faster
/// than std's SipHash on short strings and, seeded per process
/// like std's, keeps hostile keys from choosing collisions.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Versions of the engine's modules, reported by explain.
pub fn module_versions() -> Vec<String> {
    vec![
        format!("braid-engine/{}", env!("CARGO_PKG_VERSION")),
        format!("wal/{}", storage::wal::FORMAT_VERSION),
        "tantivy/0.27".to_string(),
        "hnsw/1".to_string(),
        "fusion/rrf-60+relative_score".to_string(),
        "cursor/1".to_string(),
    ]
}
