//! The record files of a branch: every version's fields, on disk.
//!
//! Records are appended to `records-<gen>.dat`, one file per checkpoint
//! generation. Memory keeps only where each version is ([`RecordLoc`]); the
//! fields are read and decoded for the rows a query returns. A file is
//! written between two checkpoints and never again after the checkpoint that
//! seals it (fsyncs it and names it in its image), so sealed files are
//! immutable segments. The WAL stays the ack path: the open file is not
//! fsynced per write, and a start rebuilds it from the log tail.
//!
//! A branch seals one file per checkpoint, so a long-lived branch has
//! hundreds (one every five minutes of light writes). Sealed files are not
//! all kept open: at most [`OPEN_SEALED`] handles per branch, the most
//! recently read, and a read of another file opens it (one `open`, a few
//! microseconds beside the read and decode). Keeping every one open had run a
//! server out of file descriptors: it could not restart under `ulimit -n
//! 1024` after 1,200 checkpoints, and 200 restored branches held 11,000
//! descriptors. A checkpoint that finds the open file empty (a snapshot of
//! a branch with no writes since the last one) does not seal it at all.
//!
//! ```text
//! file   : b"BRAIDREC" | format version u8 = 1 | sealed length u56 LE | entry*
//! entry  : crc u32 (CRC-32 of the record) | record (storage/codec.rs)
//! ```
//!
//! The sealed length is 0 while the file is written; the checkpoint that
//! seals it writes the file's length there before it fsyncs it, and a start
//! (and `braid doctor`) refuses a sealed file shorter than that (found by a
//! black-box review: a file cut short passed both, and the reads of the rows
//! past its end failed). Files sealed before the length was written hold 0
//! there and are checked for their header only.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Code, Error, Result};
use crate::faults;
use crate::fsutil;
use crate::storage::{codec, wal};

const MAGIC: &[u8; 8] = b"BRAIDREC";
const FORMAT_VERSION: u8 = 1;
pub const HEADER_LEN: u64 = 16;

/// Where one version's fields are: file generation, byte offset, length
/// (checksum included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RecordLoc {
    pub gen: u32,
    pub offset: u64,
    pub len: u32,
}

impl RecordLoc {
    /// Where a version removed by retention points: nowhere.
    pub const PURGED: RecordLoc = RecordLoc { gen: u32::MAX, offset: 0, len: 0 };

    pub fn is_purged(&self) -> bool {
        *self == RecordLoc::PURGED
    }
}

pub fn file_name(gen: u32) -> String {
    format!("records-{gen:08}.dat")
}

/// Parses `records-<gen>.dat`.
pub fn gen_of(name: &str) -> Option<u32> {
    name.strip_prefix("records-")?.strip_suffix(".dat")?.parse().ok()
}

