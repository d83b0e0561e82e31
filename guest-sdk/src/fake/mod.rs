//! [`FakeHost`]: the host a controller talks to on native targets, so its
//! logic is unit-tested with plain `cargo test`.
//!
//! It keeps the real store's rules (DNS-label names, JSON values and their
//! size limits, operations per commit, page size, versions that are commit
//! revisions, all-or-nothing commits), a fence the test controls, faults a
//! test schedules, and a record of every commit, event and log line. It is
//! installed per thread (the test harness runs each test on its own
//! thread), and never exists on `wasm32`.

mod store;

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::controller::{Controller, Reply, dispatch};
use crate::error::{QUOTA_EXCEEDED_PREFIX, Quota, StoreError};
use crate::fence::Fence;
use crate::limits::Limits;
use crate::log::Level;
use crate::object::{Object, ObjectKey};
use crate::sys::{RawObject, RawPage};
use crate::transaction::{Committed, NewEvent, Op};

use store::{Objects, Stored};

thread_local! {
    static CURRENT: RefCell<Option<FakeHost>> = const { RefCell::new(None) };
}

/// The fake host installed on this thread, if any.
pub(crate) fn try_current() -> Option<FakeHost> {
    CURRENT.with(|current| current.borrow().clone())
}

/// The fake host installed on this thread.
///
/// # Panics
///
/// If there is none: on native targets the store has no other backend.
pub(crate) fn current() -> FakeHost {
    try_current().expect(
        "no FakeHost on this thread: native builds of a controller talk to a fake host; \
         create one with `leasehold_guest::FakeHost::new()` before calling the store",
    )
}

/// When an injected [`Fault`] strikes (or a [`FakeHost::before`] write
/// runs), counted from the moment it is scheduled: `At::Call(1)` is the next store call of any sort (get, list or
/// commit), `At::Commit(2)` the commit after next.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, At, FakeHost, Fault, StoreError};
///
/// let host = FakeHost::new();
/// host.fail(At::Call(2), Fault::Unavailable);
/// let tasks = Api::<serde_json::Value>::new("tasks");
/// assert!(tasks.get("a").is_ok());
/// assert!(matches!(
///     tasks.get("a"),
///     Err(leasehold_guest::Error::Store(StoreError::Unavailable(_)))
/// ));
/// assert!(tasks.get("a").is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The n-th store call from now (1 = the next one), of any sort.
    Call(u64),
    /// The n-th commit from now (1 = the next one).
    Commit(u64),
}

/// A failure [`FakeHost::fail`] injects.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Fault, StoreError, Transaction};
///
/// let host = FakeHost::new();
/// host.fail_next_commit(Fault::LostReply);
/// let result = Transaction::new().create("tasks", "a", &1).commit();
/// // The caller sees a failure, but the write landed.
/// assert!(matches!(result, Err(StoreError::Unavailable(_))));
/// assert!(host.object::<u32>("tasks", "a").is_some());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call fails with [`StoreError::Fenced`], and so does every later
    /// call (as after [`FakeHost::revoke`]): a tenure never comes back.
    Fenced,
    /// The commit fails with [`StoreError::Conflict`] on its first
    /// operation's object (or first event's, if it has no operations),
    /// writing nothing. Commits only. To make a real conflict, change the
    /// object in [`FakeHost::before_commit`] instead.
    Conflict,
    /// The call fails with [`StoreError::Unavailable`]; a commit writes
    /// nothing.
    Unavailable,
    /// The commit is applied, then fails with [`StoreError::Unavailable`],
    /// as when the connection drops after the database committed: the
    /// caller cannot tell it landed. Commits only.
    LostReply,
    /// The commit is refused by a write quota of the controller, writing
    /// nothing: it fails with [`StoreError::QuotaExceeded`], derived from
    /// the host's message exactly as on `wasm32`. The limit shown is the
    /// host's default; for [`Quota::CreatesPerSecond`] the refusal asks to
    /// retry after 10 ms, for [`Quota::ObjectsPerKind`] it names the kind
    /// of the commit's first operation. Commits only.
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Fault, Quota, StoreError, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.fail_next_commit(Fault::QuotaExceeded(Quota::ObjectsPerKind));
    /// match Transaction::new().create("tasks", "a", &1).commit() {
    ///     Err(StoreError::QuotaExceeded(q)) => assert_eq!(q.kind.as_deref(), Some("tasks")),
    ///     other => panic!("expected a quota refusal, got {other:?}"),
    /// }
    /// assert!(host.object::<u32>("tasks", "a").is_none());
    /// ```
    QuotaExceeded(Quota),
}

