//! What a write means, decided once for both backends: a validated
//! [`Batch`] (a guest's operations, or a user's put or delete) is resolved
//! against the current versions of the objects it touches into a [`Plan`]
//! of creates, updates and deletes plus the events to append, or into the
//! typed error of the first operation whose precondition fails.
//!
//! The backends only supply the current versions (the memory backend from
//! its map, PostgreSQL from rows it has locked `FOR UPDATE`) and apply the
//! plan. Must never: read or write state itself.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::fence::Fence;

use super::validate::normalize_value;
use super::validate::{check_cluster, check_counts, check_event, check_fence_names, check_key};
use super::{NewEvent, ObjectKey, Op, Origin, StoreError};

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
        /// `None`: whatever is there; `Some(0)`: must not exist;
        /// `Some(v)`: must be at version `v`.
        expected: Option<u64>,
    },
    /// A user's delete.
    Delete {
        /// Where.
        key: ObjectKey,
        /// `None`: whatever is there; `Some(v)`: must be at version `v`.
        expected: Option<u64>,
    },
}

/// One write of a resolved plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Planned<'a> {
    /// Insert a new object.
    Create {
        /// Where.
        key: &'a ObjectKey,
        /// Normalized JSON text.
        value: &'a str,
    },
    /// Replace the value of an existing object (whose version matched).
    Update {
        /// Where.
        key: &'a ObjectKey,
        /// Normalized JSON text.
        value: &'a str,
    },
    /// Remove an existing object (whose version matched).
    Delete {
        /// Where.
        key: &'a ObjectKey,
    },
}

/// What a batch does, given the current versions.
#[derive(Debug)]
pub(crate) struct Plan<'a> {
    /// Writes, in input order.
    pub writes: Vec<Planned<'a>>,
    /// Events to append, in input order.
    pub events: Vec<Cow<'a, NewEvent>>,
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
            let key = op_key(op);
            check_key(key)?;
            // One operation per object keeps a commit's meaning independent
            // of the order its operations are applied in.
            if !seen.insert(key) {
                return Err(StoreError::Invalid(format!(
                    "{key} appears in more than one operation of the commit"
                )));
            }
            normalized.push(match op {
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
                Op::Delete { .. } => op.clone(),
            });
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

    /// A user's create-or-replace.
    pub fn put(
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        expected: Option<u64>,
    ) -> Result<Self, StoreError> {
        check_cluster(cluster)?;
        check_key(key)?;
        Ok(Self {
            cluster: cluster.to_string(),
            origin: Origin::Api,
            intent: Intent::Put {
                key: key.clone(),
                value: normalize_value(key, value)?,
                expected,
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
            origin: Origin::Api,
            intent: Intent::Delete {
                key: key.clone(),
                expected,
            },
        })
    }

    /// The objects this batch may write, in input order.
    pub fn keys(&self) -> Vec<&ObjectKey> {
        match &self.intent {
            Intent::Ops { ops, .. } => ops.iter().map(op_key).collect(),
            Intent::Put { key, .. } | Intent::Delete { key, .. } => vec![key],
        }
    }

    /// The objects this batch may create (a guest's creates, a user's
    /// put): the names whose creation the PostgreSQL backend serializes.
    pub fn may_create(&self) -> Vec<&ObjectKey> {
        match &self.intent {
            Intent::Ops { ops, .. } => ops
                .iter()
                .filter(|op| matches!(op, Op::Create { .. }))
                .map(op_key)
                .collect(),
            Intent::Put { key, .. } => vec![key],
            Intent::Delete { .. } => Vec::new(),
        }
    }

    /// Whether a create found taken at write time (after the object was
    /// seen absent) should be retried rather than reported: only for an
    /// unconditional put, which means "whatever is there".
    pub fn retries_lost_create(&self) -> bool {
        matches!(self.intent, Intent::Put { expected: None, .. })
    }

    /// Check every precondition against `current` (the version of each
    /// object that exists) and decide the writes and events. The first
    /// failing operation, in input order, decides the error.
    pub fn resolve<'a>(
        &'a self,
        current: impl Fn(&ObjectKey) -> Option<u64>,
    ) -> Result<Plan<'a>, StoreError> {
        match &self.intent {
            Intent::Ops { ops, events } => {
                let mut writes = Vec::with_capacity(ops.len());
                for op in ops {
                    writes.push(resolve_op(op, current(op_key(op)))?);
                }
                Ok(Plan {
                    writes,
                    events: events.iter().map(Cow::Borrowed).collect(),
                })
            }
            Intent::Put {
                key,
                value,
                expected,
            } => {
                let found = current(key);
                let (write, event) = match (found, *expected) {
                    (Some(version), Some(0)) => {
                        return Err(conflict(
                            key,
                            format!("expected it not to exist, found version {version}"),
                        ));
                    }
                    (Some(version), Some(want)) if version != want => {
                        return Err(mismatch(key, want, version));
                    }
                    (Some(version), _) => (
                        Planned::Update { key, value },
                        api_event(key, "Updated", format!("replaced version {version}")),
                    ),
                    (None, None | Some(0)) => (
                        Planned::Create { key, value },
                        api_event(key, "Created", "created".to_string()),
                    ),
                    (None, Some(_)) => return Err(StoreError::NotFound { key: key.clone() }),
                };
                Ok(Plan {
                    writes: vec![write],
                    events: vec![Cow::Owned(event)],
                })
            }
            Intent::Delete { key, expected } => {
                let Some(version) = current(key) else {
                    return Err(StoreError::NotFound { key: key.clone() });
                };
                if let Some(want) = *expected
                    && want != version
                {
                    return Err(mismatch(key, want, version));
                }
                Ok(Plan {
                    writes: vec![Planned::Delete { key }],
                    events: vec![Cow::Owned(api_event(
                        key,
                        "Deleted",
                        format!("deleted at version {version}"),
                    ))],
                })
            }
        }
    }
}

