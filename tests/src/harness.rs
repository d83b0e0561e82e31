//! The component harness: a compiled controller component, loaded into the
//! host's real runtime on the memory backends and driven one reconcile at a
//! time.
//!
//! Native tests against the SDK's `FakeHost` prove a controller's logic;
//! this harness proves the same logic survives the real boundary: the
//! component built for `wasm32-wasip2`, the WIT bindings on both sides, the
//! host's store calls stamped with the tenure's fence, and the memory
//! store's real preconditions, fence check, revisions and event log.
//!
//! ```no_run
//! # async fn example() {
//! use leasehold_host::runtime::Reconciled;
//! use leasehold_tests::harness::{CommitFault, ComponentHarness};
//! use serde_json::json;
//!
//! let mut harness = ComponentHarness::load("scheduler").await;
//! harness.seed("nodes", "n1", &json!({ "capacity": 1 })).await;
//! harness.seed("tasks", "t1", &json!({ "status": "pending" })).await;
//! harness.fail_commit(1, CommitFault::LostReply);
//! assert!(matches!(
//!     harness.reconcile("tasks", "t1").await,
//!     Reconciled::Failed { .. }
//! ));
//! harness.new_tenure().await;
//! assert_eq!(harness.reconcile("tasks", "t1").await, Reconciled::Done);
//! assert_eq!(harness.events_with_reason("Assigned").await.len(), 1);
//! # }
//! ```
//!
//! What it does not do: run a supervisor. There is no renewal, no work
//! queue, no backoff and no restart; the test is the supervisor, deciding
//! when to reconcile, when a tenure ends and when the next one starts. The
//! supervisor's own tests (`tests/supervisor.rs`) cover those.
//!
//! Ordering is deterministic: faults are scheduled against the count of
//! commits the store has seen ([`FaultyStore`]), so they strike at a known
//! point inside the guest's reconcile without any sleep.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;
use leasehold_host::authority::memory::MemoryAuthority;
use leasehold_host::authority::{Authority, TenureRecord};
use leasehold_host::fence::{Fence, LeaseKey};
use leasehold_host::runtime::{
    CommitCounters, CompiledController, Description, EngineConfig, GuestError, GuestInstance,
    GuestLimits, Reconciled, Revocation, Runtime,
};
use leasehold_host::store::memory::MemoryStore;
use leasehold_host::store::{
    Committed, Event, NewEvent, Object, ObjectKey, Op, Origin, Page, Selector, Store, StoreError,
};
use serde_json::Value;
use tokio::sync::watch;

use crate::{MemoryBackends, guest};

/// The cluster every harness works in.
pub const CLUSTER: &str = "components";

/// The holder a [`CommitFault::Fenced`] hands the lease to.
pub const RIVAL_HOLDER: &str = "rival-replica";

/// Objects and events read back per page (the store caps pages anyway).
const READ_PAGE: usize = 500;

/// Guests alive at once across every test of one test binary: each harness
/// keeps one instance, and tests run on a few threads.
const MAX_GUESTS: u32 = 16;

/// The engine every harness of this process shares: compiling a component
/// takes seconds in a debug build, so each component is compiled once per
/// test binary.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::new(&EngineConfig {
            max_guests: MAX_GUESTS,
            memory_bytes: leasehold_host::limits::GUEST_MEMORY_BYTES,
            pooling: true,
            // Compiled components are cached across runs, beside the
            // service tests' cache, and keyed by the component's bytes.
            cache_dir: Some(crate::guest_dir().join("../../leasehold-test-cache")),
        })
        .expect("build the Wasm engine")
    })
}

/// The compiled component `name`, compiled on first use. Tests asking for
/// the same component at once wait for one compilation; different
/// components compile in parallel.
fn compiled(name: &str) -> CompiledController {
    static COMPILED: OnceLock<Mutex<HashMap<String, Arc<OnceLock<CompiledController>>>>> =
        OnceLock::new();
    let slot = COMPILED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(name.to_string())
        .or_default()
        .clone();
    slot.get_or_init(|| {
        runtime()
            .load(name, &guest(name), GuestLimits::default(), Vec::new())
            .unwrap_or_else(|e| panic!("load component {name}: {e}"))
    })
    .clone()
}

