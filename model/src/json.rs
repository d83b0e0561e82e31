//! JSON as the store keeps it: parsed strictly, written back in one
//! canonical form, compared by PostgreSQL's containment rules.
//!
//! The canonical text of a JSON document is serde_json's compact form of
//! it: no insignificant whitespace, object keys in byte order of their
//! UTF-8 (the last of a repeated key wins), strings with only `"`, `\`
//! and control characters escaped, integers (no fraction, no exponent)
//! as written in decimal, and every other number as the nearest double
//! in its shortest round-trip digits: written out (`1.0`, `1000000000.0`,
//! `0.00001`) when its decimal exponent is from -5 to 15, else in
//! scientific notation (`1e+16`, `1.5e-7`). So `1.0` stays `1.0` and `1e9`
//! becomes `1000000000.0`. Every store returns exactly this text, and the
//! Python and JavaScript fakes produce it too.
//!
//! Beyond what the JSON grammar refuses, the store refuses (as invalid,
//! never as a failure of the backend):
//!
//! - a number too large for a double (`1e400`);
//! - an integer outside the 64-bit range ([`MIN_JSON_INTEGER`] to
//!   [`MAX_JSON_INTEGER`]): it could only be kept rounded, and a value
//!   must read back as written; write it as a string;
//! - a NUL character (`\u0000`) in any string or key: PostgreSQL's
//!   `jsonb` and text cannot hold it, so no backend keeps it;
//! - nesting deeper than [`MAX_JSON_DEPTH`].

use std::fmt;

use serde_json::Value;

use crate::limits::{MAX_JSON_DEPTH, MAX_JSON_INTEGER, MIN_JSON_INTEGER};

/// Why a text is not JSON the store keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not JSON at all, too deep, or a number out of a double's range:
    /// the parser's own description.
    NotJson(String),
    /// An integer outside the 64-bit range, as written (cut to 80
    /// characters).
    Integer(String),
    /// A NUL character in a string or key.
    Nul,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotJson(why) => write!(f, "is not JSON: {why}"),
            Refusal::Integer(text) => write!(
                f,
                "holds the integer {text}, outside the 64-bit range ({MIN_JSON_INTEGER} to \
                 {MAX_JSON_INTEGER}) that every store keeps exactly; write it as a string"
            ),
            Refusal::Nul => write!(
                f,
                "holds a NUL character (\\u0000), which no store can keep; remove it or \
                 encode the text"
            ),
        }
    }
}

/// Parse `text` as JSON the store keeps (see the module documentation).
pub fn parse(text: &str) -> Result<Value, Refusal> {
    // serde_json stops at 128 levels of nesting, which is what
    // MAX_JSON_DEPTH states; the assertion keeps the two together.
    const _: () = assert!(MAX_JSON_DEPTH == 127);
    let value: Value = serde_json::from_str(text).map_err(|e| Refusal::NotJson(e.to_string()))?;
    if let Some(integer) = first_wide_integer(text) {
        return Err(Refusal::Integer(integer.chars().take(80).collect()));
    }
    check_tree(&value)?;
    Ok(value)
}

/// The canonical text of `text` (see the module documentation).
pub fn canonical(text: &str) -> Result<String, Refusal> {
    parse(text).map(|value| value.to_string())
}

/// Refuse a NUL character anywhere in `value`'s strings and keys: for JSON
/// that arrives already parsed (a selector's `contains` from a native
/// caller), where [`parse`] did not run.
pub fn check_tree(value: &Value) -> Result<(), Refusal> {
    match value {
        Value::String(text) if text.contains('\0') => Err(Refusal::Nul),
        Value::Array(items) => items.iter().try_for_each(check_tree),
        Value::Object(map) => map.iter().try_for_each(|(key, item)| {
            if key.contains('\0') {
                return Err(Refusal::Nul);
            }
            check_tree(item)
        }),
        _ => Ok(()),
    }
}

