//! The embedded backend's database: SQLite in WAL mode, in a data
//! directory beside the config, shared by every `leasehold` process that
//! names the same directory on this machine. The lease authority
//! (`authority/sqlite/`) and the store (`store/sqlite.rs`) are built on it.
//!
//! Owns: the data directory ([`dir`], a capability), its file locks
//! ([`locks`]), the schema ([`schema`]), the clock every process on the
//! directory shares ([`clock`]), the connections, and the poll that tells
//! one process what the others committed ([`EmbeddedDb::feed`],
//! [`EmbeddedDb::releases`]); moving a cluster between this backend and
//! PostgreSQL ([`transfer`]).
//!
//! How the guarantees PostgreSQL gives are kept here:
//!
//! - **One writer at a time.** Every write (a grant, a renewal, a fenced
//!   commit, an API write) is one `BEGIN IMMEDIATE` transaction: SQLite
//!   lets one connection of one process at a time hold the write lock, so
//!   transactions are serialized across every process on the directory. A
//!   transaction is a few statements run on a blocking thread without
//!   awaiting anything; it never waits on the network or a guest. Inside
//!   one process, writers take turns before they reach SQLite, so only
//!   other processes' writers wait on its lock, in short steps, at most
//!   [`crate::timeouts::EMBEDDED_BUSY_TIMEOUT`].
//! - **Fence inside the write.** A fenced commit reads the lease row and
//!   counts the write against its open tenure in its own transaction, and
//!   a grant or release cannot run meanwhile (L4): no write of epoch e
//!   commits after epoch e + 1 was granted.
//! - **Durable.** `synchronous = FULL`: a commit returns once its log
//!   record is on disk, a grant included, so an epoch is never given twice
//!   even across a power loss (L1).
//! - **Commit order.** Revisions, change positions and event seqs come from
//!   one counter incremented inside the write transaction, so they follow
//!   commit order and the last one committed is the high-water mark.
//!
//! What it cannot do: serve more than one machine (its locks are this
//! kernel's), or let a process stopped inside a transaction (SIGSTOP, a
//! debugger) go unnoticed: every other writer waits for it, for at most
//! the busy timeout each time.

pub mod clock;
pub mod dir;
pub mod locks;
pub mod schema;
pub mod transfer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use thiserror::Error;
use tokio::sync::watch;

use crate::limits::{
    EMBEDDED_CONNECTIONS, EMBEDDED_MAX_DATABASE_BYTES, EMBEDDED_PAGE_BYTES,
    EMBEDDED_WAL_AUTOCHECKPOINT_PAGES, EMBEDDED_WAL_SIZE_LIMIT_BYTES,
};
use crate::timeouts::{
    DATABASE_CONNECT, EMBEDDED_BUSY_STEP, EMBEDDED_BUSY_TIMEOUT, EMBEDDED_FEED_POLL,
};

pub use dir::{DataDir, DirError};

/// The name of the embedded backend in logs, `/readyz` and the tenure
/// history's `endpoint`: what it is and where.
pub fn endpoint_of(path: &Path) -> String {
    format!("embedded SQLite at {}", path.display())
}

/// Why the embedded database cannot be used.
#[derive(Debug, Error)]
pub enum EmbeddedError {
    /// The data directory is refused.
    #[error(transparent)]
    Dir(#[from] DirError),
    /// SQLite failed.
    #[error("{endpoint}: {what}: {reason}")]
    Sqlite {
        /// Where.
        endpoint: String,
        /// What was being done.
        what: String,
        /// SQLite's message, with advice where the fix is known.
        reason: String,
    },
    /// A newer host migrated the schema further than this one knows.
    #[error(
        "{endpoint}: the schema is at version {found}, newer than this host knows ({known}): a \
         newer host migrated it; upgrade this host"
    )]
    NewerSchema {
        /// Where.
        endpoint: String,
        /// The database's version.
        found: i32,
        /// This host's newest.
        known: i32,
    },
    /// Another process holds the data directory exclusively, or this
    /// process needs it alone and others use it.
    #[error("{endpoint}: {reason}")]
    InUse {
        /// Where.
        endpoint: String,
        /// Who, and what to do.
        reason: String,
    },
    /// No connection within the bound, or the connection's thread failed.
    #[error("{endpoint}: {reason}")]
    Unavailable {
        /// Where.
        endpoint: String,
        /// What failed.
        reason: String,
    },
}