/// One tenure's guest: its fence, its instance and its commit counters.
struct Tenure {
    fence: Fence,
    instance: GuestInstance,
    revocation: Revocation,
    counters: Arc<CommitCounters>,
}

/// A controller component running in the host runtime on the memory
/// backends, under a lease the harness grants.
///
/// - [`load`](Self::load) grants the lease named after the component to
///   `replica-1` (epoch 1) and instantiates the component for that tenure;
/// - [`reconcile`](Self::reconcile) and [`describe`](Self::describe) call
///   the guest's exports;
/// - [`seed`](Self::seed), [`remove`](Self::remove) write as a user would,
///   through the store's versioned API writes; [`object`](Self::object),
///   [`events`](Self::events), [`history`](Self::history) read back;
/// - [`fail_commit`](Self::fail_commit), [`before_commit`](Self::before_commit)
///   and [`set_unavailable`](Self::set_unavailable) break the store at a
///   chosen commit ([`FaultyStore`]);
/// - [`new_tenure`](Self::new_tenure) starts a successor: the old guest is
///   revoked and dropped, the lease is taken over at the next epoch, and a
///   fresh instance runs (G1).
pub struct ComponentHarness {
    component: String,
    compiled: CompiledController,
    backends: MemoryBackends,
    store: Arc<FaultyStore>,
    tenure: Tenure,
    replicas: u32,
}

impl ComponentHarness {
    /// Load the component `name` (built by `cargo xtask guests` into
    /// [`crate::guest_dir`]) on fresh, empty memory backends, grant its
    /// lease to `replica-1` and instantiate it.
    ///
    /// # Panics
    ///
    /// If the component is missing (the message says how to build it), does
    /// not compile, or fails to instantiate.
    pub async fn load(name: &str) -> Self {
        let compiled = compiled(name);
        let backends = MemoryBackends::new();
        let store = Arc::new(FaultyStore::new(
            backends.store.clone(),
            backends.authority.clone(),
        ));
        let grant = backends.grant(CLUSTER, name, "replica-1").await;
        let tenure = Self::instantiate(&compiled, &store, grant.fence).await;
        Self {
            component: name.to_string(),
            compiled,
            backends,
            store,
            tenure,
            replicas: 1,
        }
    }

    async fn instantiate(
        compiled: &CompiledController,
        store: &Arc<FaultyStore>,
        fence: Fence,
    ) -> Tenure {
        let counters = Arc::new(CommitCounters::default());
        let revocation = compiled.revocation();
        let instance = compiled
            .instantiate(
                fence.clone(),
                store.clone(),
                counters.clone(),
                revocation.clone(),
            )
            .await
            .unwrap_or_else(|e| panic!("instantiate {}: {e}", compiled.name()));
        Tenure {
            fence,
            instance,
            revocation,
            counters,
        }
    }

    /// The lease the controller runs under: `(CLUSTER, component name)`.
    pub fn lease(&self) -> LeaseKey {
        LeaseKey::new(CLUSTER, &self.component)
    }

    /// The current tenure's fence.
    pub fn fence(&self) -> &Fence {
        &self.tenure.fence
    }

    /// The current tenure's commit counters, as the host counts them at the
    /// boundary (what reached the store and how it ended).
    pub fn counters(&self) -> &CommitCounters {
        &self.tenure.counters
    }

    /// The backends under the fault-injecting store, for what this type
    /// does not wrap.
    pub fn backends(&self) -> &MemoryBackends {
        &self.backends
    }

    /// The store the guest talks to.
    pub fn store(&self) -> &FaultyStore {
        &self.store
    }

    /// Ask the guest what it watches.
    ///
    /// # Panics
    ///
    /// If the guest fails (traps, is aborted, runs past its deadline).
    pub async fn describe(&mut self) -> Description {
        let component = &self.component;
        self.tenure
            .instance
            .describe()
            .await
            .unwrap_or_else(|e| panic!("describe {component}: {e}"))
    }

