//! What a write means, decided once for both backends: a validated
//! [`Batch`] (a guest's operations, or a user's put, status write or
//! delete) is resolved against the current state of the objects it touches
//! into a [`Plan`] of creates, updates and deletes plus the events to
//! append, or into the typed error of the first operation whose
//! precondition fails.
//!
//! The rules decided here, for both backends:
//!
//! - An update or replace bumps `generation` when the value or metadata
//!   changes; a status write never does; a deletion mark does.
//! - A delete request removes an object without finalizers; one with
//!   finalizers is marked (`deleting_since`, set by the backend to the
//!   commit's time) and stays, readable, until a write leaves it none,
//!   which removes it. A marked object cannot gain finalizers. A delete of
//!   an object already marked writes nothing.
//! - A write that names an owner other than the one the object has must
//!   find that owner existing, unmarked, and not deleted by the same
//!   commit.
//! - Garbage collection: the first delete request of an object (removal or
//!   mark) is also a delete request, in the same commit, for every object
//!   it owns, transitively ([`Plan::owners_to_collect`], [`Plan::collect`]),
//!   at most [`MAX_COLLECTED_PER_COMMIT`] of them. An owned object that the
//!   commit writes otherwise than by deleting it is refused as invalid.
//! - A check writes nothing and fails the commit with `Conflict` unless
//!   the object is at the expected version (0: absent).
//!
//! The backends only supply the current state (the memory backend from its
//! map, PostgreSQL from rows it has locked `FOR UPDATE`), look up owned
//! objects when asked, and apply the plan. Must never: read or write state
//! itself.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use crate::fence::Fence;
use crate::limits::MAX_COLLECTED_PER_COMMIT;

use super::validate::{
    check_cluster, check_counts, check_event, check_fence_names, check_key, check_metadata,
    normalize_status, normalize_value,
};
use super::{ApiWrite, Metadata, NewEvent, Object, ObjectKey, Op, Origin, StoreError, Written};

/// A write request whose names, values, sizes and counts are valid. Values
/// are already normalized.
#[derive(Debug)]
pub(crate) struct Batch {
    /// Which cluster's state.
    pub cluster: String,
    /// Who writes: recorded on every object and event it writes.
    pub origin: Origin,
    /// What to do.
    pub intent: Intent,
}

/// The shape of a write.
#[derive(Debug)]
pub(crate) enum Intent {
    /// A guest's (or API batch's) operations and events, applied as given.
    Ops {
        /// Operations, values normalized, each object at most once.
        ops: Vec<Op>,
        /// Events to append, in order.
        events: Vec<NewEvent>,
    },
    /// A user's create-or-replace.
    Put {
        /// Where.
        key: ObjectKey,
        /// Normalized JSON text.
        value: String,
        /// `None` keeps the metadata (a create then has none).
        meta: Option<Metadata>,
        /// `None`: whatever is there; `Some(0)`: must not exist;
        /// `Some(v)`: must be at version `v`.
        expected: Option<u64>,
    },
    /// A user's status write.
    Status {
        /// Where.
        key: ObjectKey,
        /// Normalized JSON text, or clear.
        status: Option<String>,
        /// Must still be this generation, if given.
        expected_generation: Option<u64>,
    },
    /// A user's delete request.
    Delete {
        /// Where.
        key: ObjectKey,
        /// `None`: whatever is there; `Some(v)`: must be at version `v`.
        expected: Option<u64>,
    },
}

/// An object as it stands before the write, as the backend read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Current {
    /// Its version.
    pub version: u64,
    /// Its generation.
    pub generation: u64,
    /// Normalized JSON text.
    pub value: String,
    /// Normalized JSON text, if any.
    pub status: Option<String>,
    /// Labels, owner, finalizers.
    pub meta: Metadata,
    /// Set when marked for deletion.
    pub deleting_since: Option<DateTime<Utc>>,
}

impl Current {
    /// The object this state is, at its current version.
    pub fn object(&self, key: &ObjectKey) -> Object {
        Object {
            kind: key.kind.clone(),
            name: key.name.clone(),
            version: self.version,
            value: self.value.clone(),
            meta: self.meta.clone(),
            generation: self.generation,
            status: self.status.clone(),
            deleting_since: self.deleting_since,
        }
    }
}

/// Whether an object a plan writes is marked for deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deleting {
    /// Not marked.
    No,
    /// Marked earlier, at this time; it stays so.
    Since(DateTime<Utc>),
    /// Marked by this commit, at the commit's time.
    Now,
}

impl Deleting {
    /// The mark's time, given the commit's.
    pub fn at(self, commit: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Deleting::No => None,
            Deleting::Since(at) => Some(at),
            Deleting::Now => Some(commit),
        }
    }
}

