//! The fake's object store: the real store's preconditions and limits,
//! with none of its durability. Pure data and rules; faults, fences and
//! records live in their own modules. Errors are the wire's, as the host
//! sends them.
//!
//! The rules of metadata, status and deletion are the host store's (its
//! `plan` module), decided the same way here: a commit's operations are
//! resolved in input order against the state before the commit (the first
//! failing one decides the error), then garbage collection follows the
//! owners whose first delete request the commit made, and only then is
//! anything applied:
//!
//! - `generation` is 1 at creation and grows by one with each write that
//!   changes the value or the metadata, a deletion mark included; a status
//!   write keeps it and fails with a conflict at another generation than
//!   the one it expects.
//! - A delete request removes an object without finalizers and marks one
//!   with finalizers (`deleting_since`, the fake's clock); an object
//!   already marked is left as it is. A marked object cannot gain
//!   finalizers (invalid), and the write that leaves it none removes it.
//! - The first delete request of an object requests the deletion of every
//!   object it owns, transitively, at most [`MAX_COLLECTED_PER_COMMIT`];
//!   an owned object the commit writes otherwise, or checks, makes the
//!   commit invalid.
//! - A write that gives an object an owner it did not have needs the owner
//!   to exist unmarked (or be created by the commit), else a conflict
//!   naming the written object; an owner the same commit deletes is
//!   invalid.
//! - A check writes nothing and fails the commit with a conflict unless
//!   the object is at the version given (0: absent).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::limits::{
    DEFAULT_PAGE_SIZE, Limits, MAX_COLLECTED_PER_COMMIT, MAX_FINALIZER_BYTES, MAX_FINALIZERS,
    MAX_LABEL_KEY_BYTES, MAX_LABEL_LEN, MAX_LABEL_VALUE_BYTES, MAX_LABELS,
    MAX_SELECTOR_CONTAINS_BYTES, MAX_SELECTOR_CONTAINS_DEPTH, MAX_SELECTOR_LABELS,
};
use crate::sys::{Metadata, NewEvent, ObjectKey, Op, RawObject, RawPage, Selector, WireError};

/// One stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stored {
    pub version: u64,
    /// Compact JSON text, normalized as the host normalizes it.
    pub value: String,
    /// Labels, owner, finalizers.
    pub meta: Metadata,
    /// Compact JSON text, if a status was written.
    pub status: Option<String>,
    /// 1 at creation; see the module documentation.
    pub generation: u64,
    /// When it was marked for deletion, in milliseconds since the Unix
    /// epoch (the precision the WIT carries).
    pub deleting_since_ms: Option<u64>,
}

/// An object as a commit leaves it (its version is the commit's revision).
#[derive(Debug, Clone)]
struct Row {
    value: String,
    meta: Metadata,
    status: Option<String>,
    generation: u64,
    deleting_since_ms: Option<u64>,
}

/// One write a commit decided.
#[derive(Debug, Clone)]
enum Planned {
    /// Create or rewrite.
    Put { key: ObjectKey, row: Row },
    /// Remove.
    Remove { key: ObjectKey },
}

impl Planned {
    fn key(&self) -> &ObjectKey {
        match self {
            Planned::Put { key, .. } | Planned::Remove { key } => key,
        }
    }
}

/// The writes a commit decided so far and the owners whose owned objects
/// garbage collection has still to look at.
#[derive(Debug, Default)]
struct Plan {
    writes: Vec<Planned>,
    pending_owners: Vec<ObjectKey>,
    collected: usize,
}

/// Milliseconds since the Unix epoch of `at` (0 before it).
pub(super) fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
    /// Every object write, in commit order: the host's change stream
    /// (`watch.rs` maps it to the keys a controller is woken for).
    pub changes: Vec<super::watch::Change>,
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
    normalize_json(limits, key, "value", value)
}

