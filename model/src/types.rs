//! What the store holds and what a write asks of it.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// The address of an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ObjectKey {
    /// The kind.
    pub kind: String,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `kind/name`.
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

/// The metadata a write sets beside an object's value (see
/// [`crate::plan`] for the rules).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Metadata {
    /// String labels, by key.
    pub labels: BTreeMap<String, String>,
    /// The object that owns this one: deleting it deletes (or marks) this
    /// one in the same commit. It must exist, not be marked for deletion,
    /// and be in the same cluster when a write names it.
    pub owner: Option<ObjectKey>,
    /// Names of the parties that must act before the object is removed:
    /// while any remain, a delete only marks it (`deleting_since`).
    pub finalizers: Vec<String>,
}

impl Metadata {
    /// No labels, owner or finalizers.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.owner.is_none() && self.finalizers.is_empty()
    }
}

/// A stored object. `T` is the backend's time of a deletion mark (the
/// host's `DateTime<Utc>`, the SDK fake's milliseconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Object<T> {
    /// The kind (DNS label).
    pub kind: String,
    /// The name within the kind (DNS label).
    pub name: String,
    /// Revision of the commit that last wrote it (any write: value,
    /// metadata, status, or a deletion mark).
    pub version: u64,
    /// Canonical JSON text ([`crate::json::canonical`]): the spec, what
    /// users write.
    pub value: String,
    /// Labels, owner and finalizers.
    pub meta: Metadata,
    /// 1 at creation; grows by one with each write that changes the value
    /// or the metadata (a deletion mark included), never with a status
    /// write.
    pub generation: u64,
    /// The status part, canonical JSON text, written only by status writes
    /// ([`Op::Status`]); `None` until the first.
    pub status: Option<String>,
    /// When a delete was requested while finalizers remained (backend
    /// clock); the object is removed once a write leaves it none.
    pub deleting_since: Option<T>,
}

impl<T> Object<T> {
    /// The object's address.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            kind: self.kind.clone(),
            name: self.name.clone(),
        }
    }
}

/// One write of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create; fails with `Conflict` if it exists.
    Create {
        /// Where.
        key: ObjectKey,
        /// JSON text.
        value: String,
    },
    /// Replace if the version matches; `Conflict` if not, `NotFound` if absent.
    Update {
        /// Where.
        key: ObjectKey,
        /// The version read.
        expected_version: u64,
        /// JSON text.
        value: String,
    },
    /// Request deletion if the version matches; `Conflict` if not,
    /// `NotFound` if absent. Removes the object if it has no finalizers,
    /// otherwise marks it (`deleting_since`; an object already marked is
    /// left as it is). Objects it owns are deleted or marked in the same
    /// commit.
    Delete {
        /// Where.
        key: ObjectKey,
        /// The version read.
        expected_version: u64,
    },
    /// Create with metadata; fails with `Conflict` if it exists.
    CreateWith {
        /// Where.
        key: ObjectKey,
        /// JSON text.
        value: String,
        /// Labels, owner, finalizers.
        meta: Metadata,
    },
    /// Replace the value, the metadata or both if the version matches
    /// (`Conflict` if not, `NotFound` if absent); `None` keeps what is
    /// there. An [`Op::Update`] keeps the metadata. Leaving a marked object
    /// without finalizers removes it; a marked object cannot gain
    /// finalizers.
    Replace {
        /// Where.
        key: ObjectKey,
        /// The version read.
        expected_version: u64,
        /// New JSON text, or keep.
        value: Option<String>,
        /// New metadata (replacing all of it), or keep.
        meta: Option<Metadata>,
    },
    /// Write only the status part, leaving value, metadata and generation
    /// as they are (a status write never conflicts with a spec write unless
    /// it asks to): `Conflict` if `expected_generation` is given and the
    /// object's generation differs, `NotFound` if absent. The generation is
    /// a status write's only precondition.
    Status {
        /// Where.
        key: ObjectKey,
        /// The generation the status was computed from, if it must still
        /// be current.
        expected_generation: Option<u64>,
        /// New status JSON text, or `None` to clear it.
        status: Option<String>,
    },
    /// Write nothing; fail the whole commit with `Conflict` unless the
    /// object is at `expected_version` (0: unless it is absent). Lets a
    /// commit depend on an object it does not change.
    Check {
        /// Where.
        key: ObjectKey,
        /// The version it must be at; 0 for "absent".
        expected_version: u64,
    },
}

