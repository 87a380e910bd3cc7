//! Retention: the versions no readable epoch can see are removed from
//! memory, from every index and from disk.
//!
//! With `history_epochs = N` the readable horizon is `latest_epoch - N`
//! (storage/branch.rs): reads below it are refused with
//! `temporal_before_horizon`. A version superseded at or before the horizon is
//! visible at no readable epoch, so the committer removes it at each
//! checkpoint, between two write groups:
//!
//! 1. **Memory and indexes** ([`State::purge`]): the version leaves the key
//!    directory, the tenant, scalar and vector bitmaps; its row stays as a
//!    placeholder with no fields, so row ids keep their meaning. Once the
//!    checkpoint's image (which holds the removal) is durable, its text
//!    documents are deleted from tantivy; the deletes commit with the
//!    indexer's next commit, which records the horizon in its payload, and a
//!    start after a crash in between deletes them again. Its vector stays in
//!    its slot, where the graph links through it, but no query is offered it,
//!    until removed versions are half a column's slots: then the indexer
//!    rebuilds the column without them ([`compact_vectors`]).
//! 2. **Disk**: a sealed record file whose removed entries are at least half
//!    its bytes is compacted: the entries that survive are copied verbatim
//!    (checksums included) into the open record file, which this checkpoint
//!    seals, and the old file is deleted once the checkpoint's image, which
//!    no longer names it, is durable. Until then the previous image and every
//!    file it names are intact, so a crash at any point loses nothing; a
//!    start deletes record files no image names.
//!
//! Only rows the text index has been handed are removed (a tantivy delete
//! does not reach documents added after it); the rest go at a later
//! checkpoint. The horizon only grows and is kept in the checkpoint image.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use parking_lot::RwLock;

use crate::error::Result;
use crate::index::text::TextIndex;
use crate::storage::pipeline::Shared;
use crate::storage::records::{self, RecordLoc, HEADER_LEN};
use crate::storage::state::{State, VectorColumn, VectorStore};

/// What one retention pass did.
#[derive(Debug, Default)]
pub(super) struct Purged {
    /// Versions removed from memory and the indexes.
    pub versions: u64,
    /// Sealed record files compacted, and the bytes they no longer take.
    pub files_compacted: u64,
    pub bytes_reclaimed: u64,
    /// Compacted files: deleted once a checkpoint image that does not name
    /// them is durable.
    pub retired: Vec<PathBuf>,
    /// Rows removed that may have text documents: those are deleted once
    /// that image is durable (before, a crash would bring the rows back
    /// without them). Rows of tables without text columns have none, and a
    /// delete of each had held memory in the text index's delete queue
    /// (about 1.5 KB a row, which grew without end on a table of numbers).
    pub removed: Vec<u32>,
}

/// Removes what is below `horizon` from memory, then compacts the sealed
/// record files that removal left at least half empty. Runs in the
/// committer, before a checkpoint seals the open record file; the caller
/// deletes the text documents of [`Purged::removed`] once the checkpoint is
/// durable.
pub(super) fn run(state: &RwLock<State>, text: &TextIndex, horizon: u64) -> Result<Purged> {
    let mut out = Purged::default();
    // rows the text index has not been handed yet are removed next time
    let below = text.pending_upto();
    let (removed, with_text) = state.write().purge(horizon, below);
    out.versions = removed.len() as u64;
    out.removed = with_text;
    compact(state, &mut out)?;
    Ok(out)
}

/// The sealed record files where removed entries take at least half the
/// bytes, each with the (row, location) of the entries that survive, in
/// file order.
fn choose(state: &State) -> Vec<(u32, Vec<(u32, RecordLoc)>)> {
    let sealed = state.records.sealed();
    if sealed.is_empty() || state.purged_rows == 0 {
        return Vec::new();
    }
    let mut live: HashMap<u32, u64> = sealed.iter().map(|g| (*g, 0)).collect();
    for row in state.rows.iter() {
        if let Some(bytes) = live.get_mut(&row.loc.gen) {
            *bytes += u64::from(row.loc.len);
        }
    }
    let chosen: HashMap<u32, Vec<(u32, RecordLoc)>> = live
        .into_iter()
        .filter(|(gen, live)| {
            let entries = state.records.file_len(*gen).unwrap_or(0).saturating_sub(HEADER_LEN);
            entries > *live && *live * 2 <= entries
        })
        .map(|(gen, _)| (gen, Vec::new()))
        .collect();
    if chosen.is_empty() {
        return Vec::new();
    }
    let mut chosen = chosen;
    for (id, row) in state.rows.iter().enumerate() {
        if let Some(rows) = chosen.get_mut(&row.loc.gen) {
            rows.push((id as u32, row.loc));
        }
    }
    let mut out: Vec<(u32, Vec<(u32, RecordLoc)>)> = chosen.into_iter().collect();
    for (_, rows) in &mut out {
        rows.sort_unstable_by_key(|(_, loc)| loc.offset);
    }
    out.sort_unstable_by_key(|(gen, _)| *gen);
    out
}

