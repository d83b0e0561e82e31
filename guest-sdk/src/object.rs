//! Typed reads: [`Object<T>`] is a stored object whose JSON value was
//! decoded with serde, [`Api<T>`] reads the objects of one kind, and
//! [`Kind`] ties a value type to the kind it is stored under.
//!
//! Owns: decoding wire objects into typed ones (naming the object that
//! does not decode), bounded listing, and the [`Kind`] trait. Must never: read without a bound
//! ([`Api::list_all`] stops at its `max` and at an empty page), or hide a
//! store error behind a decode error.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, StoreError};
use crate::limits::MAX_PAGE_SIZE;
use crate::sys::{self, RawObject};

// An object's address and its metadata are wire types; they are
// re-exported here, where the author meets them.
pub use crate::sys::{Metadata, ObjectKey, Selector};

/// A value type that is stored under one kind: `Api::<Task>::typed()`
/// reads `T::KIND`, and [`crate::Transaction::create_typed`] and
/// [`crate::Transaction::update_typed`] write a `T` only there, so a task
/// cannot be written into a node by mistake.
///
/// Implement it by hand, one line (there is no derive): `KIND` must be a
/// valid kind (1 to 63 lowercase letters, digits and `-`, starting and
/// ending with a letter or digit), which the host checks on every call.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, FakeHost, Kind, Transaction};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Task {
///     status: String,
/// }
///
/// impl Kind for Task {
///     const KIND: &'static str = "tasks";
/// }
///
/// let host = FakeHost::new();
/// Transaction::new().create_typed("t1", &Task { status: "pending".into() }).commit()?;
/// let task = Api::<Task>::typed().get("t1")?.expect("created");
/// assert_eq!((task.kind.as_str(), task.value.status.as_str()), ("tasks", "pending"));
/// # Ok::<(), leasehold_guest::Error>(())
/// ```
pub trait Kind: Serialize + DeserializeOwned {
    /// The kind objects of this type are stored under, e.g. `tasks`.
    const KIND: &'static str;
}

/// A stored object with its value decoded as `T` (by default, any JSON).
///
/// `version` is the store revision that last wrote the object; pass the
/// object to [`crate::Transaction::update`] or
/// [`crate::Transaction::delete`] to make the write conditional on it.
///
/// Beside its value an object has [`Metadata`] (labels, an owner,
/// finalizers), a status part written by controllers
/// ([`Object::status`], [`crate::Transaction::update_status`]), a
/// `generation` that grows with each change of value or metadata but not
/// with a status write, and a deletion mark ([`Object::is_deleting`]) set
/// when a delete was requested while finalizers remained.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, FakeHost};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Node {
///     capacity: u32,
/// }
///
/// let host = FakeHost::new();
/// let version = host.seed("nodes", "n1", &serde_json::json!({ "capacity": 2 }));
/// let node = Api::<Node>::new("nodes").get("n1")?.expect("seeded");
/// assert_eq!((node.name.as_str(), node.version, node.value.capacity), ("n1", version, 2));
/// # Ok::<(), leasehold_guest::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Object<T = serde_json::Value> {
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The revision of the commit that last wrote it.
    pub version: u64,
    /// The decoded value.
    pub value: T,
    /// Labels, owner and finalizers.
    pub meta: Metadata,
    /// The status part as JSON, `None` until a status write sets it; read
    /// it typed with [`Object::status`].
    pub status_json: Option<serde_json::Value>,
    /// 1 at creation; grows by one with each write that changes the value
    /// or the metadata (a deletion mark included), never with a status
    /// write.
    pub generation: u64,
    /// When a delete was requested while finalizers remained (the store's
    /// clock); `None` unless the object is marked for deletion.
    pub deleting_since: Option<SystemTime>,
}

