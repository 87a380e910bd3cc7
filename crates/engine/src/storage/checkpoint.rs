//! Checkpoints: the state a WAL replay would rebuild, persisted, so a start
//! replays only the log written after the last one.
//!
//! A branch directory holds, per generation `g`:
//!
//! ```text
//! wal-<g>.log         the WAL segment of generation g (storage/wal.rs)
//! records-<g>.dat     the fields of the versions written in generation g
//! vectors-<g>.f32     the prepared vectors written in generation g
//! checkpoint-<g>.ckpt the state as of the start of generation g
//! ```
//!
//! A checkpoint that starts generation `n` fsyncs `records-<g>.dat`, writes
//! and fsyncs `vectors-<g>.f32`, creates `wal-<n>.log`, then writes its image
//! to a temporary file, fsyncs it and renames it to `checkpoint-<n>.ckpt`
//! (the commit point). Only then do writes go to the new segment and are
//! the segments and images before `n` deleted. A crash before the rename
//! leaves the previous checkpoint and every segment after it; a crash after
//! leaves files the next start deletes. Sealed record and vector files never
//! change again, so they can be copied (or shipped) as they are.
//!
//! Image file: `b"BRAIDCKP" | format u32 | crc u32 (CRC-32 of body) |
//! body length u64 | body` where body is an [`Image`] in postcard, then
//! (format 8 on) zero bytes to the next multiple of 8, the section (the
//! key directory and the packed row pages, which a start reads where they
//! lie: storage/section.rs) and its trailer `b"BRSECTON" | section length
//! u64 | crc u32 (CRC-32 of the section) | format u32`. A data directory
//! whose image has a newer format is refused, not guessed at.
//!
//! Vector file: the f32 vectors (little-endian, at the offsets the image
//! gives), then a trailer `b"BRVECSUM" | data length u64 | crc u32 (CRC-32
//! of the data) | generation u32`. A start checks it before it maps the
//! vectors, so a damaged file, or another generation's file copied over it,
//! is refused instead of served. A file written before the trailer existed
//! has none: it is read unchecked when it is whole f32 values reaching its
//! image's last vector in it, as such a file is (an older build reads a
//! file with a trailer as before: the trailer lies past every chunk).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use parking_lot::RwLock;
use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

use crate::error::{Code, Error, Result};
use crate::faults;
use crate::fsutil;
use crate::index::arena::SealedFile;
use crate::index::text::{PackedScope, ScopeImage, ScopeStats, StoredScope, TextStats};
use crate::schema::TableSchema;
use crate::storage::commit::Receipt;
use crate::storage::keys::KeySpans;
use crate::storage::records::{self, RecordFiles};
use crate::storage::section::{Section, SectionBuilder, Span};
use crate::storage::state::{
    unpack_rows, KeyColumns, KeyDirectory, Postings, Row, RowTable, ScalarColumn, ScalarKey, ScalarValues, State,
    TableData, VectorChunk, VectorColumn, VectorStore, SCALAR_INLINE_BYTES,
};
use crate::storage::wal;

/// 7: each scalar column's values and rows in a byte string of its own
/// ([`scalar_column_bytes`]), kept as they are by a start and decoded when
/// the column is first used ([`ScalarColumn`]).
/// 6: a scope's document frequencies packed in one byte string
/// ([`PackedScope`]), built into their map beside the scalar postings.
/// 5: BM25 statistics per (tenant, column) only; a tenant's are their sum
/// (before, a tenant-wide copy was stored too, and is dropped as it loads).
/// 4: a string scalar value longer than `SCALAR_INLINE_BYTES` is stored
/// as its digest (`ScalarKey::Digest`), not itself.
/// 3: a scalar value held by one row stores that row, not a bitmap
/// ([`PostingsImage`]).
/// 2: rows in packed pages (pages retention emptied are left out), the key
/// directory column-wise, and vector slot directories from their first row.
/// 1 (rows and keys as postcard structs) to 6 are still read; before 4,
/// long string values are keyed by digest as they are loaded.
/// 8: the key directory (with a hash table of its keys) and the packed row
/// pages in the image's section, read in place ([`RowsImage`],
/// [`KeySpans`]); the count of removed rows stored, not counted.
pub const FORMAT_VERSION: u32 = 8;
const SECTION_MAGIC: &[u8; 8] = b"BRSECTON";
const SECTION_TRAILER_LEN: usize = 24;
const MAGIC: &[u8; 8] = b"BRAIDCKP";
const HEADER_LEN: usize = 24;

pub fn file_name(gen: u32) -> String {
    format!("checkpoint-{gen:08}.ckpt")
}

pub fn wal_name(gen: u32) -> String {
    format!("wal-{gen:08}.log")
}

pub fn vectors_name(gen: u32) -> String {
    format!("vectors-{gen:08}.f32")
}

/// The generation in a file name of the form `<prefix><gen><suffix>`.
fn gen_in(name: &str, prefix: &str, suffix: &str) -> Option<u32> {
    name.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()
}

/// Generations of the files of one kind in `dir`, ascending.
pub fn generations(dir: &Path, prefix: &str, suffix: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(gen) = name.to_str().and_then(|n| gen_in(n, prefix, suffix)) {
            out.push(gen);
        }
    }
    out.sort_unstable();
    Ok(out)
}

pub fn wal_generations(dir: &Path) -> Result<Vec<u32>> {
    generations(dir, "wal-", ".log")
}

/// The generation of the newest checkpoint in `dir`, if any.
pub fn latest(dir: &Path) -> Result<Option<u32>> {
    Ok(generations(dir, "checkpoint-", ".ckpt")?.last().copied())
}

/// `C`: how a scalar column is stored (from format 7 its own byte string,
/// [`scalar_column_bytes`]; before, its values and their rows in line,
/// [`Columns`]). `S`: how the BM25 statistics are stored. `P`, `K` and `V`:
/// the row pages, key directory and vector slot directories (from format 8
/// where they lie in the section; before, in the body: [`BodyPages`],
/// [`KeysImage`], `Vec<u32>`).
#[derive(Serialize, Deserialize)]
struct Image<C = ByteBuf, S = PackedScope, P = RowsImage, K = KeySpans, V = Span> {
    /// WAL segments from this generation on are the tail to replay.
    gen: u32,
    created_ms: u64,
    schema_epoch: u64,
    latest_epoch: u64,
    horizon: u64,
    invalid_vectors: u64,
    /// Sealed record files.
    record_files: Vec<u32>,
    /// Rows in all, and the pages held (page number, its rows packed by
    /// [`pack_rows`]); the rows of a page left out were all removed by
    /// retention.
    row_count: u64,
    row_pages: P,
    keys: K,
    /// JSON: schemas and receipts hold JSON values, which postcard cannot
    /// describe; both are small next to the rows.
    schemas_json: Vec<u8>,
    receipts_json: Vec<u8>,
    tables: Vec<TableImage<C, S, V>>,
    /// (table, column, first row) of each vector column's slot directory.
    slot_bases: Vec<(String, String, u32)>,
}

/// Row pages in the body (formats 2 to 7).
type BodyPages = Vec<(u32, ByteBuf)>;

/// An image of formats 2 to 7.
type BodyImage<C, S> = Image<C, S, BodyPages, KeysImage, Vec<u32>>;

/// Row pages in the section (format 8 on).
#[derive(Serialize, Deserialize, Default)]
struct RowsImage {
    /// Rows retention removed (on a page still held or not).
    purged: u64,
    pages: Vec<(u32, Span)>,
}

/// Format 1: every row, slot directories from row 0.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct ImageV1 {
    gen: u32,
    created_ms: u64,
    schema_epoch: u64,
    latest_epoch: u64,
    horizon: u64,
    invalid_vectors: u64,
    record_files: Vec<u32>,
    rows: Vec<Row>,
    keys: Vec<KeyImage>,
    schemas_json: Vec<u8>,
    receipts_json: Vec<u8>,
    tables: Vec<TableImage<Columns<ByteBuf>, ScopeStats, Vec<u32>>>,
}

impl ImageV1 {
    fn upgrade(self) -> (BodyImage<Columns<ByteBuf>, ScopeStats>, RowTable) {
        let image = Image {
            gen: self.gen,
            created_ms: self.created_ms,
            schema_epoch: self.schema_epoch,
            latest_epoch: self.latest_epoch,
            horizon: self.horizon,
            invalid_vectors: self.invalid_vectors,
            record_files: self.record_files,
            row_count: self.rows.len() as u64,
            row_pages: Vec::new(),
            keys: KeysImage::of(self.keys.into_iter().map(|k| (k.table, k.tenant, k.id, k.rows))),
            schemas_json: self.schemas_json,
            receipts_json: self.receipts_json,
            tables: self.tables,
            slot_bases: Vec::new(),
        };
        (image, RowTable::from_rows(self.rows))
    }
}

/// A key of a format 1 image.
#[derive(Serialize, Deserialize)]
struct KeyImage {
    table: String,
    tenant: String,
    id: String,
    rows: Vec<u32>,
}

/// The key directory, column-wise: each table and tenant name once, the ids
/// in one byte string, every key's versions in one list.
type KeysImage = KeyColumns<String>;

impl KeysImage {
    fn of<T: AsRef<str>, R: AsRef<[u32]>>(keys: impl ExactSizeIterator<Item = (T, T, T, R)>) -> KeysImage {
        let n = keys.len();
        let mut out = KeysImage {
            table: Vec::with_capacity(n),
            tenant: Vec::with_capacity(n),
            id_ends: Vec::with_capacity(n),
            version_counts: Vec::with_capacity(n),
            versions: Vec::with_capacity(n),
            ..KeysImage::default()
        };
        // looked up by the borrowed name: a table or tenant is copied once
        let mut named: HashMap<String, u32> = HashMap::new();
        let mut index = |names: &mut Vec<String>, name: &str| match named.get(name) {
            Some(i) => *i,
            None => {
                names.push(name.to_string());
                let i = names.len() as u32 - 1;
                named.insert(name.to_string(), i);
                i
            }
        };
        for (table, tenant, id, rows) in keys {
            out.table.push(index(&mut out.names, table.as_ref()));
            out.tenant.push(index(&mut out.names, tenant.as_ref()));
            out.ids.extend_from_slice(id.as_ref().as_bytes());
            out.id_ends.push(out.ids.len() as u64);
            out.version_counts.push(rows.as_ref().len() as u32);
            out.versions.extend_from_slice(rows.as_ref());
        }
        out
    }

    /// The key directory of these columns, its names shared through
    /// `names` (the state's interned copies), or `None` when the columns do
    /// not agree.
    fn into_directory(self, names: Vec<Arc<str>>) -> Option<KeyDirectory> {
        KeyDirectory::from_columns(KeyColumns {
            names,
            table: self.table,
            tenant: self.tenant,
            ids: self.ids,
            id_ends: self.id_ends,
            version_counts: self.version_counts,
            versions: self.versions,
        })
    }
}

/// A key directory as an image stores it.
trait StoredKeys {
    /// Table and tenant names, each once.
    fn names(&self) -> &[String];

