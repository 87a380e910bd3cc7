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
//! body length u64 | body` where body is an [`Image`] in postcard. A data
//! directory whose image has a newer format is refused, not guessed at.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};

use crate::error::{Code, Error, Result};
use crate::faults;
use crate::fsutil;
use crate::index::text::{ScopeImage, TextStats};
use crate::schema::TableSchema;
use crate::storage::commit::Receipt;
use crate::storage::records::{self, RecordFiles};
use crate::storage::state::{Row, ScalarKey, State, TableData, VectorChunk, VectorColumn, VectorStore};
use crate::storage::wal;

pub const FORMAT_VERSION: u32 = 1;
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

#[derive(Serialize, Deserialize)]
struct Image {
    /// WAL segments from this generation on are the tail to replay.
    gen: u32,
    created_ms: u64,
    schema_epoch: u64,
    latest_epoch: u64,
    horizon: u64,
    invalid_vectors: u64,
    /// Sealed record files.
    record_files: Vec<u32>,
    rows: Vec<Row>,
    keys: Vec<KeyImage>,
    /// JSON: schemas and receipts hold JSON values, which postcard cannot
    /// describe; both are small next to the rows.
    schemas_json: Vec<u8>,
    receipts_json: Vec<u8>,
    tables: Vec<TableImage>,
}

#[derive(Serialize, Deserialize)]
struct KeyImage {
    table: String,
    tenant: String,
    id: String,
    rows: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
struct TableImage {
    name: String,
    live: Vec<u8>,
    tenants: Vec<(String, Vec<u8>)>,
    scalar: Vec<ScalarImage>,
    vectors: Vec<VectorImage>,
    text: Vec<ScopeImage>,
}

/// A scalar column's equality bitmaps: (column, [(value, bitmap)]).
type ScalarImage = (String, Vec<(ScalarKey, Vec<u8>)>);

#[derive(Serialize, Deserialize)]
struct VectorImage {
    column: String,
    rows: Vec<u8>,
    slots: Vec<u32>,
    chunks: Vec<ChunkImage>,
}

#[derive(Serialize, Deserialize, Clone, Copy)]
struct ChunkImage {
    gen: u32,
    offset: u64,
    count: u64,
}

fn bitmap_bytes(b: &RoaringBitmap) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.serialized_size());
    b.serialize_into(&mut out).expect("writing to a Vec cannot fail");
    out
}

fn bitmap(bytes: &[u8]) -> Result<RoaringBitmap> {
    RoaringBitmap::deserialize_from(bytes).map_err(|e| Error::storage(format!("damaged bitmap in checkpoint: {e}")))
}

/// Where the vectors written since the last checkpoint went: per (table,
/// column), the byte offset in `vectors-<gen>.f32` and the count.
pub struct SealedVectors {
    pub gen: u32,
    pub path: Option<PathBuf>,
    pub placed: HashMap<(String, String), (u64, u64)>,
}

/// Writes every vector column's tail to `vectors-<gen>.f32` and fsyncs it
/// (no file when no column has new vectors). The state is not changed:
/// [`install_vectors`] maps the file once the checkpoint is durable.
pub fn write_vectors(dir: &Path, gen: u32, state: &State) -> Result<SealedVectors> {
    let mut placed = HashMap::new();
    let mut bytes: Vec<u8> = Vec::new();
    for (table, data) in &state.tables {
        for (column, vc) in &data.vectors {
            if vc.data.unsealed_len() == 0 {
                continue;
            }
            let offset = bytes.len() as u64;
            for v in vc.data.unsealed() {
                for x in v {
                    bytes.extend_from_slice(&x.to_le_bytes());
                }
            }
            placed.insert((table.clone(), column.clone()), (offset, vc.data.unsealed_len() as u64));
        }
    }
    if bytes.is_empty() {
        return Ok(SealedVectors { gen, path: None, placed });
    }
    let path = dir.join(vectors_name(gen));
    faults::check("checkpoint::vectors")?;
    let mut file = wal::create_private(&path, true)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    fsutil::sync_dir(&path)?;
    Ok(SealedVectors { gen, path: Some(path), placed })
}

