//! What a controller implements ([`Controller`]) and what the host hears
//! back ([`Reply`]): the reconcile / error-policy split of kube-rs.
//!
//! Owns: the trait, [`Context`] (with the [`Reason`] of the call), and
//! `dispatch`, the one mapping from a reconcile's result to a [`Reply`]
//! that both the export glue and the fake use. Must never: let the error policy overrule a fenced error (the lease
//! is gone), or know which host answers (it goes through `sys`).

use std::cell::OnceCell;
use std::fmt;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;

use crate::clock;
use crate::error::Error;
use crate::object::{Api, Kind};
use crate::sys::{self, Fence, Shard};
use crate::transaction::Transaction;

/// What a controller needs from the host: the kinds whose changes trigger
/// a reconcile, the related kinds whose changes reconcile the object they
/// concern, and how often every watched object is reconciled again
/// without a change.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use leasehold_guest::{Description, Map, Related};
///
/// let description = Description::new()
///     .watch("tasks")
///     .owns("pods")
///     .watch_related("leases", Map::label("example.com/task", "tasks"))
///     .resync_every(Duration::from_secs(30));
/// assert_eq!(description.watches, ["tasks"]);
/// assert_eq!(description.related[0], Related { kind: "pods".into(), map: Map::Owner { kind: None } });
/// assert_eq!(description.resync, Some(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Description {
    /// The kinds whose changes trigger a reconcile of the changed object.
    pub watches: Vec<String>,
    /// The periodic resync interval; `None` disables it (the host still
    /// resyncs at the start of every tenure).
    pub resync: Option<Duration>,
    /// Kinds whose changes reconcile the objects they map to, with
    /// [`Reason::Related`] (see [`Related`]).
    pub related: Vec<Related>,
    /// The label whose value decides an object's shard when the
    /// controller runs sharded (see [`Description::shard_by_label`]);
    /// `None`: by `kind/name`.
    pub shard_label: Option<String>,
    /// Kinds every shard watches, whatever shard their objects belong to
    /// (see [`Description::watch_on_every_shard`]).
    pub every_shard: Vec<String>,
    /// The JSON Schema of the controller's settings (see
    /// [`Description::settings_of`]): the host checks the config's
    /// `[controllers.settings]` against it. `None`: unchecked.
    pub settings_schema: Option<String>,
}

/// "Watch `kind` and map each of its changes through `map`" (the WIT's
/// `related-watch`): controller-runtime's `Owns` and
/// `Watches(EnqueueRequestsFromMapFunc)`.
///
/// The host maps each change through what the change stream recorded:
/// the changed object's owner and labels after the change, and before it
/// when an update changed them. So a create maps through what the object
/// has, an update through what it has and what it had (an owner or label
/// that moved wakes both the object it left and the one it joined), and a
/// delete through what it had. One change can wake several keys; a key
/// woken several times before it runs is reconciled once, and a key whose
/// own object changed too is reconciled for [`Reason::Change`]. A resync
/// maps every object of the related kinds as well.
///
/// [`crate::FakeHost::reconcile_changes`] applies the same mapping
/// natively.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Map, Related};
///
/// let owned = Related::new("pods", Map::owner());
/// assert_eq!(owned.map, Map::Owner { kind: None });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Related {
    /// The kind whose changes are mapped, e.g. `pods`.
    pub kind: String,
    /// How each change maps to the keys to reconcile.
    pub map: Map,
}

impl Related {
    /// Watch `kind`, mapping through `map`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Map, Related};
    ///
    /// let by_label = Related::new("pods", Map::label("example.com/task", "tasks"));
    /// assert_eq!(by_label.kind, "pods");
    /// ```
    pub fn new(kind: impl Into<String>, map: Map) -> Self {
        Self {
            kind: kind.into(),
            map,
        }
    }
}

