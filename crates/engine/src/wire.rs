//! Request bodies read straight from their JSON bytes.
//!
//! The service reads a request body with `JSON.parse`, checks it against the
//! route's JSON Schema and hands the engine the records. For the bulk write
//! route (`/v1/records/put-batch`, megabytes of vectors) that costs more
//! than the write itself, all of it on the JS thread. [`put_batch`] reads
//! the same body in one pass, on whichever thread calls it, and answers
//! `None` unless the service's own path would have accepted the body and
//! handed the engine exactly these records. On `None` the service takes that
//! path, so every refusal keeps its one message. `None` covers:
//!
//! - text that is not JSON, or that `serde_json` refuses where `JSON.parse`
//!   reads something (a number past f64's range, a lone surrogate escape,
//!   nesting deeper than 128 levels);
//! - a member the schema does not have, or one of the wrong type (`null`
//!   included);
//! - a field key that is not a column name, which the service refuses;
//! - a `__proto__` or `constructor` key at any depth, which the service's
//!   parser refuses (or, for `constructor`, looks at further);
//! - an object key that is an array index: JavaScript objects list those
//!   first, so the service would store that object in another key order.
//!
//! What it accepts it reads as JavaScript would hold it: every number is an
//! f64, and integers within 2^53 are integers (`1.0` is `1`).

use serde::{Deserialize, Deserializer};
use serde_json::{Number, Value};

use crate::fields::Field;
use crate::model::{RecordInput, RecordKey};
use crate::names;
use crate::query::HybridQuery;

/// A `/v1/records/put-batch` body.
#[derive(Debug)]
pub struct PutBatch {
    pub records: Vec<RecordInput>,
    pub include_write_timing: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutBatchBody {
    records: Vec<RecordInput>,
    #[serde(default, deserialize_with = "present")]
    include_write_timing: Option<bool>,
}

/// An optional member that, when present, is a boolean (`null` is refused,
/// as the schema refuses it).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    bool::deserialize(d).map(Some)
}

/// The body as the service would have read it, or `None` when the service
/// must read it itself (see the module docs).
pub fn put_batch(bytes: &[u8]) -> Option<PutBatch> {
    if !is_object(bytes) {
        return None;
    }
    let mut body: PutBatchBody = serde_json::from_slice(bytes).ok()?;
    if !body.records.iter_mut().all(as_the_service_reads) {
        return None;
    }
    Some(PutBatch { records: body.records, include_write_timing: body.include_write_timing.unwrap_or(false) })
}

/// A `/v1/records/put` body: its record, and the branch a wrapper names.
#[derive(Debug)]
pub struct PutBody {
    pub record: RecordInput,
    /// The wrapper's `database_id`, which the service checks against the
    /// request's headers before the record is written.
    pub database_id: Option<String>,
    /// The wrapper's `branch_id`, likewise.
    pub branch_id: Option<String>,
}

impl PutBody {
    /// Whether the body names a branch of its own.
    pub fn names_a_branch(&self) -> bool {
        self.database_id.is_some() || self.branch_id.is_some()
    }
}