impl<T> Object<T> {
    /// The object's address.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, ObjectKey};
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "a", &1);
    /// let object = Api::<u32>::new("tasks").get("a")?.unwrap();
    /// assert_eq!(object.key(), ObjectKey::new("tasks", "a"));
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(self.kind.clone(), self.name.clone())
    }

    /// The object's labels, by key.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Metadata};
    ///
    /// let host = FakeHost::new();
    /// host.seed_with("tasks", "a", &1, &Metadata::new().label("team", "db"));
    /// let task = Api::<u32>::new("tasks").get("a")?.unwrap();
    /// assert_eq!(task.labels()["team"], "db");
    /// assert_eq!(task.label("team"), Some("db"));
    /// assert_eq!(task.label("zone"), None);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.meta.labels
    }

    /// The value of the label `key`, if set.
    ///
    /// # Example
    ///
    /// See [`Object::labels`].
    pub fn label(&self, key: &str) -> Option<&str> {
        self.meta.labels.get(key).map(String::as_str)
    }

    /// The object that owns this one, if any.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Metadata, ObjectKey};
    ///
    /// let host = FakeHost::new();
    /// host.seed("projects", "p1", &1);
    /// host.seed_with("tasks", "a", &1, &Metadata::new().owner(ObjectKey::new("projects", "p1")));
    /// let task = Api::<u32>::new("tasks").get("a")?.unwrap();
    /// assert_eq!(task.owner(), Some(&ObjectKey::new("projects", "p1")));
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn owner(&self) -> Option<&ObjectKey> {
        self.meta.owner.as_ref()
    }

    /// The object's finalizers, in the order written.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Metadata};
    ///
    /// let host = FakeHost::new();
    /// host.seed_with("tasks", "a", &1, &Metadata::new().finalizer("example.com/slot"));
    /// let task = Api::<u32>::new("tasks").get("a")?.unwrap();
    /// assert_eq!(task.finalizers(), ["example.com/slot"]);
    /// assert!(task.has_finalizer("example.com/slot"));
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn finalizers(&self) -> &[String] {
        &self.meta.finalizers
    }

    /// Whether the finalizer `name` is on the object.
    ///
    /// # Example
    ///
    /// See [`Object::finalizers`].
    pub fn has_finalizer(&self, name: &str) -> bool {
        self.meta.finalizers.iter().any(|f| f == name)
    }

    /// Whether a delete was requested while finalizers remained: the object
    /// is on its way out, and goes once its last finalizer is removed.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Metadata};
    ///
    /// let host = FakeHost::new();
    /// host.seed_with("tasks", "a", &1, &Metadata::new().finalizer("example.com/slot"));
    /// host.remove("tasks", "a"); // a user's delete: the finalizer holds it
    /// let task = Api::<u32>::new("tasks").get("a")?.expect("still there");
    /// assert!(task.is_deleting());
    /// assert_eq!(task.deleting_since, Some(host.now()));
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn is_deleting(&self) -> bool {
        self.deleting_since.is_some()
    }

    /// The object's generation: 1 at creation, one more with each change
    /// of its value or metadata, unchanged by status writes.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "a", &1);
    /// host.seed("tasks", "a", &2);
    /// assert_eq!(Api::<u32>::new("tasks").get("a")?.unwrap().generation(), 2);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The status part decoded as `S`; `None` if no status was written.
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] naming the object if the status does not decode as
    /// `S`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Transaction};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Debug, PartialEq)]
    /// struct TaskStatus {
    ///     phase: String,
    /// }
    ///
    /// let host = FakeHost::new();
    /// host.seed("tasks", "a", &1);
    /// let tasks = Api::<u32>::new("tasks");
    /// let task = tasks.get("a")?.unwrap();
    /// assert_eq!(task.status::<TaskStatus>()?, None);
    /// Transaction::new().update_status(&task, &TaskStatus { phase: "running".into() }).commit()?;
    /// let task = tasks.get("a")?.unwrap();
    /// assert_eq!(task.status::<TaskStatus>()?.unwrap().phase, "running");
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn status<S: DeserializeOwned>(&self) -> Result<Option<S>, Error> {
        self.status_json
            .as_ref()
            .map(|status| {
                S::deserialize(status).map_err(|e| Error::Decode {
                    key: self.key(),
                    message: format!("its status: {e}"),
                })
            })
            .transpose()
    }
}

