//! A record's fields on the write path, from the request to the log and the
//! indexes.
//!
//! Each field is a JSON value, except an array of floating-point numbers (a
//! vector, as one arrives), which is held as its numbers ([`Field::Floats`]):
//! as f32s when every one is exactly an f32 (as vectors sent as f32s are, and
//! as the record encoding and the vector index hold them), else as f64s.
//! As a `serde_json::Value` each number took 72 bytes (with `preserve_order`
//! a `Value` is as large as its largest variant, a map): a put-batch of
//! 2,500 records with 256-d vectors held 46 MB of them, 9 times the numbers'
//! own f64s and 18 times the vector index's f32s, from the body's parse until
//! its commit was applied, and every step (the schema check, the log's
//! encoding, the vector index) read them number by number again.
//!
//! An array is held as floats when it is non-empty and every element is a
//! float as JavaScript holds numbers (not an integer within 2^53: `1.0` is
//! the integer 1), exactly the arrays the record encoding packs
//! (storage/codec.rs: as f32 when every element is exactly an f32, else as
//! f64). So a field encodes to the same bytes, and reads back the same,
//! whichever way it was held.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

/// A record's fields in their written order; a name given twice keeps its
/// first place and its last value, as `JSON.parse` and `serde_json` do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields(Vec<(String, Field)>);

/// One field's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    Value(Value),
    /// A non-empty array of floats (as read back from the log: whatever the
    /// record encoding's f32 or f64 array holds).
    Floats(Floats),
}

/// A non-empty array of floats, as f32s when every one is exactly an f32
/// (half the bytes of a batch's vectors while it is checked, logged and
/// indexed), else as the f64s written. Built only by [`Floats::pack`] (or
/// from f32s), so the f64 form always holds a number no f32 holds, and the
/// record encoding packs each form as it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Floats(Packed);

#[derive(Debug, Clone, PartialEq)]
enum Packed {
    F32(Box<[f32]>),
    F64(Box<[f64]>),
}

/// Whether `f` survives the round trip through f32: the one rule by which
/// floats are held, and encoded, as f32s.
pub fn is_exact_f32(f: f64) -> bool {
    f64::from(f as f32) == f
}

impl Floats {
    /// `xs`, as f32s when every one survives the round trip through f32.
    pub fn pack(xs: Vec<f64>) -> Floats {
        match xs.iter().all(|&f| is_exact_f32(f)) {
            true => Floats(Packed::F32(xs.iter().map(|&f| f as f32).collect())),
            false => Floats(Packed::F64(xs.into_boxed_slice())),
        }
    }

    pub fn from_f32s(xs: Box<[f32]>) -> Floats {
        Floats(Packed::F32(xs))
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Packed::F32(xs) => xs.len(),
            Packed::F64(xs) => xs.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the numbers are held (and encoded) as f32s.
    pub fn is_f32(&self) -> bool {
        matches!(self.0, Packed::F32(_))
    }

    /// The numbers, when they are held as f32s.
    pub fn as_f32s(&self) -> Option<&[f32]> {
        match &self.0 {
            Packed::F32(xs) => Some(xs),
            Packed::F64(_) => None,
        }
    }

    /// The numbers as written.
    pub fn iter(&self) -> impl Iterator<Item = f64> + '_ {
        let (narrow, wide) = match &self.0 {
            Packed::F32(xs) => (&xs[..], &[][..]),
            Packed::F64(xs) => (&[][..], &xs[..]),
        };
        narrow.iter().map(|&x| f64::from(x)).chain(wide.iter().copied())
    }

    /// The numbers as f32s (rounded where they are f64s).
    pub fn to_f32s(&self) -> Vec<f32> {
        match &self.0 {
            Packed::F32(xs) => xs.to_vec(),
            Packed::F64(xs) => xs.iter().map(|&x| x as f32).collect(),
        }
    }
}

/// Collects an array's floats as f32s while each is exactly one, and as
/// f64s from the first that is not.
enum FloatsBuilder {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl FloatsBuilder {
    fn with_capacity(n: usize) -> FloatsBuilder {
        FloatsBuilder::F32(Vec::with_capacity(n))
    }

