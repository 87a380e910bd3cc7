//! The data directory lock: one engine process per data directory.
//!
//! Taken with `flock` (through `File::try_lock`) on `<data>/LOCK` before
//! anything else in the directory is read, as redb and tantivy do. The kernel
//! drops it when the process dies, so a crash never leaves a stale lock. The
//! file holds the owner's pid, for the error a second process prints.
//!
//! The directory itself is locked too (on Unix, `flock` on its own
//! descriptor), and that lock is the one that decides: a `LOCK` file can be
//! deleted while its owner runs (an operator taking it for stale), and a
//! second process then creates and locks a new one, which had let a second
//! `braid serve` run its start-up clean-up and remove the running server's
//! open record file before it failed on the text index's own lock (found by a
//! black-box review: the writes acknowledged after that were lost at the next
//! restart). A directory cannot be deleted while it holds data.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::{Code, Error, Result};

pub const LOCK_FILE: &str = "LOCK";

#[derive(Debug)]
pub struct DirLock {
    _file: File,
    /// The directory's own descriptor, locked; `None` where a directory
    /// cannot be locked (not Unix, or a file system that refuses it).
    _dir: Option<File>,
}

impl DirLock {
    /// Locks `data` (which must exist) or fails with `data_dir_locked`
    /// without touching anything else.
    pub fn acquire(data: &Path) -> Result<DirLock> {
        let path = data.join(LOCK_FILE);
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        // the directory first: a process it refuses creates no LOCK file
        // (one deleted while its owner runs is not made again by a refusal)
        let Ok(dir) = lock_directory(data) else { return Err(locked(data)) };
        let mut file = options.open(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(locked(data)),
            Err(TryLockError::Error(e)) => return Err(e.into()),
        }
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())?;
        Ok(DirLock { _file: file, _dir: dir })
    }
}

/// The refusal of a directory another process holds, naming its pid when
/// its `LOCK` file says it (read only: a refusal creates nothing).
fn locked(data: &Path) -> Error {
    let mut owner = String::new();
    if let Ok(mut file) = File::open(data.join(LOCK_FILE)) {
        let _ = file.read_to_string(&mut owner);
    }
    let owner = owner.trim();
    let by = if owner.is_empty() { String::new() } else { format!(" (pid {owner})") };
    Error::new(
        Code::DataDirLocked,
        format!(
            "data directory {} is in use by another braid process{by}; stop it first or use another --data-dir",
            data.display()
        ),
    )
}

/// The directory `data` locked on its own descriptor: `Ok(None)` where that
/// cannot be done (the `LOCK` file alone then decides), `Err` when another
/// process holds it.
fn lock_directory(data: &Path) -> std::result::Result<Option<File>, ()> {
    #[cfg(unix)]
    {
        let Ok(dir) = File::open(data) else { return Ok(None) };
        match dir.try_lock() {
            Ok(()) => Ok(Some(dir)),
            Err(TryLockError::WouldBlock) => Err(()),
            Err(TryLockError::Error(_)) => Ok(None),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = data;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_directory_fails_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        let err = DirLock::acquire(dir.path()).unwrap_err();
        assert_eq!(err.code, Code::DataDirLocked);
        assert!(err.message.contains(&format!("pid {}", std::process::id())), "{}", err.message);
        drop(first);
        DirLock::acquire(dir.path()).unwrap();
    }

    /// A `LOCK` file deleted while its owner runs (taken for stale) does not
    /// let a second process in: the directory's own lock still holds.
    #[test]
    fn a_deleted_lock_file_does_not_let_a_second_process_in() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        std::fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
        let err = DirLock::acquire(dir.path()).unwrap_err();
        assert_eq!(err.code, Code::DataDirLocked, "{}", err.message);
        // and the refusal makes no LOCK file of its own
        assert!(!dir.path().join(LOCK_FILE).exists());
        drop(first);
        DirLock::acquire(dir.path()).unwrap();
    }
}