/// Everything a create or update writes of an object (the version is the
/// commit's revision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    /// Normalized JSON text.
    pub value: String,
    /// Normalized JSON text, if any.
    pub status: Option<String>,
    /// Labels, owner, finalizers.
    pub meta: Metadata,
    /// The generation after the write.
    pub generation: u64,
    /// The deletion mark after the write.
    pub deleting: Deleting,
}

impl Row {
    /// The object `key` this row makes, given the commit's revision and
    /// time.
    fn object(&self, key: &ObjectKey, revision: u64, at: DateTime<Utc>) -> Object {
        Object {
            kind: key.kind.clone(),
            name: key.name.clone(),
            version: revision,
            value: self.value.clone(),
            meta: self.meta.clone(),
            generation: self.generation,
            status: self.status.clone(),
            deleting_since: self.deleting.at(at),
        }
    }
}

/// One write of a resolved plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Planned {
    /// Insert a new object.
    Create {
        /// Where.
        key: ObjectKey,
        /// What.
        row: Row,
    },
    /// Rewrite an existing object (whose preconditions held).
    Update {
        /// Where.
        key: ObjectKey,
        /// What it becomes.
        row: Row,
    },
    /// Remove an existing object.
    Delete {
        /// Where.
        key: ObjectKey,
        /// The version it had.
        version: u64,
    },
}

impl Planned {
    /// The object written.
    pub fn key(&self) -> &ObjectKey {
        match self {
            Planned::Create { key, .. }
            | Planned::Update { key, .. }
            | Planned::Delete { key, .. } => key,
        }
    }
}

/// What a user's write did to its object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Created.
    Created,
    /// Rewritten.
    Replaced,
    /// Marked for deletion by this commit.
    Marked,
    /// Already marked; nothing written to it.
    Unchanged(Box<Object>),
    /// Removed.
    Removed,
}

/// What a batch does, given the current state.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Writes, in input order, then garbage collection's in the order
    /// found.
    pub writes: Vec<Planned>,
    /// Events to append, in input order.
    pub events: Vec<NewEvent>,
    /// For a user's write: what it did to the object it names.
    pub answer: Option<Answer>,
    /// Objects whose first delete request this plan made and whose owned
    /// objects were not looked up yet.
    pending_owners: Vec<ObjectKey>,
    /// Objects deleted or marked by garbage collection so far.
    collected: usize,
}

impl Plan {
    fn new(events: Vec<NewEvent>) -> Self {
        Self {
            writes: Vec::new(),
            events,
            answer: None,
            pending_owners: Vec::new(),
            collected: 0,
        }
    }

    /// The objects whose owned objects the backend must look up (and lock)
    /// next and pass to [`Plan::collect`]; empty when collection is done.
    pub fn owners_to_collect(&mut self) -> Vec<ObjectKey> {
        std::mem::take(&mut self.pending_owners)
    }

