//! Table schemas: columns are inferred on the first write that carries them
//! and can be declared explicitly. A schema change bumps the branch's
//! `schema_epoch`.
//!
//! Inference rules (documented in docs/decisions.md):
//! - string -> `string` column, text-indexed (BM25) and scalar (equality)
//! - number -> `number` scalar; bool -> `bool` scalar
//! - non-empty array of numbers -> `vector` with that dimension, cosine metric
//! - non-empty array of strings -> `edges` (ids of related records, for graph_seed)
//! - object or mixed array -> `json` (stored, not indexed)
//! - null and empty arrays type nothing: the column stays unknown until a value does

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bail;
use crate::error::{Code, Error, Result};
use crate::fields::{Field, Fields, Floats};
use crate::names;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Cosine,
    Dot,
    L2,
}

impl Metric {
    pub fn parse(s: &str) -> Option<Metric> {
        match s {
            "cosine" => Some(Metric::Cosine),
            "dot" => Some(Metric::Dot),
            "l2" => Some(Metric::L2),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum ColumnType {
    String,
    Number,
    Bool,
    Vector { dim: u32, metric: Metric },
    Edges,
    Json,
}

impl ColumnType {
    pub fn name(&self) -> &'static str {
        match self {
            ColumnType::String => "string",
            ColumnType::Number => "number",
            ColumnType::Bool => "bool",
            ColumnType::Vector { .. } => "vector",
            ColumnType::Edges => "edges",
            ColumnType::Json => "json",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    #[serde(flatten)]
    pub ty: ColumnType,
    /// Indexed for BM25 (string columns only).
    pub text: bool,
    /// Indexed for equality filters (string, number, bool).
    pub scalar: bool,
}

impl Column {
    pub fn inferred(ty: ColumnType) -> Column {
        let text = ty == ColumnType::String;
        let scalar = matches!(ty, ColumnType::String | ColumnType::Number | ColumnType::Bool);
        Column { ty, text, scalar }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    pub name: String,
    pub columns: BTreeMap<String, Column>,
}

impl TableSchema {
    pub fn new(name: &str) -> TableSchema {
        TableSchema { name: name.to_string(), columns: BTreeMap::new() }
    }

    pub fn text_columns(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().filter(|(_, c)| c.text).map(|(n, _)| n.as_str())
    }

    pub fn vector_columns(&self) -> impl Iterator<Item = (&str, u32, Metric)> {
        self.columns.iter().filter_map(|(n, c)| match c.ty {
            ColumnType::Vector { dim, metric } => Some((n.as_str(), dim, metric)),
            _ => None,
        })
    }

    pub fn edge_columns(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().filter(|(_, c)| c.ty == ColumnType::Edges).map(|(n, _)| n.as_str())
    }

    /// Checks `fields` against this schema, extending it with inferred columns
    /// (at most `max_columns` in all). Returns true when the schema changed.
    pub fn admit(&mut self, fields: &Fields, max_dim: u32, max_columns: usize) -> Result<bool> {
        let mut changed = false;
        for (name, field) in fields.iter() {
            match (self.columns.get(name), field) {
                (Some(column), Field::Value(value)) => check_value(name, &column.ty, value)?,
                (Some(column), Field::Floats(xs)) => check_floats(name, &column.ty, xs)?,
                (None, field) => {
                    let ty = match field {
                        Field::Value(value) => infer(name, value, max_dim)?,
                        Field::Floats(xs) => Some(infer_floats(name, xs, max_dim)?),
                    };
                    if let Some(ty) = ty {
                        names::check_identifier("column", name)?;
                        check_column_count(&self.name, self.columns.len() + 1, max_columns)?;
                        self.columns.insert(name.to_string(), Column::inferred(ty));
                        changed = true;
                    }
                }
            }
        }
        Ok(changed)
    }
}

/// Refuses a table of more than `max_columns` columns. Each column is an
/// index (scalar postings, text, vectors or edges) and a field of the
/// branch's GraphQL schema: one put of 400,000 numbers (6.5 MB) had made
/// 400,000 columns, half a gigabyte of memory, and a GraphQL schema whose
/// every rebuild held the server for 5 s.
pub fn check_column_count(table: &str, columns: usize, max_columns: usize) -> Result<()> {
    if columns > max_columns {
        bail!(
            TooManyColumns,
            "table {table:?} would have {columns} columns, over the limit of {max_columns} (BRAID_MAX_COLUMNS)"
        );
    }
    Ok(())
}

fn infer(name: &str, value: &Value, max_dim: u32) -> Result<Option<ColumnType>> {
    Ok(match value {
        Value::Null => None,
        Value::String(_) => Some(ColumnType::String),
        Value::Number(_) => Some(ColumnType::Number),
        Value::Bool(_) => Some(ColumnType::Bool),
        Value::Object(_) => Some(ColumnType::Json),
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) if items.iter().all(Value::is_number) => {
            check_dim(name, items.len(), max_dim)?;
            check_finite(name, items)?;
            Some(ColumnType::Vector { dim: items.len() as u32, metric: Metric::Cosine })
        }
        Value::Array(items) if items.iter().all(Value::is_string) => Some(ColumnType::Edges),
        Value::Array(_) => Some(ColumnType::Json),
    })
}

/// The column an array of floats (a vector as a write holds it) makes.
fn infer_floats(name: &str, xs: &Floats, max_dim: u32) -> Result<ColumnType> {
    check_dim(name, xs.len(), max_dim)?;
    check_finite_floats(name, xs)?;
    Ok(ColumnType::Vector { dim: xs.len() as u32, metric: Metric::Cosine })
}

fn check_dim(name: &str, dim: usize, max_dim: u32) -> Result<()> {
    if dim > max_dim as usize {
        bail!(VectorDimensionTooLarge, "column {name:?}: vector dimension {dim} exceeds the limit of {max_dim}");
    }
    Ok(())
}

/// [`check_value`] for an array of floats.
fn check_floats(name: &str, ty: &ColumnType, xs: &Floats) -> Result<()> {
    match ty {
        ColumnType::Json => Ok(()),
        ColumnType::Vector { dim, .. } if xs.len() != *dim as usize => {
            bail!(VectorDimensionMismatch, "column {name:?} holds {dim}-dimensional vectors, got {}", xs.len())
        }
        ColumnType::Vector { .. } => check_finite_floats(name, xs),
        _ => Err(mismatch(name, ty, "array")),
    }
}

/// [`check_finite`] for an array of floats.
fn check_finite_floats(name: &str, xs: &Floats) -> Result<()> {
    match xs.iter().enumerate().find(|(_, x)| !(*x as f32).is_finite()) {
        None => Ok(()),
        Some((i, x)) => Err(not_finite(name, i, &Value::from(x))),
    }
}

fn mismatch_of(name: &str, ty: &ColumnType, value: &Value) -> Error {
    let got = match value {
        Value::Null => "null",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    mismatch(name, ty, got)
}

fn mismatch(name: &str, ty: &ColumnType, got: &str) -> Error {
    // a table's columns are shared by all its tenants: say what the column
    // is, never whose write fixed it or what other tenants stored
    Error::new(
        Code::SchemaTypeMismatch,
        format!(
            "column {name:?} is {} but the value is {got} (a table's column types are shared by all of its tenants)",
            ty.name()
        ),
    )
}

fn check_value(name: &str, ty: &ColumnType, value: &Value) -> Result<()> {
    let ok = match (ty, value) {
        (_, Value::Null) | (ColumnType::Json, _) => true,
        (ColumnType::String, Value::String(_)) => true,
        (ColumnType::Number, Value::Number(_)) => true,
        (ColumnType::Bool, Value::Bool(_)) => true,
        (ColumnType::Edges, Value::Array(items)) => items.iter().all(Value::is_string),
        (ColumnType::Vector { dim, .. }, Value::Array(items)) => {
            if !items.iter().all(Value::is_number) {
                return Err(mismatch_of(name, ty, value));
            }
            if items.len() != *dim as usize {
                bail!(VectorDimensionMismatch, "column {name:?} holds {dim}-dimensional vectors, got {}", items.len());
            }
            check_finite(name, items)?;
            true
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(mismatch_of(name, ty, value))
    }
}

/// Rejects a vector with a value that is not a finite f32 (beyond f32's
/// range a JSON number becomes infinite, and infinities make NaN distances).
pub fn check_finite(name: &str, items: &[Value]) -> Result<()> {
    match items.iter().position(|v| !v.as_f64().is_some_and(|x| (x as f32).is_finite())) {
        None => Ok(()),
        Some(i) => Err(not_finite(name, i, &items[i])),
    }
}

fn not_finite(name: &str, i: usize, value: &dyn std::fmt::Display) -> Error {
    Error::new(
        Code::VectorNotFinite,
        format!(
            "column {name:?}: vector value [{i}] = {value} is not a finite 32-bit float (|x| must be below 3.4e38)"
        ),
    )
}

/// Reads a vector value as f32s (the caller has validated it).
pub fn vector_of(value: &Value) -> Option<Vec<f32>> {
    let items = value.as_array()?;
    if items.is_empty() {
        return None;
    }
    items.iter().map(|v| v.as_f64().map(|x| x as f32)).collect()
}

/// A declared column, as the admin API receives it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnDeclaration {
    #[serde(rename = "type")]
    pub ty: String,
    #[serde(default)]
    pub dim: Option<u32>,
    #[serde(default)]
    pub metric: Option<String>,
    #[serde(default)]
    pub text: Option<bool>,
    #[serde(default)]
    pub scalar: Option<bool>,
}

impl ColumnDeclaration {
    pub fn to_column(&self, name: &str, max_dim: u32) -> Result<Column> {
        names::check_identifier("column", name)?;
        let ty = match self.ty.as_str() {
            "string" | "text" => ColumnType::String,
            "number" => ColumnType::Number,
            "bool" => ColumnType::Bool,
            "edges" => ColumnType::Edges,
            "json" => ColumnType::Json,
            "vector" => {
                let dim = self.dim.unwrap_or(0);
                if dim == 0 {
                    bail!(InvalidRecord, "column {name:?}: a vector column needs dim >= 1");
                }
                if dim > max_dim {
                    bail!(VectorDimensionTooLarge, "column {name:?}: dim {dim} exceeds {max_dim}");
                }
                let metric = match self.metric.as_deref() {
                    None => Metric::Cosine,
                    Some(m) => Metric::parse(m).ok_or_else(|| {
                        Error::new(
                            Code::InvalidRecord,
                            format!("column {name:?}: metric must be cosine, dot or l2, got {m:?}"),
                        )
                    })?,
                };
                ColumnType::Vector { dim, metric }
            }
            other => bail!(
                InvalidRecord,
                "column {name:?}: type must be string, number, bool, vector, edges or json, got {other:?}"
            ),
        };
        // nothing is dropped: dim and metric belong to a vector column only
        let vector_option = match (self.dim, &self.metric) {
            (Some(_), _) => Some("dim"),
            (None, Some(_)) => Some("metric"),
            (None, None) => None,
        };
        if let (Some(option), false) = (vector_option, matches!(ty, ColumnType::Vector { .. })) {
            bail!(
                InvalidRecord,
                "column {name:?}: only a vector column takes {option}, not a column of type {}",
                ty.name()
            );
        }
        let mut column = Column::inferred(ty);
        if let Some(text) = self.text {
            if text && column.ty != ColumnType::String {
                bail!(InvalidRecord, "column {name:?}: only string columns can be text-indexed");
            }
            column.text = text;
        }
        if let Some(scalar) = self.scalar {
            if scalar && !matches!(column.ty, ColumnType::String | ColumnType::Number | ColumnType::Bool) {
                bail!(InvalidRecord, "column {name:?}: only string, number and bool columns can be scalar");
            }
            column.scalar = scalar;
        }
        Ok(column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Fields {
        Fields::from(v.as_object().unwrap().clone())
    }

    #[test]
    fn a_vector_held_as_floats_is_checked_as_its_values_are() {
        let base = || {
            let mut s = TableSchema::new("t");
            s.admit(&obj(json!({"v": [0.5, 0.25], "n": 1, "j": {"a": 1}, "e": ["x"], "s": "a"})), 4096, 1024).unwrap();
            s
        };
        for column in ["v", "n", "j", "e", "s", "new"] {
            for xs in [&[0.5, 0.25][..], &[0.5], &[0.5, 0.25, 0.75], &[0.5, 1e39], &[1e39, 0.5, 0.1]] {
                let values = Value::Array(xs.iter().map(|x| json!(x)).collect());
                let as_floats =
                    Fields::from_pairs(vec![(column.to_string(), Field::Floats(Floats::pack(xs.to_vec())))]);
                let as_values = Fields::from_pairs(vec![(column.to_string(), Field::Value(values))]);
                let (mut a, mut b) = (base(), base());
                let outcome = |r: Result<bool>| r.map_err(|e| (e.code, e.message));
                assert_eq!(
                    outcome(a.admit(&as_floats, 2, 1024)),
                    outcome(b.admit(&as_values, 2, 1024)),
                    "{column} {xs:?}"
                );
                assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn a_declaration_takes_only_the_options_of_its_type() {
        let declare = |v: Value| serde_json::from_value::<ColumnDeclaration>(v).unwrap().to_column("c", 4096);
        for (v, option) in [
            (json!({"type": "number", "dim": 3}), "dim"),
            (json!({"type": "string", "metric": "l2"}), "metric"),
            (json!({"type": "json", "dim": 2, "metric": "dot"}), "dim"),
        ] {
            let err = declare(v.clone()).unwrap_err();
            assert_eq!(err.code, Code::InvalidRecord, "{v}");
            assert!(err.message.contains(&format!("only a vector column takes {option}")), "{}", err.message);
        }
        let vector = declare(json!({"type": "vector", "dim": 3, "metric": "l2"})).unwrap();
        assert_eq!(vector.ty, ColumnType::Vector { dim: 3, metric: Metric::L2 });
        assert_eq!(declare(json!({"type": "number"})).unwrap().ty, ColumnType::Number);
    }

    #[test]
    fn infers_and_checks() {
        let mut s = TableSchema::new("t");
        let changed = s
            .admit(&obj(json!({"title": "a", "n": 1, "ok": true, "v": [1.0, 2.0], "e": ["x"], "z": null})), 4096, 1024)
            .unwrap();
        assert!(changed);
        assert_eq!(s.columns["title"].ty, ColumnType::String);
        assert!(s.columns["title"].text && s.columns["title"].scalar);
        assert_eq!(s.columns["v"].ty, ColumnType::Vector { dim: 2, metric: Metric::Cosine });
        assert_eq!(s.columns["e"].ty, ColumnType::Edges);
        assert!(!s.columns.contains_key("z"));
        assert!(!s.admit(&obj(json!({"title": "b", "n": 2.5})), 4096, 1024).unwrap());
        let err = s.admit(&obj(json!({"n": "x"})), 4096, 1024).unwrap_err();
        assert_eq!(err.code, Code::SchemaTypeMismatch);
        let err = s.admit(&obj(json!({"v": [1.0]})), 4096, 1024).unwrap_err();
        assert_eq!(err.code, Code::VectorDimensionMismatch);
        let err = s.admit(&obj(json!({"w": [1.0, 2.0, 3.0]})), 2, 1024).unwrap_err();
        assert_eq!(err.code, Code::VectorDimensionTooLarge);
        let err = s.admit(&obj(json!({"bad-name": 1})), 4096, 1024).unwrap_err();
        assert_eq!(err.code, Code::InvalidName);
    }
}