    /// Reconcile `kind/name` in the current tenure's guest.
    ///
    /// # Panics
    ///
    /// If the guest fails (traps, is aborted, runs past its deadline): use
    /// [`try_reconcile`](Self::try_reconcile) to expect that.
    pub async fn reconcile(&mut self, kind: &str, name: &str) -> Reconciled {
        match self.try_reconcile(kind, name).await {
            Ok(reconciled) => reconciled,
            Err(e) => panic!("reconcile {kind}/{name}: {e}"),
        }
    }

    /// Reconcile `kind/name`, returning how the guest failed if it did.
    /// After a failure the instance is unusable: start a new tenure.
    pub async fn try_reconcile(
        &mut self,
        kind: &str,
        name: &str,
    ) -> Result<Reconciled, GuestError> {
        self.tenure.instance.reconcile(kind, name).await
    }

    /// What a supervisor does at the start of a tenure: reconcile every
    /// object of every watched kind, kind by kind in the order the guest
    /// describes them, names in store order (listed before reconciling
    /// each kind). Returns each object's reply.
    pub async fn resync(&mut self) -> Vec<(ObjectKey, Reconciled)> {
        let description = self.describe().await;
        let mut replies = Vec::new();
        for kind in &description.watches {
            for object in self.objects(kind).await {
                let reply = self.reconcile(kind, &object.name).await;
                replies.push((key(kind, &object.name), reply));
            }
        }
        replies
    }

    /// End this tenure and start its successor, as after a failover: the
    /// current guest is revoked and dropped (G3), the lease is taken over by
    /// the next replica at the next epoch (whoever held it: this tenure, or
    /// the rival of a [`CommitFault::Fenced`]), and a fresh instance of the
    /// component runs for it (G1). Returns the new fence.
    pub async fn new_tenure(&mut self) -> Fence {
        self.tenure.revocation.revoke();
        self.replicas += 1;
        let holder = format!("replica-{}", self.replicas);
        let fence = self
            .backends
            .authority
            .faults()
            .steal(&self.lease(), &holder);
        // The old instance is revoked already: it can never run again,
        // whatever happens to the new one (G3).
        let next = Self::instantiate(&self.compiled, &self.store, fence.clone()).await;
        self.tenure = next;
        fence
    }

    /// Revoke the current tenure, as the host does when it loses the lease:
    /// every later call of this guest is aborted before it runs.
    pub fn revoke(&self) {
        self.tenure.revocation.revoke();
    }

    /// Create or replace `kind/name` as a user would (an API write, which
    /// also appends an `Updated` or `Created` event). Returns the version.
    pub async fn seed(&self, kind: &str, name: &str, value: &Value) -> u64 {
        self.backends
            .store
            .put(CLUSTER, &key(kind, name), &value.to_string(), None)
            .await
            .unwrap_or_else(|e| panic!("seed {kind}/{name}: {e}"))
            .version
    }

    /// Delete `kind/name` as a user would.
    pub async fn remove(&self, kind: &str, name: &str) {
        self.backends
            .store
            .delete(CLUSTER, &key(kind, name), None)
            .await
            .unwrap_or_else(|e| panic!("remove {kind}/{name}: {e}"));
    }

    /// `kind/name` as stored, if it exists.
    pub async fn object(&self, kind: &str, name: &str) -> Option<Object> {
        self.backends
            .store
            .get(CLUSTER, &key(kind, name))
            .await
            .unwrap_or_else(|e| panic!("read {kind}/{name}: {e}"))
    }

    /// The JSON value of `kind/name`.
    ///
    /// # Panics
    ///
    /// If it does not exist.
    pub async fn value(&self, kind: &str, name: &str) -> Value {
        let object = self
            .object(kind, name)
            .await
            .unwrap_or_else(|| panic!("{kind}/{name} does not exist"));
        parse(&object)
    }