    /// Request deletion of `owned`, the objects owned by the last
    /// [`Plan::owners_to_collect`] (each with its current state), except
    /// those this commit deletes already.
    pub fn collect(
        &mut self,
        batch: &Batch,
        owned: Vec<(ObjectKey, Current)>,
    ) -> Result<(), StoreError> {
        for (key, current) in owned {
            if self.writes.iter().any(|w| w.key() == &key) {
                if batch.deletes(&key) {
                    continue;
                }
                let owner = current
                    .meta
                    .owner
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string);
                return Err(StoreError::Invalid(format!(
                    "the commit deletes {owner}, which owns {key}, and also writes {key}: delete {key} too, or write it in another commit"
                )));
            }
            if batch.names(&key) {
                // Checked, not written: a check and a collection of one
                // object in one commit would contradict each other.
                return Err(StoreError::Invalid(format!(
                    "the commit checks {key} and deletes its owner; check or delete, not both"
                )));
            }
            self.collected += 1;
            if self.collected > MAX_COLLECTED_PER_COMMIT {
                return Err(StoreError::TooLarge(format!(
                    "deleting {} would delete or mark more than {MAX_COLLECTED_PER_COMMIT} owned objects in one commit; delete owned objects first",
                    batch
                        .keys()
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            if let Some(write) = self.request_delete(&key, &current) {
                self.writes.push(write);
            }
        }
        Ok(())
    }

    /// A delete request of `key` as it stands: remove it, mark it, or
    /// (already marked) nothing. A first request also collects what it
    /// owns.
    fn request_delete(&mut self, key: &ObjectKey, current: &Current) -> Option<Planned> {
        if current.meta.finalizers.is_empty() {
            self.pending_owners.push(key.clone());
            return Some(Planned::Delete {
                key: key.clone(),
                version: current.version,
            });
        }
        if current.deleting_since.is_some() {
            return None;
        }
        self.pending_owners.push(key.clone());
        Some(Planned::Update {
            key: key.clone(),
            row: Row {
                value: current.value.clone(),
                status: current.status.clone(),
                meta: current.meta.clone(),
                generation: current.generation + 1,
                deleting: Deleting::Now,
            },
        })
    }

    /// Every object this plan writes, as it leaves it given the commit's
    /// revision and time (`None`: removed), in the order written.
    pub fn written(&self, revision: u64, at: DateTime<Utc>) -> Vec<(ObjectKey, Option<Object>)> {
        self.writes
            .iter()
            .map(|write| match write {
                Planned::Create { key, row } | Planned::Update { key, row } => {
                    (key.clone(), Some(row.object(key, revision, at)))
                }
                Planned::Delete { key, .. } => (key.clone(), None),
            })
            .collect()
    }

    /// The object `key` as this plan leaves it, given the commit's revision
    /// and time; `None` if the plan removes it or does not write it.
    pub fn object(&self, key: &ObjectKey, revision: u64, at: DateTime<Utc>) -> Option<Object> {
        self.writes.iter().find_map(|write| match write {
            Planned::Create { key: k, row } | Planned::Update { key: k, row } if k == key => {
                Some(row.object(k, revision, at))
            }
            _ => None,
        })
    }
}

impl Batch {
    /// A guest's fenced commit.
    pub fn fenced(fence: &Fence, ops: &[Op], events: &[NewEvent]) -> Result<Self, StoreError> {
        check_fence_names(fence)?;
        let origin = Origin::Guest {
            lease: fence.key.name.clone(),
            epoch: fence.epoch,
            holder: fence.holder.clone(),
        };
        Self::ops(&fence.key.cluster, origin, ops, events)
    }

    /// A batch of operations attributed to `origin`.
    pub fn ops(
        cluster: &str,
        origin: Origin,
        ops: &[Op],
        events: &[NewEvent],
    ) -> Result<Self, StoreError> {
        check_cluster(cluster)?;
        check_counts(ops.len(), events.len())?;
        let mut seen = HashSet::with_capacity(ops.len());
        let mut normalized = Vec::with_capacity(ops.len());
        for op in ops {
            let key = op.key();
            check_key(key)?;
            // One operation per object keeps a commit's meaning independent
            // of the order its operations are applied in.
            if !seen.insert(key) {
                return Err(StoreError::Invalid(format!(
                    "{key} appears in more than one operation of the commit"
                )));
            }
            normalized.push(normalize_op(op)?);
        }
        for event in events {
            check_event(event)?;
        }
        Ok(Self {
            cluster: cluster.to_string(),
            origin,
            intent: Intent::Ops {
                ops: normalized,
                events: events.to_vec(),
            },
        })
    }

    /// A user's create-or-replace of the value, keeping the metadata.
    pub fn put(
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        expected: Option<u64>,
    ) -> Result<Self, StoreError> {
        Self::put_with(cluster, key, value, None, expected)
    }

    /// A user's create-or-replace of the value and, if given, the
    /// metadata.
    pub fn put_with(
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        meta: Option<&Metadata>,
        expected: Option<u64>,
    ) -> Result<Self, StoreError> {
        check_cluster(cluster)?;
        check_key(key)?;
        if let Some(meta) = meta {
            check_metadata(key, meta)?;
        }
        Ok(Self {
            cluster: cluster.to_string(),
            origin: Origin::api(),
            intent: Intent::Put {
                key: key.clone(),
                value: normalize_value(key, value)?,
                meta: meta.cloned(),
                expected,
            },
        })
    }

    /// A user's status write.
    pub fn status(
        cluster: &str,
        key: &ObjectKey,
        status: Option<&str>,
        expected_generation: Option<u64>,
    ) -> Result<Self, StoreError> {
        check_cluster(cluster)?;
        check_key(key)?;
        Ok(Self {
            cluster: cluster.to_string(),
            origin: Origin::api(),
            intent: Intent::Status {
                key: key.clone(),
                status: status.map(|s| normalize_status(key, s)).transpose()?,
                expected_generation,
            },
        })
    }

    /// A user's delete.
    pub fn delete(
        cluster: &str,
        key: &ObjectKey,
        expected: Option<u64>,
    ) -> Result<Self, StoreError> {
        check_cluster(cluster)?;
        check_key(key)?;
        Ok(Self {
            cluster: cluster.to_string(),
            origin: Origin::api(),
            intent: Intent::Delete {
                key: key.clone(),
                expected,
            },
        })
    }

    /// The objects whose current state the backend must read (and, for
    /// PostgreSQL, lock) before [`Batch::resolve`]: every object the batch
    /// names, then every owner it names in metadata, without repeats.
    pub fn keys(&self) -> Vec<&ObjectKey> {
        let mut keys: Vec<&ObjectKey> = match &self.intent {
            Intent::Ops { ops, .. } => ops.iter().map(Op::key).collect(),
            Intent::Put { key, .. } | Intent::Status { key, .. } | Intent::Delete { key, .. } => {
                vec![key]
            }
        };
        for owner in self.owners() {
            if !keys.contains(&owner) {
                keys.push(owner);
            }
        }
        keys
    }

    /// Owners named by the metadata this batch writes.
    fn owners(&self) -> Vec<&ObjectKey> {
        let metas: Vec<&Metadata> = match &self.intent {
            Intent::Ops { ops, .. } => ops
                .iter()
                .filter_map(|op| match op {
                    Op::CreateWith { meta, .. }
                    | Op::Replace {
                        meta: Some(meta), ..
                    } => Some(meta),
                    _ => None,
                })
                .collect(),
            Intent::Put {
                meta: Some(meta), ..
            } => vec![meta],
            _ => Vec::new(),
        };
        metas.into_iter().filter_map(|m| m.owner.as_ref()).collect()
    }

    /// Whether this batch names `key` in one of its operations.
    fn names(&self, key: &ObjectKey) -> bool {
        match &self.intent {
            Intent::Ops { ops, .. } => ops.iter().any(|op| op.key() == key),
            Intent::Put { key: k, .. }
            | Intent::Status { key: k, .. }
            | Intent::Delete { key: k, .. } => k == key,
        }
    }

    /// Whether this batch creates `key`.
    fn creates(&self, key: &ObjectKey) -> bool {
        match &self.intent {
            Intent::Ops { ops, .. } => ops.iter().any(|op| op.creates() == Some(key)),
            _ => false,
        }
    }

    /// Whether this batch requests the deletion of `key` itself.
    fn deletes(&self, key: &ObjectKey) -> bool {
        match &self.intent {
            Intent::Ops { ops, .. } => ops
                .iter()
                .any(|op| matches!(op, Op::Delete { key: k, .. } if k == key)),
            Intent::Delete { key: k, .. } => k == key,
            _ => false,
        }
    }

    /// The objects this batch may create (a guest's creates, a user's
    /// put) or checks to be absent: the names whose creation the
    /// PostgreSQL backend serializes.
    pub fn may_create(&self) -> Vec<&ObjectKey> {
        match &self.intent {
            Intent::Ops { ops, .. } => ops
                .iter()
                .filter(|op| {
                    matches!(
                        op,
                        Op::Create { .. }
                            | Op::CreateWith { .. }
                            | Op::Check {
                                expected_version: 0,
                                ..
                            }
                    )
                })
                .map(Op::key)
                .collect(),
            Intent::Put { key, .. } => vec![key],
            Intent::Status { .. } | Intent::Delete { .. } => Vec::new(),
        }
    }

    /// Whether a create found taken at write time (after the object was
    /// seen absent) should be retried rather than reported: only for an
    /// unconditional put, which means "whatever is there".
    pub fn retries_lost_create(&self) -> bool {
        matches!(self.intent, Intent::Put { expected: None, .. })
    }

    /// Check every precondition against `current` (the state of each object
    /// of [`Batch::keys`] that exists) and decide the writes and events.
    /// The first failing operation, in input order, decides the error.
    /// Garbage collection continues with [`Plan::owners_to_collect`].
    pub fn resolve<'c>(
        &self,
        current: impl Fn(&ObjectKey) -> Option<&'c Current>,
    ) -> Result<Plan, StoreError> {
        match &self.intent {
            Intent::Ops { ops, events } => {
                let mut plan = Plan::new(events.clone());
                for op in ops {
                    if let Some(write) = self.resolve_op(&mut plan, op, &current)? {
                        plan.writes.push(write);
                    }
                }
                Ok(plan)
            }
            Intent::Put {
                key,
                value,
                meta,
                expected,
            } => {
                let found = current(key);
                let mut plan = Plan::new(Vec::new());
                match (found, *expected) {
                    (Some(c), Some(0)) => {
                        return Err(conflict(
                            key,
                            format!("expected it not to exist, found version {}", c.version),
                        ));
                    }
                    (Some(c), Some(want)) if c.version != want => {
                        return Err(mismatch(key, want, c.version));
                    }
                    (Some(c), _) => {
                        let write = self.rewrite(key, c, Some(value), meta.as_ref(), &current)?;
                        let (answer, event) = match &write {
                            Planned::Delete { .. } => (
                                Answer::Removed,
                                api_event(
                                    key,
                                    "Deleted",
                                    format!(
                                        "removed at version {} (its last finalizer was removed)",
                                        c.version
                                    ),
                                ),
                            ),
                            _ => (
                                Answer::Replaced,
                                api_event(
                                    key,
                                    "Updated",
                                    format!("replaced version {}", c.version),
                                ),
                            ),
                        };
                        plan.writes.push(write);
                        plan.answer = Some(answer);
                        plan.events.push(event);
                    }
                    (None, None | Some(0)) => {
                        let meta = meta.clone().unwrap_or_default();
                        self.check_owner(key, None, &meta, &current)?;
                        plan.writes.push(created(key, value.clone(), meta));
                        plan.answer = Some(Answer::Created);
                        plan.events
                            .push(api_event(key, "Created", "created".to_string()));
                    }
                    (None, Some(_)) => return Err(StoreError::NotFound { key: key.clone() }),
                }
                Ok(plan)
            }
            Intent::Status {
                key,
                status,
                expected_generation,
            } => {
                let Some(c) = current(key) else {
                    return Err(StoreError::NotFound { key: key.clone() });
                };
                let mut plan = Plan::new(Vec::new());
                plan.writes
                    .push(status_write(key, c, *expected_generation, status.clone())?);
                plan.answer = Some(Answer::Replaced);
                plan.events.push(api_event(
                    key,
                    "StatusUpdated",
                    format!("status written at generation {}", c.generation),
                ));
                Ok(plan)
            }
            Intent::Delete { key, expected } => {
                let Some(c) = current(key) else {
                    return Err(StoreError::NotFound { key: key.clone() });
                };
                if let Some(want) = *expected
                    && want != c.version
                {
                    return Err(mismatch(key, want, c.version));
                }
                let mut plan = Plan::new(Vec::new());
                let write = plan.request_delete(key, c);
                let (answer, event) = match &write {
                    Some(Planned::Delete { .. }) => (
                        Answer::Removed,
                        api_event(key, "Deleted", format!("deleted at version {}", c.version)),
                    ),
                    Some(_) => (
                        Answer::Marked,
                        api_event(
                            key,
                            "DeletionRequested",
                            format!(
                                "deletion requested at version {}; held by finalizers {}",
                                c.version,
                                c.meta.finalizers.join(", ")
                            ),
                        ),
                    ),
                    None => (
                        Answer::Unchanged(Box::new(c.object(key))),
                        api_event(
                            key,
                            "DeletionRequested",
                            format!(
                                "deletion requested again at version {}; held by finalizers {}",
                                c.version,
                                c.meta.finalizers.join(", ")
                            ),
                        ),
                    ),
                };
                plan.writes.extend(write);
                plan.answer = Some(answer);
                plan.events.push(event);
                Ok(plan)
            }
        }
    }

    fn resolve_op<'c>(
        &self,
        plan: &mut Plan,
        op: &Op,
        current: &impl Fn(&ObjectKey) -> Option<&'c Current>,
    ) -> Result<Option<Planned>, StoreError> {
        let key = op.key();
        let found = current(key);
        match (op, found) {
            (
                Op::Check {
                    expected_version, ..
                },
                found,
            ) => match (found.map(|c| c.version), *expected_version) {
                (None, 0) => Ok(None),
                (Some(v), w) if v == w => Ok(None),
                (Some(v), 0) => Err(conflict(
                    key,
                    format!("checked to be absent, found version {v}"),
                )),
                (None, w) => Err(conflict(
                    key,
                    format!("checked to be at version {w}, found it absent"),
                )),
                (Some(v), w) => Err(mismatch(key, w, v)),
            },
            (Op::Create { .. } | Op::CreateWith { .. }, Some(c)) => Err(conflict(
                key,
                format!("it already exists at version {}", c.version),
            )),
            (Op::Create { value, .. }, None) => {
                Ok(Some(created(key, value.clone(), Metadata::default())))
            }
            (Op::CreateWith { value, meta, .. }, None) => {
                self.check_owner(key, None, meta, current)?;
                Ok(Some(created(key, value.clone(), meta.clone())))
            }
            (
                Op::Update { .. } | Op::Replace { .. } | Op::Delete { .. } | Op::Status { .. },
                None,
            ) => Err(StoreError::NotFound { key: key.clone() }),
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
                Some(c),
            ) if *expected_version != c.version => Err(mismatch(key, *expected_version, c.version)),
            (Op::Update { value, .. }, Some(c)) => {
                self.rewrite(key, c, Some(value), None, current).map(Some)
            }
            (Op::Replace { value, meta, .. }, Some(c)) => self
                .rewrite(key, c, value.as_ref(), meta.as_ref(), current)
                .map(Some),
            (Op::Delete { .. }, Some(c)) => Ok(plan.request_delete(key, c)),
            (
                Op::Status {
                    expected_generation,
                    status,
                    ..
                },
                Some(c),
            ) => status_write(key, c, *expected_generation, status.clone()).map(Some),
        }
    }