    fn push(&mut self, f: f64) {
        match self {
            FloatsBuilder::F32(xs) if is_exact_f32(f) => xs.push(f as f32),
            FloatsBuilder::F32(xs) => {
                let mut wide: Vec<f64> = Vec::with_capacity(xs.capacity().max(xs.len() + 1));
                wide.extend(xs.iter().map(|&x| f64::from(x)));
                wide.push(f);
                *self = FloatsBuilder::F64(wide);
            }
            FloatsBuilder::F64(xs) => xs.push(f),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            FloatsBuilder::F32(xs) => xs.is_empty(),
            FloatsBuilder::F64(xs) => xs.is_empty(),
        }
    }

    fn build(self) -> Floats {
        match self {
            FloatsBuilder::F32(xs) => Floats(Packed::F32(xs.into_boxed_slice())),
            FloatsBuilder::F64(xs) => Floats(Packed::F64(xs.into_boxed_slice())),
        }
    }

    fn values(&self) -> Vec<Value> {
        match self {
            FloatsBuilder::F32(xs) => xs.iter().map(|&x| float(f64::from(x))).collect(),
            FloatsBuilder::F64(xs) => xs.iter().map(|&x| float(x)).collect(),
        }
    }
}

/// Whether JavaScript holds `f` as a float, not as an integer within 2^53
/// (wire.rs's `javascript_number`).
fn is_float(f: f64) -> bool {
    !(f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
}

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

fn floats_value(xs: &Floats) -> Value {
    Value::Array(xs.iter().map(float).collect())
}

impl Field {
    /// `value`, as its floats when it is an array of floats.
    pub fn of(value: Value) -> Field {
        let packed = match &value {
            Value::Array(items) if !items.is_empty() => items
                .iter()
                .map(|v| match v {
                    Value::Number(n) if n.is_f64() => n.as_f64().filter(|f| is_float(*f)),
                    _ => None,
                })
                .collect::<Option<Vec<f64>>>(),
            _ => None,
        };
        packed.map_or(Field::Value(value), |xs| Field::Floats(Floats::pack(xs)))
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Field::Value(v) => v.as_str(),
            Field::Floats(_) => None,
        }
    }

    /// The field as a JSON value (built for an array of floats).
    pub fn as_value(&self) -> Cow<'_, Value> {
        match self {
            Field::Value(v) => Cow::Borrowed(v),
            Field::Floats(xs) => Cow::Owned(floats_value(xs)),
        }
    }

    pub fn into_value(self) -> Value {
        match self {
            Field::Value(v) => v,
            f @ Field::Floats(_) => f.as_value().into_owned(),
        }
    }
}

impl Fields {
    pub fn new() -> Fields {
        Fields::default()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Field)> {
        self.0.iter().map(|(name, field)| (name.as_str(), field))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut Field)> {
        self.0.iter_mut().map(|(name, field)| (name.as_str(), field))
    }

    /// The field named `name` (a scan: records have few fields, and the
    /// paths that look many up iterate instead).
    pub fn get(&self, name: &str) -> Option<&Field> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }

    /// Sets the field `name`, in its place if it has one, else last.
    pub fn insert(&mut self, name: String, field: Field) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, held)) => *held = field,
            None => self.0.push((name, field)),
        }
    }

    /// The fields as a JSON object.
    pub fn to_map(&self) -> Map<String, Value> {
        self.0.iter().map(|(name, field)| (name.clone(), field.as_value().into_owned())).collect()
    }

    /// Fields from `(name, field)` pairs in written order, a repeated name
    /// keeping its first place and its last value. Repeats are found by
    /// sorting the positions, so a body of many names costs n log n, not
    /// a scan per name.
    pub(crate) fn from_pairs(mut pairs: Vec<(String, Field)>) -> Fields {
        if pairs.len() > 1 {
            let mut order: Vec<usize> = (0..pairs.len()).collect();
            order.sort_by(|a, b| pairs[*a].0.cmp(&pairs[*b].0).then(a.cmp(b)));
            let mut dropped = vec![false; pairs.len()];
            let mut moves = Vec::new();
            for run in order.chunk_by(|a, b| pairs[*a].0 == pairs[*b].0).filter(|run| run.len() > 1) {
                moves.push((run[0], run[run.len() - 1]));
                run[1..].iter().for_each(|i| dropped[*i] = true);
            }
            for (first, last) in &moves {
                pairs[*first].1 = std::mem::replace(&mut pairs[*last].1, Field::Value(Value::Null));
            }
            if !moves.is_empty() {
                let mut i = 0;
                pairs.retain(|_| {
                    i += 1;
                    !dropped[i - 1]
                });
            }
        }
        Fields(pairs)
    }
}

