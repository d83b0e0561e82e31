//! [`finalizer`]: hold an object with a finalizer while the controller
//! acts on it, and let it go only once its cleanup is done, in one call
//! (kube-rs's `kube_runtime::finalizer`, with the store's conditional
//! commits).
//!
//! Owns: which of apply, cleanup or nothing an object's finalizer and
//! deletion mark call for, the two commits that add and remove the
//! finalizer (each conditional on the version read, the removal atomic
//! with the cleanup's own writes), and [`FinalizerError`], which tells an
//! apply failure from a cleanup failure from a store failure. Must never:
//! remove the finalizer when cleanup failed, call apply on an object
//! marked for deletion, or turn a fenced error into anything that does
//! not end the reconcile as fenced.

use std::fmt;

use crate::controller::Outcome;
use crate::error::{Error, StoreError};
use crate::object::Object;
use crate::transaction::Transaction;

/// Reconcile `object` under the finalizer `name`: `apply` while it lives,
/// `cleanup` once it is marked for deletion, and the finalizer in between
/// so that the deletion waits for the cleanup.
///
/// - **Not marked, without the finalizer**: add it, in a commit
///   conditional on the version read, then call `apply` with the object as
///   that commit wrote it (its new version, its generation one higher,
///   the finalizer in its metadata), so that `apply`'s own conditional
///   writes build on it.
/// - **Not marked, with the finalizer**: call `apply`.
/// - **Marked for deletion, with the finalizer**: call `cleanup`; only if
///   it succeeds, commit the writes and events of the [`Transaction`] it
///   returns together with the finalizer's removal, conditional on the
///   version read. If that was the object's last finalizer, the commit
///   removes it. `cleanup`'s transaction must not write the object itself
///   (the removal is the commit's operation on it): that is refused as
///   [`FinalizerError::Cleanup`] with [`StoreError::Invalid`], before
///   anything is sent.
/// - **Marked for deletion, without the finalizer**: nothing; another
///   controller's finalizer holds it, or it is going anyway.
///
/// `apply` returns the reconcile's [`Outcome`]; after a cleanup it is
/// [`Outcome::Done`] (the object is gone, or waits for other finalizers).
///
/// Both closures may run again for the same object: after a conflict, a
/// lost reply, or in a successor's tenure. Make them idempotent, and key
/// an external effect by the object's **generation** (see
/// [`crate::http::IdempotencyKey::for_action`]): a deletion mark sets a new
/// generation, and status writes never change it, so every retry of one
/// cleanup, and of one apply of one spec, derives the same key. (A
/// generation starts at 1 again in an object made again under the same
/// name: the key docs say how to tell the two apart.)
///
/// # Errors
///
/// [`FinalizerError::Apply`] or [`FinalizerError::Cleanup`] with what the
/// closure returned (the finalizer is kept when cleanup fails), and
/// [`FinalizerError::AddFinalizer`] / [`FinalizerError::RemoveFinalizer`]
/// with the store's refusal of the commit. `?` in `reconcile` turns each
/// into the [`Error`] inside, so a fenced store or HTTP error still ends
/// the reconcile as fenced, and a conflict reaches [`crate::retry_on_conflict`]
/// and [`crate::Controller::error_policy`] as a conflict.
///
/// # Example
///
/// ```
/// use leasehold_guest::{
///     Api, Error, FakeHost, Metadata, Object, Outcome, Transaction, finalizer,
/// };
/// use serde_json::{Value, json};
///
/// const SLOT: &str = "example.com/slot";
///
/// /// Give each task a status while it lives; record a `Freed` event
/// /// before it goes.
/// fn reconcile(name: &str) -> Result<Outcome, Error> {
///     let Some(task) = Api::<Value>::new("tasks").get(name)? else {
///         return Ok(Outcome::Done);
///     };
///     Ok(finalizer(
///         task,
///         SLOT,
///         |task: &Object| {
///             Transaction::new().update_status(task, &json!({ "seen": true })).commit()?;
///             Ok(Outcome::Done)
///         },
///         |task: &Object| {
///             // Free what the task held (idempotently), then let it go
///             // with an event, in the commit that removes the finalizer.
///             Ok(Transaction::new().event("tasks", task.name.as_str(), "Freed", "slot freed"))
///         },
///     )?)
/// }
///
/// let host = FakeHost::new();
/// host.seed("tasks", "t1", &json!({}));
/// reconcile("t1")?; // adds the finalizer, then applies
/// let task = host.object::<Value>("tasks", "t1").unwrap();
/// assert!(task.has_finalizer(SLOT));
/// assert_eq!(task.status_json, Some(json!({ "seen": true })));
///
/// host.remove("tasks", "t1"); // a user's delete: only marks it
/// reconcile("t1")?; // cleans up, removes the finalizer: gone
/// assert!(host.object::<Value>("tasks", "t1").is_none());
/// assert_eq!(host.events_with_reason("Freed").len(), 1);
/// # Ok::<(), Error>(())
/// ```
pub fn finalizer<T, A, C>(
    object: Object<T>,
    name: &str,
    apply: A,
    cleanup: C,
) -> Result<Outcome, FinalizerError>
where
    A: FnOnce(&Object<T>) -> Result<Outcome, Error>,
    C: FnOnce(&Object<T>) -> Result<Transaction, Error>,
{
    match (object.is_deleting(), object.has_finalizer(name)) {
        (true, false) => Ok(Outcome::Done),
        (true, true) => {
            let cleaned = cleanup(&object).map_err(FinalizerError::Cleanup)?;
            let key = object.key();
            if cleaned.ops().iter().any(|op| *op.key() == key) {
                return Err(FinalizerError::Cleanup(Error::Store(StoreError::Invalid(
                    format!(
                        "the cleanup of {key} writes {key} itself; the commit that removes \
                         its finalizer {name:?} is the one operation on it"
                    ),
                ))));
            }
            cleaned
                .remove_finalizer(&object, name)
                .commit()
                .map_err(FinalizerError::RemoveFinalizer)?;
            Ok(Outcome::Done)
        }
        (false, true) => apply(&object).map_err(FinalizerError::Apply),
        (false, false) => {
            let committed = Transaction::new()
                .add_finalizer(&object, name)
                .commit()
                .map_err(FinalizerError::AddFinalizer)?;
            // The object as that commit wrote it: a metadata change takes
            // the commit's revision as its version and one more generation.
            let mut object = object;
            object.version = committed.revision;
            object.generation += 1;
            object.meta = object.meta.finalizer(name);
            apply(&object).map_err(FinalizerError::Apply)
        }
    }
}

