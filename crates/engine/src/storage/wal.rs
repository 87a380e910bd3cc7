//! The write-ahead log: the branch's only durable record store.
//!
//! On-disk format (version 3), little-endian:
//!
//! ```text
//! header  : b"BRAIDWAL" (8 bytes) | format version u8 = 3 | 7 zero bytes
//! frame*  : payload length u32 | crc u32 | seq u64 | synced u64 | payload
//! crc     : CRC-32 (IEEE) of FRAME_TAG u8 | seq | synced | payload length | payload
//! payload : one `Commit`, binary (first byte 0xC1) or JSON (first byte `{`)
//! ```
//!
//! Versions 2 and 3 have the same frames; a version 2 log holds only JSON
//! payloads. Opening one rewrites its version byte to 3 (in place, synced)
//! before anything binary is appended, so an older braid refuses the log
//! instead of misreading it.
//!
//! `seq` numbers frames 1, 2, 3, ... in file order. `synced` is the highest
//! seq that was already on stable storage when this frame was written: every
//! frame of one group commit carries the seq just before the group.
//!
//! A frame is acknowledged only after `fdatasync` returns. Replay reads frames
//! in order; when one is short or fails its checksum, it looks at what follows:
//!
//! - only zero bytes follow: the space the log **preallocated** (below). The
//!   log ends there; nothing was lost and nothing is reported as cut.
//! - nothing valid follows, or only frames of the same unsynced group (their
//!   `synced` is below the bad frame's seq): a **torn tail** from a crash
//!   mid-append. Nothing there was acknowledged; the file is cut there. The
//!   bytes reported as cut end at the last nonzero byte (the tag and seq make
//!   the checksum of an all-zero frame fail, so zeros never pass as a frame).
//! - a valid frame whose `synced` covers the bad frame: the bad frame was
//!   durable and acknowledged, so this is **corruption**. The log is refused
//!   with the offset, untouched; `braid doctor` reports and salvages.
//!
//! Version 1 logs (no seq, no tag) are read once and rewritten as version 3.
//!
//! **Preallocation.** The log writes zeros ahead of its end (as many bytes as
//! it holds, from 64 KiB up to [`PREALLOCATE`]), and frames overwrite them in
//! place; closing the log cuts what is left. An `fdatasync` of a
//! write inside the file's length need not commit the file's new size to the
//! file system's journal, as one of an append must: on this project's 2-core
//! VM, 0.13 ms against 0.23 ms at the median for a 2 KiB write (a C loop of
//! write + fdatasync), and durable puts over HTTP from one client answered at
//! a p50 of 0.51 ms instead of 0.61-0.67 ms (bench/JOURNAL.md, issue 13).
//! PostgreSQL zero-fills its WAL segments for the same reason.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Code, Error, Result};
use crate::faults;
use crate::fsutil::sync_dir;

pub const MAGIC: &[u8; 8] = b"BRAIDWAL";
pub const FORMAT_VERSION: u8 = 3;
pub const HEADER_LEN: u64 = 16;
/// Bytes before each payload: length, crc, seq, synced.
pub const FRAME_HEADER: usize = 24;
/// Mixed into every frame's checksum, so an all-zero frame never passes.
const FRAME_TAG: u8 = 0xB2;
/// A frame larger than this is treated as damage, not allocated.
pub const MAX_FRAME: u32 = 1 << 30;
/// Most zero bytes the log writes ahead of its end (module docs).
pub const PREALLOCATE: u64 = 4 << 20;

pub struct Wal {
    path: PathBuf,
    file: File,
    end: u64,
    /// Length of the file: `end`, then zeros written ahead.
    allocated: u64,
    /// Seq the next encoded frame gets.
    next_seq: u64,
    /// Highest seq appended to the file.
    appended_seq: u64,
    /// Highest seq known to be on stable storage.
    synced_seq: u64,
    /// The file's device and inode, to tell that `path` still names it.
    identity: (u64, u64),
}

