//! The fake's object store: the real store's preconditions and limits,
//! with none of its durability. Pure data and rules; faults, fences and
//! records live in their own modules. Errors are the wire's, as the host
//! sends them.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use crate::limits::{DEFAULT_PAGE_SIZE, Limits, MAX_LABEL_LEN};
use crate::sys::{NewEvent, ObjectKey, Op, RawObject, RawPage, WireError};

/// One stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stored {
    pub version: u64,
    /// Compact JSON text, normalized as the host normalizes it.
    pub value: String,
}

/// Objects keyed by `(kind, name)`; the derived order of [`ObjectKey`]
/// sorts by kind, then name, so one kind is one contiguous range in name
/// order.
#[derive(Debug, Default)]
pub(super) struct Objects {
    pub map: BTreeMap<ObjectKey, Stored>,
    /// The last revision handed out; every commit (and every seed) takes the
    /// next one.
    pub revision: u64,
}

/// Check a kind or object name against the DNS-label rules the host uses.
pub(super) fn check_label(what: &str, value: &str) -> Result<(), WireError> {
    let invalid = |rule: &str| {
        Err(WireError::Invalid(format!(
            "invalid {what} {value:?}: {rule}"
        )))
    };
    if value.is_empty() {
        return invalid("must not be empty");
    }
    if value.len() > MAX_LABEL_LEN {
        return invalid("must be at most 63 characters");
    }
    let bytes = value.as_bytes();
    let edge_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !edge_ok(bytes[0]) || !edge_ok(bytes[bytes.len() - 1]) {
        return invalid("must start and end with a lowercase letter or digit");
    }
    if !bytes.iter().all(|&b| edge_ok(b) || b == b'-') {
        return invalid("may contain only lowercase letters, digits and '-'");
    }
    Ok(())
}

fn check_key(key: &ObjectKey) -> Result<(), WireError> {
    check_label("object kind", &key.kind)?;
    check_label("object name", &key.name)
}

/// Check a value's size and syntax and return it as compact JSON text. The
/// size limit applies to the text given and to the text stored
/// (normalizing can lengthen a number such as `1e9`).
pub(super) fn normalize_value(
    limits: &Limits,
    key: &ObjectKey,
    value: &str,
) -> Result<String, WireError> {
    let too_large = |len: usize, how: &str| {
        WireError::Invalid(format!(
            "the value of {key} is {len} bytes{how}; the limit is {}",
            limits.max_value_bytes
        ))
    };
    if value.len() > limits.max_value_bytes {
        return Err(too_large(value.len(), ""));
    }
    let parsed: serde_json::Value = serde_json::from_str(value)
        .map_err(|e| WireError::Invalid(format!("the value of {key} is not JSON: {e}")))?;
    let text = parsed.to_string();
    if text.len() > limits.max_value_bytes {
        return Err(too_large(text.len(), " once normalized"));
    }
    Ok(text)
}

/// The sum of the strings a commit carries, as the host measures a call's
/// payload.
fn payload_size(ops: &[Op], events: &[NewEvent]) -> usize {
    let ops: usize = ops
        .iter()
        .map(|op| {
            let key = op.key();
            let value = match op {
                Op::Create { value, .. } | Op::Update { value, .. } => value.len(),
                Op::Delete { .. } => 0,
            };
            key.kind.len() + key.name.len() + value
        })
        .sum();
    let events: usize = events
        .iter()
        .map(|e| e.key.kind.len() + e.key.name.len() + e.reason.len() + e.message.len())
        .sum();
    ops + events
}

/// Check an event: a well-formed object, a PascalCase reason (a
/// machine-readable word such as `Assigned`), a bounded message without NUL
/// (the durable backend's text cannot hold it).
fn check_event(limits: &Limits, event: &NewEvent) -> Result<(), WireError> {
    check_key(&event.key)?;
    let key = &event.key;
    let reason = &event.reason;
    if reason.len() > limits.max_event_reason_bytes {
        return Err(WireError::Invalid(format!(
            "the reason of an event about {key} is {} bytes; the limit is {}",
            reason.len(),
            limits.max_event_reason_bytes
        )));
    }
    let pascal = reason
        .as_bytes()
        .first()
        .is_some_and(u8::is_ascii_uppercase)
        && reason.bytes().all(|b| b.is_ascii_alphanumeric());
    if !pascal {
        return Err(WireError::Invalid(format!(
            "the reason {reason:?} of an event about {key} must be a PascalCase word \
             (A-Z first, then letters and digits)"
        )));
    }
    if event.message.len() > limits.max_event_message_bytes {
        return Err(WireError::Invalid(format!(
            "the message of an event about {key} is {} bytes; the limit is {}",
            event.message.len(),
            limits.max_event_message_bytes
        )));
    }
    if event.message.contains('\0') {
        return Err(WireError::Invalid(format!(
            "the message of an event about {key} contains a NUL character"
        )));
    }
    Ok(())
}

