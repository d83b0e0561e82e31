//! The input rules every backend applies before it touches state: names,
//! JSON values, sizes and counts.
//!
//! Kept in one place so a request is refused with the same error whichever
//! backend serves it. Must never: look at stored state (preconditions are
//! [`super::plan`]'s concern).

use crate::limits::{
    DEFAULT_PAGE_SIZE, MAX_EVENT_MESSAGE_BYTES, MAX_EVENT_REASON_BYTES, MAX_EVENTS_PER_COMMIT,
    MAX_FINALIZER_BYTES, MAX_FINALIZERS, MAX_LABEL_KEY_BYTES, MAX_LABEL_VALUE_BYTES, MAX_LABELS,
    MAX_OPS_PER_COMMIT, MAX_PAGE_SIZE, MAX_SELECTOR_CONTAINS_BYTES, MAX_SELECTOR_CONTAINS_DEPTH,
    MAX_SELECTOR_LABELS, MAX_VALUE_BYTES,
};
use crate::names::{NameError, check_holder, check_label};

use super::{Metadata, NewEvent, ObjectKey, Selector, StoreError};

impl From<NameError> for StoreError {
    fn from(error: NameError) -> Self {
        StoreError::Invalid(error.to_string())
    }
}

/// A cluster name is a DNS label, like every name users choose.
pub(crate) fn check_cluster(cluster: &str) -> Result<(), StoreError> {
    Ok(check_label("cluster", cluster)?)
}

/// Kinds and object names are DNS labels (see [`crate::names`]): they are
/// also URL path segments and must sort the same way in every backend.
pub(crate) fn check_key(key: &ObjectKey) -> Result<(), StoreError> {
    check_label("object kind", &key.kind)?;
    check_label("object name", &key.name)?;
    Ok(())
}

/// The lease, cluster and holder a fence names must be well-formed before
/// they are looked up.
pub(crate) fn check_fence_names(fence: &crate::fence::Fence) -> Result<(), StoreError> {
    check_cluster(&fence.key.cluster)?;
    check_label("lease", &fence.key.name)?;
    check_holder(&fence.holder)?;
    Ok(())
}

/// Parse `value` as JSON and return its compact serde_json text, which is
/// what both backends store, so they return identical text.
///
/// The limit applies to the text given (it bounds the parsing work) and to
/// the text stored (normalizing can lengthen a number such as `1e9`).
/// Numbers outside the 64-bit integer range are read as doubles, as
/// serde_json does.
pub(crate) fn normalize_value(key: &ObjectKey, value: &str) -> Result<String, StoreError> {
    normalize_json(key, "value", value)
}

/// A status is JSON under the same rules and limit as a value.
pub(crate) fn normalize_status(key: &ObjectKey, status: &str) -> Result<String, StoreError> {
    normalize_json(key, "status", status)
}