pub struct Replay {
    pub payloads: Vec<(Vec<u8>, u64)>,
    /// Bytes cut from a torn tail.
    pub truncated: u64,
}

/// Where a scan of a log stopped.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScanEnd {
    /// Every byte belongs to a valid frame, or to the zeros preallocated
    /// after the last one.
    Clean,
    /// An incomplete or damaged tail that no durable frame follows.
    TornTail { offset: u64, bytes: u64 },
    /// A damaged frame that a durable frame follows: acknowledged data is bad.
    Corrupt { offset: u64, seq: u64, resumes_at: u64, frames_after: u64 },
}

/// The result of reading a log image.
pub struct Scan {
    /// Payload byte ranges with the offset just past each frame.
    pub frames: Vec<(std::ops::Range<usize>, u64)>,
    /// End of the last good frame before any damage.
    pub good_end: u64,
    pub end: ScanEnd,
}

fn header(version: u8) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8] = version;
    h
}

fn frame_crc(seq: u64, synced: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[FRAME_TAG]);
    h.update(&seq.to_le_bytes());
    h.update(&synced.to_le_bytes());
    h.update(&(payload.len() as u32).to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Appends one version 2 frame to `out`.
pub fn encode_frame(seq: u64, synced: u64, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&frame_crc(seq, synced, payload).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&synced.to_le_bytes());
    out.extend_from_slice(payload);
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// A checksum-valid frame at `pos`: (seq, synced, payload range, end).
fn frame_at(bytes: &[u8], pos: usize) -> Option<(u64, u64, std::ops::Range<usize>, usize)> {
    if pos + FRAME_HEADER > bytes.len() {
        return None;
    }
    let len = u32_at(bytes, pos);
    if len > MAX_FRAME || pos + FRAME_HEADER + len as usize > bytes.len() {
        return None;
    }
    let (crc, seq, synced) = (u32_at(bytes, pos + 4), u64_at(bytes, pos + 8), u64_at(bytes, pos + 16));
    let payload = pos + FRAME_HEADER..pos + FRAME_HEADER + len as usize;
    (frame_crc(seq, synced, &bytes[payload.clone()]) == crc).then_some((seq, synced, payload.clone(), payload.end))
}

/// Reads the frames of a version 2 log image.
pub fn scan(bytes: &[u8]) -> Scan {
    let mut pos = HEADER_LEN as usize;
    let mut frames = Vec::new();
    let mut expected = 1u64;
    while pos < bytes.len() {
        match frame_at(bytes, pos) {
            Some((seq, _, payload, end)) if seq == expected => {
                frames.push((payload, end as u64));
                pos = end;
                expected += 1;
            }
            // the log's preallocated space
            _ if bytes[pos..].iter().all(|b| *b == 0) => {
                return Scan { frames, good_end: pos as u64, end: ScanEnd::Clean }
            }
            _ => return Scan { frames, good_end: pos as u64, end: classify_damage(bytes, pos, expected) },
        }
    }
    Scan { frames, good_end: pos as u64, end: ScanEnd::Clean }
}

/// Decides whether damage at `pos` (where frame `seq` should start) is a torn
/// tail or corruption, by looking for valid later frames that were written
/// after frame `seq` had been synced.
fn classify_damage(bytes: &[u8], pos: usize, seq: u64) -> ScanEnd {
    let mut at = pos;
    let mut frames_after = 0u64;
    let mut resumes_at = None;
    while at + FRAME_HEADER <= bytes.len() {
        // cheap filter before the checksum: a later frame has a later seq
        let candidate = u64_at(bytes, at + 8);
        if candidate < seq || candidate - seq > bytes.len() as u64 {
            at += 1;
            continue;
        }
        match frame_at(bytes, at) {
            Some((_, synced, _, end)) => {
                frames_after += 1;
                if synced >= seq {
                    resumes_at.get_or_insert(at as u64);
                }
                at = end;
            }
            None => at += 1,
        }
    }
    match resumes_at {
        Some(resumes_at) => ScanEnd::Corrupt { offset: pos as u64, seq, resumes_at, frames_after },
        None => {
            // up to the last nonzero byte: the zeros after it were preallocated
            let written = bytes.iter().rposition(|b| *b != 0).map_or(pos, |last| last + 1);
            ScanEnd::TornTail { offset: pos as u64, bytes: (written.max(pos) - pos) as u64 }
        }
    }
}

/// Reads a version 1 log image (frames: length u32 | crc32 of payload u32 |
/// payload). Damage followed by any valid frame is treated as corruption:
/// version 1 cannot tell a torn group from a bad durable frame, so it errs
/// on the side of keeping the file.
fn scan_v1(bytes: &[u8]) -> Scan {
    let frame_v1 = |pos: usize| -> Option<(std::ops::Range<usize>, usize)> {
        if pos + 8 > bytes.len() {
            return None;
        }
        let len = u32_at(bytes, pos);
        if len > MAX_FRAME || pos + 8 + len as usize > bytes.len() {
            return None;
        }
        let payload = pos + 8..pos + 8 + len as usize;
        (crc32fast::hash(&bytes[payload.clone()]) == u32_at(bytes, pos + 4)).then_some((payload.clone(), payload.end))
    };
    let mut pos = HEADER_LEN as usize;
    let mut frames = Vec::new();
    while pos < bytes.len() {
        match frame_v1(pos) {
            Some((payload, end)) if !payload.is_empty() => {
                frames.push((payload, end as u64));
                pos = end;
            }
            _ => break,
        }
    }
    let good_end = pos as u64;
    if pos == bytes.len() {
        return Scan { frames, good_end, end: ScanEnd::Clean };
    }
    let after: Vec<usize> =
        (pos + 1..bytes.len()).filter(|&at| frame_v1(at).is_some_and(|(p, _)| !p.is_empty())).take(1).collect();
    let end = match after.first() {
        Some(&at) => {
            ScanEnd::Corrupt { offset: good_end, seq: frames.len() as u64 + 1, resumes_at: at as u64, frames_after: 1 }
        }
        None => ScanEnd::TornTail { offset: good_end, bytes: bytes.len() as u64 - good_end },
    };
    Scan { frames, good_end, end }
}

/// What `inspect` finds in one log file.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub path: String,
    pub format_version: u8,
    pub bytes: u64,
    pub frames: u64,
    pub good_end: u64,
    pub end: ScanEnd,
}

