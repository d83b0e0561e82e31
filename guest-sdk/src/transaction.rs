//! Fenced, atomic writes: a [`Transaction`] collects operations and events
//! and commits them together or not at all.
//!
//! Owns: building a commit (values serialized once, the first failure kept
//! for `commit` to report) and sending it through `sys`. Must never: send a
//! commit with a value that failed to serialize, or be resendable after a
//! failure (it is consumed: a retry must be built from a re-read).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::StoreError;
use crate::object::{Kind, Metadata, Object, ObjectKey};
use crate::sys;

// What a commit carries and returns are wire types; they are re-exported
// here, where the author meets them.
pub use crate::sys::{Committed, NewEvent, Op};

/// The type of an event: `Normal` (something happened as it should) or
/// `Warning` (something a person may have to look at), as Kubernetes'
/// event types.
///
/// The store's events have no type field (the WIT's `new-event` is kind,
/// name, reason and message), so the type travels at the start of the
/// message, the same way in every SDK of this repository:
///
/// - a **warning**'s message starts with `Warning: `;
/// - a **normal** event's message is the message as given, except one that
///   itself starts with `Warning: ` or `Normal: `, which gets `Normal: `
///   in front so that it still reads as normal;
/// - reading, a message that starts with `Warning: ` is a warning, one that
///   starts with `Normal: ` is normal (the prefix is not part of the text),
///   and anything else is normal, as is every event written without a type
///   ([`Transaction::event`]).
///
/// The prefix counts toward the host's [`crate::MAX_EVENT_MESSAGE_BYTES`].
///
/// # Example
///
/// ```
/// use leasehold_guest::EventType;
///
/// assert_eq!(EventType::Warning.encode("disk full"), "Warning: disk full");
/// assert_eq!(EventType::Normal.encode("all good"), "all good");
/// assert_eq!(EventType::decode("Warning: disk full"), (EventType::Warning, "disk full"));
/// assert_eq!(EventType::decode("all good"), (EventType::Normal, "all good"));
/// // A normal message that looks like a warning is kept normal.
/// let odd = EventType::Normal.encode("Warning: is a word");
/// assert_eq!(odd, "Normal: Warning: is a word");
/// assert_eq!(EventType::decode(&odd), (EventType::Normal, "Warning: is a word"));
/// assert_eq!("Warning".parse::<EventType>(), Ok(EventType::Warning));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something happened as it should: `Normal`.
    #[default]
    Normal,
    /// Something a person may have to look at: `Warning`.
    Warning,
}

impl EventType {
    /// Its name: `Normal` or `Warning`.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(leasehold_guest::EventType::Warning.as_str(), "Warning");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }

    /// What starts a message of this type: `Normal: ` or `Warning: `.
    fn prefix(self) -> &'static str {
        match self {
            EventType::Normal => "Normal: ",
            EventType::Warning => "Warning: ",
        }
    }

    /// The message an event of this type carries on the wire (see
    /// [`EventType`]).
    ///
    /// # Example
    ///
    /// See [`EventType`].
    pub fn encode(self, message: &str) -> String {
        let marked = [EventType::Normal, EventType::Warning]
            .iter()
            .any(|t| message.starts_with(t.prefix()));
        match self {
            EventType::Normal if !marked => message.to_string(),
            _ => format!("{}{message}", self.prefix()),
        }
    }

    /// The type of an event and its text, read from its message as stored
    /// (see [`EventType`]).
    ///
    /// # Example
    ///
    /// See [`EventType`].
    pub fn decode(message: &str) -> (EventType, &str) {
        for t in [EventType::Warning, EventType::Normal] {
            if let Some(text) = message.strip_prefix(t.prefix()) {
                return (t, text);
            }
        }
        (EventType::Normal, message)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Not `Normal` or `Warning`.
///
/// # Example
///
/// ```
/// assert!("Error".parse::<leasehold_guest::EventType>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEventType(pub String);

impl fmt::Display for UnknownEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not an event type: {:?} (Normal or Warning)", self.0)
    }
}

impl std::error::Error for UnknownEventType {}

