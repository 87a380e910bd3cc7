//! Planning a hybrid query: its limits, its request and response types, and
//! the validated `Plan` the ranking runs. A query's whole path:
//!
//! 1. (here) validate the query against the table's schema and resolve the read
//!    epoch (cursor, `temporal_as_of` or latest);
//! 2. (query/rank.rs) build the eligible-row bitmap: tenant mask, MVCC visibility at the read
//!    epoch, scalar equality bitmaps. Every access path is filtered by it
//!    before any row is opened;
//! 3. run the requested paths: BM25 (tantivy plus the hot overlay of rows it
//!    has not indexed yet), vectors (HNSW, or an exact scan when the eligible
//!    set is small or the graph lags), graph BFS from `graph_seed`;
//! 4. fuse (RRF or relative score), order by (final score desc, record id);
//! 5. (query/execute.rs) page, re-check visibility of every returned row and
//!    materialise it; keep the ranked list for the cursor's next pages.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::bail;
use crate::error::{Code, Error, Result};
use crate::index::text;
use crate::index::vector;
use crate::names;
use crate::query::explain::{Explain, ScoreComponents};
use crate::query::fusion::{FusionMethod, Weights};
use crate::query::graph;
use crate::schema::{ColumnType, Metric};
use crate::storage::{ScalarKey, State};

pub const DEFAULT_TOP_K: i64 = 10;
pub const MAX_TOP_K: i64 = 1000;
pub const MAX_BUDGET: i64 = 10_000;
/// Eligible sets up to this size are always scored exactly instead of through HNSW.
pub const EXACT_THRESHOLD: u64 = 2048;
/// An exact scan reads each eligible row's 8-bit code and then the vectors
/// of the few rows the codes cannot rule out: about 40-80 ns per eligible
/// row (384-d; it is memory-bound), half what scoring every row's f32
/// vector cost. A filtered HNSW search costs about 0.6-2.6 ms at `ef` 320
/// over 100,000 vectors, growing with `ef`, slowly with the graph, and
/// inversely with the share of the graph the filter accepts (it walks past
/// rejected rows). The two cross near `eligible² ≈ R × ef × graph size`,
/// with R the ratio of a walk step's cost to a scanned row's: about 12 on
/// the clustered vectors of `cargo run --release --example vecprobe -p
/// braid-engine`, above 20 on bench/hybrid.mjs's text-derived vectors,
/// whose graph walks are longer (`cargo run --release --example scanprobe
/// -p braid-engine`: 2.0 ms for a 25,000-row tenant, where the walk at
/// `ef` 320 took 2.6 ms and found 92% of the true top 10). Halving the
/// scan's cost per row doubled R, from 12 before the codes.
pub const HNSW_EXACT_RATIO: u64 = 24;
/// The smallest `ef` a vector search uses.
pub const MIN_EF: usize = 256;

/// Whether scoring `eligible` rows exactly is cheaper than a filtered HNSW
/// search of a graph of `graph` vectors with this `ef` (and it is exact).
pub fn prefer_exact(eligible: u64, graph: u64, ef: usize) -> bool {
    eligible <= EXACT_THRESHOLD
        || eligible.saturating_mul(eligible) < HNSW_EXACT_RATIO.saturating_mul(ef as u64).saturating_mul(graph)
}
pub const CURSOR_TTL_MS: u64 = 60 * 60 * 1000;
/// Most names `return_fields` may list.
pub const MAX_RETURN_FIELDS: usize = 1000;
/// The deepest a text-only list is widened to at once while paging.
pub const MAX_TEXT_DEPTH: usize = 1 << 20;
/// Distinct terms a text query may have (Elasticsearch's old
/// `max_clause_count`); each term costs a posting-list walk.
pub const MAX_QUERY_TERMS: usize = 1024;

/// A query integer as an error message quotes it: one that saturated while
/// it was read (past i64's range, see [`whole_number`]) is not quoted as
/// the saturated value, which the client never sent.
fn shown(v: i64) -> String {
    match v {
        i64::MAX => "a number of 2^63 or more".into(),
        i64::MIN => "a number of -2^63 or less".into(),
        v => v.to_string(),
    }
}