fn read_image(path: &Path) -> Result<(Vec<u8>, u8)> {
    let bytes = std::fs::read(path)?;
    if bytes.len() < HEADER_LEN as usize {
        return Ok((bytes, FORMAT_VERSION));
    }
    if &bytes[..8] != MAGIC {
        return Err(Error::storage(format!("{}: not a braid log", path.display())));
    }
    let version = bytes[8];
    if version > FORMAT_VERSION {
        // the code errors.md gives a newer on-disk format, as the checkpoint's
        // reader answers one (it was storage_failure; found by a black-box review)
        return Err(Error::new(
            crate::error::Code::FormatUnsupported,
            format!(
                "{}: log format version {version} is newer than this braid supports ({FORMAT_VERSION}); upgrade \
                 braid",
                path.display()
            ),
        ));
    }
    if version == 0 {
        return Err(Error::storage(format!(
            "{}: log header names format version 0: the header is damaged",
            path.display()
        )));
    }
    Ok((bytes, version))
}

fn scan_image(bytes: &[u8], version: u8) -> Scan {
    if bytes.len() < HEADER_LEN as usize {
        return Scan { frames: Vec::new(), good_end: HEADER_LEN, end: ScanEnd::Clean };
    }
    if version == 1 {
        scan_v1(bytes)
    } else {
        scan(bytes)
    }
}

/// Reads a log without changing it and says what is in it.
pub fn inspect(path: &Path) -> Result<Inspection> {
    let (bytes, version) = read_image(path)?;
    let scan = scan_image(&bytes, version);
    Ok(Inspection {
        path: path.display().to_string(),
        format_version: version,
        bytes: bytes.len() as u64,
        frames: scan.frames.len() as u64,
        good_end: scan.good_end,
        end: scan.end,
    })
}

