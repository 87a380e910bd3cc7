//! Helpers shared by the engine's integration tests (each test file is its
//! own crate and uses a part of them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use braid_engine::{Engine, EngineConfig, RecordInput, RecordKey};
use serde_json::Value;

pub fn open(dir: &Path) -> Engine {
    Engine::open(EngineConfig::new(dir)).unwrap()
}

/// An engine that never checkpoints, so every write stays in the WAL for a
/// test to inspect or damage.
pub fn open_without_checkpoints(dir: &Path) -> Engine {
    Engine::open(config_without_checkpoints(dir)).unwrap()
}

pub fn config_without_checkpoints(dir: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    config.branch.checkpoint_on_close = false;
    config.branch.checkpoint_wal_bytes = u64::MAX;
    config.branch.checkpoint_rows = u64::MAX;
    config.branch.checkpoint_interval = std::time::Duration::from_secs(1 << 30);
    config
}

/// The WAL segment being written in a branch directory (the newest).
pub fn newest_wal(branch: &Path) -> PathBuf {
    let gens = braid_engine::storage::checkpoint::wal_generations(branch).unwrap();
    branch.join(braid_engine::storage::checkpoint::wal_name(*gens.last().expect("a WAL segment")))
}

/// A record of table `docs` in `tenant`.
pub fn record(tenant: &str, id: &str, fields: Value) -> RecordInput {
    RecordInput {
        table: "docs".into(),
        tenant_id: tenant.into(),
        id: id.into(),
        fields: fields.as_object().expect("fields are an object").clone().into(),
    }
}

/// A record of table `docs` in tenant `acme`.
pub fn rec(id: &str, fields: Value) -> RecordInput {
    record("acme", id, fields)
}

/// The key of a record of table `docs` in tenant `acme`.
pub fn key(id: &str) -> RecordKey {
    RecordKey { table: "docs".into(), tenant_id: "acme".into(), id: id.into() }
}

/// Copies a data directory file by file, as a crash would leave it when the
/// engine is still running.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
