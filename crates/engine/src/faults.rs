//! Fault injection under the storage: named fail points (the `fail` crate, as
//! tikv and tantivy use) at every place the engine touches the disk. They do
//! nothing until a test configures them (`fail::cfg`, or the service's test
//! hook route); then the point returns an I/O error of the kind its argument
//! names, so tests can check what the engine does when the disk fails:
//!
//! | point          | where                                   |
//! |----------------|-----------------------------------------|
//! | `wal::open`    | opening a branch's log for append       |
//! | `wal::append`  | writing a group of frames (`short` writes half, then fails) |
//! | `wal::sync`    | the group's `fdatasync`                  |
//! | `wal::preallocate` | writing zeros ahead of the log's end (best effort: the frames are then appended) |
//! | `wal::copy`    | copying a log prefix (snapshot, restore) |
//! | `catalog::save`| the atomic rewrite of catalog.json (after the new copy is written, before it replaces the old) |
//! | `text::commit` | the tantivy commit of the indexer        |
//! | `text::add`    | handing one row's document to the text index's current part (a writer failing as tantivy's does when its indexing thread fails) |
//! | `records::write` | writing a commit group's fields to the open record file |
//! | `checkpoint::records`, `checkpoint::vectors`, `checkpoint::vectors_sync`, `checkpoint::write`, `checkpoint::rename` | the steps of a checkpoint |
//! | `vector::insert` | linking one row into an HNSW graph (use `panic` to test the indexer) |
//! | `vector::walk` | an HNSW search, which then finds nothing (`return`; tests the exact fallback) |
//! | `indexer::round` | one indexer round, outside its guards (`panic` ends the thread) |
//! | `query::run`   | the start of a hybrid query (`pause` holds it, and the call worker running it) |
//!
//! Arguments: `eio` (default), `enospc`, `erofs`, `short`.

use std::io;

/// An injected failure at `point`, if one is configured.
pub fn check(point: &str) -> io::Result<()> {
    match injected(point) {
        None => Ok(()),
        Some(kind) => Err(kind.error(point)),
    }
}

/// What a configured point asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Eio,
    NoSpace,
    ReadOnly,
    /// Write part of the data, then fail with ENOSPC.
    Short,
}

impl Fault {
    pub fn error(self, point: &str) -> io::Error {
        let code = match self {
            Fault::Eio => 5,
            Fault::NoSpace | Fault::Short => 28,
            Fault::ReadOnly => 30,
        };
        let os = io::Error::from_raw_os_error(code);
        io::Error::new(os.kind(), format!("{os} (injected at {point})"))
    }
}

/// The fault configured at `point`, if any.
pub fn injected(point: &str) -> Option<Fault> {
    fail::eval(point, |arg| match arg.as_deref() {
        Some("enospc") => Fault::NoSpace,
        Some("erofs") => Fault::ReadOnly,
        Some("short") => Fault::Short,
        _ => Fault::Eio,
    })
}

/// Configures a point (`actions` in the `fail` crate's syntax, for example
/// `return(enospc)`, `1*return`, `panic` or `off`).
pub fn configure(point: &str, actions: &str) -> Result<(), String> {
    fail::cfg(point, actions)
}

/// Turns every configured point off.
pub fn clear() {
    for (name, _) in fail::list() {
        fail::remove(name);
    }
}