/// SQLite's error with advice where the cause is known (a lock another
/// process held too long, the size bound, a read-only file).
pub fn describe(error: &rusqlite::Error) -> String {
    use rusqlite::ErrorCode;
    let advice = match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => format!(
            "; another process held the database's write lock for over {} (a host stopped \
             inside a transaction, or a long export?)",
            humantime::format_duration(EMBEDDED_BUSY_TIMEOUT)
        ),
        Some(ErrorCode::DiskFull) => format!(
            "; the database reached its bound of {} bytes, or the disk is full: lower [store] \
             event_retention, or free space",
            EMBEDDED_MAX_DATABASE_BYTES
        ),
        Some(ErrorCode::ReadOnly) => {
            "; the database file or its directory is read-only for this process".to_string()
        }
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
            "; the database file is damaged or not a Leasehold database".to_string()
        }
        _ => String::new(),
    };
    format!("{error}{advice}")
}

/// How a process uses the data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A host (or a reader): shares the directory with every other host.
    Shared,
    /// Alone: refused while any host runs on it (`leasehold import`).
    Exclusive,
}

/// The embedded database of one data directory. Cheap to clone: clones
/// share connections and the poll.
#[derive(Clone)]
pub struct EmbeddedDb {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EmbeddedDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedDb")
            .field("endpoint", &self.shared.endpoint)
            .finish_non_exhaustive()
    }
}

struct Shared {
    data: DataDir,
    file: PathBuf,
    endpoint: String,
    database_id: uuid::Uuid,
    idle: Mutex<Vec<Connection>>,
    permits: tokio::sync::Semaphore,
    /// This process's writers take turns here before they reach SQLite's
    /// lock, which then only ever waits for other processes.
    writer: tokio::sync::Mutex<()>,
    /// Per cluster: the last position committed, for the store's watchers.
    feeds: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// Per cluster: how many releases were committed, for standbys.
    releases: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// How many polls of other processes' commits have run.
    polls: watch::Sender<u64>,
    /// The directory lock, held for the life of this handle.
    _dir_lock: locks::HeldLock,
}

impl EmbeddedDb {
    /// Open the data directory at `path` (creating it), migrate its
    /// database and start the poll of other processes' commits (when
    /// inside a Tokio runtime).
    pub async fn open(path: &Path, access: Access) -> Result<Self, EmbeddedError> {
        let path = path.to_path_buf();
        let db = tokio::task::spawn_blocking(move || Self::open_blocking(&path, access))
            .await
            .map_err(|e| EmbeddedError::Unavailable {
                endpoint: "embedded SQLite".to_string(),
                reason: format!("opening the data directory failed: {e}"),
            })??;
        db.start_poll();
        Ok(db)
    }

    /// [`EmbeddedDb::open`] on this thread, without the poll.
    pub fn open_blocking(path: &Path, access: Access) -> Result<Self, EmbeddedError> {
        let data = DataDir::open(path)?;
        let file = data.database_path()?;
        let endpoint = endpoint_of(&file);
        let in_use = |reason: String| EmbeddedError::InUse {
            endpoint: endpoint.clone(),
            reason,
        };
        let dir_lock = locks::HeldLock::take(
            &data,
            PathBuf::from(dir::DIR_LOCK_FILE),
            access == Access::Exclusive,
        )
        .map_err(|e| in_use(format!("the directory lock cannot be taken: {e}")))?
        .ok_or_else(|| {
            in_use(match access {
                Access::Exclusive => "a host runs on this data directory; stop every host that \
                                     uses it first"
                    .to_string(),
                Access::Shared => "`leasehold import` is writing this data directory; wait for \
                                   it to finish"
                    .to_string(),
            })
        })?;
        data.ensure_dir(dir::HOSTS_DIR)
            .map_err(|e| in_use(format!("the hosts folder cannot be made: {e}")))?;
        let mut connection = open_connection(&file, &endpoint)?;
        let database_id = migrate(&mut connection, &endpoint)?;
        let shared = Shared {
            data,
            file,
            endpoint,
            database_id,
            idle: Mutex::new(vec![connection]),
            permits: tokio::sync::Semaphore::new(EMBEDDED_CONNECTIONS),
            writer: tokio::sync::Mutex::new(()),
            feeds: Mutex::new(HashMap::new()),
            releases: Mutex::new(HashMap::new()),
            polls: watch::Sender::new(0),
            _dir_lock: dir_lock,
        };
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// Where (for messages and the tenure history).
    pub fn endpoint(&self) -> &str {
        &self.shared.endpoint
    }

    /// The database's id, made when it was created.
    pub fn database_id(&self) -> uuid::Uuid {
        self.shared.database_id
    }

    /// The data directory.
    pub fn data(&self) -> &DataDir {
        &self.shared.data
    }

    /// Run `f` on a connection, on a blocking thread, as a reader: any
    /// number run at once, each in the snapshot its own transaction takes.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T, EmbeddedError> {
        self.run(f).await
    }