fn map_file(path: &Path) -> Result<Arc<Mmap>> {
    let file =
        File::open(path).map_err(|e| Error::storage(format!("vector file {} is missing: {e}", path.display())))?;
    // SAFETY: vector files are written once, fsynced and never modified or
    // truncated afterwards (only deleted with their branch), so the mapping
    // does not change under the reader.
    let map = unsafe { Mmap::map(&file)? };
    Ok(Arc::new(map))
}

/// Records each vector column's unsealed vectors as sealed in the file.
pub fn install_vectors(state: &mut State, sealed: &SealedVectors) -> Result<()> {
    let Some(path) = &sealed.path else { return Ok(()) };
    let map = map_file(path)?;
    for (table, data) in state.tables.iter_mut() {
        for (column, vc) in data.vectors.iter_mut() {
            if let Some((offset, count)) = sealed.placed.get(&(table.clone(), column.clone())) {
                vc.data.seal(VectorChunk {
                    map: map.clone(),
                    offset: *offset as usize,
                    count: *count as usize,
                    gen: sealed.gen,
                });
            }
        }
    }
    Ok(())
}

/// The image of `state` as of the start of generation `gen`, with the open
/// record file and the vector tails counted as sealed (by the checkpoint
/// that writes this image).
pub fn capture(state: &State, gen: u32, sealed: &SealedVectors) -> Result<Vec<u8>> {
    let mut record_files = state.records.sealed();
    record_files.push(state.records.open_gen());
    let rows = state.rows.clone();
    let keys = state
        .keys
        .iter()
        .map(|k| KeyImage {
            table: k.table.to_string(),
            tenant: k.tenant.to_string(),
            id: k.id.to_string(),
            rows: k.rows.clone(),
        })
        .collect();
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
            vectors.push(VectorImage {
                column: column.clone(),
                rows: bitmap_bytes(&vc.rows),
                slots: vc.data.slots().to_vec(),
                chunks,
            });
        }
        tables.push(TableImage {
            name: name.clone(),
            live: bitmap_bytes(&data.live),
            tenants: data.tenants.iter().map(|(t, b)| (t.to_string(), bitmap_bytes(b))).collect(),
            scalar: data
                .scalar
                .iter()
                .map(|(col, values)| (col.clone(), values.iter().map(|(k, b)| (k.clone(), bitmap_bytes(b))).collect()))
                .collect(),
            vectors,
            text: data.text_stats.export(),
        });
    }
    let image = Image {
        gen,
        created_ms: crate::storage::commit::now_ms(),
        schema_epoch: state.schema_epoch,
        latest_epoch: state.latest_epoch,
        horizon: state.horizon,
        invalid_vectors: state.invalid_vectors,
        record_files,
        rows,
        keys,
        schemas_json: serde_json::to_vec(&schemas).map_err(Error::internal)?,
        receipts_json: serde_json::to_vec(&receipts).map_err(Error::internal)?,
        tables,
    };
    let body = postcard::to_stdvec(&image).map_err(|e| Error::internal(format!("checkpoint encoding: {e}")))?;
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Writes an image durably: a temporary file, fsync, rename, fsync of the
/// directory. The rename is the checkpoint's commit point.
pub fn write(dir: &Path, gen: u32, bytes: &[u8]) -> Result<PathBuf> {
    let path = dir.join(file_name(gen));
    let tmp = dir.join(format!(".{}.tmp", file_name(gen)));
    faults::check("checkpoint::write")?;
    let mut file = wal::create_private(&tmp, true)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    faults::check("checkpoint::rename")?;
    std::fs::rename(&tmp, &path)?;
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
    let bytes = std::fs::read(&path)?;
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err(Error::new(Code::WalCorrupt, format!("{} is not a Braid checkpoint", path.display())));
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if format > FORMAT_VERSION {
        return Err(unsupported(
            &path,
            format!(
                "checkpoint format {format} was written by a newer Braid; this build reads format {FORMAT_VERSION} \
                 and older. Run the newer version, or restore a snapshot taken by this one."
            ),
        ));
    }
    let crc = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
    let len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes")) as usize;
    let body = bytes.get(HEADER_LEN..HEADER_LEN.saturating_add(len)).filter(|b| b.len() == len);
    let Some(body) = body.filter(|b| crc32fast::hash(b) == crc) else {
        return Err(Error::new(
            Code::WalCorrupt,
            format!("{} fails its checksum; restore a snapshot (docs/operations.md)", path.display()),
        ));
    };
    let image: Image = postcard::from_bytes(body)
        .map_err(|e| Error::new(Code::WalCorrupt, format!("{} cannot be decoded: {e}", path.display())))?;
    let records = RecordFiles::open(dir, &image.record_files, gen)?;
    let mut state = State::new(records);
    state.schema_epoch = image.schema_epoch;
    state.latest_epoch = image.latest_epoch;
    state.durable_epoch = image.latest_epoch;
    state.horizon = image.horizon;
    state.invalid_vectors = image.invalid_vectors;
    state.rows = image.rows;
    state.purged_rows = state.rows.iter().filter(|r| r.loc.is_purged()).count() as u64;
    state.keys.reserve(image.keys.len());
    state.key_index.reserve(&state.keys, image.keys.len());
    for k in image.keys {
        state.add_key(&k.table, &k.tenant, &k.id, k.rows);
    }
    let schemas: Vec<TableSchema> = serde_json::from_slice(&image.schemas_json).map_err(Error::storage)?;
    state.schemas = schemas.into_iter().map(|s| (s.name.clone(), s)).collect::<BTreeMap<_, _>>();
    let receipts: Vec<Receipt> = serde_json::from_slice(&image.receipts_json).map_err(Error::storage)?;
    state.receipts = receipts.into_iter().map(|r| (r.key.clone(), r)).collect();
    let mut maps: HashMap<u32, Arc<Mmap>> = HashMap::new();
    for t in image.tables {
        let schema = state.schemas.get(&t.name);
        let mut data =
            TableData { live: bitmap(&t.live)?, text_stats: TextStats::import(t.text), ..Default::default() };
        for (tenant, b) in t.tenants {
            data.tenants.insert(Arc::from(tenant), bitmap(&b)?);
        }
        for (col, values) in t.scalar {
            let mut m = HashMap::with_capacity(values.len());
            for (k, b) in values {
                m.insert(k, bitmap(&b)?);
            }
            data.scalar.insert(col, m);
        }
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
                let map = match maps.get(&c.gen) {
                    Some(m) => m.clone(),
                    None => {
                        let m = map_file(&dir.join(vectors_name(c.gen)))?;
                        maps.insert(c.gen, m.clone());
                        m
                    }
                };
                let end = c.offset as usize + c.count as usize * dim as usize * 4;
                if c.offset % 4 != 0 || end > map.len() {
                    return Err(Error::storage(format!("vector chunk past the end of {}", vectors_name(c.gen))));
                }
                chunks.push(VectorChunk { map, offset: c.offset as usize, count: c.count as usize, gen: c.gen });
            }
            let store = VectorStore::restored(dim, v.slots, chunks).ok_or_else(|| {
                Error::storage(format!("checkpoint vectors of {}.{} do not match their slots", t.name, v.column))
            })?;
            data.vectors.insert(v.column.clone(), VectorColumn::over(metric, store, bitmap(&v.rows)?));
        }
        state.tables.insert(t.name, data);
    }
    Ok(state)
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