/// The first integer literal of `text` (valid JSON) outside the 64-bit
/// range: serde_json reads such a literal as the nearest double, which
/// would store another number than the one written.
fn first_wide_integer(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // Skip the string: escapes hide quotes, and no number
                // inside one counts.
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' => i += 2,
                        b'"' => {
                            i += 1;
                            break;
                        }
                        _ => i += 1,
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < bytes.len()
                    && (bytes[i].is_ascii_digit()
                        || matches!(bytes[i], b'.' | b'e' | b'E' | b'+' | b'-'))
                {
                    i += 1;
                }
                let token = &text[start..i];
                let integer = !token.contains(['.', 'e', 'E']);
                if integer
                    && token.parse::<i128>().map_or(true, |n| {
                        !(MIN_JSON_INTEGER..=MAX_JSON_INTEGER).contains(&n)
                    })
                {
                    return Some(token);
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// PostgreSQL's `jsonb @> jsonb`: whether `value` contains `query` (see
/// [`crate::Selector`]). At the top level only, an array contains a
/// scalar it has as an element.
pub fn contains(value: &Value, query: &Value) -> bool {
    match (value, query) {
        (
            Value::Array(items),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_),
        ) => items.iter().any(|item| contained(item, query)),
        _ => contained(value, query),
    }
}

/// Containment below the top level: containers of the same type
/// recursively, scalars by equality, nothing across types.
fn contained(value: &Value, query: &Value) -> bool {
    match (value, query) {
        (Value::Object(have), Value::Object(want)) => want
            .iter()
            .all(|(key, wanted)| have.get(key).is_some_and(|had| contained(had, wanted))),
        (Value::Array(have), Value::Array(want)) => want
            .iter()
            .all(|wanted| have.iter().any(|had| contained(had, wanted))),
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => false,
        (Value::Number(a), Value::Number(b)) => same_number(a, b),
        (a, b) => a == b,
    }
}

/// Numbers compare by exact value, as PostgreSQL's `numeric` does (`1`
/// equals `1.0` and `1e0`; `9007199254740993` does not equal
/// `9007199254740992.0`, though both round to the same double).
fn same_number(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    match (integer(a), integer(b)) {
        (Some(a), Some(b)) => a == b,
        (Some(i), None) => b.as_f64().is_some_and(|f| float_is(f, i)),
        (None, Some(i)) => a.as_f64().is_some_and(|f| float_is(f, i)),
        (None, None) => a.as_f64() == b.as_f64(),
    }
}

fn integer(n: &serde_json::Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// Whether the double `f` is exactly the integer `i`.
fn float_is(f: f64, i: i128) -> bool {
    // Every double of magnitude below 2^127 that has no fraction converts
    // to i128 exactly.
    f.is_finite() && f.fract() == 0.0 && f.abs() < 2f64.powi(127) && f as i128 == i
}

/// Whether `value` nests arrays and objects more than `max` deep (a
/// scalar is depth 0). Descends no further than `max + 1`, so a value of
/// any depth is judged without deep recursion.
pub fn exceeds_depth(value: &Value, max: usize) -> bool {
    let children: Box<dyn Iterator<Item = &Value>> = match value {
        Value::Array(items) => Box::new(items.iter()),
        Value::Object(map) => Box::new(map.values()),
        _ => return false,
    };
    if max == 0 {
        return true;
    }
    children
        .into_iter()
        .any(|child| exceeds_depth(child, max - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_kept_as_the_canonical_form_writes_them() {
        for (given, kept) in [
            ("1.0", "1.0"),
            ("1", "1"),
            ("1e9", "1000000000.0"),
            ("1e15", "1000000000000000.0"),
            ("1e16", "1e+16"),
            ("0.00001", "0.00001"),
            ("1e-6", "1e-6"),
            ("-0", "-0.0"),
            ("18446744073709551615", "18446744073709551615"),
            ("-9223372036854775808", "-9223372036854775808"),
            ("123456789012345678901234567890.0", "1.2345678901234568e+29"),
            (" { \"b\" : 1 , \"a\" : [ 2.5 ] } ", "{\"a\":[2.5],\"b\":1}"),
        ] {
            assert_eq!(canonical(given).as_deref(), Ok(kept), "{given}");
        }
    }

    #[test]
    fn wide_integers_nul_and_huge_numbers_are_refused() {
        for wide in [
            "18446744073709551616",
            "-9223372036854775809",
            "[1, {\"a\": 123456789012345678901234567890123}]",
        ] {
            assert!(matches!(parse(wide), Err(Refusal::Integer(_))), "{wide}");
        }
        // Numbers inside strings are text.
        assert!(parse("\"18446744073709551616\"").is_ok());
        assert!(parse("\"\\\"18446744073709551616\"").is_ok());
        for nul in ["\"a\\u0000b\"", "{\"\\u0000\": 1}", "[[\"\\u0000\"]]"] {
            assert_eq!(parse(nul), Err(Refusal::Nul), "{nul}");
        }
        assert!(matches!(parse("1e400"), Err(Refusal::NotJson(_))));
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(&deep(MAX_JSON_DEPTH)).is_ok());
        assert!(matches!(
            parse(&deep(MAX_JSON_DEPTH + 1)),
            Err(Refusal::NotJson(_))
        ));
    }

    #[test]
    fn containment_compares_numbers_exactly() {
        let v = |text: &str| serde_json::from_str::<Value>(text).unwrap();
        assert!(contains(&v("{\"n\":1}"), &v("{\"n\":1.0}")));
        assert!(contains(&v("[1,2]"), &v("2")));
        assert!(contains(&v("[[1,2]]"), &v("[[2]]")));
        assert!(!contains(&v("[[1,2]]"), &v("[2]")));
        assert!(!contains(&v("{\"a\":[1]}"), &v("{\"a\":1}")));
        assert!(!contains(
            &v("{\"n\":9007199254740993}"),
            &v("{\"n\":9007199254740992.0}")
        ));
        assert!(contains(&v("{\"n\":0}"), &v("{\"n\":-0.0}")));
    }
}
