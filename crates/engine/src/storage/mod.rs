//! Durable storage of one branch: the WAL, the record files, checkpoints,
//! the MVCC state loaded from them, group commit, and the indexer that feeds
//! the text and vector indexes behind the writes, and the counters and events
//! they report.

mod admission;
pub mod branch;
pub mod checkpoint;
pub mod codec;
pub mod commit;
mod committer;
pub mod events;
mod indexer;
pub mod keys;
pub mod lock;
mod pipeline;
pub mod records;
mod retention;
pub mod section;
pub mod state;
pub mod stats;
pub mod wal;

pub use branch::{Branch, BranchConfig, Reply, WriteOp, WriteOutcome, WriteResult, WriteTiming};
pub use commit::{Commit, Receipt, ReceiptDraft, WalRow};
pub use pipeline::IndexingGate;
pub use state::{Row, ScalarKey, State, TableData};
