//! The MVCC state of a branch: loaded from the last checkpoint and the WAL
//! tail after it on open.
//!
//! Every committed version is a [`Row`] with a branch-local row id (its
//! position in `rows`, assigned in commit order, so ids are stable across
//! restarts). A row is visible at epoch `e` when
//! `row.epoch <= e < row.superseded_at` and it is not a tombstone. A row in
//! memory is its metadata and where its fields are in the record files
//! (storage/records.rs); fields are read and decoded only when needed.
//!
//! Beside the rows the state keeps the structures that are cheap enough to
//! maintain inside the commit: per-table tenant masks, the live set, scalar
//! equality bitmaps, stored vectors and BM25 statistics. Text and vector
//! graph indexing happens behind, in the indexer thread.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use memmap2::Mmap;
use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tantivy::tokenizer::TextAnalyzer;

use crate::error::Result;
use crate::fields::{Field, Fields};
use crate::index::arena::VectorArena;
use crate::index::text::{self, TextStats};
use crate::index::vector::{self, VectorIndex};
use crate::schema::{ColumnType, Metric, TableSchema};
use crate::storage::commit::{Commit, EncodedRows, Receipt};
use crate::storage::records::{RecordFiles, RecordLoc};
use crate::storage::section::{Section, SectionBuilder, Span};

pub const NOT_SUPERSEDED: u64 = u64::MAX;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub key: u32,
    pub version_id: u32,
    pub epoch: u64,
    pub superseded_at: u64,
    pub deleted: bool,
    /// Where the fields are in the record files.
    pub loc: RecordLoc,
}

impl Row {
    pub fn visible_at(&self, epoch: u64) -> bool {
        !self.deleted && self.epoch <= epoch && epoch < self.superseded_at
    }
}

/// Rows per page of a [`RowTable`].
pub const PAGE_ROWS: usize = 4096;

/// What a row of a dropped page reads as: removed by retention, in no index.
static PURGED_ROW: Row =
    Row { key: u32::MAX, version_id: 0, epoch: 0, superseded_at: 0, deleted: true, loc: RecordLoc::PURGED };

/// Row metadata by row id, in pages of [`PAGE_ROWS`]. A page whose rows
/// retention has all removed is dropped, and its rows read as a removed
/// placeholder, so memory (and the checkpoint image) follow the versions
/// kept rather than every version ever written, as long as the removed
/// versions are old ones (history of rewritten records is).
///
/// The pages of a checkpoint image (format 8 on) stay packed in its
/// section until a row of them is read (then unpacked once) or changed
/// (then held as the table's own): a start unpacks none of them.
#[derive(Default, Clone)]
pub struct RowTable {
    pages: Vec<Page>,
    len: usize,
    /// The section the packed pages lie in.
    section: Section,
}

#[derive(Clone)]
enum Page {
    Held(Vec<Row>),
    /// Packed in the section at the span, unpacked on the first read.
    Packed(Span, OnceLock<Vec<Row>>),
    Dropped,
}

/// Bytes of one row in a packed page: key, version id, epoch, superseded at,
/// deleted, record file, offset, length (little-endian, fixed width).
pub const ROW_BYTES: usize = 4 + 4 + 8 + 8 + 1 + 4 + 8 + 4;

pub fn pack_rows(rows: &[Row], out: &mut Vec<u8>) {
    out.reserve(rows.len() * ROW_BYTES);
    for r in rows {
        out.extend_from_slice(&r.key.to_le_bytes());
        out.extend_from_slice(&r.version_id.to_le_bytes());
        out.extend_from_slice(&r.epoch.to_le_bytes());
        out.extend_from_slice(&r.superseded_at.to_le_bytes());
        out.push(u8::from(r.deleted));
        out.extend_from_slice(&r.loc.gen.to_le_bytes());
        out.extend_from_slice(&r.loc.offset.to_le_bytes());
        out.extend_from_slice(&r.loc.len.to_le_bytes());
    }
}

/// The rows of a packed page; `None` for bytes that are not whole rows or
/// a deleted flag that is neither 0 nor 1.
pub fn unpack_rows(bytes: &[u8]) -> Option<Vec<Row>> {
    if !bytes.len().is_multiple_of(ROW_BYTES) {
        return None;
    }
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let mut rows = Vec::with_capacity(PAGE_ROWS.max(bytes.len() / ROW_BYTES));
    for b in bytes.chunks_exact(ROW_BYTES) {
        rows.push(Row {
            key: u32_at(b, 0),
            version_id: u32_at(b, 4),
            epoch: u64_at(b, 8),
            superseded_at: u64_at(b, 16),
            deleted: match b[24] {
                0 => false,
                1 => true,
                _ => return None,
            },
            loc: RecordLoc { gen: u32_at(b, 25), offset: u64_at(b, 29), len: u32_at(b, 37) },
        });
    }
    Some(rows)
}

impl RowTable {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rows page `n` holds (the last may be partial).
    fn page_len(&self, n: usize) -> usize {
        (self.len - n * PAGE_ROWS).min(PAGE_ROWS)
    }

    /// Page `n`'s rows, unpacked if they were packed.
    fn unpacked(&self, n: usize) -> Option<&Vec<Row>> {
        match self.pages.get(n)? {
            Page::Held(rows) => Some(rows),
            Page::Packed(span, rows) => Some(rows.get_or_init(|| self.unpack(n, *span))),
            Page::Dropped => None,
        }
    }

    /// A packed page's rows. The start checked each page's length; a page
    /// that still does not unpack (a damaged section that passed its
    /// checksum) reads as removed rows rather than stopping the server.
    fn unpack(&self, n: usize, span: Span) -> Vec<Row> {
        let want = self.page_len(n);
        self.section
            .get(span)
            .and_then(unpack_rows)
            .filter(|rows| rows.len() == want)
            .unwrap_or_else(|| vec![PURGED_ROW.clone(); want])
    }