    /// The directory, its names the state's copies of [`StoredKeys::names`],
    /// if it adds up; an image's section is where a [`KeySpans`] points.
    fn directory(self, names: Vec<Arc<str>>, section: &Section) -> Option<KeyDirectory>;
}

impl StoredKeys for KeysImage {
    fn names(&self) -> &[String] {
        &self.names
    }

    fn directory(self, names: Vec<Arc<str>>, _: &Section) -> Option<KeyDirectory> {
        self.into_directory(names)
    }
}

impl StoredKeys for KeySpans {
    fn names(&self) -> &[String] {
        &self.names
    }

    fn directory(self, names: Vec<Arc<str>>, section: &Section) -> Option<KeyDirectory> {
        KeyDirectory::from_section(section.clone(), self, names)
    }
}

/// Bitmaps are serialized roaring bitmaps, as bytes (postcard writes a
/// byte string and a sequence of bytes alike, so formats 1 and 2, which
/// declared them as sequences, read the same).
///
/// `K` is the scalar value as it is read (owned) or written (borrowed from
/// the state, so a capture copies no value).
#[derive(Serialize, Deserialize)]
struct TableImage<C, S = PackedScope, V = Span> {
    name: String,
    live: ByteBuf,
    tenants: Vec<(String, ByteBuf)>,
    /// Per scalar column: (column, its values and their rows).
    scalar: Vec<(String, C)>,
    vectors: Vec<VectorImage<V>>,
    text: Vec<ScopeImage<S>>,
}

/// The rows holding a scalar value (format 3).
#[derive(Serialize, Deserialize)]
enum PostingsImage {
    One(u32),
    Many(ByteBuf),
}

/// A scalar value's rows as an image stores them.
trait StoredPostings {
    fn postings(&self) -> Result<Option<Postings>>;
}

impl StoredPostings for PostingsImage {
    fn postings(&self) -> Result<Option<Postings>> {
        match self {
            PostingsImage::One(row) => Ok(Some(Postings::One(*row))),
            PostingsImage::Many(bytes) => Ok(Postings::of(bitmap(bytes)?)),
        }
    }
}

/// Formats 1 and 2: a bitmap for every value.
impl StoredPostings for ByteBuf {
    fn postings(&self) -> Result<Option<Postings>> {
        Ok(Postings::of(bitmap(self)?))
    }
}

/// A scalar column of an image before format 7: its values and their rows.
type Columns<P> = Vec<(ScalarKey, P)>;

/// [`PostingsImage`] as read from a column's bytes, its bitmap borrowed.
#[derive(Deserialize)]
enum PostingsRef<'a> {
    One(u32),
    Many(&'a [u8]),
}

/// A scalar column as an image stores it, turned into the state's.
trait StoredColumn {
    fn column(self) -> Result<ScalarColumn>;
}

/// Format 7: the column's own bytes, built when the column is first used.
impl StoredColumn for ByteBuf {
    fn column(self) -> Result<ScalarColumn> {
        Ok(ScalarColumn::from_image(self.into_vec().into_boxed_slice()))
    }
}

/// Before format 7: built as the image loads.
impl<P: StoredPostings> StoredColumn for Columns<P> {
    fn column(self) -> Result<ScalarColumn> {
        let mut m = ScalarValues::with_capacity_and_hasher(self.len(), Default::default());
        for (k, stored) in self {
            if let Some(rows) = stored.postings()? {
                match k {
                    // an image before format 4 keyed a long string by itself
                    ScalarKey::Str(s) if s.len() > SCALAR_INLINE_BYTES => {
                        merge_postings(&mut m, ScalarKey::of_str(&s), rows)
                    }
                    k => {
                        m.insert(k, rows);
                    }
                }
            }
        }
        Ok(ScalarColumn::built(m))
    }
}

/// A scalar column's bytes in an image (format 7): the number of values,
/// then each value and its rows ([`PostingsImage`]), in postcard; the same
/// bytes as a `Vec<(ScalarKey, PostingsImage)>`.
pub fn scalar_column_bytes(values: &ScalarValues) -> Vec<u8> {
    let entries: Vec<(&ScalarKey, PostingsImage)> = values
        .iter()
        .map(|(k, rows)| {
            let rows = match rows {
                Postings::One(row) => PostingsImage::One(*row),
                Postings::Many(rows) => PostingsImage::Many(bitmap_bytes(rows)),
            };
            (k, rows)
        })
        .collect();
    postcard::to_stdvec(&entries).expect("postcard encodes to a Vec")
}

/// The postings of a column's bytes ([`scalar_column_bytes`]), decoded
/// straight into the map.
pub fn decode_scalar_column(bytes: &[u8]) -> Result<ScalarValues> {
    let bad = |e: postcard::Error| Error::new(Code::WalCorrupt, format!("a scalar column does not decode: {e}"));
    let (count, mut rest) = postcard::take_from_bytes::<u64>(bytes).map_err(bad)?;
    // a value takes at least two bytes: a count past that is not believed
    let mut values = ScalarValues::with_capacity_and_hasher((count as usize).min(rest.len() / 2), Default::default());
    for _ in 0..count {
        let ((key, rows), tail) = postcard::take_from_bytes::<(ScalarKey, PostingsRef)>(rest).map_err(bad)?;
        rest = tail;
        let rows = match rows {
            PostingsRef::One(row) => Some(Postings::One(row)),
            PostingsRef::Many(bytes) => Postings::of(bitmap(bytes)?),
        };
        if let Some(rows) = rows {
            values.insert(key, rows);
        }
    }
    if !rest.is_empty() {
        return Err(Error::new(Code::WalCorrupt, "a scalar column has bytes past its values"));
    }
    Ok(values)
}

/// `V`: the column's slot directory (row - its first row -> slot + 1),
/// where it lies in the section (format 8 on) or in line.
#[derive(Serialize, Deserialize)]
struct VectorImage<V = Span> {
    column: String,
    rows: ByteBuf,
    slots: V,
    chunks: Vec<ChunkImage>,
}

/// A slot directory as an image stores it.
trait StoredSlots {
    fn slots(self, section: &Section) -> Option<Vec<u32>>;
}

impl StoredSlots for Vec<u32> {
    fn slots(self, _: &Section) -> Option<Vec<u32>> {
        Some(self)
    }
}

impl StoredSlots for Span {
    fn slots(self, section: &Section) -> Option<Vec<u32>> {
        section.u32s(self).map(<[u32]>::to_vec)
    }
}

#[derive(Serialize, Deserialize, Clone, Copy)]
struct ChunkImage {
    gen: u32,
    offset: u64,
    count: u64,
}

fn bitmap_bytes(b: &RoaringBitmap) -> ByteBuf {
    let mut out = Vec::with_capacity(b.serialized_size());
    b.serialize_into(&mut out).expect("writing to a Vec cannot fail");
    ByteBuf::from(out)
}

fn bitmap(bytes: &[u8]) -> Result<RoaringBitmap> {
    RoaringBitmap::deserialize_from(bytes).map_err(|e| Error::storage(format!("damaged bitmap in checkpoint: {e}")))
}

/// Per (table, column): the byte offset of its vectors in a vector file,
/// and their count.
type Placed = HashMap<(String, String), (u64, u64)>;

/// Where the vectors written since the last checkpoint went, in
/// `vectors-<gen>.f32`.
pub struct SealedVectors {
    pub gen: u32,
    pub path: Option<PathBuf>,
    pub placed: Placed,
}

/// Appends every vector column's unsealed vectors to the generation's vector
/// file and finishes it: its trailer (length, CRC-32 of every byte before
/// it, generation), fsynced. With no file yet and no column with new
/// vectors, no file. The state is not changed: [`install_vectors`] maps the
/// file once the checkpoint is durable. `open` is the generation's file when
/// [`flush_vectors`] has begun it; it stays open (the committer drops it
/// once the checkpoint is durable), so a checkpoint that fails after this
/// is retried with the same file, which later appends continue past the
/// trailer written here.
///
/// The vectors are streamed to the file through a small buffer: a whole
/// generation's vectors gathered first (100,000 of 256 dimensions are
/// 102 MB, and a growing buffer copies itself on the way) had been the
/// largest allocation of a load, and the peak of its resident memory.
pub fn write_vectors(
    dir: &Path,
    gen: u32,
    open: &mut Option<VectorFile>,
    state: &RwLock<State>,
) -> Result<SealedVectors> {
    if open.is_none() && !has_unsealed(&state.read()) {
        return Ok(SealedVectors { gen, path: None, placed: HashMap::new() });
    }
    append_vectors(dir, gen, open, state, true)
}

/// Appends every vector column's unsealed vectors to the generation's vector
/// file between checkpoints, so that [`install_vectors`] can map them from
/// it and the process's own copies are freed: without this, the vectors
/// written since the last checkpoint (up to 50,000 rows of them) are held
/// in memory until it. A crash before the checkpoint loses nothing: the
/// log still holds these vectors, and a start deletes the generation's file
/// (`remove_stale`) before it replays them.
pub fn flush_vectors(
    dir: &Path,
    gen: u32,
    open: &mut Option<VectorFile>,
    state: &RwLock<State>,
) -> Result<SealedVectors> {
    append_vectors(dir, gen, open, state, false)
}

/// Appends the unsealed vectors to the generation's file, begun if need be;
/// with `finish`, ends it with its trailer.
fn append_vectors(
    dir: &Path,
    gen: u32,
    open: &mut Option<VectorFile>,
    state: &RwLock<State>,
    finish: bool,
) -> Result<SealedVectors> {
    let file = VectorFile::of(dir, gen, open)?;
    let placed = file.append(state, finish)?;
    Ok(SealedVectors { gen, path: Some(file.path.clone()), placed })
}

/// Bytes of vectors written since the last checkpoint or flush, in every column.
pub fn unsealed_bytes(state: &State) -> u64 {
    state
        .tables
        .values()
        .flat_map(|t| t.vectors.values())
        .map(|vc| (vc.data.unsealed_len() * vc.data.dim() * 4) as u64)
        .sum()
}

fn has_unsealed(state: &State) -> bool {
    state.tables.values().flat_map(|t| t.vectors.values()).any(|vc| vc.data.unsealed_len() > 0)
}

/// The vector file of the generation being written, `vectors-<gen>.f32`,
/// from its first append until the checkpoint that ends the generation is
/// durable: where its bytes end and their CRC-32 so far.
pub struct VectorFile {
    gen: u32,
    path: PathBuf,
    file: File,
    len: u64,
    crc: crc32fast::Hasher,
}

