//! Turning driver and pool failures into [`AuthorityError`]s that name the
//! endpoint (password already redacted by [`crate::db::redact`]) and say
//! what to do next. Nothing here ever sees or prints the URL itself.

use std::error::Error as _;

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

use crate::authority::AuthorityError;

/// A failure inside one backend call, before it is named for the caller.
pub(super) enum Failure {
    /// The driver or the server refused.
    Pg(tokio_postgres::Error),
    /// No pooled connection.
    Pool(PoolError),
    /// Already a domain answer (e.g. a schema problem found by a query).
    Authority(AuthorityError),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(e)
    }
}

impl From<PoolError> for Failure {
    fn from(e: PoolError) -> Self {
        Failure::Pool(e)
    }
}

impl From<AuthorityError> for Failure {
    fn from(e: AuthorityError) -> Self {
        Failure::Authority(e)
    }
}

impl Failure {
    pub(super) fn name(self, endpoint: &str, what: &str) -> AuthorityError {
        match self {
            Failure::Pg(e) => classify(endpoint, what, &e),
            Failure::Pool(e) => pool(endpoint, what, e),
            Failure::Authority(e) => e,
        }
    }
}

/// The driver's message plus its causes: tokio-postgres' own `Display`
/// says only "db error" or "error connecting to server".
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} (SQLSTATE {})", db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Classify a driver error raised while doing `what` against `endpoint`.
pub(crate) fn classify(endpoint: &str, what: &str, e: &tokio_postgres::Error) -> AuthorityError {
    let reason = format!("{what}: {}", describe(e));
    let code = e.code();
    let is = |codes: &[&SqlState]| code.is_some_and(|c| codes.contains(&c));
    if is(&[
        &SqlState::UNDEFINED_TABLE,
        &SqlState::UNDEFINED_COLUMN,
        &SqlState::UNDEFINED_FUNCTION,
    ]) {
        return AuthorityError::Schema {
            endpoint: endpoint.to_string(),
            reason,
        };
    }
    if is(&[
        &SqlState::INSUFFICIENT_PRIVILEGE,
        &SqlState::INVALID_PASSWORD,
        &SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
    ]) {
        // Reported as unavailable (the lease cannot be served) with the
        // reason first, so the operator sees what to fix.
        return AuthorityError::Unavailable {
            endpoint: endpoint.to_string(),
            reason: format!(
                "permission denied: {reason}; the role needs LOGIN and read/write access \
                 to the leasehold_* tables (run `leasehold migrate` as their owner)"
            ),
        };
    }
    if is(&[&SqlState::READ_ONLY_SQL_TRANSACTION]) {
        return AuthorityError::WrongDatabase {
            endpoint: endpoint.to_string(),
            problems: format!("{reason}; leases need the primary"),
        };
    }
    AuthorityError::Unavailable {
        endpoint: endpoint.to_string(),
        reason,
    }
}

fn pool(endpoint: &str, what: &str, e: PoolError) -> AuthorityError {
    match e {
        PoolError::Backend(e) => classify(endpoint, what, &e),
        PoolError::Timeout(kind) => AuthorityError::Unavailable {
            endpoint: endpoint.to_string(),
            reason: format!(
                "{what}: no database connection within {} ({kind:?})",
                humantime::format_duration(crate::timeouts::DATABASE_CONNECT)
            ),
        },
        other => AuthorityError::Unavailable {
            endpoint: endpoint.to_string(),
            reason: format!("{what}: {other}"),
        },
    }
}