/// Cuts a corrupt log at its first damaged frame, after copying the whole
/// file aside to `<path>.corrupt-<ms>`. Every frame from the damage on is
/// dropped (later commits may depend on the damaged one). Returns the
/// inspection from before the cut and the path of the copy, if one was made.
pub fn salvage(path: &Path) -> Result<(Inspection, Option<PathBuf>)> {
    let found = inspect(path)?;
    let ScanEnd::Corrupt { offset, .. } = found.end else { return Ok((found, None)) };
    let backup = path.with_extension(format!("log.corrupt-{}", crate::storage::commit::now_ms()));
    copy_prefix(path, &backup, found.bytes)?;
    let file = OpenOptions::new().write(true).open(path)?;
    file.set_len(offset)?;
    file.sync_all()?;
    Ok((found, Some(backup)))
}

fn corrupt_error(path: &Path, end: &ScanEnd) -> Error {
    let ScanEnd::Corrupt { offset, seq, resumes_at, frames_after } = end else {
        unreachable!("only corruption is an error")
    };
    Error::new(
        Code::WalCorrupt,
        format!(
            "{}: frame {seq} at byte offset {offset} is damaged and {frames_after} valid frame(s) follow from offset \
             {resumes_at}; acknowledged writes would be lost, so the log was left untouched. run `braid doctor \
             --data-dir <dir>` to inspect and `--salvage` to keep the frames before the damage (docs/operations.md)",
            path.display()
        ),
    )
}

/// Rewrites a version 1 log in the current version (tmp, fsync, rename, fsync dir).
fn migrate_v1(path: &Path, bytes: &[u8], scan: &Scan) -> Result<Vec<(Vec<u8>, u64)>> {
    let mut out = Vec::with_capacity(bytes.len() + scan.frames.len() * 16);
    out.extend_from_slice(&header(FORMAT_VERSION));
    let mut payloads = Vec::with_capacity(scan.frames.len());
    for (seq, (range, _)) in (1u64..).zip(&scan.frames) {
        encode_frame(seq, seq - 1, &bytes[range.clone()], &mut out);
        payloads.push((bytes[range.clone()].to_vec(), out.len() as u64));
    }
    let tmp = path.with_extension("log.v2tmp");
    write_new(&tmp, &out)?;
    std::fs::rename(&tmp, path)?;
    sync_dir(path)?;
    Ok(payloads)
}

