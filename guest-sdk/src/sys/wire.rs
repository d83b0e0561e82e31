//! The plain types that cross the boundary between the SDK and whatever
//! answers its calls: keys, objects as JSON text, operations, events,
//! commit results, the fence, log levels and the host's store errors as
//! the WIT contract spells them.
//!
//! Owns: data and the trivial helpers every layer needs (constructors,
//! `Display`). Must never: import another module of this crate, or carry
//! policy (typed decoding, retry decisions, quota parsing); those belong to
//! the layers above, which re-export the public types from here.

use std::fmt;

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
    /// Delete an object if its version is still `expected_version`.
    Delete {
        /// Where.
        key: ObjectKey,
        /// The version read.
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
            Op::Create { key, .. } | Op::Update { key, .. } | Op::Delete { key, .. } => key,
        }
    }

    /// The value written, parsed, for assertions; `None` for a delete.
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
            Op::Create { value, .. } | Op::Update { value, .. } => serde_json::from_str(value).ok(),
            Op::Delete { .. } => None,
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
/// `epoch` strictly increases with each new tenure of the lease, which
/// makes it the natural ingredient of idempotency keys for anything a
/// controller does outside the store (see [`Fence::idempotency_key`]).
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
    /// A key naming one action of this tenure, `cluster/lease/epoch/action`,
    /// for external systems that deduplicate requests. Two tenures never
    /// produce the same key, and a retry inside one tenure produces the same
    /// key again.
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
