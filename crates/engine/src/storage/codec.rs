//! The binary encoding of a record's fields in the record files.
//!
//! A record is its fields in their written order; each field is its name and
//! its value, and each value is prefixed with its length so a reader that
//! wants some fields skips the others without decoding them.
//!
//! ```text
//! record : count varint | field*
//! field  : name_len varint | name | value_len varint | value
//! value  : tag u8 | body
//!   0 null | 1 false | 2 true
//!   3 unsigned integer varint | 4 negative integer zigzag varint | 5 f64 le
//!   6 string : len varint | utf-8
//!   7 array  : count varint | value*          (without per-value lengths)
//!   8 object : count varint | (name_len varint | name | value)*
//!   9 f32 array : count varint | f32 le * count
//!  10 f64 array : count varint | f64 le * count
//! ```
//!
//! Arrays of floating-point numbers (vectors) are packed: as f32 when every
//! element survives the round trip through f32 exactly, else as f64. Integer
//! numbers stay integers, so a record reads back exactly as it was written.

use serde_json::{Map, Number, Value};

use crate::fields::{is_exact_f32, Field, Fields, Floats};

use crate::error::{Error, Result};

const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const UINT: u8 = 3;
const NEG_INT: u8 = 4;
const F64: u8 = 5;
const STRING: u8 = 6;
const ARRAY: u8 = 7;
const OBJECT: u8 = 8;
const F32_ARRAY: u8 = 9;
const F64_ARRAY: u8 = 10;

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Appends the encoding of `fields` to `out`.
pub fn encode_fields(fields: &Fields, out: &mut Vec<u8>) {
    put_varint(out, fields.len() as u64);
    let mut value = Vec::new();
    for (name, field) in fields.iter() {
        put_str(out, name);
        value.clear();
        match field {
            Field::Value(v) => encode_value(v, &mut value),
            Field::Floats(xs) => encode_floats(xs, &mut value),
        }
        put_varint(out, value.len() as u64);
        out.extend_from_slice(&value);
    }
}

/// A packed array of floats, as f32 when they are held as f32s (every one
/// exactly an f32): the bytes `encode_value` gives the same numbers held as
/// values.
fn encode_floats(xs: &Floats, out: &mut Vec<u8>) {
    match xs.as_f32s() {
        Some(narrow) => {
            out.push(F32_ARRAY);
            put_varint(out, narrow.len() as u64);
            out.reserve(narrow.len() * 4);
            narrow.iter().for_each(|f| out.extend_from_slice(&f.to_le_bytes()));
        }
        None => {
            out.push(F64_ARRAY);
            put_varint(out, xs.len() as u64);
            out.reserve(xs.len() * 8);
            xs.iter().for_each(|f| out.extend_from_slice(&f.to_le_bytes()));
        }
    }
}

/// How an array of numbers packs, if it does.
fn packing(items: &[Value]) -> Option<u8> {
    if items.is_empty() {
        return None;
    }
    let mut all_f32 = true;
    for item in items {
        let Value::Number(n) = item else { return None };
        if !n.is_f64() {
            return None;
        }
        let f = n.as_f64()?;
        all_f32 &= is_exact_f32(f);
    }
    Some(if all_f32 { F32_ARRAY } else { F64_ARRAY })
}

fn encode_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(NULL),
        Value::Bool(false) => out.push(FALSE),
        Value::Bool(true) => out.push(TRUE),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                out.push(UINT);
                put_varint(out, u);
            } else if let Some(i) = n.as_i64() {
                out.push(NEG_INT);
                put_varint(out, ((i << 1) ^ (i >> 63)) as u64);
            } else {
                out.push(F64);
                out.extend_from_slice(&n.as_f64().unwrap_or(0.0).to_le_bytes());
            }
        }
        Value::String(s) => {
            out.push(STRING);
            put_str(out, s);
        }
        Value::Array(items) => match packing(items) {
            Some(tag) => {
                out.push(tag);
                put_varint(out, items.len() as u64);
                for f in items.iter().filter_map(Value::as_f64) {
                    if tag == F32_ARRAY {
                        out.extend_from_slice(&(f as f32).to_le_bytes());
                    } else {
                        out.extend_from_slice(&f.to_le_bytes());
                    }
                }
            }
            None => {
                out.push(ARRAY);
                put_varint(out, items.len() as u64);
                for item in items {
                    encode_value(item, out);
                }
            }
        },
        Value::Object(map) => {
            out.push(OBJECT);
            put_varint(out, map.len() as u64);
            for (name, item) in map {
                put_str(out, name);
                encode_value(item, out);
            }
        }
    }
}