    /// The write of a new value and/or metadata over `c`: an update, or the
    /// removal of a marked object left without finalizers.
    fn rewrite<'c>(
        &self,
        key: &ObjectKey,
        c: &Current,
        value: Option<&String>,
        meta: Option<&Metadata>,
        current: &impl Fn(&ObjectKey) -> Option<&'c Current>,
    ) -> Result<Planned, StoreError> {
        let value = value.unwrap_or(&c.value);
        let meta = meta.unwrap_or(&c.meta);
        if let Some(since) = c.deleting_since {
            if let Some(new) = meta
                .finalizers
                .iter()
                .find(|f| !c.meta.finalizers.contains(f))
            {
                return Err(StoreError::Invalid(format!(
                    "{key} is marked for deletion (since {}): finalizers can be removed, not added ({new})",
                    since.to_rfc3339()
                )));
            }
            if meta.finalizers.is_empty() {
                return Ok(Planned::Delete {
                    key: key.clone(),
                    version: c.version,
                });
            }
        }
        self.check_owner(key, c.meta.owner.as_ref(), meta, current)?;
        let changed = *value != c.value || *meta != c.meta;
        Ok(Planned::Update {
            key: key.clone(),
            row: Row {
                value: value.clone(),
                status: c.status.clone(),
                meta: meta.clone(),
                generation: c.generation + u64::from(changed),
                deleting: c.deleting_since.map_or(Deleting::No, Deleting::Since),
            },
        })
    }

    /// A write that gives `key` an owner it did not have must find the
    /// owner existing, unmarked, and not deleted by this commit.
    fn check_owner<'c>(
        &self,
        key: &ObjectKey,
        had: Option<&ObjectKey>,
        meta: &Metadata,
        current: &impl Fn(&ObjectKey) -> Option<&'c Current>,
    ) -> Result<(), StoreError> {
        let Some(owner) = &meta.owner else {
            return Ok(());
        };
        if had == Some(owner) {
            return Ok(());
        }
        if self.creates(owner) {
            return Ok(());
        }
        match current(owner) {
            None => Err(conflict(key, format!("its owner {owner} does not exist"))),
            Some(o) if o.deleting_since.is_some() => Err(conflict(
                key,
                format!("its owner {owner} is marked for deletion"),
            )),
            Some(_) if self.deletes(owner) => Err(StoreError::Invalid(format!(
                "the commit deletes {owner} and makes it the owner of {key}"
            ))),
            Some(_) => Ok(()),
        }
    }
}

