//! [`FakeHost`]: the host a controller talks to on native targets, so its
//! logic is unit-tested with plain `cargo test`.
//!
//! It keeps the real store's rules (DNS-label names, JSON values and their
//! size limits, operations per commit, page size, versions that are commit
//! revisions, all-or-nothing commits), a fence the test controls, faults a
//! test schedules, and a record of every commit, event and log line. It is
//! installed per thread (the test harness runs each test on its own
//! thread), and never exists on `wasm32`.
//!
//! Split by concern: `install.rs` makes the fake this thread's native
//! `sys` host and serves the SDK's calls, `faults.rs` schedules and
//! applies faults, `records.rs` keeps what the fake saw, `store.rs` holds
//! the objects under the real store's rules, `http.rs` is the outbound
//! HTTP side (the host's rules for what may leave, a scripted receiver,
//! wire faults and the requests sent), `env.rs` the settings and the wall
//! clock a test sets; this file is the [`FakeHost`]
//! handle, its construction, seeding, fence and driving of a controller.
//! The fake sits above every other module of the crate (it drives a
//! [`Controller`]); nothing but the crate root imports it.
//!
//! Must never: be laxer than the host (a controller could pass its unit
//! tests here and fail against the host), exist on `wasm32`, or need a
//! host or database.

mod env;
mod faults;
mod http;
mod install;
mod quota;
mod records;
mod store;
mod watch;

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::controller::{Controller, Description, Reason, Reply, dispatch};
use crate::error::StoreError;
use crate::fence::{Fence, Shard};
use crate::limits::Limits;
use crate::object::{Metadata, Object, ObjectKey, decode};
use crate::sys::Op;

pub use faults::{At, Fault};
pub use http::{HttpFault, HttpRecord, HttpReply};
pub use quota::QuotaLimits;
pub use records::{CallCounts, CommitRecord, EventRecord, LogLine};
pub use watch::{Change, ChangeKind, Relations};

use faults::{Hook, PendingFault, Target};
use http::HttpState;
use store::{Objects, Stored};

/// Everything one fake knows, behind one `Rc<RefCell<_>>` so that clones,
/// and the handle installed into `sys`, share it. `faults.rs` owns
/// `revoked`, `unavailable`, `faults` and `hooks` (with the fence, the
/// admission of a call); `records.rs` owns `commits`, `events`, `logs` and
/// `calls` (counted by `install.rs` as each call comes in); `store.rs`
/// owns `objects`; `http.rs` owns `http`.
struct State {
    limits: Limits,
    fence: Fence,
    /// The shard the tenure runs (`tenure.shard`).
    shard: Shard,
    /// The shard label of the last controller the fake ran
    /// ([`FakeHost::reconcile`] and the like describe it first).
    shard_label: Option<String>,
    revoked: bool,
    unavailable: bool,
    objects: Objects,
    commits: Vec<CommitRecord>,
    events: Vec<EventRecord>,
    logs: Vec<LogLine>,
    calls: CallCounts,
    faults: Vec<PendingFault>,
    hooks: Vec<(Target, Hook)>,
    http: HttpState,
    /// The controller's settings as JSON text (`env.rs`).
    settings: String,
    /// The wall clock (`env.rs`).
    now: SystemTime,
    /// How many of `objects.changes` [`FakeHost::reconcile_changes`] has
    /// delivered (`watch.rs`).
    delivered: usize,
    /// The host's write quotas, once a test sets them (`quota.rs`).
    quota: Option<quota::QuotaState>,
}