/// A cursor over encoded bytes; every read is bounds-checked, so damaged
/// bytes give an error, never a panic.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

fn damaged(what: &str) -> Error {
    Error::storage(format!("damaged record encoding: {what}"))
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// How many bytes have been read.
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    /// Whether every byte has been read.
    pub(crate) fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len()).ok_or_else(|| damaged("truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    pub(crate) fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(damaged("varint too long"))
    }

    pub(crate) fn len(&mut self) -> Result<usize> {
        let n = self.varint()?;
        // a length can never exceed the bytes left; checking here keeps a
        // damaged count from allocating
        usize::try_from(n).ok().filter(|n| *n <= self.bytes.len() - self.at).ok_or_else(|| damaged("length"))
    }

    pub(crate) fn str(&mut self) -> Result<&'a str> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).map_err(|_| damaged("utf-8"))
    }

    fn value(&mut self, depth: u32) -> Result<Value> {
        if depth > 512 {
            return Err(damaged("nesting too deep"));
        }
        Ok(match self.byte()? {
            NULL => Value::Null,
            FALSE => Value::Bool(false),
            TRUE => Value::Bool(true),
            UINT => Value::from(self.varint()?),
            NEG_INT => {
                let z = self.varint()?;
                Value::from(((z >> 1) as i64) ^ -((z & 1) as i64))
            }
            F64 => float(f64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"))),
            STRING => Value::String(self.str()?.to_string()),
            ARRAY => {
                let n = self.len()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Value::Array(items)
            }
            OBJECT => {
                let n = self.len()?;
                let mut map = Map::with_capacity(n);
                for _ in 0..n {
                    let name = self.str()?.to_string();
                    map.insert(name, self.value(depth + 1)?);
                }
                Value::Object(map)
            }
            F32_ARRAY => {
                let n = self.len()?;
                let raw = self.take(n.checked_mul(4).ok_or_else(|| damaged("length"))?)?;
                Value::Array(
                    raw.chunks_exact(4).map(|c| float(f32::from_le_bytes(c.try_into().unwrap()) as f64)).collect(),
                )
            }
            F64_ARRAY => {
                let n = self.len()?;
                let raw = self.take(n.checked_mul(8).ok_or_else(|| damaged("length"))?)?;
                Value::Array(raw.chunks_exact(8).map(|c| float(f64::from_le_bytes(c.try_into().unwrap()))).collect())
            }
            tag => return Err(damaged(&format!("unknown tag {tag}"))),
        })
    }
}

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// Decodes a record's fields; with `only`, just the named ones (the others
/// are skipped without decoding).
pub fn decode_fields(bytes: &[u8], only: Option<&[String]>) -> Result<Map<String, Value>> {
    let mut r = Reader { bytes, at: 0 };
    let count = r.len()?;
    let mut out = Map::with_capacity(only.map_or(count, |o| o.len().min(count)));
    for _ in 0..count {
        let name = r.str()?;
        let len = r.len()?;
        let wanted = only.is_none_or(|names| names.iter().any(|n| n == name));
        let body = r.take(len)?;
        if wanted {
            let mut inner = Reader { bytes: body, at: 0 };
            let value = inner.value(0)?;
            if inner.at != body.len() {
                return Err(damaged("trailing bytes in a value"));
            }
            out.insert(name.to_string(), value);
        }
    }
    Ok(out)
}