impl Fault {
    fn commits_only(self) -> bool {
        matches!(
            self,
            Fault::Conflict | Fault::LostReply | Fault::QuotaExceeded(_)
        )
    }
}

/// The host's default `max_creates_per_second`, shown in injected refusals.
const HOST_DEFAULT_CREATES_PER_SECOND: u64 = 100;
/// The host's default `max_objects_per_kind`, shown in injected refusals.
const HOST_DEFAULT_OBJECTS_PER_KIND: u64 = 100_000;

/// The message the host sends for a quota refusal (see
/// [`crate::QuotaExceeded`] for its shape).
fn quota_message(controller: &str, quota: Quota, kind: &str) -> String {
    match quota {
        Quota::CreatesPerSecond => format!(
            "{QUOTA_EXCEEDED_PREFIX}controller={controller} quota={} \
             limit={HOST_DEFAULT_CREATES_PER_SECOND} retry_after_ms=10: controller {controller:?} \
             has spent its creates (injected by FakeHost); nothing was written",
            quota.key()
        ),
        Quota::ObjectsPerKind => format!(
            "{QUOTA_EXCEEDED_PREFIX}controller={controller} quota={} \
             limit={HOST_DEFAULT_OBJECTS_PER_KIND} kind={kind}: kind {kind:?} is full \
             (injected by FakeHost); nothing was written",
            quota.key()
        ),
    }
}

/// How many store calls a [`FakeHost`] has served, by sort. Calls that
/// failed count too.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, FakeHost};
///
/// let host = FakeHost::new();
/// Api::<serde_json::Value>::new("tasks").list(None, 10)?;
/// assert_eq!(host.calls().list, 1);
/// assert_eq!(host.calls().total(), 1);
/// # Ok::<(), leasehold_guest::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// `get` calls.
    pub get: u64,
    /// `list` calls.
    pub list: u64,
    /// `commit` calls.
    pub commit: u64,
}

impl CallCounts {
    /// All store calls.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::CallCounts;
    ///
    /// assert_eq!(CallCounts { get: 1, list: 2, commit: 3 }.total(), 6);
    /// ```
    pub fn total(&self) -> u64 {
        self.get + self.list + self.commit
    }
}

/// A commit that landed (including one whose reply was lost).
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Transaction};
///
/// let host = FakeHost::new();
/// Transaction::new().create("tasks", "a", &1).event("tasks", "a", "Made", "made").commit()?;
/// let commit = &host.commits()[0];
/// assert_eq!((commit.ops.len(), commit.events.len(), commit.epoch), (1, 1, 1));
/// # Ok::<(), leasehold_guest::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRecord {
    /// The commit's revision.
    pub revision: u64,
    /// The epoch of the fence it was made under.
    pub epoch: u64,
    /// Its operations, values normalized to compact JSON.
    pub ops: Vec<Op>,
    /// Its events.
    pub events: Vec<NewEvent>,
    /// The sequence numbers its events got.
    pub event_seqs: Vec<u64>,
}

/// An event in the fake's log.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Transaction};
///
/// let host = FakeHost::new();
/// Transaction::new().event("tasks", "a", "Seen", "seen it").commit()?;
/// let event = &host.events()[0];
/// assert_eq!((event.seq, event.key.name.as_str(), event.reason.as_str()), (1, "a", "Seen"));
/// # Ok::<(), leasehold_guest::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// Position in commit order, gap-free from 1.
    pub seq: u64,
    /// The revision of the commit that appended it.
    pub revision: u64,
    /// The epoch of the fence it was appended under.
    pub epoch: u64,
    /// The object it is about.
    pub key: ObjectKey,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
}

/// A log line a guest wrote.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Level};
///
/// let host = FakeHost::new();
/// leasehold_guest::info!("hello");
/// assert_eq!(host.logs()[0].level, Level::Info);
/// assert_eq!(host.logs()[0].epoch, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Its level.
    pub level: Level,
    /// The line, truncated to the log line limit as the host does.
    pub message: String,
    /// The epoch of the fence at the time.
    pub epoch: u64,
}