/// An integer field of a query that also takes a whole number written as a
/// float: a JSON number past 2^53 reaches the engine as a double (`1e20`,
/// `9007199254740992`). Out of `i64`'s range it saturates, so the field's own
/// range check names it (`top_k_out_of_range`, `temporal_in_future`) instead
/// of a parse error; a fraction (`1.5`) is still not an integer.
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<i64>, D::Error> {
    struct Whole;
    impl<'de> serde::de::Visitor<'de> for Whole {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an integer")
        }
        fn visit_none<E>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E> {
            Ok(Some(i64::try_from(v).unwrap_or(i64::MAX)))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
            if v.is_finite() && v.fract() == 0.0 {
                Ok(Some(v as i64)) // `as` saturates at i64's ends
            } else {
                Err(E::invalid_type(serde::de::Unexpected::Float(v), &self))
            }
        }
    }
    d.deserialize_option(Whole)
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HybridQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalar_eq: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_seed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub temporal_as_of: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub top_k: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<bool>,
    /// Extension: `rrf` (default) or `relative_score`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fusion: Option<String>,
    /// Extension: weights of `relative_score` fusion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fusion_weights: Option<Weights>,
    /// Extension: candidates taken from the vector path (default max(10 * top_k, 100)).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub candidate_budget: Option<i64>,
    /// Extension: hops of the graph neighbourhood (default 2, 1..=8).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub graph_depth: Option<i64>,
    /// Extension: which fields each result carries (default every field;
    /// `[]` none). Does not change the ranking, so not part of a cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_fields: Option<Vec<String>>,
}

impl HybridQuery {
    /// Identifies the query for its cursors: everything but cursor, explain
    /// and the projection (pages of one cursor may ask for other fields),
    /// with every default spelled out, so a client that fills in `top_k: 10`
    /// or `fusion: "rrf"` on page 2 asks the same query as page 1 did.
    pub fn fingerprint(&self) -> String {
        self.spelled_out().digest()
    }

    /// Identifies the query for its cursors and its cached list once it is
    /// validated: [`HybridQuery::fingerprint`]'s query with what the table
    /// decides spelled out and what does not change the ranking left out,
    /// so that every way of writing one query pages the others (found by a
    /// black-box review: the typed GraphQL field writes `scalar_eq` in the
    /// table's column order, and no cursor of another order paged it):
    /// `scalar_eq` by column (an AND of equalities), the vector column the
    /// query reads (its default named or not), no `vector_field` without a
    /// vector nor `text_field` without text, and no `fusion_weights` under
    /// `rrf`, which takes none.
    pub(super) fn canonical_fingerprint(&self, plan: &Plan) -> String {
        let mut q = self.spelled_out();
        if let Some(filters) = q.scalar_eq.take() {
            let mut sorted: Vec<(String, Value)> = filters.into_iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            q.scalar_eq = Some(sorted.into_iter().collect());
        }
        q.vector_field = plan.vector.as_ref().map(|(column, ..)| column.clone());
        if q.text.is_none() {
            q.text_field = None;
        }
        if plan.fusion == FusionMethod::Rrf {
            q.fusion_weights = Some(Weights::default());
        }
        q.digest()
    }

    /// The query with every default spelled out.
    fn spelled_out(&self) -> HybridQuery {
        let mut q = self.clone();
        let top_k = *q.top_k.get_or_insert(DEFAULT_TOP_K);
        q.candidate_budget.get_or_insert(top_k.saturating_mul(10).max(100));
        q.freshness.get_or_insert_with(|| "latest".into());
        q.fusion.get_or_insert_with(|| "rrf".into());
        q.fusion_weights.get_or_insert_with(Weights::default);
        if q.graph_seed.is_some() {
            q.graph_depth.get_or_insert(graph::DEFAULT_DEPTH as i64);
        } else {
            q.graph_depth = None;
        }
        if q.scalar_eq.as_ref().is_some_and(Map::is_empty) {
            q.scalar_eq = None;
        }
        q
    }

    /// The fingerprint of cursors issued before defaults were spelled out
    /// (a cursor lives an hour, so one may cross an upgrade).
    pub fn legacy_fingerprint(&self) -> String {
        self.clone().digest()
    }

