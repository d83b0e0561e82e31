//! Which PostgreSQL failures leave a pooled session unusable, and the
//! retirement of such sessions from the pool.
//!
//! Owns: the one classification of "this session can no longer serve"
//! ([`unusable`]) and the pool's retirement mark ([`Sessions`]), checked by
//! a `pre_recycle` hook of the pool so a retired session is closed instead
//! of handed out again.
//!
//! Why retire every session older than the failure, not just the one that
//! failed: the failures that make a session unusable are shared by every
//! session opened under the same conditions. A read-only refusal comes
//! from the session default `default_transaction_read_only` (captured at
//! connect time from `ALTER DATABASE`/`ALTER ROLE` settings) or from a
//! standby; a terminated or shut-down session means the server is going
//! away; an identity change means the connection string now reaches
//! another database. Retiring only the failing session would let each of
//! the others fail once more (one failed write or renewal each) before the
//! pool healed; retiring them all costs one reconnect per idle session.
//!
//! Must never: classify a retryable failure (a serialization failure,
//! SQLSTATE 40001, or a deadlock, 40P01; a statement cancelled by a
//! recovery conflict leaves its session usable) as unusable: that would
//! churn connections under ordinary contention.

use std::any::Any;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use deadpool_postgres::{Hook, HookError, Metrics};
use tokio_postgres::error::SqlState;

/// Why a session can no longer serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    /// The SQLSTATE the server sent, if it sent one.
    pub sqlstate: Option<String>,
    /// What it means for the session, for logs and errors.
    pub why: &'static str,
}

impl Unusable {
    /// The session answered as read-only: every write on it would fail
    /// with SQLSTATE 25006.
    pub fn read_only() -> Self {
        Self {
            sqlstate: Some(SqlState::READ_ONLY_SQL_TRANSACTION.code().to_string()),
            why: "the session is read-only (transaction_read_only = on)",
        }
    }

    /// The session reaches another database than the verified one, or a
    /// standby.
    pub fn wrong_database() -> Self {
        Self {
            sqlstate: None,
            why: "the session reaches another database than the verified one, or a standby",
        }
    }
}

/// Server errors after which the session must not be reused, with what
/// each means. Class 08 (connection exception) is matched as a class below.
const UNUSABLE_STATES: &[(&SqlState, &str)] = &[
    (
        &SqlState::READ_ONLY_SQL_TRANSACTION,
        "the session is read-only (default_transaction_read_only, or a standby)",
    ),
    (
        &SqlState::ADMIN_SHUTDOWN,
        "the session was terminated by an administrator or a server shutdown",
    ),
    (
        &SqlState::CRASH_SHUTDOWN,
        "the server is restarting after a crash",
    ),
    (
        &SqlState::CANNOT_CONNECT_NOW,
        "the server is starting up or shutting down",
    ),
    (&SqlState::DATABASE_DROPPED, "the database was dropped"),
    (
        &SqlState::IDLE_SESSION_TIMEOUT,
        "the server closed the session after idle_session_timeout",
    ),
];

/// Whether `error` leaves the session it came from unusable, and why.
///
/// Precise on purpose: a statement that merely failed (a constraint, a
/// serialization failure, a statement timeout, a cancelled query) leaves
/// its session fine and is not listed.
pub fn unusable(error: &tokio_postgres::Error) -> Option<Unusable> {
    if let Some(db) = error.as_db_error() {
        let code = db.code();
        if let Some((_, why)) = UNUSABLE_STATES.iter().find(|(state, _)| *state == code) {
            return Some(Unusable {
                sqlstate: Some(code.code().to_string()),
                why,
            });
        }
        if code.code().starts_with("08") {
            return Some(Unusable {
                sqlstate: Some(code.code().to_string()),
                why: "the connection failed",
            });
        }
        // The server ends the session after any FATAL (e.g. "terminating
        // connection due to conflict with recovery", which carries 40001).
        if matches!(db.severity(), "FATAL" | "PANIC") {
            return Some(Unusable {
                sqlstate: Some(code.code().to_string()),
                why: "the server ended the session",
            });
        }
        return None;
    }
    if error.is_closed() {
        return Some(Unusable {
            sqlstate: None,
            why: "the connection is closed",
        });
    }
    None
}

/// The pool's retirement mark: sessions opened before it are closed when
/// they are next taken from the pool. Shared by every clone of a
/// [`crate::db::Database`].
#[derive(Debug, Default)]
pub struct Sessions {
    retire_before: Mutex<Option<Instant>>,
}

impl Sessions {
    /// No session retired yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Look at a failure on its way to the caller: if it is a driver error
    /// that leaves its session unusable, retire every session opened so
    /// far. Anything else (a message, a pool timeout) is ignored.
    pub fn observe(&self, error: &dyn Any) {
        let error = error.downcast_ref::<tokio_postgres::Error>().or_else(|| {
            match error.downcast_ref::<deadpool_postgres::PoolError>() {
                Some(deadpool_postgres::PoolError::Backend(e)) => Some(e),
                _ => None,
            }
        });
        if let Some(reason) = error.and_then(unusable) {
            self.retire(&reason);
        }
    }

