//! The write-ahead log: the branch's only durable record store.
//!
//! On-disk format (version 1), little-endian:
//!
//! ```text
//! header  : b"BRAIDWAL" (8 bytes) | format version u8 = 1 | 7 zero bytes
//! frame*  : payload length u32 | crc32 (IEEE) of payload u32 | payload
//! payload : one JSON-encoded `Commit` (see storage/commit.rs)
//! ```
//!
//! A frame is acknowledged only after `fdatasync` returns. Replay reads frames
//! until the first one that is short or fails its checksum (a torn tail from a
//! crash mid-append), truncates the file there and reports how much it cut.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const MAGIC: &[u8; 8] = b"BRAIDWAL";
pub const FORMAT_VERSION: u8 = 1;
pub const HEADER_LEN: u64 = 16;
/// A frame larger than this is treated as corruption, not allocated.
pub const MAX_FRAME: u32 = 1 << 30;

pub struct Wal {
    path: PathBuf,
    file: File,
    end: u64,
}

pub struct Replay {
    pub payloads: Vec<(Vec<u8>, u64)>,
    /// Bytes cut from a torn tail.
    pub truncated: u64,
}

fn header() -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8] = FORMAT_VERSION;
    h
}

pub fn encode_frame(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

impl Wal {
    /// Opens or creates the log and replays it. Each payload comes with the
    /// byte offset just past its frame.
    pub fn open(path: &Path) -> Result<(Wal, Replay)> {
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let len = file.metadata()?.len();
        if len < HEADER_LEN {
            // new (or torn while being created): write a fresh header
            file.set_len(0)?;
            file.write_all(&header())?;
            file.sync_all()?;
            sync_dir(path)?;
            let wal = Wal { path: path.to_path_buf(), file, end: HEADER_LEN };
            return Ok((wal, Replay { payloads: Vec::new(), truncated: 0 }));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        file.seek(SeekFrom::Start(0))?;
        file.read_to_end(&mut bytes)?;
        if &bytes[..8] != MAGIC {
            return Err(Error::storage(format!("{}: not a braid log", path.display())));
        }
        if bytes[8] != FORMAT_VERSION {
            return Err(Error::storage(format!(
                "{}: log format version {} is not supported (expected {FORMAT_VERSION})",
                path.display(),
                bytes[8]
            )));
        }
        let (payloads, good_end) = scan(&bytes);
        let truncated = len - good_end;
        if truncated > 0 {
            file.set_len(good_end)?;
            file.sync_all()?;
        }
        file.seek(SeekFrom::Start(good_end))?;
        Ok((Wal { path: path.to_path_buf(), file, end: good_end }, Replay { payloads, truncated }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn end(&self) -> u64 {
        self.end
    }

    /// Appends already-framed bytes (not yet durable).
    pub fn append(&mut self, frames: &[u8]) -> Result<u64> {
        self.file.write_all(frames)?;
        self.end += frames.len() as u64;
        Ok(self.end)
    }

    /// Makes everything appended durable.
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync_data()?;
        Ok(())
    }
}

/// Reads frames from a whole log image; returns the payloads with their end
/// offsets and the offset of the end of the last good frame.
fn scan(bytes: &[u8]) -> (Vec<(Vec<u8>, u64)>, u64) {
    let mut pos = HEADER_LEN as usize;
    let mut out = Vec::new();
    while pos + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap());
        let crc = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap());
        if len > MAX_FRAME || pos + 8 + len as usize > bytes.len() {
            break;
        }
        let payload = &bytes[pos + 8..pos + 8 + len as usize];
        if crc32fast::hash(payload) != crc {
            break;
        }
        pos += 8 + len as usize;
        out.push((payload.to_vec(), pos as u64));
    }
    (out, pos as u64)
}

/// Copies the first `len` bytes of a log into a new file, durably. The source
/// keeps growing meanwhile; bytes below `len` never change.
pub fn copy_prefix(src: &Path, dst: &Path, len: u64) -> Result<()> {
    let mut input = File::open(src)?;
    let mut output = OpenOptions::new().write(true).create_new(true).open(dst)?;
    let copied = std::io::copy(&mut (&mut input).take(len), &mut output)?;
    if copied != len {
        return Err(Error::storage(format!("short copy of {}: {copied} of {len} bytes", src.display())));
    }
    output.sync_all()?;
    sync_dir(dst)?;
    Ok(())
}

/// fsyncs the directory holding `path`, so a created or renamed entry is durable.
pub fn sync_dir(path: &Path) -> Result<()> {
    if let Some(parent) = path.parent() {
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_stops_at_torn_tail_and_truncates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        {
            let (mut wal, replay) = Wal::open(&path).unwrap();
            assert!(replay.payloads.is_empty());
            let mut buf = Vec::new();
            encode_frame(b"one", &mut buf);
            encode_frame(b"two", &mut buf);
            wal.append(&buf).unwrap();
            wal.sync().unwrap();
        }
        // a torn third frame: length says 100 bytes, only 5 present
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&100u32.to_le_bytes()).unwrap();
        f.write_all(&[1, 2, 3, 4, 5]).unwrap();
        drop(f);
        let (wal, replay) = Wal::open(&path).unwrap();
        let got: Vec<&[u8]> = replay.payloads.iter().map(|(p, _)| &p[..]).collect();
        assert_eq!(got, vec![&b"one"[..], &b"two"[..]]);
        assert_eq!(replay.truncated, 9);
        assert_eq!(wal.end(), std::fs::metadata(&path).unwrap().len());
    }

    #[test]
    fn checksum_mismatch_ends_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        {
            let (mut wal, _) = Wal::open(&path).unwrap();
            let mut buf = Vec::new();
            encode_frame(b"good", &mut buf);
            encode_frame(b"flipped", &mut buf);
            wal.append(&buf).unwrap();
            wal.sync().unwrap();
        }
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(replay.payloads.len(), 1);
    }

    #[test]
    fn rejects_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.log");
        std::fs::write(&path, b"definitely not a braid log file").unwrap();
        assert!(Wal::open(&path).is_err());
    }
}
