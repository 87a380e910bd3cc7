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
