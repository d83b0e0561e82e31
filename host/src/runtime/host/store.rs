//! `leasehold:controller/store`: reads and fenced commits on the store
//! backend, stamped with this tenure's fence.
//!
//! A commit is refused without touching the database once the tenure is
//! revoked; otherwise the backend checks the fence inside the write's own
//! transaction, so even a call that raced the revocation cannot commit after
//! a successor was granted. Before that, the controller's write quotas
//! ([`crate::quota`]) admit or refuse its creates; a refusal writes nothing
//! and reaches the guest as `invalid` with the quota prefix.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fence::Fence;
use crate::quota::{AdmitError, Quota, WriteQuota};
use crate::runtime::Revocation;
use crate::runtime::bindings::store::{self as wit, StoreError as WitError};
use crate::runtime::bindings::types as wit_types;
use crate::store::{NewEvent, ObjectKey, Op, Store, StoreError};

/// Outcomes of a tenure's commits, read by the supervisor's metrics.
#[derive(Debug, Default)]
pub struct CommitCounters {
    /// Commits that landed.
    pub ok: AtomicU64,
    /// Commits refused because the fence was not current.
    pub fenced: AtomicU64,
    /// Commits refused by a version precondition.
    pub conflict: AtomicU64,
    /// Commits that failed otherwise (invalid, unavailable, refused by a
    /// quota).
    pub failed: AtomicU64,
    /// Commits refused by the create rate (`max_creates_per_second`).
    pub quota_creates_per_second: AtomicU64,
    /// Commits refused by the cap on objects of a kind
    /// (`max_objects_per_kind`).
    pub quota_objects_per_kind: AtomicU64,
}

impl CommitCounters {
    /// Commits refused by `quota`.
    pub fn quota_refusals(&self, quota: Quota) -> &AtomicU64 {
        match quota {
            Quota::CreatesPerSecond => &self.quota_creates_per_second,
            Quota::ObjectsPerKind => &self.quota_objects_per_kind,
        }
    }
}

/// The store slice of a guest's host state.
pub struct StoreHost {
    backend: Arc<dyn Store>,
    fence: Fence,
    revocation: Revocation,
    max_payload: usize,
    counters: Arc<CommitCounters>,
    quota: Arc<WriteQuota>,
}

impl StoreHost {
    /// Calls of one tenure, fenced by `fence`, within the controller's
    /// `quota`.
    pub fn new(
        backend: Arc<dyn Store>,
        fence: Fence,
        revocation: Revocation,
        max_payload: usize,
        counters: Arc<CommitCounters>,
        quota: Arc<WriteQuota>,
    ) -> Self {
        Self {
            backend,
            fence,
            revocation,
            max_payload,
            counters,
            quota,
        }
    }

    fn revoked_error(&self) -> WitError {
        WitError::Fenced(format!(
            "{} was revoked by the host: the lease is no longer held",
            self.fence
        ))
    }

    fn check_payload(&self, size: usize) -> Result<(), WitError> {
        if size > self.max_payload {
            return Err(WitError::Invalid(format!(
                "host call payload of {size} bytes exceeds the limit of {} bytes",
                self.max_payload
            )));
        }
        Ok(())
    }
}

fn to_wit_key(key: ObjectKey) -> wit_types::ObjectKey {
    wit_types::ObjectKey {
        kind: key.kind,
        name: key.name,
    }
}

fn to_wit_error(error: StoreError) -> WitError {
    match error {
        StoreError::Fenced { .. } => WitError::Fenced(error.to_string()),
        StoreError::Conflict { key, .. } => WitError::Conflict(to_wit_key(key)),
        StoreError::NotFound { key } => WitError::NotFound(to_wit_key(key)),
        StoreError::Invalid(_) | StoreError::TooLarge(_) => WitError::Invalid(error.to_string()),
        StoreError::Unavailable(_) => WitError::Unavailable(error.to_string()),
    }
}

fn to_wit_object(object: crate::store::Object) -> wit_types::Object {
    wit_types::Object {
        kind: object.kind,
        name: object.name,
        version: object.version,
        value: object.value,
    }
}

