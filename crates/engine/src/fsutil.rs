//! Filesystem helpers shared by the storage and the indexes.

use std::fs::File;
use std::path::Path;

use crate::error::Result;

/// fsyncs the directory holding `path`, so a created or renamed entry is durable.
pub fn sync_dir(path: &Path) -> Result<()> {
    if let Some(parent) = path.parent() {
        let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// The device and inode `path` names, without asking for its times.
///
/// A `stat` that returns a file's times marks them as looked at, and Linux
/// (6.13 on, "multigrain timestamps") then gives the file's next write a
/// fine-grained modification time instead of the clock tick's: the inode
/// changes on every write, and on ext4 every `fdatasync` then writes the
/// inode's block as a second synchronous I/O before the flush. The WAL's
/// per-group check that its path still names its file asked for the times
/// (`std::fs::metadata`), which made each group's `fdatasync` 0.21 ms
/// instead of 0.14 at the median here (bench/JOURNAL.md, the thirty-second
/// session). `statx` asking for the inode alone leaves them unmarked.
pub fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
        // SAFETY: zeroed `statx` is a valid value of a plain C struct
        let mut found: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a struct the call writes into
        let done = unsafe { libc::statx(libc::AT_FDCWD, name.as_ptr(), 0, libc::STATX_INO, &mut found) };
        if done != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((libc::makedev(found.stx_dev_major, found.stx_dev_minor), found.stx_ino))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path)?;
        Ok((meta.dev(), meta.ino()))
    }
}

/// Bytes written to a file between two [`start_writeback`] calls.
pub const WRITEBACK_BYTES: u64 = 8 << 20;

/// Asks the kernel to start writing `len` bytes of `file` from `offset` to
/// the device, without waiting (Linux `sync_file_range` with
/// `SYNC_FILE_RANGE_WRITE`; nothing elsewhere). A file that a checkpoint
/// fsyncs later is written back as it grows, so the fsync, which writes
/// stall behind, finds little left to write. Only a hint: durability still
/// comes from the fsync, and a failure here is left for it to report.
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on a descriptor the caller holds open
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn identity_names_the_same_file_as_stat() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        let meta = std::fs::metadata(&a).unwrap();
        assert_eq!(identity(&a).unwrap(), (meta.dev(), meta.ino()));
        assert_ne!(identity(&a).unwrap(), identity(&b).unwrap());
        std::fs::rename(&b, &a).unwrap();
        let replaced = std::fs::metadata(&a).unwrap();
        assert_eq!(identity(&a).unwrap(), (replaced.dev(), replaced.ino()));
        assert_eq!(identity(&dir.path().join("gone")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    }
}