enum Target {
    Call(u64),
    Commit(u64),
}

struct PendingFault {
    target: Target,
    fault: Fault,
}

type Hook = Box<dyn FnOnce(&FakeHost)>;

/// The sort of a store call, for counting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    Get,
    List,
    Commit,
}

struct State {
    limits: Limits,
    fence: Fence,
    revoked: bool,
    unavailable: bool,
    objects: Objects,
    commits: Vec<CommitRecord>,
    events: Vec<EventRecord>,
    logs: Vec<LogLine>,
    calls: CallCounts,
    faults: Vec<PendingFault>,
    hooks: Vec<(Target, Hook)>,
}

impl Target {
    /// Whether this is the call just counted.
    fn is_now(&self, calls: &CallCounts, call: Call) -> bool {
        match *self {
            Target::Call(n) => n == calls.total(),
            Target::Commit(n) => call == Call::Commit && n == calls.commit,
        }
    }
}

impl State {
    /// The target of a position counted from now.
    fn target(&self, at: At) -> Target {
        match at {
            At::Call(0) | At::Commit(0) => panic!("positions count from 1 (the next call)"),
            At::Call(n) => Target::Call(self.calls.total() + n),
            At::Commit(n) => Target::Commit(self.calls.commit + n),
        }
    }

    /// Take the first fault scheduled for the call just counted.
    fn take_fault(&mut self, call: Call) -> Option<Fault> {
        let index = self
            .faults
            .iter()
            .position(|f| f.target.is_now(&self.calls, call))?;
        Some(self.faults.remove(index).fault)
    }

    fn fenced_error(&self) -> StoreError {
        StoreError::Fenced(format!(
            "{} was revoked by the host: the lease is no longer held",
            self.fence
        ))
    }

    /// The checks every call makes first, in the host's order: the fence,
    /// then the backend's reachability. Returns a fault that is not for
    /// this function to apply (it is a commit's business).
    fn admit(&mut self, call: Call) -> Result<Option<Fault>, StoreError> {
        let fault = self.take_fault(call);
        if fault == Some(Fault::Fenced) {
            self.revoked = true;
        }
        if self.revoked {
            return Err(self.fenced_error());
        }
        if fault == Some(Fault::Unavailable) {
            return Err(StoreError::Unavailable(
                "the backend did not answer (injected by FakeHost)".into(),
            ));
        }
        if self.unavailable {
            return Err(StoreError::Unavailable(
                "the backend is down (FakeHost::set_unavailable)".into(),
            ));
        }
        Ok(fault)
    }
}