/// A status is JSON under the same rules and limit as a value.
fn normalize_json(
    limits: &Limits,
    key: &ObjectKey,
    part: &str,
    value: &str,
) -> Result<String, WireError> {
    let too_large = |len: usize, how: &str| {
        WireError::Invalid(format!(
            "the {part} of {key} is {len} bytes{how}; the limit is {}",
            limits.max_value_bytes
        ))
    };
    if value.len() > limits.max_value_bytes {
        return Err(too_large(value.len(), ""));
    }
    let parsed: serde_json::Value = serde_json::from_str(value)
        .map_err(|e| WireError::Invalid(format!("the {part} of {key} is not JSON: {e}")))?;
    let text = parsed.to_string();
    if text.len() > limits.max_value_bytes {
        return Err(too_large(text.len(), " once normalized"));
    }
    Ok(text)
}

/// Label keys and finalizers: 1 to `max` bytes of ASCII letters, digits,
/// `-`, `_`, `.` and `/`, beginning and ending with a letter or digit.
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

/// Label values: empty, or 1 to [`MAX_LABEL_VALUE_BYTES`] ASCII letters,
/// digits, `-`, `_` and `.`, beginning and ending with a letter or digit.
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
    text.chars().take(80).collect()
}

/// The host's metadata rules (see [`Metadata`]).
pub(super) fn check_metadata(key: &ObjectKey, meta: &Metadata) -> Result<(), WireError> {
    if meta.labels.len() > MAX_LABELS {
        return Err(WireError::Invalid(format!(
            "{key} has {} labels; the limit is {MAX_LABELS}",
            meta.labels.len()
        )));
    }
    for (name, value) in &meta.labels {
        if !qualified(name, MAX_LABEL_KEY_BYTES) {
            return Err(WireError::Invalid(format!(
                "label key {:?} of {key} must be 1 to {MAX_LABEL_KEY_BYTES} ASCII letters, \
                 digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
                shown(name)
            )));
        }
        if !label_value(value) {
            return Err(WireError::Invalid(format!(
                "label {name} of {key} has value {:?}; a label value is empty or 1 to \
                 {MAX_LABEL_VALUE_BYTES} ASCII letters, digits, '-', '_' or '.', beginning and \
                 ending with a letter or digit",
                shown(value)
            )));
        }
    }
    if meta.finalizers.len() > MAX_FINALIZERS {
        return Err(WireError::Invalid(format!(
            "{key} has {} finalizers; the limit is {MAX_FINALIZERS}",
            meta.finalizers.len()
        )));
    }
    for (i, finalizer) in meta.finalizers.iter().enumerate() {
        if !qualified(finalizer, MAX_FINALIZER_BYTES) {
            return Err(WireError::Invalid(format!(
                "finalizer {:?} of {key} must be 1 to {MAX_FINALIZER_BYTES} ASCII letters, \
                 digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
                shown(finalizer)
            )));
        }
        if meta.finalizers[..i].contains(finalizer) {
            return Err(WireError::Invalid(format!(
                "finalizer {finalizer} of {key} is listed twice"
            )));
        }
    }
    if let Some(owner) = &meta.owner {
        check_label("owner kind", &owner.kind)?;
        check_label("owner name", &owner.name)?;
        if owner == key {
            return Err(WireError::Invalid(format!("{key} cannot own itself")));
        }
    }
    Ok(())
}

