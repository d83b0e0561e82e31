//! Why the rules refuse a request.

use std::fmt;

use crate::ObjectKey;

/// A request the rules refuse; nothing of it is written. Each names what it
/// is about. The texts are the ones every backend reports (the host's
/// `StoreError` spells these variants the same way), so a message does not
/// depend on which store or fake answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A precondition failed: a version or generation, an object expected
    /// absent, an owner that must exist unmarked.
    Conflict {
        /// The object whose precondition failed.
        key: ObjectKey,
        /// Expected vs. found.
        reason: String,
    },
    /// The object a write needs does not exist.
    NotFound {
        /// The object.
        key: ObjectKey,
    },
    /// Malformed input: names, JSON, metadata syntax, a contradictory
    /// commit.
    Invalid(String),
    /// Input over a bound of [`crate::limits`].
    TooLarge(String),
    /// A plan broke its own rule (an answer for an object it does not
    /// write): a bug, never the caller's input.
    Inconsistent(String),
}

impl Error {
    /// The machine-readable code of this refusal, as the conformance table
    /// and the HTTP API name it: `conflict`, `not_found`, `invalid`,
    /// `too_large`, `inconsistent`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Conflict { .. } => "conflict",
            Error::NotFound { .. } => "not_found",
            Error::Invalid(_) => "invalid",
            Error::TooLarge(_) => "too_large",
            Error::Inconsistent(_) => "inconsistent",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Conflict { key, reason } => write!(f, "conflict on {key}: {reason}"),
            Error::NotFound { key } => write!(f, "{key} not found"),
            Error::Invalid(message) => write!(f, "invalid request: {message}"),
            Error::TooLarge(message) => write!(f, "too large: {message}"),
            Error::Inconsistent(message) => write!(f, "inconsistent plan: {message}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::names::NameError> for Error {
    fn from(error: crate::names::NameError) -> Self {
        Error::Invalid(error.to_string())
    }
}