    /// Page `n` as the table's own, to change; `None` when dropped.
    fn held(&mut self, n: usize) -> Option<&mut Vec<Row>> {
        if matches!(self.pages.get(n), Some(Page::Packed(..))) {
            if let Page::Packed(span, rows) = std::mem::replace(&mut self.pages[n], Page::Dropped) {
                let rows = rows.into_inner().unwrap_or_else(|| self.unpack(n, span));
                self.pages[n] = Page::Held(rows);
            }
        }
        match self.pages.get_mut(n)? {
            Page::Held(rows) => Some(rows),
            _ => None,
        }
    }

    pub fn push(&mut self, row: Row) {
        if self.len.is_multiple_of(PAGE_ROWS) {
            self.pages.push(Page::Held(Vec::with_capacity(PAGE_ROWS)));
        }
        let last = self.pages.len() - 1;
        if let Some(page) = self.held(last) {
            page.push(row);
        }
        self.len += 1;
    }

    pub fn get(&self, id: usize) -> &Row {
        if id >= self.len {
            panic!("row {id} is past the last row {}", self.len);
        }
        self.unpacked(id / PAGE_ROWS).map_or(&PURGED_ROW, |rows| &rows[id % PAGE_ROWS])
    }

    /// A row to change; `None` when retention dropped its page.
    pub fn get_mut(&mut self, id: usize) -> Option<&mut Row> {
        self.held(id / PAGE_ROWS)?.get_mut(id % PAGE_ROWS)
    }

    /// Every row in id order (those of dropped pages as placeholders).
    pub fn iter(&self) -> impl Iterator<Item = &Row> + '_ {
        (0..self.len).map(|id| self.get(id))
    }

    /// The pages still held, packed for an image: (page number, its rows
    /// by [`pack_rows`]). A page packed in the section is copied as it is.
    pub fn packed_pages(&self, out: &mut SectionBuilder) -> Vec<(u32, Span)> {
        let bytes = |p: &Page| match p {
            Page::Held(rows) => (rows.len() * ROW_BYTES).next_multiple_of(8),
            Page::Packed(span, _) => (span.len as usize).next_multiple_of(8),
            Page::Dropped => 0,
        };
        out.reserve(self.pages.iter().map(bytes).sum());
        let mut packed = Vec::new();
        let mut pages = Vec::new();
        for (n, page) in self.pages.iter().enumerate() {
            let span = match page {
                Page::Held(rows) => {
                    packed.clear();
                    pack_rows(rows, &mut packed);
                    out.push_bytes(&packed)
                }
                Page::Packed(span, _) => out.push_bytes(self.section.get(*span).unwrap_or_default()),
                Page::Dropped => continue,
            };
            pages.push((n as u32, span));
        }
        pages
    }

    /// The pages holding rows below `end`, to change: (page number, its rows).
    pub fn pages_mut(&mut self, end: usize) -> impl Iterator<Item = (usize, &mut Vec<Row>)> + '_ {
        for n in 0..end.min(self.len).div_ceil(PAGE_ROWS) {
            self.held(n);
        }
        self.pages.iter_mut().enumerate().take(end.div_ceil(PAGE_ROWS)).filter_map(|(n, p)| match p {
            Page::Held(rows) => Some((n, rows)),
            _ => None,
        })
    }

    /// A table of `len` rows from its held pages (ascending page numbers).
    /// `None` when the pages do not fit `len`.
    pub fn from_pages(len: usize, held: Vec<(usize, Vec<Row>)>) -> Option<RowTable> {
        let held = held.into_iter().map(|(n, rows)| (n, rows.len(), Page::Held(rows)));
        RowTable::of_pages(len, held, Section::default())
    }

    /// A table of `len` rows whose held pages are packed in `section` at
    /// the spans given (ascending page numbers). `None` when the pages do
    /// not fit `len` or lie outside the section.
    pub fn from_section(len: usize, packed: Vec<(u32, Span)>, section: Section) -> Option<RowTable> {
        let mut pages = Vec::with_capacity(packed.len());
        for (n, span) in packed {
            let bytes = section.get(span)?;
            if !bytes.len().is_multiple_of(ROW_BYTES) {
                return None;
            }
            pages.push((n as usize, bytes.len() / ROW_BYTES, Page::Packed(span, OnceLock::new())));
        }
        RowTable::of_pages(len, pages.into_iter(), section)
    }

    /// `held`: (page number, its rows, the page).
    fn of_pages(len: usize, held: impl Iterator<Item = (usize, usize, Page)>, section: Section) -> Option<RowTable> {
        let count = len.div_ceil(PAGE_ROWS);
        let mut pages: Vec<Page> = (0..count).map(|_| Page::Dropped).collect();
        for (n, rows, page) in held {
            let want = if n + 1 == count { len - n * PAGE_ROWS } else { PAGE_ROWS };
            if n >= count || rows != want || !matches!(pages[n], Page::Dropped) {
                return None;
            }
            pages[n] = page;
        }
        // a partial last page takes new rows: it is never dropped
        if !len.is_multiple_of(PAGE_ROWS) && pages.last().is_some_and(|p| matches!(p, Page::Dropped)) {
            return None;
        }
        Some(RowTable { pages, len, section })
    }

    /// A table of the rows of a format 1 image, every page held.
    pub fn from_rows(rows: Vec<Row>) -> RowTable {
        let mut table = RowTable::default();
        for row in rows {
            table.push(row);
        }
        table
    }

    /// Drops the full pages whose rows are all removed; returns how many.
    pub fn drop_purged_pages(&mut self) -> usize {
        let full = self.len / PAGE_ROWS;
        let mut dropped = 0;
        for n in 0..full {
            if self.unpacked(n).is_some_and(|rows| rows.iter().all(|r| r.loc.is_purged())) {
                self.pages[n] = Page::Dropped;
                dropped += 1;
            }
        }
        dropped
    }

    /// Bytes of the pages held or unpacked.
    pub fn heap_bytes(&self) -> usize {
        let page = |p: &Page| match p {
            Page::Held(rows) => rows.capacity(),
            Page::Packed(_, rows) => rows.get().map_or(0, Vec::capacity),
            Page::Dropped => 0,
        };
        self.pages.iter().map(page).sum::<usize>() * std::mem::size_of::<Row>()
            + self.pages.capacity() * std::mem::size_of::<Page>()
    }
}