/// How a change of a related kind maps to the keys to reconcile (the
/// WIT's `related-map`).
///
/// # Example
///
/// ```
/// use leasehold_guest::Map;
///
/// assert_eq!(Map::owner_of_kind("tasks"), Map::Owner { kind: Some("tasks".into()) });
/// assert_eq!(
///     Map::label("example.com/task", "tasks"),
///     Map::Label { key: "example.com/task".into(), target_kind: "tasks".into() }
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Map {
    /// To the changed object's owner ([`crate::Metadata::owner`]): an
    /// object owned by `K/N` wakes `K/N`. With `kind`, only owners of that
    /// kind are woken; `None` wakes the owner whatever its kind. An object
    /// without an owner maps to nothing.
    Owner {
        /// The owner kind to wake, or `None` for any.
        kind: Option<String>,
    },
    /// Through a label: an object labelled `key = V` wakes
    /// `target_kind/V`. An object without the label, or whose value is not
    /// an object name (empty, uppercase, `_` or `.`), maps to nothing.
    Label {
        /// The label key, e.g. `example.com/task`.
        key: String,
        /// The kind of the objects the label's value names.
        target_kind: String,
    },
}

impl Map {
    /// [`Map::Owner`] of any kind.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(leasehold_guest::Map::owner(), leasehold_guest::Map::Owner { kind: None });
    /// ```
    pub fn owner() -> Self {
        Map::Owner { kind: None }
    }

    /// [`Map::Owner`], only owners of `kind`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Map;
    ///
    /// assert_eq!(Map::owner_of_kind("tasks"), Map::Owner { kind: Some("tasks".into()) });
    /// ```
    pub fn owner_of_kind(kind: impl Into<String>) -> Self {
        Map::Owner {
            kind: Some(kind.into()),
        }
    }

    /// [`Map::Label`]: label `key = V` wakes `target_kind/V`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Map;
    ///
    /// let map = Map::label("example.com/task", "tasks");
    /// assert!(matches!(map, Map::Label { .. }));
    /// ```
    pub fn label(key: impl Into<String>, target_kind: impl Into<String>) -> Self {
        Map::Label {
            key: key.into(),
            target_kind: target_kind.into(),
        }
    }
}

impl Description {
    /// Watch nothing yet: add kinds with [`Description::watch`],
    /// [`Description::owns`] and [`Description::watch_related`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Description;
    ///
    /// let description = Description::new().watch("tasks");
    /// assert_eq!(description, Description::watching(["tasks"]));
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Also watch `kind`: each change of one of its objects reconciles
    /// that object ([`Reason::Change`]).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Description;
    ///
    /// assert_eq!(Description::new().watch("a").watch("b").watches, ["a", "b"]);
    /// ```
    pub fn watch(mut self, kind: impl Into<String>) -> Self {
        self.watches.push(kind.into());
        self
    }

    /// Also watch `kind` and map each change to the changed object's owner
    /// (of any kind), as controller-runtime's `Owns`: the owner is
    /// reconciled with [`Reason::Related`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Description, Map};
    ///
    /// let description = Description::new().watch("tasks").owns("pods");
    /// assert_eq!(description.related[0].map, Map::owner());
    /// ```
    pub fn owns(self, kind: impl Into<String>) -> Self {
        self.watch_related(kind, Map::owner())
    }

    /// Also watch `kind` and map each change through `map` (see
    /// [`Related`]).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Description, Map};
    ///
    /// let description =
    ///     Description::new().watch_related("pods", Map::label("example.com/task", "tasks"));
    /// assert_eq!(description.related.len(), 1);
    /// assert!(description.watches.is_empty());
    /// ```
    pub fn watch_related(mut self, kind: impl Into<String>, map: Map) -> Self {
        self.related.push(Related::new(kind, map));
        self
    }

