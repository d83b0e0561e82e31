//! The two error types an author meets: [`StoreError`], what the host says
//! about a store call, and [`Error`], what `reconcile` returns (wrapping a
//! store error, an outbound request's [`HttpError`], or the controller's
//! own failure); and [`QuotaExceeded`], the refusal of a write quota, which
//! the SDK derives from the host's message.
//!
//! Owns: the one conversion of a wire error into a [`StoreError`] (both
//! the wasm imports and the native fake come through it), the parsing of
//! the host's quota message, and which errors end a reconcile as fenced
//! ([`Error::is_fenced`]). Must never: turn a fenced error into anything
//! else, or report a failure as fenced that the host did not.

use std::fmt;
use std::time::Duration;

use crate::http::HttpError;
use crate::sys::{ObjectKey, WireError};

/// Why a store call failed, as the host reports it.
///
/// Match on it to decide what to do next: [`StoreError::Fenced`] means stop
/// (this guest is no longer the leader; return the error),
/// [`StoreError::Conflict`] means re-read and decide again,
/// [`StoreError::Unavailable`] means try again later and re-read first
/// (a commit's outcome is unknown), [`StoreError::QuotaExceeded`] means
/// this controller is writing too much: slow down.
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
    /// A write quota of this controller (`max_creates_per_second` with
    /// `create_burst`, or `max_objects_per_kind`, set per controller in
    /// the host's config) refused the commit. Nothing was written. For the
    /// rate, retry after [`QuotaExceeded::retry_after`]; for the cap on
    /// objects, delete some first. The default
    /// [`crate::Controller::error_policy`] waits `retry_after` when given.
    ///
    /// The host reports it as an `invalid` store error whose message starts
    /// with [`QUOTA_EXCEEDED_PREFIX`] (the WIT contract is unchanged); the
    /// SDK recognizes that message and returns this instead.
    QuotaExceeded(QuotaExceeded),
}

/// The start of the host's message for a commit refused by a write quota.
/// Stable: the SDK derives [`StoreError::QuotaExceeded`] from it.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::QUOTA_EXCEEDED_PREFIX, "quota exceeded: ");
/// ```
pub const QUOTA_EXCEEDED_PREFIX: &str = "quota exceeded: ";

/// Which write quota refused a commit.
///
/// # Example
///
/// ```
/// use leasehold_guest::Quota;
///
/// assert_eq!(Quota::CreatesPerSecond.key(), "max_creates_per_second");
/// assert_eq!(Quota::from_key("max_objects_per_kind"), Some(Quota::ObjectsPerKind));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Quota {
    /// The rate of creates: `max_creates_per_second`, with `create_burst`
    /// creates allowed at once.
    CreatesPerSecond,
    /// The cap on objects of one kind: `max_objects_per_kind`.
    ObjectsPerKind,
}

impl Quota {
    /// Its config key, as the host names it in refusals and metrics.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(leasehold_guest::Quota::ObjectsPerKind.key(), "max_objects_per_kind");
    /// ```
    pub fn key(self) -> &'static str {
        match self {
            Quota::CreatesPerSecond => "max_creates_per_second",
            Quota::ObjectsPerKind => "max_objects_per_kind",
        }
    }

    /// The quota named by a config key, if this SDK knows it.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Quota;
    ///
    /// assert_eq!(Quota::from_key("max_creates_per_second"), Some(Quota::CreatesPerSecond));
    /// assert_eq!(Quota::from_key("max_bytes"), None);
    /// ```
    pub fn from_key(key: &str) -> Option<Quota> {
        match key {
            "max_creates_per_second" => Some(Quota::CreatesPerSecond),
            "max_objects_per_kind" => Some(Quota::ObjectsPerKind),
            _ => None,
        }
    }
}

/// A commit refused by a write quota, as derived from the host's message:
///
/// ```text
/// quota exceeded: controller=NAME quota=KEY limit=N [retry_after_ms=MS] [kind=KIND]: DETAIL
/// ```
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use leasehold_guest::{Quota, QuotaExceeded, StoreError};
///
/// let message = "quota exceeded: controller=flood quota=max_creates_per_second limit=20 \
///                retry_after_ms=50: controller \"flood\" may create 20 objects per second";
/// let refusal = QuotaExceeded::parse(message).unwrap();
/// assert_eq!(refusal.quota, Quota::CreatesPerSecond);
/// assert_eq!(refusal.limit, 20);
/// assert_eq!(refusal.retry_after, Some(Duration::from_millis(50)));
/// // What the SDK's store calls return for it:
/// assert!(matches!(
///     StoreError::from_invalid(message.to_string()),
///     StoreError::QuotaExceeded(q) if q.controller == "flood"
/// ));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaExceeded {
    /// The controller whose quota it is.
    pub controller: String,
    /// Which quota.
    pub quota: Quota,
    /// The configured limit: creates per second, or objects per kind.
    pub limit: u64,
    /// For the rate: how long until the commit's creates are earned again.
    pub retry_after: Option<std::time::Duration>,
    /// For the cap on objects: the kind that is full.
    pub kind: Option<String>,
    /// The host's whole message, for logs.
    pub message: String,
}

