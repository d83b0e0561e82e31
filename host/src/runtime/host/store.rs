//! `leasehold:controller/store`: reads and fenced commits on the store
//! backend, stamped with this tenure's fence.
//!
//! This file holds the behaviour, in the store's own types; each WIT
//! version's bindings (`runtime/worlds/`) only convert their types to and
//! from these calls, so every version a component targets gets the same
//! rules.
//!
//! A `get` of an object whose newest change the worker has read is one of
//! this instance's own commits is answered from what that commit wrote,
//! without the database ([`OwnWrites`]); every other read asks the store.
//!
//! A commit is refused without touching the database once the tenure is
//! revoked; otherwise the backend checks the fence inside the write's own
//! transaction, so even a call that raced the revocation cannot commit after
//! a successor was granted. Before that, the controller's write quotas
//! ([`crate::quota`]) admit or refuse its creates; a refusal writes nothing
//! and reaches the guest as `invalid` with the quota prefix.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fence::{Fence, FenceCause};
use crate::quota::{AdmitError, Quota, WriteQuota};
use crate::runtime::Revocation;
use crate::runtime::host::own_writes::OwnWrites;
use crate::shard::{Shard, Sharding};
use crate::store::{Committed, NewEvent, Object, ObjectKey, Op, Page, Selector, Store, StoreError};
use crate::telemetry::{self, StoreCall, TraceParent};
use tracing::Instrument;

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
    /// Fenced refusals by cause, in [`FENCED_CAUSES`] order.
    fenced_by_cause: [AtomicU64; FENCED_CAUSES.len()],
}

/// Why a guest's commit was fenced, as `leasehold_fenced_refusals_total`
/// labels it: the database's verdict ([`FenceCause`]), or `revoked` when
/// the host already knew the lease was lost and sent nothing.
/// The first four are [`FenceCause::ALL`]'s labels, in order (checked by
/// a test).
pub const FENCED_CAUSES: [&str; 5] = [
    "never_granted",
    "superseded",
    "released",
    "expired",
    REVOKED,
];

/// The cause label of a commit the host refused itself (revoked tenure).
pub const REVOKED: &str = "revoked";

