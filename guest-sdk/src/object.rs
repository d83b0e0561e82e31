//! Typed reads: [`Object<T>`] is a stored object whose JSON value was
//! decoded with serde, [`Api<T>`] reads the objects of one kind, and
//! [`Kind`] ties a value type to the kind it is stored under.
//!
//! Owns: decoding wire objects into typed ones (naming the object that
//! does not decode), bounded listing, and the [`Kind`] trait. Must never: read without a bound
//! ([`Api::list_all`] stops at its `max` and at an empty page), or hide a
//! store error behind a decode error.

use std::fmt;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, StoreError};
use crate::limits::MAX_PAGE_SIZE;
use crate::sys::{self, RawObject};

// An object's address is a wire type; it is re-exported here, where the
// author meets it.
pub use crate::sys::ObjectKey;

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
}

impl<T> Object<T> {
    /// The object's address.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Object, ObjectKey};
    ///
    /// let object = Object { kind: "tasks".into(), name: "a".into(), version: 3, value: () };
    /// assert_eq!(object.key(), ObjectKey::new("tasks", "a"));
    /// ```
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(self.kind.clone(), self.name.clone())
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
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.list(after.as_deref(), MAX_PAGE_SIZE)?;
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
/// does not fit.
fn decode<T: DeserializeOwned>(raw: RawObject) -> Result<Object<T>, Error> {
    match serde_json::from_str(&raw.value) {
        Ok(value) => Ok(Object {
            kind: raw.kind,
            name: raw.name,
            version: raw.version,
            value,
        }),
        Err(e) => Err(Error::Decode {
            key: ObjectKey::new(raw.kind, raw.name),
            message: e.to_string(),
        }),
    }
}