impl VectorFile {
    /// The generation's open file, begun (empty) when there is none. A file
    /// left open for another generation is let go: its vectors are sealed
    /// where they are, and a file without a trailer is read as whole f32s.
    fn of<'a>(dir: &Path, gen: u32, open: &'a mut Option<VectorFile>) -> Result<&'a mut VectorFile> {
        if open.as_ref().is_some_and(|f| f.gen != gen) {
            debug_assert!(false, "a vector file of another generation was left open");
            *open = None;
        }
        if open.is_none() {
            let path = dir.join(vectors_name(gen));
            faults::check("checkpoint::vectors")?;
            let file = wal::create_private(&path, true)?;
            *open = Some(VectorFile { gen, path, file, len: 0, crc: crc32fast::Hasher::new() });
        }
        Ok(open.as_mut().expect("opened above"))
    }

    /// Appends every column's unsealed vectors (and, with `finish`, the
    /// trailer), synced to the device; where each column's vectors went. A
    /// failed append is cut off again, so the file holds only what an
    /// append that succeeded wrote, and where the next one goes is known.
    fn append(&mut self, state: &RwLock<State>, finish: bool) -> Result<Placed> {
        let (len, crc) = (self.len, self.crc.clone());
        let appended = self.try_append(state, finish);
        if appended.is_err() {
            self.len = len;
            self.crc = crc;
            let _ = self.file.set_len(len);
        }
        appended
    }

    /// The vectors are written under the branch's read lock and synced
    /// after it is let go: sealed or not, they stay where they are until
    /// [`install_vectors`] names them. Synced under the lock, a writer
    /// queued behind it (the indexer) had held every read and query of the
    /// branch for the fsync, which waits for whatever else the device is
    /// writing back: 0.6-0.7 s for the first read after a crash restart.
    fn try_append(&mut self, state: &RwLock<State>, finish: bool) -> Result<Placed> {
        let (placed, offset, crc) = self.write_unsealed(&state.read(), finish)?;
        faults::check("checkpoint::vectors_sync")?;
        if finish {
            self.file.sync_all()?;
            fsutil::sync_dir(&self.path)?;
        } else {
            self.file.sync_data()?;
        }
        self.len = offset;
        self.crc = crc;
        Ok(placed)
    }

    /// Writes every column's unsealed vectors after the file's end (and,
    /// with `finish`, the trailer); where each column's went, and the file's
    /// new end and checksum.
    fn write_unsealed(&self, state: &State, finish: bool) -> Result<(Placed, u64, crc32fast::Hasher)> {
        use std::io::{Seek, SeekFrom};
        let mut placed = HashMap::new();
        let columns: Vec<(&String, &String, &VectorColumn)> = state
            .tables
            .iter()
            .flat_map(|(table, data)| data.vectors.iter().map(move |(column, vc)| (table, column, vc)))
            .filter(|(.., vc)| vc.data.unsealed_len() > 0)
            .collect();
        (&self.file).seek(SeekFrom::Start(self.len))?;
        let start = self.len;
        let mut out = Summed { out: std::io::BufWriter::with_capacity(1 << 20, &self.file), crc: self.crc.clone() };
        let mut offset = start;
        let mut written_back = start;
        let mut bytes: Vec<u8> = Vec::new();
        for (table, column, vc) in columns {
            // zeros up to the file offset whose page offset is the first vector's
            // in memory, so whole pages of the file hold whole pages of the
            // column's memory and can be mapped over it once this is durable
            if let Some(at) = vc.data.unsealed_page_offset() {
                let page = crate::index::arena::page_size() as u64;
                let pad = (at as u64 + page - offset % page) % page;
                out.write_all(&vec![0u8; pad as usize])?;
                offset += pad;
            }
            placed.insert((table.clone(), column.clone()), (offset, vc.data.unsealed_len() as u64));
            for v in vc.data.unsealed() {
                bytes.clear();
                bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
                out.write_all(&bytes)?;
                offset += bytes.len() as u64;
                // the device writes what is written while the rest is encoded
                if offset - written_back >= fsutil::WRITEBACK_BYTES {
                    out.out.flush()?;
                    fsutil::start_writeback(&self.file, written_back, offset - written_back);
                    written_back = offset;
                }
            }
        }
        if finish {
            // the trailer goes through the checksum too: a retried checkpoint
            // appends past it, and its own trailer's sum covers this one
            let trailer = vector_trailer(offset, out.crc.clone().finalize(), self.gen);
            out.write_all(&trailer)?;
            offset += trailer.len() as u64;
        }
        let Summed { out, crc } = out;
        out.into_inner().map_err(|e| Error::from(e.into_error()))?;
        Ok((placed, offset, crc))
    }
}

/// A writer that takes the CRC-32 of what goes through it.
struct Summed<W: Write> {
    out: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for Summed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

const VECTOR_TRAILER_MAGIC: &[u8; 8] = b"BRVECSUM";
const VECTOR_TRAILER_LEN: usize = 24;

fn vector_trailer(len: u64, crc: u32, gen: u32) -> [u8; VECTOR_TRAILER_LEN] {
    magic_and_fields(VECTOR_TRAILER_MAGIC, [&len.to_le_bytes(), &crc.to_le_bytes(), &gen.to_le_bytes()])
}

/// An image header or a vector trailer: 8 magic bytes, then the fields'
/// little-endian bytes back to back (16 bytes in all).
fn magic_and_fields(magic: &[u8; 8], fields: [&[u8]; 3]) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[..8].copy_from_slice(magic);
    let mut at = 8;
    for field in fields {
        out[at..at + field.len()].copy_from_slice(field);
        at += field.len();
    }
    debug_assert_eq!(at, out.len());
    out
}