    fn digest(mut self) -> String {
        self.cursor = None;
        self.explain = None;
        self.return_fields = None;
        let digest = Sha256::digest(serde_json::to_vec(&self).expect("query serialises"));
        digest[..12].iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct HybridRow {
    pub fields: Map<String, Value>,
    pub record_id: String,
    pub score: ScoreComponents,
    pub tenant_id: String,
    pub version_id: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct QueryResponse {
    pub explain: Explain,
    pub next_cursor: Option<String>,
    pub results: Vec<HybridRow>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Read at the latest epoch and cover index lag with the hot overlay.
    Latest,
    /// Only what the indexes hold: no overlay, waits for nothing.
    Indexed,
}

impl Freshness {
    pub(super) fn name(self) -> &'static str {
        match self {
            Freshness::Latest => "latest",
            Freshness::Indexed => "indexed",
        }
    }
}

/// A validated query.
pub(super) struct Plan {
    pub(super) table: String,
    pub(super) tenant: String,
    pub(super) terms: Option<Vec<String>>,
    pub(super) text_field: Option<String>,
    pub(super) vector: Option<(String, Metric, Vec<f32>)>,
    /// Equality filters: column, the key its index is looked up by, the
    /// predicate as explain prints it, and the value (to check rows found
    /// under a digest key against).
    pub(super) scalar: Vec<(String, ScalarKey, String, Value)>,
    pub(super) graph: Option<(String, u32, Vec<String>)>,
    pub(super) top_k: usize,
    pub(super) budget: usize,
    pub(super) freshness: Freshness,
    pub(super) fusion: FusionMethod,
    pub(super) weights: Weights,
    /// Fields each result carries; `None` is every field.
    pub(super) return_fields: Option<Vec<String>>,
}

pub(super) fn validate(
    q: &HybridQuery,
    state: &State,
    text_analyzer: &mut tantivy::tokenizer::TextAnalyzer,
) -> Result<Plan> {
    let Some(table) = q.table.clone() else { bail!(InvalidQuery, "table is required") };
    names::check_table(&table)?;
    let Some(tenant) = q.tenant_id.clone() else { bail!(InvalidQuery, "tenant_id is required") };
    names::check_key("tenant_id", &tenant)?;
    let Some(schema) = state.schemas.get(&table) else { bail!(UnknownTable, "table {table:?} does not exist") };
    let top_k = q.top_k.unwrap_or(DEFAULT_TOP_K);
    if !(1..=MAX_TOP_K).contains(&top_k) {
        bail!(TopKOutOfRange, "top_k must be between 1 and {MAX_TOP_K}, got {}", shown(top_k));
    }
    let top_k = top_k as usize;
    let budget = match q.candidate_budget {
        Some(b) if !(1..=MAX_BUDGET).contains(&b) => {
            bail!(InvalidQuery, "candidate_budget must be between 1 and {MAX_BUDGET}, got {}", shown(b))
        }
        Some(b) => b as usize,
        None => (top_k * 10).max(100),
    };
    let freshness = match q.freshness.as_deref() {
        None | Some("latest") => Freshness::Latest,
        Some("indexed") => Freshness::Indexed,
        Some(other) => bail!(InvalidQuery, "freshness must be latest or indexed, got {other:?}"),
    };
    let fusion = match q.fusion.as_deref() {
        None => FusionMethod::Rrf,
        Some(f) => FusionMethod::parse(f).ok_or_else(|| {
            Error::new(Code::InvalidQuery, format!("fusion must be rrf or relative_score, got {f:?}"))
        })?,
    };
    let weights = q.fusion_weights.unwrap_or_default();
    if [weights.lexical, weights.vector, weights.relational].iter().any(|w| !w.is_finite() || *w < 0.0) {
        bail!(InvalidQuery, "fusion_weights must be finite and non-negative");
    }
    if let Some(field) = &q.text_field {
        match schema.columns.get(field) {
            Some(c) if c.text => {}
            Some(_) => bail!(UnknownColumn, "column {field:?} of table {table:?} is not text-indexed"),
            None => bail!(UnknownColumn, "table {table:?} has no column {field:?}"),
        }
    }
    let terms = match q.text.as_ref() {
        None => None,
        Some(t) => match text::distinct_tokens(text_analyzer, t, MAX_QUERY_TERMS) {
            Ok(toks) => Some(toks),
            Err(_) => bail!(
                TooManyTerms,
                "text has more than {MAX_QUERY_TERMS} distinct terms; at most {MAX_QUERY_TERMS} are allowed"
            ),
        },
    };
    let vector = match &q.vector {
        None => {
            if let Some(field) = &q.vector_field {
                if !schema.vector_columns().any(|(n, ..)| n == field) {
                    bail!(UnknownColumn, "table {table:?} has no vector column {field:?}");
                }
            }
            None
        }
        Some(v) => {
            let column = match &q.vector_field {
                Some(field) => schema.vector_columns().find(|(n, ..)| n == field).ok_or_else(|| {
                    Error::new(Code::UnknownColumn, format!("table {table:?} has no vector column {field:?}"))
                })?,
                None => schema
                    .vector_columns()
                    .next()
                    .ok_or_else(|| Error::new(Code::UnknownColumn, format!("table {table:?} has no vector column")))?,
            };
            let (name, dim, metric) = column;
            if v.len() != dim as usize {
                bail!(
                    VectorDimensionMismatch,
                    "column {name:?} holds {dim}-dimensional vectors, the query has {}",
                    v.len()
                );
            }
            if let Some(i) = v.iter().position(|x| !(*x as f32).is_finite()) {
                bail!(
                    VectorNotFinite,
                    "vector[{i}] = {} is not a finite 32-bit float (|x| must be below 3.4e38)",
                    v[i]
                );
            }
            let prepared = vector::prepare(metric, v.iter().map(|x| *x as f32).collect());
            Some((name.to_string(), metric, prepared))
        }
    };
    let mut scalar = Vec::new();
    for (col, value) in q.scalar_eq.iter().flatten() {
        let column = match schema.columns.get(col) {
            Some(c) if c.scalar => c,
            Some(c) => bail!(UnknownColumn, "column {col:?} is of type {}, not a scalar column", c.ty.name()),
            None => bail!(UnknownColumn, "table {table:?} has no column {col:?}"),
        };
        let Some(key) = ScalarKey::of(value) else {
            bail!(InvalidQuery, "scalar_eq.{col} must be a string, number or bool")
        };
        // a column's type is fixed, so a value of another type can never
        // match: say so rather than answer an empty list (PostgreSQL refuses
        // `text = integer` too)
        let given = match value {
            Value::String(_) => ColumnType::String,
            Value::Number(_) => ColumnType::Number,
            _ => ColumnType::Bool,
        };
        if matches!(column.ty, ColumnType::String | ColumnType::Number | ColumnType::Bool) && column.ty != given {
            bail!(
                SchemaTypeMismatch,
                "scalar_eq.{col} is a {}, but column {col:?} holds {} values",
                given.name(),
                column.ty.name()
            );
        }
        scalar.push((col.clone(), key, format!("{col} = {value}"), value.clone()));
    }
    // checked with or without a seed, as every other range is (the
    // OpenAPI document calls 9 invalid either way)
    let depth = q.graph_depth.unwrap_or(graph::DEFAULT_DEPTH as i64);
    if !(1..=8).contains(&depth) {
        bail!(InvalidQuery, "graph_depth must be between 1 and 8, got {}", shown(depth));
    }
    let graph = match &q.graph_seed {
        None => None,
        Some(seed) => {
            names::check_key("graph_seed", seed)?;
            let edges: Vec<String> = schema.edge_columns().map(str::to_string).collect();
            Some((seed.clone(), depth as u32, edges))
        }
    };
    if let Some(fields) = &q.return_fields {
        if fields.len() > MAX_RETURN_FIELDS {
            bail!(InvalidQuery, "return_fields lists {} fields, at most {MAX_RETURN_FIELDS}", fields.len());
        }
        if let Some(col) = fields.iter().find(|f| !schema.columns.contains_key(*f)) {
            bail!(UnknownColumn, "table {table:?} has no column {col:?} (in return_fields)");
        }
    }
    Ok(Plan {
        table,
        tenant,
        terms,
        text_field: q.text_field.clone(),
        vector,
        scalar,
        graph,
        top_k,
        budget,
        freshness,
        fusion,
        weights,
        return_fields: q.return_fields.clone(),
    })
}

/// Resolves the read epoch and checks it against the retained history.
pub(super) fn read_epoch(q: &HybridQuery, state: &State, horizon: u64, pinned: Option<u64>) -> Result<u64> {
    if let Some(e) = pinned {
        if e < horizon {
            bail!(CursorExpired, "the cursor's epoch {e} is below the retained horizon {horizon}");
        }
        return Ok(e);
    }
    match q.temporal_as_of {
        None => Ok(state.latest_epoch),
        Some(e) if e < 0 => bail!(InvalidQuery, "temporal_as_of must be >= 0, got {}", shown(e)),
        Some(e) if (e as u64) > state.latest_epoch => {
            bail!(TemporalInFuture, "temporal_as_of {} is after the latest epoch {}", shown(e), state.latest_epoch)
        }
        Some(e) if (e as u64) < horizon => {
            bail!(TemporalBeforeHorizon, "temporal_as_of {e} is below the retained horizon {horizon}")
        }
        Some(e) => Ok(e as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::{shown, HybridQuery};
    use serde_json::json;

    fn top_k(v: serde_json::Value) -> Result<Option<i64>, String> {
        serde_json::from_value::<HybridQuery>(json!({ "top_k": v })).map(|q| q.top_k).map_err(|e| e.to_string())
    }

    #[test]
    fn a_default_spelled_out_is_the_same_query_for_its_cursors() {
        let q = |v: serde_json::Value| serde_json::from_value::<HybridQuery>(v).unwrap();
        let bare = q(json!({"table": "t", "tenant_id": "a", "text": "x"}));
        let spelled = q(json!({
            "table": "t", "tenant_id": "a", "text": "x", "top_k": 10, "candidate_budget": 100,
            "freshness": "latest", "fusion": "rrf", "fusion_weights": {}, "scalar_eq": {}, "graph_depth": 3,
            "explain": true, "return_fields": ["a"]
        }));
        assert_eq!(bare.fingerprint(), spelled.fingerprint());
        assert_ne!(bare.fingerprint(), bare.legacy_fingerprint());
        // a default of another top_k, or another value, is another query
        assert_ne!(
            bare.fingerprint(),
            q(json!({"table": "t", "tenant_id": "a", "text": "x", "top_k": 20})).fingerprint()
        );
        let deeper = q(json!({"table": "t", "tenant_id": "a", "text": "x", "top_k": 20, "candidate_budget": 200}));
        assert_eq!(
            deeper.fingerprint(),
            q(json!({"table": "t", "tenant_id": "a", "text": "x", "top_k": 20})).fingerprint()
        );
        assert_ne!(
            bare.fingerprint(),
            q(json!({"table": "t", "tenant_id": "a", "text": "x", "candidate_budget": 50})).fingerprint()
        );
        let seeded = q(json!({"table": "t", "tenant_id": "a", "graph_seed": "s"}));
        assert_eq!(
            seeded.fingerprint(),
            q(json!({"table": "t", "tenant_id": "a", "graph_seed": "s", "graph_depth": 2})).fingerprint()
        );
        assert_ne!(
            seeded.fingerprint(),
            q(json!({"table": "t", "tenant_id": "a", "graph_seed": "s", "graph_depth": 3})).fingerprint()
        );
    }

    #[test]
    fn integer_fields_take_whole_doubles_and_saturate_past_i64() {
        assert_eq!(top_k(json!(5)), Ok(Some(5)));
        assert_eq!(top_k(json!(null)), Ok(None));
        assert_eq!(top_k(json!(9_007_199_254_740_992.0)), Ok(Some(9_007_199_254_740_992)));
        assert_eq!(top_k(json!(1e20)), Ok(Some(i64::MAX)));
        assert_eq!(top_k(json!(-1e300)), Ok(Some(i64::MIN)));
        assert_eq!(top_k(json!(u64::MAX)), Ok(Some(i64::MAX)));
        // a saturated value is not quoted as if the client had sent it
        assert_eq!(
            (shown(i64::MAX).as_str(), shown(i64::MIN).as_str(), shown(7).as_str()),
            ("a number of 2^63 or more", "a number of -2^63 or less", "7")
        );
        assert!(top_k(json!(1.5)).unwrap_err().contains("expected an integer"));
        assert!(top_k(json!("5")).unwrap_err().contains("expected an integer"));
        let q: HybridQuery = serde_json::from_value(json!({})).unwrap();
        assert_eq!((q.top_k, q.temporal_as_of, q.candidate_budget, q.graph_depth), (None, None, None, None));
        let q: HybridQuery = serde_json::from_value(json!({"temporal_as_of": 1e20, "graph_depth": 2.0})).unwrap();
        assert_eq!((q.temporal_as_of, q.graph_depth), (Some(i64::MAX), Some(2)));
    }
}
