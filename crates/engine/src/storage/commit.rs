//! What one WAL frame holds: a committed write request (one epoch), or a
//! receipt on its own. The idempotency receipt travels in the same frame as
//! the rows it answers for, so a crash keeps both or neither.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::schema::TableSchema;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Commit {
    pub epoch: u64,
    pub at_ms: u64,
    /// Full schemas of the tables this commit created or changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schemas: Vec<TableSchema>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<WalRow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Receipt>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WalRow {
    pub table: String,
    pub tenant_id: String,
    pub id: String,
    pub version_id: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    #[serde(default)]
    pub fields: Map<String, Value>,
}

/// A stored idempotency receipt: the first successful response to a keyed
/// request. `key` is already scoped by method and path.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Receipt {
    pub key: String,
    pub body_hash: String,
    pub status: u16,
    pub body: Value,
    pub created_ms: u64,
}

/// What the service asks the engine to record with a write. When `body` is an
/// object with an `epoch` member, the engine fills in the committed epoch.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptDraft {
    pub key: String,
    pub body_hash: String,
    pub status: u16,
    pub body: Value,
}

impl ReceiptDraft {
    pub fn empty() -> ReceiptDraft {
        ReceiptDraft { key: String::new(), body_hash: String::new(), status: 0, body: Value::Null }
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
