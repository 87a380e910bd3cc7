//! The record shapes the engine accepts and returns.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Result;
use crate::names;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecordInput {
    pub table: String,
    pub tenant_id: String,
    pub id: String,
    #[serde(default)]
    pub fields: Map<String, Value>,
}

impl RecordInput {
    pub fn validate_names(&self) -> Result<()> {
        names::check_table(&self.table)?;
        names::check_key("tenant_id", &self.tenant_id)?;
        names::check_key("id", &self.id)?;
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RecordOutput {
    pub fields: Map<String, Value>,
    pub id: String,
    pub table: String,
    pub tenant_id: String,
    pub version_id: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecordKey {
    pub table: String,
    pub tenant_id: String,
    pub id: String,
}
