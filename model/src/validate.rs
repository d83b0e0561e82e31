//! The input rules every backend applies before it touches state: names,
//! JSON values, metadata, sizes, counts and selectors.
//!
//! Kept in one place so a request is refused with the same error whichever
//! backend serves it. Must never: look at stored state (preconditions are
//! [`crate::plan`]'s concern).

use crate::json::{self, Refusal};
use crate::limits::{
    Bounds, DEFAULT_PAGE_SIZE, MAX_FINALIZER_BYTES, MAX_FINALIZERS, MAX_LABEL_KEY_BYTES,
    MAX_LABEL_VALUE_BYTES, MAX_LABELS, MAX_PAGE_SIZE, MAX_SELECTOR_CONTAINS_BYTES,
    MAX_SELECTOR_CONTAINS_DEPTH, MAX_SELECTOR_LABELS,
};
use crate::names::check_label;
use crate::{Error, Metadata, NewEvent, ObjectKey, Selector};

/// Kinds and object names are DNS labels (see [`crate::names`]): they are
/// also URL path segments and must sort the same way in every backend.
pub fn check_key(key: &ObjectKey) -> Result<(), Error> {
    check_label("object kind", &key.kind)?;
    check_label("object name", &key.name)?;
    Ok(())
}

/// Parse `value` as JSON the store keeps and return its canonical text
/// ([`json::canonical`]), which is what every backend stores, so they
/// return identical text.
///
/// The size bound applies to the text given (it bounds the parsing work)
/// and to the text stored (canonicalizing can lengthen a number such as
/// `1e9`).
pub fn normalize_value(bounds: &Bounds, key: &ObjectKey, value: &str) -> Result<String, Error> {
    normalize_json(bounds, key, "value", value)
}

/// A status is JSON under the same rules and bound as a value.
pub fn normalize_status(bounds: &Bounds, key: &ObjectKey, status: &str) -> Result<String, Error> {
    normalize_json(bounds, key, "status", status)
}

fn normalize_json(
    bounds: &Bounds,
    key: &ObjectKey,
    part: &str,
    value: &str,
) -> Result<String, Error> {
    let max = bounds.max_value_bytes;
    if value.len() > max {
        return Err(Error::TooLarge(format!(
            "the {part} of {key} is {} bytes; the limit is {max}",
            value.len()
        )));
    }
    let text = json::canonical(value)
        .map_err(|refusal| Error::Invalid(format!("the {part} of {key} {refusal}")))?;
    if text.len() > max {
        return Err(Error::TooLarge(format!(
            "the {part} of {key} is {} bytes once normalized; the limit is {max}",
            text.len()
        )));
    }
    Ok(text)
}

/// Label keys and finalizers: 1 to `max` bytes of ASCII letters, digits,
/// `-`, `_`, `.` and `/`, beginning and ending with a letter or digit
/// (`app`, `example.com/cleanup`).
fn qualified(text: &str, max: usize) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= max
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
}

/// A label key named outside an object (a related watch's label): the
/// syntax of [`check_metadata`]'s label keys.
pub fn check_label_key(key: &str) -> Result<(), String> {
    if qualified(key, MAX_LABEL_KEY_BYTES) {
        Ok(())
    } else {
        Err(format!(
            "label key {:?} must be 1 to {MAX_LABEL_KEY_BYTES} ASCII letters, digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
            shown(key)
        ))
    }
}