impl From<Map<String, Value>> for Fields {
    fn from(map: Map<String, Value>) -> Fields {
        Fields(map.into_iter().map(|(name, value)| (name, Field::of(value))).collect())
    }
}

impl From<Fields> for Map<String, Value> {
    fn from(fields: Fields) -> Map<String, Value> {
        fields.0.into_iter().map(|(name, field)| (name, field.into_value())).collect()
    }
}

impl Serialize for Field {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Field::Value(v) => v.serialize(s),
            Field::Floats(xs) => {
                let mut seq = s.serialize_seq(Some(xs.len()))?;
                for x in xs.iter() {
                    seq.serialize_element(&x)?;
                }
                seq.end()
            }
        }
    }
}

impl Serialize for Fields {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, field) in &self.0 {
            map.serialize_entry(name, field)?;
        }
        map.end()
    }
}

/// Reads a JSON object's members as fields, each array of numbers that
/// read straight into floats (no `Value` per number).
impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Fields, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some(name) = map.next_key::<String>()? {
                    pairs.push((name, map.next_value_seed(FieldSeed)?));
                }
                Ok(Fields::from_pairs(pairs))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

struct FieldSeed;

impl<'de> DeserializeSeed<'de> for FieldSeed {
    type Value = Field;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Field, D::Error> {
        Item::deserialize(deserializer).map(Item::into_field)
    }
}

/// A value as read: a float, an array of floats, or any other value.
enum Item {
    Float(f64),
    Floats(Floats),
    Other(Value),
}

impl Item {
    fn into_value(self) -> Value {
        match self {
            Item::Float(f) => float(f),
            Item::Floats(xs) => floats_value(&xs),
            Item::Other(v) => v,
        }
    }

    fn into_field(self) -> Field {
        match self {
            Item::Floats(xs) => Field::Floats(xs),
            other => Field::Value(other.into_value()),
        }
    }
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Item, D::Error> {
        deserializer.deserialize_any(ItemVisitor)
    }
}