/// Why [`finalizer`] failed: the author's apply, the author's cleanup (the
/// finalizer is kept), or the store refusing the commit that adds or
/// removes the finalizer.
///
/// `?` converts it into the [`Error`] inside (see [`finalizer`]); match on
/// it first to act on which step failed.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, Error, FakeHost, FinalizerError, Metadata, Transaction, finalizer};
/// use serde_json::json;
///
/// let host = FakeHost::new();
/// host.seed_with("tasks", "t1", &json!({}), &Metadata::new().finalizer("example.com/x"));
/// host.remove("tasks", "t1");
/// let task = Api::<serde_json::Value>::new("tasks").get("t1")?.unwrap();
///
/// let result = finalizer(
///     task,
///     "example.com/x",
///     |_| unreachable!("marked for deletion: cleanup, not apply"),
///     |_| Err::<Transaction, _>(Error::failed("the cloud is down")),
/// );
/// assert!(matches!(&result, Err(FinalizerError::Cleanup(Error::Failed { .. }))));
/// assert!(host.object::<serde_json::Value>("tasks", "t1").unwrap().has_finalizer("example.com/x"));
/// let error: Error = result.unwrap_err().into();
/// assert_eq!(error.to_string(), "the cloud is down");
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FinalizerError {
    /// `apply` failed.
    Apply(Error),
    /// `cleanup` failed: the finalizer is kept, and the object with it.
    Cleanup(Error),
    /// The commit adding the finalizer was refused; `apply` did not run.
    AddFinalizer(StoreError),
    /// The commit removing the finalizer (with the cleanup's writes) was
    /// refused: nothing of it was written (unless
    /// [`StoreError::Unavailable`], whose outcome is unknown).
    RemoveFinalizer(StoreError),
}

