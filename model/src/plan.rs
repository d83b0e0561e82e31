//! What a write means, decided once for every backend: a validated
//! [`Batch`] (a guest's operations, or a user's put, status write or
//! delete) is resolved against the current state of the objects it touches
//! into a [`Plan`] of creates, updates and deletes plus the events to
//! append, or into the typed error of the first operation whose
//! precondition fails.
//!
//! The rules decided here:
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
//! - A status write's only precondition is the generation it was computed
//!   from (a guest's and a user's alike): it never conflicts with another
//!   status write.
//!
//! `T` is the backend's time of a deletion mark: the plan never reads a
//! clock, it says [`Deleting::Now`] and the backend stamps its commit's
//! time. The backends only supply the current state (the memory backend
//! from its map, PostgreSQL from rows it has locked `FOR UPDATE`), look up
//! owned objects when asked, and apply the plan. Must never: read or write
//! state itself.

use std::collections::HashSet;

use crate::limits::{Bounds, MAX_COLLECTED_PER_COMMIT};
use crate::validate::{
    check_counts, check_event, check_key, check_metadata, normalize_status, normalize_value,
};
use crate::{ApiWrite, Error, Metadata, NewEvent, Object, ObjectKey, Op, Written};

/// A write request whose names, values, sizes and counts are valid. Values
/// are already canonical.
#[derive(Debug, Clone)]
pub struct Batch {
    /// What to do.
    pub intent: Intent,
}

/// The shape of a write.
#[derive(Debug, Clone)]
pub enum Intent {
    /// A guest's (or API batch's) operations and events, applied as given.
    Ops {
        /// Operations, values canonical, each object at most once.
        ops: Vec<Op>,
        /// Events to append, in order.
        events: Vec<NewEvent>,
    },
    /// A user's create-or-replace.
    Put {
        /// Where.
        key: ObjectKey,
        /// Canonical JSON text.
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
        /// Canonical JSON text, or clear.
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
pub struct Current<T> {
    /// Its version.
    pub version: u64,
    /// Its generation.
    pub generation: u64,
    /// Canonical JSON text.
    pub value: String,
    /// Canonical JSON text, if any.
    pub status: Option<String>,
    /// Labels, owner, finalizers.
    pub meta: Metadata,
    /// Set when marked for deletion.
    pub deleting_since: Option<T>,
}

impl<T: Clone> Current<T> {
    /// The object this state is, at its current version.
    pub fn object(&self, key: &ObjectKey) -> Object<T> {
        Object {
            kind: key.kind.clone(),
            name: key.name.clone(),
            version: self.version,
            value: self.value.clone(),
            meta: self.meta.clone(),
            generation: self.generation,
            status: self.status.clone(),
            deleting_since: self.deleting_since.clone(),
        }
    }
}

/// Whether an object a plan writes is marked for deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleting<T> {
    /// Not marked.
    No,
    /// Marked earlier, at this time; it stays so.
    Since(T),
    /// Marked by this commit, at the commit's time.
    Now,
}

impl<T: Clone> Deleting<T> {
    /// The mark's time, given the commit's.
    pub fn at(&self, commit: T) -> Option<T> {
        match self {
            Deleting::No => None,
            Deleting::Since(at) => Some(at.clone()),
            Deleting::Now => Some(commit),
        }
    }

    fn of(since: &Option<T>) -> Self {
        since.clone().map_or(Deleting::No, Deleting::Since)
    }
}

/// Everything a create or update writes of an object (the version is the
/// commit's revision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<T> {
    /// Canonical JSON text.
    pub value: String,
    /// Canonical JSON text, if any.
    pub status: Option<String>,
    /// Labels, owner, finalizers.
    pub meta: Metadata,
    /// The generation after the write.
    pub generation: u64,
    /// The deletion mark after the write.
    pub deleting: Deleting<T>,
}