    /// Run `f` on a connection, on a blocking thread, as this process's
    /// one writer (`f` begins its own `IMMEDIATE` transaction).
    pub async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T, EmbeddedError> {
        let _turn = self.shared.writer.lock().await;
        self.run(f).await
    }

    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T, EmbeddedError> {
        let unavailable = |reason: String| EmbeddedError::Unavailable {
            endpoint: self.shared.endpoint.clone(),
            reason,
        };
        let permit = tokio::time::timeout(DATABASE_CONNECT, self.shared.permits.acquire())
            .await
            .map_err(|_| {
                unavailable(format!(
                    "no connection free within {}",
                    humantime::format_duration(DATABASE_CONNECT)
                ))
            })?
            .map_err(|_| unavailable("the connections are closed".to_string()))?;
        let shared = self.shared.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let idle = shared
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let mut connection = match idle {
                Some(connection) => connection,
                None => open_connection(&shared.file, &shared.endpoint)?,
            };
            let value = f(&mut connection);
            // A transaction `f` left open (it returned early without
            // committing or rolling back) is not handed to the next caller.
            if connection.is_autocommit() {
                shared
                    .idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(connection);
            }
            Ok::<T, EmbeddedError>(value)
        })
        .await;
        drop(permit);
        outcome.map_err(|e| unavailable(format!("the database thread failed: {e}")))?
    }

    /// A receiver of the last position committed to `cluster` (by any
    /// process), for the store's watchers.
    pub fn feed(&self, cluster: &str) -> watch::Receiver<u64> {
        let mut feeds = self
            .shared
            .feeds
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        feeds
            .entry(cluster.to_string())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    /// Publish that `cluster` committed up to `position` (a commit of
    /// this process, at once; the poll brings other processes').
    pub fn committed(&self, cluster: &str, position: u64) {
        let feeds = self
            .shared
            .feeds
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = feeds.get(cluster) {
            sender.send_if_modified(|last| {
                let grew = position > *last;
                *last = (*last).max(position);
                grew
            });
        }
    }

    /// A receiver of the count of releases committed in `cluster` (by any
    /// process), for standbys.
    pub fn releases(&self, cluster: &str) -> watch::Receiver<u64> {
        let mut releases = self
            .shared
            .releases
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        releases
            .entry(cluster.to_string())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    /// Publish that `cluster` has at least `count` releases.
    pub fn released(&self, cluster: &str, count: u64) {
        let releases = self
            .shared
            .releases
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = releases.get(cluster) {
            sender.send_if_modified(|seen| {
                let grew = count > *seen;
                *seen = (*seen).max(count);
                grew
            });
        }
    }

    /// A receiver of the number of polls run so far: a test waits for the
    /// first before it relies on a wake-up from another process.
    pub fn polls(&self) -> watch::Receiver<u64> {
        self.shared.polls.subscribe()
    }

    /// Poll SQLite's change counter every [`EMBEDDED_FEED_POLL`] and, when
    /// another connection committed, read the per-cluster positions and
    /// release counts and publish what grew. Stops with the last handle.
    ///
    /// On a connection of its own, never used for anything else: SQLite's
    /// `data_version` is a count per connection (values of two connections
    /// cannot be compared), and it does not move for the connection's own
    /// commits.
    fn start_poll(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak: Weak<Shared> = Arc::downgrade(&self.shared);
        runtime.spawn(async move {
            let mut seen: Option<i64> = None;
            let mut own: Option<Connection> = None;
            loop {
                // No handle is held while the poll reads: the last handle
                // dropped meanwhile releases the directory lock at once,
                // not after the read.
                let Some((file, endpoint)) = weak
                    .upgrade()
                    .map(|shared| (shared.file.clone(), shared.endpoint.clone()))
                else {
                    return;
                };
                let last = seen;
                let connection = own.take();
                let polled = tokio::task::spawn_blocking(move || {
                    let connection = match connection {
                        Some(connection) => connection,
                        None => match open_connection(&file, &endpoint) {
                            Ok(connection) => connection,
                            Err(e) => return (None, Err(e.to_string())),
                        },
                    };
                    let read = poll_feeds(&connection, last).map_err(|e| describe(&e));
                    (Some(connection), read)
                })
                .await;
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                let db = EmbeddedDb { shared };
                match polled {
                    Ok((connection, Ok((version, rows)))) => {
                        own = connection;
                        seen = Some(version);
                        for (cluster, last, releases) in rows {
                            db.committed(&cluster, last);
                            db.released(&cluster, releases);
                        }
                    }
                    Ok((connection, Err(error))) => {
                        own = connection;
                        tracing::warn!(
                            endpoint = db.endpoint(),
                            error,
                            "reading other processes' commits failed; retrying"
                        );
                    }
                    Err(e) => tracing::warn!(
                        error = %e,
                        "reading other processes' commits failed; retrying"
                    ),
                }
                db.shared.polls.send_modify(|n| *n += 1);
                drop(db);
                tokio::time::sleep(EMBEDDED_FEED_POLL).await;
            }
        });
    }
}

/// One poll on the poll's own connection: its `data_version`, and the
/// feeds' rows unless it equals `last` (nothing committed since).
fn poll_feeds(connection: &Connection, last: Option<i64>) -> rusqlite::Result<(i64, FeedRows)> {
    let version: i64 = connection.query_row("PRAGMA data_version", [], |r| r.get(0))?;
    if last == Some(version) {
        return Ok((version, Vec::new()));
    }
    let mut statement =
        connection.prepare_cached("SELECT cluster, last, releases FROM leasehold_feeds")?;
    let rows = statement
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get::<_, i64>(1)? as u64,
                r.get::<_, i64>(2)? as u64,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((version, rows))
}

/// Per cluster: the last position and the releases committed.
type FeedRows = Vec<(String, u64, u64)>;

/// SQLite's busy handler: wait [`EMBEDDED_BUSY_STEP`] and try again, up to
/// [`EMBEDDED_BUSY_TIMEOUT`] in all.
fn busy(attempts: i32) -> bool {
    let allowed = EMBEDDED_BUSY_TIMEOUT.as_micros() / EMBEDDED_BUSY_STEP.as_micros().max(1);
    if u128::try_from(attempts).unwrap_or(0) >= allowed {
        return false;
    }
    std::thread::sleep(EMBEDDED_BUSY_STEP);
    true
}

/// One connection, set up as every connection of the backend is.
fn open_connection(file: &Path, endpoint: &str) -> Result<Connection, EmbeddedError> {
    let failed = |what: &str, e: rusqlite::Error| EmbeddedError::Sqlite {
        endpoint: endpoint.to_string(),
        what: what.to_string(),
        reason: describe(&e),
    };
    let mut connection = Connection::open_with_flags(
        file,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW,
    )
    .map_err(|e| failed("opening the database", e))?;
    connection
        .busy_handler(Some(busy))
        .map_err(|e| failed("setting the busy handler", e))?;
    let max_pages = EMBEDDED_MAX_DATABASE_BYTES / EMBEDDED_PAGE_BYTES;
    connection
        .execute_batch(&format!(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             PRAGMA foreign_keys = OFF;
             PRAGMA temp_store = MEMORY;
             PRAGMA wal_autocheckpoint = {EMBEDDED_WAL_AUTOCHECKPOINT_PAGES};
             PRAGMA journal_size_limit = {EMBEDDED_WAL_SIZE_LIMIT_BYTES};
             PRAGMA max_page_count = {max_pages};"
        ))
        .map_err(|e| failed("setting up the connection", e))?;
    Ok(connection)
}

/// Apply the migrations this database lacks; returns its id.
fn migrate(connection: &mut Connection, endpoint: &str) -> Result<uuid::Uuid, EmbeddedError> {
    let failed = |what: &str, e: rusqlite::Error| EmbeddedError::Sqlite {
        endpoint: endpoint.to_string(),
        what: what.to_string(),
        reason: describe(&e),
    };
    let tx = connection
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| failed("migrating", e))?;
    let version: i32 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| failed("reading the schema version", e))?;
    if version > schema::latest() {
        return Err(EmbeddedError::NewerSchema {
            endpoint: endpoint.to_string(),
            found: version,
            known: schema::latest(),
        });
    }
    for (number, sql) in schema::MIGRATIONS.iter().filter(|(n, _)| *n > version) {
        tx.execute_batch(sql)
            .map_err(|e| failed(&format!("applying migration {number}"), e))?;
        tx.execute_batch(&format!("PRAGMA user_version = {number}"))
            .map_err(|e| failed(&format!("recording migration {number}"), e))?;
        if *number == 1 {
            tx.execute(
                "INSERT INTO leasehold_database (only, database_id, created_at) VALUES (1, ?1, ?2)",
                rusqlite::params![uuid::Uuid::new_v4().to_string(), clock::Now::read().utc],
            )
            .map_err(|e| failed("recording the database id", e))?;
        }
    }
    let id: Option<String> = tx
        .query_row("SELECT database_id FROM leasehold_database", [], |r| {
            r.get(0)
        })
        .optional()
        .map_err(|e| failed("reading the database id", e))?;
    tx.commit().map_err(|e| failed("migrating", e))?;
    let id = id.ok_or_else(|| EmbeddedError::Sqlite {
        endpoint: endpoint.to_string(),
        what: "reading the database id".to_string(),
        reason: "the database has no id; it is damaged".to_string(),
    })?;
    uuid::Uuid::parse_str(&id).map_err(|e| EmbeddedError::Sqlite {
        endpoint: endpoint.to_string(),
        what: "reading the database id".to_string(),
        reason: format!("{id:?} is not a uuid ({e}); the database is damaged"),
    })
}