impl FinalizerError {
    /// The [`Error`] inside: what `apply` or `cleanup` returned, or the
    /// store's refusal.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Error, FinalizerError, StoreError};
    ///
    /// let refused = FinalizerError::AddFinalizer(StoreError::Unavailable("down".into()));
    /// assert!(matches!(refused.into_error(), Error::Store(StoreError::Unavailable(_))));
    /// ```
    pub fn into_error(self) -> Error {
        match self {
            FinalizerError::Apply(error) | FinalizerError::Cleanup(error) => error,
            FinalizerError::AddFinalizer(error) | FinalizerError::RemoveFinalizer(error) => {
                Error::Store(error)
            }
        }
    }

    /// The store error inside, whichever step it came from.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Error, FinalizerError, ObjectKey, StoreError};
    ///
    /// let conflict = StoreError::Conflict(ObjectKey::new("tasks", "a"));
    /// let error = FinalizerError::Apply(Error::Store(conflict.clone()));
    /// assert_eq!(error.store_error(), Some(&conflict));
    /// assert_eq!(FinalizerError::Cleanup(Error::failed("x")).store_error(), None);
    /// ```
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            FinalizerError::Apply(error) | FinalizerError::Cleanup(error) => error.store_error(),
            FinalizerError::AddFinalizer(error) | FinalizerError::RemoveFinalizer(error) => {
                Some(error)
            }
        }
    }

    /// Whether the lease is gone (a fenced store or HTTP error, whichever
    /// step met it): the reconcile must end as fenced.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::HttpError;
    /// use leasehold_guest::{Error, FinalizerError, StoreError};
    ///
    /// assert!(FinalizerError::RemoveFinalizer(StoreError::Fenced("gone".into())).is_fenced());
    /// assert!(FinalizerError::Cleanup(Error::Http(HttpError::Fenced("gone".into()))).is_fenced());
    /// assert!(!FinalizerError::Apply(Error::failed("x")).is_fenced());
    /// ```
    pub fn is_fenced(&self) -> bool {
        match self {
            FinalizerError::Apply(error) | FinalizerError::Cleanup(error) => error.is_fenced(),
            FinalizerError::AddFinalizer(error) | FinalizerError::RemoveFinalizer(error) => {
                error.is_fenced()
            }
        }
    }
}

impl From<FinalizerError> for Error {
    /// [`FinalizerError::into_error`], so `?` works in `reconcile`.
    fn from(error: FinalizerError) -> Self {
        error.into_error()
    }
}

impl fmt::Display for FinalizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinalizerError::Apply(error) => write!(f, "apply failed: {error}"),
            FinalizerError::Cleanup(error) => {
                write!(f, "cleanup failed, the finalizer is kept: {error}")
            }
            FinalizerError::AddFinalizer(error) => {
                write!(f, "adding the finalizer failed: {error}")
            }
            FinalizerError::RemoveFinalizer(error) => {
                write!(f, "removing the finalizer failed: {error}")
            }
        }
    }
}

impl std::error::Error for FinalizerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FinalizerError::Apply(error) | FinalizerError::Cleanup(error) => Some(error),
            FinalizerError::AddFinalizer(error) | FinalizerError::RemoveFinalizer(error) => {
                Some(error)
            }
        }
    }
}