fn key(kind: String, name: String) -> ObjectKey {
    ObjectKey { kind, name }
}

fn op_size(op: &wit::Op) -> usize {
    match op {
        wit::Op::Create(c) => c.kind.len() + c.name.len() + c.value.len(),
        wit::Op::Update(u) => u.kind.len() + u.name.len() + u.value.len(),
        wit::Op::Delete(d) => d.kind.len() + d.name.len(),
    }
}

fn to_op(op: wit::Op) -> Op {
    match op {
        wit::Op::Create(c) => Op::Create {
            key: key(c.kind, c.name),
            value: c.value,
        },
        wit::Op::Update(u) => Op::Update {
            key: key(u.kind, u.name),
            expected_version: u.expected_version,
            value: u.value,
        },
        wit::Op::Delete(d) => Op::Delete {
            key: key(d.kind, d.name),
            expected_version: d.expected_version,
        },
    }
}

impl wit::Host for StoreHost {
    async fn get(
        &mut self,
        kind: String,
        name: String,
    ) -> Result<Option<wit_types::Object>, WitError> {
        if self.revocation.is_revoked() {
            return Err(self.revoked_error());
        }
        let cluster = &self.fence.key.cluster;
        self.backend
            .get(cluster, &key(kind, name))
            .await
            .map(|o| o.map(to_wit_object))
            .map_err(to_wit_error)
    }

    async fn list(
        &mut self,
        kind: String,
        after: Option<String>,
        limit: u32,
    ) -> Result<wit::ObjectPage, WitError> {
        if self.revocation.is_revoked() {
            return Err(self.revoked_error());
        }
        let page = self
            .backend
            .list(
                &self.fence.key.cluster,
                &kind,
                after.as_deref(),
                limit as usize,
            )
            .await
            .map_err(to_wit_error)?;
        Ok(wit::ObjectPage {
            objects: page.objects.into_iter().map(to_wit_object).collect(),
            next: page.next,
        })
    }

    async fn commit(
        &mut self,
        ops: Vec<wit::Op>,
        events: Vec<wit::NewEvent>,
    ) -> Result<wit::Committed, WitError> {
        if self.revocation.is_revoked() {
            self.counters.fenced.fetch_add(1, Ordering::Relaxed);
            return Err(self.revoked_error());
        }
        let size = ops.iter().map(op_size).sum::<usize>()
            + events
                .iter()
                .map(|e| e.kind.len() + e.name.len() + e.reason.len() + e.message.len())
                .sum::<usize>();
        self.check_payload(size)?;
        let ops: Vec<Op> = ops.into_iter().map(to_op).collect();
        let events: Vec<NewEvent> = events
            .into_iter()
            .map(|e| NewEvent {
                key: key(e.kind, e.name),
                reason: e.reason,
                message: e.message,
            })
            .collect();
        let mut permit = match self
            .quota
            .admit(self.backend.as_ref(), &self.fence, &ops)
            .await
        {
            Ok(permit) => permit,
            Err(AdmitError::Refused(refusal)) => {
                self.counters
                    .quota_refusals(refusal.quota)
                    .fetch_add(1, Ordering::Relaxed);
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                // Debug only: a flooding guest is refused many times a
                // second; the metric is the signal.
                tracing::debug!(epoch = self.fence.epoch.0, %refusal, "commit refused by a quota");
                return Err(WitError::Invalid(refusal.to_string()));
            }
            Err(AdmitError::Store(e)) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                return Err(to_wit_error(e));
            }
        };
        permit.sent();
        let result = self.backend.commit_fenced(&self.fence, &ops, &events).await;
        permit.settle(&result).await;
        let counter = match &result {
            Ok(_) => &self.counters.ok,
            Err(StoreError::Fenced { .. }) => &self.counters.fenced,
            Err(StoreError::Conflict { .. }) => &self.counters.conflict,
            Err(_) => &self.counters.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let committed = result.map_err(to_wit_error)?;
        Ok(wit::Committed {
            revision: committed.revision,
            event_seqs: committed.event_seqs,
        })
    }
}
