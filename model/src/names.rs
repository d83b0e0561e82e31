//! Syntax of the names users choose: clusters, leases (controllers),
//! holders, object kinds and object names.
//!
//! Kinds, object names, lease and cluster names are DNS labels: 1 to 63
//! characters of `a-z`, `0-9` and `-`, starting and ending with a letter or
//! a digit. Holders are freer (they often embed a host name and a process
//! id) but bounded.

use std::fmt;

pub use crate::limits::{MAX_HOLDER_LEN, MAX_LABEL_LEN};

/// A name broke the syntax rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError {
    /// What the name was for, e.g. "object kind".
    pub what: &'static str,
    /// The offending value (truncated when long).
    pub value: String,
    /// Which rule it broke.
    pub reason: &'static str,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} {:?}: {}", self.what, self.value, self.reason)
    }
}

impl std::error::Error for NameError {}

fn error(what: &'static str, value: &str, reason: &'static str) -> NameError {
    let value: String = value.chars().take(80).collect();
    NameError {
        what,
        value,
        reason,
    }
}

/// Check a DNS-label-like name (kind, object name, lease, cluster).
pub fn check_label(what: &'static str, value: &str) -> Result<(), NameError> {
    if value.is_empty() {
        return Err(error(what, value, "must not be empty"));
    }
    if value.len() > MAX_LABEL_LEN {
        return Err(error(what, value, "must be at most 63 characters"));
    }
    let bytes = value.as_bytes();
    let edge_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !edge_ok(bytes[0]) || !edge_ok(bytes[bytes.len() - 1]) {
        return Err(error(
            what,
            value,
            "must start and end with a lowercase letter or digit",
        ));
    }
    if !bytes.iter().all(|&b| edge_ok(b) || b == b'-') {
        return Err(error(
            what,
            value,
            "may contain only lowercase letters, digits and '-'",
        ));
    }
    Ok(())
}

/// Whether `value` is a DNS label (what [`check_label`] accepts): a label
/// value that names an object must be one.
pub fn is_label(value: &str) -> bool {
    check_label("name", value).is_ok()
}

/// Check a holder identity: 1 to 253 printable ASCII characters without
/// spaces.
pub fn check_holder(value: &str) -> Result<(), NameError> {
    if value.is_empty() {
        return Err(error("holder", value, "must not be empty"));
    }
    if value.len() > MAX_HOLDER_LEN {
        return Err(error("holder", value, "must be at most 253 characters"));
    }
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(error(
            "holder",
            value,
            "may contain only printable ASCII without spaces",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_dns_rules() {
        for ok in ["a", "tasks", "node-1", "0", &"x".repeat(63)] {
            check_label("kind", ok).unwrap();
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"x".repeat(64), "ä"] {
            assert!(check_label("kind", bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn holders_are_bounded_printable() {
        check_holder("host-1:4242").unwrap();
        assert!(check_holder("").is_err());
        assert!(check_holder("a b").is_err());
        assert!(check_holder(&"h".repeat(254)).is_err());
    }

    #[test]
    fn errors_name_the_name_and_the_rule() {
        let error = check_label("object kind", "Tasks").unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid object kind \"Tasks\": must start and end with a lowercase letter or digit"
        );
    }
}