/// Decodes a record's fields as a write holds them ([`Fields`]): a packed
/// array as its floats, so a replayed commit's vectors are never values.
pub fn decode_write_fields(bytes: &[u8]) -> Result<Fields> {
    let mut r = Reader { bytes, at: 0 };
    let count = r.len()?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let name = r.str()?.to_string();
        let len = r.len()?;
        let mut inner = Reader { bytes: r.take(len)?, at: 0 };
        let field = match inner.bytes.first() {
            Some(&tag @ (F32_ARRAY | F64_ARRAY)) => {
                inner.at = 1;
                let n = inner.len()?;
                let width = if tag == F32_ARRAY { 4 } else { 8 };
                let raw = inner.take(n.checked_mul(width).ok_or_else(|| damaged("length"))?)?;
                let floats = match tag {
                    F32_ARRAY => Floats::from_f32s(
                        raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
                    ),
                    _ => Floats::pack(raw.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()),
                };
                match floats.is_empty() {
                    true => Field::Value(Value::Array(Vec::new())),
                    false => Field::Floats(floats),
                }
            }
            _ => Field::Value(inner.value(0)?),
        };
        if !inner.is_done() {
            return Err(damaged("trailing bytes in a value"));
        }
        out.push((name, field));
    }
    Ok(Fields::from_pairs(out))
}