/// A `/v1/records/put` body (a record, or `{"record": ...}` with an
/// optional `database_id` and `branch_id`) as the service would have read
/// it, or `None` when the service must read it itself (see the module docs).
pub fn put(bytes: &[u8]) -> Option<PutBody> {
    if !is_object(bytes) {
        return None;
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Wrapped {
        record: RecordInput,
        #[serde(default, deserialize_with = "present_string")]
        database_id: Option<String>,
        #[serde(default, deserialize_with = "present_string")]
        branch_id: Option<String>,
    }
    // a bare record fails the wrapper at its first member
    let mut body = match serde_json::from_slice::<Wrapped>(bytes) {
        Ok(Wrapped { record, database_id, branch_id }) => PutBody { record, database_id, branch_id },
        Err(_) => PutBody { record: serde_json::from_slice(bytes).ok()?, database_id: None, branch_id: None },
    };
    as_the_service_reads(&mut body.record).then_some(body)
}

/// The branch a `/v1/records/put` wrapper names (its `database_id` and
/// `branch_id`), read without reading its record: a keyed put's receipt is
/// looked up in the branch the write goes to, before the write reads the
/// body. Read as the service's parser reads the body: a leading BOM is
/// skipped and a member given twice is its last value (a recheck found both
/// taken for no wrapper, and the header's branch searched). `None` for a bare
/// record, a wrapper that names no branch, and a body out of the wrapper's
/// shape (which the write refuses, storing no receipt).
pub fn put_names(bytes: &[u8]) -> Option<(Option<String>, Option<String>)> {
    use serde::de::{IgnoredAny, MapAccess, Visitor};

    struct Names {
        record: bool,
        database_id: Option<String>,
        branch_id: Option<String>,
    }
    struct NamesVisitor;
    impl<'de> Visitor<'de> for NamesVisitor {
        type Value = Names;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a put wrapper")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Names, A::Error> {
            let mut names = Names { record: false, database_id: None, branch_id: None };
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                match key.as_ref() {
                    "record" => {
                        map.next_value::<IgnoredAny>()?;
                        names.record = true;
                    }
                    "database_id" => names.database_id = Some(map.next_value()?),
                    "branch_id" => names.branch_id = Some(map.next_value()?),
                    other => {
                        return Err(serde::de::Error::unknown_field(other, &["record", "database_id", "branch_id"]))
                    }
                }
            }
            Ok(names)
        }
    }
    impl<'de> Deserialize<'de> for Names {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Names, D::Error> {
            d.deserialize_map(NamesVisitor)
        }
    }

    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if !is_object(bytes) {
        return None;
    }
    let names: Names = serde_json::from_slice(bytes).ok()?;
    let named = names.database_id.is_some() || names.branch_id.is_some();
    (names.record && named).then_some((names.database_id, names.branch_id))
}

/// An optional member that, when present, is a string (`null` is refused,
/// as the schema refuses it).
fn present_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    String::deserialize(d).map(Some)
}

/// A `/v1/records/get` body (`{table, tenant_id, id}`, all strings, nothing
/// else) as the service would have read it, or `None` when the service must
/// read it itself (see the module docs).
pub fn get(bytes: &[u8]) -> Option<RecordKey> {
    if !is_object(bytes) {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}

/// A `/v1/query` body as the service would have handed it to the engine
/// (its JSON parser, then the `HybridQuery` schema: every member known and
/// of its type), or `None` when the service must read it itself, so that a
/// body out of shape keeps the service's one refusal (`unknown_field`,
/// `invalid_request`). What it accepts is the query the service would have
/// read; its values are the engine's to judge, as on every other path.
pub fn query(bytes: &[u8]) -> Option<HybridQuery> {
    if !is_object(bytes) {
        return None;
    }
    let mut body: Value = serde_json::from_slice(bytes).ok()?;
    if !as_javascript_holds(&mut body) {
        return None;
    }
    let Value::Object(members) = &body else { return None };
    if !members.iter().all(|(name, value)| query_member(name, value)) {
        return None;
    }
    serde_json::from_value(body).ok()
}

/// Whether a query member has the type the `HybridQuery` schema gives it
/// (src/schemas/query.ts), `null` only where the schema allows it.
fn query_member(name: &str, value: &Value) -> bool {
    let string = |v: &Value| v.is_string();
    let or_null = |check: fn(&Value) -> bool, v: &Value| v.is_null() || check(v);
    let integer = |v: &Value| v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|n| n.fract() == 0.0);
    match name {
        "table" | "tenant_id" | "freshness" | "fusion" => string(value),
        "text" | "text_field" | "vector_field" | "graph_seed" | "cursor" => or_null(Value::is_string, value),
        "vector" => value.is_null() || value.as_array().is_some_and(|items| items.iter().all(Value::is_number)),
        "scalar_eq" => value.is_object(),
        "temporal_as_of" => value.is_null() || integer(value),
        "top_k" | "candidate_budget" | "graph_depth" => integer(value),
        "explain" => value.is_boolean(),
        "fusion_weights" => value.as_object().is_some_and(|weights| {
            weights.iter().all(|(k, w)| matches!(k.as_str(), "lexical" | "vector" | "relational") && w.is_number())
        }),
        "return_fields" => value.as_array().is_some_and(|items| items.iter().all(Value::is_string)),
        _ => false,
    }
}

