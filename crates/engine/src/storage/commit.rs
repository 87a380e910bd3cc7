//! What one WAL frame holds: a committed write request (one epoch), or a
//! receipt on its own. The idempotency receipt travels in the same frame as
//! the rows it answers for, so a crash keeps both or neither.

use std::ops::Range;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::fields::Fields;
use crate::schema::TableSchema;
use crate::storage::codec::{self, put_str, put_varint, Reader};

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

/// Where each row's fields are in an encoded commit: byte ranges in row
/// order, each in the record files' encoding (storage/codec.rs).
pub type FieldSpans = Vec<Range<usize>>;

/// A commit's rows' fields as its frame holds them: the encoded commit (or
/// any buffer holding it) and where each row's fields are in it.
#[derive(Clone, Copy)]
pub struct EncodedRows<'a> {
    pub bytes: &'a [u8],
    pub spans: &'a [Range<usize>],
}

impl<'a> EncodedRows<'a> {
    /// Each row's encoded fields, in row order.
    pub fn fields(self) -> impl Iterator<Item = &'a [u8]> {
        self.spans.iter().map(move |span| &self.bytes[span.clone()])
    }
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
    pub fields: Fields,
}

/// A stored idempotency receipt: the first successful response to a keyed
/// request. `key` is already scoped by method and path.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Receipt {
    pub key: String,
    pub body_hash: String,
    pub status: u16,
    /// The response as its JSON text. Held as a `Value`, a query's answer
    /// (many small objects) took about eight times its text's bytes in
    /// memory, for the receipt's whole retention (found by a black-box
    /// review: 200 keyed queries of 612 KB answers held 600 MB).
    pub body: Box<RawValue>,
    pub created_ms: u64,
}

impl Receipt {
    /// The bytes the receipt holds: its key, body hash and response.
    pub fn bytes(&self) -> u64 {
        (self.key.len() + self.body_hash.len() + self.body.get().len()) as u64
    }

    /// The response, parsed.
    pub fn body_value(&self) -> Value {
        serde_json::from_str(self.body.get()).expect("a receipt's body is JSON")
    }
}

impl PartialEq for Receipt {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.body_hash == other.body_hash
            && self.status == other.status
            && self.body.get() == other.body.get()
            && self.created_ms == other.created_ms
    }
}

/// `value` as JSON text.
pub fn raw_json(value: &Value) -> Box<RawValue> {
    RawValue::from_string(serde_json::to_string(value).expect("values serialise")).expect("serde_json prints JSON")
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
    /// What to store instead of `body` once the branch's receipts hold
    /// [`crate::storage::BranchConfig::receipt_memory_bytes`]: a keyed
    /// read's digest of its answer (src/idempotency/index.ts). A draft
    /// without one is stored whole.
    #[serde(default)]
    pub digest: Option<Box<Value>>,
}

impl ReceiptDraft {
    pub fn empty() -> ReceiptDraft {
        ReceiptDraft { key: String::new(), body_hash: String::new(), status: 0, body: Value::Null, digest: None }
    }
}

/// The first byte of a binary commit frame. Frames written before the
/// binary encoding hold a commit's JSON, whose first byte is `{`.
const BINARY: u8 = 0xC1;

/// How a commit is laid out in a WAL frame (docs/storage.md):
///
/// ```text
/// commit : 0xC1 | epoch varint | at_ms varint
///          | schemas_len varint | schemas JSON       (0 when none)
///          | receipt_len varint | receipt JSON       (0 when none)
///          | row_count varint | row*
/// row    : table str | tenant str | id str | version_id varint | deleted u8
///          | fields_len varint | fields             (the record files' encoding, storage/codec.rs)
/// str    : len varint | utf-8
/// ```
///
/// Fields (vectors above all) are the bulk of a frame, so they are kept in the
/// same binary encoding as the record files: a vector is 4 bytes a number,
/// copied, not printed and parsed. The record files take each row's field
/// bytes from the frame as they are ([`FieldSpans`]), so a write encodes them
/// once. Schemas and receipts are rare and small and stay JSON.
impl Commit {
    /// Appends the commit's frame payload to `out` and returns where each
    /// row's fields are in `out`.
    pub fn encode(&self, out: &mut Vec<u8>) -> FieldSpans {
        out.push(BINARY);
        put_varint(out, self.epoch);
        put_varint(out, self.at_ms);
        let json_part = |out: &mut Vec<u8>, bytes: Option<Vec<u8>>| {
            let bytes = bytes.unwrap_or_default();
            put_varint(out, bytes.len() as u64);
            out.extend_from_slice(&bytes);
        };
        let schemas = (!self.schemas.is_empty()).then(|| serde_json::to_vec(&self.schemas).expect("schemas serialise"));
        json_part(out, schemas);
        let receipt = self.receipt.as_ref().map(|r| serde_json::to_vec(r).expect("receipts serialise"));
        json_part(out, receipt);
        put_varint(out, self.rows.len() as u64);
        let mut fields = Vec::new();
        let mut spans = Vec::with_capacity(self.rows.len());
        for row in &self.rows {
            put_str(out, &row.table);
            put_str(out, &row.tenant_id);
            put_str(out, &row.id);
            put_varint(out, u64::from(row.version_id));
            out.push(u8::from(row.deleted));
            fields.clear();
            codec::encode_fields(&row.fields, &mut fields);
            put_varint(out, fields.len() as u64);
            let at = out.len();
            out.extend_from_slice(&fields);
            spans.push(at..out.len());
        }
        spans
    }