impl FromStr for EventType {
    type Err = UnknownEventType;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "Normal" => Ok(EventType::Normal),
            "Warning" => Ok(EventType::Warning),
            other => Err(UnknownEventType(other.to_string())),
        }
    }
}

/// A builder for one atomic, fenced commit: creates (with metadata or
/// without), conditional updates, replaces and deletes, finalizer changes,
/// status writes, checks of objects the commit does not write, and events.
/// Each object appears in at most one operation of a commit. The host applies all of it or none of it, and
/// only if this guest's lease is still current.
///
/// Builder methods take and return the transaction by value; a value that
/// fails to serialize is reported by [`Transaction::commit`] as
/// [`StoreError::Invalid`], without calling the host. `commit` consumes the
/// transaction: after a [`StoreError::Conflict`] or
/// [`StoreError::Unavailable`], re-read and build a new one rather than
/// resending writes based on stale reads.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, FakeHost, StoreError, Transaction};
/// use serde_json::json;
///
/// let host = FakeHost::new();
/// host.seed("tasks", "t1", &json!({ "status": "pending" }));
/// let tasks = Api::<serde_json::Value>::new("tasks");
/// let task = tasks.get("t1").unwrap().unwrap();
///
/// let assign = |task: &leasehold_guest::Object| {
///     Transaction::new()
///         .update(task, &json!({ "status": "assigned", "node": "n1" }))
///         .event("tasks", "t1", "Assigned", "assigned to n1")
///         .commit()
/// };
/// assign(&task)?;
/// // The same write again is refused: the version it was based on is gone.
/// assert!(matches!(assign(&task), Err(StoreError::Conflict(_))));
/// assert_eq!(host.events_with_reason("Assigned").len(), 1);
/// # Ok::<(), StoreError>(())
/// ```
// Not `Clone`, on purpose: a transaction that met `Conflict` or
// `Unavailable` was built from reads that may be stale; the way forward is
// a new one built from a re-read.
#[derive(Debug, Default, PartialEq, Eq)]
#[must_use = "a transaction does nothing until it is committed"]
pub struct Transaction {
    ops: Vec<Op>,
    events: Vec<NewEvent>,
    // The first value that failed to serialize, or typed write aimed at
    // another kind; `commit` reports it.
    refused: Option<String>,
}

