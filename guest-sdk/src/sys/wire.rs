//! The plain types that cross the boundary between the SDK and whatever
//! answers its calls: keys, objects as JSON text, operations, events,
//! commit results, the fence, log levels and the host's store errors as
//! the WIT contract spells them; for outbound HTTP, a request taken apart
//! as `wasi:http` wants it, the response, and `wasi:http`'s `error-code`.
//!
//! Owns: data and the trivial helpers every layer needs (constructors,
//! `Display`). Must never: import another module of this crate, or carry
//! policy (typed decoding, retry decisions, quota parsing); those belong to
//! the layers above, which re-export the public types from here.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// An object's address: its kind and its name within the kind.
///
/// # Example
///
/// ```
/// use leasehold_guest::ObjectKey;
///
/// let key = ObjectKey::new("tasks", "build-42");
/// assert_eq!(key.to_string(), "tasks/build-42");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The kind, e.g. `tasks`.
    pub kind: String,
    /// The name, unique within the kind.
    pub name: String,
}

impl ObjectKey {
    /// The key of `kind/name`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::ObjectKey;
    ///
    /// assert_eq!(ObjectKey::new("nodes", "n1").name, "n1");
    /// ```
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// What an object carries beside its value and status: labels, an owner
/// and finalizers. Read it from [`crate::Object::meta`]; write it with
/// [`crate::Transaction::create_with`], [`crate::Transaction::replace`],
/// [`crate::Transaction::set_metadata`], or the finalizer helpers
/// [`crate::Transaction::add_finalizer`] and
/// [`crate::Transaction::remove_finalizer`].
///
/// The host's rules: at most [`crate::MAX_LABELS`] labels, keys of 1 to
/// [`crate::MAX_LABEL_KEY_BYTES`] ASCII letters, digits, `-`, `_`, `.` or
/// `/` and values empty or of 1 to [`crate::MAX_LABEL_VALUE_BYTES`] ASCII
/// letters, digits, `-`, `_` or `.` (both beginning and ending with a
/// letter or digit); at most [`crate::MAX_FINALIZERS`] distinct
/// finalizers, spelled like label keys; an owner other than the object
/// itself, which must exist and not be marked for deletion when a write
/// gives it.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Metadata, ObjectKey};
///
/// let meta = Metadata::new()
///     .label("team", "storage")
///     .owner(ObjectKey::new("projects", "p1"))
///     .finalizer("example.com/cleanup");
/// assert_eq!(meta.labels["team"], "storage");
/// assert_eq!(meta.owner, Some(ObjectKey::new("projects", "p1")));
/// assert_eq!(meta.finalizers, ["example.com/cleanup"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    /// String labels, by key.
    pub labels: BTreeMap<String, String>,
    /// The object that owns this one: the owner's first delete request is
    /// a delete request of this object too, in the same commit.
    pub owner: Option<ObjectKey>,
    /// Parties that must act before the object is removed: while any
    /// remain, a delete request only marks the object.
    pub finalizers: Vec<String>,
}

impl Metadata {
    /// No labels, owner or finalizers.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(leasehold_guest::Metadata::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// With the label `key` set to `value` (replacing an earlier value).
    ///
    /// # Example
    ///
    /// ```
    /// let meta = leasehold_guest::Metadata::new().label("tier", "a").label("tier", "b");
    /// assert_eq!(meta.labels["tier"], "b");
    /// ```
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// With `owner` as the owning object.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Metadata, ObjectKey};
    ///
    /// let meta = Metadata::new().owner(ObjectKey::new("projects", "p1"));
    /// assert_eq!(meta.owner.unwrap().name, "p1");
    /// ```
    pub fn owner(mut self, owner: ObjectKey) -> Self {
        self.owner = Some(owner);
        self
    }

    /// With the finalizer `name` (listed once, however often given).
    ///
    /// # Example
    ///
    /// ```
    /// let meta = leasehold_guest::Metadata::new().finalizer("a/b").finalizer("a/b");
    /// assert_eq!(meta.finalizers, ["a/b"]);
    /// ```
    pub fn finalizer(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !self.finalizers.contains(&name) {
            self.finalizers.push(name);
        }
        self
    }

