//! The fake's object store: the real store's preconditions and limits,
//! with none of its durability. Pure data; faults, fences and records
//! live in their own modules. Errors are the wire's, as the host sends
//! them.
//!
//! The rules are the host's own, not a copy: validation, JSON
//! canonicalization and the planning of a commit come from the model crate
//! (`leasehold-model`) that the host's stores use too, so a commit is
//! refused or applied here exactly as there (the conformance table,
//! `tests/conformance/`, runs the same cases against both). This module
//! only keeps the objects, converts between the SDK's wire types and the
//! model's, and numbers what it applies as the host does: a commit's
//! revision, then one position per object change, then one sequence number
//! per event, all from one counter, so sequence numbers have gaps.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::time::{SystemTime, UNIX_EPOCH};

use leasehold_model as model;
use model::limits::Bounds;
use model::plan::{Batch, Current, Intent, Plan, Planned};

use crate::limits::Limits;
use crate::sys::{Metadata, NewEvent, ObjectKey, Op, RawObject, RawPage, Selector, WireError};

/// One stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stored {
    pub version: u64,
    /// Canonical JSON text, as the host stores it.
    pub value: String,
    /// Labels, owner, finalizers.
    pub meta: Metadata,
    /// Canonical JSON text, if a status was written.
    pub status: Option<String>,
    /// 1 at creation; grows with each write of the value or the metadata.
    pub generation: u64,
    /// When it was marked for deletion, in milliseconds since the Unix
    /// epoch (the precision the WIT carries).
    pub deleting_since_ms: Option<u64>,
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
    /// The revision of the last write (a commit, a seed or a removal).
    pub revision: u64,
    /// The last number given out: revisions, change positions and event
    /// sequence numbers all come from it, as from the host's one series.
    pub last: u64,
    /// Every object write, in commit order: the host's change stream
    /// (`watch.rs` maps it to the keys a controller is woken for).
    pub changes: Vec<super::watch::Change>,
}

/// What a commit applied: its revision and its events' sequence numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Applied {
    pub revision: u64,
    pub event_seqs: Vec<u64>,
}

/// A commit whose input the rules accepted: the model's batch, and its
/// operations with canonical values (what the fake records).
#[derive(Debug)]
pub(super) struct Validated {
    pub batch: Batch,
    pub ops: Vec<Op>,
}

/// The model's bounds under the fake's limits.
fn bounds(limits: &Limits) -> Bounds {
    Bounds {
        max_value_bytes: limits.max_value_bytes,
        max_ops_per_commit: limits.max_ops_per_commit,
        max_events_per_commit: limits.max_events_per_commit,
        max_event_reason_bytes: limits.max_event_reason_bytes,
        max_event_message_bytes: limits.max_event_message_bytes,
    }
}

/// A refusal of the rules as the host sends it over the WIT: conflicts and
/// absences name their object, every other refusal is `invalid` with the
/// host's text.
pub(super) fn wire(error: model::Error) -> WireError {
    match error {
        model::Error::Conflict { key, .. } => WireError::Conflict(key_from(key)),
        model::Error::NotFound { key } => WireError::NotFound(key_from(key)),
        model::Error::Inconsistent(_) => WireError::Unavailable(error.to_string()),
        model::Error::Invalid(_) | model::Error::TooLarge(_) => {
            WireError::Invalid(error.to_string())
        }
    }
}

// ----- between the SDK's wire types and the model's ----------------------

fn key_to(key: &ObjectKey) -> model::ObjectKey {
    model::ObjectKey::new(key.kind.clone(), key.name.clone())
}

fn key_from(key: model::ObjectKey) -> ObjectKey {
    ObjectKey::new(key.kind, key.name)
}

fn meta_to(meta: &Metadata) -> model::Metadata {
    model::Metadata {
        labels: meta.labels.clone(),
        owner: meta.owner.as_ref().map(key_to),
        finalizers: meta.finalizers.clone(),
    }
}

fn meta_from(meta: model::Metadata) -> Metadata {
    Metadata {
        labels: meta.labels,
        owner: meta.owner.map(key_from),
        finalizers: meta.finalizers,
    }
}