/// An in-memory host for native unit tests of a controller.
///
/// `FakeHost::new()` installs a fresh fake on the current thread; from then
/// on every store, fence and logging call of the SDK on that thread goes to
/// it (the test harness runs each test on its own thread, so tests do not
/// share fakes; a thread a test spawns has none). Clones share the same
/// fake. A test then:
///
/// - **seeds** objects as users write them through the API:
///   [`FakeHost::seed`], [`FakeHost::seed_with`] (with metadata),
///   [`FakeHost::set_status`], [`FakeHost::remove`] (a delete request,
///   under the store's finalizer and owner rules);
/// - **drives** the controller: [`FakeHost::reconcile`] (what the host
///   would hear, as a [`Reply`]), [`FakeHost::reconcile_because`] (for a
///   given [`Reason`]: requeue, retry, resync), [`FakeHost::resync`],
///   [`FakeHost::reconcile_changes`] (every key the changes since the last
///   call wake, mapped as the host maps them: watched kinds and related
///   kinds, see [`crate::Related`]);
/// - **breaks** things: [`FakeHost::fail`] / [`FakeHost::fail_next_commit`]
///   with a [`Fault`], [`FakeHost::set_unavailable`], [`FakeHost::revoke`],
///   the host's write quotas with [`FakeHost::set_quotas`],
///   and [`FakeHost::before`] / [`FakeHost::before_commit`] to slip a
///   concurrent write in just before a given call;
/// - **moves tenures**: [`FakeHost::new_tenure`], [`FakeHost::set_fence`];
/// - **configures** the guest: [`FakeHost::set_settings`] (what
///   [`crate::settings`] reads) and the wall clock, [`FakeHost::set_now`]
///   and [`FakeHost::advance`] (what [`crate::clock::now`] reads; it starts
///   at 2026-01-01T00:00:00Z and never moves by itself);
/// - **scripts outbound HTTP**: [`FakeHost::allow_http`] (every request is
///   denied until then, as by the host), [`FakeHost::respond`],
///   [`FakeHost::respond_once`], [`FakeHost::respond_with`], and
///   [`FakeHost::fail_http`] with an [`HttpFault`];
/// - **asserts** on [`FakeHost::object`], [`FakeHost::commits`],
///   [`FakeHost::events`], [`FakeHost::logs`], [`FakeHost::calls`],
///   [`FakeHost::http_requests`], [`FakeHost::changes`] (the change
///   stream: every object write, with its owner and labels).
///
/// Versions follow the host: a per-fake revision counter that every commit
/// (and every seed or removal) advances, and that becomes the version of
/// every object the commit writes. Seeds and removals stand for writes by
/// users through the API: they record no commit and no event.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, FakeHost, Fault, StoreError, Transaction};
/// use serde_json::json;
///
/// let host = FakeHost::new();
/// host.seed("tasks", "t1", &json!({ "status": "pending" }));
///
/// // A write based on a stale read conflicts...
/// let tasks = Api::<serde_json::Value>::new("tasks");
/// let stale = tasks.get("t1").unwrap().unwrap();
/// host.seed("tasks", "t1", &json!({ "status": "cancelled" }));
/// let write = Transaction::new().update(&stale, &json!({ "status": "assigned" }));
/// assert!(matches!(write.commit(), Err(StoreError::Conflict(_))));
///
/// // ...and a deposed leader is fenced.
/// host.fail_next_commit(Fault::Fenced);
/// let fresh = tasks.get("t1").unwrap().unwrap();
/// let write = Transaction::new().update(&fresh, &json!({ "status": "assigned" }));
/// assert!(matches!(write.commit(), Err(StoreError::Fenced(_))));
/// assert!(host.commits().is_empty());
/// ```
#[derive(Clone)]
pub struct FakeHost {
    state: Rc<RefCell<State>>,
}

impl fmt::Debug for FakeHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.borrow();
        f.debug_struct("FakeHost")
            .field("fence", &state.fence)
            .field("revoked", &state.revoked)
            .field("revision", &state.objects.revision)
            .field("objects", &state.objects.map.len())
            .field("calls", &state.calls)
            .finish_non_exhaustive()
    }
}