/// Whether the service would hand the engine `record` as it is, its
/// numbers rewritten as JavaScript holds them.
fn as_the_service_reads(record: &mut RecordInput) -> bool {
    record.fields.iter_mut().all(|(key, field)| {
        names::is_identifier(key)
            && plain_key(key)
            && match field {
                Field::Value(value) => as_javascript_holds(value),
                // floats JavaScript holds as they are (crate::fields)
                Field::Floats(_) => true,
            }
    })
}

/// Whether JSON text is an object (its first byte past whitespace is `{`):
/// serde's derived reading also builds a struct from a list of its members,
/// so `[{...record...}]` had been written as a put and `[[...records...]]` as
/// a put-batch, bodies the schema refuses.
fn is_object(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r')) == Some(&b'{')
}

/// `value` as JSON bytes, its numbers spelled as `JSON.stringify` spells
/// them. The service sends these bytes as they are for some routes and
/// answers others (and every idempotent replay) with its own serializer, so
/// without this one number had two spellings: `serde_json` writes a whole
/// float `1.0` and some in exponent form (`1e-6`, `1e21`) where JavaScript
/// writes `1`, `0.000001` and `1e+21`, and a replay was not the bytes of the
/// answer it replays.
pub fn javascript_json(value: &impl serde::Serialize) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(512);
    value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, JavaScriptNumbers))?;
    Ok(out)
}

/// `serde_json`'s compact output with finite floats spelled by `ryu-js`
/// (JavaScript's `Number.prototype.toString`; `serde_json` writes `null`
/// for the others, as `JSON.stringify` does). An f32 is the f64 it widens
/// to, as it reaches JavaScript.
struct JavaScriptNumbers;

impl serde_json::ser::Formatter for JavaScriptNumbers {
    fn write_f64<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, value: f64) -> std::io::Result<()> {
        writer.write_all(ryu_js::Buffer::new().format_finite(value).as_bytes())
    }

    fn write_f32<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, value: f32) -> std::io::Result<()> {
        self.write_f64(writer, f64::from(value))
    }
}

/// A JSON number as JavaScript holds it: an integer when it is one within
/// 2^53, else an f64. `None` for NaN and the infinities, which JSON cannot
/// hold. The binding reads JavaScript numbers with this too.
pub fn javascript_number(n: f64) -> Option<Number> {
    if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
        return Some(Number::from(n as i64));
    }
    Number::from_f64(n)
}

/// Rewrites the numbers of `value` as JavaScript holds them; false when a key
/// needs the service's own reading.
fn as_javascript_holds(value: &mut Value) -> bool {
    match value {
        Value::Number(n) => match n.as_f64().and_then(javascript_number) {
            Some(held) => {
                *n = held;
                true
            }
            None => false,
        },
        Value::Array(items) => items.iter_mut().all(as_javascript_holds),
        Value::Object(map) => map.iter_mut().all(|(key, v)| plain_key(key) && as_javascript_holds(v)),
        Value::Null | Value::Bool(_) | Value::String(_) => true,
    }
}

/// Not `__proto__` or `constructor`, and not an array index.
fn plain_key(key: &str) -> bool {
    key != "__proto__" && key != "constructor" && !is_array_index(key)
}