impl std::ops::Index<usize> for RowTable {
    type Output = Row;

    fn index(&self, id: usize) -> &Row {
        self.get(id)
    }
}

pub use crate::storage::keys::{KeyColumns, KeyDirectory, KeyEntry, KeyRef, KeyRows};

/// A scalar value as the equality index keys it. Numbers compare as f64, so
/// `1` and `1.0` are equal.
///
/// A string longer than [`SCALAR_INLINE_BYTES`] is keyed by a digest of it
/// (`Digest`), not by a copy: an inferred string column is both text and
/// scalar, and keying every distinct document text by itself had held the
/// whole text of the corpus in memory and in every checkpoint image. A
/// filter on such a value reads the rows its digest names and keeps those
/// whose field is the value (query/rank.rs), so a collision can never
/// match a wrong row.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScalarKey {
    Str(String),
    Num(u64),
    Bool(bool),
    /// The first 8 bytes of the SHA-256 of a long string (image format 4).
    Digest(u64),
}

/// Strings up to this many bytes are keyed by themselves; longer ones by a
/// digest. Identifiers, labels and categories fit; sentences mostly do not.
pub const SCALAR_INLINE_BYTES: usize = 64;

impl ScalarKey {
    pub fn of(value: &Value) -> Option<ScalarKey> {
        match value {
            Value::String(s) => Some(ScalarKey::of_str(s)),
            Value::Bool(b) => Some(ScalarKey::Bool(*b)),
            Value::Number(n) => n.as_f64().map(|f| ScalarKey::Num(if f == 0.0 { 0 } else { f.to_bits() })),
            _ => None,
        }
    }

    pub fn of_str(s: &str) -> ScalarKey {
        if s.len() <= SCALAR_INLINE_BYTES {
            return ScalarKey::Str(s.to_string());
        }
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(s.as_bytes());
        ScalarKey::Digest(u64::from_le_bytes(digest[..8].try_into().expect("8 bytes")))
    }

    /// True when rows found under this key must be checked against the
    /// value itself (a digest stands for many possible strings).
    pub fn needs_check(&self) -> bool {
        matches!(self, ScalarKey::Digest(_))
    }
}

/// The rows of every version holding one value of a scalar column.
///
/// Most values of an id-like, numeric or free-text column are held by one
/// row, and a bitmap for each of those cost two allocations and most of a
/// checkpoint's load time (1,000,000 records, each with its own number:
/// 450 ms of a 900 ms load). Such a value keeps its row inline.
#[derive(Debug, Clone, PartialEq)]
pub enum Postings {
    One(u32),
    Many(RoaringBitmap),
}

/// A scalar column's equality index: value -> rows.
pub type ScalarValues = crate::FastMap<ScalarKey, Postings>;

/// A scalar column's equality index, built when it is first used if it came
/// from a checkpoint image.
///
/// A start reads the image's bytes of each column and builds nothing: the
/// map is built by the first filter on the column or retention pass, or by
/// the indexer thread soon after the start (`build_scalar_columns` in
/// storage/indexer.rs), whichever comes first. Rows written before that
/// (the log tail a start replays) are kept beside the bytes and merged in
/// by the build. Building every column at the start had been a quarter of
/// a restart at 1,000,000 records (a numeric column with a distinct value
/// per record: 210-280 ms).
pub struct ScalarColumn {
    values: std::sync::OnceLock<ScalarValues>,
    /// The image's bytes of the column until it is built (taken by the
    /// build, which the `OnceLock` runs once).
    image: parking_lot::Mutex<Option<Box<[u8]>>>,
    /// Rows written while the column was unbuilt (cleared by the first
    /// write after the build, which merged them).
    written: ScalarValues,
}

impl Default for ScalarColumn {
    fn default() -> ScalarColumn {
        ScalarColumn::built(ScalarValues::default())
    }
}

impl ScalarColumn {
    pub fn built(values: ScalarValues) -> ScalarColumn {
        ScalarColumn {
            values: std::sync::OnceLock::from(values),
            image: parking_lot::Mutex::new(None),
            written: ScalarValues::default(),
        }
    }

    /// A column to build from `bytes`, as a checkpoint image stores it
    /// ([`crate::storage::checkpoint::scalar_column_bytes`]).
    pub fn from_image(bytes: Box<[u8]>) -> ScalarColumn {
        ScalarColumn {
            values: std::sync::OnceLock::new(),
            image: parking_lot::Mutex::new(Some(bytes)),
            written: ScalarValues::default(),
        }
    }

    /// Adds `row` to the rows of `key`, without building the column.
    pub fn insert(&mut self, key: ScalarKey, row: u32) {
        let values = match self.values.get_mut() {
            Some(values) => {
                if !self.written.is_empty() {
                    // merged by the build
                    self.written = ScalarValues::default();
                }
                values
            }
            None => &mut self.written,
        };
        match values.get_mut(&key) {
            Some(rows) => rows.insert(row),
            None => {
                values.insert(key, Postings::One(row));
            }
        }
    }

    /// The column's postings, built now if they are not yet.
    ///
    /// # Panics
    /// When the image's bytes of the column do not decode. The image passed
    /// its checksum as it was loaded, so the bytes are the ones a checkpoint
    /// wrote; `braid doctor` decodes every column ([`crate::storage::checkpoint::check_image`]).
    pub fn values(&self) -> &ScalarValues {
        self.values.get_or_init(|| {
            let bytes = self.image.lock().take().expect("an unbuilt scalar column keeps its image bytes");
            let mut values = super::checkpoint::decode_scalar_column(&bytes)
                .unwrap_or_else(|e| panic!("a checkpoint's scalar column does not decode: {e}"));
            for (key, rows) in &self.written {
                match (values.get_mut(key), rows) {
                    (Some(to), Postings::One(row)) => to.insert(*row),
                    (Some(to), Postings::Many(rows)) => rows.iter().for_each(|row| to.insert(row)),
                    (None, rows) => {
                        values.insert(key.clone(), rows.clone());
                    }
                }
            }
            values
        })
    }