impl Object<serde_json::Value> {
    /// Decode an untyped object as `U`. Useful when a listing may contain
    /// malformed objects that should be skipped rather than fail the whole
    /// read.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost};
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize)]
    /// struct Node {
    ///     capacity: u32,
    /// }
    ///
    /// let host = FakeHost::new();
    /// host.seed("nodes", "good", &serde_json::json!({ "capacity": 2 }));
    /// host.seed("nodes", "bad", &serde_json::json!("not a node"));
    /// let page = Api::<serde_json::Value>::new("nodes").list(None, 10)?;
    /// let nodes: Vec<_> = page.objects.iter().filter_map(|o| o.decode::<Node>().ok()).collect();
    /// assert_eq!(nodes.len(), 1);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn decode<U: DeserializeOwned>(&self) -> Result<Object<U>, Error> {
        let value = U::deserialize(&self.value).map_err(|e| Error::Decode {
            key: self.key(),
            message: e.to_string(),
        })?;
        Ok(Object {
            kind: self.kind.clone(),
            name: self.name.clone(),
            version: self.version,
            value,
            meta: self.meta.clone(),
            status_json: self.status_json.clone(),
            generation: self.generation,
            deleting_since: self.deleting_since,
        })
    }
}

/// One page of a listing, in name order.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, FakeHost};
///
/// let host = FakeHost::new();
/// for name in ["a", "b", "c"] {
///     host.seed("tasks", name, &serde_json::json!({}));
/// }
/// let tasks = Api::<serde_json::Value>::new("tasks");
/// let first = tasks.list(None, 2)?;
/// assert_eq!(first.objects.len(), 2);
/// let rest = tasks.list(first.next.as_deref(), 2)?;
/// assert_eq!(rest.objects[0].name, "c");
/// # Ok::<(), leasehold_guest::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T = serde_json::Value> {
    /// The objects, in name order.
    pub objects: Vec<Object<T>>,
    /// The name to pass as `after` for the next page; `None` at the end.
    /// A page may be followed by an empty one.
    pub next: Option<String>,
}

/// Typed reads of one kind, like kube-rs's `Api<K>`.
///
/// Reads are not fenced (a deposed leader may still read), but every
/// result carries the version a later conditional write is checked
/// against.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, FakeHost};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Task {
///     status: String,
/// }
///
/// let host = FakeHost::new();
/// host.seed("tasks", "t1", &serde_json::json!({ "status": "pending" }));
/// let tasks = Api::<Task>::new("tasks");
/// assert_eq!(tasks.get("t1")?.map(|t| t.value.status).as_deref(), Some("pending"));
/// assert!(tasks.get("t2")?.is_none());
/// # Ok::<(), leasehold_guest::Error>(())
/// ```
pub struct Api<T> {
    kind: String,
    // `fn() -> T`: an `Api<T>` produces `T`s but owns none, so it is Send,
    // Sync and Clone whatever `T` is.
    decoded: PhantomData<fn() -> T>,
}

impl<T> Clone for Api<T> {
    fn clone(&self) -> Self {
        Self {
            kind: self.kind.clone(),
            decoded: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Api<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api").field("kind", &self.kind).finish()
    }
}

impl<T: DeserializeOwned> Api<T> {
    /// Reads of `kind`. The host checks the kind's syntax on each call.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Api;
    ///
    /// let nodes = Api::<serde_json::Value>::new("nodes");
    /// assert_eq!(nodes.kind(), "nodes");
    /// ```
    pub fn new(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            decoded: PhantomData,
        }
    }

