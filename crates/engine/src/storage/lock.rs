//! The data directory lock: one engine process per data directory.
//!
//! Taken with `flock` (through `File::try_lock`) on `<data>/LOCK` before
//! anything else in the directory is read, as redb and tantivy do. The kernel
//! drops it when the process dies, so a crash never leaves a stale lock. The
//! file holds the owner's pid, for the error a second process prints.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::{Code, Error, Result};

pub const LOCK_FILE: &str = "LOCK";

#[derive(Debug)]
pub struct DirLock {
    _file: File,
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
        let mut file = options.open(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut owner = String::new();
                let _ = file.read_to_string(&mut owner);
                let owner = owner.trim();
                let by = if owner.is_empty() { String::new() } else { format!(" (pid {owner})") };
                return Err(Error::new(
                    Code::DataDirLocked,
                    format!(
                        "data directory {} is in use by another braid process{by}; stop it first or use another \
                         --data-dir",
                        data.display()
                    ),
                ));
            }
            Err(TryLockError::Error(e)) => return Err(e.into()),
        }
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())?;
        Ok(DirLock { _file: file })
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
}