/// The batch of a user's [`ApiWrite`].
pub(crate) fn api_batch(cluster: &str, write: &ApiWrite) -> Result<Batch, StoreError> {
    match write {
        ApiWrite::Put {
            key,
            value,
            meta,
            expected_version,
        } => Batch::put_with(cluster, key, value, meta.as_ref(), *expected_version),
        ApiWrite::Status {
            key,
            status,
            expected_generation,
        } => Batch::status(cluster, key, status.as_deref(), *expected_generation),
        ApiWrite::Delete {
            key,
            expected_version,
        } => Batch::delete(cluster, key, *expected_version),
    }
}

/// What a committed user's write did to the object it names, given the
/// commit's revision and time.
pub(crate) fn written(
    batch: &Batch,
    plan: Plan,
    revision: u64,
    at: DateTime<Utc>,
) -> Result<Written, StoreError> {
    let key = match &batch.intent {
        Intent::Put { key, .. } | Intent::Status { key, .. } | Intent::Delete { key, .. } => key,
        Intent::Ops { .. } => {
            return Err(StoreError::Invalid(
                "a batch of operations has no single answer".into(),
            ));
        }
    };
    let object = || {
        plan.object(key, revision, at).ok_or_else(|| {
            StoreError::Unavailable(format!(
                "the write of {key} in cluster {} committed at revision {revision} but its object is not in the plan",
                batch.cluster
            ))
        })
    };
    Ok(match &plan.answer {
        Some(Answer::Created) => Written::Created(object()?),
        Some(Answer::Replaced) => Written::Replaced(object()?),
        Some(Answer::Marked) => Written::Marked(object()?),
        Some(Answer::Unchanged(current)) => Written::Marked((**current).clone()),
        Some(Answer::Removed) => Written::Removed,
        None => {
            return Err(StoreError::Invalid(format!(
                "the write of {key} has no answer"
            )));
        }
    })
}