    /// No labels, owner or finalizers.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(!leasehold_guest::Metadata::new().label("a", "b").is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.owner.is_none() && self.finalizers.is_empty()
    }
}

/// Which objects [`crate::Api::list_selected`] returns: those that carry
/// every label given, each with exactly the value given (an empty value
/// matches a label set to the empty string, not an absent one), and whose
/// value contains `contains`.
///
/// Containment is PostgreSQL's `jsonb @>`, on every backend and in the
/// [`crate::FakeHost`]: an object contains an object if it has each of its
/// keys with a value that contains the given one; an array contains an
/// array if each element given is contained in some element of it; scalars
/// contain equal scalars (numbers by value), never across types; at the top
/// level only, an array contains a scalar it has as an element.
///
/// Bounds: at most [`crate::MAX_SELECTOR_LABELS`] labels of label syntax,
/// a `contains` of at most [`crate::MAX_SELECTOR_CONTAINS_BYTES`] of compact
/// JSON nested at most [`crate::MAX_SELECTOR_CONTAINS_DEPTH`] deep.
///
/// # Example
///
/// ```
/// use leasehold_guest::Selector;
/// use serde_json::json;
///
/// let pending = Selector::new().label("team", "db").contains(json!({ "status": "pending" }));
/// assert_eq!(pending.labels["team"], "db");
/// assert_eq!(pending.contains, Some(json!({ "status": "pending" })));
/// assert!(Selector::new().is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector {
    /// Labels the object must carry, by key.
    pub labels: BTreeMap<String, String>,
    /// JSON the object's value must contain; `None` places no condition on
    /// the value.
    pub contains: Option<serde_json::Value>,
}

impl Selector {
    /// Every object: no labels, no `contains`.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(leasehold_guest::Selector::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Also require the label `key` with `value`.
    ///
    /// # Example
    ///
    /// ```
    /// let selector = leasehold_guest::Selector::new().label("zone", "eu");
    /// assert_eq!(selector.labels.len(), 1);
    /// ```
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Require the value to contain `json` (replacing an earlier
    /// condition).
    ///
    /// # Example
    ///
    /// ```
    /// let selector = leasehold_guest::Selector::new().contains(serde_json::json!({ "a": 1 }));
    /// assert!(!selector.is_empty());
    /// ```
    pub fn contains(mut self, json: serde_json::Value) -> Self {
        self.contains = Some(json);
        self
    }

    /// Whether it selects every object of the kind.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(!leasehold_guest::Selector::new().label("a", "b").is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.contains.is_none()
    }
}

/// One write of a commit, as sent to the host. Values are JSON text.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Op, Transaction};
///
/// let host = FakeHost::new();
/// Transaction::new().create("tasks", "a", &serde_json::json!({ "status": "pending" })).commit()?;
/// assert!(matches!(&host.commits()[0].ops[0], Op::Create { key, .. } if key.name == "a"));
/// # Ok::<(), leasehold_guest::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create an object that must not exist yet.
    Create {
        /// Where.
        key: ObjectKey,
        /// The new value as JSON text.
        value: String,
    },
    /// Replace an object's value if its version is still `expected_version`.
    Update {
        /// Where.
        key: ObjectKey,
        /// The version read.
        expected_version: u64,
        /// The new value as JSON text.
        value: String,
    },
    /// Request the deletion of an object if its version is still
    /// `expected_version`: it is removed if it has no finalizers, marked
    /// otherwise (already marked: left as it is); objects it owns are
    /// deleted or marked in the same commit.
    Delete {
        /// Where.
        key: ObjectKey,
        /// The version read.
        expected_version: u64,
    },
    /// Create an object that must not exist yet, with metadata.
    CreateWith {
        /// Where.
        key: ObjectKey,
        /// The new value as JSON text.
        value: String,
        /// Its labels, owner and finalizers.
        meta: Metadata,
    },
    /// Replace the value, the metadata or both (a `None` part is kept) if
    /// the version is still `expected_version`.
    Replace {
        /// Where.
        key: ObjectKey,
        /// The version read.
        expected_version: u64,
        /// The new value as JSON text, or keep it.
        value: Option<String>,
        /// The new metadata (all of it), or keep it.
        meta: Option<Metadata>,
    },
    /// Write only the status part, at `expected_generation` if given.
    Status {
        /// Where.
        key: ObjectKey,
        /// The generation the status was computed from, if it must still be
        /// current.
        expected_generation: Option<u64>,
        /// The new status as JSON text, or `None` to clear it.
        status: Option<String>,
    },
    /// Write nothing; fail the commit with a conflict unless the object is
    /// at `expected_version` (0: absent).
    Check {
        /// Where.
        key: ObjectKey,
        /// The version it must be at; 0 for "absent".
        expected_version: u64,
    },
}