    /// Watch `kinds`, with no periodic resync.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Description;
    ///
    /// let description = Description::watching(["services"]);
    /// assert_eq!(description.resync, None);
    /// ```
    pub fn watching<I, S>(kinds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            watches: kinds.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// When the controller runs sharded (`shards = N` in the host's
    /// config), decide an object's shard by the value of its label `key`
    /// instead of its `kind/name`: objects that share the value share a
    /// shard (a tenant's tasks and its quota, say). An object without the
    /// label still goes by its `kind/name`. No effect on an unsharded
    /// controller. Under a shard label every status write must be
    /// conditional ([`crate::Transaction::update_status`] is): the host cannot
    /// tell from a blind one whose object it names.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Description;
    ///
    /// let description = Description::watching(["tasks"]).shard_by_label("example.com/tenant");
    /// assert_eq!(description.shard_label.as_deref(), Some("example.com/tenant"));
    /// ```
    pub fn shard_by_label(mut self, key: impl Into<String>) -> Self {
        self.shard_label = Some(key.into());
        self
    }

    /// Declare the shape of the controller's settings as the type it reads
    /// them into ([`crate::settings`]): its JSON Schema, made by
    /// [`schemars`] from the type, goes to the host with the description,
    /// and `leasehold check`, the host's start and a reload refuse
    /// `[controllers.settings]` that do not fit it, naming every wrong,
    /// missing or unknown key (`#[serde(deny_unknown_fields)]` makes
    /// unknown keys an error; without it they are allowed). Derive
    /// `schemars::JsonSchema` beside `Deserialize` (the controller's crate
    /// depends on `schemars` too).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Description;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// #[serde(deny_unknown_fields)]
    /// struct Settings {
    ///     region: String,
    ///     max_buckets: Option<u32>,
    /// }
    ///
    /// let description = Description::watching(["buckets"]).settings_of::<Settings>();
    /// let schema: serde_json::Value =
    ///     serde_json::from_str(description.settings_schema.as_deref().unwrap()).unwrap();
    /// assert_eq!(schema["required"], serde_json::json!(["region"]));
    /// assert_eq!(schema["additionalProperties"], false);
    /// ```
    pub fn settings_of<T: schemars::JsonSchema>(mut self) -> Self {
        self.settings_schema = Some(schemars::schema_for!(T).as_value().to_string());
        self
    }

    /// Declare the settings' shape as a JSON Schema document written by
    /// hand (JSON text; the subset the host understands is the WIT's
    /// `description.settings-schema`).
    pub fn settings_schema(mut self, schema: impl Into<String>) -> Self {
        self.settings_schema = Some(schema.into());
        self
    }

    /// Watch `kind` on every shard: each change of one of its objects
    /// reconciles it on every shard, and every shard's resync lists them
    /// all, whatever shard they belong to. For shared objects each shard
    /// decides on, such as the nodes every shard's tasks are placed on.
    /// Also watches `kind` (as [`Description::watch`]) if not yet. Writes
    /// to another shard's objects must still be conditional. The same as
    /// [`Description::watch`] on an unsharded controller.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Description;
    ///
    /// let description = Description::watching(["tasks"]).watch_on_every_shard("nodes");
    /// assert_eq!(description.watches, ["tasks", "nodes"]);
    /// assert_eq!(description.every_shard, ["nodes"]);
    /// ```
    pub fn watch_on_every_shard(mut self, kind: impl Into<String>) -> Self {
        let kind = kind.into();
        if !self.watches.contains(&kind) {
            self.watches.push(kind.clone());
        }
        if !self.every_shard.contains(&kind) {
            self.every_shard.push(kind);
        }
        self
    }

    /// Reconcile every watched object again every `period`, even without a
    /// change: the safety net for a missed change or a decision that
    /// depends on something outside the watched kinds.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use leasehold_guest::Description;
    ///
    /// let description = Description::watching(["services"]).resync_every(Duration::from_secs(60));
    /// assert_eq!(description.resync, Some(Duration::from_secs(60)));
    /// ```
    pub fn resync_every(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
    }
}

/// A successful reconcile's result.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use leasehold_guest::Outcome;
///
/// let progressing = true;
/// let outcome = if progressing {
///     Outcome::RequeueAfter(Duration::from_secs(5))
/// } else {
///     Outcome::Done
/// };
/// assert_eq!(outcome, Outcome::RequeueAfter(Duration::from_secs(5)));
/// ```
///
/// # The timer
///
/// [`Outcome::RequeueAfter`] is the controller's timer: "wake me after
/// this delay for this key". The host reconciles the same `kind/name`
/// again once the delay has passed, whether or not the object changed
/// ([`Outcome::wake_at`] computes the delay for a wall-clock time). A key
/// has one timer: an earlier one wins; a change of the object before the
/// time reconciles it at once and consumes the timer (return the requeue
/// again to keep waiting); delays are capped at a day; and a new tenure
/// starts with a full resync of the watched kinds instead of the old
/// tenure's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing more to do until the object changes (or the next resync).
    Done,
    /// Reconcile this object again after the delay: the timer.
    RequeueAfter(Duration),
}