struct ItemVisitor;

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Item;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    /// An array's numbers as floats while they are floats; at the first
    /// element that is not, the array as values.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
        let mut xs = FloatsBuilder::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element::<Item>()? {
            match item {
                Item::Float(f) if is_float(f) => xs.push(f),
                other => {
                    let mut items = xs.values();
                    items.push(other.into_value());
                    while let Some(v) = seq.next_element::<Value>()? {
                        items.push(v);
                    }
                    return Ok(Item::Other(Value::Array(items)));
                }
            }
        }
        Ok(match xs.is_empty() {
            true => Item::Other(Value::Array(Vec::new())),
            false => Item::Floats(xs.build()),
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Item, A::Error> {
        Value::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Item::Other)
    }

    fn visit_f64<E>(self, v: f64) -> Result<Item, E> {
        Ok(Item::Float(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Item, E> {
        Ok(Item::Other(Value::from(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Item, E> {
        Ok(Item::Other(Value::from(v)))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Item, E> {
        Ok(Item::Other(Value::Bool(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Item, E> {
        Ok(Item::Other(Value::String(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Item, E> {
        Ok(Item::Other(Value::String(v)))
    }
    fn visit_unit<E>(self) -> Result<Item, E> {
        Ok(Item::Other(Value::Null))
    }
    fn visit_none<E>(self) -> Result<Item, E> {
        Ok(Item::Other(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(text: &str) -> Fields {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn arrays_of_floats_are_held_as_floats_and_nothing_else_is() {
        let fields = read(
            r#"{"v": [0.5, -1.25, 1e-3, 1e300], "ints": [0.5, 1.0], "mixed": [0.5, "a"], "empty": [], "n": 0.5,
                "nested": {"v": [0.5]}, "u": [0.5, 3], "deep": [[0.5]]}"#,
        );
        assert_eq!(fields.get("v"), Some(&Field::Floats(Floats::pack(vec![0.5, -1.25, 1e-3, 1e300]))));
        for name in ["ints", "mixed", "empty", "n", "nested", "u", "deep"] {
            assert!(matches!(fields.get(name), Some(Field::Value(_))), "{name} is held as floats");
        }
        // what the fields hold is the JSON they were read from
        let text = r#"{"a": [0.5, 0.1], "b": [1.5, "x"], "c": {"d": [0.5]}, "e": [0.5, 2], "f": [0.5, 1.0, 0.25]}"#;
        assert_eq!(Value::Object(read(text).into()), serde_json::from_str::<Value>(text).unwrap());
        assert_eq!(serde_json::to_string(&read(text)).unwrap(), serde_json::to_string(&read(text).to_map()).unwrap());
    }

    #[test]
    fn floats_are_held_as_f32s_until_one_is_not_exactly_an_f32() {
        let narrow = read(r#"{"v": [0.5, -1.25, 0.1015625]}"#);
        let Some(Field::Floats(v)) = narrow.get("v") else { panic!("not floats") };
        assert!(v.is_f32());
        assert_eq!(v.iter().collect::<Vec<_>>(), [0.5, -1.25, 0.1015625]);
        // 0.1 is no f32: the numbers before it are widened back, none changes
        for text in [r#"{"v": [0.5, -1.25, 0.1, 2.5]}"#, r#"{"v": [0.1, 0.5]}"#, r#"{"v": [0.5, 1e39]}"#] {
            let wide = read(text);
            let Some(Field::Floats(v)) = wide.get("v") else { panic!("not floats") };
            assert!(!v.is_f32(), "{text}");
            assert_eq!(Value::Object(wide.into()), serde_json::from_str::<Value>(text).unwrap());
        }
        // a map's arrays pack the same way, and an f32 read back is the f64 it widens to
        let mapped = Fields::from(json!({"a": [0.5, 0.25], "b": [0.5, 0.1]}).as_object().unwrap().clone());
        assert!(matches!(mapped.get("a"), Some(Field::Floats(v)) if v.is_f32()));
        assert!(matches!(mapped.get("b"), Some(Field::Floats(v)) if !v.is_f32()));
        assert_eq!(Floats::pack(vec![0.1f32 as f64]).to_f32s(), [0.1f32]);
        assert_eq!(Floats::pack(vec![0.1]).to_f32s(), [0.1f32]);
    }

    #[test]
    fn a_map_holds_floats_as_the_reader_does() {
        let map = json!({"a": [0.5, 0.25], "b": [1.0, 0.5], "c": [0.1], "d": "s"});
        let fields = Fields::from(map.as_object().unwrap().clone());
        assert!(matches!(fields.get("a"), Some(Field::Floats(_))));
        assert!(matches!(fields.get("b"), Some(Field::Value(_))), "1.0 is an integer as JavaScript holds it");
        assert!(matches!(fields.get("c"), Some(Field::Floats(_))));
        assert_eq!(Value::Object(fields.into()), map);
        // an integer past 2^53 is not a float as read, so it is not held as one
        let big = Fields::from(json!({"a": [0.5, 18446744073709551615u64]}).as_object().unwrap().clone());
        assert!(matches!(big.get("a"), Some(Field::Value(_))));
    }

    #[test]
    fn a_repeated_name_keeps_its_first_place_and_last_value() {
        let text = r#"{"a": 1, "b": [0.5], "a": [0.25, 0.5], "c": 3, "b": 2}"#;
        let fields = read(text);
        let names: Vec<&str> = fields.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(Value::Object(fields.into()), serde_json::from_str::<Value>(text).unwrap());
        let many: String = (0..5000).map(|i| format!("\"k{}\": {i},", i % 2500)).collect();
        let fields = read(&format!("{{{many} \"z\": 0}}"));
        assert_eq!(fields.len(), 2501);
        assert_eq!(fields.get("k7").map(|f| f.as_value().into_owned()), Some(json!(2507)));
    }

    #[test]
    fn what_is_not_an_object_is_refused_as_a_map_is() {
        for text in ["null", "[1]", "3", "\"s\""] {
            let ours = serde_json::from_str::<Fields>(text).unwrap_err().to_string();
            let theirs = serde_json::from_str::<Map<String, Value>>(text).unwrap_err().to_string();
            assert_eq!(ours, theirs);
        }
    }
}
