//! `leasehold:controller/store`: reads and fenced commits on the store
//! backend, stamped with this tenure's fence.
//!
//! This file holds the behaviour, in the store's own types; each WIT
//! version's bindings (`runtime/worlds/`) only convert their types to and
//! from these calls, so every version a component targets gets the same
//! rules.
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
use crate::store::{Committed, NewEvent, Object, ObjectKey, Op, Page, Store, StoreError};

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

/// Why a store call of the guest failed: the `store-error` variants every
/// WIT version shares, converted to each version's own type by its
/// bindings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The tenure's lease is no longer current; nothing was written.
    Fenced(String),
    /// A precondition failed on this object; nothing was written.
    Conflict(ObjectKey),
    /// The object of an update or delete does not exist.
    NotFound(ObjectKey),
    /// The request is wrong (or refused by a quota); the message says why.
    Invalid(String),
    /// The backend failed; whether a commit landed is unknown.
    Unavailable(String),
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

    fn revoked_error(&self) -> CallError {
        CallError::Fenced(format!(
            "{} was revoked by the host: the lease is no longer held",
            self.fence
        ))
    }

    fn check_payload(&self, size: usize) -> Result<(), CallError> {
        if size > self.max_payload {
            return Err(CallError::Invalid(format!(
                "host call payload of {size} bytes exceeds the limit of {} bytes",
                self.max_payload
            )));
        }
        Ok(())
    }

    /// `store.get`: read one object; `None` if it does not exist.
    pub async fn get_object(&mut self, key: ObjectKey) -> Result<Option<Object>, CallError> {
        if self.revocation.is_revoked() {
            return Err(self.revoked_error());
        }
        self.backend
            .get(&self.fence.key.cluster, &key)
            .await
            .map_err(to_call_error)
    }

    /// `store.list`: one page of a kind in name order.
    pub async fn list_objects(
        &mut self,
        kind: String,
        after: Option<String>,
        limit: u32,
    ) -> Result<Page, CallError> {
        if self.revocation.is_revoked() {
            return Err(self.revoked_error());
        }
        self.backend
            .list(
                &self.fence.key.cluster,
                &kind,
                after.as_deref(),
                limit as usize,
            )
            .await
            .map_err(to_call_error)
    }

    /// `store.commit`: apply `ops` and append `events` atomically, within
    /// the controller's quotas and fenced by this tenure's lease.
    pub async fn commit_ops(
        &mut self,
        ops: Vec<Op>,
        events: Vec<NewEvent>,
    ) -> Result<Committed, CallError> {
        if self.revocation.is_revoked() {
            self.counters.fenced.fetch_add(1, Ordering::Relaxed);
            return Err(self.revoked_error());
        }
        let size = ops.iter().map(op_size).sum::<usize>()
            + events
                .iter()
                .map(|e| e.key.kind.len() + e.key.name.len() + e.reason.len() + e.message.len())
                .sum::<usize>();
        self.check_payload(size)?;
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
                return Err(CallError::Invalid(refusal.to_string()));
            }
            Err(AdmitError::Store(e)) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                return Err(to_call_error(e));
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
        result.map_err(to_call_error)
    }
}

fn to_call_error(error: StoreError) -> CallError {
    match error {
        StoreError::Fenced { .. } => CallError::Fenced(error.to_string()),
        StoreError::Conflict { key, .. } => CallError::Conflict(key),
        StoreError::NotFound { key } => CallError::NotFound(key),
        StoreError::Invalid(_) | StoreError::TooLarge(_) => CallError::Invalid(error.to_string()),
        StoreError::Unavailable(_) => CallError::Unavailable(error.to_string()),
    }
}

/// The bytes of an operation that count towards the host call payload.
fn op_size(op: &Op) -> usize {
    match op {
        Op::Create { key, value } => key.kind.len() + key.name.len() + value.len(),
        Op::Update { key, value, .. } => key.kind.len() + key.name.len() + value.len(),
        Op::Delete { key, .. } | Op::Check { key, .. } => key.kind.len() + key.name.len(),
        Op::CreateWith { key, value, meta } => {
            key.kind.len() + key.name.len() + value.len() + meta_size(meta)
        }
        Op::Replace {
            key, value, meta, ..
        } => {
            key.kind.len()
                + key.name.len()
                + value.as_ref().map_or(0, String::len)
                + meta.as_ref().map_or(0, meta_size)
        }
        Op::Status { key, status, .. } => {
            key.kind.len() + key.name.len() + status.as_ref().map_or(0, String::len)
        }
    }
}

/// The bytes of an object's metadata that count towards the payload.
fn meta_size(meta: &crate::store::Metadata) -> usize {
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