impl QuotaExceeded {
    /// Read a quota refusal from the host's message; `None` if `message`
    /// is not one (or names a quota this SDK does not know).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Quota, QuotaExceeded};
    ///
    /// let refusal = QuotaExceeded::parse(
    ///     "quota exceeded: controller=flood quota=max_objects_per_kind limit=30 kind=marks: full",
    /// )
    /// .unwrap();
    /// assert_eq!((refusal.quota, refusal.limit), (Quota::ObjectsPerKind, 30));
    /// assert_eq!(refusal.kind.as_deref(), Some("marks"));
    /// assert!(QuotaExceeded::parse("invalid name \"A\"").is_none());
    /// ```
    pub fn parse(message: &str) -> Option<QuotaExceeded> {
        let rest = message.strip_prefix(QUOTA_EXCEEDED_PREFIX)?;
        let (header, _) = rest.split_once(": ")?;
        let (mut controller, mut quota, mut limit, mut retry_after, mut kind) =
            (None, None, None, None, None);
        for field in header.split(' ') {
            let (key, value) = field.split_once('=')?;
            match key {
                "controller" => controller = Some(value.to_string()),
                "quota" => quota = Some(Quota::from_key(value)?),
                "limit" => limit = Some(value.parse().ok()?),
                "retry_after_ms" => {
                    retry_after = Some(std::time::Duration::from_millis(value.parse().ok()?));
                }
                "kind" => kind = Some(value.to_string()),
                // Fields a newer host adds are skipped.
                _ => {}
            }
        }
        Some(QuotaExceeded {
            controller: controller?,
            quota: quota?,
            limit: limit?,
            retry_after,
            kind,
            message: message.to_string(),
        })
    }
}

impl StoreError {
    /// What the host's `invalid` error becomes: [`StoreError::QuotaExceeded`]
    /// when its message is a quota refusal, [`StoreError::Invalid`]
    /// otherwise.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::StoreError;
    ///
    /// let quota = StoreError::from_invalid(
    ///     "quota exceeded: controller=c quota=max_objects_per_kind limit=3 kind=k: full".into(),
    /// );
    /// assert!(quota.is_quota_exceeded());
    /// let other = StoreError::from_invalid("value is not JSON".into());
    /// assert_eq!(other, StoreError::Invalid("value is not JSON".into()));
    /// ```
    pub fn from_invalid(message: String) -> StoreError {
        match QuotaExceeded::parse(&message) {
            Some(refusal) => StoreError::QuotaExceeded(refusal),
            None => StoreError::Invalid(message),
        }
    }

    /// What a store call's wire error means to the author: the same
    /// variants, with an `invalid` quota refusal typed (see
    /// [`StoreError::from_invalid`]). Both the wasm imports and the native
    /// fake come through here.
    pub(crate) fn from_wire(error: WireError) -> StoreError {
        match error {
            WireError::Fenced(why) => StoreError::Fenced(why),
            WireError::Conflict(key) => StoreError::Conflict(key),
            WireError::NotFound(key) => StoreError::NotFound(key),
            WireError::Invalid(why) => StoreError::from_invalid(why),
            WireError::Unavailable(why) => StoreError::Unavailable(why),
        }
    }

    /// Whether this is [`StoreError::QuotaExceeded`]: write less.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::StoreError;
    ///
    /// assert!(!StoreError::Invalid("bad".into()).is_quota_exceeded());
    /// ```
    pub fn is_quota_exceeded(&self) -> bool {
        matches!(self, StoreError::QuotaExceeded(_))
    }

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
            StoreError::QuotaExceeded(refusal) => f.write_str(&refusal.message),
        }
    }
}

impl std::error::Error for StoreError {}