impl Outcome {
    /// Reconcile this object again at the wall-clock time `at` (at once if
    /// it has passed): [`Outcome::RequeueAfter`] the time left until `at`
    /// by [`crate::clock::now`].
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use leasehold_guest::{FakeHost, Outcome};
    ///
    /// let host = FakeHost::new();
    /// let expiry = host.now() + Duration::from_secs(3600);
    /// assert_eq!(Outcome::wake_at(expiry), Outcome::RequeueAfter(Duration::from_secs(3600)));
    /// host.advance(Duration::from_secs(7200));
    /// assert_eq!(Outcome::wake_at(expiry), Outcome::RequeueAfter(Duration::ZERO));
    /// ```
    pub fn wake_at(at: SystemTime) -> Self {
        Outcome::RequeueAfter(clock::until(at))
    }
}

/// What [`Controller::error_policy`] decides for a failed reconcile.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use leasehold_guest::{Error, Retry, StoreError};
///
/// fn policy(error: &Error) -> Retry {
///     match error.store_error() {
///         Some(StoreError::Conflict(_)) => Retry::After(Duration::from_millis(100)),
///         _ => Retry::Backoff,
///     }
/// }
/// assert_eq!(policy(&Error::failed("x")), Retry::Backoff);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Let the host retry with its exponential backoff.
    Backoff,
    /// Retry after this delay.
    After(Duration),
}

/// What the host hears back from one reconcile: the outcome, or how it
/// failed. [`crate::FakeHost::reconcile`] returns it so tests can assert
/// exactly what a host would see.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Context, Controller, Description, Error, FakeHost, Outcome, Reply};
///
/// struct Stopper;
///
/// impl Controller for Stopper {
///     fn describe(&self) -> Description {
///         Description::watching(["things"])
///     }
///     fn reconcile(&self, _: &Context, _: &str, name: &str) -> Result<Outcome, Error> {
///         // Any store call after the fence is revoked fails with Fenced.
///         leasehold_guest::Api::<serde_json::Value>::new("things").get(name)?;
///         Ok(Outcome::Done)
///     }
/// }
///
/// let host = FakeHost::new();
/// host.revoke();
/// assert_eq!(host.reconcile(&Stopper, "things", "a"), Reply::Fenced);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `Ok(outcome::done)`.
    Done,
    /// `Ok(outcome::requeue-after(ms))`.
    RequeueAfter(Duration),
    /// `Err(reconcile-error::fenced)`: the guest saw it is no longer the
    /// leader and stopped.
    Fenced,
    /// `Err(reconcile-error::failed(..))`.
    Failed {
        /// The error's message, for the host's log.
        message: String,
        /// The error policy's delay; `None` lets the host back off.
        retry_after: Option<Duration>,
    },
}