impl Op {
    /// The object this operation writes.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{ObjectKey, Op};
    ///
    /// let op = Op::Delete { key: ObjectKey::new("tasks", "a"), expected_version: 4 };
    /// assert_eq!(op.key().name, "a");
    /// ```
    pub fn key(&self) -> &ObjectKey {
        match self {
            Op::Create { key, .. }
            | Op::Update { key, .. }
            | Op::Delete { key, .. }
            | Op::CreateWith { key, .. }
            | Op::Replace { key, .. }
            | Op::Status { key, .. }
            | Op::Check { key, .. } => key,
        }
    }

    /// The value written, parsed, for assertions; `None` for an operation
    /// that writes no value (a delete, a status write, a check, a replace
    /// of the metadata only).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{ObjectKey, Op};
    ///
    /// let op = Op::Create { key: ObjectKey::new("tasks", "a"), value: r#"{"n":1}"#.into() };
    /// assert_eq!(op.value_json(), Some(serde_json::json!({ "n": 1 })));
    /// ```
    pub fn value_json(&self) -> Option<serde_json::Value> {
        match self {
            Op::Create { value, .. } | Op::Update { value, .. } | Op::CreateWith { value, .. } => {
                serde_json::from_str(value).ok()
            }
            Op::Replace { value, .. } => {
                value.as_deref().and_then(|v| serde_json::from_str(v).ok())
            }
            Op::Delete { .. } | Op::Status { .. } | Op::Check { .. } => None,
        }
    }

    /// The status written, parsed, for assertions: `Some(None)` for a
    /// status write that clears it, `None` for any other operation.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{ObjectKey, Op};
    ///
    /// let op = Op::Status {
    ///     key: ObjectKey::new("tasks", "a"),
    ///     expected_generation: Some(2),
    ///     status: Some(r#"{"phase":"done"}"#.into()),
    /// };
    /// assert_eq!(op.status_json(), Some(Some(serde_json::json!({ "phase": "done" }))));
    /// ```
    pub fn status_json(&self) -> Option<Option<serde_json::Value>> {
        match self {
            Op::Status { status, .. } => {
                Some(status.as_deref().and_then(|s| serde_json::from_str(s).ok()))
            }
            _ => None,
        }
    }
}

/// An event appended with a commit.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Transaction};
///
/// let host = FakeHost::new();
/// Transaction::new().event("tasks", "a", "Noticed", "saw tasks/a").commit()?;
/// let event = &host.commits()[0].events[0];
/// assert_eq!((event.reason.as_str(), event.message.as_str()), ("Noticed", "saw tasks/a"));
/// # Ok::<(), leasehold_guest::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// The object the event is about.
    pub key: ObjectKey,
    /// A short machine-readable reason in PascalCase, e.g. `Assigned`.
    pub reason: String,
    /// A human-readable message.
    pub message: String,
}

/// What a successful commit produced.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, FakeHost, Transaction};
///
/// let host = FakeHost::new();
/// let committed = Transaction::new()
///     .create("counters", "hits", &0)
///     .event("counters", "hits", "Created", "new counter")
///     .commit()?;
/// // The revision is the new version of every object the commit wrote.
/// let hits = Api::<u32>::new("counters").get("hits").unwrap().unwrap();
/// assert_eq!(hits.version, committed.revision);
/// assert_eq!(committed.event_seqs.len(), 1);
/// # Ok::<(), leasehold_guest::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The commit's store revision: the new version of every object it
    /// created or updated.
    pub revision: u64,
    /// The sequence numbers of the appended events, in the order given.
    pub event_seqs: Vec<u64>,
}