/// The bytes of metadata that count towards a call's payload, as the host
/// counts them.
fn meta_size(meta: &Metadata) -> usize {
    meta.labels
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum::<usize>()
        + meta
            .owner
            .as_ref()
            .map_or(0, |o| o.kind.len() + o.name.len())
        + meta.finalizers.iter().map(String::len).sum::<usize>()
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
                Op::CreateWith { value, meta, .. } => value.len() + meta_size(meta),
                Op::Replace { value, meta, .. } => {
                    value.as_ref().map_or(0, String::len) + meta.as_ref().map_or(0, meta_size)
                }
                Op::Status { status, .. } => status.as_ref().map_or(0, String::len),
                Op::Delete { .. } | Op::Check { .. } => 0,
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
            Op::CreateWith { key, value, meta } => {
                check_metadata(key, meta)?;
                Op::CreateWith {
                    key: key.clone(),
                    value: normalize_value(limits, key, value)?,
                    meta: meta.clone(),
                }
            }
            Op::Replace {
                key,
                expected_version,
                value,
                meta,
            } => {
                if let Some(meta) = meta {
                    check_metadata(key, meta)?;
                }
                if value.is_none() && meta.is_none() {
                    return Err(WireError::Invalid(format!(
                        "a replace of {key} needs a value, metadata or both"
                    )));
                }
                Op::Replace {
                    key: key.clone(),
                    expected_version: *expected_version,
                    value: value
                        .as_deref()
                        .map(|v| normalize_value(limits, key, v))
                        .transpose()?,
                    meta: meta.clone(),
                }
            }
            Op::Status {
                key,
                expected_generation,
                status,
            } => Op::Status {
                key: key.clone(),
                expected_generation: *expected_generation,
                status: status
                    .as_deref()
                    .map(|s| normalize_json(limits, key, "status", s))
                    .transpose()?,
            },
            Op::Delete { .. } | Op::Check { .. } => op.clone(),
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
        self.list_matching(limits, kind, after, limit, |_| true)
    }

    /// The host's `list_selected`: checked as the host checks it (kind,
    /// cursor, then the selector), then the kind in name order, keeping
    /// what the selector selects.
    pub(super) fn list_selected(
        &self,
        limits: &Limits,
        kind: &str,
        selector: &Selector,
        after: Option<&str>,
        limit: u32,
    ) -> Result<RawPage, WireError> {
        check_label("object kind", kind)?;
        if let Some(after) = after {
            check_label("list cursor", after)?;
        }
        check_selector(kind, selector)?;
        self.list_matching(limits, kind, after, limit, |stored| {
            selects(selector, stored)
        })
    }

    fn list_matching(
        &self,
        limits: &Limits,
        kind: &str,
        after: Option<&str>,
        limit: u32,
        keep: impl Fn(&Stored) -> bool,
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
            .filter(|(_, stored)| keep(stored))
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

    /// Resolve validated `ops` (each object at most once) against the
    /// stored state, the first failing operation in input order deciding
    /// the error, collect what the deleted objects own, and apply it all
    /// under a new revision, or nothing. `now` is the commit's time (a
    /// deletion mark's).
    pub(super) fn apply(&mut self, ops: &[Op], now: SystemTime) -> Result<u64, WireError> {
        let mut plan = Plan::default();
        for op in ops {
            if let Some(write) = self.resolve(ops, &mut plan, op, now)? {
                plan.writes.push(write);
            }
        }
        self.collect(ops, &mut plan, now)?;
        Ok(self.commit(plan))
    }

    /// A user's delete request of `key` through the API (not fenced, no
    /// version check), with the same marking and garbage collection; false
    /// if it does not exist.
    pub(super) fn request_delete_by_user(
        &mut self,
        key: &ObjectKey,
        now: SystemTime,
    ) -> Result<bool, WireError> {
        let Some(stored) = self.map.get(key) else {
            return Ok(false);
        };
        let mut plan = Plan::default();
        if let Some(write) = request_delete(&mut plan, key, stored, now) {
            plan.writes.push(write);
        }
        self.collect(&[], &mut plan, now)?;
        if !plan.writes.is_empty() {
            self.commit(plan);
        }
        Ok(true)
    }

    /// Apply a decided plan under the next revision.
    fn commit(&mut self, plan: Plan) -> u64 {
        let revision = self.revision + 1;
        for write in plan.writes {
            let (key, after) = match &write {
                Planned::Put { key, row } => (key, Some(&row.meta)),
                Planned::Remove { key } => (key, None),
            };
            let before = self.map.get(key).map(|stored| &stored.meta);
            let change = super::watch::Change::of(revision, key, before, after);
            self.changes.push(change);
            match write {
                Planned::Put { key, row } => {
                    let stored = Stored {
                        version: revision,
                        value: row.value,
                        meta: row.meta,
                        status: row.status,
                        generation: row.generation,
                        deleting_since_ms: row.deleting_since_ms,
                    };
                    self.map.insert(key, stored);
                }
                Planned::Remove { key } => {
                    self.map.remove(&key);
                }
            }
        }
        self.revision = revision;
        revision
    }

    /// Garbage collection: the objects owned by each object whose first
    /// delete request the plan made, in key order, transitively.
    fn collect(&self, ops: &[Op], plan: &mut Plan, now: SystemTime) -> Result<(), WireError> {
        loop {
            let owners = std::mem::take(&mut plan.pending_owners);
            if owners.is_empty() {
                return Ok(());
            }
            let owned: Vec<(&ObjectKey, &Stored)> = self
                .map
                .iter()
                .filter(|(_, s)| s.meta.owner.as_ref().is_some_and(|o| owners.contains(o)))
                .collect();
            for (key, stored) in owned {
                if plan.writes.iter().any(|w| w.key() == key) {
                    if deletes(ops, key) {
                        continue;
                    }
                    let owner = stored
                        .meta
                        .owner
                        .as_ref()
                        .map_or_else(String::new, ToString::to_string);
                    return Err(WireError::Invalid(format!(
                        "the commit deletes {owner}, which owns {key}, and also writes {key}: \
                         delete {key} too, or write it in another commit"
                    )));
                }
                if ops.iter().any(|op| op.key() == key) {
                    return Err(WireError::Invalid(format!(
                        "the commit checks {key} and deletes its owner; check or delete, not both"
                    )));
                }
                plan.collected += 1;
                if plan.collected > MAX_COLLECTED_PER_COMMIT {
                    return Err(WireError::Invalid(format!(
                        "deleting {} would delete or mark more than {MAX_COLLECTED_PER_COMMIT} \
                         owned objects in one commit; delete owned objects first",
                        ops.iter()
                            .map(|op| op.key().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                if let Some(write) = request_delete(plan, key, stored, now) {
                    plan.writes.push(write);
                }
            }
        }
    }

    /// What one operation writes, given the state before the commit.
    fn resolve(
        &self,
        ops: &[Op],
        plan: &mut Plan,
        op: &Op,
        now: SystemTime,
    ) -> Result<Option<Planned>, WireError> {
        let key = op.key();
        let found = self.map.get(key);
        let conflict = || Err(WireError::Conflict(key.clone()));
        match (op, found) {
            (
                Op::Check {
                    expected_version, ..
                },
                found,
            ) => match (found.map(|s| s.version), *expected_version) {
                (None, 0) => Ok(None),
                (Some(v), w) if v == w => Ok(None),
                _ => conflict(),
            },
            (Op::Create { .. } | Op::CreateWith { .. }, Some(_)) => conflict(),
            (Op::Create { value, .. }, None) => Ok(Some(created(key, value, Metadata::default()))),
            (Op::CreateWith { value, meta, .. }, None) => {
                self.check_owner(ops, key, None, meta)?;
                Ok(Some(created(key, value, meta.clone())))
            }
            (
                Op::Update { .. } | Op::Replace { .. } | Op::Delete { .. } | Op::Status { .. },
                None,
            ) => Err(WireError::NotFound(key.clone())),
            (
                Op::Update {
                    expected_version, ..
                }
                | Op::Replace {
                    expected_version, ..
                }
                | Op::Delete {
                    expected_version, ..
                },
                Some(stored),
            ) if *expected_version != stored.version => conflict(),
            (Op::Update { value, .. }, Some(stored)) => {
                self.rewrite(ops, key, stored, Some(value), None).map(Some)
            }
            (Op::Replace { value, meta, .. }, Some(stored)) => self
                .rewrite(ops, key, stored, value.as_ref(), meta.as_ref())
                .map(Some),
            (Op::Delete { .. }, Some(stored)) => Ok(request_delete(plan, key, stored, now)),
            (
                Op::Status {
                    expected_generation,
                    status,
                    ..
                },
                Some(stored),
            ) => {
                if expected_generation.is_some_and(|g| g != stored.generation) {
                    return conflict();
                }
                Ok(Some(Planned::Put {
                    key: key.clone(),
                    row: Row {
                        status: status.clone(),
                        ..row_of(stored)
                    },
                }))
            }
        }
    }

    /// A new value and/or metadata over `stored`: an update, or the removal
    /// of a marked object left without finalizers.
    fn rewrite(
        &self,
        ops: &[Op],
        key: &ObjectKey,
        stored: &Stored,
        value: Option<&String>,
        meta: Option<&Metadata>,
    ) -> Result<Planned, WireError> {
        let value = value.unwrap_or(&stored.value);
        let meta = meta.unwrap_or(&stored.meta);
        if stored.deleting_since_ms.is_some() {
            if let Some(new) = meta
                .finalizers
                .iter()
                .find(|f| !stored.meta.finalizers.contains(f))
            {
                return Err(WireError::Invalid(format!(
                    "{key} is marked for deletion: finalizers can be removed, not added ({new})"
                )));
            }
            if meta.finalizers.is_empty() {
                return Ok(Planned::Remove { key: key.clone() });
            }
        }
        self.check_owner(ops, key, stored.meta.owner.as_ref(), meta)?;
        let changed = *value != stored.value || *meta != stored.meta;
        Ok(Planned::Put {
            key: key.clone(),
            row: Row {
                value: value.clone(),
                meta: meta.clone(),
                generation: stored.generation + u64::from(changed),
                ..row_of(stored)
            },
        })
    }

    /// A write that gives `key` an owner it did not have must find the
    /// owner existing, unmarked, and not deleted by this commit.
    fn check_owner(
        &self,
        ops: &[Op],
        key: &ObjectKey,
        had: Option<&ObjectKey>,
        meta: &Metadata,
    ) -> Result<(), WireError> {
        let Some(owner) = &meta.owner else {
            return Ok(());
        };
        if had == Some(owner) {
            return Ok(());
        }
        let created_here = ops.iter().any(|op| {
            matches!(op, Op::Create { key: k, .. } | Op::CreateWith { key: k, .. } if k == owner)
        });
        if created_here {
            return Ok(());
        }
        match self.map.get(owner) {
            None => Err(WireError::Conflict(key.clone())),
            Some(o) if o.deleting_since_ms.is_some() => Err(WireError::Conflict(key.clone())),
            Some(_) if deletes(ops, owner) => Err(WireError::Invalid(format!(
                "the commit deletes {owner} and makes it the owner of {key}"
            ))),
            Some(_) => Ok(()),
        }
    }
}

/// The host's selector bounds: at most [`MAX_SELECTOR_LABELS`] labels of
/// label syntax, a `contains` of at most [`MAX_SELECTOR_CONTAINS_BYTES`] of
/// compact JSON nested at most [`MAX_SELECTOR_CONTAINS_DEPTH`] deep.
fn check_selector(kind: &str, selector: &Selector) -> Result<(), WireError> {
    if selector.labels.len() > MAX_SELECTOR_LABELS {
        return Err(WireError::Invalid(format!(
            "selector for kind {kind} names {} labels; the limit is {MAX_SELECTOR_LABELS}",
            selector.labels.len()
        )));
    }
    for (name, value) in &selector.labels {
        if !qualified(name, MAX_LABEL_KEY_BYTES) {
            return Err(WireError::Invalid(format!(
                "selector for kind {kind}: label key {:?} must be 1 to {MAX_LABEL_KEY_BYTES} \
                 ASCII letters, digits, '-', '_', '.' or '/', beginning and ending with a \
                 letter or digit",
                shown(name)
            )));
        }
        if !label_value(value) {
            return Err(WireError::Invalid(format!(
                "selector for kind {kind}: label {name} has value {:?}; a label value is empty \
                 or 1 to {MAX_LABEL_VALUE_BYTES} ASCII letters, digits, '-', '_' or '.', \
                 beginning and ending with a letter or digit",
                shown(value)
            )));
        }
    }
    if let Some(contains) = &selector.contains {
        if depth(contains, MAX_SELECTOR_CONTAINS_DEPTH + 1) > MAX_SELECTOR_CONTAINS_DEPTH {
            return Err(WireError::Invalid(format!(
                "selector for kind {kind}: contains is nested more than \
                 {MAX_SELECTOR_CONTAINS_DEPTH} arrays or objects deep"
            )));
        }
        if contains.to_string().len() > MAX_SELECTOR_CONTAINS_BYTES {
            return Err(WireError::Invalid(format!(
                "selector for kind {kind}: contains is over {MAX_SELECTOR_CONTAINS_BYTES} bytes \
                 of compact JSON"
            )));
        }
    }
    Ok(())
}

/// How deep `value` nests arrays and objects (a scalar is 0), counted no
/// further than `cap`.
fn depth(value: &serde_json::Value, cap: usize) -> usize {
    if cap == 0 {
        return 0;
    }
    let below = match value {
        serde_json::Value::Array(items) => items.iter().map(|v| depth(v, cap - 1)).max(),
        serde_json::Value::Object(map) => map.values().map(|v| depth(v, cap - 1)).max(),
        _ => return 0,
    };
    1 + below.unwrap_or(0)
}

/// Whether `stored` carries every label of `selector` with its value and
/// its value contains `selector.contains`.
fn selects(selector: &Selector, stored: &Stored) -> bool {
    let labelled = selector
        .labels
        .iter()
        .all(|(name, value)| stored.meta.labels.get(name) == Some(value));
    labelled
        && selector.contains.as_ref().is_none_or(|query| {
            // Stored values were normalized from JSON: they parse.
            serde_json::from_str(&stored.value).is_ok_and(|value| top_contains(&value, query))
        })
}

/// PostgreSQL's `jsonb @>` at the top level: there, and only there, an
/// array contains a scalar it has as an element.
fn top_contains(value: &serde_json::Value, query: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (value, query) {
        (
            Value::Array(items),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_),
        ) => items.iter().any(|item| contains(item, query)),
        _ => contains(value, query),
    }
}

/// Containment below the top level: objects key by key, arrays element by
/// element (each wanted element in some element had), scalars by equality
/// (numbers by value), never across types.
fn contains(value: &serde_json::Value, query: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (value, query) {
        (Value::Object(had), Value::Object(wanted)) => wanted
            .iter()
            .all(|(key, want)| had.get(key).is_some_and(|have| contains(have, want))),
        (Value::Array(had), Value::Array(wanted)) => wanted
            .iter()
            .all(|want| had.iter().any(|have| contains(have, want))),
        (Value::Number(a), Value::Number(b)) => equal_numbers(a, b),
        (Value::Null, Value::Null) => true,
        (Value::Bool(a), Value::Bool(b)) => a == b,
        (Value::String(a), Value::String(b)) => a == b,
        _ => false,
    }
}

/// Numbers by value (`1`, `1.0` and `1e0` are equal): integers exactly,
/// others as doubles.
fn equal_numbers(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    let integer = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (integer(a), integer(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a.as_f64() == b.as_f64(),
    }
}

/// Whether `ops` request the deletion of `key` itself.
fn deletes(ops: &[Op], key: &ObjectKey) -> bool {
    ops.iter()
        .any(|op| matches!(op, Op::Delete { key: k, .. } if k == key))
}

/// A new object's row.
fn created(key: &ObjectKey, value: &str, meta: Metadata) -> Planned {
    Planned::Put {
        key: key.clone(),
        row: Row {
            value: value.to_string(),
            meta,
            status: None,
            generation: 1,
            deleting_since_ms: None,
        },
    }
}

/// `stored` as a row, unchanged.
fn row_of(stored: &Stored) -> Row {
    Row {
        value: stored.value.clone(),
        meta: stored.meta.clone(),
        status: stored.status.clone(),
        generation: stored.generation,
        deleting_since_ms: stored.deleting_since_ms,
    }
}

/// A delete request of `key` as it stands: remove it, mark it, or (already
/// marked) nothing. A first request also queues what it owns for
/// collection.
fn request_delete(
    plan: &mut Plan,
    key: &ObjectKey,
    stored: &Stored,
    now: SystemTime,
) -> Option<Planned> {
    if stored.meta.finalizers.is_empty() {
        plan.pending_owners.push(key.clone());
        return Some(Planned::Remove { key: key.clone() });
    }
    if stored.deleting_since_ms.is_some() {
        return None;
    }
    plan.pending_owners.push(key.clone());
    Some(Planned::Put {
        key: key.clone(),
        row: Row {
            generation: stored.generation + 1,
            deleting_since_ms: Some(millis(now)),
            ..row_of(stored)
        },
    })
}

pub(super) fn raw(key: &ObjectKey, stored: &Stored) -> RawObject {
    RawObject {
        kind: key.kind.clone(),
        name: key.name.clone(),
        version: stored.version,
        value: stored.value.clone(),
        meta: stored.meta.clone(),
        status: stored.status.clone(),
        generation: stored.generation,
        deleting_since_ms: stored.deleting_since_ms,
    }
}