impl CommitCounters {
    /// Count a fenced refusal: `cause` from the database's fence check, or
    /// `None` for one the host refused itself (the tenure was revoked).
    pub fn fenced_because(&self, cause: Option<FenceCause>) {
        self.fenced.fetch_add(1, Ordering::Relaxed);
        let label = cause.map_or(REVOKED, FenceCause::as_str);
        if let Some(i) = FENCED_CAUSES.iter().position(|c| *c == label) {
            self.fenced_by_cause[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Fenced refusals per cause, every cause in [`FENCED_CAUSES`] order.
    pub fn fenced_by_cause(&self) -> Vec<(&'static str, u64)> {
        FENCED_CAUSES
            .iter()
            .zip(&self.fenced_by_cause)
            .map(|(cause, n)| (*cause, n.load(Ordering::Relaxed)))
            .collect()
    }

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
    /// What this instance's commits wrote: answers the reads of objects
    /// whose newest change the worker has read is one of them.
    own_writes: Arc<OwnWrites>,
    /// The shard this tenure's controller unit runs as, if sharded, and
    /// what its guest's `describe` said of sharding.
    shard: Option<Sharding>,
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
            own_writes: Arc::default(),
            shard: None,
        }
    }

    /// The same calls, made by shard `shard` of a sharded controller: its
    /// commits keep the rule for other shards' objects
    /// ([`Sharding::check_write`]), by `kind/name` until
    /// [`described`](Self::described) says otherwise.
    pub fn with_shard(self, shard: Option<Shard>) -> Self {
        Self {
            shard: shard.map(Sharding::by_name),
            ..self
        }
    }

    /// What the guest's `describe` said of sharding: the label deciding
    /// an object's shard, and the kinds every shard watches. Nothing for
    /// an unsharded controller.
    pub fn described(&mut self, label: Option<String>, every_shard: Vec<String>) {
        if let Some(sharding) = &mut self.shard {
            sharding.label = label;
            sharding.every_shard = every_shard;
        }
    }

    /// This instance's cache of its own commits, which the worker confirms
    /// from the change feed ([`OwnWrites::observe`]).
    pub fn own_writes(&self) -> Arc<OwnWrites> {
        self.own_writes.clone()
    }

    fn revoked_error(&self) -> CallError {
        CallError::Fenced(format!(
            "{} was revoked by the host: the lease is no longer held",
            self.fence
        ))
    }

    /// A commit after the tenure was revoked: refused as fenced (and
    /// counted), before anything of it is looked at. The worlds call this
    /// before converting a guest's ops, so a revoked guest is told
    /// `fenced` whatever its commit holds.
    pub(crate) fn refuse_commit_if_revoked(&mut self) -> Result<(), CallError> {
        if self.revocation.is_revoked() {
            self.counters.fenced_because(None);
            return Err(self.revoked_error());
        }
        Ok(())
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

    /// `store.get`: read one object; `None` if it does not exist. Answered
    /// without the database when the newest change of the object the worker
    /// has read is this instance's own commit (see [`OwnWrites`]).
    pub async fn get_object(&mut self, key: ObjectKey) -> Result<Option<Object>, CallError> {
        if self.revocation.is_revoked() {
            return Err(self.revoked_error());
        }
        if let Some(answer) = self.own_writes.answer(&key) {
            return Ok(answer);
        }
        let span = telemetry::store_span(StoreCall::Get {
            kind: &key.kind,
            name: &key.name,
        });
        let result = self
            .backend
            .get(&self.fence.key.cluster, &key)
            .instrument(span.clone())
            .await
            .map_err(to_call_error);
        if let Ok(object) = &result {
            self.own_writes
                .read(&key, object.as_ref().map_or(0, |o| o.version));
        }
        telemetry::outcome(&span, call_outcome(&result));
        result
    }

    /// `store.list`: one page of a kind in name order.
    pub async fn list_objects(
        &mut self,
        kind: String,
        after: Option<String>,
        limit: u32,
    ) -> Result<Page, CallError> {
        self.list_selected_objects(kind, Selector::default(), after, limit)
            .await
    }

    /// `store.list-selected`: one page of the objects of a kind that
    /// `selector` selects, in name order (the store checks the selector).
    /// `store.list` is the same call with an empty selector; both are
    /// traced as a `store.list` span.
    pub async fn list_selected_objects(
        &mut self,
        kind: String,
        selector: Selector,
        after: Option<String>,
        limit: u32,
    ) -> Result<Page, CallError> {
        if self.revocation.is_revoked() {
            return Err(self.revoked_error());
        }
        let span = telemetry::store_span(StoreCall::List { kind: &kind });
        let result = self
            .backend
            .list_selected(
                &self.fence.key.cluster,
                &kind,
                &selector,
                after.as_deref(),
                limit as usize,
            )
            .instrument(span.clone())
            .await
            .map_err(to_call_error);
        if let Ok(page) = &result {
            span.record("objects", page.objects.len());
            self.own_writes.read_page(&page.objects);
        }
        telemetry::outcome(&span, call_outcome(&result));
        result
    }

    /// `store.commit`: apply `ops` and append `events` atomically, within
    /// the controller's quotas and fenced by this tenure's lease.
    pub async fn commit_ops(
        &mut self,
        ops: Vec<Op>,
        events: Vec<NewEvent>,
    ) -> Result<Committed, CallError> {
        self.refuse_commit_if_revoked()?;
        let size = ops.iter().map(op_size).sum::<usize>()
            + events
                .iter()
                .map(|e| e.key.kind.len() + e.key.name.len() + e.reason.len() + e.message.len())
                .sum::<usize>();
        self.check_payload(size)?;
        if let Some(sharding) = &self.shard
            && let Some(refused) = ops.iter().find_map(|op| sharding.check_write(op).err())
        {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            return Err(CallError::Invalid(format!(
                "{refused} (lease {}, epoch {})",
                self.fence.key.name, self.fence.epoch.0
            )));
        }
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
        let span = telemetry::store_span(StoreCall::Commit {
            ops: ops.len(),
            events: events.len(),
        });
        // The changes this commit makes carry its trace on, to the
        // reconciles they wake (of this controller or another).
        let context = TraceParent::of_span_or_current(&span);
        let result = telemetry::with_write_context(
            context,
            self.backend.commit_fenced(&self.fence, &ops, &events),
        )
        .instrument(span.clone())
        .await;
        telemetry::outcome(
            &span,
            match &result {
                Ok(_) => "ok",
                Err(StoreError::Fenced { .. }) => "fenced",
                Err(StoreError::Conflict { .. }) => "conflict",
                Err(_) => "failed",
            },
        );
        drop(span);
        permit.settle(&result).await;
        let result = result.map(|mut committed| {
            let written = std::mem::take(&mut committed.written);
            self.own_writes.record(committed.revision, written);
            committed
        });
        match &result {
            Ok(_) => {}
            // Whether it landed, and what it wrote, is unknown.
            Err(StoreError::Unavailable(_)) => self.own_writes.clear(),
            // Nothing written; what the guest read of these objects may be
            // stale, so its next reads of them go to the database.
            Err(_) => self.own_writes.forget(ops.iter().map(Op::key)),
        }
        let counter = match &result {
            Ok(_) => &self.counters.ok,
            Err(StoreError::Fenced { cause, .. }) => {
                self.counters.fenced_because(Some(*cause));
                return result.map_err(to_call_error);
            }
            Err(StoreError::Conflict { .. }) => &self.counters.conflict,
            Err(_) => &self.counters.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result.map_err(to_call_error)
    }
}

/// The `outcome` trace attribute of a store read.
fn call_outcome<T>(result: &Result<T, CallError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(CallError::Fenced(_)) => "fenced",
        Err(CallError::Conflict(_)) => "conflict",
        Err(CallError::NotFound(_)) => "not_found",
        Err(CallError::Invalid(_)) => "invalid",
        Err(CallError::Unavailable(_)) => "unavailable",
    }
}

fn to_call_error(error: StoreError) -> CallError {
    match error {
        StoreError::Fenced { .. } => CallError::Fenced(error.to_string()),
        StoreError::Conflict { key, .. } => CallError::Conflict(key),
        StoreError::NotFound { key } => CallError::NotFound(key),
        StoreError::Invalid(_) | StoreError::TooLarge(_) => CallError::Invalid(error.to_string()),
        // Guests read no stream; a trimmed one is the store failing them.
        StoreError::Unavailable(_) | StoreError::TooOld { .. } => {
            CallError::Unavailable(error.to_string())
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::memory::MemoryAuthority;
    use crate::authority::{AcquireRequest, Acquired, Authority};
    use crate::fence::LeaseKey;
    use crate::quota::QuotaLimits;
    use crate::store::MemoryStore;

    fn task(name: &str) -> ObjectKey {
        ObjectKey {
            kind: "tasks".into(),
            name: name.into(),
        }
    }

    async fn grant(authority: &MemoryAuthority, lease: &str) -> Fence {
        let request = AcquireRequest {
            key: LeaseKey::new("c1", lease),
            holder: "h1".into(),
            ttl: crate::timeouts::LEASE_TTL,
        };
        match authority.acquire(&request).await.unwrap() {
            Acquired::Granted(grant) => grant.fence,
            held => panic!("not granted: {held:?}"),
        }
    }

    /// The store calls of one guest instance of the tenure `fence`.
    fn host(store: &Arc<MemoryStore>, fence: &Fence) -> StoreHost {
        let engine = wasmtime::Engine::default();
        StoreHost::new(
            store.clone(),
            fence.clone(),
            Revocation::new(&engine),
            1 << 20,
            Arc::default(),
            Arc::new(WriteQuota::new("sched", QuotaLimits::default())),
        )
    }

    async fn value_read(host: &mut StoreHost, key: &ObjectKey) -> String {
        host.get_object(key.clone())
            .await
            .unwrap()
            .map_or_else(|| "absent".into(), |o| o.value)
    }

    /// A memory store with the task `a` assigned by a commit of the tenure
    /// `sched` (whose host calls are returned, with that commit's revision)
    /// and then, unseen by the worker, finished by a user.
    async fn assigned_then_finished() -> (Arc<MemoryStore>, Arc<MemoryAuthority>, StoreHost, u64) {
        let authority = Arc::new(MemoryAuthority::new());
        let store = Arc::new(MemoryStore::new(authority.clone()));
        let fence = grant(&authority, "sched").await;
        let mut host = host(&store, &fence);
        let a = task("a");
        let created = store
            .put("c1", &a, "{\"s\":\"pending\"}", None)
            .await
            .unwrap();
        let ops = vec![Op::Update {
            key: a.clone(),
            expected_version: created.version,
            value: "{\"s\":\"assigned\"}".into(),
        }];
        let committed = host.commit_ops(ops, Vec::new()).await.unwrap();
        assert!(
            committed.written.is_empty(),
            "kept by the host, not handed on"
        );
        let own = host.own_writes();
        // Not read from the feed yet: the database answers.
        assert_eq!(value_read(&mut host, &a).await, "{\"s\":\"assigned\"}");
        assert!(!own.is_empty());
        // The worker reads the create, then this commit's own change.
        own.observe(&a, created.version);
        own.observe(&a, committed.revision);
        store.put("c1", &a, "{\"s\":\"done\"}", None).await.unwrap();
        (store, authority, host, committed.revision)
    }

    /// A get of an object whose newest change the worker read is this
    /// instance's own commit is answered from what that commit wrote, with
    /// no database read: here the user's later write, which the worker has
    /// not read yet, is not in the answer (the read is as fresh as the
    /// feed). Once the worker reads that change, the database answers.
    #[tokio::test]
    async fn a_get_is_answered_from_own_writes_while_the_feed_shows_them_newest() {
        let (store, _authority, mut host, _) = assigned_then_finished().await;
        let a = task("a");
        assert_eq!(value_read(&mut host, &a).await, "{\"s\":\"assigned\"}");
        let newer = store.get("c1", &a).await.unwrap().unwrap();
        host.own_writes().observe(&a, newer.version);
        assert_eq!(value_read(&mut host, &a).await, "{\"s\":\"done\"}");
        // A key this instance never wrote always asks the database.
        store.put("c1", &task("b"), "1", None).await.unwrap();
        assert_eq!(value_read(&mut host, &task("b")).await, "1");
    }

    /// A commit refused for a stale version drops what is kept of the
    /// objects it named, so the re-read after it asks the database and
    /// finds the newer version.
    #[tokio::test]
    async fn a_refused_commit_sends_the_next_read_to_the_database() {
        let (_store, _authority, mut host, revision) = assigned_then_finished().await;
        let a = task("a");
        assert_eq!(value_read(&mut host, &a).await, "{\"s\":\"assigned\"}");
        let stale = vec![Op::Update {
            key: a.clone(),
            expected_version: revision,
            value: "{\"s\":\"again\"}".into(),
        }];
        assert_eq!(
            host.commit_ops(stale, Vec::new()).await,
            Err(CallError::Conflict(a.clone()))
        );
        assert_eq!(value_read(&mut host, &a).await, "{\"s\":\"done\"}");
    }

    /// Nothing kept by one instance answers another's reads: the next
    /// tenure of the same lease reads from the database.
    #[tokio::test]
    async fn a_new_tenure_reads_from_the_database() {
        let (store, authority, mut host, _) = assigned_then_finished().await;
        let a = task("a");
        assert_eq!(value_read(&mut host, &a).await, "{\"s\":\"assigned\"}");
        authority
            .release(&host.fence, crate::authority::EndReason::Released)
            .await
            .unwrap();
        let successor = grant(&authority, "sched").await;
        assert!(successor.epoch > host.fence.epoch);
        let mut next = self::host(&store, &successor);
        assert_eq!(value_read(&mut next, &a).await, "{\"s\":\"done\"}");
    }

    /// Shard 0 of 4 (lease `sched-0`): a status write without an expected
    /// generation to another shard's object refuses the whole commit,
    /// naming the object, both shards, the lease and the epoch, and writes
    /// nothing of it; the same write with an expected generation, or to
    /// its own shard's object, commits.
    #[tokio::test]
    async fn a_blind_status_write_to_another_shards_object_is_refused_whole() {
        let authority = Arc::new(MemoryAuthority::new());
        let store = Arc::new(MemoryStore::new(authority.clone()));
        let fence = grant(&authority, "sched-0").await;
        let shard = crate::shard::Shard { index: 0, count: 4 };
        let mut host = host(&store, &fence).with_shard(Some(shard));
        // tasks/t-1 is in shard 0, tasks/t-2 in shard 1.
        let (mine, theirs) = (task("t-1"), task("t-2"));
        for key in [&mine, &theirs] {
            store.put("c1", key, "{}", None).await.unwrap();
        }
        let status = |key: &ObjectKey, generation| Op::Status {
            key: key.clone(),
            expected_generation: generation,
            status: Some("{\"seen\":true}".into()),
        };
        let before = store.get("c1", &theirs).await.unwrap().unwrap();
        let refused = host
            .commit_ops(vec![status(&mine, None), status(&theirs, None)], Vec::new())
            .await;
        let Err(CallError::Invalid(why)) = refused else {
            panic!("not refused: {refused:?}");
        };
        assert!(
            why.contains("tasks/t-2 belongs to shard 1 of 4")
                && why.contains("shard 0 of 4")
                && why.contains("lease sched-0, epoch 1"),
            "{why}"
        );
        assert_eq!(store.get("c1", &theirs).await.unwrap().unwrap(), before);
        let mine_now = store.get("c1", &mine).await.unwrap().unwrap();
        assert_eq!(mine_now.status, None, "nothing of the commit written");

        host.commit_ops(
            vec![
                status(&mine, None),
                status(&theirs, Some(before.generation)),
            ],
            Vec::new(),
        )
        .await
        .unwrap();
        assert!(
            store
                .get("c1", &theirs)
                .await
                .unwrap()
                .unwrap()
                .status
                .is_some()
        );
    }

    #[test]
    fn every_fence_cause_is_counted_under_its_own_label() {
        let labels: Vec<&str> = FenceCause::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(&FENCED_CAUSES[..4], labels.as_slice());
        let counters = CommitCounters::default();
        counters.fenced_because(Some(FenceCause::Superseded));
        counters.fenced_because(Some(FenceCause::Superseded));
        counters.fenced_because(Some(FenceCause::Expired));
        counters.fenced_because(None);
        assert_eq!(
            counters.fenced_by_cause(),
            vec![
                ("never_granted", 0),
                ("superseded", 2),
                ("released", 0),
                ("expired", 1),
                ("revoked", 1),
            ]
        );
        assert_eq!(counters.fenced.load(Ordering::Relaxed), 4);
    }
}