/// The fence every write of this guest is stamped with: the lease, its
/// epoch and the replica holding it. Read-only: the host owns it.
///
/// `epoch` strictly increases with each new tenure of the lease: it tells
/// who did something ([`Fence::idempotency_key`] stamps it). The host sends
/// it with every outbound request (`Leasehold-Epoch`), so a receiver can
/// refuse a deposed leader's late request; an effect that must happen once
/// whoever leads is keyed without it
/// ([`crate::http::IdempotencyKey::for_action`]).
///
/// # Example
///
/// ```
/// use leasehold_guest::FakeHost;
///
/// let host = FakeHost::new();
/// let fence = leasehold_guest::fence();
/// assert_eq!(fence, host.fence());
/// assert_eq!(fence.epoch, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The cluster the lease belongs to.
    pub cluster: String,
    /// The lease name (the controller's name).
    pub lease: String,
    /// The fencing epoch of this tenure.
    pub epoch: u64,
    /// The replica holding the lease.
    pub holder: String,
}

impl Fence {
    /// A key naming one action of this tenure, `cluster/lease/epoch/action`:
    /// a stamp of who did it. Two tenures never produce the same key, and a
    /// retry inside one tenure produces the same key again.
    ///
    /// Because it changes with the tenure, it does not deduplicate an
    /// external effect across a change of leader: a successor re-running
    /// the decision would send a new key and the receiver would apply the
    /// effect twice. For the `Idempotency-Key` of an outbound request use
    /// [`crate::http::IdempotencyKey::for_action`], which names the
    /// decision instead.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Fence;
    ///
    /// let fence = Fence {
    ///     cluster: "prod".into(),
    ///     lease: "scheduler".into(),
    ///     epoch: 7,
    ///     holder: "replica-a".into(),
    /// };
    /// assert_eq!(fence.idempotency_key("notify-t1"), "prod/scheduler/7/notify-t1");
    /// ```
    pub fn idempotency_key(&self, action: &str) -> String {
        format!("{}/{}/{}/{action}", self.cluster, self.lease, self.epoch)
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lease {}/{} epoch {} holder {}",
            self.cluster, self.lease, self.epoch, self.holder
        )
    }
}

/// Which part of its controller's objects this tenure runs: shard
/// `index` of `count` (the WIT's `tenure.shard`). A controller whose config
/// entry sets `shards = N` runs as N leases, `NAME-0` to `NAME-(N-1)`, each
/// with its own tenures and guest instance; an unsharded controller runs
/// shard 0 of 1, which owns every object.
///
/// Every object belongs to exactly one shard: the one FNV-1a 64 of its
/// `kind/name` picks ([`Shard::of_key`]), or, for an object carrying the
/// controller's shard label ([`crate::Description::shard_by_label`]), the
/// one the label's value picks ([`Shard::of_label`]). The host wakes a
/// shard only for its own objects (and those of the kinds every shard
/// watches, [`crate::Description::watch_on_every_shard`]); a write to
/// another shard's object must be conditional.
///
/// # Example
///
/// ```
/// use leasehold_guest::Shard;
///
/// let shard = Shard { index: 1, count: 4 };
/// assert_eq!(Shard::of_key("tasks", "t-2", 4), 1);
/// assert!(shard.owns_key("tasks", "t-2"));
/// assert!(!shard.owns_key("tasks", "t-1"));
/// assert!(Shard::WHOLE.owns_key("tasks", "t-1"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    /// This tenure's shard, from 0 to `count - 1`.
    pub index: u32,
    /// How many shards the controller runs as (1 to 64).
    pub count: u32,
}

impl Shard {
    /// The shard of an unsharded controller: shard 0 of 1, which owns
    /// every object.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// The index of the shard that `kind/name` belongs to among `count`
    /// shards, by its name: FNV-1a 64 of the UTF-8 bytes of `kind/name`,
    /// modulo `count` (as the host computes it).
    pub fn of_key(kind: &str, name: &str, count: u32) -> u32 {
        let bytes = kind.bytes().chain([b'/']).chain(name.bytes());
        (fnv1a64(bytes) % u64::from(count.max(1))) as u32
    }