/// Values and statuses normalized, metadata checked.
fn normalize_op(op: &Op) -> Result<Op, StoreError> {
    Ok(match op {
        Op::Create { key, value } => Op::Create {
            key: key.clone(),
            value: normalize_value(key, value)?,
        },
        Op::Update {
            key,
            expected_version,
            value,
        } => Op::Update {
            key: key.clone(),
            expected_version: *expected_version,
            value: normalize_value(key, value)?,
        },
        Op::CreateWith { key, value, meta } => {
            check_metadata(key, meta)?;
            Op::CreateWith {
                key: key.clone(),
                value: normalize_value(key, value)?,
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
                return Err(StoreError::Invalid(format!(
                    "a replace of {key} needs a value, metadata or both"
                )));
            }
            Op::Replace {
                key: key.clone(),
                expected_version: *expected_version,
                value: value
                    .as_deref()
                    .map(|v| normalize_value(key, v))
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
                .map(|s| normalize_status(key, s))
                .transpose()?,
        },
        Op::Delete { .. } | Op::Check { .. } => op.clone(),
    })
}

fn created(key: &ObjectKey, value: String, meta: Metadata) -> Planned {
    Planned::Create {
        key: key.clone(),
        row: Row {
            value,
            status: None,
            meta,
            generation: 1,
            deleting: Deleting::No,
        },
    }
}

fn status_write(
    key: &ObjectKey,
    c: &Current,
    expected_generation: Option<u64>,
    status: Option<String>,
) -> Result<Planned, StoreError> {
    if let Some(want) = expected_generation
        && want != c.generation
    {
        return Err(conflict(
            key,
            format!(
                "expected generation {want}, found generation {}",
                c.generation
            ),
        ));
    }
    Ok(Planned::Update {
        key: key.clone(),
        row: Row {
            value: c.value.clone(),
            status,
            meta: c.meta.clone(),
            generation: c.generation,
            deleting: c.deleting_since.map_or(Deleting::No, Deleting::Since),
        },
    })
}

fn conflict(key: &ObjectKey, reason: String) -> StoreError {
    StoreError::Conflict {
        key: key.clone(),
        reason,
    }
}

fn mismatch(key: &ObjectKey, expected: u64, found: u64) -> StoreError {
    conflict(
        key,
        format!("expected version {expected}, found version {found}"),
    )
}

/// The event every API write appends, so users' changes show in the same
/// log as guests' (reason `Created`, `Updated`, `StatusUpdated`, `Deleted`
/// or `DeletionRequested`).
fn api_event(key: &ObjectKey, reason: &str, what: String) -> NewEvent {
    NewEvent {
        key: key.clone(),
        reason: reason.to_string(),
        message: format!("{key} {what} through the API"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::{Epoch, LeaseKey};

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            kind: "tasks".into(),
            name: name.into(),
        }
    }

    fn fence() -> Fence {
        Fence {
            key: LeaseKey::new("c1", "scheduler"),
            epoch: Epoch(3),
            holder: "host-a".into(),
        }
    }

    fn at(version: u64) -> Current {
        Current {
            version,
            generation: 1,
            value: "{}".into(),
            status: None,
            meta: Metadata::default(),
            deleting_since: None,
        }
    }

    #[test]
    fn an_object_may_appear_once_per_commit() {
        let ops = [
            Op::Create {
                key: key("a"),
                value: "1".into(),
            },
            Op::Check {
                key: key("a"),
                expected_version: 0,
            },
        ];
        let err = Batch::fenced(&fence(), &ops, &[]).unwrap_err();
        assert!(
            matches!(&err, StoreError::Invalid(m) if m.contains("tasks/a")),
            "{err}"
        );
    }

    #[test]
    fn bad_fence_names_are_invalid() {
        let mut bad = fence();
        bad.key.cluster = "Not_A_Label".into();
        let ops = [Op::Create {
            key: key("a"),
            value: "1".into(),
        }];
        assert!(matches!(
            Batch::fenced(&bad, &ops, &[]),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn the_first_failing_operation_decides_the_error() {
        let ops = [
            Op::Create {
                key: key("a"),
                value: "1".into(),
            },
            Op::Update {
                key: key("b"),
                expected_version: 4,
                value: "2".into(),
            },
            Op::Delete {
                key: key("c"),
                expected_version: 9,
            },
        ];
        let batch = Batch::fenced(&fence(), &ops, &[]).unwrap();
        let (b5, b4, c9) = (at(5), at(4), at(9));
        let err = batch
            .resolve(|k| match k.name.as_str() {
                "b" => Some(&b5),
                _ => None,
            })
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Conflict { key, reason } if key.name == "b" && reason.contains("expected version 4, found version 5")),
            "{err}"
        );
        let err = batch
            .resolve(|k| (k.name == "b").then_some(&b4))
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::NotFound { key } if key.name == "c"),
            "{err}"
        );
        let plan = batch
            .resolve(|k| match k.name.as_str() {
                "b" => Some(&b4),
                "c" => Some(&c9),
                _ => None,
            })
            .unwrap();
        let kinds: Vec<(&str, &str)> = plan
            .writes
            .iter()
            .map(|w| match w {
                Planned::Create { key, .. } => ("create", key.name.as_str()),
                Planned::Update { key, .. } => ("update", key.name.as_str()),
                Planned::Delete { key, .. } => ("delete", key.name.as_str()),
            })
            .collect();
        assert_eq!(kinds, [("create", "a"), ("update", "b"), ("delete", "c")]);
    }

    #[test]
    fn puts_resolve_by_expected_version() {
        let put = |expected| Batch::put("c1", &key("a"), "{}", expected).unwrap();
        let seven = at(7);
        for (batch, current, want) in [
            (put(None), None, Ok("Created")),
            (put(None), Some(&seven), Ok("Updated")),
            (put(Some(0)), None, Ok("Created")),
            (put(Some(0)), Some(&seven), Err("conflict")),
            (put(Some(7)), Some(&seven), Ok("Updated")),
            (put(Some(6)), Some(&seven), Err("conflict")),
            (put(Some(7)), None, Err("not found")),
        ] {
            let got = batch.resolve(|_| current);
            match (got, want) {
                (Ok(plan), Ok(reason)) => assert_eq!(plan.events[0].reason, reason),
                (Err(StoreError::Conflict { .. }), Err("conflict")) => {}
                (Err(StoreError::NotFound { .. }), Err("not found")) => {}
                (got, want) => panic!("{batch:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn generation_grows_with_value_or_metadata_only() {
        let c = at(3);
        let same = Batch::put("c1", &key("a"), "{}", None).unwrap();
        let plan = same.resolve(|_| Some(&c)).unwrap();
        assert!(matches!(&plan.writes[0], Planned::Update { row, .. } if row.generation == 1));
        let other = Batch::put("c1", &key("a"), "{\"x\":1}", None).unwrap();
        let plan = other.resolve(|_| Some(&c)).unwrap();
        assert!(matches!(&plan.writes[0], Planned::Update { row, .. } if row.generation == 2));
        let labelled = Metadata {
            labels: [("app".to_string(), "web".to_string())].into(),
            ..Metadata::default()
        };
        let meta = Batch::put_with("c1", &key("a"), "{}", Some(&labelled), None).unwrap();
        let plan = meta.resolve(|_| Some(&c)).unwrap();
        assert!(matches!(&plan.writes[0], Planned::Update { row, .. } if row.generation == 2));
        let status = Batch::status("c1", &key("a"), Some("{\"ok\":true}"), Some(1)).unwrap();
        let plan = status.resolve(|_| Some(&c)).unwrap();
        assert!(
            matches!(&plan.writes[0], Planned::Update { row, .. } if row.generation == 1 && row.status.as_deref() == Some("{\"ok\":true}"))
        );
        let stale = Batch::status("c1", &key("a"), None, Some(2)).unwrap();
        assert!(matches!(
            stale.resolve(|_| Some(&c)),
            Err(StoreError::Conflict { .. })
        ));
    }

    #[test]
    fn deletes_mark_objects_with_finalizers() {
        let mut held = at(4);
        held.meta.finalizers = vec!["example.com/cleanup".into()];
        let delete = Batch::delete("c1", &key("a"), None).unwrap();
        let plan = delete.resolve(|_| Some(&held)).unwrap();
        assert_eq!(plan.answer, Some(Answer::Marked));
        assert!(
            matches!(&plan.writes[0], Planned::Update { row, .. } if row.deleting == Deleting::Now && row.generation == 2)
        );
        held.deleting_since = Some(Utc::now());
        let plan = delete.resolve(|_| Some(&held)).unwrap();
        assert!(plan.writes.is_empty());
        assert!(matches!(plan.answer, Some(Answer::Unchanged(_))));
        let released =
            Batch::put_with("c1", &key("a"), "{}", Some(&Metadata::default()), None).unwrap();
        let plan = released.resolve(|_| Some(&held)).unwrap();
        assert_eq!(plan.answer, Some(Answer::Removed));
        assert!(matches!(
            &plan.writes[0],
            Planned::Delete { version: 4, .. }
        ));
        let more = Metadata {
            finalizers: vec!["example.com/cleanup".into(), "other".into()],
            ..Metadata::default()
        };
        let adding = Batch::put_with("c1", &key("a"), "{}", Some(&more), None).unwrap();
        assert!(matches!(
            adding.resolve(|_| Some(&held)),
            Err(StoreError::Invalid(_))
        ));
    }
}