/// The object an operation is about.
pub(crate) fn op_key(op: &Op) -> &ObjectKey {
    match op {
        Op::Create { key, .. } | Op::Update { key, .. } | Op::Delete { key, .. } => key,
    }
}

fn resolve_op(op: &Op, found: Option<u64>) -> Result<Planned<'_>, StoreError> {
    match (op, found) {
        (Op::Create { key, .. }, Some(version)) => Err(conflict(
            key,
            format!("it already exists at version {version}"),
        )),
        (Op::Create { key, value }, None) => Ok(Planned::Create { key, value }),
        (Op::Update { key, .. } | Op::Delete { key, .. }, None) => {
            Err(StoreError::NotFound { key: key.clone() })
        }
        (
            Op::Update {
                key,
                expected_version,
                ..
            }
            | Op::Delete {
                key,
                expected_version,
            },
            Some(version),
        ) if *expected_version != version => Err(mismatch(key, *expected_version, version)),
        (Op::Update { key, value, .. }, Some(_)) => Ok(Planned::Update { key, value }),
        (Op::Delete { key, .. }, Some(_)) => Ok(Planned::Delete { key }),
    }
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
/// log as guests' (reason `Created`, `Updated` or `Deleted`).
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

    #[test]
    fn an_object_may_appear_once_per_commit() {
        let ops = [
            Op::Create {
                key: key("a"),
                value: "1".into(),
            },
            Op::Delete {
                key: key("a"),
                expected_version: 1,
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
        let err = batch
            .resolve(|k| match k.name.as_str() {
                "b" => Some(5),
                _ => None,
            })
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Conflict { key, reason } if key.name == "b" && reason.contains("expected version 4, found version 5")),
            "{err}"
        );
        let err = batch.resolve(|k| (k.name == "b").then_some(4)).unwrap_err();
        assert!(
            matches!(&err, StoreError::NotFound { key } if key.name == "c"),
            "{err}"
        );
        let plan = batch
            .resolve(|k| match k.name.as_str() {
                "b" => Some(4),
                "c" => Some(9),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            plan.writes,
            vec![
                Planned::Create {
                    key: &key("a"),
                    value: "1"
                },
                Planned::Update {
                    key: &key("b"),
                    value: "2"
                },
                Planned::Delete { key: &key("c") },
            ]
        );
    }

    #[test]
    fn puts_resolve_by_expected_version() {
        let put = |expected| Batch::put("c1", &key("a"), "{}", expected).unwrap();
        let absent = |_: &ObjectKey| None;
        let at7 = |_: &ObjectKey| Some(7);
        for (batch, current, want) in [
            (
                put(None),
                absent as fn(&ObjectKey) -> Option<u64>,
                Ok("Created"),
            ),
            (put(None), at7, Ok("Updated")),
            (put(Some(0)), absent, Ok("Created")),
            (put(Some(0)), at7, Err("conflict")),
            (put(Some(7)), at7, Ok("Updated")),
            (put(Some(6)), at7, Err("conflict")),
            (put(Some(7)), absent, Err("not found")),
        ] {
            let got = batch.resolve(current);
            match (got, want) {
                (Ok(plan), Ok(reason)) => assert_eq!(plan.events[0].reason, reason),
                (Err(StoreError::Conflict { .. }), Err("conflict")) => {}
                (Err(StoreError::NotFound { .. }), Err("not found")) => {}
                (got, want) => panic!("{batch:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