impl Op {
    /// The object this operation is about.
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

    /// The object this operation may create (for quotas).
    pub fn creates(&self) -> Option<&ObjectKey> {
        match self {
            Op::Create { key, .. } | Op::CreateWith { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// An event to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// The object the event is about.
    pub key: ObjectKey,
    /// Short PascalCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// A user's write through the API, beside a plain put and delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiWrite {
    /// Create or replace value and metadata, optionally only at
    /// `expected_version` (0: must not exist). Appends `Created` or
    /// `Updated` (or `Deleted`, when it removed a marked object's last
    /// finalizer).
    Put {
        /// Where.
        key: ObjectKey,
        /// JSON text.
        value: String,
        /// Replaces all metadata; `None` keeps it (a create then has none).
        meta: Option<Metadata>,
        /// `None`: whatever is there; `Some(0)`: must not exist.
        expected_version: Option<u64>,
    },
    /// Write the status part (see [`Op::Status`]): its only precondition
    /// is the generation, as for a guest's status write. Appends
    /// `StatusUpdated`.
    Status {
        /// Where.
        key: ObjectKey,
        /// New status JSON text, or `None` to clear it.
        status: Option<String>,
        /// Must still be this generation, if given.
        expected_generation: Option<u64>,
    },
    /// Request deletion (see [`Op::Delete`]), optionally only at
    /// `expected_version`. Appends `Deleted` or `DeletionRequested`.
    Delete {
        /// Where.
        key: ObjectKey,
        /// Must be at this version, if given.
        expected_version: Option<u64>,
    },
}

/// What an [`ApiWrite`] did to the object it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written<T> {
    /// It was created; as stored.
    Created(Object<T>),
    /// It was replaced (value, metadata or status); as stored.
    Replaced(Object<T>),
    /// Deletion was requested and finalizers hold it: it stays, marked
    /// (already marked: unchanged).
    Marked(Object<T>),
    /// It was removed.
    Removed,
}

/// Which objects of a kind a list returns: every label named must be
/// present with that value, and the value must contain `contains` (JSON
/// containment, PostgreSQL's `@>` semantics: [`crate::json::contains`]).
///
/// The empty selector (the default) selects every object of the kind. A
/// selector is checked before it is used
/// ([`crate::validate::check_selector`]): at most
/// [`crate::limits::MAX_SELECTOR_LABELS`] labels, each of the syntax an
/// object's labels have (a selector naming a label no object can carry is
/// refused rather than matching nothing), and a `contains` of at most
/// [`crate::limits::MAX_SELECTOR_CONTAINS_BYTES`] as compact JSON, nested
/// at most [`crate::limits::MAX_SELECTOR_CONTAINS_DEPTH`] deep, holding no
/// NUL character.
///
/// Containment in detail, the same on every backend: an object contains
/// an object if it has each of its keys with a value that contains the
/// given one; an array contains an array if each element given is
/// contained in some element of it (order and repetition do not matter);
/// scalars contain only equal scalars (numbers compare by exact value, `1`
/// equals `1.0`); a value never contains a value of another type, with one
/// exception at the top level only: an array contains a scalar it has as
/// an element (`["a", "b"]` contains `"a"`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// Labels the object must carry, each with exactly this value (an
    /// empty value matches a label set to the empty string, not an absent
    /// one).
    pub labels: BTreeMap<String, String>,
    /// JSON the object's value must contain; `None` places no condition
    /// on the value.
    pub contains: Option<serde_json::Value>,
}

impl Selector {
    /// No condition: every object of the kind.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.contains.is_none()
    }
}