/// Checks the bytes of `vectors-<gen>.f32` against its trailer. `end`: where
/// the last vector its image places in it ends, when the caller knows.
/// A file without a trailer (written before vector files had one) passes
/// when it is whole f32 values reaching `end`, as such a file is; its bytes
/// cannot be checked. Found by a black-box test: a damaged file cut by a
/// few bytes lost its trailer and was read unchecked, and another
/// generation's file copied over one passed its own trailer.
fn check_vectors(path: &Path, bytes: &[u8], gen: u32, end: Option<usize>) -> Result<()> {
    let damaged = |what: String| {
        Err(Error::new(
            Code::WalCorrupt,
            format!(
                "{} {what}: it changed on disk after its checkpoint wrote it (docs/operations.md, \"braid doctor\")",
                path.display()
            ),
        ))
    };
    let trailer = bytes.len().checked_sub(VECTOR_TRAILER_LEN).filter(|at| &bytes[*at..*at + 8] == VECTOR_TRAILER_MAGIC);
    let Some(at) = trailer else {
        // whole f32 values, and padding of whole f32 values, reaching at
        // least its last vector (an image may no longer place vectors in
        // the whole file: a column rebuilt since is written elsewhere)
        return if !bytes.len().is_multiple_of(4) || end.is_some_and(|end| end > bytes.len()) {
            damaged(format!("has no checksum trailer and is {} bytes long, which no checkpoint writes", bytes.len()))
        } else {
            Ok(())
        };
    };
    let field = |range: std::ops::Range<usize>| &bytes[at + range.start..at + range.end];
    let len = u64::from_le_bytes(field(8..16).try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(field(16..20).try_into().expect("4 bytes"));
    let written_for = u32::from_le_bytes(field(20..24).try_into().expect("4 bytes"));
    if written_for != gen {
        return damaged(format!("holds the vectors of generation {written_for}, not {gen}"));
    }
    if len != at as u64 || crc32fast::hash(&bytes[..at]) != crc {
        return damaged("fails its checksum".to_string());
    }
    if end.is_some_and(|end| end > at) {
        return damaged(format!("ends at byte {at}, before its vectors do"));
    }
    Ok(())
}

/// Checks the vector files of a branch or snapshot directory that its
/// checkpoint `ckpt` may map (those of earlier generations; a later one is
/// what an unfinished checkpoint left, which a start deletes) against their
/// trailers (`braid doctor`; a start checks those its checkpoint maps).
pub fn check_vector_files(dir: &Path, ckpt: Option<u32>) -> Result<()> {
    let Some(ckpt) = ckpt else { return Ok(()) };
    for gen in generations(dir, "vectors-", ".f32")?.into_iter().filter(|g| *g < ckpt) {
        let path = dir.join(vectors_name(gen));
        let map = map_file(&path)?;
        check_vectors(&path, &map, gen, None)?;
    }
    Ok(())
}

fn map_file(path: &Path) -> Result<Arc<Mmap>> {
    open_mapped(path).map(|(map, _)| map)
}

/// A vector file, mapped, and the file to read vectors from by `pread`
/// (its descriptor open only while it is among the files read most
/// recently: `arena::SealedFile`).
fn open_mapped(path: &Path) -> Result<(Arc<Mmap>, Arc<SealedFile>)> {
    let (sealed, file) = SealedFile::open(path).map_err(|e| {
        let what = if e.kind() == std::io::ErrorKind::NotFound { "is missing" } else { "cannot be opened" };
        Error::storage(format!("vector file {} {what}: {e}", path.display()))
    })?;
    // SAFETY: vector files are written once, fsynced and never modified or
    // truncated afterwards (only deleted with their branch), so the mapping
    // does not change under the reader.
    let map = unsafe { Mmap::map(&*file)? };
    Ok((Arc::new(map), sealed))
}

/// Lets the process's page tables go of every page of `map`, which a
/// start's checksum of the file has just read: from then on vectors (or an
/// image's row pages and keys) are read from the file as they are needed,
/// and its pages stay the page cache's (a start of 100,000 256-d vectors
/// had kept 98 MB of them mapped).
fn release_pages(map: &Mmap) {
    // SAFETY: a vector file is never written after its checkpoint (see
    // `map_file`), nor an image after its rename: dropping the mapping's
    // page table entries changes no byte a reader sees; the next read
    // faults the same bytes in again.
    let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
}

/// Records each vector column's unsealed vectors as sealed in the file.
pub fn install_vectors(state: &mut State, sealed: &SealedVectors) -> Result<()> {
    let Some(path) = &sealed.path else { return Ok(()) };
    let (map, file) = open_mapped(path)?;
    for (table, data) in state.tables.iter_mut() {
        for (column, vc) in data.vectors.iter_mut() {
            if let Some((offset, count)) = sealed.placed.get(&(table.clone(), column.clone())) {
                vc.data.seal(VectorChunk {
                    map: map.clone(),
                    file: file.clone(),
                    offset: *offset as usize,
                    count: *count as usize,
                    gen: sealed.gen,
                });
            }
        }
    }
    Ok(())
}

/// A scalar column as an image holds it.
type ScalarImage = (String, ByteBuf);

fn scalar_image(column: &str, values: &ScalarColumn) -> ScalarImage {
    (column.to_string(), ByteBuf::from(values.image_bytes()))
}

/// Writes the image of `state` as of the start of generation `gen`, with the
/// open record file and the vector tails counted as sealed (by the
/// checkpoint that writes this image), to the image's temporary file;
/// [`commit`] makes it durable and puts it in place.
///
/// The body is streamed into the file as it is encoded, its checksum and
/// length taken on the way and written into the header last: a body built
/// in memory first had been as large as the image (89 MB at 1,000,000
/// records) on top of the state, at every checkpoint.
pub fn capture(dir: &Path, state: &State, gen: u32, sealed: &SealedVectors) -> Result<Captured> {
    // the open file is sealed by this checkpoint, unless it holds nothing
    // (RecordFiles::start_next deletes it then)
    let mut record_files = state.records.sealed();
    if state.records.open_has_entries() {
        record_files.push(state.records.open_gen());
    }
    // the key directory on a thread of its own beside the rest: the committer
    // takes no write while this runs. A plain scoped thread, not rayon's
    // pool, which the indexers may be keeping busy.
    let (keys, (rows, pages), mut scalar) = std::thread::scope(|scope| {
        let keys = scope.spawn(|| {
            let mut section = SectionBuilder::default();
            let spans = state.keys.write(&mut section);
            (section, spans)
        });
        let mut section = SectionBuilder::default();
        let pages = state.rows.packed_pages(&mut section);
        let scalar: HashMap<&String, Vec<ScalarImage>> = state
            .tables
            .iter()
            .map(|(table, data)| (table, data.scalar.iter().map(|(col, values)| scalar_image(col, values)).collect()))
            .collect();
        let keys = keys.join().map_err(|_| Error::internal("the key directory's capture panicked"))?;
        Ok::<_, Error>((keys, (section, pages), scalar))
    })?;
    // the section: the row pages, the key directory, the slot directories
    let (key_section, keys) = keys;
    let keys = keys.after(rows.len());
    let mut slots = SectionBuilder::default();
    let slots_base = rows.len() + key_section.len();
    let row_pages = RowsImage { purged: state.purged_rows, pages };
    let mut slot_bases = Vec::new();
    let schemas: Vec<&TableSchema> = state.schemas.values().collect();
    let receipts: Vec<&Receipt> = state.receipts.values().collect();
    let mut tables = Vec::new();
    for (name, data) in &state.tables {
        let mut vectors = Vec::new();
        for (column, vc) in &data.vectors {
            let mut chunks: Vec<ChunkImage> = vc
                .data
                .chunks()
                .iter()
                .map(|c| ChunkImage { gen: c.gen, offset: c.offset as u64, count: c.count as u64 })
                .collect();
            if let Some((offset, count)) = sealed.placed.get(&(name.clone(), column.clone())) {
                chunks.push(ChunkImage { gen: sealed.gen, offset: *offset, count: *count });
            }
            slot_bases.push((name.clone(), column.clone(), vc.data.slot_base()));
            vectors.push(VectorImage {
                column: column.clone(),
                rows: bitmap_bytes(&vc.rows),
                slots: slots.push_u32s(vc.data.slots()).after(slots_base),
                chunks,
            });
        }
        tables.push(TableImage {
            name: name.clone(),
            live: bitmap_bytes(&data.live),
            tenants: data.tenants.iter().map(|(t, b)| (t.to_string(), bitmap_bytes(b))).collect(),
            scalar: scalar.remove(name).unwrap_or_default(),
            vectors,
            text: data.text_stats.export(),
        });
    }
    let image: Image = Image {
        gen,
        created_ms: crate::storage::commit::now_ms(),
        schema_epoch: state.schema_epoch,
        latest_epoch: state.latest_epoch,
        horizon: state.horizon,
        invalid_vectors: state.invalid_vectors,
        record_files,
        row_count: state.rows.len() as u64,
        row_pages,
        keys,
        schemas_json: serde_json::to_vec(&schemas).map_err(Error::internal)?,
        receipts_json: serde_json::to_vec(&receipts).map_err(Error::internal)?,
        tables,
        slot_bases,
    };
    let path = dir.join(file_name(gen));
    let tmp = dir.join(format!(".{}.tmp", file_name(gen)));
    faults::check("checkpoint::write")?;
    let file = wal::create_private(&tmp, true)?;
    let written = stream_image(file, &image, &[&rows, &key_section, &slots]);
    match written {
        Ok((file, bytes)) => Ok(Captured { file, tmp, path, bytes }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Writes `image` to `file`: a header to be filled in, the body (postcard)
/// through a buffer that checksums it, the section if it has parts (the
/// parts back to back, aligned, with its trailer), then the header.
/// Returns the file and its length.
fn stream_image<T: Serialize>(mut file: File, image: &T, section: &[&SectionBuilder]) -> Result<(File, u64)> {
    use std::io::{Seek, SeekFrom};
    file.write_all(&[0u8; HEADER_LEN])?;
    let mut body = Checksummed {
        file,
        buf: Vec::with_capacity(STREAM_BUFFER),
        crc: crc32fast::Hasher::new(),
        len: 0,
        error: None,
    };
    let encoded = postcard::to_io(image, &mut body)
        .map(|_| ())
        .and_then(|()| body.drain().map_err(|_| postcard::Error::SerializeBufferFull));
    if let Err(e) = encoded {
        // postcard reports every failure of the writer as a full buffer:
        // the writer kept the real one
        return Err(match body.error.take() {
            Some(io) => Error::from(io),
            None => Error::internal(format!("checkpoint encoding: {e}")),
        });
    }
    let Checksummed { mut file, crc, len, .. } = body;
    let mut total = HEADER_LEN as u64 + len;
    if !section.is_empty() {
        let pad = total.next_multiple_of(8) - total;
        file.write_all(&[0u8; 8][..pad as usize])?;
        let (mut slen, mut scrc) = (0u64, crc32fast::Hasher::new());
        for part in section {
            file.write_all(part.bytes())?;
            scrc.update(part.bytes());
            slen += part.len();
        }
        let scrc = scrc.finalize();
        file.write_all(&magic_and_fields(
            SECTION_MAGIC,
            [&slen.to_le_bytes(), &scrc.to_le_bytes(), &FORMAT_VERSION.to_le_bytes()],
        ))?;
        total += pad + slen + SECTION_TRAILER_LEN as u64;
    }
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&header_for(FORMAT_VERSION, crc.finalize(), len))?;
    Ok((file, total))
}

/// Bytes an image is written in.
const STREAM_BUFFER: usize = 1 << 20;

/// A writer that gathers bytes into a buffer and writes each full buffer
/// to `file`, keeping the CRC-32 and count of all of them, and the first
/// error of the file.
struct Checksummed {
    file: File,
    buf: Vec<u8>,
    crc: crc32fast::Hasher,
    len: u64,
    error: Option<std::io::Error>,
}

impl Checksummed {
    fn drain(&mut self) -> std::io::Result<()> {
        self.crc.update(&self.buf);
        self.len += self.buf.len() as u64;
        let written = self.file.write_all(&self.buf);
        self.buf.clear();
        written.inspect_err(|e| self.error = Some(std::io::Error::new(e.kind(), e.to_string())))
    }
}

impl Write for Checksummed {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= STREAM_BUFFER {
            self.drain()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An image written to its temporary file by [`capture`], not yet durable.
pub struct Captured {
    file: File,
    tmp: PathBuf,
    path: PathBuf,
    bytes: u64,
}

impl Captured {
    /// Bytes of the image file.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// The header of an image file whose body has checksum `crc` and `len` bytes.
fn header_for(format: u32, crc: u32, len: u64) -> [u8; HEADER_LEN] {
    magic_and_fields(MAGIC, [&format.to_le_bytes(), &crc.to_le_bytes(), &len.to_le_bytes()])
}

/// An image file's bytes: header, then `body`.
#[cfg(test)]
fn framed(format: u32, body: &[u8]) -> Vec<u8> {
    let mut out = header_for(format, crc32fast::hash(body), body.len() as u64).to_vec();
    out.extend_from_slice(body);
    out
}

/// Makes a captured image durable: fsync, rename over its final name,
/// fsync of the directory. The rename is the checkpoint's commit point.
pub fn commit(captured: Captured) -> Result<PathBuf> {
    let Captured { file, tmp, path, .. } = captured;
    let synced = file.sync_all();
    drop(file);
    let renamed = synced.map_err(Error::from).and_then(|()| {
        faults::check("checkpoint::rename")?;
        Ok(std::fs::rename(&tmp, &path)?)
    });
    if let Err(e) = renamed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    fsutil::sync_dir(&path)?;
    Ok(path)
}

fn unsupported(path: &Path, what: String) -> Error {
    Error::new(Code::FormatUnsupported, format!("{}: {what}", path.display()))
}

/// Loads the state of checkpoint `gen` in `dir`; the record file of
/// generation `gen` starts empty (the WAL tail refills it).
pub fn load(dir: &Path, gen: u32) -> Result<State> {
    let path = dir.join(file_name(gen));
    let file = ImageBytes::read(&path)?;
    let body = file.body();
    let undecodable = |e| file.undecodable(e);
    match file.format {
        1 => {
            let (image, rows) = postcard::from_bytes::<ImageV1>(body).map_err(undecodable)?.upgrade();
            restore(dir, gen, &path, image, rows, None, &file.section)
        }
        2 => {
            let image: BodyImage<Columns<ByteBuf>, ScopeStats> = postcard::from_bytes(body).map_err(undecodable)?;
            restore_paged(dir, gen, &path, image)
        }
        3..=5 => {
            let image: BodyImage<Columns<PostingsImage>, ScopeStats> =
                postcard::from_bytes(body).map_err(undecodable)?;
            restore_paged(dir, gen, &path, image)
        }
        6 => {
            let image: BodyImage<Columns<PostingsImage>, PackedScope> =
                postcard::from_bytes(body).map_err(undecodable)?;
            restore_paged(dir, gen, &path, image)
        }
        7 => {
            let image: BodyImage<ByteBuf, PackedScope> = postcard::from_bytes(body).map_err(undecodable)?;
            restore_paged(dir, gen, &path, image)
        }
        _ => {
            let mut image: Image = postcard::from_bytes(body).map_err(undecodable)?;
            let rows = std::mem::take(&mut image.row_pages);
            let table = RowTable::from_section(image.row_count as usize, rows.pages, file.section.clone());
            let table = table.ok_or_else(|| {
                Error::new(Code::WalCorrupt, format!("{} has row pages that do not fit its row count", path.display()))
            })?;
            let state = restore(dir, gen, &path, image, table, Some(rows.purged), &file.section);
            // the checksums read every page: from here on only those a
            // read or a key's lookup needs are mapped into the process
            release_pages(&file.map);
            state
        }
    }
}

/// A checkpoint image's bytes, mapped, its header and checksum checked.
struct ImageBytes {
    path: PathBuf,
    /// Mapped, not read: the image's pages are the page cache's, not a copy
    /// as large as the image.
    map: Arc<Mmap>,
    format: u32,
    len: usize,
    /// Format 8 on: the section, checked (empty before).
    section: Section,
}

impl ImageBytes {
    fn read(path: &Path) -> Result<ImageBytes> {
        let file = File::open(path)?;
        // SAFETY: an image is written once, fsynced and renamed into place, and
        // never modified afterwards (only deleted once a newer one is durable)
        let map = Arc::new(unsafe { Mmap::map(&file)? });
        let bytes: &[u8] = &map;
        if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
            return Err(Error::new(Code::WalCorrupt, format!("{} is not a Braid checkpoint", path.display())));
        }
        let format = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if format > FORMAT_VERSION {
            return Err(unsupported(
                path,
                format!(
                    "checkpoint format {format} was written by a newer Braid; this build reads format {FORMAT_VERSION} \
                     and older. Run the newer version, or restore a snapshot taken by this one."
                ),
            ));
        }
        let crc = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
        let len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes")) as usize;
        let body = bytes.get(HEADER_LEN..HEADER_LEN.saturating_add(len)).filter(|b| b.len() == len);
        let fails = || {
            Error::new(
                Code::WalCorrupt,
                format!("{} fails its checksum; restore a snapshot (docs/operations.md)", path.display()),
            )
        };
        if body.is_none_or(|b| crc32fast::hash(b) != crc) {
            return Err(fails());
        }
        let section = if format >= 8 {
            ImageBytes::section(&map, HEADER_LEN + len, format).ok_or_else(fails)?
        } else {
            Section::default()
        };
        Ok(ImageBytes { path: path.to_path_buf(), map, format, len, section })
    }

    /// The section after a body that ends at `body_end`, if every byte
    /// after the body is as written: zero padding, then the section, then a
    /// trailer of the image's `format` whose length fits the file and whose
    /// checksum the section.
    fn section(map: &Arc<Mmap>, body_end: usize, format: u32) -> Option<Section> {
        let start = body_end.next_multiple_of(8);
        let trailer = map.len().checked_sub(SECTION_TRAILER_LEN)?;
        let t = &map[trailer..];
        let len = usize::try_from(u64::from_le_bytes(t[8..16].try_into().ok()?)).ok()?;
        let crc = u32::from_le_bytes(t[16..20].try_into().ok()?);
        let written = u32::from_le_bytes(t[20..24].try_into().ok()?);
        let fits = &t[..8] == SECTION_MAGIC && written == format && start.checked_add(len) == Some(trailer);
        let padded = fits && map[body_end..start].iter().all(|b| *b == 0);
        (padded && crc32fast::hash(&map[start..trailer]) == crc).then(|| Section::mapped(map.clone(), start, len))?
    }

    fn body(&self) -> &[u8] {
        &self.map[HEADER_LEN..HEADER_LEN + self.len]
    }

    fn undecodable(&self, e: postcard::Error) -> Error {
        Error::new(Code::WalCorrupt, format!("{} cannot be decoded: {e}", self.path.display()))
    }
}

/// What a start would refuse in checkpoint `gen`'s image short of applying
/// it (`braid doctor`): an image that fails its checksum or cannot be
/// decoded, and a record or vector file it names that is missing, each as
/// the start says it. Writes nothing. (Doctor had called a branch healthy
/// whose start refused it for a missing vector file: the listing of the
/// files there cannot show one that is not.)
pub fn check_image(dir: &Path, gen: u32) -> Result<()> {
    let path = dir.join(file_name(gen));
    let file = ImageBytes::read(&path)?;
    let body = file.body();
    let undecodable = |e| file.undecodable(e);
    match file.format {
        1 => {
            let image = postcard::from_bytes::<ImageV1>(body).map_err(undecodable)?;
            check_named_files(dir, &image.record_files, &image.schemas_json, &image.tables)
        }
        2 => {
            let image: BodyImage<Columns<ByteBuf>, ScopeStats> = postcard::from_bytes(body).map_err(undecodable)?;
            check_named_files(dir, &image.record_files, &image.schemas_json, &image.tables)
        }
        3..=5 => {
            let image: BodyImage<Columns<PostingsImage>, ScopeStats> =
                postcard::from_bytes(body).map_err(undecodable)?;
            check_named_files(dir, &image.record_files, &image.schemas_json, &image.tables)
        }
        6 => {
            let image: BodyImage<Columns<PostingsImage>, PackedScope> =
                postcard::from_bytes(body).map_err(undecodable)?;
            check_named_files(dir, &image.record_files, &image.schemas_json, &image.tables)
        }
        7 => {
            let image: BodyImage<ByteBuf, PackedScope> = postcard::from_bytes(body).map_err(undecodable)?;
            check_scalar_columns(&path, &image.tables)?;
            check_named_files(dir, &image.record_files, &image.schemas_json, &image.tables)
        }
        _ => {
            let image: Image = postcard::from_bytes(body).map_err(undecodable)?;
            let section = &file.section;
            let rows = RowTable::from_section(image.row_count as usize, image.row_pages.pages.clone(), section.clone());
            let names = image.keys.names.iter().map(|n| Arc::from(n.as_str())).collect();
            if rows.is_none() || KeyDirectory::from_section(section.clone(), image.keys.clone(), names).is_none() {
                return Err(Error::new(
                    Code::WalCorrupt,
                    format!("{} has rows or keys that do not fit its section", path.display()),
                ));
            }
            check_scalar_columns(&path, &image.tables)?;
            check_named_files(dir, &image.record_files, &image.schemas_json, &image.tables)?;
            if let Some(rows) = rows {
                check_record_entries(dir, &rows, &image.record_files)?;
            }
            Ok(())
        }
    }
}

/// Every entry the image's rows point to in its sealed record files reads
/// whole and passes its checksum. A start checks only the files' headers
/// and lengths, and a read finds a damaged entry only when it reads it
/// (found by a black-box test: a byte flipped inside a sealed file passed
/// `braid doctor` and the start, its record failed every read and every
/// query that returned it, and snapshots linked the file). Each file is read
/// once, its entries in file order.
fn check_record_entries(dir: &Path, rows: &RowTable, record_files: &[u32]) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let mut by_file: BTreeMap<u32, Vec<(u64, u32)>> = BTreeMap::new();
    for loc in rows.iter().map(|row| row.loc).filter(|loc| !loc.is_purged() && record_files.contains(&loc.gen)) {
        by_file.entry(loc.gen).or_default().push((loc.offset, loc.len));
    }
    let mut entry = Vec::new();
    for (gen, mut entries) in by_file {
        entries.sort_unstable();
        entries.dedup();
        let path = dir.join(records::file_name(gen));
        let file = File::open(&path)
            .map_err(|e| Error::storage(format!("record file {} cannot be read: {e}", path.display())))?;
        let mut failed = 0u64;
        let mut first = None;
        for &(offset, len) in &entries {
            entry.resize(len as usize, 0);
            if !(file.read_exact_at(&mut entry, offset).is_ok() && records::checks_out(&entry)) {
                failed += 1;
                first.get_or_insert(offset);
            }
        }
        if let Some(first) = first {
            return Err(Error::new(
                Code::WalCorrupt,
                format!(
                    "record file {} holds {failed} of its {} records that fail their checksum or are cut off (the first at offset {first}): it changed on disk after its checkpoint wrote it; reads of those records fail (docs/operations.md, \"braid doctor\")",
                    path.display(),
                    entries.len()
                ),
            ));
        }
    }
    Ok(())
}

/// The scalar columns of an image (format 7 on) decode: a start builds them
/// after it opens, so they are decoded here.
fn check_scalar_columns<S, V>(path: &Path, tables: &[TableImage<ByteBuf, S, V>]) -> Result<()> {
    for (table, (column, bytes)) in tables.iter().flat_map(|t| t.scalar.iter().map(move |c| (&t.name, c))) {
        decode_scalar_column(bytes)
            .map_err(|e| Error::new(Code::WalCorrupt, format!("{}: column {table}.{column}: {e}", path.display())))?;
    }
    Ok(())
}

/// The record files an image names are there, and the vector files its
/// tables map are there and pass [`check_vectors`] up to the end of the
/// last vector placed in each, as a start checks them (a file cut to whole
/// f32 values short of its vectors had passed a check that did not know
/// where they end).
fn check_named_files<C, S, V>(
    dir: &Path,
    record_files: &[u32],
    schemas_json: &[u8],
    tables: &[TableImage<C, S, V>],
) -> Result<()> {
    records::check_sealed(dir, record_files)?;
    let schemas: Vec<TableSchema> = serde_json::from_slice(schemas_json).map_err(Error::storage)?;
    let schemas = schemas.into_iter().map(|s| (s.name.clone(), s)).collect::<BTreeMap<_, _>>();
    let ends = vector_file_ends(&schemas, tables);
    let named: BTreeSet<u32> = tables.iter().flat_map(|t| &t.vectors).flat_map(|v| &v.chunks).map(|c| c.gen).collect();
    for gen in named {
        let path = dir.join(vectors_name(gen));
        check_vectors(&path, &map_file(&path)?, gen, ends.get(&gen).copied())?;
    }
    Ok(())
}

/// Where the last vector an image places in each vector file ends, by the
/// file's generation (columns the schemas do not know are left out).
fn vector_file_ends<C, S, V>(
    schemas: &BTreeMap<String, TableSchema>,
    tables: &[TableImage<C, S, V>],
) -> HashMap<u32, usize> {
    let mut ends: HashMap<u32, usize> = HashMap::new();
    for t in tables {
        let schema = schemas.get(&t.name);
        for v in &t.vectors {
            let dim =
                schema.and_then(|s| s.vector_columns().find(|(c, ..)| *c == v.column.as_str())).map(|(_, d, _)| d);
            for c in v.chunks.iter().filter(|_| dim.is_some()) {
                let bytes = (c.count as usize).saturating_mul(dim.unwrap_or(0) as usize * 4);
                let end = ends.entry(c.gen).or_default();
                *end = (*end).max((c.offset as usize).saturating_add(bytes));
            }
        }
    }
    ends
}

/// [`restore`] for an image whose rows are in packed pages in its body
/// (formats 2 to 7).
fn restore_paged<C: StoredColumn + Send, S: StoredScope + Send>(
    dir: &Path,
    gen: u32,
    path: &Path,
    mut image: BodyImage<C, S>,
) -> Result<State> {
    use rayon::prelude::*;
    let bad_rows =
        || Error::new(Code::WalCorrupt, format!("{} has row pages that do not fit its row count", path.display()));
    let pages = std::mem::take(&mut image.row_pages)
        .into_par_iter()
        .map(|(n, packed)| unpack_rows(&packed).map(|rows| (n as usize, rows)).ok_or_else(bad_rows))
        .collect::<Result<Vec<_>>>()?;
    let rows = RowTable::from_pages(image.row_count as usize, pages).ok_or_else(bad_rows)?;
    restore(dir, gen, path, image, rows, None, &Section::default())
}

/// The branch state an image describes, with its `rows` and their count of
/// `purged` ones if the image stores it (counted otherwise). `section`: the
/// image's (format 8 on).
fn restore<C: StoredColumn + Send, S: StoredScope + Send, P, K: StoredKeys + Send, V: StoredSlots + Send>(
    dir: &Path,
    gen: u32,
    path: &Path,
    image: Image<C, S, P, K, V>,
    rows: RowTable,
    purged: Option<u64>,
    section: &Section,
) -> Result<State> {
    let records = RecordFiles::open(dir, &image.record_files, gen)?;
    let mut state = State::new(records);
    state.schema_epoch = image.schema_epoch;
    state.latest_epoch = image.latest_epoch;
    state.durable_epoch = image.latest_epoch;
    state.horizon = image.horizon;
    state.invalid_vectors = image.invalid_vectors;
    state.rows = rows;
    state.purged_rows = purged.unwrap_or_else(|| state.rows.iter().filter(|r| r.loc.is_purged()).count() as u64);
    let schemas: Vec<TableSchema> = serde_json::from_slice(&image.schemas_json).map_err(Error::storage)?;
    let schemas = schemas.into_iter().map(|s| (s.name.clone(), s)).collect::<BTreeMap<_, _>>();
    let receipts: Vec<Receipt> = serde_json::from_slice(&image.receipts_json).map_err(Error::storage)?;
    state.receipts = receipts.into_iter().collect();
    let names: Vec<Arc<str>> = image.keys.names().iter().map(|n| state.intern(n)).collect();
    // the key directory and the tables' indexes on both cores at once
    let (keys, tables) = rayon::join(
        || image.keys.directory(names, section),
        || restore_tables(dir, &schemas, image.tables, &image.slot_bases, section),
    );
    state.keys = keys.ok_or_else(|| {
        Error::new(Code::WalCorrupt, format!("{} has a key directory that does not add up", path.display()))
    })?;
    state.tables = tables?;
    state.schemas = schemas;
    Ok(state)
}

/// Adds `rows` to the postings of `key` (two long strings of an older image
/// may share a digest).
fn merge_postings(values: &mut ScalarValues, key: ScalarKey, rows: Postings) {
    let merged = match (values.remove(&key), rows) {
        (None, rows) => rows,
        (Some(a), b) => {
            let bitmap = |p: Postings| match p {
                Postings::One(r) => RoaringBitmap::from_iter([r]),
                Postings::Many(rows) => rows,
            };
            Postings::Many(bitmap(a) | bitmap(b))
        }
    };
    values.insert(key, merged);
}

/// The tables of an image: live sets, tenant masks, scalar postings (a
/// column per task), vector columns over their mapped files and BM25
/// statistics.
fn restore_tables<C: StoredColumn + Send, S: StoredScope + Send, V: StoredSlots>(
    dir: &Path,
    schemas: &BTreeMap<String, TableSchema>,
    images: Vec<TableImage<C, S, V>>,
    slot_bases: &[(String, String, u32)],
    section: &Section,
) -> Result<HashMap<String, TableData>> {
    use rayon::prelude::*;
    let slot_bases: HashMap<(&str, &str), u32> =
        slot_bases.iter().map(|(t, c, base)| ((t.as_str(), c.as_str()), *base)).collect();
    let mut maps: HashMap<u32, (Arc<Mmap>, Arc<SealedFile>)> = HashMap::new();
    let ends = vector_file_ends(schemas, &images);
    let mut tables = HashMap::new();
    for t in images {
        let schema = schemas.get(&t.name);
        let mut data = TableData { live: bitmap(&t.live)?, ..Default::default() };
        for (tenant, b) in t.tenants {
            data.tenants.insert(Arc::from(tenant), bitmap(&b)?);
        }
        // the BM25 statistics beside the scalar columns' postings (a column per task)
        let (text_stats, scalar) = rayon::join(
            || TextStats::import(t.text),
            || t.scalar.into_par_iter().map(|(col, stored)| Ok((col, stored.column()?))).collect::<Result<_>>(),
        );
        data.scalar = scalar?;
        data.text_stats = text_stats.ok_or_else(|| {
            Error::new(Code::WalCorrupt, format!("checkpoint BM25 statistics of {} do not decode", t.name))
        })?;
        for v in t.vectors {
            let Some((_, dim, metric)) =
                schema.and_then(|s| s.vector_columns().find(|(c, ..)| *c == v.column.as_str()))
            else {
                return Err(Error::storage(format!(
                    "checkpoint has vectors for unknown column {}.{}",
                    t.name, v.column
                )));
            };
            let mut chunks = Vec::with_capacity(v.chunks.len());
            for c in v.chunks {
                let (map, file) = match maps.get(&c.gen) {
                    Some(m) => m.clone(),
                    None => {
                        let path = dir.join(vectors_name(c.gen));
                        let (map, file) = open_mapped(&path)?;
                        check_vectors(&path, &map, c.gen, ends.get(&c.gen).copied())?;
                        release_pages(&map);
                        maps.insert(c.gen, (map.clone(), file.clone()));
                        (map, file)
                    }
                };
                let end = c.offset as usize + c.count as usize * dim as usize * 4;
                if c.offset % 4 != 0 || end > map.len() {
                    return Err(Error::storage(format!("vector chunk past the end of {}", vectors_name(c.gen))));
                }
                chunks.push(VectorChunk { map, file, offset: c.offset as usize, count: c.count as usize, gen: c.gen });
            }
            let base = slot_bases.get(&(t.name.as_str(), v.column.as_str())).copied().unwrap_or(0);
            let slots = v.slots.slots(section);
            let store = slots.and_then(|slots| VectorStore::restored(dim, base, slots, chunks)).ok_or_else(|| {
                Error::storage(format!("checkpoint vectors of {}.{} do not match their slots", t.name, v.column))
            })?;
            data.vectors.insert(v.column.clone(), VectorColumn::over(metric, store, bitmap(&v.rows)?));
        }
        tables.insert(t.name, data);
    }
    Ok(tables)
}

/// Files a snapshot of checkpoint `gen` needs: its image and every sealed
/// record and vector file.
pub fn files(dir: &Path, gen: u32, state: &State) -> Vec<PathBuf> {
    let mut out = vec![dir.join(file_name(gen))];
    out.extend(state.records.sealed_paths());
    let mut vector_gens: Vec<u32> = state
        .tables
        .values()
        .flat_map(|t| t.vectors.values())
        .flat_map(|vc| vc.data.chunks().iter().map(|c| c.gen))
        .collect();
    vector_gens.sort_unstable();
    vector_gens.dedup();
    out.extend(vector_gens.into_iter().map(|g| dir.join(vectors_name(g))));
    out
}

/// Refuses a branch directory whose write-ahead log does not continue its
/// latest checkpoint (`wal_corrupt`), before a start removes or replays
/// anything. A checkpoint of generation g creates segment g, durably, before
/// its image, and removes the segments before g only after it; so the
/// segments from g on are g, g + 1, ... with none missing, and a directory
/// without a checkpoint has its segments from 0. Found by a black-box test:
/// with the newest checkpoint deleted, a start replayed the segments after
/// it onto an empty state (or an older image), removed every record file of
/// the generations in between, and came up healthy with most acknowledged
/// writes gone; with a segment deleted, it came up without that segment's
/// writes.
pub fn check_tail(dir: &Path, checkpoint: Option<u32>) -> Result<()> {
    let base = checkpoint.unwrap_or(0);
    let tail: Vec<u32> = wal_generations(dir)?.into_iter().filter(|g| *g >= base).collect();
    let refuse = |what: String| {
        Err(Error::new(
            Code::WalCorrupt,
            format!(
                "{}: {what}; acknowledged writes would be lost. Put the missing file back, or restore a snapshot into a new branch (docs/operations.md)",
                dir.display()
            ),
        ))
    };
    match (checkpoint, tail.first()) {
        (Some(gen), None) => {
            return refuse(format!(
                "checkpoint {gen} is here but its log segment {} is missing (if it cannot be put back, `braid doctor --salvage` starts the branch from checkpoint {gen}, without the writes after it)",
                wal_name(gen)
            ))
        }
        (None, Some(&first)) if first != 0 => {
            return refuse(format!(
                "log segment {} is here but the checkpoint {first} it continues is missing",
                wal_name(first)
            ))
        }
        (Some(gen), Some(&first)) if first != gen => {
            return refuse(format!(
                "checkpoint {gen} is continued by {} but {} is missing",
                wal_name(first),
                wal_name(gen)
            ))
        }
        _ => {}
    }
    if let Some(gap) = tail.windows(2).find(|w| w[1] != w[0] + 1) {
        return refuse(format!(
            "log segment {} is missing between {} and {}",
            wal_name(gap[0] + 1),
            wal_name(gap[0]),
            wal_name(gap[1])
        ));
    }
    // A segment is created, header and all, durably before anything follows
    // it (its image, the next segment): only the last one, with no image of
    // its generation, can be short from a crash while it was created. One
    // emptied otherwise had been taken for new, and the writes it held were
    // gone without a word (found by a black-box review).
    for (i, gen) in tail.iter().enumerate() {
        let followed = i + 1 < tail.len() || checkpoint == Some(*gen);
        let len = std::fs::metadata(dir.join(wal_name(*gen)))?.len();
        if followed && len < crate::storage::wal::HEADER_LEN {
            return refuse(format!(
                "log segment {} is {len} bytes, shorter than its header, but a {} follows it, so it was complete \
                 once",
                wal_name(*gen),
                if checkpoint == Some(*gen) { "checkpoint" } else { "later segment" }
            ));
        }
    }
    Ok(())
}

/// Creates the log segment that continues the latest checkpoint of `dir`
/// when there is none: a branch restored from a snapshot, whose files are
/// the checkpoint's without a log.
pub fn start_tail(dir: &Path) -> Result<()> {
    if let Some(gen) = latest(dir)? {
        if !wal_generations(dir)?.iter().any(|g| *g >= gen) {
            crate::storage::wal::Wal::open(&dir.join(wal_name(gen)))?;
        }
    }
    Ok(())
}

/// Removes what a crash may have left: record and vector files of
/// generations from `base` on (the WAL tail rebuilds them), temporary
/// images, and what checkpoint `base` covers ([`remove_covered`]).
pub fn remove_stale(dir: &Path, base: u32) -> Result<()> {
    remove_matching(dir, |name| {
        records::gen_of(name).is_some_and(|g| g >= base)
            || gen_in(name, "vectors-", ".f32").is_some_and(|g| g >= base)
            || (name.starts_with(".checkpoint-") && name.ends_with(".tmp"))
    })?;
    remove_covered(dir, base)
}

/// Removes the record and vector files the state does not name: files
/// retention compacted away (storage/retention.rs), after the checkpoint
/// that stopped naming them, or at a start when a crash came in between.
pub fn remove_unnamed(dir: &Path, state: &State) -> Result<()> {
    let named = state.records.sealed();
    let open = state.records.open_gen();
    let vectors: Vec<u32> = state
        .tables
        .values()
        .flat_map(|t| t.vectors.values())
        .flat_map(|vc| vc.data.chunks().iter().map(|c| c.gen))
        .collect();
    remove_matching(dir, |name| {
        records::gen_of(name).is_some_and(|g| g != open && !named.contains(&g))
            || gen_in(name, "vectors-", ".f32").is_some_and(|g| !vectors.contains(&g))
    })
}

/// Removes the WAL segments and images that checkpoint `gen` covers.
pub fn remove_covered(dir: &Path, gen: u32) -> Result<()> {
    remove_matching(dir, |name| {
        gen_in(name, "wal-", ".log").is_some_and(|g| g < gen)
            || gen_in(name, "checkpoint-", ".ckpt").is_some_and(|g| g < gen)
    })
}

fn remove_matching(dir: &Path, stale: impl Fn(&str) -> bool) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if name.to_str().is_some_and(&stale) {
            std::fs::remove_file(dir.join(&name))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::records::RecordLoc;
    use crate::storage::state::{pack_rows, KeyRows, NOT_SUPERSEDED, PAGE_ROWS, ROW_BYTES};

    /// An image streamed to its file is byte for byte the image encoded in
    /// memory and framed, across several of the stream's buffers.
    #[test]
    fn a_streamed_image_is_the_framed_encoding() {
        let dir = tempfile::tempdir().unwrap();
        let value: (Vec<u32>, ByteBuf, String) = (
            (0..400_000u32).map(|i| i.wrapping_mul(2_654_435_761)).collect(),
            ByteBuf::from(vec![7u8; 1_500_000]),
            "end".into(),
        );
        let path = dir.path().join("image");
        let (_, len) = stream_image(File::create(&path).unwrap(), &value, &[]).unwrap();
        let expected = framed(FORMAT_VERSION, &postcard::to_stdvec(&value).unwrap());
        assert!(expected.len() > 2 * STREAM_BUFFER);
        assert_eq!(len, expected.len() as u64);
        assert!(std::fs::read(&path).unwrap() == expected);
    }

    #[test]
    fn packed_rows_and_keys_round_trip() {
        let rows = vec![
            Row {
                key: 7,
                version_id: 3,
                epoch: 9,
                superseded_at: NOT_SUPERSEDED,
                deleted: false,
                loc: RecordLoc { gen: 2, offset: 1 << 40, len: 77 },
            },
            Row { key: 0, version_id: 1, epoch: 1, superseded_at: 9, deleted: true, loc: RecordLoc::PURGED },
        ];
        let mut packed = Vec::new();
        pack_rows(&rows, &mut packed);
        assert_eq!(packed.len(), 2 * ROW_BYTES);
        let back = unpack_rows(&packed).unwrap();
        assert_eq!(format!("{back:?}"), format!("{rows:?}"));
        assert!(unpack_rows(&packed[1..]).is_none(), "a torn page is refused");
        let image = || {
            KeysImage::of(
                [("t", "a", "x", vec![0, 4]), ("t", "b", "é", vec![1]), ("u", "a", "", vec![2, 3, 5])].into_iter(),
            )
        };
        let keys = image();
        assert_eq!(keys.names, ["t", "a", "b", "u"]);
        let names: Vec<Arc<str>> = keys.names.iter().map(|n| Arc::from(n.as_str())).collect();
        let directory = keys.into_directory(names.clone()).unwrap();
        let flat: Vec<(String, String, String, Vec<u32>)> = directory
            .iter()
            .map(|k| (k.table.to_string(), k.tenant.to_string(), k.id.to_string(), k.rows.to_vec()))
            .collect();
        assert_eq!(flat[1], ("t".into(), "b".into(), "é".into(), vec![1]));
        assert_eq!(flat[2], ("u".into(), "a".into(), "".into(), vec![2, 3, 5]));
        let mut broken = image();
        broken.versions.pop();
        assert!(broken.into_directory(names).is_none(), "columns that do not add up are refused");
    }

    /// An image of one table, `t`, with no rows, whose scalar column `c`
    /// holds `postings` under the values 0, 1, ...
    fn scalar_image<P, S>(postings: Vec<P>) -> BodyImage<Columns<P>, S> {
        image_of("c", postings.into_iter().enumerate().map(|(n, p)| (ScalarKey::Num(n as u64), p)).collect())
    }

    /// An image of one table, `t`, with no rows and one scalar column.
    fn image_of<C, S>(column: &str, stored: C) -> BodyImage<C, S> {
        let scalar = vec![(column.to_string(), stored)];
        Image {
            gen: 1,
            created_ms: 0,
            schema_epoch: 0,
            latest_epoch: 0,
            horizon: 0,
            invalid_vectors: 0,
            record_files: vec![],
            row_count: 0,
            row_pages: vec![],
            keys: KeysImage::default(),
            schemas_json: b"[]".to_vec(),
            receipts_json: b"[]".to_vec(),
            tables: vec![TableImage {
                name: "t".into(),
                live: bitmap_bytes(&RoaringBitmap::new()),
                tenants: vec![],
                scalar,
                vectors: vec![],
                text: vec![],
            }],
            slot_bases: vec![],
        }
    }

    fn scalar_postings(state: &State) -> Vec<Option<Postings>> {
        let values = state.tables["t"].scalar["c"].values();
        (0..3).map(|n| values.get(&ScalarKey::Num(n)).cloned()).collect()
    }

    #[test]
    fn a_format_2_image_is_still_read_and_a_value_of_one_row_keeps_it_inline() {
        let dir = tempfile::tempdir().unwrap();
        let rows = |r: &[u32]| bitmap_bytes(&r.iter().copied().collect());
        // format 2 kept a bitmap for every value, an empty one included
        let v2 = scalar_image::<_, ScopeStats>(vec![rows(&[7]), rows(&[1, 5, 9]), rows(&[])]);
        std::fs::write(dir.path().join(file_name(1)), framed(2, &postcard::to_stdvec(&v2).unwrap())).unwrap();
        let state = load(dir.path(), 1).unwrap();
        let many = Postings::Many([1, 5, 9].into_iter().collect());
        assert_eq!(scalar_postings(&state), [Some(Postings::One(7)), Some(many.clone()), None]);

        let v3 = scalar_image::<_, ScopeStats>(vec![PostingsImage::One(7), PostingsImage::Many(rows(&[1, 5, 9]))]);
        std::fs::write(dir.path().join(file_name(2)), framed(3, &postcard::to_stdvec(&v3).unwrap())).unwrap();
        let state = load(dir.path(), 2).unwrap();
        assert_eq!(scalar_postings(&state), [Some(Postings::One(7)), Some(many), None]);
    }

    #[test]
    fn a_format_3_image_keys_its_long_strings_by_digest_as_it_loads() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(SCALAR_INLINE_BYTES + 1);
        let inline = "y".repeat(SCALAR_INLINE_BYTES);
        let mut v3 = scalar_image::<_, ScopeStats>(vec![PostingsImage::One(1)]);
        v3.tables[0].scalar[0].1 = vec![
            (ScalarKey::Str(long.clone()), PostingsImage::One(1)),
            (ScalarKey::Str(inline.clone()), PostingsImage::One(2)),
        ];
        std::fs::write(dir.path().join(file_name(1)), framed(3, &postcard::to_stdvec(&v3).unwrap())).unwrap();
        let state = load(dir.path(), 1).unwrap();
        let values = state.tables["t"].scalar["c"].values();
        assert!(matches!(ScalarKey::of_str(&long), ScalarKey::Digest(_)));
        assert_eq!(values.get(&ScalarKey::of_str(&long)), Some(&Postings::One(1)));
        assert_eq!(values.get(&ScalarKey::Str(inline)), Some(&Postings::One(2)));
        assert_eq!(values.len(), 2);
    }

    #[test]
    fn bm25_statistics_load_from_format_4_and_format_6_images() {
        let dir = tempfile::tempdir().unwrap();
        let mut analyzer = crate::index::text::analyzer();
        let mut toks = crate::index::text::Tokens::default();
        let mut stats = TextStats::default();
        let tenant: Arc<str> = Arc::from("a");
        stats.apply(&tenant, "body", toks.read(&mut analyzer, "solar wind"), 1);
        stats.apply(&tenant, "title", toks.read(&mut analyzer, "Solar"), 1);
        let terms = ["solar".to_string(), "wind".to_string()];
        let summary = |state: &State| {
            let q = state.tables["t"].text_stats.snapshot("a", None, &terms);
            (q.docs, q.tokens, q.df["solar"], q.df["wind"])
        };

        // format 4: frequencies as maps, and a tenant-wide copy, which is dropped
        let mut v4 = scalar_image::<PostingsImage, ScopeStats>(vec![]);
        v4.tables[0].text = stats
            .export()
            .into_iter()
            .map(|s| ScopeImage { tenant: s.tenant, column: s.column, stats: s.stats.stats().unwrap() })
            .collect();
        let stale = ScopeStats { docs: 99, ..Default::default() };
        v4.tables[0].text.push(ScopeImage { tenant: "a".into(), column: None, stats: stale });
        std::fs::write(dir.path().join(file_name(1)), framed(4, &postcard::to_stdvec(&v4).unwrap())).unwrap();
        assert_eq!(summary(&load(dir.path(), 1).unwrap()), (2, 3, 2, 1));

        let mut v6 = scalar_image::<PostingsImage, PackedScope>(vec![]);
        v6.tables[0].text = stats.export();
        std::fs::write(dir.path().join(file_name(2)), framed(6, &postcard::to_stdvec(&v6).unwrap())).unwrap();
        assert_eq!(summary(&load(dir.path(), 2).unwrap()), (2, 3, 2, 1));

        // packed frequencies that do not decode are a damaged image, not a panic
        v6.tables[0].text[0].stats.df = serde_bytes::ByteBuf::from(vec![3, 1]);
        std::fs::write(dir.path().join(file_name(3)), framed(6, &postcard::to_stdvec(&v6).unwrap())).unwrap();
        assert_eq!(load(dir.path(), 3).err().expect("refused").code, Code::WalCorrupt);
    }

    /// A checkpoint's or a flush's vectors are synced with the branch's lock
    /// let go: a writer queued for it would otherwise hold every read of the
    /// branch until the device had written them (and whatever else it had).
    #[test]
    fn vectors_are_synced_without_the_branch_lock() {
        use crate::schema::Metric;
        use crate::storage::state::VectorColumn;
        use std::sync::Mutex;
        let dir = tempfile::tempdir().unwrap();
        let mut state = State::new(RecordFiles::open(dir.path(), &[], 1).unwrap());
        let mut column = VectorColumn::new(Metric::Cosine, 3);
        assert!(column.data.insert(0, &[1.0, 2.0, 3.0]));
        state.tables.entry("t".into()).or_default().vectors.insert("emb".into(), column);
        let state = Arc::new(RwLock::new(state));
        let _scenario = fail::FailScenario::setup();
        let free_at_sync = Arc::new(Mutex::new(Vec::new()));
        let (seen, held) = (free_at_sync.clone(), state.clone());
        fail::cfg_callback("checkpoint::vectors_sync", move || {
            seen.lock().unwrap().push(held.try_write().is_some());
        })
        .unwrap();
        let mut open = None;
        let flushed = flush_vectors(dir.path(), 1, &mut open, &state).unwrap();
        assert_eq!(flushed.placed[&("t".to_string(), "emb".to_string())].1, 1);
        let sealed = write_vectors(dir.path(), 1, &mut open, &state).unwrap();
        assert!(sealed.path.is_some());
        assert_eq!(*free_at_sync.lock().unwrap(), [true, true], "the flush and the checkpoint synced unlocked");
    }

    #[test]
    fn a_scalar_column_is_built_when_first_used_and_checkpointed_as_it_was_read() {
        let dir = tempfile::tempdir().unwrap();
        let many: RoaringBitmap = [1, 5, 9].into_iter().collect();
        let values: ScalarValues = [
            (ScalarKey::Num(0), Postings::One(7)),
            (ScalarKey::Str("x".into()), Postings::Many(many.clone())),
            (ScalarKey::Bool(true), Postings::One(3)),
        ]
        .into_iter()
        .collect();
        let bytes = scalar_column_bytes(&values);
        assert_eq!(decode_scalar_column(&bytes).unwrap(), values);
        // the same bytes as the columns of the formats before
        let inline: Columns<PostingsImage> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(inline.len(), 3);

        let v7: BodyImage<ByteBuf, PackedScope> = image_of("c", ByteBuf::from(bytes.clone()));
        std::fs::write(dir.path().join(file_name(1)), framed(7, &postcard::to_stdvec(&v7).unwrap())).unwrap();
        check_image(dir.path(), 1).unwrap();
        let mut state = load(dir.path(), 1).unwrap();
        let column = state.tables.get_mut("t").unwrap().scalar.get_mut("c").unwrap();
        assert!(!column.is_built(), "a start builds no scalar column");
        // unbuilt, a checkpoint writes the bytes it read
        assert_eq!(column.image_bytes(), bytes);
        // rows written before the build (a replayed tail) are kept beside the
        // bytes, and merged in by the build
        column.insert(ScalarKey::Num(0), 8);
        column.insert(ScalarKey::Num(42), 2);
        assert!(!column.is_built(), "a write does not build the column");
        let mut expected = values.clone();
        expected.insert(ScalarKey::Num(0), Postings::Many([7, 8].into_iter().collect()));
        expected.insert(ScalarKey::Num(42), Postings::One(2));
        assert_eq!(decode_scalar_column(&column.image_bytes()).unwrap(), expected);
        assert!(column.is_built());
        assert_eq!(column.values().get(&ScalarKey::Str("x".into())), Some(&Postings::Many(many)));
        column.insert(ScalarKey::Num(42), 4);
        expected.insert(ScalarKey::Num(42), Postings::Many([2, 4].into_iter().collect()));
        assert_eq!(*column.values(), expected);

        // bytes that do not decode: doctor names the column
        let mut broken = v7;
        broken.tables[0].scalar[0].1 = ByteBuf::from(bytes[..bytes.len() - 1].to_vec());
        std::fs::write(dir.path().join(file_name(2)), framed(7, &postcard::to_stdvec(&broken).unwrap())).unwrap();
        let err = check_image(dir.path(), 2).expect_err("refused");
        assert_eq!(err.code, Code::WalCorrupt);
        assert!(err.message.contains("column t.c"), "{}", err.message);
        broken.tables[0].scalar[0].1 = ByteBuf::from([bytes.clone(), vec![0]].concat());
        assert!(decode_scalar_column(&broken.tables[0].scalar[0].1).is_err(), "trailing bytes are refused");
    }

    /// A state of `n` keys in two tenants, each with one version, and a
    /// second version of every third key; rows of the first page removed
    /// by retention.
    fn state_of(dir: &Path, n: u32) -> State {
        let mut state = State::new(RecordFiles::open(dir, &[], 1).unwrap());
        let row = |key, version_id, epoch| Row {
            key,
            version_id,
            epoch,
            superseded_at: NOT_SUPERSEDED,
            deleted: false,
            loc: RecordLoc { gen: 1, offset: u64::from(key) * 10, len: 10 },
        };
        for k in 0..n {
            let tenant = if k % 2 == 0 { "a" } else { "b" };
            let id = format!("id-{k}-é");
            state.add_key("t", tenant, &id, KeyRows::from_slice(&[k]));
            state.rows.push(row(k, 1, 1));
        }
        for k in (0..n).step_by(3) {
            let r = state.rows.len() as u32;
            state.rows.get_mut(k as usize).unwrap().superseded_at = 2;
            state.rows.push(row(k, 2, 2));
            state.keys.rows_mut(k).push(r);
        }
        for r in 0..10 {
            state.rows.get_mut(r).unwrap().loc = RecordLoc::PURGED;
        }
        state.purged_rows = 10;
        state
    }

    /// A key's table, tenant, id and versions.
    type KeyParts = (String, String, String, Vec<u32>);

    /// Every key with its versions, and every row.
    fn contents(state: &State) -> (Vec<KeyParts>, Vec<String>) {
        let keys =
            state.keys.iter().map(|k| (k.table.to_string(), k.tenant.to_string(), k.id.to_string(), k.rows.to_vec()));
        (keys.collect(), state.rows.iter().map(|r| format!("{r:?}")).collect())
    }

    fn checkpoint(dir: &Path, state: &State, gen: u32) {
        let sealed = SealedVectors { gen, path: None, placed: Placed::default() };
        commit(capture(dir, state, gen, &sealed).unwrap()).unwrap();
    }

    #[test]
    fn a_format_8_image_is_read_where_it_lies_and_finds_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let n = 3 * PAGE_ROWS as u32 + 17;
        let state = state_of(dir.path(), n);
        checkpoint(dir.path(), &state, 2);
        check_image(dir.path(), 2).unwrap();
        let mut loaded = load(dir.path(), 2).unwrap();
        let unpacked = loaded.rows.heap_bytes();
        assert!(unpacked < PAGE_ROWS * std::mem::size_of::<Row>(), "a load unpacks no page ({unpacked} bytes)");
        assert!(loaded.keys.heap_bytes() < 1024, "nor builds a key table");
        assert_eq!(contents(&loaded), contents(&state));
        assert_eq!(loaded.purged_rows, 10);
        for k in [0, 1, 2, n - 1] {
            let tenant = if k % 2 == 0 { "a" } else { "b" };
            assert_eq!(loaded.keys.find("t", tenant, &format!("id-{k}-é")), Some(k));
        }
        assert_eq!(loaded.keys.find("t", "b", "id-0-é"), None, "another tenant's key");
        assert_eq!(loaded.keys.find("t", "a", "id-0-"), None);
        // a key added and an image key changed after the load, then checkpointed again
        let added = loaded.add_key("t", "c", "new", KeyRows::from_slice(&[0]));
        loaded.keys.rows_mut(1).push(7);
        loaded.rows.get_mut(PAGE_ROWS + 1).unwrap().epoch = 5;
        checkpoint(dir.path(), &loaded, 3);
        let again = load(dir.path(), 3).unwrap();
        assert_eq!(contents(&again), contents(&loaded));
        assert_eq!(again.keys.find("t", "c", "new"), Some(added));
        assert_eq!(again.rows[PAGE_ROWS + 1].epoch, 5);
    }

    #[test]
    fn a_format_7_image_loads_and_its_next_checkpoint_is_format_8() {
        let dir = tempfile::tempdir().unwrap();
        let state = state_of(dir.path(), 2 * PAGE_ROWS as u32 + 5);
        let mut v7 = image_of("c", ByteBuf::from(scalar_column_bytes(&ScalarValues::default())));
        v7.row_count = state.rows.len() as u64;
        v7.row_pages = state
            .rows
            .packed_pages(&mut SectionBuilder::default())
            .into_iter()
            .map(|(n, _)| {
                let mut packed = Vec::new();
                let from = n as usize * PAGE_ROWS;
                let rows: Vec<Row> =
                    (from..(from + PAGE_ROWS).min(state.rows.len())).map(|r| state.rows[r].clone()).collect();
                pack_rows(&rows, &mut packed);
                (n, ByteBuf::from(packed))
            })
            .collect();
        v7.keys = KeysImage::of(state.keys.iter().map(|k| (&**k.table, &**k.tenant, k.id, k.rows)));
        let v7: BodyImage<ByteBuf, PackedScope> = v7;
        std::fs::write(dir.path().join(file_name(1)), framed(7, &postcard::to_stdvec(&v7).unwrap())).unwrap();
        let loaded = load(dir.path(), 1).unwrap();
        assert_eq!(contents(&loaded), contents(&state));
        assert_eq!(loaded.purged_rows, 10, "counted from the rows");
        checkpoint(dir.path(), &loaded, 2);
        let bytes = std::fs::read(dir.path().join(file_name(2))).unwrap();
        assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 8);
        assert_eq!(contents(&load(dir.path(), 2).unwrap()), contents(&state));
    }

    #[test]
    fn a_damaged_section_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = state_of(dir.path(), 100);
        checkpoint(dir.path(), &state, 2);
        let path = dir.path().join(file_name(2));
        let good = std::fs::read(&path).unwrap();
        let at = good.len() - SECTION_TRAILER_LEN - 5;
        let mut flipped = good.clone();
        flipped[at] ^= 1;
        let cut = good[..good.len() - 1].to_vec();
        let mut trailer = good.clone();
        *trailer.last_mut().unwrap() ^= 1;
        for damaged in [flipped, cut, trailer] {
            std::fs::write(&path, &damaged).unwrap();
            assert_eq!(load(dir.path(), 2).err().expect("refused").code, Code::WalCorrupt);
            assert_eq!(check_image(dir.path(), 2).expect_err("refused").code, Code::WalCorrupt);
        }
    }

    #[test]
    fn an_image_of_a_newer_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let image = scalar_image::<PostingsImage, PackedScope>(vec![]);
        let bytes = framed(FORMAT_VERSION + 1, &postcard::to_stdvec(&image).unwrap());
        std::fs::write(dir.path().join(file_name(1)), bytes).unwrap();
        let err = load(dir.path(), 1).err().expect("refused");
        assert_eq!(err.code, Code::FormatUnsupported);
        assert!(err.message.contains("newer Braid"), "{}", err.message);
    }

    #[test]
    fn a_format_1_image_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        // a tombstone and the version it hid: neither needs a record file
        let row = |version_id, epoch, superseded_at| Row {
            key: 0,
            version_id,
            epoch,
            superseded_at,
            deleted: true,
            loc: RecordLoc::default(),
        };
        let v1 = ImageV1 {
            gen: 1,
            created_ms: 0,
            schema_epoch: 0,
            latest_epoch: 2,
            horizon: 0,
            invalid_vectors: 0,
            record_files: vec![],
            rows: vec![row(1, 1, 2), row(2, 2, NOT_SUPERSEDED)],
            keys: vec![KeyImage { table: "t".into(), tenant: "a".into(), id: "x".into(), rows: vec![0, 1] }],
            schemas_json: b"[]".to_vec(),
            receipts_json: b"[]".to_vec(),
            tables: vec![],
        };
        let bytes = framed(1, &postcard::to_stdvec(&v1).unwrap());
        std::fs::write(dir.path().join(file_name(1)), bytes).unwrap();
        let state = load(dir.path(), 1).unwrap();
        assert_eq!(state.rows.len(), 2);
        assert_eq!(state.latest_epoch, 2);
        assert_eq!(state.last_version_id("t", "a", "x"), 2);
        assert_eq!(state.rows[0].superseded_at, 2);
    }
}