fn op_to(op: &Op) -> model::Op {
    match op {
        Op::Create { key, value } => model::Op::Create {
            key: key_to(key),
            value: value.clone(),
        },
        Op::Update {
            key,
            expected_version,
            value,
        } => model::Op::Update {
            key: key_to(key),
            expected_version: *expected_version,
            value: value.clone(),
        },
        Op::Delete {
            key,
            expected_version,
        } => model::Op::Delete {
            key: key_to(key),
            expected_version: *expected_version,
        },
        Op::CreateWith { key, value, meta } => model::Op::CreateWith {
            key: key_to(key),
            value: value.clone(),
            meta: meta_to(meta),
        },
        Op::Replace {
            key,
            expected_version,
            value,
            meta,
        } => model::Op::Replace {
            key: key_to(key),
            expected_version: *expected_version,
            value: value.clone(),
            meta: meta.as_ref().map(meta_to),
        },
        Op::Status {
            key,
            expected_generation,
            status,
        } => model::Op::Status {
            key: key_to(key),
            expected_generation: *expected_generation,
            status: status.clone(),
        },
        Op::Check {
            key,
            expected_version,
        } => model::Op::Check {
            key: key_to(key),
            expected_version: *expected_version,
        },
    }
}

fn op_from(op: model::Op) -> Op {
    match op {
        model::Op::Create { key, value } => Op::Create {
            key: key_from(key),
            value,
        },
        model::Op::Update {
            key,
            expected_version,
            value,
        } => Op::Update {
            key: key_from(key),
            expected_version,
            value,
        },
        model::Op::Delete {
            key,
            expected_version,
        } => Op::Delete {
            key: key_from(key),
            expected_version,
        },
        model::Op::CreateWith { key, value, meta } => Op::CreateWith {
            key: key_from(key),
            value,
            meta: meta_from(meta),
        },
        model::Op::Replace {
            key,
            expected_version,
            value,
            meta,
        } => Op::Replace {
            key: key_from(key),
            expected_version,
            value,
            meta: meta.map(meta_from),
        },
        model::Op::Status {
            key,
            expected_generation,
            status,
        } => Op::Status {
            key: key_from(key),
            expected_generation,
            status,
        },
        model::Op::Check {
            key,
            expected_version,
        } => Op::Check {
            key: key_from(key),
            expected_version,
        },
    }
}

fn event_to(event: &NewEvent) -> model::NewEvent {
    model::NewEvent {
        key: key_to(&event.key),
        reason: event.reason.clone(),
        message: event.message.clone(),
    }
}

fn current_of(stored: &Stored) -> Current<u64> {
    Current {
        version: stored.version,
        generation: stored.generation,
        value: stored.value.clone(),
        status: stored.status.clone(),
        meta: meta_to(&stored.meta),
        deleting_since: stored.deleting_since_ms,
    }
}

// ----- the checks of the call itself --------------------------------------

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

/// Check everything about a commit that does not depend on the stored
/// state, in the host's order: the call's payload (the host's runtime
/// bounds it), then the store's rules.
pub(super) fn validate_commit(
    limits: &Limits,
    ops: &[Op],
    events: &[NewEvent],
) -> Result<Validated, WireError> {
    let size = payload_size(ops, events);
    if size > limits.max_call_payload_bytes {
        return Err(WireError::Invalid(format!(
            "host call payload of {size} bytes exceeds the limit of {} bytes",
            limits.max_call_payload_bytes
        )));
    }
    let model_ops: Vec<model::Op> = ops.iter().map(op_to).collect();
    let model_events: Vec<model::NewEvent> = events.iter().map(event_to).collect();
    let batch = Batch::ops(&bounds(limits), &model_ops, &model_events).map_err(wire)?;
    let ops = match &batch.intent {
        Intent::Ops { ops, .. } => ops.iter().cloned().map(op_from).collect(),
        _ => Vec::new(),
    };
    Ok(Validated { batch, ops })
}

impl Objects {
    pub(super) fn get(&self, kind: &str, name: &str) -> Result<Option<RawObject>, WireError> {
        let key = ObjectKey::new(kind, name);
        model::validate::check_key(&key_to(&key)).map_err(wire)?;
        Ok(self.map.get(&key).map(|stored| raw(&key, stored)))
    }