/// How long a poll of other processes' commits may be late, at most: the
/// poll interval and one read.
pub const FEED_LAG: Duration = EMBEDDED_FEED_POLL;

/// A folder for a test's own data directory, under the system's temporary
/// folder, new for each call.
#[cfg(test)]
pub(crate) fn scratch_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("leasehold-{name}-{}", uuid::Uuid::new_v4()))
}

/// Remove a test's data directory, best effort: a connection of a handle
/// just dropped may still be closing (SQLite removes its `-wal` and `-shm`
/// files then), which makes the removal race it; what is left is a
/// uniquely named folder in the temporary folder.
#[cfg(test)]
pub(crate) fn remove_scratch(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        eprintln!("note: could not remove {}: {e}", dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_database_keeps_its_id_and_schema_across_opens() {
        let base = scratch_dir("db-reopen");
        let first = EmbeddedDb::open(&base, Access::Shared).await.unwrap();
        let id = first.database_id();
        drop(first);
        let again = EmbeddedDb::open(&base, Access::Shared).await.unwrap();
        assert_eq!(again.database_id(), id);
        let version: i32 = again
            .read(|c| c.query_row("PRAGMA user_version", [], |r| r.get(0)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(version, schema::latest());
        let mode: String = again
            .read(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(mode, "wal");
        drop(again);
        remove_scratch(&base);
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused() {
        let base = scratch_dir("db-newer");
        let db = EmbeddedDb::open(&base, Access::Shared).await.unwrap();
        db.write(|c| c.execute_batch("PRAGMA user_version = 999"))
            .await
            .unwrap()
            .unwrap();
        drop(db);
        match EmbeddedDb::open(&base, Access::Shared).await {
            Err(e @ EmbeddedError::NewerSchema { found: 999, .. }) => {
                assert!(e.to_string().contains("upgrade this host"), "{e}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        remove_scratch(&base);
    }

    #[tokio::test]
    async fn import_needs_the_directory_alone() {
        let base = scratch_dir("db-exclusive");
        let host = EmbeddedDb::open(&base, Access::Shared).await.unwrap();
        match EmbeddedDb::open(&base, Access::Exclusive).await {
            Err(e @ EmbeddedError::InUse { .. }) => {
                assert!(e.to_string().contains("stop every host"), "{e}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        drop(host);
        let alone = EmbeddedDb::open(&base, Access::Exclusive).await.unwrap();
        assert!(EmbeddedDb::open(&base, Access::Shared).await.is_err());
        drop(alone);
        remove_scratch(&base);
    }

    #[tokio::test]
    async fn another_process_commits_reach_this_ones_feed_and_release_counts() {
        let base = scratch_dir("db-poll");
        let here = EmbeddedDb::open(&base, Access::Shared).await.unwrap();
        let there = EmbeddedDb::open(&base, Access::Shared).await.unwrap();
        let mut feed = here.feed("east");
        let mut releases = here.releases("east");
        let mut polls = here.polls();
        polls.wait_for(|n| *n > 0).await.unwrap();
        there
            .write(|c| {
                c.execute(
                    "INSERT INTO leasehold_feeds (cluster, last, releases) VALUES ('east', 7, 2)",
                    [],
                )
            })
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), feed.wait_for(|n| *n == 7))
            .await
            .expect("the feed moves")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), releases.wait_for(|n| *n == 2))
            .await
            .expect("the releases count moves")
            .unwrap();
        drop((here, there));
        remove_scratch(&base);
    }
}