/// Why the host calls [`Controller::reconcile`] for a key: for logs, and
/// to skip work only one cause needs (a reconcile that only refreshes a
/// timestamp on [`Reason::Requeue`], say).
///
/// It is a hint, not a promise about the object: whatever the reason, read
/// the object to learn its state, which may have changed again, or gone,
/// since the cause was queued.
///
/// The host queues one entry per key. Causes that are due together (a
/// change arriving while a resync has the key queued) make one reconcile,
/// whose reason is the strongest of them: [`Reason::Change`], then
/// [`Reason::Related`], then [`Reason::Retry`], then [`Reason::Requeue`],
/// then [`Reason::Resync`]
/// ([`Reason::strongest`]). A timer (a requeue or a failure's retry) that
/// is not due yet when something else makes the key run is consumed by
/// that run and is not its reason: the reason is always a cause that was
/// due. Components built against `leasehold:controller@0.1.0` are never
/// told a reason; this SDK builds for 0.2.0, which always tells one.
///
/// More reasons may come in later versions of the contract (the enum is
/// `non_exhaustive`): match with a `_` arm.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Context, Controller, Description, Error, FakeHost, Outcome, Reason};
///
/// struct Careful;
/// impl Controller for Careful {
///     fn describe(&self) -> Description {
///         Description::watching(["things"])
///     }
///     fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error> {
///         leasehold_guest::info!("{kind}/{name}: {}", ctx.reason());
///         Ok(Outcome::Done)
///     }
/// }
///
/// let host = FakeHost::new();
/// host.reconcile_because(&Careful, "things", "a", Reason::Resync);
/// assert_eq!(host.logs()[0].message, "things/a: resync");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The object itself was created, updated or deleted (by the API or
    /// any guest, this one included).
    Change,
    /// The controller's timer came due: an earlier reconcile of this key
    /// returned [`Outcome::RequeueAfter`].
    Requeue,
    /// A full resync: at the start of every tenure, every
    /// [`Description::resync`] period, and after the host's work queue
    /// overflowed.
    Resync,
    /// The previous reconcile of this key failed and its backoff (or the
    /// [`Controller::error_policy`]'s delay) has passed.
    Retry,
    /// An object of another kind that relates to this one changed: a
    /// change that one of [`Description::related`] maps to this key (an
    /// object it owns, or one whose label names it, was created, updated
    /// or deleted, or its owner or label moved to or away from this key).
    Related,
}

impl Reason {
    fn rank(self) -> u8 {
        match self {
            Reason::Resync => 0,
            Reason::Requeue => 1,
            Reason::Retry => 2,
            Reason::Related => 3,
            Reason::Change => 4,
        }
    }

    /// Of two causes due together, the one the host reports: change, then
    /// related, then retry, then requeue, then resync.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Reason;
    ///
    /// assert_eq!(Reason::Resync.strongest(Reason::Change), Reason::Change);
    /// assert_eq!(Reason::Retry.strongest(Reason::Requeue), Reason::Retry);
    /// ```
    pub fn strongest(self, other: Reason) -> Reason {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }

    /// The contract's name: `change`, `requeue`, `resync`, `retry` or
    /// `related`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Reason;
    ///
    /// assert_eq!(Reason::Requeue.as_str(), "requeue");
    /// assert_eq!(Reason::Retry.to_string(), "retry");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Change => "change",
            Reason::Requeue => "requeue",
            Reason::Resync => "resync",
            Reason::Retry => "retry",
            Reason::Related => "related",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-reconcile context: why the host called ([`Context::reason`]), the
/// current fence, and shortcuts to the store.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Context, FakeHost, Reason};
///
/// let host = FakeHost::new();
/// let ctx = Context::new();
/// assert_eq!(ctx.fence().epoch, host.fence().epoch);
/// assert_eq!(ctx.reason(), Reason::Change);
/// ```
#[derive(Debug)]
pub struct Context {
    reason: Reason,
    // Read from the host on first use: most reconciles never need it.
    fence: OnceCell<Fence>,
}

impl Default for Context {
    /// The same as [`Context::new`].
    fn default() -> Self {
        Self::because(Reason::Change)
    }
}

impl Context {
    /// A context for a reconcile of a changed object ([`Reason::Change`]).
    /// The SDK builds the context of each call; tests that call
    /// [`Controller::reconcile`] directly can build one too.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, FakeHost};
    ///
    /// let _host = FakeHost::new();
    /// let ctx = Context::new();
    /// assert_eq!(ctx.fence().lease, "controller");
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// A context for a reconcile called for `reason`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, Reason};
    ///
    /// assert_eq!(Context::because(Reason::Retry).reason(), Reason::Retry);
    /// ```
    pub fn because(reason: Reason) -> Self {
        Self {
            reason,
            fence: OnceCell::new(),
        }
    }