    pub fn values_mut(&mut self) -> &mut ScalarValues {
        self.values();
        self.written = ScalarValues::default();
        self.values.get_mut().expect("built above")
    }

    /// The column as a checkpoint image stores it: the image's own bytes
    /// while it is unbuilt and unwritten, else its postings encoded.
    pub fn image_bytes(&self) -> Vec<u8> {
        if self.values.get().is_none() && self.written.is_empty() {
            if let Some(bytes) = self.image.lock().as_deref() {
                return bytes.to_vec();
            }
        }
        super::checkpoint::scalar_column_bytes(self.values())
    }

    pub fn is_built(&self) -> bool {
        self.values.get().is_some()
    }
}

impl Postings {
    /// The postings of `rows`, `None` when there are none.
    pub fn of(rows: RoaringBitmap) -> Option<Postings> {
        match rows.len() {
            0 => None,
            1 => rows.min().map(Postings::One),
            _ => Some(Postings::Many(rows)),
        }
    }

    pub fn insert(&mut self, row: u32) {
        match self {
            Postings::One(r) if *r == row => {}
            Postings::One(r) => *self = Postings::Many(RoaringBitmap::from_iter([*r, row])),
            Postings::Many(rows) => {
                rows.insert(row);
            }
        }
    }

    /// Removes `gone`; `false` when no row is left.
    pub fn remove(&mut self, gone: &RoaringBitmap) -> bool {
        match self {
            Postings::One(r) => !gone.contains(*r),
            Postings::Many(rows) => {
                *rows -= gone;
                match Postings::of(std::mem::take(rows)) {
                    Some(left) => {
                        *self = left;
                        true
                    }
                    None => false,
                }
            }
        }
    }

    /// Keeps in `rows` only the rows holding this value.
    pub fn intersect(&self, rows: &mut RoaringBitmap) {
        match self {
            Postings::One(r) => {
                let held = rows.contains(*r);
                rows.clear();
                if held {
                    rows.insert(*r);
                }
            }
            Postings::Many(many) => *rows &= many,
        }
    }