/// An in-memory host for native unit tests of a controller.
///
/// `FakeHost::new()` installs a fresh fake on the current thread; from then
/// on every store, fence and logging call of the SDK on that thread goes to
/// it (the test harness runs each test on its own thread, so tests do not
/// share fakes; a thread a test spawns has none). Clones share the same
/// fake. A test then:
///
/// - **seeds** objects: [`FakeHost::seed`], [`FakeHost::remove`];
/// - **drives** the controller: [`FakeHost::reconcile`] (what the host
///   would hear, as a [`Reply`]), [`FakeHost::resync`];
/// - **breaks** things: [`FakeHost::fail`] / [`FakeHost::fail_next_commit`]
///   with a [`Fault`], [`FakeHost::set_unavailable`], [`FakeHost::revoke`],
///   and [`FakeHost::before`] / [`FakeHost::before_commit`] to slip a
///   concurrent write in just before a given call;
/// - **moves tenures**: [`FakeHost::new_tenure`], [`FakeHost::set_fence`];
/// - **asserts** on [`FakeHost::object`], [`FakeHost::commits`],
///   [`FakeHost::events`], [`FakeHost::logs`], [`FakeHost::calls`].
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
                revoked: false,
                unavailable: false,
                objects: Objects::default(),
                commits: Vec::new(),
                events: Vec::new(),
                logs: Vec::new(),
                calls: CallCounts::default(),
                faults: Vec::new(),
                hooks: Vec::new(),
            })),
        };
        host.install();
        host
    }

    /// Make this fake the one the SDK talks to on the current thread.
    /// [`FakeHost::new`] and [`FakeHost::reconcile`] do it for you.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let first = FakeHost::new();
    /// let _second = FakeHost::new();
    /// first.install();
    /// leasehold_guest::info!("to the first");
    /// assert_eq!(first.logs().len(), 1);
    /// ```
    pub fn install(&self) {
        CURRENT.with(|current| *current.borrow_mut() = Some(self.clone()));
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
        let key = ObjectKey::new(kind, name);
        let text = serde_json::to_string(value)
            .unwrap_or_else(|e| panic!("seeding {key}: the value does not serialize: {e}"));
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        store::check_label("object kind", kind)
            .and_then(|()| store::check_label("object name", name))
            .and_then(|()| store::normalize_value(&state.limits, &key, &text))
            .map(|value| {
                state.objects.revision += 1;
                let version = state.objects.revision;
                state
                    .objects
                    .map
                    .insert(key.clone(), Stored { version, value });
                version
            })
            .unwrap_or_else(|e| panic!("seeding {key}: {e}"))
    }

    /// Delete `kind/name`, as a user's API delete would; whether it
    /// existed. Records no commit and no event.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "a", &1);
    /// assert!(host.remove("tasks", "a"));
    /// assert!(!host.remove("tasks", "a"));
    /// ```
    pub fn remove(&self, kind: &str, name: &str) -> bool {
        let mut state = self.state.borrow_mut();
        let removed = state.objects.map.remove(&ObjectKey::new(kind, name));
        if removed.is_some() {
            state.objects.revision += 1;
        }
        removed.is_some()
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

    // ----- faults -------------------------------------------------------

    /// Make the call `at` fail with `fault`. Faults fire once, in the order
    /// injected; [`FakeHost::pending_faults`] tells whether they all fired.
    ///
    /// # Panics
    ///
    /// If `at` counts from zero, or if a commit-only fault
    /// ([`Fault::Conflict`], [`Fault::LostReply`]) is aimed at
    /// [`At::Call`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{At, FakeHost, Fault, StoreError, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.fail(At::Commit(2), Fault::Conflict);
    /// assert!(Transaction::new().create("tasks", "a", &1).commit().is_ok());
    /// let second = Transaction::new().create("tasks", "b", &1).commit();
    /// assert!(matches!(second, Err(StoreError::Conflict(key)) if key.name == "b"));
    /// assert_eq!(host.pending_faults(), 0);
    /// ```
    pub fn fail(&self, at: At, fault: Fault) {
        if matches!(at, At::Call(_)) && fault.commits_only() {
            panic!("{fault:?} applies to commits only: aim it with At::Commit");
        }
        let mut state = self.state.borrow_mut();
        let target = state.target(at);
        state.faults.push(PendingFault { target, fault });
    }

    /// Make the next commit fail with `fault`: `fail(At::Commit(1), fault)`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Fault, StoreError, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.fail_next_commit(Fault::Unavailable);
    /// let result = Transaction::new().create("tasks", "a", &1).commit();
    /// assert!(matches!(result, Err(StoreError::Unavailable(_))));
    /// assert!(host.object::<u32>("tasks", "a").is_none(), "nothing was written");
    /// ```
    pub fn fail_next_commit(&self, fault: Fault) {
        self.fail(At::Commit(1), fault);
    }

    /// Take the backend down (every call fails with
    /// [`StoreError::Unavailable`], commits write nothing) or bring it back.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// host.set_unavailable(true);
    /// assert!(Api::<u32>::new("tasks").get("a").is_err());
    /// host.set_unavailable(false);
    /// assert!(Api::<u32>::new("tasks").get("a").is_ok());
    /// ```
    pub fn set_unavailable(&self, unavailable: bool) {
        self.state.borrow_mut().unavailable = unavailable;
    }

    /// Run `write` just before the store call `at` is served: the place to
    /// slip in a concurrent writer between a controller's reads, or between
    /// its reads and its commit. `write` gets this fake and may seed or
    /// remove objects (or even run a controller).
    ///
    /// # Panics
    ///
    /// If `at` counts from zero.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, At, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// host.before(At::Call(2), |host| {
    ///     host.seed("counters", "hits", &1);
    /// });
    /// let counters = Api::<u32>::new("counters");
    /// assert!(counters.get("hits")?.is_none());
    /// assert!(counters.get("hits")?.is_some(), "written just before the second call");
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn before(&self, at: At, write: impl FnOnce(&FakeHost) + 'static) {
        let mut state = self.state.borrow_mut();
        let target = state.target(at);
        state.hooks.push((target, Box::new(write)));
    }

    /// Run `write` just before the n-th commit from now (1 = the next) is
    /// checked, so the commit meets a real conflict:
    /// `before(At::Commit(n), write)`.
    ///
    /// # Panics
    ///
    /// If `n` is zero.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, StoreError, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("counters", "hits", &1);
    /// let hits = Api::<u32>::new("counters").get("hits").unwrap().unwrap();
    /// host.before_commit(1, |host| {
    ///     host.seed("counters", "hits", &10);
    /// });
    /// let result = Transaction::new().update(&hits, &2).commit();
    /// assert!(matches!(result, Err(StoreError::Conflict(_))));
    /// assert_eq!(host.object::<u32>("counters", "hits").unwrap().value, 10);
    /// ```
    pub fn before_commit(&self, n: u64, write: impl FnOnce(&FakeHost) + 'static) {
        self.before(At::Commit(n), write);
    }

    /// How many injected faults and [`FakeHost::before`] writes have not
    /// fired yet. A test that injects a fault can assert this is zero to
    /// prove the fault was actually met.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Fault};
    ///
    /// let host = FakeHost::new();
    /// host.fail_next_commit(Fault::Conflict);
    /// assert_eq!(host.pending_faults(), 1);
    /// ```
    pub fn pending_faults(&self) -> usize {
        let state = self.state.borrow();
        state.faults.len() + state.hooks.len()
    }

    // ----- records ------------------------------------------------------

    /// Every commit that landed, in order.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().create("tasks", "a", &1).commit()?;
    /// assert_eq!(host.commits()[0].ops[0].key().name, "a");
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn commits(&self) -> Vec<CommitRecord> {
        self.state.borrow().commits.clone()
    }

    /// Every event appended, in order.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().event("tasks", "a", "One", "1").event("tasks", "a", "Two", "2").commit()?;
    /// let reasons: Vec<_> = host.events().into_iter().map(|e| e.reason).collect();
    /// assert_eq!(reasons, ["One", "Two"]);
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn events(&self) -> Vec<EventRecord> {
        self.state.borrow().events.clone()
    }

    /// The events with `reason`, in order.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().event("tasks", "a", "One", "1").event("tasks", "b", "Two", "2").commit()?;
    /// assert_eq!(host.events_with_reason("Two")[0].key.name, "b");
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn events_with_reason(&self, reason: &str) -> Vec<EventRecord> {
        let state = self.state.borrow();
        state
            .events
            .iter()
            .filter(|e| e.reason == reason)
            .cloned()
            .collect()
    }

    /// Every log line, in order.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// leasehold_guest::warn!("careful");
    /// assert_eq!(host.logs()[0].message, "careful");
    /// ```
    pub fn logs(&self) -> Vec<LogLine> {
        self.state.borrow().logs.clone()
    }

    /// How many store calls were made, by sort.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// let _ = Api::<u32>::new("tasks").get("a");
    /// assert_eq!(host.calls().get, 1);
    /// ```
    pub fn calls(&self) -> CallCounts {
        self.state.borrow().calls
    }

    // ----- driving a controller ------------------------------------------

    /// Reconcile `kind/name` with `controller` as the host would, and
    /// return what the host would hear. Installs this fake first.
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
        self.install();
        dispatch(controller, kind, name)
    }

    /// Reconcile every object of every kind the controller watches, kinds
    /// in the order described and objects in name order, as the host does
    /// at the start of a tenure. Each kind's objects are listed when the
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
        let mut replies = Vec::new();
        for kind in controller.describe().watches {
            let keys: Vec<ObjectKey> = {
                let state = self.state.borrow();
                state
                    .objects
                    .map
                    .keys()
                    .filter(|key| key.kind == kind)
                    .cloned()
                    .collect()
            };
            for key in keys {
                let reply = dispatch(controller, &key.kind, &key.name);
                replies.push((key, reply));
            }
        }
        replies
    }

    // ----- the calls the SDK makes --------------------------------------

    /// Count a call, then run the writes scheduled just before it, with
    /// the state released: they write through this same fake.
    fn enter(&self, call: Call) {
        let due: Vec<Hook> = {
            let mut state = self.state.borrow_mut();
            let counter = match call {
                Call::Get => &mut state.calls.get,
                Call::List => &mut state.calls.list,
                Call::Commit => &mut state.calls.commit,
            };
            *counter += 1;
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut state.hooks)
                .into_iter()
                .partition(|(target, _)| target.is_now(&state.calls, call));
            state.hooks = later;
            due.into_iter().map(|(_, hook)| hook).collect()
        };
        for hook in due {
            hook(self);
        }
    }

    pub(crate) fn get(&self, kind: &str, name: &str) -> Result<Option<RawObject>, StoreError> {
        self.enter(Call::Get);
        let mut state = self.state.borrow_mut();
        state.admit(Call::Get)?;
        state.objects.get(kind, name)
    }

    pub(crate) fn list(
        &self,
        kind: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<RawPage, StoreError> {
        self.enter(Call::List);
        let mut state = self.state.borrow_mut();
        state.admit(Call::List)?;
        let limits = state.limits;
        state.objects.list(&limits, kind, after, limit)
    }

    pub(crate) fn commit(&self, ops: &[Op], events: &[NewEvent]) -> Result<Committed, StoreError> {
        self.enter(Call::Commit);
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        let fault = state.admit(Call::Commit)?;
        let ops = store::validate_commit(&state.limits, ops, events)?;
        if fault == Some(Fault::Conflict) {
            let key = ops
                .first()
                .map(|op| op.key().clone())
                .or_else(|| events.first().map(|e| e.key.clone()))
                .expect("a validated commit has an operation or an event");
            return Err(StoreError::Conflict(key));
        }
        if let Some(Fault::QuotaExceeded(quota)) = fault {
            let kind = ops
                .first()
                .map(|op| op.key().kind.clone())
                .or_else(|| events.first().map(|e| e.key.kind.clone()))
                .expect("a validated commit has an operation or an event");
            let message = quota_message(&state.fence.lease, quota, &kind);
            return Err(StoreError::from_invalid(message));
        }
        let revision = state.objects.apply(&ops)?;
        let epoch = state.fence.epoch;
        let mut event_seqs = Vec::with_capacity(events.len());
        for event in events {
            let seq = state.events.len() as u64 + 1;
            event_seqs.push(seq);
            state.events.push(EventRecord {
                seq,
                revision,
                epoch,
                key: event.key.clone(),
                reason: event.reason.clone(),
                message: event.message.clone(),
            });
        }
        state.commits.push(CommitRecord {
            revision,
            epoch,
            ops,
            events: events.to_vec(),
            event_seqs: event_seqs.clone(),
        });
        if fault == Some(Fault::LostReply) {
            return Err(StoreError::Unavailable(
                "the connection dropped before the reply arrived (injected by FakeHost)".into(),
            ));
        }
        Ok(Committed {
            revision,
            event_seqs,
        })
    }

    pub(crate) fn record_log(&self, level: Level, message: &str) {
        let mut state = self.state.borrow_mut();
        let message = truncate(message, state.limits.log_line_bytes);
        let epoch = state.fence.epoch;
        // Also to stderr: the test harness shows it when a test fails.
        eprintln!("[{level} epoch={epoch}] {message}");
        state.logs.push(LogLine {
            level,
            message: message.to_string(),
            epoch,
        });
    }
}

fn decode_for_test<T: DeserializeOwned>(key: &ObjectKey, stored: &Stored) -> Object<T> {
    let value = serde_json::from_str(&stored.value).unwrap_or_else(|e| {
        panic!(
            "{key} does not decode as {}: {e}",
            std::any::type_name::<T>()
        )
    });
    Object {
        kind: key.kind.clone(),
        name: key.name.clone(),
        version: stored.version,
        value,
    }
}

/// Cut `message` to at most `max` bytes on a character boundary, as the
/// host does.
fn truncate(message: &str, max: usize) -> &str {
    if message.len() <= max {
        return message;
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

#[cfg(test)]
mod tests;
