//! PostgreSQL connections shared by the authority and the store: the pool,
//! the redacted endpoint, and versioned migrations.
//!
//! Must never: log or return a URL with its password; hand a connection
//! back to the pool while a transaction on it may still be open (callers
//! that are cancelled mid-transaction rely on `deadpool`'s recycle check,
//! which discards connections that are closed or not idle).

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use thiserror::Error;
use tokio_postgres::NoTls;

/// The default database URL when neither config nor environment give one.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Environment variable that overrides the configured database URL.
pub const URL_ENV: &str = "LEASEHOLD_DATABASE_URL";

/// Migrations, in order. Each runs once, in its own transaction, under an
/// advisory transaction lock so concurrent hosts do not race.
pub const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (3, include_str!("../migrations/0003_store_collation.sql")),
];

/// Database setup failures.
#[derive(Debug, Error)]
pub enum DbError {
    /// The URL could not be parsed.
    #[error("invalid database URL {endpoint}: {reason}")]
    InvalidUrl {
        /// The URL, password redacted.
        endpoint: String,
        /// What is wrong.
        reason: String,
    },
    /// Could not connect or a statement failed.
    #[error("database {endpoint}: {reason}")]
    Unavailable {
        /// Where, password redacted.
        endpoint: String,
        /// The failure.
        reason: String,
    },
}

/// A URL with its password replaced by `***`. Unparseable input is reduced
/// to its scheme so nothing secret leaks through an error message.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        Err(_) => match url.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://<unparseable>"),
            None => "<unparseable database url>".to_string(),
        },
    }
}

/// A connection pool plus the endpoint it talks to.
#[derive(Clone)]
pub struct Database {
    pool: Pool,
    endpoint: String,
    config: tokio_postgres::Config,
    sessions: std::sync::Arc<crate::session::Sessions>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Build a pool for `url` (nothing is connected yet).
    pub fn new(url: &str, max_connections: usize) -> Result<Self, DbError> {
        let endpoint = redact(url);
        let mut config: tokio_postgres::Config =
            url.parse()
                .map_err(|e: tokio_postgres::Error| DbError::InvalidUrl {
                    endpoint: endpoint.clone(),
                    reason: e.to_string(),
                })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(crate::timeouts::DATABASE_CONNECT);
        }
        if config.get_application_name().is_none() {
            config.application_name("leasehold");
        }
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                // Verified: a connection whose transaction was abandoned by
                // a cancelled caller is closed by tokio-postgres when the
                // `Transaction` drops without commit (it sends ROLLBACK);
                // `Verified` additionally checks the session still answers.
                recycling_method: RecyclingMethod::Verified,
            },
        );
        let sessions = std::sync::Arc::new(crate::session::Sessions::new());
        let pool = Pool::builder(manager)
            .pre_recycle(sessions.clone().pre_recycle())
            .max_size(max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(crate::timeouts::DATABASE_CONNECT))
            .create_timeout(Some(crate::timeouts::DATABASE_CONNECT))
            .recycle_timeout(Some(crate::timeouts::DATABASE_CONNECT))
            .build()
            .map_err(|e| DbError::InvalidUrl {
                endpoint: endpoint.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            pool,
            endpoint,
            config,
            sessions,
        })
    }

    /// The endpoint, password redacted: safe to log.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The parsed connection config, for dedicated (unpooled) sessions such
    /// as LISTEN.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The pool's session retirement (see [`crate::session`]).
    pub fn sessions(&self) -> &crate::session::Sessions {
        &self.sessions
    }

    /// A pooled client, or `Unavailable` naming the endpoint.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, DbError> {
        self.pool.get().await.map_err(|e| self.unavailable(e))
    }

    /// Wrap a failure with the (redacted) endpoint. A driver error that
    /// leaves sessions unusable also retires the pooled sessions
    /// ([`crate::session`]).
    pub fn unavailable(&self, error: impl std::fmt::Display + 'static) -> DbError {
        self.sessions.observe(&error);
        DbError::Unavailable {
            endpoint: self.endpoint.clone(),
            reason: error.to_string(),
        }
    }

    /// Apply every migration not yet applied. Idempotent and safe to run
    /// from several hosts at once.
    pub async fn migrate(&self) -> Result<Vec<i32>, DbError> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| self.unavailable(e))?;
        // A fixed key: serializes concurrent migrators. Transaction-scoped,
        // so it cannot leak through the pool.
        tx.execute("SELECT pg_advisory_xact_lock(7263414711)", &[])
            .await
            .map_err(|e| self.unavailable(e))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS leasehold_migrations (
                 version    integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
             )",
        )
        .await
        .map_err(|e| self.unavailable(e))?;
        let applied: Vec<i32> = tx
            .query("SELECT version FROM leasehold_migrations", &[])
            .await
            .map_err(|e| self.unavailable(e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut newly = Vec::new();
        for (version, sql) in MIGRATIONS {
            if applied.contains(version) {
                continue;
            }
            tx.batch_execute(sql)
                .await
                .map_err(|e| DbError::Unavailable {
                    endpoint: self.endpoint.clone(),
                    reason: format!("migration {version} failed: {e}"),
                })?;
            tx.execute(
                "INSERT INTO leasehold_migrations (version) VALUES ($1)",
                &[version],
            )
            .await
            .map_err(|e| self.unavailable(e))?;
            newly.push(*version);
        }
        tx.commit().await.map_err(|e| self.unavailable(e))?;
        Ok(newly)
    }
}

/// Bound a database future by [`crate::timeouts::DATABASE_STATEMENT`].
pub async fn bounded<T, E: std::fmt::Display + 'static>(
    db: &Database,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, DbError> {
    bounded_by(db, crate::timeouts::DATABASE_STATEMENT, fut).await
}

/// Bound a database future by `limit`.
pub async fn bounded_by<T, E: std::fmt::Display + 'static>(
    db: &Database,
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, DbError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(db.unavailable(e)),
        Err(_) => Err(db.unavailable(format!(
            "no answer within {}",
            humantime::format_duration(limit)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_passwords() {
        assert_eq!(
            redact("postgres://alice:s3cret@db:5432/x"),
            "postgres://alice:***@db:5432/x"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1:5432/postgres"),
            "postgres://postgres@127.0.0.1:5432/postgres"
        );
        assert!(!redact("postgres://a:s3cret@[bad").contains("s3cret"));
        assert!(!redact("host=x password=s3cret").contains("s3cret"));
    }
}
