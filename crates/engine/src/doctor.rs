//! `braid doctor`: reads every log of a data directory and says what it finds
//! (clean, a torn tail the next start will cut, or corruption that stops the
//! start); with `salvage`, cuts each corrupt log at its first damaged frame
//! after copying it aside. Works on a stopped engine: salvage takes the data
//! directory lock and fails while a server holds it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::Result;
use crate::storage::branch::WAL_FILE;
use crate::storage::checkpoint;
use crate::storage::lock::DirLock;
use crate::storage::wal::{self, Inspection, ScanEnd};

#[derive(Debug, Clone, Serialize)]
pub struct LogReport {
    /// `branch <database>/<branch>` or `snapshot <name>`.
    pub owner: String,
    #[serde(flatten)]
    pub inspection: Inspection,
    /// What doctor did: `none`, or `salvaged` (cut at `good_end`).
    pub action: String,
    /// Where the untouched copy of a salvaged log was written.
    pub backup: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub data_dir: String,
    /// True when every log opens (a torn tail is cut by the next start)
    /// and nothing in `problems` stops a start.
    pub healthy: bool,
    pub logs: Vec<LogReport>,
    /// What a start would refuse besides a damaged log, each as the start
    /// would say it: a missing catalog beside branches or snapshots, a branch
    /// the catalog names without its directory, a log that does not continue
    /// its checkpoint (found by a black-box test: doctor said healthy).
    pub problems: Vec<String>,
    /// With `salvage`: each branch whose newest checkpoint's log segment was
    /// missing (deleted by hand), with no segment after it, and which now
    /// has an empty one, so it starts from that checkpoint. The writes
    /// acknowledged after the checkpoint were in the missing file and are
    /// lost; without this the whole data directory refused to start.
    pub recreated: Vec<RecreatedLog>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RecreatedLog {
    /// `branch <database>/<branch>`.
    pub owner: String,
    /// The empty segment written.
    pub path: String,
    /// The checkpoint generation the branch now starts from.
    pub checkpoint: u32,
}

/// With the newest checkpoint's segment missing and none after it, writes an
/// empty one (see [`DoctorReport::recreated`]). A gap between segments, or
/// segments after a missing one, is left as it is: replaying later segments
/// over the lost writes' epochs would not be the history anyone wrote.
fn recreate_newest_segment(dir: &Path) -> Result<Option<(PathBuf, u32)>> {
    let Some(gen) = checkpoint::latest(dir)? else { return Ok(None) };
    if checkpoint::wal_generations(dir)?.into_iter().any(|g| g >= gen) {
        return Ok(None);
    }
    let path = dir.join(checkpoint::wal_name(gen));
    wal::create_empty(&path)?;
    Ok(Some((path, gen)))
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    out.sort();
    out
}

fn name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The logs of one branch or snapshot directory: its WAL segments, or the
/// single log of a directory from before checkpoints.
fn logs_in(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = checkpoint::wal_generations(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|g| dir.join(checkpoint::wal_name(g)))
        .collect();
    out.push(dir.join(WAL_FILE));
    out.retain(|p| p.exists());
    out
}

/// Every log in a data directory with the name of what owns it.
fn logs(data: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for db in subdirs(&data.join("db")) {
        for branch in subdirs(&db) {
            let owner = format!("branch {}/{}", name(&db), name(&branch));
            out.extend(logs_in(&branch).into_iter().map(|p| (owner.clone(), p)));
        }
    }
    for snap in subdirs(&data.join("snapshots")) {
        let owner = format!("snapshot {}", name(&snap));
        out.extend(logs_in(&snap).into_iter().map(|p| (owner.clone(), p)));
    }
    out
}

/// Inspects (and with `salvage`, repairs) every log under `data`.
pub fn doctor(data: &Path, salvage: bool) -> Result<DoctorReport> {
    let _lock = if salvage { Some(DirLock::acquire(data)?) } else { None };
    let mut recreated = Vec::new();
    if salvage {
        for db in subdirs(&data.join("db")) {
            for branch in subdirs(&db) {
                if let Some((path, checkpoint)) = recreate_newest_segment(&branch)? {
                    let owner = format!("branch {}/{}", name(&db), name(&branch));
                    recreated.push(RecreatedLog { owner, path: path.display().to_string(), checkpoint });
                }
            }
        }
    }
    let mut reports = Vec::new();
    let mut unreadable = Vec::new();
    for (owner, path) in logs(data) {
        let inspected = if salvage { wal::salvage(&path) } else { wal::inspect(&path).map(|i| (i, None)) };
        // a log doctor cannot read at all (its header damaged) is a problem
        // of the report, not the end of it (found by a black-box test: the
        // whole report failed, naming no other log)
        let (inspection, backup) = match inspected {
            Ok(inspected) => inspected,
            Err(e) => {
                unreadable.push(format!("{owner}: {}", e.message));
                continue;
            }
        };
        let action = if backup.is_some() { "salvaged" } else { "none" };
        reports.push(LogReport {
            owner,
            inspection,
            action: action.to_string(),
            backup: backup.map(|p| p.display().to_string()),
        });
    }
    let mut problems = unreadable;
    problems.extend(crate::engine::start_problems(data));
    // a snapshot's checkpoint is read at its restore, not at a start
    // (found by a black-box test: a damaged snapshot was called healthy)
    for snapshot in subdirs(&data.join("snapshots")) {
        let checked = checkpoint::latest(&snapshot).and_then(|ckpt| {
            // a snapshot is a checkpoint (or, from before checkpoints, a log);
            // without either a restore brings back none of its writes
            if ckpt.is_none() && !snapshot.join(crate::storage::branch::WAL_FILE).exists() {
                return Err(crate::error::Error::storage(format!(
                    "{} holds no checkpoint image (checkpoint-<g>.ckpt): a restore would bring back none of its writes",
                    snapshot.display()
                )));
            }
            crate::engine::check_checkpoint(&snapshot, ckpt)
        });
        if let Err(e) = checked {
            problems.push(format!("snapshot {}: {}", name(&snapshot), e.message));
        }
    }
    let healthy = problems.is_empty()
        && reports.iter().all(|r| r.action == "salvaged" || !matches!(r.inspection.end, ScanEnd::Corrupt { .. }));
    Ok(DoctorReport { data_dir: data.display().to_string(), healthy, logs: reports, problems, recreated })
}