/// Decodes one field, or None when the record does not have it.
pub fn decode_field(bytes: &[u8], name: &str) -> Result<Option<Value>> {
    let mut r = Reader { bytes, at: 0 };
    let count = r.len()?;
    for _ in 0..count {
        let this = r.str()?;
        let len = r.len()?;
        let body = r.take(len)?;
        if this == name {
            return Reader { bytes: body, at: 0 }.value(0).map(Some);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(v: Value) -> Value {
        let mut out = Vec::new();
        encode_fields(&Fields::from(v.as_object().unwrap().clone()), &mut out);
        Value::Object(decode_fields(&out, None).unwrap())
    }

    #[test]
    fn every_kind_of_value_reads_back_exactly() {
        let v = json!({
            "s": "héllo \u{0} <b>", "n": null, "t": true, "f": false,
            "u": 18446744073709551615u64, "i": -9223372036854775808i64, "small": -3, "zero": 0,
            "x": 0.1, "big": 1e300, "ints": [1, 2, 3], "mixed": [1, "a", null, [2.5]],
            "v32": [0.5, -1.25, 3.0], "v64": [0.1, 0.2], "empty": [], "o": {"a": {"b": [true]}},
        });
        let back = round_trip(v.clone());
        assert_eq!(back, v);
        assert_eq!(serde_json::to_string(&back).unwrap(), serde_json::to_string(&v).unwrap());
    }

    #[test]
    fn vectors_pack_as_f32_when_exact() {
        let mut out = Vec::new();
        let vector: Vec<Value> = (0..256).map(|i| Value::from(i as f32 as f64 / 256.0 + 0.5)).collect();
        let mut map = Map::new();
        map.insert("v".into(), Value::Array(vector));
        encode_fields(&Fields::from(map), &mut out);
        assert!(out.len() < 256 * 4 + 16, "{} bytes", out.len());
    }

    #[test]
    fn floats_encode_as_their_values_do_and_read_back_as_floats() {
        for v in [
            json!({"a": [0.5, 0.25]}),
            json!({"a": [0.1, 0.2]}),
            json!({"a": [0.5, 1e300]}),
            json!({"a": [3.5, -1e-4]}),
        ] {
            let map = v.as_object().unwrap().clone();
            let fields = Fields::from(map.clone());
            assert!(matches!(fields.get("a"), Some(Field::Floats(_))));
            let (mut held, mut as_values) = (Vec::new(), Vec::new());
            encode_fields(&fields, &mut held);
            encode_fields(&Fields::from_pairs(vec![("a".into(), Field::Value(map["a"].clone()))]), &mut as_values);
            assert_eq!(held, as_values, "{v}");
            assert_eq!(decode_write_fields(&held).unwrap(), fields);
            assert_eq!(Value::Object(decode_fields(&held, None).unwrap()), v);
        }
    }

    /// JSON text for a field value: numbers written every way JSON allows
    /// (integers, `1.0`, `-0.0`, exponents, past f32's range), arrays of
    /// them alone and mixed, nested values.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let number = prop_oneof![
            any::<i32>().prop_map(|i| i.to_string()),
            any::<f32>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:?}")),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:e}")),
            (0u8..3).prop_map(|i| ["1.0", "-0.0", "0.5e1"][i as usize].to_string()),
            any::<u64>().prop_map(|u| u.to_string()),
        ];
        let leaf =
            prop_oneof![number.clone(), Just("null".to_string()), Just("\"s\"".to_string()), Just("true".to_string())];
        let floats = proptest::collection::vec(number, 0..6).prop_map(|xs| format!("[{}]", xs.join(",")));
        // vectors as they come: exactly f32s (written as the f64s they widen to), or 9 significant digits
        let vector = proptest::collection::vec(any::<f32>().prop_filter("finite", |f| f.is_finite()), 1..6)
            .prop_flat_map(|xs| {
                (Just(xs), any::<bool>()).prop_map(|(xs, decimal)| {
                    let text: Vec<String> = xs
                        .iter()
                        .map(|x| if decimal { format!("{x:.8e}") } else { format!("{:?}", f64::from(*x)) })
                        .collect();
                    format!("[{}]", text.join(","))
                })
            });
        let scalar = prop_oneof![leaf, floats, vector];
        scalar.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(|xs| format!("[{}]", xs.join(","))),
                proptest::collection::vec(("[a-c]", inner), 0..4).prop_map(|kv| format!(
                    "{{{}}}",
                    kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect::<Vec<_>>().join(",")
                )),
            ]
        })
    }

    proptest::proptest! {
        /// Fields read from JSON hold the values a `Map` reads, and encode to
        /// the bytes those values encode to, and read back from the log as
        /// the record files read them.
        #[test]
        fn fields_read_and_encode_as_values_do(
            members in proptest::collection::vec(("[a-d]", json_text()), 0..6)
        ) {
            let text = format!("{{{}}}", members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect::<Vec<_>>().join(","));
            let map: Map<String, Value> = serde_json::from_str(&text).unwrap();
            let fields: Fields = serde_json::from_str(&text).unwrap();
            proptest::prop_assert_eq!(&fields.to_map(), &map, "{}", text);
            let as_values = Fields::from_pairs(map.clone().into_iter().map(|(k, v)| (k, Field::Value(v))).collect());
            let (mut a, mut b) = (Vec::new(), Vec::new());
            encode_fields(&fields, &mut a);
            encode_fields(&as_values, &mut b);
            proptest::prop_assert_eq!(&a, &b, "{}", text);
            proptest::prop_assert_eq!(decode_write_fields(&a).unwrap().to_map(), decode_fields(&a, None).unwrap());
            proptest::prop_assert_eq!(&Fields::from(map.clone()).to_map(), &map);
        }
    }

    #[test]
    fn only_the_named_fields_are_decoded() {
        let v = json!({"a": 1, "b": "two", "c": [0.5]});
        let mut out = Vec::new();
        encode_fields(&Fields::from(v.as_object().unwrap().clone()), &mut out);
        let some = decode_fields(&out, Some(&["c".to_string(), "zz".to_string()])).unwrap();
        assert_eq!(Value::Object(some), json!({"c": [0.5]}));
        assert_eq!(decode_field(&out, "b").unwrap(), Some(json!("two")));
        assert_eq!(decode_field(&out, "d").unwrap(), None);
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let v = json!({"a": [1, {"b": "x"}], "c": [0.5, 0.25]});
        let mut out = Vec::new();
        encode_fields(&Fields::from(v.as_object().unwrap().clone()), &mut out);
        for cut in 0..out.len() {
            let _ = decode_fields(&out[..cut], None);
        }
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 0xff;
            let _ = decode_fields(&bad, None);
        }
        assert!(decode_fields(&[0xff; 12], None).is_err());
    }
}
