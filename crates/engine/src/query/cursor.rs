//! Paging cursors: opaque, signed, and pinned to a read epoch.
//!
//! Format: `base64url(json payload) "." base64url(hmac-sha256(payload)[..16])`
//! with a per-data-directory secret, so a cursor survives restarts but cannot
//! be forged or edited. The payload pins the branch, the read epoch, the
//! query's fingerprint and the position (offset plus the last row's score
//! and id, used to seek when the ranked list has to be recomputed), and what
//! the first page ranked with beyond the epoch: the indexes' watermarks and
//! the BM25 statistics. A recomputed list is then the first page's list, even
//! when writes or the indexer moved on between pages.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::bail;
use crate::error::Result;

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CursorPayload {
    pub v: u8,
    /// Branch the cursor belongs to (`database/branch`).
    pub b: String,
    /// Pinned read epoch.
    pub e: u64,
    /// Offset of the next row in the ranked list.
    pub o: usize,
    /// Score and record id of the last row returned.
    pub s: f64,
    pub id: String,
    /// Fingerprint of the query (everything but cursor and explain).
    pub h: String,
    /// Issue time, ms since the Unix epoch.
    pub t: u64,
    /// Text and vector index watermarks of the first page (absent in
    /// cursors issued before they were pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w: Option<(u32, u32)>,
    /// The first page's BM25 statistics: documents, tokens and each query
    /// term's document frequency, in the query's term order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bm: Option<(u64, u64, Vec<u64>)>,
}

pub fn encode(secret: &[u8], payload: &CursorPayload) -> String {
    let body = serde_json::to_vec(payload).expect("cursor payload serialises");
    let mut mac = HmacSha256::new_from_slice(secret).expect("hmac takes any key length");
    mac.update(&body);
    let tag = mac.finalize().into_bytes();
    format!("{}.{}", URL_SAFE_NO_PAD.encode(&body), URL_SAFE_NO_PAD.encode(&tag[..16]))
}

pub fn decode(secret: &[u8], cursor: &str) -> Result<CursorPayload> {
    let Some((body, tag)) = cursor.split_once('.') else { bail!(InvalidCursor, "cursor is malformed") };
    let (Ok(body), Ok(tag)) = (URL_SAFE_NO_PAD.decode(body), URL_SAFE_NO_PAD.decode(tag)) else {
        bail!(InvalidCursor, "cursor is malformed")
    };
    let mut mac = HmacSha256::new_from_slice(secret).expect("hmac takes any key length");
    mac.update(&body);
    if tag.len() != 16 || mac.verify_truncated_left(&tag).is_err() {
        bail!(InvalidCursor, "cursor signature does not match: it was altered or issued by another server");
    }
    let Ok(payload) = serde_json::from_slice::<CursorPayload>(&body) else {
        bail!(InvalidCursor, "cursor is malformed")
    };
    if payload.v != 1 {
        bail!(InvalidCursor, "cursor version {} is not supported", payload.v);
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    fn sample() -> CursorPayload {
        CursorPayload {
            v: 1,
            b: "default/main".into(),
            e: 7,
            o: 10,
            s: 0.5,
            id: "a".into(),
            h: "f".into(),
            t: 1,
            w: Some((5, 4)),
            bm: Some((3, 12, vec![1, 0])),
        }
    }

    #[test]
    fn round_trip_and_tamper() {
        let c = encode(b"k1", &sample());
        assert_eq!(decode(b"k1", &c).unwrap(), sample());
        assert_eq!(decode(b"k2", &c).unwrap_err().code, Code::InvalidCursor);
        let (body, tag) = c.split_once('.').unwrap();
        let mut forged = sample();
        forged.e = 8;
        let forged_body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        assert_eq!(decode(b"k1", &format!("{forged_body}.{tag}")).unwrap_err().code, Code::InvalidCursor);
        assert_eq!(decode(b"k1", body).unwrap_err().code, Code::InvalidCursor);
        assert_eq!(decode(b"k1", "!!.??").unwrap_err().code, Code::InvalidCursor);
    }
}