    /// Every object of `kind`, in name order.
    pub async fn objects(&self, kind: &str) -> Vec<Object> {
        let mut objects = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let Page {
                objects: page,
                next,
            } = self
                .backends
                .store
                .list(CLUSTER, kind, after.as_deref(), READ_PAGE)
                .await
                .unwrap_or_else(|e| panic!("list {kind}: {e}"));
            objects.extend(page);
            match next {
                Some(next) => after = Some(next),
                None => return objects,
            }
        }
    }

    /// Every `(name, value)` of `kind`, in name order.
    pub async fn values(&self, kind: &str) -> Vec<(String, Value)> {
        self.objects(kind)
            .await
            .iter()
            .map(|o| (o.name.clone(), parse(o)))
            .collect()
    }

    /// The cluster's event log, in commit order (users' writes included).
    pub async fn events(&self) -> Vec<Event> {
        let mut events: Vec<Event> = Vec::new();
        loop {
            let after = events.last().map_or(0, |e| e.seq);
            let page = self
                .backends
                .store
                .events(CLUSTER, after, READ_PAGE)
                .await
                .expect("read the event log");
            if page.is_empty() {
                return events;
            }
            events.extend(page);
        }
    }

    /// The events with `reason`, in commit order.
    pub async fn events_with_reason(&self, reason: &str) -> Vec<Event> {
        let mut events = self.events().await;
        events.retain(|e| e.reason == reason);
        events
    }

    /// Who last wrote `kind/name`: a user, or a guest at some epoch.
    pub async fn written_by(&self, kind: &str, name: &str) -> Option<Origin> {
        self.backends
            .store
            .written_by(CLUSTER, &key(kind, name))
            .unwrap_or_else(|e| panic!("origin of {kind}/{name}: {e}"))
    }

    /// The lease's tenures, oldest first, with the writes each made (L6).
    pub async fn history(&self) -> Vec<TenureRecord> {
        let mut history = self
            .backends
            .authority
            .history(&self.lease(), usize::MAX)
            .await
            .expect("read the lease history");
        history.reverse();
        history
    }

    /// Fail the `n`-th commit from now (1 = the next one); see
    /// [`FaultyStore::fail_commit`].
    pub fn fail_commit(&self, n: u64, fault: CommitFault) {
        self.store.fail_commit(n, fault);
    }

    /// Land `writes` just before the `n`-th commit from now; see
    /// [`FaultyStore::before_commit`].
    pub fn before_commit(&self, n: u64, writes: impl IntoIterator<Item = RivalWrite>) {
        self.store.before_commit(n, writes);
    }

    /// Make every store call fail as unavailable (or work again).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.store.set_unavailable(unavailable);
    }

    /// Scheduled faults and rival writes that have not struck yet.
    pub fn pending_faults(&self) -> usize {
        self.store.pending_faults()
    }

    /// Commits that reached the store, in every tenure.
    pub fn commit_attempts(&self) -> u64 {
        self.store.commit_attempts()
    }
}

fn key(kind: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind: kind.to_string(),
        name: name.to_string(),
    }
}

fn parse(object: &Object) -> Value {
    serde_json::from_str(&object.value)
        .unwrap_or_else(|e| panic!("{}/{} holds invalid JSON: {e}", object.kind, object.name))
}

/// How [`FaultyStore`] breaks one commit. Each is produced by the real
/// backends wherever it can be, so the guest sees exactly what production
/// would show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitFault {
    /// Another replica takes the lease (the memory authority's
    /// [`steal`](leasehold_host::authority::memory::Faults::steal), to
    /// [`RIVAL_HOLDER`]) just before the commit: the store's own fence check
    /// refuses it and nothing is written.
    Fenced,
    /// A rival write lands just before the commit on the commit's first
    /// object: rewritten with its current value (a new version) if the
    /// commit updates or deletes it, created if the commit creates it. The
    /// store's own precondition check refuses the commit.
    Conflict,
    /// The store cannot be reached: nothing is written, `Unavailable`.
    Unavailable,
    /// The commit lands, then its reply is lost: `Unavailable`, although
    /// everything was written.
    LostReply,
}