/// `0` to `4294967294` written canonically: the keys a JavaScript object
/// lists first, in numeric order.
fn is_array_index(key: &str) -> bool {
    let bytes = key.as_bytes();
    if bytes.is_empty() || bytes.len() > 10 || !bytes.iter().all(u8::is_ascii_digit) {
        return false;
    }
    (bytes.len() == 1 || bytes[0] != b'0') && key.parse::<u64>().is_ok_and(|n| n < u32::MAX as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(body: &str) -> Option<PutBatch> {
        put_batch(body.as_bytes())
    }

    #[test]
    fn reads_a_batch_with_numbers_as_javascript_holds_them() {
        let batch = read(
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","fields":{"v":[1.0,-0.0,0.5,1e3],"n":9007199254740993,"o":{"b":1,"a":[2.0]}}},
                {"table":"t","tenant_id":"a","id":"2"}],"include_write_timing":true}"#,
        )
        .expect("a plain batch reads");
        assert!(batch.include_write_timing);
        assert_eq!(batch.records.len(), 2);
        let fields = &batch.records[0].fields.to_map();
        assert_eq!(fields["v"], json!([1, 0, 0.5, 1000]));
        assert!(fields["v"][0].is_i64(), "1.0 is the integer 1, as JSON.parse gives it");
        // past 2^53 JavaScript holds the nearest f64
        assert_eq!(fields["n"].as_f64(), Some(9007199254740992.0));
        assert!(fields["n"].is_f64());
        assert_eq!(fields["o"].as_object().unwrap().keys().collect::<Vec<_>>(), ["b", "a"], "key order kept");
        assert!(batch.records[1].fields.is_empty());
        assert!(!read(r#"{"records":[]}"#).unwrap().include_write_timing);
    }

    #[test]
    fn numbers_are_written_as_javascript_writes_them() {
        let value = json!({"whole": 1.0, "zero": 0.0, "neg_zero": -0.0, "small": 0.000001, "tiny": 1.5e-7,
            "big": 1e21, "huge": 1.7976931348623157e308, "third": 1.0 / 3.0, "int": 7, "neg": -3, "u": u64::MAX,
            "list": [0.5, 2.0, "s", null, true]});
        let text = String::from_utf8(javascript_json(&value).unwrap()).unwrap();
        assert_eq!(
            text,
            r#"{"whole":1,"zero":0,"neg_zero":0,"small":0.000001,"tiny":1.5e-7,"big":1e+21,"huge":1.7976931348623157e+308,"third":0.3333333333333333,"int":7,"neg":-3,"u":18446744073709551615,"list":[0.5,2,"s",null,true]}"#
        );
        // an f32 as the f64 JavaScript receives
        assert_eq!(javascript_json(&0.1f32).unwrap(), b"0.10000000149011612");
    }

    #[test]
    fn a_vector_is_read_straight_into_floats() {
        let batch = read(
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","fields":{"v":[0.5,-0.25,0.125],"w":[0.5,1.0],"s":"x"}}]}"#,
        )
        .expect("a plain batch reads");
        let fields = &batch.records[0].fields;
        assert_eq!(fields.get("v"), Some(&Field::Floats(crate::fields::Floats::pack(vec![0.5, -0.25, 0.125]))));
        // 1.0 is the integer 1 as JavaScript holds it: the array stays values
        assert_eq!(fields.get("w"), Some(&Field::Value(json!([0.5, 1]))));
        assert_eq!(fields.get("s"), Some(&Field::Value(json!("x"))));
    }

    #[test]
    fn leaves_to_the_service_what_it_reads_otherwise() {
        let refused = [
            "",
            "  ",
            "[]",
            r#"{"records":[],}"#,
            r#"{}"#,
            r#"{"records":null}"#,
            r#"{"records":[],"include_write_timing":null}"#,
            r#"{"records":[],"include_write_timing":1}"#,
            r#"{"records":[],"extra":1}"#,
            r#"{"records":[],"records":[]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a"}]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a","id":1}]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","fields":null}]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","extra":{}}]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","fields":{"not a name":1}}]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","fields":{"__proto__":1}}]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","fields":{"constructor":1}}]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","fields":{"o":{"__proto__":{}}}}]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","fields":{"o":[{"b":1,"2":1}]}}]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","fields":{"x":1e400}}]}"#,
            r#"{"records":[{"table":"t","tenant_id":"a","id":"1","fields":{"x":"\ud800"}}]}"#,
            // a record is an object, not its members listed in order
            r#"{"records":[["t","a","1",{}]]}"#,
            r#"[[{"table":"t","tenant_id":"a","id":"1"}]]"#,
            r#" [[{"table":"t","tenant_id":"a","id":"1"}], true]"#,
        ];
        for body in refused {
            assert!(read(body).is_none(), "{body} must go the service's way");
        }
        let deep = format!(
            r#"{{"records":[{{"table":"t","tenant_id":"a","id":"1","fields":{{"x":{}{}}}}}]}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(read(&deep).is_none());
    }

    #[test]
    fn reads_a_put_body_bare_or_wrapped_and_leaves_the_rest_to_the_service() {
        let bare = put(br#"{"table":"t","tenant_id":"a","id":"1","fields":{"v":[1.0,0.5]}}"#).expect("a bare record");
        assert_eq!((bare.record.table.as_str(), bare.record.id.as_str()), ("t", "1"));
        assert!(bare.record.fields.to_map()["v"][0].is_i64());
        assert!(!bare.names_a_branch());
        let wrapped = put(br#"{"record":{"table":"t","tenant_id":"a","id":"2"}}"#).expect("a wrapped record");
        assert_eq!(wrapped.record.id, "2");
        assert!(!wrapped.names_a_branch());
        let named = put(br#"{"branch_id":"b","record":{"table":"t","tenant_id":"a","id":"2"},"database_id":"d"}"#)
            .expect("a wrapper naming its branch");
        assert_eq!((named.database_id.as_deref(), named.branch_id.as_deref()), (Some("d"), Some("b")));
        assert!(named.names_a_branch());
        for body in [
            r#"{"record":{"table":"t","tenant_id":"a","id":"2"},"branch_id":null}"#,
            r#"{"record":{"table":"t","tenant_id":"a","id":"2"},"database_id":7}"#,
            r#"{"record":{"table":"t","tenant_id":"a","id":"2"},"table":"t"}"#,
            r#"{"table":"t","tenant_id":"a","id":"1","id":"2"}"#,
            r#"["t","a","1",{}]"#,
            r#"{"record":["t","a","1"]}"#,
            r#"[{"table":"t","tenant_id":"a","id":"1"}]"#,
            r#"
[{"table":"t","tenant_id":"a","id":"1"}]"#,
            r#"{"table":"t","tenant_id":"a","id":"1","fields":{"not a name":1}}"#,
            r#"{"table":"t","tenant_id":"a","id":"1","fields":{"o":{"__proto__":{}}}}"#,
            "",
        ] {
            assert!(put(body.as_bytes()).is_none(), "{body} must go the service's way");
        }
    }

    #[test]
    fn reads_the_branch_a_put_wrapper_names_without_its_record() {
        let names = |body: &str| put_names(body.as_bytes());
        assert_eq!(
            names(r#"{"record":{"table":"t","fields":{"v":[1,2]}},"branch_id":"b"}"#),
            Some((None, Some("b".to_string())))
        );
        assert_eq!(
            names(r#"{"database_id":"d","record":{},"branch_id":"b"}"#),
            Some((Some("d".to_string()), Some("b".to_string())))
        );
        // read as the service's parser reads it: a BOM skipped, a member given twice its last value
        assert_eq!(names("\u{feff}{\"record\":{},\"branch_id\":\"b\"}"), Some((None, Some("b".to_string()))));
        assert_eq!(
            names(r#"{"branch_id":"main","record":{},"branch_id":"b","record":{"id":"2"}}"#),
            Some((None, Some("b".to_string())))
        );
        for body in [
            r#"{"record":{"table":"t","tenant_id":"a","id":"2"}}"#,
            r#"{"table":"t","tenant_id":"a","id":"1","branch_id":"b"}"#,
            r#"{"record":{},"branch_id":null}"#,
            r#"{"record":{},"branch_id":"b","extra":1}"#,
            r#"{"branch_id":"b"}"#,
            r#"[{"record":{},"branch_id":"b"}]"#,
            "not json",
            "",
        ] {
            assert_eq!(names(body), None, "{body}");
        }
    }

    #[test]
    fn reads_a_get_body_and_leaves_the_rest_to_the_service() {
        let key = get(br#" {"table":"t","tenant_id":"a","id":"1"}"#).expect("a key");
        assert_eq!((key.table.as_str(), key.tenant_id.as_str(), key.id.as_str()), ("t", "a", "1"));
        for body in [
            "",
            r#"["t","a","1"]"#,
            r#"{"table":"t","tenant_id":"a"}"#,
            r#"{"table":"t","tenant_id":"a","id":1}"#,
            r#"{"table":"t","tenant_id":"a","id":null}"#,
            r#"{"table":"t","tenant_id":"a","id":"1","epoch":1}"#,
            r#"{"table":"t","tenant_id":"a","id":"1","id":"2"}"#,
            r#"{"table":"t","tenant_id":"a","id":"\ud800"}"#,
        ] {
            assert!(get(body.as_bytes()).is_none(), "{body} must go the service's way");
        }
    }

    #[test]
    fn reads_a_query_body_as_the_service_would_hand_it_over() {
        let q = query(
            br#"{"table":"t","tenant_id":"a","text":null,"vector":[1.0,0.5],"scalar_eq":{"y":2024.0,"b":"x"},
                "top_k":5.0,"temporal_as_of":null,"fusion_weights":{"lexical":2},"return_fields":[],"explain":true}"#,
        )
        .expect("a query in shape reads");
        assert_eq!(q.table.as_deref(), Some("t"));
        assert_eq!(q.text, None);
        assert_eq!(q.vector, Some(vec![1.0, 0.5]));
        assert_eq!(q.top_k, Some(5));
        let eq = q.scalar_eq.expect("scalar_eq");
        assert!(eq["y"].is_i64(), "2024.0 is the integer JSON.parse gives");
        assert_eq!(eq.keys().collect::<Vec<_>>(), ["y", "b"], "key order kept");
        assert_eq!(q.fusion_weights.map(|w| w.lexical), Some(2.0));
        assert_eq!(q.return_fields, Some(vec![]));
        // a member given twice is its last value, as JSON.parse reads it
        let twice = query(br#"{"table":"t","tenant_id":"a","table":"u"}"#).expect("reads");
        assert_eq!(twice.table.as_deref(), Some("u"));
    }

    #[test]
    fn leaves_a_query_out_of_shape_to_the_service() {
        for body in [
            "",
            "[]",
            r#"[{"table":"t"}]"#,
            r#"{"table":"t","tenant_id":"a","extra":1}"#,
            r#"{"table":null,"tenant_id":"a"}"#,
            r#"{"table":"t","tenant_id":1}"#,
            r#"{"table":"t","tenant_id":"a","top_k":null}"#,
            r#"{"table":"t","tenant_id":"a","top_k":1.5}"#,
            r#"{"table":"t","tenant_id":"a","top_k":"5"}"#,
            r#"{"table":"t","tenant_id":"a","temporal_as_of":0.5}"#,
            r#"{"table":"t","tenant_id":"a","vector":[1,"2"]}"#,
            r#"{"table":"t","tenant_id":"a","vector":[1,null]}"#,
            r#"{"table":"t","tenant_id":"a","vector":[1e400]}"#,
            r#"{"table":"t","tenant_id":"a","scalar_eq":null}"#,
            r#"{"table":"t","tenant_id":"a","scalar_eq":[]}"#,
            r#"{"table":"t","tenant_id":"a","scalar_eq":{"__proto__":1}}"#,
            r#"{"table":"t","tenant_id":"a","scalar_eq":{"1":1}}"#,
            r#"{"table":"t","tenant_id":"a","explain":1}"#,
            r#"{"table":"t","tenant_id":"a","fusion_weights":{"lexical":null}}"#,
            r#"{"table":"t","tenant_id":"a","fusion_weights":{"other":1}}"#,
            r#"{"table":"t","tenant_id":"a","return_fields":null}"#,
            r#"{"table":"t","tenant_id":"a","return_fields":[1]}"#,
            r#"{"table":"t","tenant_id":"a","text":"\ud800"}"#,
            r#"{"table":"t","tenant_id":"a"} x"#,
        ] {
            assert!(query(body.as_bytes()).is_none(), "{body} must go the service's way");
        }
    }

    #[test]
    fn array_indexes() {
        for key in ["0", "7", "10", "4294967294"] {
            assert!(is_array_index(key), "{key}");
        }
        for key in ["", "01", "-1", "1.5", "4294967295", "99999999999", "a1", "1a"] {
            assert!(!is_array_index(key), "{key}");
        }
    }
}