impl Wal {
    /// Opens or creates the log and replays it. Each payload comes with the
    /// byte offset just past its frame. The file is opened for append.
    pub fn open(path: &Path) -> Result<(Wal, Replay)> {
        if !path.exists() || std::fs::metadata(path)?.len() < HEADER_LEN {
            // new (or torn while being created): write a fresh header
            write_new(path, &header(FORMAT_VERSION))?;
            sync_dir(path)?;
        }
        let (bytes, version) = read_image(path)?;
        let scan = scan_image(&bytes, version);
        if matches!(scan.end, ScanEnd::Corrupt { .. }) {
            return Err(corrupt_error(path, &scan.end));
        }
        let (payloads, good_end) = if version == 1 {
            let payloads = migrate_v1(path, &bytes, &scan)?;
            let end = payloads.last().map_or(HEADER_LEN, |(_, end)| *end);
            (payloads, end)
        } else {
            let payloads = scan.frames.iter().map(|(range, end)| (bytes[range.clone()].to_vec(), *end)).collect();
            (payloads, scan.good_end)
        };
        faults::check("wal::open")?;
        if (2..FORMAT_VERSION).contains(&version) {
            // same frames, and binary payloads may follow: say so first
            let mut file = OpenOptions::new().write(true).open(path)?;
            file.seek(SeekFrom::Start(8))?;
            file.write_all(&[FORMAT_VERSION])?;
            file.sync_all()?;
        }
        // frames are written at `end`, over the zeros preallocated there
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let (truncated, preallocated) = match scan.end {
            ScanEnd::TornTail { bytes, .. } => (bytes, false),
            _ => (0, version != 1),
        };
        let mut allocated = file.metadata()?.len();
        if allocated > good_end && !preallocated {
            file.set_len(good_end)?;
            file.sync_all()?;
            allocated = good_end;
        }
        let seq = payloads.len() as u64;
        let identity = crate::fsutil::identity(path)?;
        let wal = Wal {
            path: path.to_path_buf(),
            identity,
            file,
            end: good_end,
            allocated,
            next_seq: seq + 1,
            appended_seq: seq,
            synced_seq: seq,
        };
        Ok((wal, Replay { payloads, truncated }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn end(&self) -> u64 {
        self.end
    }

    /// Frames `payload` as the next frame of this log into `out` (not yet
    /// appended). Frames must be appended in the order they were encoded.
    pub fn encode(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        encode_frame(self.next_seq, self.synced_seq, payload, out);
        self.next_seq += 1;
    }

    /// Appends already-framed bytes (not yet durable). On an error the file
    /// may hold part of them: [`Wal::rollback`] cuts them.
    pub fn append(&mut self, frames: &[u8]) -> Result<u64> {
        use std::os::unix::fs::FileExt;
        if let Some(fault) = faults::injected("wal::append") {
            if fault == faults::Fault::Short {
                self.file.write_all_at(&frames[..frames.len() / 2], self.end)?;
            }
            return Err(fault.error("wal::append").into());
        }
        let end = self.end + frames.len() as u64;
        if end > self.allocated {
            self.preallocate(end);
        }
        self.file.write_all_at(frames, self.end)?;
        self.end = end;
        // past the zeros when there was no room for them
        self.allocated = self.allocated.max(end);
        self.appended_seq = self.next_seq - 1;
        Ok(self.end)
    }

    /// Writes zeros from the file's end to past `end`: as many bytes ahead
    /// as the log holds, from 64 KiB up to [`PREALLOCATE`], so a branch
    /// written little keeps little. The next [`Wal::sync`] makes them
    /// durable with the frames written into them. Best effort: when the
    /// zeros do not fit (a nearly full disk), the file is cut back and the
    /// frames are appended as they were before logs preallocated, so a write
    /// that fits is not refused for want of room ahead of it.
    fn preallocate(&mut self, end: u64) {
        use std::os::unix::fs::FileExt;
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        let step = ZEROS.len() as u64;
        let target = (end + end.clamp(step, PREALLOCATE)).next_multiple_of(step);
        let from = self.allocated;
        let written = faults::check("wal::preallocate").and_then(|()| {
            while self.allocated < target {
                let n = (target - self.allocated).min(step) as usize;
                self.file.write_all_at(&ZEROS[..n], self.allocated)?;
                self.allocated += n as u64;
            }
            Ok(())
        });
        if written.is_err() {
            let _ = self.file.set_len(from);
            self.allocated = from;
        }
    }

    /// Makes everything appended durable, and checks that the log is still
    /// where a start reads it: a segment deleted or replaced by hand (the
    /// writes go on into a file no path names), found by a black-box review,
    /// had kept acknowledging writes that the next start could not find. That
    /// fails the sync, so the group is refused and the branch stops taking
    /// writes (`storage_failure`) instead. One `statx` of the path's inode
    /// (not its times: `fsutil::identity`) per write group. A log cut short in place is not looked for here: the writes
    /// after the cut leave a hole that the next start refuses, loudly, where
    /// a log rolled back to its last good end would read as a torn tail.
    pub fn sync(&mut self) -> Result<()> {
        faults::check("wal::sync")?;
        self.file.sync_data()?;
        // the inode alone: asking for the times makes every later write
        // change the inode, and each fdatasync write it (fsutil::identity)
        let named = crate::fsutil::identity(&self.path).map_err(|e| {
            Error::storage(format!(
                "{} is no longer there ({e}); its writes would be lost at the next start",
                self.path.display()
            ))
        })?;
        if named != self.identity {
            return Err(Error::storage(format!(
                "{} was replaced by another file; the writes in the open one would be lost at the next start",
                self.path.display()
            )));
        }
        self.synced_seq = self.appended_seq;
        Ok(())
    }

    /// Cuts the file back to `end` (the end before a failed append or sync)
    /// and makes the cut durable, so frames that were never acknowledged do
    /// not come back at the next start. After a failed fsync the kernel may
    /// have dropped the dirty pages, so nothing past `end` can be trusted.
    pub fn rollback(&mut self, end: u64) -> Result<()> {
        self.file.set_len(end)?;
        self.file.sync_all()?;
        self.end = end;
        self.allocated = end;
        self.next_seq = self.synced_seq + 1;
        self.appended_seq = self.synced_seq;
        Ok(())
    }
}

/// A log that is closed gives back the zeros it preallocated (not synced:
/// a crash before the cut leaves zeros, which a start reads as the end of
/// the log), so a closed log's file is its frames alone.
impl Drop for Wal {
    fn drop(&mut self) {
        if self.allocated > self.end {
            let _ = self.file.set_len(self.end);
        }
    }
}

/// Creates `path` as an empty log (its header only), durably; an existing
/// file is an error. `braid doctor --salvage` puts one where a branch's
/// newest segment is missing, so the branch starts from its checkpoint.
pub fn create_empty(path: &Path) -> Result<()> {
    let mut file = create_private(path, false)?;
    file.write_all(&header(FORMAT_VERSION))?;
    file.sync_all()?;
    sync_dir(path)
}

/// Creates (or replaces) `path` with `bytes`, mode 0600, durably.
fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = create_private(path, true)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}

/// Opens a new file for writing with mode 0600 (owner only); `replace`
/// truncates an existing one, otherwise an existing file is an error.
pub fn create_private(path: &Path, replace: bool) -> Result<File> {
    let mut options = OpenOptions::new();
    options.write(true);
    if replace {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    Ok(options.open(path)?)
}

/// Creates a directory and its missing parents with mode 0700, fsyncing each
/// parent of a directory it created so the new entry is durable.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    // "" is the parent of a relative name: the working directory
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_private_dir(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match builder.create(dir) {
        Ok(()) => sync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Copies the first `len` bytes of a log into a new file, durably. The source
/// keeps growing meanwhile; bytes below `len` never change.
pub fn copy_prefix(src: &Path, dst: &Path, len: u64) -> Result<()> {
    faults::check("wal::copy")?;
    let mut input = File::open(src)?;
    input.seek(SeekFrom::Start(0))?;
    let mut output = create_private(dst, false)?;
    let copied = std::io::copy(&mut (&mut input).take(len), &mut output)?;
    if copied != len {
        return Err(Error::storage(format!("short copy of {}: {copied} of {len} bytes", src.display())));
    }
    output.sync_all()?;
    sync_dir(dst)?;
    Ok(())
}

/// Hard-links each file into `to` (copies where linking fails, for example
/// across file systems), then fsyncs `to`. Only for files that are never
/// modified again.
pub fn link_or_copy(files: &[PathBuf], to: &Path) -> Result<()> {
    faults::check("wal::copy")?;
    for file in files {
        let Some(name) = file.file_name() else { continue };
        let target = to.join(name);
        if std::fs::hard_link(file, &target).is_err() {
            std::fs::copy(file, &target)?;
            File::open(&target)?.sync_all()?;
        }
    }
    File::open(to)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_frames(path: &Path, groups: &[&[&[u8]]]) {
        let (mut wal, _) = Wal::open(path).unwrap();
        for group in groups {
            let mut buf = Vec::new();
            for payload in *group {
                wal.encode(payload, &mut buf);
            }
            wal.append(&buf).unwrap();
            wal.sync().unwrap();
        }
    }

    fn payloads(replay: &Replay) -> Vec<&[u8]> {
        replay.payloads.iter().map(|(p, _)| &p[..]).collect()
    }

    /// Offset of the `n`th frame (0-based) of a clean version 2 log.
    fn frame_offset(bytes: &[u8], n: usize) -> usize {
        let scan = scan(bytes);
        if n == 0 {
            HEADER_LEN as usize
        } else {
            scan.frames[n - 1].1 as usize
        }
    }

    #[test]
    fn replay_stops_at_torn_tail_and_truncates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        write_frames(&path, &[&[b"one", b"two"]]);
        // a torn third frame: length says 100 bytes, only 5 present
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&100u32.to_le_bytes()).unwrap();
        f.write_all(&[1, 2, 3, 4, 5]).unwrap();
        drop(f);
        let (wal, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"one"[..], &b"two"[..]]);
        assert_eq!(replay.truncated, 9);
        assert_eq!(wal.end(), std::fs::metadata(&path).unwrap().len());
    }

    #[test]
    fn checksum_failure_of_the_last_frame_is_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        write_frames(&path, &[&[b"good"], &[b"flipped"]]);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"good"[..]]);
    }

    /// Regression: a damaged frame in the middle used to be cut as a torn
    /// tail, silently deleting every later acknowledged commit.
    #[test]
    fn corrupt_middle_frame_refuses_to_open_and_keeps_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        write_frames(&path, &[&[b"first"], &[b"second"], &[b"third"], &[b"fourth"]]);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = frame_offset(&bytes, 1) + FRAME_HEADER + 2;
        bytes[at] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let err = Wal::open(&path).err().expect("corruption must be refused");
        assert_eq!(err.code, Code::WalCorrupt);
        let offset = frame_offset(&bytes, 1);
        assert!(err.message.contains(&format!("offset {offset}")), "{}", err.message);
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "the file is untouched");
        let found = inspect(&path).unwrap();
        assert_eq!(found.frames, 1);
        assert!(matches!(found.end, ScanEnd::Corrupt { seq: 2, frames_after: 2, .. }), "{:?}", found.end);
    }

    #[test]
    fn a_torn_group_is_a_torn_tail_even_when_later_frames_of_it_landed() {
        // one group of three frames, the first one never reached the disk
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        write_frames(&path, &[&[b"durable"], &[b"a", b"b", b"c"]]);
        let mut bytes = std::fs::read(&path).unwrap();
        let start = frame_offset(&bytes, 1);
        let end = frame_offset(&bytes, 2);
        bytes[start..end].iter_mut().for_each(|b| *b = 0);
        std::fs::write(&path, &bytes).unwrap();
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"durable"[..]]);
        assert_eq!(replay.truncated, (bytes.len() - start) as u64);
    }

    /// Regression: a zero-filled frame (length 0, crc 0) used to pass the
    /// checksum (CRC-32 of nothing is 0). Zeros after the last frame are the
    /// log's preallocated space: not a frame, and nothing cut.
    #[test]
    fn a_zero_filled_tail_is_preallocated_space() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        write_frames(&path, &[&[b"one"], &[b"two"]]);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[0u8; 4096]).unwrap();
        drop(f);
        assert_eq!(inspect(&path).unwrap().end, ScanEnd::Clean);
        let (mut wal, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"one"[..], &b"two"[..]]);
        assert_eq!(replay.truncated, 0);
        // and the log goes on from there with the right seq
        let mut buf = Vec::new();
        wal.encode(b"three", &mut buf);
        wal.append(&buf).unwrap();
        wal.sync().unwrap();
        drop(wal);
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"one"[..], &b"two"[..], &b"three"[..]]);
    }

    /// A log left by a crash: frames, then the zeros written ahead of them.
    fn crashed_with(path: &Path, payloads: &[&[u8]]) -> u64 {
        let (mut wal, _) = Wal::open(path).unwrap();
        let mut buf = Vec::new();
        for payload in payloads {
            wal.encode(payload, &mut buf);
        }
        wal.append(&buf).unwrap();
        wal.sync().unwrap();
        let end = wal.end();
        // no close: the preallocated zeros stay
        std::mem::forget(wal);
        end
    }

    #[test]
    fn frames_are_written_over_preallocated_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        let end = crashed_with(&path, &[b"one", b"two"]);
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len > end && len <= end + (128 << 10), "{len} bytes for a log ending at {end}");
        let (mut wal, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"one"[..], &b"two"[..]]);
        assert_eq!((replay.truncated, wal.end()), (0, end));
        // the next frame goes where the log ends, not after the zeros
        let mut buf = Vec::new();
        wal.encode(b"three", &mut buf);
        wal.append(&buf).unwrap();
        wal.sync().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
        // closing gives the zeros back
        let end = wal.end();
        drop(wal);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), end);
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"one"[..], &b"two"[..], &b"three"[..]]);
    }

    /// A crash mid-append over the preallocated zeros: the torn frame is cut
    /// and counted, the zeros after it are not.
    #[test]
    fn a_torn_frame_over_preallocated_zeros_counts_its_own_bytes() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        let end = crashed_with(&path, &[b"one", b"two"]);
        let torn = [&100u32.to_le_bytes()[..], &[1, 2, 3, 4, 5]].concat();
        OpenOptions::new().write(true).open(&path).unwrap().write_all_at(&torn, end).unwrap();
        let (wal, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"one"[..], &b"two"[..]]);
        assert_eq!(replay.truncated, 9);
        assert_eq!(wal.end(), std::fs::metadata(&path).unwrap().len());
    }

    #[test]
    fn zero_frame_has_no_valid_checksum() {
        assert_ne!(frame_crc(0, 0, b""), 0);
    }

    #[test]
    fn stale_frames_with_other_seqs_are_not_replayed() {
        // a frame copied from elsewhere in the log does not fit its place
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        write_frames(&path, &[&[b"one"], &[b"two"]]);
        let bytes = std::fs::read(&path).unwrap();
        let first = bytes[frame_offset(&bytes, 0)..frame_offset(&bytes, 1)].to_vec();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&first).unwrap();
        drop(f);
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"one"[..], &b"two"[..]]);
    }

    #[test]
    fn salvage_cuts_at_the_damage_and_keeps_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        write_frames(&path, &[&[b"first"], &[b"second"], &[b"third"]]);
        let mut bytes = std::fs::read(&path).unwrap();
        let offset = frame_offset(&bytes, 1);
        bytes[offset + FRAME_HEADER] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let (found, backup) = salvage(&path).unwrap();
        assert!(matches!(found.end, ScanEnd::Corrupt { .. }));
        assert_eq!(std::fs::read(backup.unwrap()).unwrap(), bytes);
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"first"[..]]);
    }

    #[test]
    fn version_1_logs_are_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        let mut bytes = header(1).to_vec();
        for payload in [&b"alpha"[..], b"beta"] {
            bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
            bytes.extend_from_slice(payload);
        }
        bytes.extend_from_slice(&[7, 0, 0]); // torn v1 tail
        std::fs::write(&path, &bytes).unwrap();
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"alpha"[..], &b"beta"[..]]);
        assert_eq!(std::fs::read(&path).unwrap()[8], FORMAT_VERSION);
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(payloads(&replay), vec![&b"alpha"[..], &b"beta"[..]]);
    }

    #[test]
    fn rejects_foreign_and_newer_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        std::fs::write(&path, b"definitely not a braid log file").unwrap();
        assert!(Wal::open(&path).is_err());
        let mut newer = header(FORMAT_VERSION + 1).to_vec();
        newer.extend_from_slice(&[0u8; 32]);
        std::fs::write(&path, &newer).unwrap();
        let err = Wal::open(&path).err().unwrap();
        assert!(err.message.contains("newer"), "{}", err.message);
        assert_eq!(err.code, crate::error::Code::FormatUnsupported);
        assert_eq!(std::fs::read(&path).unwrap(), newer);
    }

    #[cfg(unix)]
    #[test]
    fn log_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        write_frames(&path, &[&[b"x"]]);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
