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