    /// Why the host called this reconcile.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, Reason};
    ///
    /// let ctx = Context::because(Reason::Requeue);
    /// if ctx.reason() == Reason::Requeue {
    ///     // The timer this controller set came due.
    /// }
    /// assert_eq!(ctx.reason().as_str(), "requeue");
    /// ```
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// The fence of this tenure: cluster, lease, epoch, holder.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// host.new_tenure();
    /// let ctx = Context::new();
    /// assert_eq!(ctx.fence().idempotency_key("x"), "test/controller/2/x");
    /// ```
    pub fn fence(&self) -> &Fence {
        self.fence.get_or_init(sys::fence)
    }

    /// The shard of its controller this tenure runs (shard 0 of 1 when
    /// the controller is not sharded); the same as [`crate::shard`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, FakeHost, Shard};
    ///
    /// let host = FakeHost::new();
    /// assert_eq!(Context::new().shard(), Shard::WHOLE);
    /// host.set_shard(Shard { index: 2, count: 3 });
    /// assert_eq!(Context::new().shard().index, 2);
    /// ```
    pub fn shard(&self) -> Shard {
        sys::shard()
    }

    /// Typed reads of `kind`; the same as [`Api::new`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// host.seed("counters", "hits", &3);
    /// let ctx = Context::new();
    /// assert_eq!(ctx.api::<u32>("counters").get("hits")?.unwrap().value, 3);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn api<T: DeserializeOwned>(&self, kind: &str) -> Api<T> {
        Api::new(kind)
    }

    /// Typed reads of `T`'s kind; the same as [`Api::typed`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, FakeHost, Kind};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Hits(u32);
    /// impl Kind for Hits {
    ///     const KIND: &'static str = "counters";
    /// }
    ///
    /// let host = FakeHost::new();
    /// host.seed("counters", "hits", &3);
    /// assert_eq!(Context::new().typed::<Hits>().get("hits")?.unwrap().value.0, 3);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn typed<T: Kind>(&self) -> Api<T> {
        Api::typed()
    }

    /// A new, empty transaction; the same as [`Transaction::new`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// Context::new().transaction().create("counters", "hits", &0).commit()?;
    /// assert_eq!(host.commits().len(), 1);
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn transaction(&self) -> Transaction {
        Transaction::new()
    }
}

/// A reconcile loop, run by the host while it holds the controller's lease.
///
/// The host calls [`Controller::describe`] once per tenure, then
/// [`Controller::reconcile`] for each watched object that changed, for each
/// requeue that came due, for each retry of a failed reconcile and on each
/// resync; [`Context::reason`] says which. Calls never overlap:
/// reconciles of one controller run one at a time (one call into one
/// instance at a time, and one instance per controller: the lease
/// holder's), so a controller needs no locking of its own. A
/// reconcile should read what it needs, decide, and write with one
/// conditional [`Transaction`] — and be safe to run again at any point: a
/// successor may re-run it after this guest was interrupted, even after its
/// commit landed but before its reply did.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use leasehold_guest::{Context, Controller, Description, Error, Outcome, Retry, StoreError};
///
/// #[derive(Default)]
/// struct Janitor;
///
/// impl Controller for Janitor {
///     fn describe(&self) -> Description {
///         Description::watching(["leftovers"]).resync_every(Duration::from_secs(300))
///     }
///
///     fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error> {
///         if let Some(leftover) = ctx.api::<serde_json::Value>(kind).get(name)? {
///             ctx.transaction()
///                 .delete(&leftover)
///                 .event(kind, name, "Removed", "cleaned up")
///                 .commit()?;
///         }
///         Ok(Outcome::Done)
///     }
///
///     fn error_policy(&self, _: &Context, _: &str, _: &str, error: &Error) -> Retry {
///         match error.store_error() {
///             // Someone else touched it: look again soon.
///             Some(StoreError::Conflict(_)) => Retry::After(Duration::from_millis(50)),
///             _ => Retry::Backoff,
///         }
///     }
/// }
/// # let host = leasehold_guest::FakeHost::new();
/// # host.seed("leftovers", "x", &1);
/// # assert_eq!(host.reconcile(&Janitor, "leftovers", "x"), leasehold_guest::Reply::Done);
/// # assert!(host.object::<u32>("leftovers", "x").is_none());
/// ```
pub trait Controller {
    /// The watched kinds and the resync period.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, Controller, Description, Error, Outcome};
    ///
    /// struct Watcher;
    /// impl Controller for Watcher {
    ///     fn describe(&self) -> Description {
    ///         Description::watching(["things"])
    ///     }
    ///     fn reconcile(&self, _: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
    ///         Ok(Outcome::Done)
    ///     }
    /// }
    /// assert_eq!(Watcher.describe().watches, ["things"]);
    /// ```
    fn describe(&self) -> Description;