    /// The index of the shard an object whose shard label has `value`
    /// belongs to among `count` shards: FNV-1a 64 of `value`, modulo
    /// `count`.
    pub fn of_label(value: &str, count: u32) -> u32 {
        (fnv1a64(value.bytes()) % u64::from(count.max(1))) as u32
    }

    /// Whether `kind/name` belongs to this shard by its name (for a
    /// controller without a shard label, or an object without the label).
    pub fn owns_key(&self, kind: &str, name: &str) -> bool {
        Self::of_key(kind, name, self.count) == self.index
    }

    /// Whether the object `kind/name` with `labels` belongs to this shard
    /// when the controller shards by `shard_label` (none: by name). The
    /// labels are the object's as read from the store.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use leasehold_guest::Shard;
    ///
    /// let labels = BTreeMap::from([("example.com/tenant".to_string(), "foobar".to_string())]);
    /// let shard = Shard { index: Shard::of_label("foobar", 4), count: 4 };
    /// // Every task of tenant "foobar" is in one shard, whatever its name.
    /// for name in ["t-1", "t-2", "t-3"] {
    ///     assert!(shard.owns("tasks", name, &labels, Some("example.com/tenant")));
    /// }
    /// ```
    pub fn owns(
        &self,
        kind: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
        shard_label: Option<&str>,
    ) -> bool {
        match shard_label.and_then(|label| labels.get(label)) {
            Some(value) => Self::of_label(value, self.count) == self.index,
            None => self.owns_key(kind, name),
        }
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shard {} of {}", self.index, self.count)
    }
}

/// FNV-1a, 64 bits (the FNV specification's offset basis and prime).
fn fnv1a64(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Severity of a log line.
///
/// # Example
///
/// ```
/// use leasehold_guest::Level;
///
/// assert!(Level::Warn > Level::Info);
/// assert_eq!(Level::Error.to_string(), "ERROR");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected but handled.
    Warn,
    /// A failure.
    Error,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Trace => "TRACE",
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        })
    }
}

/// An object as it crosses the boundary: its value is JSON text. The
/// typed [`crate::Object`] is decoded from it above this layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawObject {
    pub kind: String,
    pub name: String,
    pub version: u64,
    pub value: String,
    pub meta: Metadata,
    /// JSON text, if a status was written.
    pub status: Option<String>,
    pub generation: u64,
    /// Milliseconds since the Unix epoch, when marked for deletion.
    pub deleting_since_ms: Option<u64>,
}

/// A page as it crosses the boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawPage {
    pub objects: Vec<RawObject>,
    pub next: Option<String>,
}

/// A store call's failure exactly as the WIT contract's `store-error`
/// spells it. The public [`crate::StoreError`] is derived from it by the
/// error layer (which, among other things, recognizes a quota refusal in
/// an `Invalid` message), so both sides of the seam report errors the same
/// way and the native fake cannot skip that derivation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WireError {
    /// `fenced(string)`: the tenure is over.
    Fenced(String),
    /// `conflict(object-key)`: a version precondition failed.
    Conflict(ObjectKey),
    /// `not-found(object-key)`: an update or delete of a missing object.
    NotFound(ObjectKey),
    /// `invalid(string)`: a malformed request, or a quota refusal.
    Invalid(String),
    /// `unavailable(string)`: the backend failed; outcome unknown.
    Unavailable(String),
}

/// The HTTP methods a controller can send.
///
/// # Example
///
/// ```
/// use leasehold_guest::http::Method;
///
/// assert_eq!(Method::Patch.as_str(), "PATCH");
/// assert!(Method::Post.has_body());
/// assert!(!Method::Get.has_body());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`: read a resource.
    Get,
    /// `HEAD`: a `GET` without the response body.
    Head,
    /// `POST`: create, or run an action.
    Post,
    /// `PUT`: replace a resource.
    Put,
    /// `PATCH`: change part of a resource.
    Patch,
    /// `DELETE`: remove a resource.
    Delete,
}

impl Method {
    /// The method's name on the wire.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(leasehold_guest::http::Method::Delete.as_str(), "DELETE");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }

    /// Whether a request of this method carries a body even when it is
    /// empty (`POST`, `PUT`, `PATCH`): the SDK then sends
    /// `Content-Length: 0`, which some servers require.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(leasehold_guest::http::Method::Put.has_body());
    /// ```
    pub fn has_body(self) -> bool {
        matches!(self, Method::Post | Method::Put | Method::Patch)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The schemes outbound requests may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    pub(crate) fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// An outbound request as `wasi:http` takes it: the URL already taken
/// apart, headers in the order the guest set them (the SDK's own
/// `content-length` among them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WireRequest {
    pub method: Method,
    pub scheme: Scheme,
    /// `host[:port]` as written in the URL.
    pub authority: String,
    /// Starts with `/`; the query, if any, included; never a fragment.
    pub path_with_query: String,
    pub headers: Vec<(String, String)>,
    /// `None`: no body at all (the request's `body` is never opened).
    pub body: Option<Vec<u8>>,
    /// The first-byte timeout the guest asks for; the host caps it.
    pub first_byte_timeout: Option<Duration>,
}

impl WireRequest {
    /// `scheme://authority/path?query`: what goes on the wire. The fake
    /// matches and records requests by it.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) fn url(&self) -> String {
        format!(
            "{}://{}{}",
            self.scheme.as_str(),
            self.authority,
            self.path_with_query
        )
    }
}

/// A response as it crosses the boundary: header values are bytes, as
/// `wasi:http` gives them; the body is read to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WireResponse {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// `wasi:http/types.field-size-payload`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldSize {
    pub name: Option<String>,
    pub size: Option<u32>,
}

/// `wasi:http/types.error-code` (WASI 0.2.12), variant for variant, so the
/// classification above this layer sees exactly what the host said.
// Natively only the fake's few codes are built; the wasm side builds them all.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ErrorCode {
    DnsTimeout,
    DnsError {
        rcode: Option<String>,
        info_code: Option<u16>,
    },
    DestinationNotFound,
    DestinationUnavailable,
    DestinationIpProhibited,
    DestinationIpUnroutable,
    ConnectionRefused,
    ConnectionTerminated,
    ConnectionTimeout,
    ConnectionReadTimeout,
    ConnectionWriteTimeout,
    ConnectionLimitReached,
    TlsProtocolError,
    TlsCertificateError,
    TlsAlertReceived {
        alert_id: Option<u8>,
        alert_message: Option<String>,
    },
    HttpRequestDenied,
    HttpRequestLengthRequired,
    HttpRequestBodySize(Option<u64>),
    HttpRequestMethodInvalid,
    HttpRequestUriInvalid,
    HttpRequestUriTooLong,
    HttpRequestHeaderSectionSize(Option<u32>),
    HttpRequestHeaderSize(Option<FieldSize>),
    HttpRequestTrailerSectionSize(Option<u32>),
    HttpRequestTrailerSize(FieldSize),
    HttpResponseIncomplete,
    HttpResponseHeaderSectionSize(Option<u32>),
    HttpResponseHeaderSize(FieldSize),
    HttpResponseBodySize(Option<u64>),
    HttpResponseTrailerSectionSize(Option<u32>),
    HttpResponseTrailerSize(FieldSize),
    HttpResponseTransferCoding(Option<String>),
    HttpResponseContentCoding(Option<String>),
    HttpResponseTimeout,
    HttpUpgradeFailed,
    HttpProtocolError,
    LoopDetected,
    ConfigurationError,
    InternalError(Option<String>),
}

/// `Some(n)` as ` (n)`, for messages.
fn detail<T: fmt::Display>(value: &Option<T>) -> String {
    value
        .as_ref()
        .map(|v| format!(" ({v})"))
        .unwrap_or_default()
}

impl fmt::Display for FieldSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.name, self.size) {
            (Some(name), Some(size)) => write!(f, "{name}: {size} bytes"),
            (Some(name), None) => f.write_str(name),
            (None, Some(size)) => write!(f, "{size} bytes"),
            (None, None) => f.write_str("unknown field"),
        }
    }
}

