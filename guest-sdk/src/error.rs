//! The two error types an author meets: [`StoreError`], what the host says
//! about a store call, and [`Error`], what `reconcile` returns.

use std::fmt;
use std::time::Duration;

use crate::object::ObjectKey;

/// Why a store call failed, as the host reports it.
///
/// Match on it to decide what to do next: [`StoreError::Fenced`] means stop
/// (this guest is no longer the leader; return the error),
/// [`StoreError::Conflict`] means re-read and decide again,
/// [`StoreError::Unavailable`] means try again later and re-read first
/// (a commit's outcome is unknown).
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, StoreError, Transaction};
///
/// let host = FakeHost::new();
/// host.seed("tasks", "a", &serde_json::json!({}));
/// // Creating an object that exists is a conflict: nothing was written.
/// match Transaction::new().create("tasks", "a", &1).commit() {
///     Err(StoreError::Conflict(key)) => assert_eq!(key.to_string(), "tasks/a"),
///     other => panic!("expected a conflict, got {other:?}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The lease this guest runs under is no longer current. Nothing was
    /// written. Stop and return the error: the host is tearing the guest
    /// down.
    Fenced(String),
    /// A version precondition failed (the object exists on create, or its
    /// version differs on update or delete). Nothing was written. Re-read
    /// and decide again.
    Conflict(ObjectKey),
    /// The object named in an update or delete does not exist. Nothing was
    /// written.
    NotFound(ObjectKey),
    /// The request itself is wrong: a bad kind or name, a value that is not
    /// JSON, too many operations, a payload over a size limit. Retrying the
    /// same request will fail the same way.
    Invalid(String),
    /// The backend could not be reached or failed. Whether a commit that
    /// returned this was applied is unknown: re-read before trying again.
    Unavailable(String),
}

impl StoreError {
    /// Whether this is [`StoreError::Fenced`]: the guest must stop.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::StoreError;
    ///
    /// assert!(StoreError::Fenced("epoch 3 superseded".into()).is_fenced());
    /// assert!(!StoreError::Unavailable("down".into()).is_fenced());
    /// ```
    pub fn is_fenced(&self) -> bool {
        matches!(self, StoreError::Fenced(_))
    }

    /// Whether this is [`StoreError::Conflict`]: re-read and retry.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{ObjectKey, StoreError};
    ///
    /// assert!(StoreError::Conflict(ObjectKey::new("tasks", "a")).is_conflict());
    /// ```
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict(_))
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Fenced(why) => write!(f, "no longer the leader, stopping: {why}"),
            StoreError::Conflict(key) => write!(
                f,
                "conflict on {key}: it changed since it was read; re-read and retry"
            ),
            StoreError::NotFound(key) => write!(f, "{key} does not exist"),
            StoreError::Invalid(why) => write!(f, "invalid store request: {why}"),
            StoreError::Unavailable(why) => write!(
                f,
                "store unavailable: {why}; re-read before retrying, a commit may have been applied"
            ),
        }
    }
}

impl std::error::Error for StoreError {}

/// What [`crate::Controller::reconcile`] returns when it fails.
///
/// Store failures convert into it with `?`. The export glue turns an error
/// wrapping [`StoreError::Fenced`] into the WIT `fenced` reply (the guest
/// stops); every other error is reported as failed, retried after the delay
/// [`crate::Controller::error_policy`] chooses.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use leasehold_guest::{Error, StoreError};
///
/// fn check(ready: bool) -> Result<(), Error> {
///     if !ready {
///         return Err(Error::retry_after("dependency not ready", Duration::from_secs(5)));
///     }
///     Ok(())
/// }
///
/// assert_eq!(check(false).unwrap_err().retry_hint(), Some(Duration::from_secs(5)));
/// let fenced: Error = StoreError::Fenced("superseded".into()).into();
/// assert!(fenced.is_fenced());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A store call failed.
    Store(StoreError),
    /// A stored value did not match the type it was read as.
    Decode {
        /// The object whose value did not decode.
        key: ObjectKey,
        /// What serde said.
        message: String,
    },
    /// A bounded listing ([`crate::Api::list_all`]) found more objects than
    /// its bound.
    TooMany {
        /// The kind listed.
        kind: String,
        /// The bound that was exceeded.
        max: usize,
    },
    /// The controller's own failure, with an optional retry delay.
    Failed {
        /// What went wrong, for the host's log.
        message: String,
        /// When to retry; `None` lets the host back off exponentially.
        retry_after: Option<Duration>,
    },
}

impl Error {
    /// A failure of the controller's own, retried with the host's backoff.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Error;
    ///
    /// let error = Error::failed("replicas must be positive");
    /// assert_eq!(error.to_string(), "replicas must be positive");
    /// assert_eq!(error.retry_hint(), None);
    /// ```
    pub fn failed(message: impl Into<String>) -> Self {
        Error::Failed {
            message: message.into(),
            retry_after: None,
        }
    }

    /// A failure of the controller's own, to be retried after `delay`.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use leasehold_guest::Error;
    ///
    /// let error = Error::retry_after("waiting for node", Duration::from_secs(2));
    /// assert_eq!(error.retry_hint(), Some(Duration::from_secs(2)));
    /// ```
    pub fn retry_after(message: impl Into<String>, delay: Duration) -> Self {
        Error::Failed {
            message: message.into(),
            retry_after: Some(delay),
        }
    }

    /// The store error inside, if this is one.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Error, ObjectKey, StoreError};
    ///
    /// let error = Error::from(StoreError::Conflict(ObjectKey::new("tasks", "a")));
    /// assert!(error.store_error().is_some_and(StoreError::is_conflict));
    /// assert!(Error::failed("x").store_error().is_none());
    /// ```
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            Error::Store(error) => Some(error),
            _ => None,
        }
    }

    /// Whether this wraps [`StoreError::Fenced`]: the guest must stop.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Error, StoreError};
    ///
    /// assert!(Error::from(StoreError::Fenced("superseded".into())).is_fenced());
    /// assert!(!Error::failed("x").is_fenced());
    /// ```
    pub fn is_fenced(&self) -> bool {
        self.store_error().is_some_and(StoreError::is_fenced)
    }

    /// The retry delay carried by [`Error::Failed`], if any. The default
    /// [`crate::Controller::error_policy`] uses it.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use leasehold_guest::Error;
    ///
    /// assert_eq!(Error::retry_after("x", Duration::from_millis(10)).retry_hint(), Some(Duration::from_millis(10)));
    /// assert_eq!(Error::failed("x").retry_hint(), None);
    /// ```
    pub fn retry_hint(&self) -> Option<Duration> {
        match self {
            Error::Failed { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl From<StoreError> for Error {
    /// Wrap a store error, so `?` works on store calls inside `reconcile`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Error, StoreError};
    ///
    /// let error: Error = StoreError::Unavailable("down".into()).into();
    /// assert!(matches!(error, Error::Store(StoreError::Unavailable(_))));
    /// ```
    fn from(error: StoreError) -> Self {
        Error::Store(error)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Store(error) => error.fmt(f),
            Error::Decode { key, message } => {
                write!(f, "{key} does not have the expected shape: {message}")
            }
            Error::TooMany { kind, max } => write!(
                f,
                "more than {max} objects of kind {kind}; page through them with Api::list instead"
            ),
            Error::Failed { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Store(error) => Some(error),
            _ => None,
        }
    }
}