/// Label values: empty, or up to [`MAX_LABEL_VALUE_BYTES`] of ASCII
/// letters, digits, `-`, `_` and `.`, beginning and ending with a letter or
/// digit.
fn label_value(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.is_empty()
        || (bytes.len() <= MAX_LABEL_VALUE_BYTES
            && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

/// Text quoted into an error, cut short so a huge input stays out of it.
fn shown(text: &str) -> String {
    text.chars().take(80).collect::<String>()
}

/// The metadata of `key`: at most [`MAX_LABELS`] labels and
/// [`MAX_FINALIZERS`] distinct finalizers of the allowed syntax, and an
/// owner that is a well-formed key other than the object itself.
pub fn check_metadata(key: &ObjectKey, meta: &Metadata) -> Result<(), Error> {
    if meta.labels.len() > MAX_LABELS {
        return Err(Error::TooLarge(format!(
            "{key} has {} labels; the limit is {MAX_LABELS}",
            meta.labels.len()
        )));
    }
    for (name, value) in &meta.labels {
        if !qualified(name, MAX_LABEL_KEY_BYTES) {
            return Err(Error::Invalid(format!(
                "label key {:?} of {key} must be 1 to {MAX_LABEL_KEY_BYTES} ASCII letters, digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
                shown(name)
            )));
        }
        if !label_value(value) {
            return Err(Error::Invalid(format!(
                "label {name} of {key} has value {:?}; a label value is empty or 1 to {MAX_LABEL_VALUE_BYTES} ASCII letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",
                shown(value)
            )));
        }
    }
    if meta.finalizers.len() > MAX_FINALIZERS {
        return Err(Error::TooLarge(format!(
            "{key} has {} finalizers; the limit is {MAX_FINALIZERS}",
            meta.finalizers.len()
        )));
    }
    for (i, finalizer) in meta.finalizers.iter().enumerate() {
        if !qualified(finalizer, MAX_FINALIZER_BYTES) {
            return Err(Error::Invalid(format!(
                "finalizer {:?} of {key} must be 1 to {MAX_FINALIZER_BYTES} ASCII letters, digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
                shown(finalizer)
            )));
        }
        if meta.finalizers[..i].contains(finalizer) {
            return Err(Error::Invalid(format!(
                "finalizer {finalizer} of {key} is listed twice"
            )));
        }
    }
    if let Some(owner) = &meta.owner {
        check_label("owner kind", &owner.kind)?;
        check_label("owner name", &owner.name)?;
        if owner == key {
            return Err(Error::Invalid(format!("{key} cannot own itself")));
        }
    }
    Ok(())
}

/// Counts of one commit: something to do, and not more than the bounds.
pub fn check_counts(bounds: &Bounds, ops: usize, events: usize) -> Result<(), Error> {
    if ops > bounds.max_ops_per_commit {
        return Err(Error::TooLarge(format!(
            "a commit has {ops} operations; the limit is {}",
            bounds.max_ops_per_commit
        )));
    }
    if events > bounds.max_events_per_commit {
        return Err(Error::TooLarge(format!(
            "a commit has {events} events; the limit is {}",
            bounds.max_events_per_commit
        )));
    }
    if ops == 0 && events == 0 {
        return Err(Error::Invalid(
            "a commit needs at least one operation or event".into(),
        ));
    }
    Ok(())
}

/// An event names a well-formed object, has a PascalCase reason (a
/// machine-readable word such as `Assigned`) and a bounded message without
/// NUL (no store can keep it).
pub fn check_event(bounds: &Bounds, event: &NewEvent) -> Result<(), Error> {
    check_key(&event.key)?;
    let key = &event.key;
    let reason = &event.reason;
    if reason.len() > bounds.max_event_reason_bytes {
        return Err(Error::TooLarge(format!(
            "the reason of an event about {key} is {} bytes; the limit is {}",
            reason.len(),
            bounds.max_event_reason_bytes
        )));
    }
    let pascal = reason
        .as_bytes()
        .first()
        .is_some_and(u8::is_ascii_uppercase)
        && reason.bytes().all(|b| b.is_ascii_alphanumeric());
    if !pascal {
        return Err(Error::Invalid(format!(
            "the reason {:?} of an event about {key} must be a PascalCase word (A-Z first, then letters and digits)",
            shown(reason)
        )));
    }
    if event.message.len() > bounds.max_event_message_bytes {
        return Err(Error::TooLarge(format!(
            "the message of an event about {key} is {} bytes; the limit is {}",
            event.message.len(),
            bounds.max_event_message_bytes
        )));
    }
    if event.message.contains('\0') {
        return Err(Error::Invalid(format!(
            "the message of an event about {key} contains a NUL character"
        )));
    }
    Ok(())
}

/// A list's kind, cursor and selector. Every problem with a selector is
/// [`Error::Invalid`] and names the kind: a selector is a question, not
/// stored data, so even one over a bound is a bad request rather than a
/// write too large.
pub fn check_list(kind: &str, after: Option<&str>, selector: &Selector) -> Result<(), Error> {
    check_label("object kind", kind)?;
    if let Some(after) = after {
        check_label("list cursor", after)?;
    }
    check_selector(kind, selector)
}

/// Parse a selector's `contains` given as JSON text (the API's
/// `contains=`, a guest's selector): the rules of a value ([`json::parse`])
/// and a bound on the text before it is parsed; [`check_selector`] checks
/// the rest.
pub fn parse_contains(
    kind: &str,
    text: &str,
    max_text_bytes: usize,
) -> Result<serde_json::Value, Error> {
    if text.len() > max_text_bytes {
        return Err(Error::Invalid(format!(
            "selector for kind {kind}: contains is {} bytes of JSON text; the limit is {max_text_bytes}",
            text.len()
        )));
    }
    json::parse(text).map_err(|refusal| match refusal {
        Refusal::NotJson(why) => Error::Invalid(format!(
            "selector for kind {kind}: contains is not JSON: {why}"
        )),
        other => Error::Invalid(format!("selector for kind {kind}: contains {other}")),
    })
}

/// A selector: at most [`MAX_SELECTOR_LABELS`] labels of the syntax object
/// labels have, and a `contains` without NUL of at most
/// [`MAX_SELECTOR_CONTAINS_BYTES`] (compact JSON) nested at most
/// [`MAX_SELECTOR_CONTAINS_DEPTH`] deep.
pub fn check_selector(kind: &str, selector: &Selector) -> Result<(), Error> {
    if selector.labels.len() > MAX_SELECTOR_LABELS {
        return Err(Error::Invalid(format!(
            "selector for kind {kind} names {} labels; the limit is {MAX_SELECTOR_LABELS}",
            selector.labels.len()
        )));
    }
    for (name, value) in &selector.labels {
        if !qualified(name, MAX_LABEL_KEY_BYTES) {
            return Err(Error::Invalid(format!(
                "selector for kind {kind}: label key {:?} must be 1 to {MAX_LABEL_KEY_BYTES} ASCII letters, digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
                shown(name)
            )));
        }
        if !label_value(value) {
            return Err(Error::Invalid(format!(
                "selector for kind {kind}: label {name} has value {:?}; a label value is empty or 1 to {MAX_LABEL_VALUE_BYTES} ASCII letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",
                shown(value)
            )));
        }
    }
    if let Some(contains) = &selector.contains {
        if json::exceeds_depth(contains, MAX_SELECTOR_CONTAINS_DEPTH) {
            return Err(Error::Invalid(format!(
                "selector for kind {kind}: contains is nested more than {MAX_SELECTOR_CONTAINS_DEPTH} arrays or objects deep"
            )));
        }
        let mut size = BoundedSize {
            written: 0,
            max: MAX_SELECTOR_CONTAINS_BYTES,
        };
        if serde_json::to_writer(&mut size, contains).is_err() {
            return Err(Error::Invalid(format!(
                "selector for kind {kind}: contains is over {MAX_SELECTOR_CONTAINS_BYTES} bytes of compact JSON"
            )));
        }
        json::check_tree(contains).map_err(|refusal| {
            Error::Invalid(format!("selector for kind {kind}: contains {refusal}"))
        })?;
    }
    Ok(())
}

/// Whether `selector` selects an object with `labels` and the canonical
/// JSON text `value`: every label it names with that value, and a value
/// that contains its `contains` ([`json::contains`]). A stored value that
/// is not JSON is reported, never taken for "no match".
pub fn selects(
    selector: &Selector,
    labels: &std::collections::BTreeMap<String, String>,
    value: &str,
) -> Result<bool, serde_json::Error> {
    let labelled = selector
        .labels
        .iter()
        .all(|(name, want)| labels.get(name) == Some(want));
    if !labelled {
        return Ok(false);
    }
    let Some(query) = &selector.contains else {
        return Ok(true);
    };
    let value: serde_json::Value = serde_json::from_str(value)?;
    Ok(json::contains(&value, query))
}

/// A writer that only counts, and fails once past `max` bytes: measures
/// compact JSON without building it whole.
struct BoundedSize {
    written: usize,
    max: usize,
}

impl std::io::Write for BoundedSize {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written += buf.len();
        if self.written > self.max {
            return Err(std::io::Error::other("over the bound"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The page size actually served: 0 asks for the default, anything above
/// the maximum is capped.
pub fn page_limit(limit: usize) -> usize {
    page_limit_within(limit, MAX_PAGE_SIZE)
}

/// [`page_limit`] under a lowered maximum (a fake's).
pub fn page_limit_within(limit: usize, max: usize) -> usize {
    if limit == 0 {
        DEFAULT_PAGE_SIZE.min(max)
    } else {
        limit.min(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{
        MAX_EVENT_MESSAGE_BYTES, MAX_EVENT_REASON_BYTES, MAX_EVENTS_PER_COMMIT, MAX_OPS_PER_COMMIT,
        MAX_VALUE_BYTES,
    };

    fn key() -> ObjectKey {
        ObjectKey::new("tasks", "t1")
    }

    const B: &Bounds = &Bounds::HOST;

    #[test]
    fn values_are_normalized_to_compact_json() {
        let text =
            normalize_value(B, &key(), " { \"a\" : [1, 2.5, \"x\"] ,\n \"b\": null } ").unwrap();
        assert_eq!(text, "{\"a\":[1,2.5,\"x\"],\"b\":null}");
        assert_eq!(normalize_value(B, &key(), "\"\\u00e9\"").unwrap(), "\"é\"");
    }

    #[test]
    fn non_json_values_are_invalid() {
        for bad in ["", "{", "tasks", "{\"a\":}", "[1,]", "1e400", "NaN"] {
            let err = normalize_value(B, &key(), bad).unwrap_err();
            assert!(
                matches!(&err, Error::Invalid(m) if m.contains("tasks/t1") && m.contains("not JSON")),
                "{bad:?}: {err}"
            );
        }
        let err = normalize_value(B, &key(), "[\"a\\u0000\"]").unwrap_err();
        assert!(
            matches!(&err, Error::Invalid(m) if m.contains("NUL")),
            "{err}"
        );
        let err = normalize_status(B, &key(), "18446744073709551616").unwrap_err();
        assert!(
            matches!(&err, Error::Invalid(m) if m.contains("status of tasks/t1") && m.contains("64-bit")),
            "{err}"
        );
    }

    #[test]
    fn value_size_is_bounded_before_and_after_normalizing() {
        let at_limit = format!("\"{}\"", "x".repeat(MAX_VALUE_BYTES - 2));
        assert_eq!(
            normalize_value(B, &key(), &at_limit).unwrap().len(),
            MAX_VALUE_BYTES
        );
        let over = format!("\"{}\"", "x".repeat(MAX_VALUE_BYTES - 1));
        assert!(matches!(
            normalize_value(B, &key(), &over),
            Err(Error::TooLarge(_))
        ));
        // Short given text that grows when normalized: `1e9` becomes
        // `1000000000.0`.
        let growing = format!("[{}]", vec!["1e9"; MAX_VALUE_BYTES / 4 - 1].join(","));
        assert!(growing.len() <= MAX_VALUE_BYTES);
        assert!(matches!(
            normalize_value(B, &key(), &growing),
            Err(Error::TooLarge(_))
        ));
    }

    #[test]
    fn counts_are_bounded_and_nonzero() {
        check_counts(B, MAX_OPS_PER_COMMIT, MAX_EVENTS_PER_COMMIT).unwrap();
        check_counts(B, 0, 1).unwrap();
        check_counts(B, 1, 0).unwrap();
        assert!(matches!(check_counts(B, 0, 0), Err(Error::Invalid(_))));
        assert!(matches!(
            check_counts(B, MAX_OPS_PER_COMMIT + 1, 0),
            Err(Error::TooLarge(_))
        ));
        assert!(matches!(
            check_counts(B, 1, MAX_EVENTS_PER_COMMIT + 1),
            Err(Error::TooLarge(_))
        ));
    }

    #[test]
    fn events_need_pascal_case_reasons_and_bounded_messages() {
        let event = |reason: &str, message: &str| NewEvent {
            key: key(),
            reason: reason.into(),
            message: message.into(),
        };
        check_event(B, &event("Assigned", "ok")).unwrap();
        check_event(B, &event("Scaled2", "")).unwrap();
        for bad in ["", "assigned", "Not Assigned", "Ünicode", "A-b"] {
            assert!(
                matches!(check_event(B, &event(bad, "m")), Err(Error::Invalid(_))),
                "{bad:?}"
            );
        }
        let long_reason = format!("A{}", "b".repeat(MAX_EVENT_REASON_BYTES));
        assert!(matches!(
            check_event(B, &event(&long_reason, "m")),
            Err(Error::TooLarge(_))
        ));
        let long_message = "m".repeat(MAX_EVENT_MESSAGE_BYTES + 1);
        assert!(matches!(
            check_event(B, &event("A", &long_message)),
            Err(Error::TooLarge(_))
        ));
        assert!(matches!(
            check_event(B, &event("A", "nul\0")),
            Err(Error::Invalid(_))
        ));
    }

    #[test]
    fn metadata_is_bounded_and_well_formed() {
        let meta = |labels: &[(&str, &str)], finalizers: &[&str]| Metadata {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            owner: None,
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
        };
        check_metadata(
            &key(),
            &meta(
                &[("app", "web"), ("example.com/tier", "")],
                &["example.com/cleanup"],
            ),
        )
        .unwrap();
        for bad in [
            meta(&[("", "x")], &[]),
            meta(&[("-app", "x")], &[]),
            meta(&[("app", "a b")], &[]),
            meta(&[("app", "x/y")], &[]),
            meta(&[("app", &"v".repeat(MAX_LABEL_VALUE_BYTES + 1))], &[]),
            meta(&[], &["bad finalizer"]),
            meta(&[], &["dup", "dup"]),
            meta(&[], &[""]),
        ] {
            assert!(
                matches!(check_metadata(&key(), &bad), Err(Error::Invalid(m)) if m.contains("tasks/t1")),
                "{bad:?}"
            );
        }
        let many: Vec<(String, String)> = (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        let many = Metadata {
            labels: many.into_iter().collect(),
            ..Metadata::default()
        };
        assert!(matches!(
            check_metadata(&key(), &many),
            Err(Error::TooLarge(_))
        ));
        let own = Metadata {
            owner: Some(key()),
            ..Metadata::default()
        };
        assert!(matches!(
            check_metadata(&key(), &own),
            Err(Error::Invalid(_))
        ));
    }

    #[test]
    fn selectors_refuse_nul_in_contains() {
        let selector = Selector {
            labels: Default::default(),
            contains: Some(serde_json::json!({"a": "x\u{0}"})),
        };
        let err = check_selector("tasks", &selector).unwrap_err();
        assert!(
            matches!(&err, Error::Invalid(m) if m.contains("NUL")),
            "{err}"
        );
        let err = parse_contains("tasks", "{\"a\":\"\\u0000\"}", 4096).unwrap_err();
        assert!(
            matches!(&err, Error::Invalid(m) if m.contains("NUL")),
            "{err}"
        );
    }

    #[test]
    fn page_sizes_default_and_cap() {
        assert_eq!(page_limit(0), DEFAULT_PAGE_SIZE);
        assert_eq!(page_limit(7), 7);
        assert_eq!(page_limit(MAX_PAGE_SIZE + 1), MAX_PAGE_SIZE);
        assert_eq!(page_limit_within(0, 10), 10);
    }
}