/// Check everything about a commit that does not depend on the stored
/// state, in the host's order, and return its operations with normalized
/// values.
pub(super) fn validate_commit(
    limits: &Limits,
    ops: &[Op],
    events: &[NewEvent],
) -> Result<Vec<Op>, WireError> {
    let size = payload_size(ops, events);
    if size > limits.max_call_payload_bytes {
        return Err(WireError::Invalid(format!(
            "host call payload of {size} bytes exceeds the limit of {} bytes",
            limits.max_call_payload_bytes
        )));
    }
    if ops.len() > limits.max_ops_per_commit {
        return Err(WireError::Invalid(format!(
            "a commit has {} operations; the limit is {}",
            ops.len(),
            limits.max_ops_per_commit
        )));
    }
    if events.len() > limits.max_events_per_commit {
        return Err(WireError::Invalid(format!(
            "a commit has {} events; the limit is {}",
            events.len(),
            limits.max_events_per_commit
        )));
    }
    if ops.is_empty() && events.is_empty() {
        return Err(WireError::Invalid(
            "a commit needs at least one operation or event".into(),
        ));
    }
    let mut seen = BTreeSet::new();
    let mut normalized = Vec::with_capacity(ops.len());
    for op in ops {
        let key = op.key();
        check_key(key)?;
        // The host allows one operation per object, so a commit's meaning
        // does not depend on the order its operations apply in.
        if !seen.insert(key) {
            return Err(WireError::Invalid(format!(
                "{key} appears in more than one operation of the commit"
            )));
        }
        normalized.push(match op {
            Op::Create { key, value } => Op::Create {
                key: key.clone(),
                value: normalize_value(limits, key, value)?,
            },
            Op::Update {
                key,
                expected_version,
                value,
            } => Op::Update {
                key: key.clone(),
                expected_version: *expected_version,
                value: normalize_value(limits, key, value)?,
            },
            Op::Delete { .. } => op.clone(),
        });
    }
    for event in events {
        check_event(limits, event)?;
    }
    Ok(normalized)
}

impl Objects {
    pub(super) fn get(&self, kind: &str, name: &str) -> Result<Option<RawObject>, WireError> {
        let key = ObjectKey::new(kind, name);
        check_key(&key)?;
        Ok(self.map.get(&key).map(|stored| raw(&key, stored)))
    }

    pub(super) fn list(
        &self,
        limits: &Limits,
        kind: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<RawPage, WireError> {
        check_label("object kind", kind)?;
        if let Some(after) = after {
            check_label("list cursor", after)?;
        }
        // As the host: 0 asks for the default page, more than the maximum
        // is capped.
        let limit = match limit {
            0 => DEFAULT_PAGE_SIZE,
            n => n,
        }
        .min(limits.max_page_size) as usize;
        let start = match after {
            Some(after) => Bound::Excluded(ObjectKey::new(kind, after)),
            None => Bound::Included(ObjectKey::new(kind, "")),
        };
        // One more than asked tells whether another page exists.
        let mut objects: Vec<RawObject> = self
            .map
            .range((start, Bound::Unbounded))
            .take_while(|(key, _)| key.kind == kind)
            .take(limit + 1)
            .map(|(key, stored)| raw(key, stored))
            .collect();
        let next = if objects.len() > limit {
            objects.truncate(limit);
            objects.last().map(|o| o.name.clone())
        } else {
            None
        };
        Ok(RawPage { objects, next })
    }

    /// Check the preconditions of validated `ops` (each object at most
    /// once) against the stored versions, the first failing operation in
    /// input order deciding the error, and apply them all under a new
    /// revision, or none of them.
    pub(super) fn apply(&mut self, ops: &[Op]) -> Result<u64, WireError> {
        for op in ops {
            let key = op.key();
            match (op, self.map.get(key)) {
                (Op::Create { .. }, Some(_)) => return Err(WireError::Conflict(key.clone())),
                (Op::Create { .. }, None) => {}
                (Op::Update { .. } | Op::Delete { .. }, None) => {
                    return Err(WireError::NotFound(key.clone()));
                }
                (
                    Op::Update {
                        expected_version, ..
                    }
                    | Op::Delete {
                        expected_version, ..
                    },
                    Some(stored),
                ) => {
                    if stored.version != *expected_version {
                        return Err(WireError::Conflict(key.clone()));
                    }
                }
            }
        }
        let revision = self.revision + 1;
        for op in ops {
            match op {
                Op::Create { key, value } | Op::Update { key, value, .. } => {
                    let stored = Stored {
                        version: revision,
                        value: value.clone(),
                    };
                    self.map.insert(key.clone(), stored);
                }
                Op::Delete { key, .. } => {
                    self.map.remove(key);
                }
            }
        }
        self.revision = revision;
        Ok(revision)
    }
}

fn raw(key: &ObjectKey, stored: &Stored) -> RawObject {
    RawObject {
        kind: key.kind.clone(),
        name: key.name.clone(),
        version: stored.version,
        value: stored.value.clone(),
    }
}
