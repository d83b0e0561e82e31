//! Faults a test schedules, and the checks every call passes first.
//!
//! Owns: [`At`] and [`Fault`], the queue of scheduled faults and of
//! writes to run just before a given call ([`FakeHost::before`]), the
//! admission of a call (fence, then backend reachability, in the host's
//! order) and the quota refusal message an injected [`Fault::QuotaExceeded`]
//! carries. Must never: apply a fault other than where it was aimed, or
//! let a commit-only fault hit a read (the call counts would drift from
//! what the test meant).

use crate::error::{QUOTA_EXCEEDED_PREFIX, Quota};
use crate::sys::WireError;

use super::records::CallCounts;
use super::{FakeHost, State};

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
    /// The call fails with [`StoreError::Fenced`](crate::StoreError::Fenced), and so does every later
    /// call (as after [`FakeHost::revoke`]): a tenure never comes back.
    Fenced,
    /// The commit fails with [`StoreError::Conflict`](crate::StoreError::Conflict) on its first
    /// operation's object (or first event's, if it has no operations),
    /// writing nothing. Commits only. To make a real conflict, change the
    /// object in [`FakeHost::before_commit`] instead.
    Conflict,
    /// The call fails with [`StoreError::Unavailable`](crate::StoreError::Unavailable); a commit writes
    /// nothing.
    Unavailable,
    /// The commit is applied, then fails with [`StoreError::Unavailable`](crate::StoreError::Unavailable),
    /// as when the connection drops after the database committed: the
    /// caller cannot tell it landed. Commits only.
    LostReply,
    /// The commit is refused by a write quota of the controller, writing
    /// nothing: it fails with [`StoreError::QuotaExceeded`](crate::StoreError::QuotaExceeded), derived from
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
pub(super) fn quota_message(controller: &str, quota: Quota, kind: &str) -> String {
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

/// A call position made absolute when it is scheduled: the value the
/// total (or commit) counter has when that call is counted, so a fault
/// keeps its aim however many calls come in between.
pub(super) enum Target {
    Call(u64),
    Commit(u64),
}

/// A fault waiting for its call.
pub(super) struct PendingFault {
    target: Target,
    fault: Fault,
}

/// A write to run just before a call ([`FakeHost::before`]).
pub(super) type Hook = Box<dyn FnOnce(&FakeHost)>;

/// The sort of a store call, for counting.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    Get,
    List,
    Commit,
}

impl Target {
    /// Whether this is the call just counted.
    pub(super) fn is_now(&self, calls: &CallCounts, call: Call) -> bool {
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

    fn fenced_error(&self) -> WireError {
        WireError::Fenced(format!(
            "{} was revoked by the host: the lease is no longer held",
            self.fence
        ))
    }

    /// The checks every call makes first, in the host's order: the fence,
    /// then the backend's reachability. Returns a fault that is not for
    /// this function to apply (it is a commit's business).
    pub(super) fn admit(&mut self, call: Call) -> Result<Option<Fault>, WireError> {
        let fault = self.take_fault(call);
        if fault == Some(Fault::Fenced) {
            self.revoked = true;
        }
        if self.revoked {
            return Err(self.fenced_error());
        }
        if fault == Some(Fault::Unavailable) {
            return Err(WireError::Unavailable(
                "the backend did not answer (injected by FakeHost)".into(),
            ));
        }
        if self.unavailable {
            return Err(WireError::Unavailable(
                "the backend is down (FakeHost::set_unavailable)".into(),
            ));
        }
        Ok(fault)
    }
}

impl FakeHost {
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
    /// [`StoreError::Unavailable`](crate::StoreError::Unavailable), commits write nothing) or bring it back.
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

    /// How many injected faults (store faults and
    /// [`FakeHost::fail_http`]'s) and [`FakeHost::before`] writes have not
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
        state.faults.len() + state.hooks.len() + state.http.pending_faults()
    }
}