    /// The kind this reads.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Api;
    ///
    /// assert_eq!(Api::<u32>::new("counters").kind(), "counters");
    /// ```
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Read the object `name`; `None` if it does not exist.
    ///
    /// Never older than the newest change of the object the host has woken
    /// this controller for, nor than a version this instance read or
    /// wrote; when that newest change is this tenure's own commit the host
    /// may answer from what the commit wrote, without a database read (see
    /// "How fresh a read is" in the guide).
    ///
    /// # Errors
    ///
    /// [`Error::Store`] if the host refuses the call (including
    /// [`crate::StoreError::Fenced`] once the tenure is over),
    /// [`Error::Decode`] if the value does not decode as `T`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// host.seed("counters", "hits", &7);
    /// let hits = Api::<u32>::new("counters").get("hits")?.expect("seeded");
    /// assert_eq!(hits.value, 7);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn get(&self, name: &str) -> Result<Option<Object<T>>, Error> {
        match sys::get(&self.kind, name).map_err(StoreError::from_wire)? {
            None => Ok(None),
            Some(raw) => decode(raw).map(Some),
        }
    }

    /// List up to `limit` objects in name order, starting after the name
    /// `after` (exclusive). The host caps `limit` at its page size
    /// ([`crate::MAX_PAGE_SIZE`] by default).
    ///
    /// # Errors
    ///
    /// As [`Api::get`]; one object that does not decode fails the page
    /// (list `Api<serde_json::Value>` and [`Object::decode`] each to skip
    /// malformed objects instead).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// host.seed("counters", "a", &1);
    /// host.seed("counters", "b", &2);
    /// let page = Api::<u32>::new("counters").list(Some("a"), 10)?;
    /// assert_eq!(page.objects.iter().map(|o| o.value).collect::<Vec<_>>(), [2]);
    /// assert_eq!(page.next, None);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn list(&self, after: Option<&str>, limit: u32) -> Result<Page<T>, Error> {
        let page = sys::list(&self.kind, after, limit).map_err(StoreError::from_wire)?;
        let objects = page
            .objects
            .into_iter()
            .map(decode)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Page {
            objects,
            next: page.next,
        })
    }

    /// List every object of the kind, page by page, failing with
    /// [`Error::TooMany`] beyond `max` objects so one reconcile's memory and
    /// time stay bounded.
    ///
    /// The pages are separate reads, not one snapshot: an object written
    /// meanwhile may be seen old or new. Conditional writes on the versions
    /// read are what keeps decisions made on such a listing safe.
    ///
    /// # Errors
    ///
    /// As [`Api::list`], and [`Error::TooMany`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, Error, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
    ///     host.seed("counters", name, &i);
    /// }
    /// let counters = Api::<u32>::new("counters");
    /// assert_eq!(counters.list_all(10)?.len(), 3);
    /// assert!(matches!(counters.list_all(2), Err(Error::TooMany { max: 2, .. })));
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn list_all(&self, max: usize) -> Result<Vec<Object<T>>, Error> {
        self.collect_pages(max, |after| self.list(after, MAX_PAGE_SIZE))
    }

    /// List up to `limit` objects that `selector` selects (labels and JSON
    /// containment in the value, see [`Selector`]), in name order, starting
    /// after the name `after` (exclusive). Pass the page's `next` as
    /// `after` with the same selector for the next page. The host serves it
    /// from indexes instead of reading the whole kind.
    ///
    /// # Errors
    ///
    /// As [`Api::list`]; a selector over the host's bounds (see
    /// [`Selector`]) is [`crate::StoreError::Invalid`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Metadata, Selector};
    /// use serde_json::{Value, json};
    ///
    /// let host = FakeHost::new();
    /// let team = Metadata::new().label("team", "db");
    /// host.seed_with("tasks", "a", &json!({ "status": "pending" }), &team);
    /// host.seed_with("tasks", "b", &json!({ "status": "done" }), &team);
    /// host.seed("tasks", "c", &json!({ "status": "pending" }));
    ///
    /// let pending = Selector::new().label("team", "db").contains(json!({ "status": "pending" }));
    /// let page = Api::<Value>::new("tasks").list_selected(&pending, None, 10)?;
    /// let names: Vec<_> = page.objects.iter().map(|o| o.name.as_str()).collect();
    /// assert_eq!(names, ["a"]);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn list_selected(
        &self,
        selector: &Selector,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Page<T>, Error> {
        let page = sys::list_selected(&self.kind, selector, after, limit)
            .map_err(StoreError::from_wire)?;
        let objects = page
            .objects
            .into_iter()
            .map(decode)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Page {
            objects,
            next: page.next,
        })
    }

    /// Every object `selector` selects, page by page, failing with
    /// [`Error::TooMany`] beyond `max` objects (as [`Api::list_all`]).
    ///
    /// # Errors
    ///
    /// As [`Api::list_selected`], and [`Error::TooMany`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Selector};
    /// use serde_json::json;
    ///
    /// let host = FakeHost::new();
    /// for i in 0..5 {
    ///     host.seed("tasks", &format!("t{i}"), &json!({ "even": i % 2 == 0 }));
    /// }
    /// let even = Selector::new().contains(json!({ "even": true }));
    /// assert_eq!(Api::<serde_json::Value>::new("tasks").list_all_selected(&even, 10)?.len(), 3);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn list_all_selected(
        &self,
        selector: &Selector,
        max: usize,
    ) -> Result<Vec<Object<T>>, Error> {
        self.collect_pages(max, |after| {
            self.list_selected(selector, after, MAX_PAGE_SIZE)
        })
    }

    /// Read pages from `page` until the end, failing beyond `max` objects.
    fn collect_pages(
        &self,
        max: usize,
        page: impl Fn(Option<&str>) -> Result<Page<T>, Error>,
    ) -> Result<Vec<Object<T>>, Error> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = page(after.as_deref())?;
            let empty = page.objects.is_empty();
            all.extend(page.objects);
            if all.len() > max {
                return Err(Error::TooMany {
                    kind: self.kind.clone(),
                    max,
                });
            }
            // An empty page ends the listing even if a cursor came with it,
            // so a misbehaving cursor cannot loop forever.
            match page.next {
                Some(next) if !empty => after = Some(next),
                _ => return Ok(all),
            }
        }
    }
}