/// A user's write that [`FaultyStore::before_commit`] lands just before a
/// commit: a concurrent writer racing the guest.
#[derive(Debug, Clone, PartialEq)]
pub struct RivalWrite {
    key: ObjectKey,
    /// `None` deletes.
    value: Option<Value>,
}

impl RivalWrite {
    /// Create or replace `kind/name` with `value`.
    pub fn put(kind: &str, name: &str, value: Value) -> Self {
        Self {
            key: key(kind, name),
            value: Some(value),
        }
    }

    /// Delete `kind/name`.
    pub fn delete(kind: &str, name: &str) -> Self {
        Self {
            key: key(kind, name),
            value: None,
        }
    }
}

/// What is scheduled against one commit.
#[derive(Debug, Default)]
struct Planned {
    rivals: Vec<RivalWrite>,
    fault: Option<CommitFault>,
}

#[derive(Debug, Default)]
struct Script {
    /// Commits seen so far; the next one is `attempts + 1`.
    attempts: u64,
    /// By the (1-based) commit they strike at.
    planned: HashMap<u64, Planned>,
}

impl Script {
    fn at(&mut self, n: u64) -> &mut Planned {
        assert!(n >= 1, "commits are counted from 1 (the next one)");
        self.planned.entry(self.attempts + n).or_default()
    }
}

/// A store that breaks on cue, wrapped around the memory store the guest's
/// commits would otherwise reach directly.
///
/// Faults are scheduled against commits counted from the moment of
/// scheduling (`1` is the next commit that reaches the store, whichever
/// tenure makes it), so a test names exactly which attempt of a reconcile
/// fails. Reads pass through untouched unless the whole store is made
/// unavailable.
pub struct FaultyStore {
    inner: Arc<MemoryStore>,
    authority: Arc<MemoryAuthority>,
    script: Mutex<Script>,
    unavailable: AtomicBool,
    attempts: AtomicU64,
}

impl FaultyStore {
    /// Wrap `inner`, whose guest writes are fenced by `authority`.
    pub fn new(inner: Arc<MemoryStore>, authority: Arc<MemoryAuthority>) -> Self {
        Self {
            inner,
            authority,
            script: Mutex::default(),
            unavailable: AtomicBool::new(false),
            attempts: AtomicU64::new(0),
        }
    }

    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fail the `n`-th commit from now (1 = the next one) with `fault`.
    ///
    /// # Panics
    ///
    /// If that commit already has a fault scheduled, or `n` is 0.
    pub fn fail_commit(&self, n: u64, fault: CommitFault) {
        let mut script = self.script();
        let planned = script.at(n);
        assert!(
            planned.fault.is_none(),
            "commit {n} from now already fails with {:?}",
            planned.fault
        );
        planned.fault = Some(fault);
    }

    /// Land `writes`, in order, as API writes just before the `n`-th commit
    /// from now (1 = the next one) reaches the store, and before any fault
    /// scheduled for that commit.
    pub fn before_commit(&self, n: u64, writes: impl IntoIterator<Item = RivalWrite>) {
        self.script().at(n).rivals.extend(writes);
    }

    /// Make every call (reads and commits) fail as unavailable, or work
    /// again. Nothing is written while it is set.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.unavailable.store(unavailable, Ordering::SeqCst);
    }

    /// Drop every scheduled fault and rival write that has not struck.
    pub fn clear_faults(&self) {
        self.script().planned.clear();
    }

    /// Scheduled faults and rival writes that have not struck yet: 0 proves
    /// every one of them was reached.
    pub fn pending_faults(&self) -> usize {
        self.script()
            .planned
            .values()
            .map(|p| p.rivals.len() + usize::from(p.fault.is_some()))
            .sum()
    }

    /// Commits that reached this store (including refused ones).
    pub fn commit_attempts(&self) -> u64 {
        self.attempts.load(Ordering::SeqCst)
    }

    fn check_available(&self) -> Result<(), StoreError> {
        if self.unavailable.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable(
                "injected fault: the store is unreachable".into(),
            ));
        }
        Ok(())
    }

    async fn land(&self, cluster: &str, write: &RivalWrite) {
        let result = match &write.value {
            Some(value) => self
                .inner
                .put(cluster, &write.key, &value.to_string(), None)
                .await
                .map(drop),
            None => self.inner.delete(cluster, &write.key, None).await,
        };
        result.unwrap_or_else(|e| panic!("rival write to {}: {e}", write.key));
    }

    /// Make the commit `ops` conflict with a write that lands first.
    async fn rival_for(&self, cluster: &str, ops: &[Op]) {
        let Some((key, created)) = ops.first().map(|op| match op {
            Op::Create { key, value } | Op::CreateWith { key, value, .. } => (key, Some(value)),
            other => (other.key(), None),
        }) else {
            return;
        };
        let value = match created {
            Some(value) => value.clone(),
            // Rewritten as it is: only its version changes. Gone already:
            // the commit fails as not found on its own.
            None => match self.inner.get(cluster, key).await {
                Ok(Some(object)) => object.value,
                _ => return,
            },
        };
        self.inner
            .put(cluster, key, &value, None)
            .await
            .unwrap_or_else(|e| panic!("rival write to {key}: {e}"));
    }
}