impl<T: Clone> Row<T> {
    /// The object `key` this row makes, given the commit's revision and
    /// time.
    pub fn object(&self, key: &ObjectKey, revision: u64, at: T) -> Object<T> {
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
pub enum Planned<T> {
    /// Insert a new object.
    Create {
        /// Where.
        key: ObjectKey,
        /// What.
        row: Row<T>,
    },
    /// Rewrite an existing object (whose preconditions held).
    Update {
        /// Where.
        key: ObjectKey,
        /// What it becomes.
        row: Row<T>,
    },
    /// Remove an existing object.
    Delete {
        /// Where.
        key: ObjectKey,
        /// The version it had.
        version: u64,
    },
}

impl<T> Planned<T> {
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
pub enum Answer<T> {
    /// Created.
    Created,
    /// Rewritten.
    Replaced,
    /// Marked for deletion by this commit.
    Marked,
    /// Already marked; nothing written to it.
    Unchanged(Box<Object<T>>),
    /// Removed.
    Removed,
}

/// What a batch does, given the current state.
#[derive(Debug)]
pub struct Plan<T> {
    /// Writes, in input order, then garbage collection's in the order
    /// found.
    pub writes: Vec<Planned<T>>,
    /// Events to append, in input order.
    pub events: Vec<NewEvent>,
    /// For a user's write: what it did to the object it names.
    pub answer: Option<Answer<T>>,
    /// Objects whose first delete request this plan made and whose owned
    /// objects were not looked up yet.
    pending_owners: Vec<ObjectKey>,
    /// Objects deleted or marked by garbage collection so far.
    collected: usize,
}

impl<T: Clone> Plan<T> {
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
    /// [`Plan::owners_to_collect`] (each with its current state, in key
    /// order), except those this commit deletes already.
    pub fn collect(
        &mut self,
        batch: &Batch,
        owned: Vec<(ObjectKey, Current<T>)>,
    ) -> Result<(), Error> {
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
                return Err(Error::Invalid(format!(
                    "the commit deletes {owner}, which owns {key}, and also writes {key}: delete {key} too, or write it in another commit"
                )));
            }
            if batch.names(&key) {
                // Checked, not written: a check and a collection of one
                // object in one commit would contradict each other.
                return Err(Error::Invalid(format!(
                    "the commit checks {key} and deletes its owner; check or delete, not both"
                )));
            }
            self.collected += 1;
            if self.collected > MAX_COLLECTED_PER_COMMIT {
                return Err(Error::TooLarge(format!(
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
    fn request_delete(&mut self, key: &ObjectKey, current: &Current<T>) -> Option<Planned<T>> {
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
    pub fn written(&self, revision: u64, at: T) -> Vec<(ObjectKey, Option<Object<T>>)> {
        self.writes
            .iter()
            .map(|write| match write {
                Planned::Create { key, row } | Planned::Update { key, row } => {
                    (key.clone(), Some(row.object(key, revision, at.clone())))
                }
                Planned::Delete { key, .. } => (key.clone(), None),
            })
            .collect()
    }

    /// The object `key` as this plan leaves it, given the commit's revision
    /// and time; `None` if the plan removes it or does not write it.
    pub fn object(&self, key: &ObjectKey, revision: u64, at: T) -> Option<Object<T>> {
        self.writes.iter().find_map(|write| match write {
            Planned::Create { key: k, row } | Planned::Update { key: k, row } if k == key => {
                Some(row.object(k, revision, at.clone()))
            }
            _ => None,
        })
    }
}

impl Batch {
    /// A batch of operations (a guest's commit): counts, names, values,
    /// metadata and events checked, values canonical.
    pub fn ops(bounds: &Bounds, ops: &[Op], events: &[NewEvent]) -> Result<Self, Error> {
        check_counts(bounds, ops.len(), events.len())?;
        let mut seen = HashSet::with_capacity(ops.len());
        let mut normalized = Vec::with_capacity(ops.len());
        for op in ops {
            let key = op.key();
            check_key(key)?;
            // One operation per object keeps a commit's meaning independent
            // of the order its operations are applied in.
            if !seen.insert(key) {
                return Err(Error::Invalid(format!(
                    "{key} appears in more than one operation of the commit"
                )));
            }
            normalized.push(normalize_op(bounds, op)?);
        }
        for event in events {
            check_event(bounds, event)?;
        }
        Ok(Self {
            intent: Intent::Ops {
                ops: normalized,
                events: events.to_vec(),
            },
        })
    }

    /// A user's create-or-replace of the value and, if given, the
    /// metadata.
    pub fn put(
        bounds: &Bounds,
        key: &ObjectKey,
        value: &str,
        meta: Option<&Metadata>,
        expected: Option<u64>,
    ) -> Result<Self, Error> {
        check_key(key)?;
        if let Some(meta) = meta {
            check_metadata(key, meta)?;
        }
        Ok(Self {
            intent: Intent::Put {
                key: key.clone(),
                value: normalize_value(bounds, key, value)?,
                meta: meta.cloned(),
                expected,
            },
        })
    }

    /// A user's status write.
    pub fn status(
        bounds: &Bounds,
        key: &ObjectKey,
        status: Option<&str>,
        expected_generation: Option<u64>,
    ) -> Result<Self, Error> {
        check_key(key)?;
        Ok(Self {
            intent: Intent::Status {
                key: key.clone(),
                status: status
                    .map(|s| normalize_status(bounds, key, s))
                    .transpose()?,
                expected_generation,
            },
        })
    }

    /// A user's delete.
    pub fn delete(key: &ObjectKey, expected: Option<u64>) -> Result<Self, Error> {
        check_key(key)?;
        Ok(Self {
            intent: Intent::Delete {
                key: key.clone(),
                expected,
            },
        })
    }

    /// The batch of a user's [`ApiWrite`].
    pub fn api(bounds: &Bounds, write: &ApiWrite) -> Result<Self, Error> {
        match write {
            ApiWrite::Put {
                key,
                value,
                meta,
                expected_version,
            } => Self::put(bounds, key, value, meta.as_ref(), *expected_version),
            ApiWrite::Status {
                key,
                status,
                expected_generation,
            } => Self::status(bounds, key, status.as_deref(), *expected_generation),
            ApiWrite::Delete {
                key,
                expected_version,
            } => Self::delete(key, *expected_version),
        }
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

    /// The object a user's write names; `None` for a batch of operations.
    pub fn user_key(&self) -> Option<&ObjectKey> {
        match &self.intent {
            Intent::Put { key, .. } | Intent::Status { key, .. } | Intent::Delete { key, .. } => {
                Some(key)
            }
            Intent::Ops { .. } => None,
        }
    }

    /// Check every precondition against `current` (the state of each object
    /// of [`Batch::keys`] that exists) and decide the writes and events.
    /// The first failing operation, in input order, decides the error.
    /// Garbage collection continues with [`Plan::owners_to_collect`].
    pub fn resolve<'c, T: Clone + 'c>(
        &self,
        current: impl Fn(&ObjectKey) -> Option<&'c Current<T>>,
    ) -> Result<Plan<T>, Error> {
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
                    (None, Some(_)) => return Err(Error::NotFound { key: key.clone() }),
                }
                Ok(plan)
            }
            Intent::Status {
                key,
                status,
                expected_generation,
            } => {
                let Some(c) = current(key) else {
                    return Err(Error::NotFound { key: key.clone() });
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
                    return Err(Error::NotFound { key: key.clone() });
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

    fn resolve_op<'c, T: Clone + 'c>(
        &self,
        plan: &mut Plan<T>,
        op: &Op,
        current: &impl Fn(&ObjectKey) -> Option<&'c Current<T>>,
    ) -> Result<Option<Planned<T>>, Error> {
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
            ) => Err(Error::NotFound { key: key.clone() }),
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
    fn rewrite<'c, T: Clone + 'c>(
        &self,
        key: &ObjectKey,
        c: &Current<T>,
        value: Option<&String>,
        meta: Option<&Metadata>,
        current: &impl Fn(&ObjectKey) -> Option<&'c Current<T>>,
    ) -> Result<Planned<T>, Error> {
        let value = value.unwrap_or(&c.value);
        let meta = meta.unwrap_or(&c.meta);
        if c.deleting_since.is_some() {
            if let Some(new) = meta
                .finalizers
                .iter()
                .find(|f| !c.meta.finalizers.contains(f))
            {
                return Err(Error::Invalid(format!(
                    "{key} is marked for deletion: finalizers can be removed, not added ({new})"
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
                deleting: Deleting::of(&c.deleting_since),
            },
        })
    }

    /// A write that gives `key` an owner it did not have must find the
    /// owner existing, unmarked, and not deleted by this commit.
    fn check_owner<'c, T: 'c>(
        &self,
        key: &ObjectKey,
        had: Option<&ObjectKey>,
        meta: &Metadata,
        current: &impl Fn(&ObjectKey) -> Option<&'c Current<T>>,
    ) -> Result<(), Error> {
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
            Some(_) if self.deletes(owner) => Err(Error::Invalid(format!(
                "the commit deletes {owner} and makes it the owner of {key}"
            ))),
            Some(_) => Ok(()),
        }
    }
}

/// What a committed user's write did to the object it names, given the
/// commit's revision and time.
pub fn written<T: Clone>(
    batch: &Batch,
    plan: Plan<T>,
    revision: u64,
    at: T,
) -> Result<Written<T>, Error> {
    let Some(key) = batch.user_key() else {
        return Err(Error::Inconsistent(
            "a batch of operations has no single answer".into(),
        ));
    };
    let object = || {
        plan.object(key, revision, at.clone()).ok_or_else(|| {
            Error::Inconsistent(format!(
                "the write of {key} committed at revision {revision} but its object is not in the plan"
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
            return Err(Error::Inconsistent(format!(
                "the write of {key} has no answer"
            )));
        }
    })
}

/// Values and statuses canonical, metadata checked.
fn normalize_op(bounds: &Bounds, op: &Op) -> Result<Op, Error> {
    Ok(match op {
        Op::Create { key, value } => Op::Create {
            key: key.clone(),
            value: normalize_value(bounds, key, value)?,
        },
        Op::Update {
            key,
            expected_version,
            value,
        } => Op::Update {
            key: key.clone(),
            expected_version: *expected_version,
            value: normalize_value(bounds, key, value)?,
        },
        Op::CreateWith { key, value, meta } => {
            check_metadata(key, meta)?;
            Op::CreateWith {
                key: key.clone(),
                value: normalize_value(bounds, key, value)?,
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
                return Err(Error::Invalid(format!(
                    "a replace of {key} needs a value, metadata or both"
                )));
            }
            Op::Replace {
                key: key.clone(),
                expected_version: *expected_version,
                value: value
                    .as_deref()
                    .map(|v| normalize_value(bounds, key, v))
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
                .map(|s| normalize_status(bounds, key, s))
                .transpose()?,
        },
        Op::Delete { .. } | Op::Check { .. } => op.clone(),
    })
}

fn created<T>(key: &ObjectKey, value: String, meta: Metadata) -> Planned<T> {
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

fn status_write<T: Clone>(
    key: &ObjectKey,
    c: &Current<T>,
    expected_generation: Option<u64>,
    status: Option<String>,
) -> Result<Planned<T>, Error> {
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
            deleting: Deleting::of(&c.deleting_since),
        },
    })
}

fn conflict(key: &ObjectKey, reason: String) -> Error {
    Error::Conflict {
        key: key.clone(),
        reason,
    }
}

fn mismatch(key: &ObjectKey, expected: u64, found: u64) -> Error {
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

    const B: &Bounds = &Bounds::HOST;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("tasks", name)
    }

    /// The mark's time in these tests: a number, as a fake keeps it.
    type Current = super::Current<u64>;

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
        let err = Batch::ops(B, &ops, &[]).unwrap_err();
        assert!(
            matches!(&err, Error::Invalid(m) if m.contains("tasks/a")),
            "{err}"
        );
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
        let batch = Batch::ops(B, &ops, &[]).unwrap();
        let (b5, b4, c9) = (at(5), at(4), at(9));
        let err = batch
            .resolve(|k| match k.name.as_str() {
                "b" => Some(&b5),
                _ => None,
            })
            .unwrap_err();
        assert!(
            matches!(&err, Error::Conflict { key, reason } if key.name == "b" && reason.contains("expected version 4, found version 5")),
            "{err}"
        );
        let err = batch
            .resolve(|k| (k.name == "b").then_some(&b4))
            .unwrap_err();
        assert!(
            matches!(&err, Error::NotFound { key } if key.name == "c"),
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
        let put = |expected| Batch::put(B, &key("a"), "{}", None, expected).unwrap();
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
                (Err(Error::Conflict { .. }), Err("conflict")) => {}
                (Err(Error::NotFound { .. }), Err("not found")) => {}
                (got, want) => panic!("{batch:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn generation_grows_with_value_or_metadata_only() {
        let c = at(3);
        let same = Batch::put(B, &key("a"), "{}", None, None).unwrap();
        let plan = same.resolve(|_| Some(&c)).unwrap();
        assert!(matches!(&plan.writes[0], Planned::Update { row, .. } if row.generation == 1));
        let other = Batch::put(B, &key("a"), "{\"x\":1}", None, None).unwrap();
        let plan = other.resolve(|_| Some(&c)).unwrap();
        assert!(matches!(&plan.writes[0], Planned::Update { row, .. } if row.generation == 2));
        let labelled = Metadata {
            labels: [("app".to_string(), "web".to_string())].into(),
            ..Metadata::default()
        };
        let meta = Batch::put(B, &key("a"), "{}", Some(&labelled), None).unwrap();
        let plan = meta.resolve(|_| Some(&c)).unwrap();
        assert!(matches!(&plan.writes[0], Planned::Update { row, .. } if row.generation == 2));
        let status = Batch::status(B, &key("a"), Some("{\"ok\":true}"), Some(1)).unwrap();
        let plan = status.resolve(|_| Some(&c)).unwrap();
        assert!(
            matches!(&plan.writes[0], Planned::Update { row, .. } if row.generation == 1 && row.status.as_deref() == Some("{\"ok\":true}"))
        );
        let stale = Batch::status(B, &key("a"), None, Some(2)).unwrap();
        assert!(matches!(
            stale.resolve(|_| Some(&c)),
            Err(Error::Conflict { .. })
        ));
    }

    #[test]
    fn deletes_mark_objects_with_finalizers() {
        let mut held = at(4);
        held.meta.finalizers = vec!["example.com/cleanup".into()];
        let delete = Batch::delete(&key("a"), None).unwrap();
        let plan = delete.resolve(|_| Some(&held)).unwrap();
        assert_eq!(plan.answer, Some(Answer::Marked));
        assert!(
            matches!(&plan.writes[0], Planned::Update { row, .. } if row.deleting == Deleting::Now && row.generation == 2)
        );
        held.deleting_since = Some(1_000);
        let plan = delete.resolve(|_| Some(&held)).unwrap();
        assert!(plan.writes.is_empty());
        assert!(matches!(plan.answer, Some(Answer::Unchanged(_))));
        let released = Batch::put(B, &key("a"), "{}", Some(&Metadata::default()), None).unwrap();
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
        let adding = Batch::put(B, &key("a"), "{}", Some(&more), None).unwrap();
        assert!(matches!(
            adding.resolve(|_| Some(&held)),
            Err(Error::Invalid(_))
        ));
    }
}