impl<T: Kind> Api<T> {
    /// Reads of `T`'s kind, [`Kind::KIND`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost, Kind};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Node {
    ///     capacity: u32,
    /// }
    /// impl Kind for Node {
    ///     const KIND: &'static str = "nodes";
    /// }
    ///
    /// let host = FakeHost::new();
    /// host.seed("nodes", "n1", &serde_json::json!({ "capacity": 4 }));
    /// let nodes = Api::<Node>::typed();
    /// assert_eq!(nodes.kind(), "nodes");
    /// assert_eq!(nodes.get("n1")?.unwrap().value.capacity, 4);
    /// # Ok::<(), leasehold_guest::Error>(())
    /// ```
    pub fn typed() -> Self {
        Self::new(T::KIND)
    }
}

impl<T: Kind> Default for Api<T> {
    /// The same as [`Api::typed`].
    fn default() -> Self {
        Self::typed()
    }
}

/// Decode an object from the wire as `T`, naming the object if its value
/// (or its status, which must be JSON) does not fit.
pub(crate) fn decode<T: DeserializeOwned>(raw: RawObject) -> Result<Object<T>, Error> {
    let key = || ObjectKey::new(raw.kind.clone(), raw.name.clone());
    let value = serde_json::from_str(&raw.value).map_err(|e| Error::Decode {
        key: key(),
        message: e.to_string(),
    })?;
    let status_json = raw
        .status
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| Error::Decode {
            key: key(),
            message: format!("its status is not JSON: {e}"),
        })?;
    Ok(Object {
        kind: raw.kind,
        name: raw.name,
        version: raw.version,
        value,
        meta: raw.meta,
        status_json,
        generation: raw.generation,
        deleting_since: raw
            .deleting_since_ms
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
    })
}
