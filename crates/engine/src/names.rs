//! Validation of table names, record ids, tenant ids, branch and snapshot
//! names. Violations are rejected, never silently rewritten.

use crate::bail;
use crate::error::Result;

pub const MAX_KEY_BYTES: usize = 256;

/// `^[A-Za-z_][A-Za-z0-9_]{0,63}$`: tables, columns, branches, snapshots and
/// databases share this shape so they are safe as directory names.
pub fn is_identifier(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > 64 {
        return false;
    }
    let first_ok = bytes[0].is_ascii_alphabetic() || bytes[0] == b'_';
    first_ok && bytes[1..].iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

pub fn check_identifier(what: &str, name: &str) -> Result<()> {
    if !is_identifier(name) {
        bail!(InvalidName, "{what} {name:?} must match ^[A-Za-z_][A-Za-z0-9_]{{0,63}}$");
    }
    Ok(())
}

pub fn check_table(name: &str) -> Result<()> {
    check_identifier("table", name)
}

/// Record ids and tenant ids: 1..=256 bytes of UTF-8 without control characters.
pub fn check_key(what: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.len() > MAX_KEY_BYTES {
        bail!(InvalidName, "{what} must be 1 to {MAX_KEY_BYTES} bytes, got {}", value.len());
    }
    if value.chars().any(char::is_control) {
        bail!(InvalidName, "{what} must not contain control characters");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert!(is_identifier("docs"));
        assert!(is_identifier("_a9"));
        assert!(is_identifier(&"a".repeat(64)));
        assert!(!is_identifier(&"a".repeat(65)));
        assert!(!is_identifier("9a"));
        assert!(!is_identifier("a-b"));
        assert!(!is_identifier(""));
        assert!(!is_identifier("../x"));
    }

    #[test]
    fn keys() {
        assert!(check_key("id", "héllo wörld").is_ok());
        assert!(check_key("id", "").is_err());
        assert!(check_key("id", "a\nb").is_err());
        assert!(check_key("id", &"x".repeat(257)).is_err());
        assert!(check_key("id", &"x".repeat(256)).is_ok());
    }
}