/// Whether the sealed files `sealed` of `dir` are there, as
/// [`RecordFiles::open`] requires.
pub fn check_sealed(dir: &Path, sealed: &[u32]) -> Result<()> {
    for gen in sealed {
        let path = dir.join(file_name(*gen));
        let unreadable =
            |e: std::io::Error| Error::storage(format!("record file {} cannot be read: {e}", path.display()));
        let file = File::open(&path).map_err(unreadable)?;
        let len = file.metadata().map_err(unreadable)?.len();
        let mut header = [0u8; HEADER_LEN as usize];
        if len >= HEADER_LEN {
            file.read_exact_at(&mut header, 0).map_err(unreadable)?;
        }
        let mut stamped = [0u8; 8];
        stamped[..7].copy_from_slice(&header[9..16]);
        let sealed_len = u64::from_le_bytes(stamped);
        if &header[..8] != MAGIC || len < sealed_len {
            let what = if &header[..8] != MAGIC {
                format!("has no record file header ({len} bytes)")
            } else {
                format!("is {len} bytes long, cut short of the {sealed_len} its checkpoint sealed")
            };
            return Err(Error::new(
                Code::WalCorrupt,
                format!(
                    "record file {} {what}: it changed on disk after its checkpoint wrote it (docs/operations.md, \"braid doctor\")",
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Whether an entry's bytes (its checksum, then the record) pass their
/// checksum.
pub fn checks_out(entry: &[u8]) -> bool {
    let (crc, body) = entry.split_at(4.min(entry.len()));
    crc.len() == 4 && u32::from_le_bytes(crc.try_into().expect("4 bytes")) == crc32fast::hash(body)
}

/// Sealed files a branch keeps open at once (see the module docs).
pub const OPEN_SEALED: usize = 16;

/// The largest entry a read that must not wait ([`Wait::Never`]) takes: it
/// runs on a caller's thread that serves others (Node's), so a larger
/// record is read and decoded where waiting is allowed.
pub const NOW_MAX_BYTES: usize = 64 * 1024;

/// Staged entries are written once they reach this much, not only at the
/// end of their commit group: a put-batch of 2,500 records with 256-d
/// vectors has 3-6 MB of fields, which the log frame already holds.
pub const STAGED_BYTES: usize = 1 << 20;

/// Whether a read may wait for the disk or for another thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Wait as long as the read takes.
    Block,
    /// Answer only from memory (the page cache), else not at all.
    Never,
}

/// Fills `buf` from `offset` of `file` only if every byte is in the page
/// cache: `preadv2` with `RWF_NOWAIT` (Linux 4.14) fails with `EAGAIN`, or
/// reads short, rather than wait for the disk. Any failure, including a
/// file system or kernel without the flag, is `false`: the caller reads the
/// usual way, where waiting is allowed, and reports a real error from there.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn read_cached(file: &File, buf: &mut [u8], offset: u64) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(offset) = libc::off_t::try_from(offset) else { return false };
    let iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: one iovec over `buf`, which outlives the call; the descriptor is `file`'s
    let read = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    usize::try_from(read).is_ok_and(|n| n == buf.len())
}

/// Elsewhere no read is known not to wait.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn read_cached(_file: &File, _buf: &mut [u8], _offset: u64) -> bool {
    false
}

/// The most recently read sealed files' handles, most recent first.
#[derive(Default)]
struct Handles(Vec<(u32, Arc<File>)>);

impl Handles {
    /// The handle of generation `gen` if it is kept, now the most recently read.
    fn take(&mut self, gen: u32) -> Option<Arc<File>> {
        let at = self.0.iter().position(|(g, _)| *g == gen)?;
        let hit = self.0.remove(at);
        let file = hit.1.clone();
        self.0.insert(0, hit);
        Some(file)
    }
}

pub struct RecordFiles {
    dir: PathBuf,
    /// The sealed files rows point into.
    sealed: BTreeSet<u32>,
    /// Handles of some of them ([`OPEN_SEALED`] at most).
    handles: Mutex<Handles>,
    /// The file being written.
    open: Arc<File>,
    open_gen: u32,
    open_len: u64,
    /// Where the open file's writeback was last started
    /// ([`fsutil::start_writeback`]).
    written_back: u64,
    /// Encoded entries not yet written to the open file.
    buffer: Vec<u8>,
    /// A write of staged entries failed while more were being staged
    /// ([`STAGED_BYTES`]): the next [`RecordFiles::flush`] answers it.
    failed: Option<Error>,
    /// A failed write could not be cut back: the open file's end is unknown,
    /// so it takes nothing more (a restart rebuilds it from the log).
    damaged: bool,
}

impl RecordFiles {
    /// Opens the sealed files `sealed` and starts generation `open_gen`
    /// empty (whatever a crashed run left in it is rebuilt from the log).
    pub fn open(dir: &Path, sealed: &[u32], open_gen: u32) -> Result<RecordFiles> {
        check_sealed(dir, sealed)?;
        Ok(RecordFiles {
            dir: dir.to_path_buf(),
            sealed: sealed.iter().copied().collect(),
            handles: Mutex::default(),
            open: Arc::new(Self::create(dir, open_gen)?),
            open_gen,
            open_len: HEADER_LEN,
            written_back: 0,
            buffer: Vec::new(),
            failed: None,
            damaged: false,
        })
    }

    /// Creates generation `gen`'s file, empty but for its header.
    ///
    /// Neither the file nor its directory entry is fsynced: until a
    /// checkpoint seals it, the file holds nothing the WAL does not (a start
    /// creates it again and replays the tail into it), and the checkpoint
    /// that seals it fsyncs the file and, after renaming its image into
    /// place, the directory holding both. A start therefore syncs nothing
    /// before it serves. An fsync here had made every start after a crash
    /// wait for the device to write back whatever the killed server left
    /// dirty: 0.6-0.7 s of a 1,000,000-record restart
    /// (bench/JOURNAL.md, "The twenty-first session").
    fn create(dir: &Path, gen: u32) -> Result<File> {
        let path = dir.join(file_name(gen));
        let mut file = wal::create_private(&path, true)?;
        let mut header = [0u8; HEADER_LEN as usize];
        header[..8].copy_from_slice(MAGIC);
        header[8] = FORMAT_VERSION;
        file.write_all(&header)?;
        Ok(OpenOptions::new().read(true).append(true).open(&path)?)
    }

    /// The handle of generation `gen`: the open file's, or a sealed file's
    /// from the handles kept, else opened now (and kept, in place of the
    /// least recently read).
    fn file(&self, gen: u32) -> Result<Arc<File>> {
        if gen == self.open_gen {
            return Ok(self.open.clone());
        }
        if !self.sealed.contains(&gen) {
            return Err(Error::storage(format!("record file generation {gen} is not open")));
        }
        let mut handles = self.handles.lock();
        if let Some(file) = handles.take(gen) {
            return Ok(file);
        }
        let path = self.dir.join(file_name(gen));
        let file = Arc::new(
            File::open(&path)
                .map_err(|e| Error::storage(format!("record file {} cannot be opened: {e}", path.display())))?,
        );
        handles.0.truncate(OPEN_SEALED - 1);
        handles.0.insert(0, (gen, file.clone()));
        Ok(file)
    }

    /// [`RecordFiles::file`] without waiting: `None` when the handle is not
    /// open or another thread holds the handles.
    fn file_now(&self, gen: u32) -> Option<Arc<File>> {
        if gen == self.open_gen {
            return Some(self.open.clone());
        }
        self.handles.try_lock()?.take(gen)
    }

    /// Sealed files' handles held now (at most [`OPEN_SEALED`]).
    pub fn open_handles(&self) -> usize {
        self.handles.lock().0.len()
    }

    /// Puts a version's fields, already encoded ([`codec::encode_fields`]),
    /// into the write buffer behind their checksum and returns where they
    /// will be once [`RecordFiles::flush`] has run.
    pub fn stage(&mut self, fields: &[u8]) -> RecordLoc {
        self.buffer.extend_from_slice(&crc32fast::hash(fields).to_le_bytes());
        self.buffer.extend_from_slice(fields);
        let len = (4 + fields.len()) as u32;
        let loc = RecordLoc { gen: self.open_gen, offset: self.open_len, len };
        self.open_len += len as u64;
        self.write_if_full();
        loc
    }

    /// Writes the staged entries once they reach [`STAGED_BYTES`], so a
    /// large commit (a put-batch of megabytes) is not held twice, in its
    /// log frame and here. A failure is kept for [`RecordFiles::flush`],
    /// which the caller runs before it uses any location staged.
    fn write_if_full(&mut self) {
        if self.buffer.len() >= STAGED_BYTES && self.failed.is_none() {
            if let Err(e) = self.flush() {
                self.failed = Some(e);
            }
        }
    }

    /// Writes the staged entries to the open file (page cache; durability
    /// comes from the WAL until a checkpoint fsyncs the file). On failure
    /// the staged entries are dropped, as if never staged (the branch stops
    /// taking writes, and a restart rebuilds the open file from the log);
    /// entries of the same group written before the failure, once
    /// [`STAGED_BYTES`] were staged, stay in the file, which nothing points
    /// to.
    pub fn flush(&mut self) -> Result<()> {
        if let Some(e) = self.failed.take() {
            // what was staged after the failed write goes with it
            self.open_len -= self.buffer.len() as u64;
            self.buffer.clear();
            return Err(e);
        }
        if self.buffer.is_empty() {
            return Ok(());
        }
        if self.damaged {
            self.open_len -= self.buffer.len() as u64;
            self.buffer.clear();
            return Err(Error::storage("an earlier write to the record file could not be undone"));
        }
        let mut file: &File = &self.open;
        let written = faults::check("records::write").and_then(|()| file.write_all(&self.buffer));
        if written.is_err() {
            self.open_len -= self.buffer.len() as u64;
            // a short write leaves part of the entries: cut them, so the next
            // append lands where open_len says
            self.damaged = file.set_len(self.open_len).is_err();
        }
        self.buffer.clear();
        written?;
        // the checkpoint's fsync then waits for the last few MiB only
        if self.open_len - self.written_back >= fsutil::WRITEBACK_BYTES {
            fsutil::start_writeback(file, self.written_back, self.open_len - self.written_back);
            self.written_back = self.open_len;
        }
        Ok(())
    }

    /// Reads a version's entry bytes (checksum verified).
    fn entry(&self, loc: RecordLoc) -> Result<Vec<u8>> {
        Ok(self.entry_in(loc, Wait::Block)?.expect("a blocking read answers"))
    }

    /// [`RecordFiles::entry`], or with [`Wait::Never`] `None` when answering
    /// would wait: the bytes are not in the page cache, the file's handle is
    /// not open, another thread holds the handles, or the entry is larger
    /// than [`NOW_MAX_BYTES`].
    fn entry_in(&self, loc: RecordLoc, wait: Wait) -> Result<Option<Vec<u8>>> {
        if loc.is_purged() {
            return Err(Error::new(
                Code::TemporalBeforeHorizon,
                "this version is below the retained horizon and was removed by retention",
            ));
        }
        let written = self.open_len - self.buffer.len() as u64;
        if loc.gen == self.open_gen && loc.offset >= written {
            // staged by this commit, not yet flushed
            let at = (loc.offset - written) as usize;
            let bytes = self
                .buffer
                .get(at..at + loc.len as usize)
                .ok_or_else(|| Error::storage("record location past the staged bytes"))?;
            return Ok(Some(bytes[4..].to_vec()));
        }
        let mut bytes = vec![0u8; loc.len as usize];
        match wait {
            Wait::Block => self.file(loc.gen)?.read_exact_at(&mut bytes, loc.offset).map_err(|e| {
                // a file cut short said only "failed to fill whole buffer" (found by a black-box review)
                Error::storage(format!(
                    "record at {} offset {} ({} bytes) cannot be read: {e}{}",
                    file_name(loc.gen),
                    loc.offset,
                    loc.len,
                    if e.kind() == std::io::ErrorKind::UnexpectedEof { " (the file ends before it)" } else { "" }
                ))
            })?,
            Wait::Never => {
                if loc.len as usize > NOW_MAX_BYTES {
                    return Ok(None);
                }
                let Some(file) = self.file_now(loc.gen) else { return Ok(None) };
                if !read_cached(&file, &mut bytes, loc.offset) {
                    return Ok(None);
                }
            }
        }
        if !checks_out(&bytes) {
            return Err(Error::storage(format!(
                "record at {} offset {} fails its checksum",
                file_name(loc.gen),
                loc.offset
            )));
        }
        bytes.drain(..4);
        Ok(Some(bytes))
    }

    /// A version's fields; with `only`, just those.
    pub fn read(&self, loc: RecordLoc, only: Option<&[String]>) -> Result<Map<String, Value>> {
        codec::decode_fields(&self.entry(loc)?, only)
    }

    /// [`RecordFiles::read`] if it can answer without waiting
    /// ([`RecordFiles::entry_in`]), else `None`.
    pub fn read_now(&self, loc: RecordLoc, only: Option<&[String]>) -> Option<Result<Map<String, Value>>> {
        match self.entry_in(loc, Wait::Never) {
            Ok(Some(entry)) => Some(codec::decode_fields(&entry, only)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// One field of a version.
    pub fn read_field(&self, loc: RecordLoc, name: &str) -> Result<Option<Value>> {
        codec::decode_field(&self.entry(loc)?, name)
    }

    /// Stages an entry copied verbatim (checksum first) from a sealed file,
    /// as [`RecordFiles::stage`] does for new fields.
    pub fn stage_copy(&mut self, entry: &[u8]) -> RecordLoc {
        self.buffer.extend_from_slice(entry);
        let loc = RecordLoc { gen: self.open_gen, offset: self.open_len, len: entry.len() as u32 };
        self.open_len += entry.len() as u64;
        self.write_if_full();
        loc
    }

    /// The whole of a sealed file, to copy the entries that survive
    /// retention out of it.
    pub fn read_sealed(&self, gen: u32) -> Result<Vec<u8>> {
        if gen == self.open_gen || !self.sealed.contains(&gen) {
            return Err(Error::storage(format!("record file generation {gen} is not sealed")));
        }
        let file = self.file(gen)?;
        let len = file.metadata()?.len();
        let mut bytes = vec![0u8; len as usize];
        file.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    }

    /// Bytes of a sealed file, header included.
    pub fn file_len(&self, gen: u32) -> Option<u64> {
        if gen == self.open_gen {
            return self.open.metadata().ok().map(|m| m.len());
        }
        self.sealed
            .contains(&gen)
            .then(|| std::fs::metadata(self.dir.join(file_name(gen))).ok())
            .flatten()
            .map(|m| m.len())
    }

    /// Stops using a sealed file whose surviving entries were copied out;
    /// returns its path, to delete once a checkpoint no longer names it.
    pub fn retire(&mut self, gen: u32) -> Option<PathBuf> {
        if gen == self.open_gen || !self.sealed.remove(&gen) {
            return None;
        }
        self.handles.lock().0.retain(|(g, _)| *g != gen);
        Some(self.dir.join(file_name(gen)))
    }

    /// The file being written, for a checkpoint to fsync.
    pub fn open_file(&self) -> Arc<File> {
        self.open.clone()
    }

    /// Writes the open file's length into its header, for the checkpoint
    /// that seals it to fsync with the file (after [`RecordFiles::flush`],
    /// while no write is appended): [`check_sealed`] reads it back. Through a
    /// handle of its own: Linux appends a `pwrite` to the append handle.
    pub fn stamp_length(&self) -> Result<()> {
        if !self.open_has_entries() {
            return Ok(());
        }
        let file = OpenOptions::new().write(true).open(self.dir.join(file_name(self.open_gen)))?;
        file.write_at(&self.open_len.to_le_bytes()[..7], 9)?;
        Ok(())
    }

    /// Whether the open file holds any entry (flushed or staged).
    pub fn open_has_entries(&self) -> bool {
        self.open_len > HEADER_LEN
    }

    /// Starts generation `next` once a checkpoint has sealed the open file
    /// (fsynced it and named it in its image). An open file with no entries
    /// was not named (see [`RecordFiles::open_has_entries`]): it is deleted
    /// instead of sealed.
    pub fn start_next(&mut self, next: u32) -> Result<()> {
        self.flush()?;
        let file = Arc::new(Self::create(&self.dir, next)?);
        let previous = std::mem::replace(&mut self.open_gen, next);
        self.open = file;
        if self.open_len > HEADER_LEN {
            self.sealed.insert(previous);
        } else {
            // no row points into it and no image names it; a crash before
            // this leaves it to the start's sweep of unnamed files
            let _ = std::fs::remove_file(self.dir.join(file_name(previous)));
        }
        self.open_len = HEADER_LEN;
        self.written_back = 0;
        self.damaged = false;
        Ok(())
    }

    pub fn open_gen(&self) -> u32 {
        self.open_gen
    }

    /// Bytes in every record file.
    pub fn bytes(&self) -> u64 {
        let sealed: u64 = self.sealed.iter().filter_map(|g| self.file_len(*g)).sum();
        sealed + self.file_len(self.open_gen).unwrap_or(0)
    }

    pub fn sealed(&self) -> Vec<u32> {
        self.sealed.iter().copied().collect()
    }

    /// Paths of the sealed files, for snapshots.
    pub fn sealed_paths(&self) -> Vec<PathBuf> {
        self.sealed().into_iter().map(|g| self.dir.join(file_name(g))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group larger than STAGED_BYTES is written as it is staged, and
    /// every entry reads back where `stage` said, written or still staged.
    #[test]
    fn a_large_group_is_written_as_it_is_staged() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = RecordFiles::open(dir.path(), &[], 1).unwrap();
        let entry = |i: usize| vec![(i % 251) as u8; 10_000 + i];
        let locs: Vec<RecordLoc> = (0..300).map(|i| files.stage(&entry(i))).collect();
        assert!(files.buffer.len() < STAGED_BYTES, "{} bytes still staged", files.buffer.len());
        let on_disk = std::fs::metadata(dir.path().join(file_name(1))).unwrap().len();
        assert!(on_disk >= HEADER_LEN + (STAGED_BYTES as u64), "{on_disk} bytes written");
        for (i, loc) in locs.iter().enumerate() {
            assert_eq!(files.entry(*loc).unwrap(), entry(i), "entry {i} before the flush");
        }
        files.flush().unwrap();
        assert_eq!(std::fs::metadata(dir.path().join(file_name(1))).unwrap().len(), files.open_len);
        for (i, loc) in locs.iter().enumerate() {
            assert_eq!(files.entry(*loc).unwrap(), entry(i), "entry {i} after the flush");
        }
    }
}
