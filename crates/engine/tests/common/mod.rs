//! Helpers shared by the engine's integration tests (each test file is its
//! own crate and uses a part of them).
#![allow(dead_code)]

use std::path::Path;

use braid_engine::{Engine, EngineConfig, RecordInput, RecordKey};
use serde_json::Value;

pub fn open(dir: &Path) -> Engine {
    Engine::open(EngineConfig::new(dir)).unwrap()
}

/// A record of table `docs` in `tenant`.
pub fn record(tenant: &str, id: &str, fields: Value) -> RecordInput {
    RecordInput {
        table: "docs".into(),
        tenant_id: tenant.into(),
        id: id.into(),
        fields: fields.as_object().expect("fields are an object").clone(),
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