    /// Retire every session opened so far, for `reason`.
    pub fn retire(&self, reason: &Unusable) {
        let now = Instant::now();
        let mut mark = self
            .retire_before
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Logged once per burst: every in-flight call on the same stale
        // sessions fails the same way at about the same time.
        if mark.is_none_or(|at| now.duration_since(at) >= crate::timeouts::DATABASE_STATEMENT) {
            tracing::warn!(
                sqlstate = reason.sqlstate.as_deref().unwrap_or("none"),
                reason = reason.why,
                "closing the pooled database sessions opened so far; new ones replace them"
            );
        }
        *mark = Some(now);
    }

    /// A session answered whether it is read-only (the identity probe
    /// reads `transaction_read_only`): a read-only one retires the sessions
    /// opened so far, so the next probe, write or renewal runs in a session
    /// opened now, which tells whether the database still refuses writes.
    pub fn note_read_only(&self, read_only: bool) {
        if read_only {
            self.retire(&Unusable::read_only());
        }
    }

    /// Whether a session opened at `created` was retired.
    pub fn retired(&self, created: Instant) -> bool {
        self.retire_before
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|mark| created <= mark)
    }

    /// The pool hook that closes retired sessions instead of reusing them
    /// (a failing `pre_recycle` hook makes the pool drop the session and
    /// take, or open, another).
    pub fn pre_recycle(self: std::sync::Arc<Self>) -> Hook {
        Hook::sync_fn(move |_client, metrics: &Metrics| -> Result<(), HookError> {
            if self.retired(metrics.created) {
                Err(HookError::message(
                    "retired after a failure that leaves sessions unusable",
                ))
            } else {
                Ok(())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retirement_covers_sessions_opened_before_the_mark_only() {
        let sessions = Sessions::new();
        let before = Instant::now();
        assert!(!sessions.retired(before), "nothing is retired at first");
        sessions.retire(&Unusable {
            sqlstate: Some("25006".into()),
            why: "read-only",
        });
        assert!(sessions.retired(before));
        let after = Instant::now() + std::time::Duration::from_millis(1);
        assert!(!sessions.retired(after), "a newer session is kept");
    }

    async fn raise(client: &tokio_postgres::Client, sqlstate: &str) -> tokio_postgres::Error {
        client
            .batch_execute(&format!(
                "DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{sqlstate}'; END $$"
            ))
            .await
            .expect_err("raised")
    }

    #[tokio::test]
    async fn only_failures_that_end_a_session_are_unusable() {
        let test = crate::testing::TestDatabase::create().await;
        let (client, connection) = tokio_postgres::connect(test.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        for code in [
            "25006", "57P01", "57P02", "57P03", "57P04", "57P05", "08006", "08P01",
        ] {
            let e = raise(&client, code).await;
            assert_eq!(
                unusable(&e).and_then(|u| u.sqlstate).as_deref(),
                Some(code),
                "{code} leaves the session unusable"
            );
        }
        // Retryable or statement-level: the session is fine.
        for code in ["40001", "40P01", "23505", "57014", "55P03", "P0001"] {
            let e = raise(&client, code).await;
            assert_eq!(unusable(&e), None, "{code} must not retire sessions");
        }
        // A terminated session: the server's FATAL, or the closed socket.
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let (admin, connection) = tokio_postgres::connect(test.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        admin
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
        let e = client
            .simple_query("SELECT 1")
            .await
            .expect_err("terminated");
        assert!(unusable(&e).is_some(), "{e:?}");
    }

    #[tokio::test]
    async fn sessions_left_read_only_are_replaced_once_one_write_is_refused() {
        let test = crate::testing::TestDatabase::create().await;
        let name = test.url().rsplit('/').next().unwrap().to_string();
        let db = test.database(1);
        let (admin, connection) = tokio_postgres::connect(test.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let write = async |db: &crate::db::Database| {
            let client = db.client().await?;
            client
                .execute("INSERT INTO probe VALUES (1)", &[])
                .await
                .map_err(|e| db.unavailable(e))
        };
        db.client()
            .await
            .unwrap()
            .batch_execute("CREATE TABLE probe (x int)")
            .await
            .unwrap();
        write(&db).await.expect("writable at first");

        // Sessions opened while the database is read-only keep that
        // default after it is reset.
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {name} SET default_transaction_read_only = on"
            ))
            .await
            .unwrap();
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                  WHERE datname = $1 AND application_name = 'leasehold'",
                &[&name],
            )
            .await
            .unwrap();
        let refused = write(&db).await.expect_err("read-only");
        assert!(
            format!("{refused:?}").contains("Unavailable"),
            "{refused:?}"
        );
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {name} RESET default_transaction_read_only"
            ))
            .await
            .unwrap();
        // The pool's one session was opened read-only: without retirement
        // it would be handed out again and refuse this write too.
        write(&db).await.expect("a fresh session accepts the write");
    }

    #[test]
    fn messages_and_timeouts_retire_nothing() {
        let sessions = Sessions::new();
        let opened = Instant::now();
        sessions.observe(&"no answer within 5s".to_string());
        sessions.observe(&deadpool_postgres::PoolError::Closed);
        assert!(!sessions.retired(opened));
    }
}