#[async_trait]
impl Store for FaultyStore {
    async fn get(&self, cluster: &str, key: &ObjectKey) -> Result<Option<Object>, StoreError> {
        self.check_available()?;
        self.inner.get(cluster, key).await
    }

    async fn list(
        &self,
        cluster: &str,
        kind: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.check_available()?;
        self.inner.list(cluster, kind, after, limit).await
    }

    async fn list_selected(
        &self,
        cluster: &str,
        kind: &str,
        selector: &Selector,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.check_available()?;
        self.inner
            .list_selected(cluster, kind, selector, after, limit)
            .await
    }

    async fn commit_fenced(
        &self,
        fence: &Fence,
        ops: &[Op],
        events: &[NewEvent],
    ) -> Result<Committed, StoreError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        // Taken out under the lock, acted on after it: no lock is held
        // across an await.
        let planned = {
            let mut script = self.script();
            script.attempts += 1;
            let n = script.attempts;
            script.planned.remove(&n).unwrap_or_default()
        };
        self.check_available()?;
        let cluster = fence.key.cluster.as_str();
        for write in &planned.rivals {
            self.land(cluster, write).await;
        }
        match planned.fault {
            None => self.inner.commit_fenced(fence, ops, events).await,
            Some(CommitFault::Fenced) => {
                self.authority.faults().steal(&fence.key, RIVAL_HOLDER);
                self.inner.commit_fenced(fence, ops, events).await
            }
            Some(CommitFault::Conflict) => {
                self.rival_for(cluster, ops).await;
                self.inner.commit_fenced(fence, ops, events).await
            }
            Some(CommitFault::Unavailable) => Err(StoreError::Unavailable(
                "injected fault: the commit did not reach the store".into(),
            )),
            Some(CommitFault::LostReply) => {
                self.inner.commit_fenced(fence, ops, events).await?;
                Err(StoreError::Unavailable(
                    "injected fault: the commit's reply was lost".into(),
                ))
            }
        }
    }

    async fn put(
        &self,
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        expected_version: Option<u64>,
    ) -> Result<Object, StoreError> {
        self.check_available()?;
        self.inner.put(cluster, key, value, expected_version).await
    }

    async fn delete(
        &self,
        cluster: &str,
        key: &ObjectKey,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        self.check_available()?;
        self.inner.delete(cluster, key, expected_version).await
    }

    async fn write(
        &self,
        cluster: &str,
        write: &leasehold_host::store::ApiWrite,
    ) -> Result<leasehold_host::store::Written, StoreError> {
        self.check_available()?;
        self.inner.write(cluster, write).await
    }

    async fn events(
        &self,
        cluster: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.check_available()?;
        self.inner.events(cluster, after, limit).await
    }

    async fn changes(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Result<leasehold_host::store::ChangePage, StoreError> {
        self.check_available()?;
        self.inner.changes(cluster, kinds, after, limit).await
    }

    fn watch(&self, cluster: &str) -> watch::Receiver<u64> {
        self.inner.watch(cluster)
    }
}