/// An entry's bytes in a file read whole, when its checksum holds.
fn entry(file: &[u8], loc: RecordLoc) -> Option<&[u8]> {
    let start = usize::try_from(loc.offset).ok()?;
    let bytes = file.get(start..start.checked_add(loc.len as usize)?)?;
    records::checks_out(bytes).then_some(bytes)
}

fn compact(state: &RwLock<State>, out: &mut Purged) -> Result<()> {
    // only this thread changes rows and record files, so what is read under
    // the read lock still holds when the write lock is taken
    let (plan, contents) = {
        let st = state.read();
        let plan = choose(&st);
        let mut contents = Vec::with_capacity(plan.len());
        for (gen, _) in &plan {
            contents.push(st.records.read_sealed(*gen)?);
        }
        (plan, contents)
    };
    if plan.is_empty() {
        return Ok(());
    }
    let mut st = state.write();
    let mut moves: Vec<(u32, RecordLoc)> = Vec::new();
    let mut done: Vec<(u32, u64)> = Vec::new();
    for ((gen, rows), file) in plan.iter().zip(&contents) {
        let Some(entries) =
            rows.iter().map(|(row, loc)| entry(file, *loc).map(|e| (*row, e))).collect::<Option<Vec<_>>>()
        else {
            // a damaged entry: leave the file as it is, so reading that
            // version reports the damage instead of losing it here
            continue;
        };
        let mut copied = 0;
        for (row, bytes) in entries {
            copied += bytes.len() as u64;
            moves.push((row, st.records.stage_copy(bytes)));
        }
        done.push((*gen, (file.len() as u64).saturating_sub(copied)));
    }
    // nothing moves unless the copies are written
    st.records.flush()?;
    for (row, loc) in moves {
        if let Some(r) = st.rows.get_mut(row as usize) {
            r.loc = loc;
        }
    }
    for (gen, reclaimed) in done {
        if let Some(path) = st.records.retire(gen) {
            out.retired.push(path);
            out.files_compacted += 1;
            out.bytes_reclaimed += reclaimed;
        }
    }
    Ok(())
}

/// Rebuilds each vector column whose slots are at least half removed
/// versions: a new arena holding only the vectors of versions that remain
/// (in row order, on the heap until the next checkpoint writes them to its
/// vector file, after which the old files are deleted), and an empty graph.
/// The vector watermark goes back to 0 under the same write lock, so every
/// query from then on scores the column exactly until the indexer has linked
/// it again (storage/indexer.rs). Runs in the indexer thread, the only one
/// that links graphs. Returns (column, vectors kept, vectors removed) per
/// column rebuilt.
pub(super) fn compact_vectors(state: &RwLock<State>, shared: &Shared) -> Vec<(String, u64, u64)> {
    let due: Vec<(String, String)> = {
        let st = state.read();
        let mut due = Vec::new();
        for (table, data) in &st.tables {
            for (column, vc) in &data.vectors {
                let base = vc.data.slot_base() as usize;
                let removed = (base..)
                    .zip(vc.data.slots())
                    .filter(|(row, slot)| **slot > 0 && st.rows[*row].loc.is_purged())
                    .count();
                if removed > 0 && removed * 2 >= vc.data.len() {
                    due.push((table.clone(), column.clone()));
                }
            }
        }
        due
    };
    if due.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut st = state.write();
    let State { rows, tables, .. } = &mut *st;
    for (table, column) in due {
        let Some(vc) = tables.get_mut(&table).and_then(|t| t.vectors.get_mut(&column)) else { continue };
        let mut store = VectorStore::new(vc.data.dim() as u32);
        let base = vc.data.slot_base() as usize;
        for (row, slot) in (base..).zip(vc.data.slots()) {
            if *slot > 0 && !rows[row].loc.is_purged() {
                if let Some(v) = vc.data.get(row as u32) {
                    store.insert(row as u32, v);
                }
            }
        }
        let (kept, before) = (store.len() as u64, vc.data.len() as u64);
        *vc = VectorColumn::over(vc.index.metric, store, vc.rows.clone());
        out.push((format!("{table}.{column}"), kept, before - kept));
    }
    shared.vector_watermark.store(0, Ordering::Release);
    out
}