impl fmt::Display for ErrorCode {
    /// The WIT case's name, and its payload when it has one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorCode as E;
        match self {
            E::DnsTimeout => f.write_str("DNS-timeout"),
            E::DnsError { rcode, info_code } => {
                write!(f, "DNS-error{}{}", detail(rcode), detail(info_code))
            }
            E::DestinationNotFound => f.write_str("destination-not-found"),
            E::DestinationUnavailable => f.write_str("destination-unavailable"),
            E::DestinationIpProhibited => f.write_str("destination-IP-prohibited"),
            E::DestinationIpUnroutable => f.write_str("destination-IP-unroutable"),
            E::ConnectionRefused => f.write_str("connection-refused"),
            E::ConnectionTerminated => f.write_str("connection-terminated"),
            E::ConnectionTimeout => f.write_str("connection-timeout"),
            E::ConnectionReadTimeout => f.write_str("connection-read-timeout"),
            E::ConnectionWriteTimeout => f.write_str("connection-write-timeout"),
            E::ConnectionLimitReached => f.write_str("connection-limit-reached"),
            E::TlsProtocolError => f.write_str("TLS-protocol-error"),
            E::TlsCertificateError => f.write_str("TLS-certificate-error"),
            E::TlsAlertReceived {
                alert_id,
                alert_message,
            } => write!(
                f,
                "TLS-alert-received{}{}",
                detail(alert_id),
                detail(alert_message)
            ),
            E::HttpRequestDenied => f.write_str("HTTP-request-denied"),
            E::HttpRequestLengthRequired => f.write_str("HTTP-request-length-required"),
            E::HttpRequestBodySize(n) => write!(f, "HTTP-request-body-size{}", detail(n)),
            E::HttpRequestMethodInvalid => f.write_str("HTTP-request-method-invalid"),
            E::HttpRequestUriInvalid => f.write_str("HTTP-request-URI-invalid"),
            E::HttpRequestUriTooLong => f.write_str("HTTP-request-URI-too-long"),
            E::HttpRequestHeaderSectionSize(n) => {
                write!(f, "HTTP-request-header-section-size{}", detail(n))
            }
            E::HttpRequestHeaderSize(s) => write!(f, "HTTP-request-header-size{}", detail(s)),
            E::HttpRequestTrailerSectionSize(n) => {
                write!(f, "HTTP-request-trailer-section-size{}", detail(n))
            }
            E::HttpRequestTrailerSize(s) => write!(f, "HTTP-request-trailer-size ({s})"),
            E::HttpResponseIncomplete => f.write_str("HTTP-response-incomplete"),
            E::HttpResponseHeaderSectionSize(n) => {
                write!(f, "HTTP-response-header-section-size{}", detail(n))
            }
            E::HttpResponseHeaderSize(s) => write!(f, "HTTP-response-header-size ({s})"),
            E::HttpResponseBodySize(n) => write!(f, "HTTP-response-body-size{}", detail(n)),
            E::HttpResponseTrailerSectionSize(n) => {
                write!(f, "HTTP-response-trailer-section-size{}", detail(n))
            }
            E::HttpResponseTrailerSize(s) => write!(f, "HTTP-response-trailer-size ({s})"),
            E::HttpResponseTransferCoding(c) => {
                write!(f, "HTTP-response-transfer-coding{}", detail(c))
            }
            E::HttpResponseContentCoding(c) => {
                write!(f, "HTTP-response-content-coding{}", detail(c))
            }
            E::HttpResponseTimeout => f.write_str("HTTP-response-timeout"),
            E::HttpUpgradeFailed => f.write_str("HTTP-upgrade-failed"),
            E::HttpProtocolError => f.write_str("HTTP-protocol-error"),
            E::LoopDetected => f.write_str("loop-detected"),
            E::ConfigurationError => f.write_str("configuration-error"),
            E::InternalError(message) => write!(f, "internal-error{}", detail(message)),
        }
    }
}