    pub fn len(&self) -> u64 {
        match self {
            Postings::One(_) => 1,
            Postings::Many(rows) => rows.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct VectorColumn {
    pub index: Arc<VectorIndex>,
    /// Prepared vectors of every version that has one.
    pub data: VectorStore,
    /// Rows that have a vector in this column.
    pub rows: RoaringBitmap,
}

impl VectorColumn {
    pub fn new(metric: Metric, dim: u32) -> VectorColumn {
        VectorColumn::over(metric, VectorStore::new(dim), RoaringBitmap::new())
    }

    /// A column over stored vectors, with an empty graph.
    pub fn over(metric: Metric, data: VectorStore, rows: RoaringBitmap) -> VectorColumn {
        let index = Arc::new(VectorIndex::new(metric, data.dim() as u32, data.arena()));
        VectorColumn { index, data, rows }
    }
}

/// The prepared vectors of one column: a row -> slot directory over the
/// column's [`VectorArena`], the one copy of the vectors, which the graph
/// reads too. Slots are given in row order, so an exact scan over eligible
/// rows reads the arena front to back.
///
/// Slots below `sealed_slots` are in vector files written by checkpoints
/// (`sealed` says where, for the checkpoint image); after a restart the
/// arena reads them from those files, mapped.
pub struct VectorStore {
    /// Row id - `slot_base` -> slot + 1; 0 means the row has no vector here.
    slot_of: Vec<u32>,
    /// The first row `slot_of` covers: rows below it have no vector here
    /// (retention rebuilds a column from its first remaining row).
    slot_base: u32,
    arena: Arc<VectorArena>,
    sealed: Vec<VectorChunk>,
    /// Slots held by `sealed`.
    sealed_slots: usize,
}

/// Consecutive slots of a vector file, memory-mapped.
#[derive(Clone)]
pub struct VectorChunk {
    pub map: Arc<Mmap>,
    /// The file itself, which the arena reads vectors from (by path; its
    /// descriptor is not held: `arena::SealedFile`).
    pub file: Arc<crate::index::arena::SealedFile>,
    /// Byte offset in the file (a multiple of 4).
    pub offset: usize,
    /// Vectors in the chunk.
    pub count: usize,
    /// The file's generation, for the checkpoint image.
    pub gen: u32,
}

impl VectorStore {
    pub fn new(dim: u32) -> VectorStore {
        VectorStore {
            slot_of: Vec::new(),
            slot_base: 0,
            arena: Arc::new(VectorArena::new(dim as usize)),
            sealed: Vec::new(),
            sealed_slots: 0,
        }
    }

    pub fn dim(&self) -> usize {
        self.arena.dim()
    }

    /// The arena the column's graph reads.
    pub fn arena(&self) -> Arc<VectorArena> {
        self.arena.clone()
    }

    /// Stores `row`'s vector; false (and nothing stored) when its length is
    /// not the column's dimension. A row is written once: storing a row
    /// again keeps the first vector.
    pub fn insert(&mut self, row: u32, v: &[f32]) -> bool {
        let dim = self.dim();
        if v.len() != dim || dim == 0 {
            return false;
        }
        if self.slot_of.is_empty() {
            self.slot_base = row;
        }
        if row < self.slot_base {
            // a row before the first one stored (not written in row order)
            let shift = (self.slot_base - row) as usize;
            self.slot_of.splice(0..0, std::iter::repeat_n(0, shift));
            self.slot_base = row;
        }
        let at = (row - self.slot_base) as usize;
        if self.slot_of.len() <= at {
            self.slot_of.resize(at + 1, 0);
        }
        if self.slot_of[at] == 0 {
            self.slot_of[at] = self.arena.push(row, v) + 1;
        }
        true
    }

    pub fn get(&self, row: u32) -> Option<&[f32]> {
        self.arena.vector(self.slot(row)?)
    }

    /// The arena slot of `row`'s vector.
    #[inline]
    pub fn slot(&self, row: u32) -> Option<u32> {
        self.slot_of.get(row.checked_sub(self.slot_base)? as usize)?.checked_sub(1)
    }

    /// The column's arena, borrowed.
    pub fn arena_ref(&self) -> &VectorArena {
        &self.arena
    }

    /// Vectors stored.
    pub fn len(&self) -> usize {
        self.arena.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of vectors held on the heap, with the slot directory.
    pub fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.slot_of.len() * 4
    }

    /// The vectors written since the last checkpoint, in slot order.
    pub fn unsealed(&self) -> impl Iterator<Item = &[f32]> {
        (self.sealed_slots as u32..self.arena.len() as u32).filter_map(|slot| self.arena.vector(slot))
    }

    /// Vectors written since the last checkpoint.
    pub fn unsealed_len(&self) -> usize {
        self.arena.len() - self.sealed_slots
    }

    /// The page offset of the first unsealed vector in memory (the vector
    /// file places the unsealed vectors at a file offset that shares it).
    pub fn unsealed_page_offset(&self) -> Option<usize> {
        self.arena.page_offset(self.sealed_slots as u32)
    }

    /// Records that the unsealed vectors are now in a vector file too, and
    /// reads them from it from now on: their whole pages are mapped from it
    /// (the same bytes at the same addresses, held by the page cache instead
    /// of the process: [`VectorArena::back_with_file`]), and re-scoring
    /// reads them with `pread` ([`VectorArena::read_vector`]).
    pub fn seal(&mut self, chunk: VectorChunk) {
        // the checkpoint holds off column rebuilds, so the count matches; a
        // chunk that does not is left unsealed (the next checkpoint writes
        // these vectors again) rather than misplaced
        if chunk.count != self.unsealed_len() {
            debug_assert!(false, "sealing {} vectors of {} unsealed", chunk.count, self.unsealed_len());
            return;
        }
        self.arena.back_with_file(self.sealed_slots as u32, chunk.count, &chunk.file, chunk.offset as u64);
        self.sealed_slots += chunk.count;
        if chunk.count > 0 {
            self.sealed.push(chunk);
        }
    }

    pub fn chunks(&self) -> &[VectorChunk] {
        &self.sealed
    }

    /// Slot + 1 of each row from [`Self::slot_base`] on (0: no vector).
    pub fn slots(&self) -> &[u32] {
        &self.slot_of
    }

    pub fn slot_base(&self) -> u32 {
        self.slot_base
    }

    /// A store loaded from a checkpoint: its slots, read in place from the
    /// sealed chunks. `None` when the chunks do not hold every slot.
    pub fn restored(dim: u32, slot_base: u32, slot_of: Vec<u32>, sealed: Vec<VectorChunk>) -> Option<VectorStore> {
        let sealed_slots: usize = sealed.iter().map(|c| c.count).sum();
        let mut row_of = vec![u32::MAX; sealed_slots];
        for (row, slot) in (slot_base..).zip(slot_of.iter()) {
            if *slot > 0 {
                *row_of.get_mut(*slot as usize - 1)? = row;
            }
        }
        if row_of.contains(&u32::MAX) {
            return None;
        }
        let arena = Arc::new(VectorArena::new(dim as usize));
        let mut first = 0;
        for chunk in &sealed {
            arena.push_mapped(&chunk.map, &chunk.file, chunk.offset, &row_of[first..first + chunk.count])?;
            first += chunk.count;
        }
        Some(VectorStore { slot_of, slot_base, arena, sealed, sealed_slots })
    }
}

#[derive(Default)]
pub struct TableData {
    /// Rows visible at the latest epoch.
    pub live: RoaringBitmap,
    /// Every version of every record in the table, per tenant.
    pub tenants: HashMap<Arc<str>, RoaringBitmap>,
    /// column -> value -> rows (every version holding that value).
    pub scalar: HashMap<String, ScalarColumn>,
    pub vectors: HashMap<String, VectorColumn>,
    pub text_stats: TextStats,
}

/// Idempotency receipts by scoped key, and the bytes they hold.
#[derive(Default)]
pub struct Receipts {
    by_key: HashMap<String, Receipt>,
    /// Sum of the receipts' [`Receipt::bytes`].
    bytes: u64,
}

impl Receipts {
    pub fn get(&self, key: &str) -> Option<&Receipt> {
        self.by_key.get(key)
    }

    /// Adds a receipt, replacing one of its key.
    pub fn insert(&mut self, receipt: Receipt) {
        self.bytes += receipt.bytes();
        if let Some(old) = self.by_key.insert(receipt.key.clone(), receipt) {
            self.bytes -= old.bytes();
        }
    }

    /// Drops the receipts created before `cutoff_ms`.
    pub fn expire(&mut self, cutoff_ms: u64) {
        let mut dropped = 0;
        self.by_key.retain(|_, r| {
            let live = r.created_ms >= cutoff_ms;
            if !live {
                dropped += r.bytes();
            }
            live
        });
        self.bytes -= dropped;
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    pub fn values(&self) -> impl Iterator<Item = &Receipt> {
        self.by_key.values()
    }

    /// Bytes of the receipts' keys, body hashes and responses.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Heap bytes: the map's entries and what they hold.
    pub fn heap_bytes(&self) -> u64 {
        (self.by_key.capacity() * (std::mem::size_of::<(String, Receipt)>() + 1)) as u64 + self.bytes
    }
}

impl FromIterator<Receipt> for Receipts {
    fn from_iter<I: IntoIterator<Item = Receipt>>(receipts: I) -> Self {
        let mut all = Receipts::default();
        for receipt in receipts {
            all.insert(receipt);
        }
        all
    }
}

pub struct State {
    pub rows: RowTable,
    pub keys: KeyDirectory,
    /// Table and tenant names, held once and shared by every key that has them.
    names: std::collections::HashSet<Arc<str>, foldhash::fast::RandomState>,
    pub schemas: BTreeMap<String, TableSchema>,
    pub tables: HashMap<String, TableData>,
    pub receipts: Receipts,
    pub schema_epoch: u64,
    pub latest_epoch: u64,
    pub durable_epoch: u64,
    /// Byte offset of the end of the last applied WAL frame: a snapshot at
    /// `latest_epoch` is exactly the log up to here.
    pub wal_end: u64,
    /// Epochs below this are no longer readable: retention removed the
    /// versions only they could see (storage/retention.rs). It only grows, and
    /// is kept in checkpoints, so a restart with a longer retention setting
    /// does not offer reads of history that is gone.
    pub horizon: u64,
    /// Versions retention removed: their rows stay as placeholders (so row ids
    /// keep their meaning) with no fields, in no index.
    pub purged_rows: u64,
    /// Vector values in the log that are not finite f32s (written before
    /// writes checked it): those rows have no vector.
    pub invalid_vectors: u64,
    /// Where every version's fields are.
    pub records: RecordFiles,
    analyzer: TextAnalyzer,
    /// Scratch for the tokens of the text being counted.
    tokens: text::Tokens,
    /// While a group's text is counted on a thread of its own
    /// ([`State::apply_group`]): the rows retired meanwhile, whose text
    /// leaves the statistics once that thread is done.
    retired_text: Option<Vec<u32>>,
}

/// Rows from which a group counts its text into the BM25 statistics on a
/// thread of its own (about 1.5 µs a row on this machine: tokenising and
/// counting), beside the key directory, bitmaps, postings and vectors.
const TEXT_THREAD_ROWS: usize = 256;

/// Counts the text of every live row of `commits` into the statistics of
/// its table, as [`State::apply_written`] would: `text` holds each table's
/// text columns and statistics.
fn count_text(commits: &[&Commit], text: &mut HashMap<String, (Vec<String>, TextStats)>) {
    let mut analyzer = text::analyzer();
    let mut tokens = text::Tokens::default();
    for row in commits.iter().flat_map(|c| &c.rows) {
        if row.deleted {
            continue;
        }
        let Some((columns, stats)) = text.get_mut(&row.table) else { continue };
        for (column, field) in row.fields.iter() {
            if let (Some(s), true) = (field.as_str(), columns.iter().any(|c| c == column)) {
                stats.apply_str(&row.tenant_id, column, tokens.read(&mut analyzer, s), 1);
            }
        }
    }
}

pub fn key_string(table: &str, tenant: &str, id: &str) -> String {
    format!("{table}\u{0}{tenant}\u{0}{id}")
}

impl State {
    pub fn new(records: RecordFiles) -> State {
        State {
            rows: RowTable::default(),
            keys: KeyDirectory::default(),
            names: Default::default(),
            schemas: BTreeMap::new(),
            tables: HashMap::new(),
            receipts: Receipts::default(),
            schema_epoch: 0,
            latest_epoch: 0,
            durable_epoch: 0,
            wal_end: 0,
            horizon: 0,
            purged_rows: 0,
            invalid_vectors: 0,
            records,
            analyzer: text::analyzer(),
            tokens: text::Tokens::default(),
            retired_text: None,
        }
    }

    /// A version's fields; with `only`, just those.
    pub fn fields(&self, row: u32, only: Option<&[String]>) -> Result<Map<String, Value>> {
        self.records.read(self.rows[row as usize].loc, only)
    }

    /// [`State::fields`] if they can be read without waiting
    /// ([`RecordFiles::read_now`](crate::storage::records::RecordFiles::read_now)), else `None`.
    pub fn fields_now(&self, row: u32, only: Option<&[String]>) -> Option<Result<Map<String, Value>>> {
        self.records.read_now(self.rows[row as usize].loc, only)
    }

    /// One field of a version (None when it does not have it).
    pub fn field(&self, row: u32, name: &str) -> Result<Option<Value>> {
        self.records.read_field(self.rows[row as usize].loc, name)
    }

    pub fn key_of(&self, table: &str, tenant: &str, id: &str) -> Option<KeyRef<'_>> {
        self.keys.find(table, tenant, id).map(|k| self.keys.get(k))
    }

    /// The shared copy of a table or tenant name.
    pub(crate) fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.names.get(name) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(name);
        self.names.insert(shared.clone());
        shared
    }

    /// Appends a new key and indexes it; returns its number.
    pub fn add_key(&mut self, table: &str, tenant: &str, id: &str, rows: KeyRows) -> u32 {
        let (table, tenant) = (self.intern(table), self.intern(tenant));
        self.keys.add(table, tenant, id, rows)
    }

    /// The version of a key visible at `epoch`, if any.
    pub fn visible_version(&self, table: &str, tenant: &str, id: &str, epoch: u64) -> Option<u32> {
        let key = self.key_of(table, tenant, id)?;
        key.rows
            .iter()
            .rev()
            .copied()
            .find(|r| self.rows[*r as usize].epoch <= epoch)
            .filter(|r| self.rows[*r as usize].visible_at(epoch))
    }

    /// The newest version id of a key (including tombstones), 0 if none.
    pub fn last_version_id(&self, table: &str, tenant: &str, id: &str) -> u32 {
        self.key_of(table, tenant, id).and_then(|k| k.rows.last()).map_or(0, |r| self.rows[*r as usize].version_id)
    }

    pub fn key_entry(&self, row: u32) -> KeyRef<'_> {
        self.keys.get(self.rows[row as usize].key)
    }

    /// Applies durable commits in log order (`ends[i]`: the WAL offset after
    /// commit `i`) whose fields [`State::write_records`] wrote to `locs`.
    /// A group of many rows whose schemas it leaves unchanged counts its text
    /// into the BM25 statistics on a thread of its own while this one does
    /// the rest; the statistics end up as applying the commits one by one
    /// leaves them (a count only ever adds or removes one document).
    pub fn apply_group(&mut self, commits: &[&Commit], ends: &[u64], locs: &[Vec<RecordLoc>]) {
        let rows: usize = commits.iter().map(|c| c.rows.len()).sum();
        let mut text = HashMap::new();
        if rows >= TEXT_THREAD_ROWS && commits.iter().all(|c| c.schemas.is_empty()) {
            for row in commits.iter().flat_map(|c| &c.rows) {
                if text.contains_key(&row.table) {
                    continue;
                }
                let Some(schema) = self.schemas.get(&row.table) else { continue };
                let columns: Vec<String> = schema.text_columns().map(str::to_string).collect();
                if !columns.is_empty() {
                    let stats = self.tables.get_mut(&row.table).map(|t| std::mem::take(&mut t.text_stats));
                    text.insert(row.table.clone(), (columns, stats.unwrap_or_default()));
                }
            }
        }
        if text.is_empty() {
            for ((commit, end), locs) in commits.iter().zip(ends).zip(locs) {
                self.apply_written(commit, *end, locs);
            }
            return;
        }
        self.retired_text = Some(Vec::new());
        let text = std::thread::scope(|scope| {
            let counting = scope.spawn(move || {
                count_text(commits, &mut text);
                text
            });
            for ((commit, end), locs) in commits.iter().zip(ends).zip(locs) {
                self.apply_written(commit, *end, locs);
            }
            counting.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        for (table, (_, stats)) in text {
            self.tables.entry(table).or_default().text_stats = stats;
        }
        for row in self.retired_text.take().unwrap_or_default() {
            self.uncount_text(row);
        }
    }

    /// Writes the fields of every row of a group's commits, as their WAL
    /// frames encoded them, to the open record file, before any of them is
    /// applied, and returns where each row's went. On failure nothing is
    /// written nor applied, so the committer can refuse the whole group.
    pub fn write_records(&mut self, commits: &[EncodedRows]) -> Result<Vec<Vec<RecordLoc>>> {
        let locs = commits.iter().map(|c| c.fields().map(|f| self.records.stage(f)).collect()).collect();
        self.records.flush()?;
        Ok(locs)
    }

    /// Applies a commit whose fields [`State::write_records`] wrote to `locs`.
    pub fn apply_written(&mut self, commit: &Commit, wal_end: u64, locs: &[RecordLoc]) {
        if !commit.schemas.is_empty() {
            self.schema_epoch += 1;
            for schema in &commit.schemas {
                let table = self.tables.entry(schema.name.clone()).or_default();
                for (col, dim, metric) in schema.vector_columns() {
                    table.vectors.entry(col.to_string()).or_insert_with(|| VectorColumn::new(metric, dim));
                }
                self.schemas.insert(schema.name.clone(), schema.clone());
            }
        }
        for (wal_row, loc) in commit.rows.iter().zip(locs) {
            let key = match self.keys.find(&wal_row.table, &wal_row.tenant_id, &wal_row.id) {
                Some(k) => k,
                None => self.add_key(&wal_row.table, &wal_row.tenant_id, &wal_row.id, KeyRows::new()),
            };
            let row_id = self.rows.len() as u32;
            if let Some(prev) = self.keys.rows(key).last().copied() {
                self.retire(prev, commit.epoch);
            }
            self.keys.rows_mut(key).push(row_id);
            let loc = *loc;
            self.rows.push(Row {
                key,
                version_id: wal_row.version_id,
                epoch: commit.epoch,
                superseded_at: NOT_SUPERSEDED,
                deleted: wal_row.deleted,
                loc,
            });
            self.admit_row(row_id, &wal_row.fields);
        }
        if let Some(receipt) = &commit.receipt {
            self.receipts.insert(receipt.clone());
        }
        self.latest_epoch = self.latest_epoch.max(commit.epoch);
        self.durable_epoch = self.latest_epoch;
        self.wal_end = wal_end;
    }

    /// Indexes a new row in the structures kept inside the commit.
    fn admit_row(&mut self, row_id: u32, fields: &Fields) {
        let text_elsewhere = self.retired_text.is_some();
        let State { rows, keys, schemas, tables, analyzer, tokens, invalid_vectors, .. } = self;
        let row = &rows[row_id as usize];
        let key = keys.get(row.key);
        if !tables.contains_key(&**key.table) {
            tables.insert(key.table.to_string(), TableData::default());
        }
        let Some(table) = tables.get_mut(&**key.table) else { return };
        match table.tenants.get_mut(key.tenant) {
            Some(rows) => {
                rows.insert(row_id);
            }
            None => {
                table.tenants.insert(key.tenant.clone(), RoaringBitmap::from_iter([row_id]));
            }
        }
        if row.deleted {
            return;
        }
        table.live.insert(row_id);
        let Some(schema) = schemas.get(&**key.table) else { return };
        for (name, field) in fields.iter() {
            let Some(column) = schema.columns.get(name) else { continue };
            let value = match field {
                Field::Value(value) => Some(value),
                Field::Floats(_) => None,
            };
            if column.scalar {
                if let Some(k) = value.and_then(ScalarKey::of) {
                    if !table.scalar.contains_key(name) {
                        table.scalar.insert(name.to_string(), ScalarColumn::default());
                    }
                    if let Some(column) = table.scalar.get_mut(name) {
                        column.insert(k, row_id);
                    }
                }
            }
            if let ColumnType::Vector { metric, .. } = column.ty {
                let v = match field {
                    Field::Value(value) => crate::schema::vector_of(value),
                    Field::Floats(xs) => Some(xs.to_f32s()),
                };
                if let (Some(v), Some(vc)) = (v, table.vectors.get_mut(name)) {
                    if !v.iter().all(|x| x.is_finite()) {
                        // written before writes checked finiteness: no vector for this row
                        *invalid_vectors += 1;
                    } else if vc.data.insert(row_id, &vector::prepare(metric, v)) {
                        vc.rows.insert(row_id);
                    }
                }
            }
            if column.text && !text_elsewhere {
                if let Some(s) = field.as_str() {
                    table.text_stats.apply(key.tenant, name, tokens.read(analyzer, s), 1);
                }
            }
        }
    }

    /// A version stops being the latest: it leaves the live set and the BM25
    /// statistics (which describe the latest epoch).
    fn retire(&mut self, row_id: u32, epoch: u64) {
        let State { rows, keys, tables, .. } = self;
        // the latest version of a key is never removed, so its page is held
        let Some(row) = rows.get_mut(row_id as usize) else { return };
        row.superseded_at = epoch;
        if row.deleted {
            return;
        }
        let key = keys.get(row.key);
        let Some(table) = tables.get_mut(&**key.table) else { return };
        table.live.remove(row_id);
        match &mut self.retired_text {
            Some(later) => later.push(row_id),
            None => self.uncount_text(row_id),
        }
    }

    /// Takes a retired version's text out of the BM25 statistics.
    fn uncount_text(&mut self, row_id: u32) {
        let State { rows, keys, schemas, tables, analyzer, tokens, records, .. } = self;
        let row = &rows[row_id as usize];
        let key = keys.get(row.key);
        let Some(table) = tables.get_mut(&**key.table) else { return };
        let Some(schema) = schemas.get(&**key.table) else { return };
        let columns: Vec<String> = schema.text_columns().map(str::to_string).collect();
        if columns.is_empty() {
            return;
        }
        // an unreadable old version leaves its terms in the statistics (a
        // slightly high document frequency), which is better than failing
        // the write that replaces it
        let Ok(fields) = records.read(row.loc, Some(&columns)) else { return };
        for col in &columns {
            if let Some(s) = fields.get(col).and_then(Value::as_str) {
                table.text_stats.apply(key.tenant, col, tokens.read(analyzer, s), -1);
            }
        }
    }

    /// Removes the versions no read at or after `horizon` can see (those
    /// superseded at or before it) among the rows below `below_row`, from the
    /// key directory and every bitmap, and records `horizon`. Their rows stay
    /// as placeholders ([`RecordLoc::PURGED`]). Returns the rows removed, in
    /// ascending order, and those of them that may have text documents (a
    /// version, not a tombstone, of a table with text columns), whose
    /// documents the text index must delete. The latest version of a key (a
    /// tombstone included, which keeps its version count) is never removed.
    pub fn purge(&mut self, horizon: u64, below_row: u32) -> (Vec<u32>, Vec<u32>) {
        self.horizon = self.horizon.max(horizon);
        let end = (below_row as usize).min(self.rows.len());
        let texted: HashSet<&str> = self
            .schemas
            .iter()
            .filter(|(_, schema)| schema.text_columns().next().is_some())
            .map(|(name, _)| name.as_str())
            .collect();
        let keys = &self.keys;
        let mut purged = Vec::new();
        let mut with_text = Vec::new();
        for (n, page) in self.rows.pages_mut(end) {
            let first = n * PAGE_ROWS;
            for (id, row) in (first..end).zip(page.iter_mut()) {
                if row.superseded_at <= horizon && !row.loc.is_purged() {
                    row.loc = RecordLoc::PURGED;
                    purged.push(id as u32);
                    if !row.deleted && texted.contains(&**keys.get(row.key).table) {
                        with_text.push(id as u32);
                    }
                }
            }
        }
        if purged.is_empty() {
            return (purged, with_text);
        }
        self.purged_rows += purged.len() as u64;
        let gone = RoaringBitmap::from_sorted_iter(purged.iter().copied()).expect("ascending rows");
        let mut touched: Vec<u32> = purged.iter().map(|r| self.rows[*r as usize].key).collect();
        touched.sort_unstable();
        touched.dedup();
        for k in touched {
            let versions = self.keys.rows_mut(k);
            versions.retain(|r| !gone.contains(*r));
            if versions.capacity() > 2 * versions.len() {
                versions.shrink_to_fit();
            }
        }
        for table in self.tables.values_mut() {
            table.live -= &gone;
            for rows in table.tenants.values_mut() {
                *rows -= &gone;
            }
            for values in table.scalar.values_mut().map(ScalarColumn::values_mut) {
                values.retain(|_, rows| rows.remove(&gone));
            }
            for vc in table.vectors.values_mut() {
                // the vector stays in its slot (the graph links through it)
                // but no query is offered the row again
                vc.rows -= &gone;
            }
        }
        self.rows.drop_purged_pages();
        (purged, with_text)
    }

    /// Number of live records in all tables.
    pub fn live_records(&self) -> u64 {
        self.tables.values().map(|t| t.live.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use roaring::RoaringBitmap;

    use super::{Postings, VectorStore};

    #[test]
    fn postings_keep_one_row_inline_and_a_bitmap_for_more() {
        let mut p = Postings::One(4);
        p.insert(4);
        assert_eq!(p, Postings::One(4), "the same row again changes nothing");
        p.insert(9);
        assert_eq!(p, Postings::Many(RoaringBitmap::from_iter([4, 9])));
        assert_eq!(p.len(), 2);
        let mut rows = RoaringBitmap::from_iter([1, 4, 5]);
        p.intersect(&mut rows);
        assert_eq!(rows, RoaringBitmap::from_iter([4]));
        // removal back to one row keeps it inline; to none reports empty
        assert!(p.remove(&RoaringBitmap::from_iter([9, 100])));
        assert_eq!(p, Postings::One(4));
        let mut rows = RoaringBitmap::from_iter([1, 5]);
        p.intersect(&mut rows);
        assert!(rows.is_empty(), "a row the value does not hold is not kept");
        assert!(p.remove(&RoaringBitmap::from_iter([3])));
        assert!(!p.remove(&RoaringBitmap::from_iter([4])));
        assert_eq!(Postings::of(RoaringBitmap::new()), None);
    }

    #[test]
    fn vector_store_keeps_rows_apart_and_refuses_wrong_lengths() {
        let mut store = VectorStore::new(3);
        assert!(store.is_empty());
        assert!(store.insert(7, &[1.0, 2.0, 3.0]));
        assert!(store.insert(2, &[4.0, 5.0, 6.0]));
        assert!(!store.insert(9, &[1.0, 2.0]), "a vector of another dimension is refused");
        assert_eq!(store.get(7), Some(&[1.0, 2.0, 3.0][..]));
        assert_eq!(store.get(2), Some(&[4.0, 5.0, 6.0][..]));
        assert_eq!(store.get(9), None);
        assert_eq!(store.get(3), None, "rows between stored ones have no vector");
        assert_eq!(store.get(1_000_000), None);
        // a row is written once: writing it again keeps the first vector
        assert!(store.insert(7, &[0.0, 0.0, 1.0]));
        assert_eq!(store.get(7), Some(&[1.0, 2.0, 3.0][..]));
        assert_eq!(store.len(), 2);
    }
}
