//! What a write means, decided once for every backend: the model's
//! planning ([`leasehold_model::plan`], shared with the SDK's fake) with
//! what only the host adds, the cluster a batch writes in and who writes
//! it ([`Origin`]), and the backend's clock as the time of a deletion
//! mark.
//!
//! A validated [`Batch`] is resolved against the current state of the
//! objects it touches into a [`Plan`] of creates, updates and deletes plus
//! the events to append, or into the typed error of the first operation
//! whose precondition fails; the rules are listed in the model. The
//! backends only supply the current state (the memory backend from its
//! map, PostgreSQL from rows it has locked `FOR UPDATE`, the embedded one
//! from its rows), look up owned objects when asked, and apply the plan.
//! Must never: read or write state itself.

use std::ops::{Deref, DerefMut};

use chrono::{DateTime, Utc};
use leasehold_model::limits::Bounds;
use leasehold_model::plan as model;

use crate::fence::Fence;

use super::validate::{check_cluster, check_fence_names};
use super::{ApiWrite, Metadata, NewEvent, ObjectKey, Op, Origin, StoreError, Written};

/// An object as it stands before the write, as the backend read it.
pub(crate) type Current = model::Current<DateTime<Utc>>;
/// Whether an object a plan writes is marked for deletion.
pub(crate) type Deleting = model::Deleting<DateTime<Utc>>;
/// One write of a resolved plan.
pub(crate) type Planned = model::Planned<DateTime<Utc>>;

/// The host's bounds: every backend enforces the model's defaults.
const BOUNDS: &Bounds = &Bounds::HOST;

/// A write request whose names, values, sizes and counts are valid, with
/// the cluster it writes in and who writes it (recorded on every object
/// and event it writes).
#[derive(Debug)]
pub(crate) struct Batch {
    /// Which cluster's state.
    pub cluster: String,
    /// Who writes.
    pub origin: Origin,
    /// What to do: the model's batch.
    batch: model::Batch,
}

impl Deref for Batch {
    type Target = model::Batch;

    fn deref(&self) -> &model::Batch {
        &self.batch
    }
}

/// What a batch does, given the current state: the model's plan, its
/// refusals as [`StoreError`]s.
#[derive(Debug)]
pub(crate) struct Plan(model::Plan<DateTime<Utc>>);

impl Deref for Plan {
    type Target = model::Plan<DateTime<Utc>>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Plan {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Plan {
    /// Request deletion of `owned`, the objects owned by the last
    /// [`model::Plan::owners_to_collect`] (each with its current state,
    /// in key order), except those this commit deletes already.
    pub fn collect(
        &mut self,
        batch: &Batch,
        owned: Vec<(ObjectKey, Current)>,
    ) -> Result<(), StoreError> {
        Ok(self.0.collect(&batch.batch, owned)?)
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
        Ok(Self {
            cluster: cluster.to_string(),
            origin,
            batch: model::Batch::ops(BOUNDS, ops, events)?,
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
        Ok(Self::user(
            cluster,
            model::Batch::put(BOUNDS, key, value, meta, expected)?,
        ))
    }

    /// A user's delete.
    pub fn delete(
        cluster: &str,
        key: &ObjectKey,
        expected: Option<u64>,
    ) -> Result<Self, StoreError> {
        check_cluster(cluster)?;
        Ok(Self::user(cluster, model::Batch::delete(key, expected)?))
    }

    /// A user's write, attributed to the API token of the request being
    /// served ([`Origin::api`]).
    fn user(cluster: &str, batch: model::Batch) -> Self {
        Self {
            cluster: cluster.to_string(),
            origin: Origin::api(),
            batch,
        }
    }

    /// Check every precondition against `current` (the state of each object
    /// of [`model::Batch::keys`] that exists) and decide the writes and
    /// events. The first failing operation, in input order, decides the
    /// error. Garbage collection continues with
    /// [`model::Plan::owners_to_collect`].
    pub fn resolve<'c>(
        &self,
        current: impl Fn(&ObjectKey) -> Option<&'c Current>,
    ) -> Result<Plan, StoreError> {
        Ok(Plan(self.batch.resolve(current)?))
    }
}

/// The batch of a user's [`ApiWrite`].
pub(crate) fn api_batch(cluster: &str, write: &ApiWrite) -> Result<Batch, StoreError> {
    check_cluster(cluster)?;
    Ok(Batch::user(cluster, model::Batch::api(BOUNDS, write)?))
}

/// What a committed user's write did to the object it names, given the
/// commit's revision and time.
pub(crate) fn written(
    batch: &Batch,
    plan: Plan,
    revision: u64,
    at: DateTime<Utc>,
) -> Result<Written, StoreError> {
    model::written(&batch.batch, plan.0, revision, at).map_err(|e| match e {
        leasehold_model::Error::Inconsistent(why) => {
            StoreError::Unavailable(format!("{why} (cluster {})", batch.cluster))
        }
        other => other.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::{Epoch, LeaseKey};

    fn fence() -> Fence {
        Fence {
            key: LeaseKey::new("c1", "scheduler"),
            epoch: Epoch(3),
            holder: "host-a".into(),
        }
    }

    #[test]
    fn bad_fence_names_are_invalid() {
        let mut bad = fence();
        bad.key.cluster = "Not_A_Label".into();
        let ops = [Op::Create {
            key: ObjectKey::new("tasks", "a"),
            value: "1".into(),
        }];
        assert!(matches!(
            Batch::fenced(&bad, &ops, &[]),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn guest_batches_are_attributed_to_the_fence() {
        let ops = [Op::Create {
            key: ObjectKey::new("tasks", "a"),
            value: " [ 1.0 ] ".into(),
        }];
        let batch = Batch::fenced(&fence(), &ops, &[]).unwrap();
        assert_eq!(batch.cluster, "c1");
        assert_eq!(
            batch.origin,
            Origin::Guest {
                lease: "scheduler".into(),
                epoch: Epoch(3),
                holder: "host-a".into()
            }
        );
        let plan = batch.resolve(|_| None).unwrap();
        let at = Utc::now();
        let written = plan.written(7, at);
        assert_eq!(written[0].1.as_ref().unwrap().value, "[1.0]");
    }
}