impl ErrorCode {
    /// The `error-code` that the text of a body stream's I/O error names,
    /// if it is one wasmtime-wasi-http writes.
    ///
    /// `http-error-code` should recover the code behind a stream error, but
    /// wasmtime-wasi-http 48 keeps a response body's failure as its own
    /// error type, which that function does not recognize: a body over the
    /// host's bound, a between-bytes timeout or a connection dropped on
    /// lease loss reach the guest only as text. Only the first line is
    /// read (a host with backtraces enabled appends them); text that is not
    /// exactly one of these stays unrecognized.
    #[cfg_attr(not(any(target_arch = "wasm32", test)), allow(dead_code))]
    pub(crate) fn from_host_text(text: &str) -> Option<ErrorCode> {
        let line = text.lines().next().unwrap_or("").trim();
        // "…exceeds limit" or "…exceeds limit: N bytes".
        let size = |prefix: &str| -> Option<Option<u64>> {
            let rest = line.strip_prefix(prefix)?;
            if rest.is_empty() {
                return Some(None);
            }
            let n = rest.strip_prefix(": ")?.strip_suffix(" bytes")?;
            n.parse().ok().map(Some)
        };
        if let Some(n) = size("HTTP response body size exceeds limit") {
            return Some(ErrorCode::HttpResponseBodySize(n));
        }
        if let Some(n) = size("HTTP request body size exceeds limit") {
            return Some(ErrorCode::HttpRequestBodySize(n));
        }
        if let Some(message) = line.strip_prefix("internal error: ") {
            return Some(ErrorCode::InternalError(Some(message.to_string())));
        }
        Some(match line {
            "internal error" => ErrorCode::InternalError(None),
            "connection refused" => ErrorCode::ConnectionRefused,
            "connection terminated" => ErrorCode::ConnectionTerminated,
            "connection timeout" => ErrorCode::ConnectionTimeout,
            "connection read timeout" => ErrorCode::ConnectionReadTimeout,
            "connection write timeout" => ErrorCode::ConnectionWriteTimeout,
            "HTTP response timeout" => ErrorCode::HttpResponseTimeout,
            "incomplete HTTP response" => ErrorCode::HttpResponseIncomplete,
            "HTTP protocol error" => ErrorCode::HttpProtocolError,
            _ => return None,
        })
    }
}

/// Why an outbound request failed, below any classification: the host's
/// `error-code` (from `handle`, the response future, a body stream or
/// `finish`), or a failure on the guest's side of `wasi:http`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WireHttpError {
    /// The host's `error-code`.
    Code(ErrorCode),
    /// The request could not be built: `wasi:http` refused a header, the
    /// method, the authority or the path. Nothing was sent.
    Build(String),
    /// A body stream failed without an `error-code`; the I/O error's
    /// description. Only the wasm side meets streams.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    Stream(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts are wasmtime-wasi-http 48's `Display` of its errors, as
    /// a guest reads them through `error.to-debug-string`.
    #[test]
    fn the_hosts_stream_error_texts_are_recognized() {
        for (text, code) in [
            (
                "HTTP response body size exceeds limit: 65536 bytes",
                ErrorCode::HttpResponseBodySize(Some(65536)),
            ),
            (
                "HTTP response body size exceeds limit",
                ErrorCode::HttpResponseBodySize(None),
            ),
            (
                "HTTP request body size exceeds limit: 9 bytes",
                ErrorCode::HttpRequestBodySize(Some(9)),
            ),
            (
                "internal error: leasehold-fenced: controller c: lost",
                ErrorCode::InternalError(Some("leasehold-fenced: controller c: lost".into())),
            ),
            ("internal error", ErrorCode::InternalError(None)),
            ("connection read timeout", ErrorCode::ConnectionReadTimeout),
            ("connection timeout", ErrorCode::ConnectionTimeout),
            ("connection terminated", ErrorCode::ConnectionTerminated),
            ("HTTP response timeout", ErrorCode::HttpResponseTimeout),
            (
                "incomplete HTTP response",
                ErrorCode::HttpResponseIncomplete,
            ),
            (
                "connection read timeout\n\nStack backtrace:\n   0: ...",
                ErrorCode::ConnectionReadTimeout,
            ),
        ] {
            assert_eq!(ErrorCode::from_host_text(text), Some(code), "{text:?}");
        }
        for text in [
            "hyper error: connection closed before message completed",
            "HTTP response body size exceeds limit: many bytes",
            "connection read timeout, and more",
            "",
        ] {
            assert_eq!(ErrorCode::from_host_text(text), None, "{text:?}");
        }
    }
}