/// What [`crate::Controller::reconcile`] returns when it fails.
///
/// Store failures and outbound requests' failures convert into it with
/// `?`. The export glue turns an error wrapping [`StoreError::Fenced`] or
/// [`HttpError::Fenced`] into the WIT `fenced` reply (the guest stops);
/// every other error is reported as failed, retried after the delay
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
    /// An outbound HTTP request failed. [`HttpError::Fenced`] ends the
    /// reconcile as fenced, like [`StoreError::Fenced`]; the others are
    /// failures, retried with the host's backoff by default.
    Http(HttpError),
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
    /// The controller's settings ([`crate::settings`]) did not decode as
    /// the type asked for. Neither the key nor the message ever quotes a
    /// settings value.
    Settings {
        /// The key it failed on, as a path from the top of the settings:
        /// `region`, `db.port`, `exempt[2]` (a missing key, an unknown one
        /// refused by `deny_unknown_fields`, or one whose value has the
        /// wrong type); `None` when the settings as a whole did not fit.
        key: Option<String>,
        /// What was wrong, by type ("invalid type: a string, expected
        /// u32", "missing"), never by value.
        message: String,
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

    /// The outbound request's error inside, if this is one.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Error;
    /// use leasehold_guest::http::HttpError;
    ///
    /// let error = Error::from(HttpError::Timeout("slow".into()));
    /// assert!(matches!(error.http_error(), Some(HttpError::Timeout(_))));
    /// assert!(Error::failed("x").http_error().is_none());
    /// ```
    pub fn http_error(&self) -> Option<&HttpError> {
        match self {
            Error::Http(error) => Some(error),
            _ => None,
        }
    }

    /// Whether this wraps [`StoreError::Fenced`] or [`HttpError::Fenced`]:
    /// the guest must stop.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::HttpError;
    /// use leasehold_guest::{Error, StoreError};
    ///
    /// assert!(Error::from(StoreError::Fenced("superseded".into())).is_fenced());
    /// assert!(Error::from(HttpError::Fenced("lease lost".into())).is_fenced());
    /// assert!(!Error::from(HttpError::Timeout("slow".into())).is_fenced());
    /// assert!(!Error::failed("x").is_fenced());
    /// ```
    pub fn is_fenced(&self) -> bool {
        match self {
            Error::Store(error) => error.is_fenced(),
            Error::Http(error) => error.is_fenced(),
            _ => false,
        }
    }

    /// The retry delay carried by [`Error::Failed`], or by a
    /// [`StoreError::QuotaExceeded`] of the create rate, if any. The default
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
            Error::Store(StoreError::QuotaExceeded(refusal)) => refusal.retry_after,
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

impl From<HttpError> for Error {
    /// Wrap an outbound request's error, so `?` works on
    /// [`crate::http::Request::send`] inside `reconcile`: a fenced one
    /// ends the reconcile as fenced, the others as failures.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Error;
    /// use leasehold_guest::http::HttpError;
    ///
    /// let error: Error = HttpError::Connection("refused".into()).into();
    /// assert!(matches!(error, Error::Http(HttpError::Connection(_))));
    /// assert_eq!(error.retry_hint(), None);
    /// ```
    fn from(error: HttpError) -> Self {
        Error::Http(error)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Store(error) => error.fmt(f),
            Error::Http(error) => error.fmt(f),
            Error::Decode { key, message } => {
                write!(f, "{key} does not have the expected shape: {message}")
            }
            Error::TooMany { kind, max } => write!(
                f,
                "more than {max} objects of kind {kind}; page through them with Api::list instead"
            ),
            Error::Settings {
                key: Some(key),
                message,
            } => write!(
                f,
                "the controller's settings do not have the expected shape: key `{key}`: {message}"
            ),
            Error::Settings { key: None, message } => write!(
                f,
                "the controller's settings do not have the expected shape: {message}"
            ),
            Error::Failed { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Store(error) => Some(error),
            Error::Http(error) => Some(error),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The host's own message (see `host/src/quota.rs`), verbatim.
    const RATE: &str = "quota exceeded: controller=flood quota=max_creates_per_second limit=20 \
                        retry_after_ms=50: controller \"flood\" may create 20 objects per second \
                        (create_burst 40) and has spent them; this commit creates 1; retry later; \
                        nothing was written";
    const CAP: &str = "quota exceeded: controller=flood quota=max_objects_per_kind limit=30 \
                       kind=marks: kind \"marks\" holds 30 objects and this commit creates 1 more";

    #[test]
    fn the_hosts_refusals_become_typed_errors() {
        let StoreError::QuotaExceeded(rate) = StoreError::from_invalid(RATE.into()) else {
            panic!("not derived")
        };
        assert_eq!(
            rate,
            QuotaExceeded {
                controller: "flood".into(),
                quota: Quota::CreatesPerSecond,
                limit: 20,
                retry_after: Some(Duration::from_millis(50)),
                kind: None,
                message: RATE.into(),
            }
        );
        let StoreError::QuotaExceeded(cap) = StoreError::from_invalid(CAP.into()) else {
            panic!("not derived")
        };
        assert_eq!(cap.quota, Quota::ObjectsPerKind);
        assert_eq!(cap.kind.as_deref(), Some("marks"));
        assert_eq!(cap.retry_after, None);
        // Shown as the host said it.
        assert_eq!(StoreError::QuotaExceeded(cap).to_string(), CAP);
    }

    #[test]
    fn the_rate_refusal_sets_the_retry_hint() {
        let error = Error::from(StoreError::from_invalid(RATE.into()));
        assert_eq!(error.retry_hint(), Some(Duration::from_millis(50)));
        let error = Error::from(StoreError::from_invalid(CAP.into()));
        assert_eq!(error.retry_hint(), None);
    }

    #[test]
    fn other_invalid_messages_stay_invalid() {
        for message in [
            "kind \"A\" is not a DNS label",
            "quota exceeded: but not in the host's shape",
            "quota exceeded: controller=c quota=max_bytes limit=1: a quota this SDK does not know",
            "quota exceeded: controller=c quota=max_objects_per_kind limit=many: bad limit",
            "quota exceeded: quota=max_objects_per_kind limit=3: no controller",
        ] {
            assert_eq!(
                StoreError::from_invalid(message.into()),
                StoreError::Invalid(message.into()),
                "{message}"
            );
        }
    }
}