    pub(super) fn list(
        &self,
        limits: &Limits,
        kind: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<RawPage, WireError> {
        self.list_selected(limits, kind, &Selector::default(), after, limit)
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
        let selector = model::Selector {
            labels: selector.labels.clone(),
            contains: selector.contains.clone(),
        };
        model::validate::check_list(kind, after, &selector).map_err(wire)?;
        let limit =
            model::validate::page_limit_within(limit as usize, limits.max_page_size as usize);
        let start = match after {
            Some(after) => Bound::Excluded(ObjectKey::new(kind, after)),
            None => Bound::Included(ObjectKey::new(kind, "")),
        };
        // One more than asked tells whether another page exists.
        let mut objects = Vec::new();
        for (key, stored) in self
            .map
            .range((start, Bound::Unbounded))
            .take_while(|(key, _)| key.kind == kind)
        {
            let selected = model::validate::selects(&selector, &stored.meta.labels, &stored.value)
                .map_err(|e| WireError::Unavailable(format!("a stored value is not JSON ({e})")))?;
            if selected {
                objects.push(raw(key, stored));
                if objects.len() > limit {
                    break;
                }
            }
        }
        let next = if objects.len() > limit {
            objects.truncate(limit);
            objects.last().map(|o| o.name.clone())
        } else {
            None
        };
        Ok(RawPage { objects, next })
    }

    /// How many objects of `kind` the store holds.
    pub(super) fn count(&self, kind: &str) -> u64 {
        self.map
            .range(ObjectKey::new(kind, "")..)
            .take_while(|(key, _)| key.kind == kind)
            .count() as u64
    }

    /// Resolve a validated commit against the stored state (the first
    /// failing operation in input order deciding the error), collect what
    /// the deleted objects own, and apply it all, numbered as the host
    /// numbers it, or nothing. `now` is the commit's time (a deletion
    /// mark's).
    pub(super) fn apply(
        &mut self,
        batch: &Batch,
        events: usize,
        now: SystemTime,
    ) -> Result<Applied, WireError> {
        let plan = self.plan(batch)?;
        Ok(self.commit(plan, events, now))
    }

    /// A user's delete request of `key` through the API (not fenced, no
    /// version check), with the same marking and garbage collection; false
    /// if it does not exist. Like the fake's seeds it records no event.
    pub(super) fn request_delete_by_user(
        &mut self,
        key: &ObjectKey,
        now: SystemTime,
    ) -> Result<bool, WireError> {
        if !self.map.contains_key(key) {
            return Ok(false);
        }
        let batch = Batch::delete(&key_to(key), None).map_err(wire)?;
        let plan = self.plan(&batch)?;
        if !plan.writes.is_empty() {
            self.commit(plan, 0, now);
        }
        Ok(true)
    }

    /// The model's plan of `batch` over the stored state, garbage
    /// collection included.
    fn plan(&self, batch: &Batch) -> Result<Plan<u64>, WireError> {
        let current: HashMap<model::ObjectKey, Current<u64>> = batch
            .keys()
            .into_iter()
            .filter_map(|key| {
                let stored = self.map.get(&key_from(key.clone()))?;
                Some((key.clone(), current_of(stored)))
            })
            .collect();
        let mut plan = batch.resolve(|key| current.get(key)).map_err(wire)?;
        // Garbage collection: the objects owned by each object whose first
        // delete request the plan made, in key order, transitively.
        loop {
            let owners = plan.owners_to_collect();
            if owners.is_empty() {
                return Ok(plan);
            }
            let owned: Vec<(model::ObjectKey, Current<u64>)> = self
                .map
                .iter()
                .filter(|(_, s)| {
                    s.meta
                        .owner
                        .as_ref()
                        .is_some_and(|o| owners.contains(&key_to(o)))
                })
                .map(|(key, stored)| (key_to(key), current_of(stored)))
                .collect();
            plan.collect(batch, owned).map_err(wire)?;
        }
    }

    /// Apply a decided plan: the next number is its revision, then one per
    /// object change, then one per event (`events` of them).
    fn commit(&mut self, plan: Plan<u64>, events: usize, now: SystemTime) -> Applied {
        let mut next = || {
            self.last += 1;
            self.last
        };
        let revision = next();
        let now = millis(now);
        let mut changes = Vec::with_capacity(plan.writes.len());
        for write in &plan.writes {
            let key = key_from(write.key().clone());
            let after = match write {
                Planned::Create { row, .. } | Planned::Update { row, .. } => {
                    Some(meta_from(row.meta.clone()))
                }
                Planned::Delete { .. } => None,
            };
            changes.push((next(), key, after));
        }
        let event_seqs: Vec<u64> = (0..events).map(|_| next()).collect();
        for ((position, key, after), write) in changes.into_iter().zip(plan.writes) {
            let before = self.map.get(&key).map(|stored| &stored.meta);
            let change = super::watch::Change::of(position, revision, &key, before, after.as_ref());
            self.changes.push(change);
            match write {
                Planned::Create { row, .. } | Planned::Update { row, .. } => {
                    let stored = Stored {
                        version: revision,
                        value: row.value,
                        meta: meta_from(row.meta),
                        status: row.status,
                        generation: row.generation,
                        deleting_since_ms: row.deleting.at(now),
                    };
                    self.map.insert(key, stored);
                }
                Planned::Delete { .. } => {
                    self.map.remove(&key);
                }
            }
        }
        self.revision = revision;
        Applied {
            revision,
            event_seqs,
        }
    }
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