    /// Bring `kind/name` to its desired state. The object may have been
    /// deleted meanwhile: read it to find out.
    ///
    /// Return errors with `?`: a [`crate::StoreError::Fenced`] anywhere
    /// makes the guest stop (the host hears `fenced`), whatever
    /// [`Controller::error_policy`] says.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Context, Controller, Description, Error, FakeHost, Outcome};
    ///
    /// struct Counter;
    /// impl Controller for Counter {
    ///     fn describe(&self) -> Description {
    ///         Description::watching(["counters"])
    ///     }
    ///     fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error> {
    ///         let Some(counter) = ctx.api::<u64>(kind).get(name)? else {
    ///             return Ok(Outcome::Done);
    ///         };
    ///         if counter.value < 3 {
    ///             ctx.transaction().update(&counter, &(counter.value + 1)).commit()?;
    ///         }
    ///         Ok(Outcome::Done)
    ///     }
    /// }
    ///
    /// let host = FakeHost::new();
    /// host.seed("counters", "c", &0);
    /// for _ in 0..5 {
    ///     Counter.reconcile(&Context::new(), "counters", "c")?;
    /// }
    /// assert_eq!(host.object::<u64>("counters", "c").unwrap().value, 3);
    /// # Ok::<(), Error>(())
    /// ```
    fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error>;

    /// When to retry after `reconcile` failed with `error` (never called
    /// for a fenced error). The default honours [`Error::retry_hint`] and
    /// otherwise leaves the delay to the host's exponential backoff.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use leasehold_guest::{Context, Controller, Description, Error, FakeHost, Outcome, Reply, Retry};
    ///
    /// struct Impatient;
    /// impl Controller for Impatient {
    ///     fn describe(&self) -> Description {
    ///         Description::watching(["things"])
    ///     }
    ///     fn reconcile(&self, _: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
    ///         Err(Error::failed("not yet"))
    ///     }
    ///     fn error_policy(&self, _: &Context, _: &str, _: &str, _: &Error) -> Retry {
    ///         Retry::After(Duration::from_secs(1))
    ///     }
    /// }
    ///
    /// let host = FakeHost::new();
    /// assert_eq!(
    ///     host.reconcile(&Impatient, "things", "a"),
    ///     Reply::Failed { message: "not yet".into(), retry_after: Some(Duration::from_secs(1)) },
    /// );
    /// ```
    fn error_policy(&self, ctx: &Context, kind: &str, name: &str, error: &Error) -> Retry {
        let _ = (ctx, kind, name);
        error.retry_hint().map_or(Retry::Backoff, Retry::After)
    }
}

/// Run one reconcile for `reason` and turn its result into what the host
/// hears. The export glue and [`crate::FakeHost::reconcile`] both go
/// through here, so tests see exactly the mapping a host gets.
pub(crate) fn dispatch<C: Controller + ?Sized>(
    controller: &C,
    kind: &str,
    name: &str,
    reason: Reason,
) -> Reply {
    let ctx = Context::because(reason);
    match controller.reconcile(&ctx, kind, name) {
        Ok(Outcome::Done) => Reply::Done,
        Ok(Outcome::RequeueAfter(delay)) => Reply::RequeueAfter(delay),
        // Fenced is not the author's to overrule: the lease is gone and
        // the host is tearing this guest down.
        Err(error) if error.is_fenced() => Reply::Fenced,
        Err(error) => {
            let retry_after = match controller.error_policy(&ctx, kind, name, &error) {
                Retry::Backoff => None,
                Retry::After(delay) => Some(delay),
            };
            Reply::Failed {
                message: error.to_string(),
                retry_after,
            }
        }
    }
}