fn normalize_json(key: &ObjectKey, part: &str, value: &str) -> Result<String, StoreError> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(StoreError::TooLarge(format!(
            "the {part} of {key} is {} bytes; the limit is {MAX_VALUE_BYTES}",
            value.len()
        )));
    }
    let parsed: serde_json::Value = serde_json::from_str(value)
        .map_err(|e| StoreError::Invalid(format!("the {part} of {key} is not JSON: {e}")))?;
    let text = parsed.to_string();
    if text.len() > MAX_VALUE_BYTES {
        return Err(StoreError::TooLarge(format!(
            "the {part} of {key} is {} bytes once normalized; the limit is {MAX_VALUE_BYTES}",
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
pub(crate) fn check_label_key(key: &str) -> Result<(), String> {
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
pub(crate) fn check_metadata(key: &ObjectKey, meta: &Metadata) -> Result<(), StoreError> {
    if meta.labels.len() > MAX_LABELS {
        return Err(StoreError::TooLarge(format!(
            "{key} has {} labels; the limit is {MAX_LABELS}",
            meta.labels.len()
        )));
    }
    for (name, value) in &meta.labels {
        if !qualified(name, MAX_LABEL_KEY_BYTES) {
            return Err(StoreError::Invalid(format!(
                "label key {:?} of {key} must be 1 to {MAX_LABEL_KEY_BYTES} ASCII letters, digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
                shown(name)
            )));
        }
        if !label_value(value) {
            return Err(StoreError::Invalid(format!(
                "label {name} of {key} has value {:?}; a label value is empty or 1 to {MAX_LABEL_VALUE_BYTES} ASCII letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",
                shown(value)
            )));
        }
    }
    if meta.finalizers.len() > MAX_FINALIZERS {
        return Err(StoreError::TooLarge(format!(
            "{key} has {} finalizers; the limit is {MAX_FINALIZERS}",
            meta.finalizers.len()
        )));
    }
    for (i, finalizer) in meta.finalizers.iter().enumerate() {
        if !qualified(finalizer, MAX_FINALIZER_BYTES) {
            return Err(StoreError::Invalid(format!(
                "finalizer {:?} of {key} must be 1 to {MAX_FINALIZER_BYTES} ASCII letters, digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
                shown(finalizer)
            )));
        }
        if meta.finalizers[..i].contains(finalizer) {
            return Err(StoreError::Invalid(format!(
                "finalizer {finalizer} of {key} is listed twice"
            )));
        }
    }
    if let Some(owner) = &meta.owner {
        check_label("owner kind", &owner.kind)?;
        check_label("owner name", &owner.name)?;
        if owner == key {
            return Err(StoreError::Invalid(format!("{key} cannot own itself")));
        }
    }
    Ok(())
}

/// Counts of one commit: something to do, and not more than the limits.
pub(crate) fn check_counts(ops: usize, events: usize) -> Result<(), StoreError> {
    if ops > MAX_OPS_PER_COMMIT {
        return Err(StoreError::TooLarge(format!(
            "a commit has {ops} operations; the limit is {MAX_OPS_PER_COMMIT}"
        )));
    }
    if events > MAX_EVENTS_PER_COMMIT {
        return Err(StoreError::TooLarge(format!(
            "a commit has {events} events; the limit is {MAX_EVENTS_PER_COMMIT}"
        )));
    }
    if ops == 0 && events == 0 {
        return Err(StoreError::Invalid(
            "a commit needs at least one operation or event".into(),
        ));
    }
    Ok(())
}

/// An event names a well-formed object, has a PascalCase reason (a
/// machine-readable word such as `Assigned`) and a bounded message.
pub(crate) fn check_event(event: &NewEvent) -> Result<(), StoreError> {
    check_key(&event.key)?;
    let key = &event.key;
    let reason = &event.reason;
    if reason.len() > MAX_EVENT_REASON_BYTES {
        return Err(StoreError::TooLarge(format!(
            "the reason of an event about {key} is {} bytes; the limit is {MAX_EVENT_REASON_BYTES}",
            reason.len()
        )));
    }
    let pascal = reason
        .as_bytes()
        .first()
        .is_some_and(u8::is_ascii_uppercase)
        && reason.bytes().all(|b| b.is_ascii_alphanumeric());
    if !pascal {
        return Err(StoreError::Invalid(format!(
            "the reason {:?} of an event about {key} must be a PascalCase word (A-Z first, then letters and digits)",
            reason.chars().take(80).collect::<String>()
        )));
    }
    if event.message.len() > MAX_EVENT_MESSAGE_BYTES {
        return Err(StoreError::TooLarge(format!(
            "the message of an event about {key} is {} bytes; the limit is {MAX_EVENT_MESSAGE_BYTES}",
            event.message.len()
        )));
    }
    // PostgreSQL text cannot hold NUL; refusing it everywhere keeps the
    // memory backend from accepting what the durable one would not.
    if event.message.contains('\0') {
        return Err(StoreError::Invalid(format!(
            "the message of an event about {key} contains a NUL character"
        )));
    }
    Ok(())
}

/// A change-stream read's cluster and watched kinds, checked alike by
/// every backend.
pub(crate) fn check_change_request(cluster: &str, kinds: &[String]) -> Result<(), StoreError> {
    check_cluster(cluster)?;
    for kind in kinds {
        crate::names::check_label("watched kind", kind)?;
    }
    Ok(())
}

/// A list's cluster, kind, cursor and selector, checked alike by every
/// backend. Every problem with a selector is [`StoreError::Invalid`] and
/// names the kind: a selector is a question, not stored data, so even one
/// over a bound is a bad request rather than a write too large.
pub(crate) fn check_list_request(
    cluster: &str,
    kind: &str,
    after: Option<&str>,
    selector: &Selector,
) -> Result<(), StoreError> {
    check_cluster(cluster)?;
    check_label("object kind", kind)?;
    if let Some(after) = after {
        check_label("list cursor", after)?;
    }
    check_selector(kind, selector)
}

/// A selector: at most [`MAX_SELECTOR_LABELS`] labels of the syntax object
/// labels have, and a `contains` of at most [`MAX_SELECTOR_CONTAINS_BYTES`]
/// (compact JSON) nested at most [`MAX_SELECTOR_CONTAINS_DEPTH`] deep.
pub(crate) fn check_selector(kind: &str, selector: &Selector) -> Result<(), StoreError> {
    if selector.labels.len() > MAX_SELECTOR_LABELS {
        return Err(StoreError::Invalid(format!(
            "selector for kind {kind} names {} labels; the limit is {MAX_SELECTOR_LABELS}",
            selector.labels.len()
        )));
    }
    for (name, value) in &selector.labels {
        if !qualified(name, MAX_LABEL_KEY_BYTES) {
            return Err(StoreError::Invalid(format!(
                "selector for kind {kind}: label key {:?} must be 1 to {MAX_LABEL_KEY_BYTES} ASCII letters, digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
                shown(name)
            )));
        }
        if !label_value(value) {
            return Err(StoreError::Invalid(format!(
                "selector for kind {kind}: label {name} has value {:?}; a label value is empty or 1 to {MAX_LABEL_VALUE_BYTES} ASCII letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",
                shown(value)
            )));
        }
    }
    if let Some(contains) = &selector.contains {
        if exceeds_depth(contains, MAX_SELECTOR_CONTAINS_DEPTH) {
            return Err(StoreError::Invalid(format!(
                "selector for kind {kind}: contains is nested more than {MAX_SELECTOR_CONTAINS_DEPTH} arrays or objects deep"
            )));
        }
        let mut size = BoundedSize {
            written: 0,
            max: MAX_SELECTOR_CONTAINS_BYTES,
        };
        if serde_json::to_writer(&mut size, contains).is_err() {
            return Err(StoreError::Invalid(format!(
                "selector for kind {kind}: contains is over {MAX_SELECTOR_CONTAINS_BYTES} bytes of compact JSON"
            )));
        }
    }
    Ok(())
}

/// Whether `value` nests arrays and objects more than `max` deep (a
/// scalar is depth 0). Descends no further than `max + 1`, so a value of
/// any depth is judged without deep recursion.
fn exceeds_depth(value: &serde_json::Value, max: usize) -> bool {
    let children: Box<dyn Iterator<Item = &serde_json::Value>> = match value {
        serde_json::Value::Array(items) => Box::new(items.iter()),
        serde_json::Value::Object(map) => Box::new(map.values()),
        _ => return false,
    };
    if max == 0 {
        return true;
    }
    children
        .into_iter()
        .any(|child| exceeds_depth(child, max - 1))
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
pub(crate) fn page_limit(limit: usize) -> usize {
    if limit == 0 {
        DEFAULT_PAGE_SIZE
    } else {
        limit.min(MAX_PAGE_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ObjectKey {
        ObjectKey {
            kind: "tasks".into(),
            name: "t1".into(),
        }
    }

    #[test]
    fn values_are_normalized_to_compact_json() {
        let text =
            normalize_value(&key(), " { \"a\" : [1, 2.5, \"x\"] ,\n \"b\": null } ").unwrap();
        assert!(!text.contains(' ') && !text.contains('\n'), "{text}");
        let round: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(round, serde_json::json!({"a": [1, 2.5, "x"], "b": null}));
        assert_eq!(normalize_value(&key(), "\"\\u00e9\"").unwrap(), "\"é\"");
    }

    #[test]
    fn non_json_values_are_invalid() {
        for bad in ["", "{", "tasks", "{\"a\":}", "[1,]"] {
            let err = normalize_value(&key(), bad).unwrap_err();
            assert!(
                matches!(&err, StoreError::Invalid(m) if m.contains("tasks/t1")),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn value_size_is_bounded_before_and_after_normalizing() {
        let at_limit = format!("\"{}\"", "x".repeat(MAX_VALUE_BYTES - 2));
        assert_eq!(
            normalize_value(&key(), &at_limit).unwrap().len(),
            MAX_VALUE_BYTES
        );
        let over = format!("\"{}\"", "x".repeat(MAX_VALUE_BYTES - 1));
        assert!(matches!(
            normalize_value(&key(), &over),
            Err(StoreError::TooLarge(_))
        ));
        // Short given text that grows when normalized: `1e9` becomes
        // `1000000000.0`.
        let growing = format!("[{}]", vec!["1e9"; MAX_VALUE_BYTES / 4 - 1].join(","));
        assert!(growing.len() <= MAX_VALUE_BYTES);
        assert!(matches!(
            normalize_value(&key(), &growing),
            Err(StoreError::TooLarge(_))
        ));
    }

    #[test]
    fn counts_are_bounded_and_nonzero() {
        check_counts(MAX_OPS_PER_COMMIT, MAX_EVENTS_PER_COMMIT).unwrap();
        check_counts(0, 1).unwrap();
        check_counts(1, 0).unwrap();
        assert!(matches!(check_counts(0, 0), Err(StoreError::Invalid(_))));
        assert!(matches!(
            check_counts(MAX_OPS_PER_COMMIT + 1, 0),
            Err(StoreError::TooLarge(_))
        ));
        assert!(matches!(
            check_counts(1, MAX_EVENTS_PER_COMMIT + 1),
            Err(StoreError::TooLarge(_))
        ));
    }

    #[test]
    fn events_need_pascal_case_reasons_and_bounded_messages() {
        let event = |reason: &str, message: &str| NewEvent {
            key: key(),
            reason: reason.into(),
            message: message.into(),
        };
        check_event(&event("Assigned", "ok")).unwrap();
        check_event(&event("Scaled2", "")).unwrap();
        for bad in ["", "assigned", "Not Assigned", "Ünicode", "A-b"] {
            assert!(
                matches!(check_event(&event(bad, "m")), Err(StoreError::Invalid(_))),
                "{bad:?}"
            );
        }
        let long_reason = format!("A{}", "b".repeat(MAX_EVENT_REASON_BYTES));
        assert!(matches!(
            check_event(&event(&long_reason, "m")),
            Err(StoreError::TooLarge(_))
        ));
        let long_message = "m".repeat(MAX_EVENT_MESSAGE_BYTES + 1);
        assert!(matches!(
            check_event(&event("A", &long_message)),
            Err(StoreError::TooLarge(_))
        ));
        assert!(matches!(
            check_event(&event("A", "nul\0")),
            Err(StoreError::Invalid(_))
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
                matches!(check_metadata(&key(), &bad), Err(StoreError::Invalid(m)) if m.contains("tasks/t1")),
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
            Err(StoreError::TooLarge(_))
        ));
        let names: Vec<String> = (0..=MAX_FINALIZERS).map(|i| format!("f{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert!(matches!(
            check_metadata(&key(), &meta(&[], &names)),
            Err(StoreError::TooLarge(_))
        ));
        let own = Metadata {
            owner: Some(key()),
            ..Metadata::default()
        };
        assert!(matches!(
            check_metadata(&key(), &own),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn page_sizes_default_and_cap() {
        assert_eq!(page_limit(0), DEFAULT_PAGE_SIZE);
        assert_eq!(page_limit(7), 7);
        assert_eq!(page_limit(MAX_PAGE_SIZE + 1), MAX_PAGE_SIZE);
    }
}
