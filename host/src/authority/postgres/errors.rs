//! Turning driver and pool failures into [`AuthorityError`]s that name the
//! endpoint (password already redacted by [`crate::db::redact`]) and say
//! what to do next. Nothing here ever sees or prints the URL itself.

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

/// The server's SQLSTATE and message, or the driver's message plus its
/// causes: tokio-postgres' own `Display` says only "db error" or "error
/// connecting to server". One formatter for the whole host
/// ([`crate::db::describe`]), so the API, the log and the CLI say the same.
fn describe(e: &tokio_postgres::Error) -> String {
    crate::db::describe(e)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{DEFAULT_URL, Database, URL_ENV};

    /// A pool that cannot connect names the server's SQLSTATE and message,
    /// not deadpool's "Error occurred while creating a new object: db
    /// error".
    #[tokio::test]
    async fn a_refused_connection_names_the_servers_sqlstate() {
        let admin = std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.to_string());
        let mut url = url::Url::parse(&admin).expect("admin url");
        let role = format!("no_such_role_{}", uuid::Uuid::new_v4().simple());
        url.set_username(&role).expect("url with a user");
        let db = Database::new(url.as_str(), 1).unwrap();
        let failure = Failure::from(db.pool().get().await.unwrap_err());
        let text = failure.name(db.endpoint(), "acquiring demo/x").to_string();
        assert!(text.contains("SQLSTATE 28000"), "{text}");
        assert!(text.contains(&role), "{text}");
        assert!(!text.contains("db error"), "{text}");
    }
}
