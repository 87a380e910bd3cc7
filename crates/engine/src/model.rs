//! The record shapes the engine accepts and returns.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Result;
use crate::fields::Fields;
use crate::names;

#[derive(Debug, Clone, Serialize)]
pub struct RecordInput {
    pub table: String,
    pub tenant_id: String,
    pub id: String,
    pub fields: Fields,
}

/// A record is read from a JSON object only: serde's derived reading also
/// takes a struct from a list of its members in order, so a put-batch body
/// whose record was `["docs", "acme", "a1", {...}]`, which the API's schema
/// refuses, was written.
impl<'de> Deserialize<'de> for RecordInput {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Members {
            table: String,
            tenant_id: String,
            id: String,
            #[serde(default)]
            fields: Fields,
        }
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a record object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> std::result::Result<Members, A::Error> {
                Members::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        let Members { table, tenant_id, id, fields } = deserializer.deserialize_map(Object)?;
        Ok(RecordInput { table, tenant_id, id, fields })
    }
}

impl RecordInput {
    /// A record from its JSON value, moving the values it holds: a record
    /// of the usual shape (string `table`, `tenant_id` and `id`, an object
    /// of `fields` or none, nothing else) is taken apart as it is, anything
    /// else goes through serde for the same refusal `from_value` gives.
    /// `serde_json::from_value` rebuilds every value it reads, so a batch
    /// of vectors read from JavaScript was built twice, 32 bytes a number.
    pub fn from_json(value: Value) -> serde_json::Result<RecordInput> {
        let usual = |map: &Map<String, Value>| {
            map.iter().all(|(key, value)| match key.as_str() {
                "table" | "tenant_id" | "id" => value.is_string(),
                "fields" => value.is_object(),
                _ => false,
            }) && ["table", "tenant_id", "id"].iter().all(|k| map.contains_key(*k))
        };
        match value {
            Value::Object(mut map) if usual(&map) => {
                let mut text = |key: &str| match map.remove(key) {
                    Some(Value::String(s)) => s,
                    _ => unreachable!("checked above"),
                };
                let (table, tenant_id, id) = (text("table"), text("tenant_id"), text("id"));
                let fields = match map.remove("fields") {
                    Some(Value::Object(fields)) => Fields::from(fields),
                    _ => Fields::new(),
                };
                Ok(RecordInput { table, tenant_id, id, fields })
            }
            other => serde_json::from_value(other),
        }
    }

    pub fn validate_names(&self) -> Result<()> {
        names::check_table(&self.table)?;
        names::check_key("tenant_id", &self.tenant_id)?;
        names::check_key("id", &self.id)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn from_json_moves_a_usual_record_and_reads_any_other_as_serde_does() {
        let record = RecordInput::from_json(json!({
            "id": "a", "table": "t", "tenant_id": "x", "fields": {"v": [1.5, 2], "s": "b"}
        }))
        .unwrap();
        assert_eq!((record.table.as_str(), record.tenant_id.as_str(), record.id.as_str()), ("t", "x", "a"));
        assert_eq!(Value::Object(record.fields.into()), json!({"v": [1.5, 2], "s": "b"}));
        assert!(RecordInput::from_json(json!({"table": "t", "tenant_id": "x", "id": "a"})).unwrap().fields.is_empty());
        // an object only, not serde's list of members in order
        let listed = RecordInput::from_json(json!(["t", "x", "a", {}])).unwrap_err().to_string();
        assert!(listed.contains("expected a record object"), "{listed}");
        for other in [
            json!({"table": "t", "tenant_id": "x"}),
            json!({"table": "t", "tenant_id": "x", "id": 5}),
            json!({"table": "t", "tenant_id": "x", "id": "a", "extra": 1}),
            json!({"table": "t", "tenant_id": "x", "id": "a", "fields": null}),
            json!({"table": "t", "tenant_id": "x", "id": "a", "fields": [1]}),
            json!(["t", "x", "a"]),
            json!(null),
        ] {
            let ours = format!("{:?}", RecordInput::from_json(other.clone()));
            assert_eq!(ours, format!("{:?}", serde_json::from_value::<RecordInput>(other)));
        }
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