    /// Reads a commit from a WAL frame, in either encoding.
    pub fn decode(bytes: &[u8]) -> Result<Commit> {
        Commit::decode_spans(bytes).map(|(commit, _)| commit)
    }

    /// [`Commit::decode`], with where each row's fields are in `bytes`
    /// (none for a frame of JSON, written before the binary encoding).
    pub fn decode_spans(bytes: &[u8]) -> Result<(Commit, Option<FieldSpans>)> {
        fn json_part<'a>(r: &mut Reader<'a>) -> Result<Option<&'a [u8]>> {
            let n = r.len()?;
            if n == 0 {
                return Ok(None);
            }
            r.take(n).map(Some)
        }
        if bytes.first() != Some(&BINARY) {
            let commit = serde_json::from_slice(bytes).map_err(|e| Error::storage(e.to_string()))?;
            return Ok((commit, None));
        }
        let mut r = Reader::new(&bytes[1..]);
        let epoch = r.varint()?;
        let at_ms = r.varint()?;
        let schemas = match json_part(&mut r)? {
            Some(b) => serde_json::from_slice(b).map_err(|e| Error::storage(format!("commit schemas: {e}")))?,
            None => Vec::new(),
        };
        let receipt = match json_part(&mut r)? {
            Some(b) => Some(serde_json::from_slice(b).map_err(|e| Error::storage(format!("commit receipt: {e}")))?),
            None => None,
        };
        let count = r.len()?;
        let mut rows = Vec::with_capacity(count);
        let mut spans = Vec::with_capacity(count);
        for _ in 0..count {
            let table = r.str()?.to_string();
            let tenant_id = r.str()?.to_string();
            let id = r.str()?.to_string();
            let version_id =
                u32::try_from(r.varint()?).map_err(|_| Error::storage("commit: version id out of range"))?;
            let deleted = match r.byte()? {
                0 => false,
                1 => true,
                b => return Err(Error::storage(format!("commit: deleted flag {b}"))),
            };
            let n = r.len()?;
            // past the marker byte the reader does not see
            let at = 1 + r.position();
            let fields = codec::decode_write_fields(r.take(n)?)?;
            spans.push(at..at + n);
            rows.push(WalRow { table, tenant_id, id, version_id, deleted, fields });
        }
        if !r.is_done() {
            return Err(Error::storage("commit: trailing bytes"));
        }
        Ok((Commit { epoch, at_ms, schemas, rows, receipt }, Some(spans)))
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Commit {
        serde_json::from_value(json!({
            "epoch": 42, "at_ms": 1_700_000_000_000u64,
            "schemas": [{"name": "docs", "columns": {"title": {"type": "string", "text": true, "scalar": true}}}],
            "rows": [
                {"table": "docs", "tenant_id": "acme", "id": "a", "version_id": 3,
                 "fields": {"title": "héllo", "emb": [0.1, -2.5, 1e-40], "n": -7, "o": {"k": [1, "x", null]}}},
                {"table": "docs", "tenant_id": "acme", "id": "b", "version_id": 9, "deleted": true, "fields": {}},
            ],
            "receipt": {"key": "POST /v1/records/put k", "body_hash": "h", "status": 200, "body": {"epoch": 42}, "created_ms": 5},
        }))
        .unwrap()
    }

    fn as_json(c: &Commit) -> Value {
        serde_json::to_value(c).unwrap()
    }

    #[test]
    fn binary_commits_read_back_exactly() {
        let commit = sample();
        let mut bytes = Vec::new();
        commit.encode(&mut bytes);
        assert_eq!(bytes[0], BINARY);
        assert_eq!(as_json(&Commit::decode(&bytes).unwrap()), as_json(&commit));
        let bare = Commit { epoch: 1, at_ms: 0, schemas: Vec::new(), rows: Vec::new(), receipt: None };
        bytes.clear();
        bare.encode(&mut bytes);
        assert_eq!(as_json(&Commit::decode(&bytes).unwrap()), as_json(&bare));
    }

    #[test]
    fn field_spans_point_at_each_rows_fields() {
        let commit = sample();
        let mut bytes = b"before".to_vec();
        let spans = commit.encode(&mut bytes);
        let payload = &bytes[6..];
        let (decoded, read) = Commit::decode_spans(payload).unwrap();
        let read = read.expect("a binary commit has spans");
        assert_eq!(spans.len(), 2);
        for ((row, written), read) in decoded.rows.iter().zip(&spans).zip(&read) {
            let mut expected = Vec::new();
            codec::encode_fields(&row.fields, &mut expected);
            assert_eq!(&bytes[written.clone()], &expected[..]);
            assert_eq!(&payload[read.clone()], &expected[..]);
        }
        let json = serde_json::to_vec(&commit).unwrap();
        assert!(Commit::decode_spans(&json).unwrap().1.is_none());
    }

    #[test]
    fn json_commits_from_older_logs_still_read() {
        let commit = sample();
        let bytes = serde_json::to_vec(&commit).unwrap();
        assert_eq!(as_json(&Commit::decode(&bytes).unwrap()), as_json(&commit));
    }

    #[test]
    fn damaged_binary_commits_are_errors_not_panics() {
        let mut bytes = Vec::new();
        sample().encode(&mut bytes);
        for cut in 1..bytes.len() {
            assert!(Commit::decode(&bytes[..cut]).is_err(), "a commit cut at {cut} read as whole");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Commit::decode(&longer).is_err());
        for i in 1..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0xff;
            let _ = Commit::decode(&flipped);
        }
    }
}