impl Default for FakeHost {
    /// The same as [`FakeHost::new`].
    ///
    /// # Example
    ///
    /// ```
    /// let host = leasehold_guest::FakeHost::default();
    /// assert_eq!(host.revision(), 0);
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

impl FakeHost {
    /// An empty fake with the host's default [`Limits`], installed on the
    /// current thread (replacing any other). Its fence is cluster `test`,
    /// lease `controller`, epoch 1, holder `fake-host`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// assert_eq!(host.fence().epoch, 1);
    /// assert!(host.commits().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::with_limits(Limits::default())
    }

    /// An empty fake enforcing `limits`, installed on the current thread.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Limits};
    ///
    /// let host = FakeHost::with_limits(Limits { max_page_size: 2, ..Limits::default() });
    /// for name in ["a", "b", "c"] {
    ///     host.seed("tasks", name, &0);
    /// }
    /// let page = Api::<u32>::new("tasks").list(None, 100)?;
    /// assert_eq!(page.objects.len(), 2);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn with_limits(limits: Limits) -> Self {
        let host = Self {
            state: Rc::new(RefCell::new(State {
                limits,
                fence: Fence {
                    cluster: "test".into(),
                    lease: "controller".into(),
                    epoch: 1,
                    holder: "fake-host".into(),
                },
                shard: Shard::WHOLE,
                shard_label: None,
                revoked: false,
                unavailable: false,
                objects: Objects::default(),
                commits: Vec::new(),
                events: Vec::new(),
                logs: Vec::new(),
                calls: CallCounts::default(),
                faults: Vec::new(),
                hooks: Vec::new(),
                http: HttpState::default(),
                settings: env::NO_SETTINGS.to_string(),
                now: env::start(),
                delivered: 0,
                quota: None,
            })),
        };
        host.install();
        host
    }

    // ----- seeding and inspecting objects -------------------------------

    /// Create or replace `kind/name` with `value`, as a user's API write
    /// would, and return its new version. Records no commit and no event.
    ///
    /// # Panics
    ///
    /// If the kind, name or value break the store's rules: a test's setup
    /// is wrong.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    /// use serde_json::json;
    ///
    /// let host = FakeHost::new();
    /// let v1 = host.seed("nodes", "n1", &json!({ "capacity": 2 }));
    /// let v2 = host.seed("nodes", "n1", &json!({ "capacity": 3 }));
    /// assert!(v2 > v1);
    /// assert!(host.commits().is_empty());
    /// ```
    pub fn seed<T: Serialize + ?Sized>(&self, kind: &str, name: &str, value: &T) -> u64 {
        self.put(kind, name, value, None)
    }

    /// Create or replace `kind/name` with `value` and `meta` (all of it),
    /// as a user's API write of value and metadata would; returns the new
    /// version. Records no commit and no event. On an object marked for
    /// deletion, finalizers can be removed, never added, and leaving none
    /// removes it (the returned version is then the removal's revision).
    ///
    /// # Panics
    ///
    /// As [`FakeHost::seed`], and if the metadata breaks the host's rules
    /// (see [`Metadata`]) or names an owner that does not exist or is
    /// marked for deletion.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Metadata};
    ///
    /// let host = FakeHost::new();
    /// host.seed_with("tasks", "t1", &1, &Metadata::new().label("team", "db"));
    /// assert_eq!(host.object::<u32>("tasks", "t1").unwrap().label("team"), Some("db"));
    /// // A plain seed keeps the metadata, as a user's write of a bare value does.
    /// host.seed("tasks", "t1", &2);
    /// assert_eq!(host.object::<u32>("tasks", "t1").unwrap().label("team"), Some("db"));
    /// ```
    pub fn seed_with<T: Serialize + ?Sized>(
        &self,
        kind: &str,
        name: &str,
        value: &T,
        meta: &Metadata,
    ) -> u64 {
        self.put(kind, name, value, Some(meta))
    }

    /// A user's create-or-replace of the value, and of the metadata if
    /// given, through the store's own rules.
    fn put<T: Serialize + ?Sized>(
        &self,
        kind: &str,
        name: &str,
        value: &T,
        meta: Option<&Metadata>,
    ) -> u64 {
        let key = ObjectKey::new(kind, name);
        let text = serde_json::to_string(value)
            .unwrap_or_else(|e| panic!("seeding {key}: the value does not serialize: {e}"));
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        let now = state.now;
        let op = match state.objects.map.get(&key) {
            None => Op::CreateWith {
                key: key.clone(),
                value: text,
                meta: meta.cloned().unwrap_or_default(),
            },
            Some(stored) => Op::Replace {
                key: key.clone(),
                expected_version: stored.version,
                value: Some(text),
                meta: meta.cloned(),
            },
        };
        store::validate_commit(&state.limits, &[op], &[])
            .and_then(|valid| state.objects.apply(&valid.batch, 0, now))
            .map(|applied| applied.revision)
            .unwrap_or_else(|e| panic!("seeding {key}: {}", StoreError::from_wire(e)))
    }

    /// Write the status part of `kind/name` as a user's API status write
    /// would (whatever the generation); returns the new version. Records
    /// no commit and no event.
    ///
    /// # Panics
    ///
    /// If the object does not exist, or the status does not serialize or
    /// breaks the host's limits.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "t1", &1);
    /// host.set_status("tasks", "t1", &"ready");
    /// let task = host.object::<u32>("tasks", "t1").unwrap();
    /// assert_eq!(task.status::<String>().unwrap().as_deref(), Some("ready"));
    /// assert_eq!(task.generation, 1);
    /// ```
    pub fn set_status<S: Serialize + ?Sized>(&self, kind: &str, name: &str, status: &S) -> u64 {
        let key = ObjectKey::new(kind, name);
        let text = serde_json::to_string(status)
            .unwrap_or_else(|e| panic!("setting the status of {key}: it does not serialize: {e}"));
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        let now = state.now;
        let op = Op::Status {
            key: key.clone(),
            expected_generation: None,
            status: Some(text),
        };
        store::validate_commit(&state.limits, &[op], &[])
            .and_then(|valid| state.objects.apply(&valid.batch, 0, now))
            .map(|applied| applied.revision)
            .unwrap_or_else(|e| panic!("setting the status of {key}: {}", StoreError::from_wire(e)))
    }

    /// Request the deletion of `kind/name`, as a user's API delete would;
    /// whether it existed. As in the host's store, an object without
    /// finalizers is removed, one with finalizers is only marked
    /// ([`Object::is_deleting`], at the fake's clock) until its last
    /// finalizer is removed, and the objects it owns are deleted or marked
    /// with it. Records no commit and no event.
    ///
    /// # Panics
    ///
    /// If garbage collection would delete more than
    /// [`crate::MAX_COLLECTED_PER_COMMIT`] owned objects (the host refuses
    /// such a delete).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Metadata, ObjectKey};
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "a", &1);
    /// assert!(host.remove("tasks", "a"));
    /// assert!(!host.remove("tasks", "a"));
    ///
    /// // Owned objects go with their owner; a finalizer holds its object.
    /// host.seed("projects", "p", &1);
    /// let owned = Metadata::new().owner(ObjectKey::new("projects", "p"));
    /// host.seed_with("tasks", "t", &1, &owned);
    /// host.seed_with("tasks", "held", &1, &owned.clone().finalizer("example.com/x"));
    /// host.remove("projects", "p");
    /// assert!(host.object::<u32>("tasks", "t").is_none());
    /// assert!(host.object::<u32>("tasks", "held").unwrap().is_deleting());
    /// ```
    pub fn remove(&self, kind: &str, name: &str) -> bool {
        let key = ObjectKey::new(kind, name);
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        let now = state.now;
        state
            .objects
            .request_delete_by_user(&key, now)
            .unwrap_or_else(|e| panic!("deleting {key}: {}", StoreError::from_wire(e)))
    }

    /// The object `kind/name` decoded as `T`, read without counting as a
    /// store call.
    ///
    /// # Panics
    ///
    /// If the value does not decode as `T`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// host.seed("nodes", "n1", &serde_json::json!({ "capacity": 2 }));
    /// let node = host.object::<serde_json::Value>("nodes", "n1").unwrap();
    /// assert_eq!(node.value["capacity"], 2);
    /// assert_eq!(host.calls().total(), 0);
    /// ```
    pub fn object<T: DeserializeOwned>(&self, kind: &str, name: &str) -> Option<Object<T>> {
        let key = ObjectKey::new(kind, name);
        let state = self.state.borrow();
        let stored = state.objects.map.get(&key)?;
        Some(decode_for_test(&key, stored))
    }

    /// Every object of `kind` in name order, decoded as `T`, read without
    /// counting as store calls.
    ///
    /// # Panics
    ///
    /// If a value does not decode as `T`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// host.seed("counters", "b", &2);
    /// host.seed("counters", "a", &1);
    /// let values: Vec<u32> = host.objects::<u32>("counters").into_iter().map(|o| o.value).collect();
    /// assert_eq!(values, [1, 2]);
    /// ```
    pub fn objects<T: DeserializeOwned>(&self, kind: &str) -> Vec<Object<T>> {
        let state = self.state.borrow();
        state
            .objects
            .map
            .iter()
            .filter(|(key, _)| key.kind == kind)
            .map(|(key, stored)| decode_for_test(key, stored))
            .collect()
    }

    /// The last revision handed out (0 before any write).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// let version = host.seed("tasks", "a", &1);
    /// assert_eq!(host.revision(), version);
    /// ```
    pub fn revision(&self) -> u64 {
        self.state.borrow().objects.revision
    }

    // ----- the fence ----------------------------------------------------

    /// The current fence.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// assert_eq!(host.fence().holder, "fake-host");
    /// ```
    pub fn fence(&self) -> Fence {
        self.state.borrow().fence.clone()
    }

    /// Replace the fence, as the start of a tenure under it: calls are no
    /// longer revoked.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Fence};
    ///
    /// let host = FakeHost::new();
    /// host.set_fence(Fence {
    ///     cluster: "prod".into(),
    ///     lease: "scheduler".into(),
    ///     epoch: 41,
    ///     holder: "replica-b".into(),
    /// });
    /// assert_eq!(leasehold_guest::fence().epoch, 41);
    /// ```
    pub fn set_fence(&self, fence: Fence) {
        let mut state = self.state.borrow_mut();
        state.fence = fence;
        state.revoked = false;
    }

    /// The shard the guest's tenure runs: shard 0 of 1
    /// ([`Shard::WHOLE`]) until [`FakeHost::set_shard`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Shard};
    ///
    /// assert_eq!(FakeHost::new().shard(), Shard::WHOLE);
    /// ```
    pub fn shard(&self) -> Shard {
        self.state.borrow().shard
    }

    /// Run the guest as `shard` of a sharded controller, as the host does
    /// for a config entry with `shards = count`: [`crate::shard`] answers
    /// it; [`FakeHost::wakes`], [`FakeHost::reconcile_changes`] and
    /// [`FakeHost::resync`] queue only what the shard watches (its own
    /// objects, by the description's shard label or `kind/name`, and every
    /// object of its every-shard kinds); and a commit keeps the host's rule
    /// for writes to other shards' objects: a status write without an
    /// expected generation to an object of another shard (by `kind/name`)
    /// is refused whole with [`StoreError::Invalid`], and under a shard
    /// label (of the last controller the fake ran) every such write is.
    ///
    /// # Panics
    ///
    /// If `count` is 0 or above 64, or `index` is not below `count`: the
    /// host never runs such a shard, so a test that asks for one is wrong.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Shard, StoreError, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.set_shard(Shard { index: 0, count: 4 });
    /// host.seed("tasks", "t-1", &0); // shard 0 of 4
    /// host.seed("tasks", "t-2", &0); // shard 1 of 4
    /// Transaction::new().write_status("tasks", "t-1", None, &"ok").commit()?;
    /// let refused = Transaction::new().write_status("tasks", "t-2", None, &"ok").commit();
    /// assert!(matches!(refused, Err(StoreError::Invalid(_))));
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn set_shard(&self, shard: Shard) {
        assert!(
            (1..=64).contains(&shard.count) && shard.index < shard.count,
            "FakeHost::set_shard: {shard} is not a shard the host runs (count 1 to 64, index below count)"
        );
        self.state.borrow_mut().shard = shard;
    }

    /// Start the next tenure: the epoch goes up by one and calls are no
    /// longer revoked. Returns the new fence. Pair it with a fresh
    /// controller value to model a successor (nothing of a guest's memory
    /// survives its tenure).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// host.revoke();
    /// assert_eq!(host.new_tenure().epoch, 2);
    /// assert!(!host.is_revoked());
    /// ```
    pub fn new_tenure(&self) -> Fence {
        let mut state = self.state.borrow_mut();
        state.fence.epoch += 1;
        state.revoked = false;
        state.fence.clone()
    }

    /// End the tenure under the guest's feet, as the host does on lease
    /// loss: every later store call fails with [`StoreError::Fenced`] until
    /// [`FakeHost::new_tenure`] or [`FakeHost::set_fence`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, Error, FakeHost, StoreError};
    ///
    /// let host = FakeHost::new();
    /// host.revoke();
    /// let result = Api::<u32>::new("tasks").get("a");
    /// assert!(matches!(result, Err(Error::Store(StoreError::Fenced(_)))));
    /// ```
    pub fn revoke(&self) {
        self.state.borrow_mut().revoked = true;
    }

    /// Whether the tenure is revoked.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Fault, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.fail_next_commit(Fault::Fenced);
    /// let _ = Transaction::new().create("tasks", "a", &1).commit();
    /// assert!(host.is_revoked());
    /// ```
    pub fn is_revoked(&self) -> bool {
        self.state.borrow().revoked
    }

    // ----- driving a controller ------------------------------------------

    /// Reconcile `kind/name` with `controller` as the host would, and
    /// return what the host would hear. Installs this fake first. Each
    /// call has a fresh budget of outbound requests
    /// ([`Limits::http_requests_per_reconcile`]), as each reconcile has in
    /// the host; requests made outside it share one budget.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use leasehold_guest::{Context, Controller, Description, Error, FakeHost, Outcome, Reply};
    ///
    /// struct Patient;
    /// impl Controller for Patient {
    ///     fn describe(&self) -> Description {
    ///         Description::watching(["things"])
    ///     }
    ///     fn reconcile(&self, _: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
    ///         Ok(Outcome::RequeueAfter(Duration::from_secs(1)))
    ///     }
    /// }
    ///
    /// let host = FakeHost::new();
    /// assert_eq!(host.reconcile(&Patient, "things", "a"), Reply::RequeueAfter(Duration::from_secs(1)));
    /// ```
    pub fn reconcile<C: Controller + ?Sized>(
        &self,
        controller: &C,
        kind: &str,
        name: &str,
    ) -> Reply {
        self.reconcile_because(controller, kind, name, Reason::Change)
    }

    /// [`FakeHost::reconcile`] for `reason`: what the host does when a
    /// requeue comes due ([`Reason::Requeue`]), a failed reconcile is
    /// retried ([`Reason::Retry`]), a resync runs ([`Reason::Resync`]) or
    /// the object changed ([`Reason::Change`], what
    /// [`FakeHost::reconcile`] passes).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use leasehold_guest::{Context, Controller, Description, Error, FakeHost, Outcome, Reason, Reply};
    ///
    /// /// Checks an expiry only when its timer fires.
    /// struct Expirer;
    /// impl Controller for Expirer {
    ///     fn describe(&self) -> Description {
    ///         Description::watching(["leases"])
    ///     }
    ///     fn reconcile(&self, ctx: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
    ///         match ctx.reason() {
    ///             Reason::Requeue => Ok(Outcome::Done),
    ///             _ => Ok(Outcome::RequeueAfter(Duration::from_secs(60))),
    ///         }
    ///     }
    /// }
    ///
    /// let host = FakeHost::new();
    /// assert_eq!(host.reconcile(&Expirer, "leases", "a"), Reply::RequeueAfter(Duration::from_secs(60)));
    /// assert_eq!(host.reconcile_because(&Expirer, "leases", "a", Reason::Requeue), Reply::Done);
    /// ```
    pub fn reconcile_because<C: Controller + ?Sized>(
        &self,
        controller: &C,
        kind: &str,
        name: &str,
        reason: Reason,
    ) -> Reply {
        self.install();
        self.described(controller);
        self.state.borrow_mut().http.begin_reconcile();
        dispatch(controller, kind, name, reason)
    }

    /// `controller`'s description, whose shard label the fake's commits
    /// then judge blind status writes by (as the host learns it from
    /// `describe` at the start of a tenure).
    fn described<C: Controller + ?Sized>(&self, controller: &C) -> Description {
        let description = controller.describe();
        self.state.borrow_mut().shard_label = description.shard_label.clone();
        description
    }

    /// The change stream so far: every object write (by commits, seeds and
    /// removals, garbage collection's included), in commit order, each
    /// with the object's owner and labels as the host records them.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{ChangeKind, FakeHost, Metadata};
    ///
    /// let host = FakeHost::new();
    /// host.seed_with("pods", "p", &1, &Metadata::new().label("example.com/task", "t1"));
    /// host.seed_with("pods", "p", &1, &Metadata::new().label("example.com/task", "t2"));
    /// host.remove("pods", "p");
    /// let changes = host.changes();
    /// let kinds: Vec<ChangeKind> = changes.iter().map(|c| c.kind).collect();
    /// assert_eq!(kinds, [ChangeKind::Created, ChangeKind::Updated, ChangeKind::Deleted]);
    /// // The move records where the label was.
    /// assert_eq!(changes[1].previous.as_ref().unwrap().labels["example.com/task"], "t1");
    /// ```
    pub fn changes(&self) -> Vec<Change> {
        self.state.borrow().objects.changes.clone()
    }

    /// The keys the host would queue for `controller` from the changes not
    /// yet delivered by [`FakeHost::reconcile_changes`], without running
    /// anything: a change of a watched kind wakes its object
    /// ([`Reason::Change`]); one of a related kind wakes the keys its
    /// [`crate::Map`] gives for the object's owner and labels after the
    /// change and, if an update moved them, before it ([`Reason::Related`]).
    /// One entry per key, with the strongest reason, in the order first
    /// woken.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, Controller, Description, Error, FakeHost, Metadata, ObjectKey, Outcome, Reason};
    ///
    /// struct Owner;
    /// impl Controller for Owner {
    ///     fn describe(&self) -> Description {
    ///         Description::new().watch("tasks").owns("pods")
    ///     }
    ///     fn reconcile(&self, _: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
    ///         Ok(Outcome::Done)
    ///     }
    /// }
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "t1", &1);
    /// host.seed_with("pods", "p", &1, &Metadata::new().owner(ObjectKey::new("tasks", "t1")));
    /// // The task's own change outranks its pod's.
    /// assert_eq!(host.wakes(&Owner), [(ObjectKey::new("tasks", "t1"), Reason::Change)]);
    /// ```
    pub fn wakes<C: Controller + ?Sized>(&self, controller: &C) -> Vec<(ObjectKey, Reason)> {
        let description = controller.describe();
        let state = self.state.borrow();
        let view = watch::ShardView {
            shard: state.shard,
            description: &description,
        };
        watch::wakes(&view, &state.objects.changes[state.delivered..], |key| {
            state.objects.map.get(key).map(|o| o.meta.labels.clone())
        })
    }

    /// Reconcile every key the changes since the last call wake (see
    /// [`FakeHost::wakes`]), each once, for its reason, as the host's
    /// worker does, and mark those changes delivered. Changes the
    /// reconciles make are left for the next call, as the host reads them
    /// on its next turn.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, Controller, Description, Error, FakeHost, Map, Metadata, ObjectKey, Outcome, Reason, Reply};
    ///
    /// struct Tally;
    /// impl Controller for Tally {
    ///     fn describe(&self) -> Description {
    ///         Description::new().watch_related("pods", Map::label("example.com/task", "tasks"))
    ///     }
    ///     fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error> {
    ///         leasehold_guest::info!("{kind}/{name}: {}", ctx.reason());
    ///         Ok(Outcome::Done)
    ///     }
    /// }
    ///
    /// let host = FakeHost::new();
    /// host.seed_with("pods", "p", &1, &Metadata::new().label("example.com/task", "t1"));
    /// host.seed_with("pods", "p", &1, &Metadata::new().label("example.com/task", "t2"));
    /// let ran: Vec<(String, Reason)> =
    ///     host.reconcile_changes(&Tally).into_iter().map(|(key, reason, _)| (key.to_string(), reason)).collect();
    /// assert_eq!(ran, [("tasks/t1".to_string(), Reason::Related), ("tasks/t2".to_string(), Reason::Related)]);
    /// assert!(host.reconcile_changes(&Tally).is_empty());
    /// ```
    pub fn reconcile_changes<C: Controller + ?Sized>(
        &self,
        controller: &C,
    ) -> Vec<(ObjectKey, Reason, Reply)> {
        self.install();
        self.described(controller);
        let woken = self.wakes(controller);
        {
            let mut state = self.state.borrow_mut();
            state.delivered = state.objects.changes.len();
        }
        let mut replies = Vec::new();
        for (key, reason) in woken {
            self.state.borrow_mut().http.begin_reconcile();
            let reply = dispatch(controller, &key.kind, &key.name, reason);
            replies.push((key, reason, reply));
        }
        replies
    }

    /// Reconcile every object of every kind the controller watches, kinds
    /// in the order described and objects in name order, as the host does
    /// at the start of a tenure (each with [`Reason::Resync`]). Each kind's objects are listed when the
    /// kind's turn comes, without counting as store calls.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, Controller, Description, Error, FakeHost, Outcome, Reply};
    ///
    /// struct Watcher;
    /// impl Controller for Watcher {
    ///     fn describe(&self) -> Description {
    ///         Description::watching(["nodes", "tasks"])
    ///     }
    ///     fn reconcile(&self, _: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
    ///         Ok(Outcome::Done)
    ///     }
    /// }
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "t1", &1);
    /// host.seed("nodes", "n1", &1);
    /// let order: Vec<String> =
    ///     host.resync(&Watcher).into_iter().map(|(key, _)| key.to_string()).collect();
    /// assert_eq!(order, ["nodes/n1", "tasks/t1"]);
    /// ```
    pub fn resync<C: Controller + ?Sized>(&self, controller: &C) -> Vec<(ObjectKey, Reply)> {
        self.install();
        let description = self.described(controller);
        let mut replies = Vec::new();
        for kind in &description.watches {
            let keys: Vec<ObjectKey> = {
                let state = self.state.borrow();
                let view = watch::ShardView {
                    shard: state.shard,
                    description: &description,
                };
                state
                    .objects
                    .map
                    .iter()
                    .filter(|(key, stored)| {
                        key.kind == *kind && view.watches(key, &stored.meta.labels)
                    })
                    .map(|(key, _)| key.clone())
                    .collect()
            };
            for key in keys {
                self.state.borrow_mut().http.begin_reconcile();
                let reply = dispatch(controller, &key.kind, &key.name, Reason::Resync);
                replies.push((key, reply));
            }
        }
        replies
    }
}

fn decode_for_test<T: DeserializeOwned>(key: &ObjectKey, stored: &Stored) -> Object<T> {
    decode(store::raw(key, stored)).unwrap_or_else(|e| {
        panic!(
            "{key} does not decode as {}: {e}",
            std::any::type_name::<T>()
        )
    })
}

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod meta_tests;
#[cfg(test)]
mod tests;