impl Transaction {
    /// An empty transaction.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Transaction;
    ///
    /// assert!(Transaction::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    fn encode<T: Serialize + ?Sized>(&mut self, key: &ObjectKey, value: &T) -> String {
        match serde_json::to_string(value) {
            Ok(json) => json,
            Err(e) => {
                self.refused
                    .get_or_insert_with(|| format!("the value for {key} does not serialize: {e}"));
                String::new()
            }
        }
    }

    /// Create `kind/name` with `value`; the commit fails with
    /// [`StoreError::Conflict`] if it exists.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().create("counters", "hits", &0).commit()?;
    /// assert_eq!(host.object::<u32>("counters", "hits").unwrap().value, 0);
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn create<T: Serialize + ?Sized>(
        mut self,
        kind: impl Into<String>,
        name: impl Into<String>,
        value: &T,
    ) -> Self {
        let key = ObjectKey::new(kind, name);
        let value = self.encode(&key, value);
        self.ops.push(Op::Create { key, value });
        self
    }

    /// Create `name` of `T`'s kind ([`Kind::KIND`]) with `value`; the
    /// commit fails with [`StoreError::Conflict`] if it exists.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Kind, Transaction};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Counter(u32);
    /// impl Kind for Counter {
    ///     const KIND: &'static str = "counters";
    /// }
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().create_typed("hits", &Counter(0)).commit()?;
    /// assert_eq!(host.object::<u32>("counters", "hits").unwrap().value, 0);
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn create_typed<T: Kind>(self, name: impl Into<String>, value: &T) -> Self {
        self.create(T::KIND, name, value)
    }

    /// Replace a typed object's value, as [`Transaction::update`] does, but
    /// only with a value of the object's own type: writing a task into a
    /// node does not compile. An object of another kind than
    /// [`Kind::KIND`] (read with `Api::<T>::new("other")`) is refused by
    /// [`Transaction::commit`] with [`StoreError::Invalid`], without
    /// calling the host.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Kind, StoreError, Transaction};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Counter(u32);
    /// impl Kind for Counter {
    ///     const KIND: &'static str = "counters";
    /// }
    ///
    /// let host = FakeHost::new();
    /// host.seed("counters", "hits", &1);
    /// let hits = Api::<Counter>::typed().get("hits").unwrap().unwrap();
    /// Transaction::new().update_typed(&hits, &Counter(hits.value.0 + 1)).commit()?;
    /// assert_eq!(host.object::<u32>("counters", "hits").unwrap().value, 2);
    ///
    /// // A counter read from another kind is not written as a counter.
    /// host.seed("gauges", "g", &1);
    /// let gauge = Api::<Counter>::new("gauges").get("g").unwrap().unwrap();
    /// let refused = Transaction::new().update_typed(&gauge, &Counter(5)).commit();
    /// assert!(matches!(refused, Err(StoreError::Invalid(_))));
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    ///
    /// A task written into a node does not compile:
    ///
    /// ```compile_fail
    /// use leasehold_guest::{Api, Kind, Transaction};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Task {
    ///     status: String,
    /// }
    /// impl Kind for Task {
    ///     const KIND: &'static str = "tasks";
    /// }
    /// #[derive(Serialize, Deserialize)]
    /// struct Node {
    ///     capacity: u32,
    /// }
    /// impl Kind for Node {
    ///     const KIND: &'static str = "nodes";
    /// }
    ///
    /// let node = Api::<Node>::typed().get("n1").unwrap().unwrap();
    /// let task = Task { status: "assigned".into() };
    /// let _ = Transaction::new().update_typed(&node, &task);
    /// ```
    pub fn update_typed<T: Kind>(mut self, object: &Object<T>, value: &T) -> Self {
        if object.kind != T::KIND {
            self.refused.get_or_insert_with(|| {
                format!(
                    "a {} is stored under kind {}, not {}: refusing to write it into {}",
                    std::any::type_name::<T>(),
                    T::KIND,
                    object.kind,
                    object.key()
                )
            });
        }
        self.update(object, value)
    }

    /// Replace `object`'s value with `value` if its version is still the
    /// one `object` was read at; the commit fails with
    /// [`StoreError::Conflict`] otherwise, or [`StoreError::NotFound`] if it
    /// was deleted.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("counters", "hits", &1);
    /// let hits = Api::<u32>::new("counters").get("hits").unwrap().unwrap();
    /// Transaction::new().update(&hits, &(hits.value + 1)).commit()?;
    /// assert_eq!(host.object::<u32>("counters", "hits").unwrap().value, 2);
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn update<U, T: Serialize + ?Sized>(self, object: &Object<U>, value: &T) -> Self {
        self.update_if_version(
            object.kind.clone(),
            object.name.clone(),
            object.version,
            value,
        )
    }

    /// Replace the value of `kind/name` if its version is `version`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// let version = host.seed("counters", "hits", &1);
    /// Transaction::new().update_if_version("counters", "hits", version, &5).commit()?;
    /// assert_eq!(host.object::<u32>("counters", "hits").unwrap().value, 5);
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn update_if_version<T: Serialize + ?Sized>(
        mut self,
        kind: impl Into<String>,
        name: impl Into<String>,
        version: u64,
        value: &T,
    ) -> Self {
        let key = ObjectKey::new(kind, name);
        let value = self.encode(&key, value);
        self.ops.push(Op::Update {
            key,
            expected_version: version,
            value,
        });
        self
    }

    /// Delete `object` if its version is still the one it was read at.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("counters", "hits", &1);
    /// let hits = Api::<u32>::new("counters").get("hits").unwrap().unwrap();
    /// Transaction::new().delete(&hits).commit()?;
    /// assert!(host.object::<u32>("counters", "hits").is_none());
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn delete<U>(self, object: &Object<U>) -> Self {
        self.delete_if_version(object.kind.clone(), object.name.clone(), object.version)
    }

    /// Delete `kind/name` if its version is `version`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, ObjectKey, StoreError, Transaction};
    ///
    /// let host = FakeHost::new();
    /// let result = Transaction::new().delete_if_version("counters", "nope", 1).commit();
    /// assert_eq!(result, Err(StoreError::NotFound(ObjectKey::new("counters", "nope"))));
    /// ```
    pub fn delete_if_version(
        mut self,
        kind: impl Into<String>,
        name: impl Into<String>,
        version: u64,
    ) -> Self {
        self.ops.push(Op::Delete {
            key: ObjectKey::new(kind, name),
            expected_version: version,
        });
        self
    }

    /// Create `kind/name` with `value` and `meta` (labels, owner,
    /// finalizers); the commit fails with [`StoreError::Conflict`] if it
    /// exists, or if the owner `meta` names does not exist or is marked for
    /// deletion (unless this commit creates it).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Metadata, ObjectKey, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("projects", "p1", &serde_json::json!({}));
    /// let meta = Metadata::new()
    ///     .label("project", "p1")
    ///     .owner(ObjectKey::new("projects", "p1"));
    /// Transaction::new().create_with("tasks", "t1", &1, &meta).commit()?;
    /// let task = host.object::<u32>("tasks", "t1").unwrap();
    /// assert_eq!(task.meta, meta);
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn create_with<T: Serialize + ?Sized>(
        mut self,
        kind: impl Into<String>,
        name: impl Into<String>,
        value: &T,
        meta: &Metadata,
    ) -> Self {
        let key = ObjectKey::new(kind, name);
        let value = self.encode(&key, value);
        self.ops.push(Op::CreateWith {
            key,
            value,
            meta: meta.clone(),
        });
        self
    }

    /// Create `name` of `T`'s kind ([`Kind::KIND`]) with `value` and
    /// `meta`, as [`Transaction::create_with`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Kind, Metadata, Transaction};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Counter(u32);
    /// impl Kind for Counter {
    ///     const KIND: &'static str = "counters";
    /// }
    ///
    /// let host = FakeHost::new();
    /// let meta = Metadata::new().label("tier", "gold");
    /// Transaction::new().create_typed_with("hits", &Counter(0), &meta).commit()?;
    /// assert_eq!(host.object::<u32>("counters", "hits").unwrap().label("tier"), Some("gold"));
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn create_typed_with<T: Kind>(
        self,
        name: impl Into<String>,
        value: &T,
        meta: &Metadata,
    ) -> Self {
        self.create_with(T::KIND, name, value, meta)
    }

    /// Replace `object`'s value and all of its metadata if its version is
    /// still the one `object` was read at ([`StoreError::Conflict`]
    /// otherwise, [`StoreError::NotFound`] if it was removed). Giving it an
    /// owner it did not have needs that owner to exist unmarked. On an
    /// object marked for deletion finalizers can be removed, never added
    /// ([`StoreError::Invalid`]), and leaving none removes the object.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "t1", &1);
    /// let task = Api::<u32>::new("tasks").get("t1").unwrap().unwrap();
    /// let meta = task.meta.clone().label("state", "done");
    /// Transaction::new().replace(&task, &2, &meta).commit()?;
    /// let task = host.object::<u32>("tasks", "t1").unwrap();
    /// assert_eq!((task.value, task.label("state")), (2, Some("done")));
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn replace<U, T: Serialize + ?Sized>(
        mut self,
        object: &Object<U>,
        value: &T,
        meta: &Metadata,
    ) -> Self {
        let key = object.key();
        let value = self.encode(&key, value);
        self.ops.push(Op::Replace {
            key,
            expected_version: object.version,
            value: Some(value),
            meta: Some(meta.clone()),
        });
        self
    }

    /// Replace all of `object`'s metadata, keeping its value, if its
    /// version is still the one `object` was read at (rules as
    /// [`Transaction::replace`]).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Metadata, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "t1", &1);
    /// let task = Api::<u32>::new("tasks").get("t1").unwrap().unwrap();
    /// Transaction::new().set_metadata(&task, &Metadata::new().label("a", "b")).commit()?;
    /// assert_eq!(host.object::<u32>("tasks", "t1").unwrap().label("a"), Some("b"));
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn set_metadata<U>(mut self, object: &Object<U>, meta: &Metadata) -> Self {
        self.ops.push(Op::Replace {
            key: object.key(),
            expected_version: object.version,
            value: None,
            meta: Some(meta.clone()),
        });
        self
    }

    /// Add the finalizer `name` to `object` (read at its current version):
    /// from then on a delete request only marks the object, until the
    /// finalizer is removed. If `object` has it already, nothing is
    /// written: the operation is a [`Transaction::check`] of the version
    /// read, so the commit still depends on it. A marked object cannot
    /// gain finalizers ([`StoreError::Invalid`]).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "t1", &1);
    /// let tasks = Api::<u32>::new("tasks");
    /// let task = tasks.get("t1")?.unwrap();
    /// Transaction::new().add_finalizer(&task, "example.com/slot").commit()?;
    ///
    /// host.remove("tasks", "t1"); // a user's delete request: only marks it
    /// let task = tasks.get("t1")?.expect("held by the finalizer");
    /// assert!(task.is_deleting());
    ///
    /// // The cleanup is done: removing the last finalizer removes the object.
    /// Transaction::new().remove_finalizer(&task, "example.com/slot").commit()?;
    /// assert!(tasks.get("t1")?.is_none());
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn add_finalizer<U>(self, object: &Object<U>, name: impl Into<String>) -> Self {
        let name = name.into();
        if object.has_finalizer(&name) {
            return self.check(object);
        }
        let meta = object.meta.clone().finalizer(name);
        self.set_metadata(object, &meta)
    }

    /// Remove the finalizer `name` from `object` (read at its current
    /// version). If the object is marked for deletion and this was its
    /// last finalizer, the commit removes the object. If `object` does not
    /// have it, nothing is written: the operation is a
    /// [`Transaction::check`] of the version read.
    ///
    /// # Example
    ///
    /// See [`Transaction::add_finalizer`].
    pub fn remove_finalizer<U>(self, object: &Object<U>, name: &str) -> Self {
        if !object.has_finalizer(name) {
            return self.check(object);
        }
        let mut meta = object.meta.clone();
        meta.finalizers.retain(|f| f != name);
        self.set_metadata(object, &meta)
    }

    /// Write `object`'s status part as computed from the generation it was
    /// read at: the commit fails with [`StoreError::Conflict`] if the value
    /// or metadata changed since (the generation moved), so a status never
    /// describes a spec it was not computed from. Other status writes and
    /// the version do not matter: a status write does not conflict with
    /// another party's status write, and it keeps the generation. It does
    /// take a new version, so a later [`Transaction::update`] based on
    /// `object` conflicts: re-read first.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, StoreError, Transaction};
    /// use serde_json::json;
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "t1", &json!({ "image": "v1" }));
    /// let task = Api::<serde_json::Value>::new("tasks").get("t1").unwrap().unwrap();
    ///
    /// // A user changes the spec meanwhile: the status computed from the
    /// // old spec is refused.
    /// host.seed("tasks", "t1", &json!({ "image": "v2" }));
    /// let stale = Transaction::new().update_status(&task, &json!({ "running": "v1" })).commit();
    /// assert!(matches!(stale, Err(StoreError::Conflict(_))));
    ///
    /// let task = Api::<serde_json::Value>::new("tasks").get("t1").unwrap().unwrap();
    /// Transaction::new().update_status(&task, &json!({ "running": "v2" })).commit()?;
    /// let task = host.object::<serde_json::Value>("tasks", "t1").unwrap();
    /// assert_eq!(task.status_json, Some(json!({ "running": "v2" })));
    /// assert_eq!(task.generation, 2, "status writes keep the generation");
    /// # Ok::<(), StoreError>(())
    /// ```
    pub fn update_status<U, S: Serialize + ?Sized>(self, object: &Object<U>, status: &S) -> Self {
        self.write_status(
            object.kind.clone(),
            object.name.clone(),
            Some(object.generation),
            status,
        )
    }

    /// Write the status part of `kind/name`, at `expected_generation` if
    /// given (see [`Transaction::update_status`]); `None` writes it
    /// whatever the generation.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "t1", &1);
    /// Transaction::new().write_status("tasks", "t1", None, &"ready").commit()?;
    /// let task = host.object::<u32>("tasks", "t1").unwrap();
    /// assert_eq!(task.status::<String>().unwrap().as_deref(), Some("ready"));
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn write_status<S: Serialize + ?Sized>(
        mut self,
        kind: impl Into<String>,
        name: impl Into<String>,
        expected_generation: Option<u64>,
        status: &S,
    ) -> Self {
        let key = ObjectKey::new(kind, name);
        let status = self.encode(&key, status);
        self.ops.push(Op::Status {
            key,
            expected_generation,
            status: Some(status),
        });
        self
    }

    /// Clear `object`'s status part, at the generation it was read at.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "t1", &1);
    /// Transaction::new().write_status("tasks", "t1", None, &"ready").commit()?;
    /// let task = Api::<u32>::new("tasks").get("t1").unwrap().unwrap();
    /// Transaction::new().clear_status(&task).commit()?;
    /// assert_eq!(host.object::<u32>("tasks", "t1").unwrap().status_json, None);
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn clear_status<U>(mut self, object: &Object<U>) -> Self {
        self.ops.push(Op::Status {
            key: object.key(),
            expected_generation: Some(object.generation),
            status: None,
        });
        self
    }

    /// Make the commit depend on `object` without writing it: the whole
    /// commit fails with [`StoreError::Conflict`] (naming `object`) unless
    /// it is still at the version it was read at. A decision based on an
    /// object the commit does not change is then as safe as a conditional
    /// write.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, ObjectKey, StoreError, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("quotas", "p1", &serde_json::json!({ "max": 1 }));
    /// let quota = Api::<serde_json::Value>::new("quotas").get("p1").unwrap().unwrap();
    ///
    /// // The quota changes before the commit: the task is not created.
    /// host.seed("quotas", "p1", &serde_json::json!({ "max": 0 }));
    /// let result = Transaction::new().check(&quota).create("tasks", "t1", &1).commit();
    /// assert_eq!(result, Err(StoreError::Conflict(ObjectKey::new("quotas", "p1"))));
    /// assert!(host.object::<u32>("tasks", "t1").is_none());
    /// ```
    pub fn check<U>(self, object: &Object<U>) -> Self {
        self.check_version(object.kind.clone(), object.name.clone(), object.version)
    }

    /// Make the commit depend on `kind/name` being at `version` (0: being
    /// absent), without writing it.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// let version = host.seed("quotas", "p1", &1);
    /// Transaction::new().check_version("quotas", "p1", version).create("tasks", "t1", &1).commit()?;
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn check_version(
        mut self,
        kind: impl Into<String>,
        name: impl Into<String>,
        version: u64,
    ) -> Self {
        self.ops.push(Op::Check {
            key: ObjectKey::new(kind, name),
            expected_version: version,
        });
        self
    }

    /// Make the commit depend on `kind/name` not existing, without writing
    /// it.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, ObjectKey, StoreError, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.seed("locks", "maintenance", &true);
    /// let result = Transaction::new()
    ///     .check_absent("locks", "maintenance")
    ///     .create("tasks", "t1", &1)
    ///     .commit();
    /// assert_eq!(result, Err(StoreError::Conflict(ObjectKey::new("locks", "maintenance"))));
    /// ```
    pub fn check_absent(self, kind: impl Into<String>, name: impl Into<String>) -> Self {
        self.check_version(kind, name, 0)
    }

    /// Append an event about `kind/name` with the commit. `reason` is a
    /// short PascalCase word (`Assigned`), `message` is for people. The
    /// message is sent as given, and reads as a [`EventType::Normal`]
    /// event unless it starts with a type's prefix; to give the type, use
    /// [`Transaction::event_of_type`] or [`Transaction::warning`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().event("nodes", "n1", "Drained", "n1 has no tasks left").commit()?;
    /// assert_eq!(host.events()[0].reason, "Drained");
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn event(
        mut self,
        kind: impl Into<String>,
        name: impl Into<String>,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        self.events.push(NewEvent {
            key: ObjectKey::new(kind, name),
            reason: reason.into(),
            message: message.into(),
        });
        self
    }

    /// Append an event of `event_type` about `kind/name` with the commit:
    /// [`Transaction::event`] with the type carried in the message as
    /// [`EventType`] describes.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{EventType, FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new()
    ///     .event_of_type("nodes", "n1", EventType::Normal, "Drained", "n1 has no tasks left")
    ///     .commit()?;
    /// assert_eq!(host.events()[0].event_type(), EventType::Normal);
    /// assert_eq!(host.events()[0].text(), "n1 has no tasks left");
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn event_of_type(
        self,
        kind: impl Into<String>,
        name: impl Into<String>,
        event_type: EventType,
        reason: impl Into<String>,
        message: impl AsRef<str>,
    ) -> Self {
        let message = event_type.encode(message.as_ref());
        self.event(kind, name, reason, message)
    }

    /// Append a [`EventType::Warning`] event about `kind/name` with the
    /// commit (see [`Transaction::event_of_type`]).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{EventType, FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().warning("nodes", "n1", "DiskFull", "no space left").commit()?;
    /// let event = &host.events()[0];
    /// assert_eq!(event.message, "Warning: no space left", "as stored");
    /// assert_eq!((event.event_type(), event.text()), (EventType::Warning, "no space left"));
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn warning(
        self,
        kind: impl Into<String>,
        name: impl Into<String>,
        reason: impl Into<String>,
        message: impl AsRef<str>,
    ) -> Self {
        self.event_of_type(kind, name, EventType::Warning, reason, message)
    }

    /// The operations collected so far.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Transaction;
    ///
    /// let tx = Transaction::new().create("a", "b", &1).delete_if_version("a", "c", 2);
    /// assert_eq!(tx.ops().len(), 2);
    /// ```
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The events collected so far.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Transaction;
    ///
    /// let tx = Transaction::new().event("a", "b", "Seen", "seen");
    /// assert_eq!(tx.events()[0].reason, "Seen");
    /// ```
    pub fn events(&self) -> &[NewEvent] {
        &self.events
    }

    /// Whether the transaction has neither operations nor events.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Transaction;
    ///
    /// assert!(Transaction::new().is_empty());
    /// assert!(!Transaction::new().event("a", "b", "Seen", "seen").is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.events.is_empty()
    }

    /// Apply every operation and append every event atomically, fenced by
    /// this tenure's lease.
    ///
    /// # Errors
    ///
    /// [`StoreError::Fenced`]: the lease is gone, stop.
    /// [`StoreError::Conflict`] / [`StoreError::NotFound`]: a precondition
    /// failed, re-read and decide again. [`StoreError::Invalid`]: the
    /// request is malformed (including a value that did not serialize).
    /// [`StoreError::Unavailable`]: unknown outcome, re-read before
    /// retrying. In every error case but `Unavailable`, nothing was written.
    ///
    /// # Example
    ///
    /// ```
    /// use std::collections::HashMap;
    ///
    /// use leasehold_guest::{FakeHost, StoreError, Transaction};
    ///
    /// let host = FakeHost::new();
    /// // JSON object keys must be strings: this value cannot be encoded.
    /// let bad: HashMap<(u8, u8), u8> = HashMap::from([((1, 2), 3)]);
    /// let result = Transaction::new().create("things", "a", &bad).commit();
    /// assert!(matches!(result, Err(StoreError::Invalid(_))));
    /// assert_eq!(host.calls().commit, 0, "nothing was sent to the host");
    /// ```
    pub fn commit(self) -> Result<Committed, StoreError> {
        if let Some(why) = self.refused {
            return Err(StoreError::Invalid(why));
        }
        sys::commit(&self.ops, &self.events).map_err(StoreError::from_wire)
    }
}
