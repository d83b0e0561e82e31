//! Retention: the event log, the change stream and tenure history are
//! trimmed in the background, in bounded batches.
//!
//! Owns: the trimming loop each host runs for its cluster ([`run`]), the
//! policy it follows ([`Policy`], from `[store] event_retention` and
//! `tenure_retention`), and the PostgreSQL side of one batch
//! ([`trim_postgres`]). The memory backend trims its own log
//! ([`super::MemoryStore`]); its tenure history lives in the memory
//! authority, which keeps a bounded history of its own.
//!
//! What is kept:
//! - events and object changes committed within `event_retention` (by the
//!   database's clock on PostgreSQL), and everything above the high-water
//!   mark (a position that may still commit is never passed);
//! - per lease, the newest `tenure_retention` tenures, and always the live
//!   one (the tenure whose epoch the lease row holds).
//!
//! What a reader sees: each stream has a floor per cluster (PostgreSQL:
//! `leasehold_retention`, migration 13): every position up to it may be
//! gone, every position above it is kept. The floor is raised in the same
//! transaction as the `DELETE` it covers, and a read takes its rows and the
//! floor in one statement, so a cursor below the floor is answered with
//! [`StoreError::TooOld`] (HTTP 410, a worker's resync) rather than a page
//! that silently skips what was trimmed.
//!
//! Space: a `DELETE` frees nothing by itself; the rows' space is reused
//! only once `VACUUM` has visited the table, and until then every index
//! scan still walks the dead entries. A server may run without autovacuum,
//! or with one that lags behind a churning table, and the database then
//! grows however much is trimmed. So a round's last batch (one that was not
//! full) ends with `VACUUM (SKIP_LOCKED, ANALYZE)` of
//! each store table whose dead rows (the server's count plus what the
//! batch just deleted) reach [`VACUUM_MIN_DEAD`] and a fifth of its live
//! rows, autovacuum's own default proportion: the trimmed tables, tenure
//! history and `leasehold_objects`, whose creates, updates and deletes
//! leave dead rows of their own. Where autovacuum keeps up, no table gets
//! there and the trimmer vacuums nothing. `ANALYZE` comes with it, since a
//! server without autovacuum never gathers statistics and plans every
//! statement as if the tables were empty. A table another session is
//! vacuuming is skipped, not waited for.
//!
//! Only one host trims a cluster at a time: each batch runs in a
//! transaction that first takes `pg_try_advisory_xact_lock` on the
//! cluster's retention key (the two-key space, first key `LR` in its upper
//! half, distinct from the position floors and the name claims); a host
//! that does not get it skips the round. Two hosts trimming together would
//! still be correct (floors only rise, deletes are idempotent); the lock
//! saves the duplicated work.

use std::time::Duration;

use tokio::sync::watch;

use crate::db::{Database, bounded};

use super::StoreError;

/// Rows deleted per statement, per table.
pub const TRIM_BATCH: usize = 1000;
/// How often a host looks for something to trim.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(60);
/// The pause between two batches of one round: rate limiting only, so a
/// backlog (retention just turned on, a lowered retention) is deleted
/// without monopolizing the database. Never ordering anything.
pub const TRIM_PAUSE: Duration = Duration::from_millis(50);

/// The first key of the retention lock, `LR` in its upper half.
const LOCK_KEY: i32 = 0x4C52_0000;

/// Dead rows a table needs (with a fifth of its live rows) before a
/// round's end vacuums it.
pub const VACUUM_MIN_DEAD: i64 = 1000;
/// The longest the trimmer waits for its `VACUUM`; a connection that does
/// not answer by then is closed, not returned to the pool.
pub const VACUUM_LIMIT: Duration = Duration::from_secs(300);
/// The store tables a round's end may vacuum, in the order they are
/// named: the three retention trims and the objects.
pub const VACUUMED_TABLES: [&str; 4] = [
    "leasehold_changes",
    "leasehold_events",
    "leasehold_objects",
    "leasehold_tenures",
];

/// `[store]`: how long the event log and the change stream are kept, and
/// how many tenures of each lease; trimmed in the background by
/// this module. Read at start; a reload does not change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Events and object changes committed longer ago than this are
    /// deleted; a reader behind them is told to re-list.
    pub event_retention: Duration,
    /// The newest tenures kept per lease (the live one is never deleted,
    /// whatever its rank).
    pub tenure_retention: u64,
}

/// Default `[store] event_retention`: a week. Long enough that a host or
/// an API reader down over a weekend resumes where it stopped instead of
/// re-listing, short enough that the log of a busy cluster stays a
/// bounded, small share of the database.
pub const DEFAULT_EVENT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Bounds of `[store] event_retention`: at least a minute (a reader that
/// falls further behind than that re-lists), at most ten years.
pub const MIN_EVENT_RETENTION: Duration = Duration::from_secs(60);
/// See [`MIN_EVENT_RETENTION`].
pub const MAX_EVENT_RETENTION: Duration = Duration::from_secs(3650 * 24 * 3600);
/// Default `[store] tenure_retention`: as deep as the history API pages.
pub const DEFAULT_TENURE_RETENTION: u64 = 1000;
/// Most `[store] tenure_retention` allowed.
pub const MAX_TENURE_RETENTION: u64 = 1_000_000;

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            event_retention: DEFAULT_EVENT_RETENTION,
            tenure_retention: DEFAULT_TENURE_RETENTION,
        }
    }
}

/// What one trim keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Events and changes older than this are trimmed.
    pub event_retention: Duration,
    /// Newest tenures kept per lease (at least 1; the live one is always
    /// kept).
    pub tenure_retention: u64,
    /// Most rows deleted per table in one batch.
    pub batch: usize,
}

impl Policy {
    /// The configured policy, in batches of [`TRIM_BATCH`].
    pub fn from_config(config: &StoreConfig) -> Self {
        Self {
            event_retention: config.event_retention,
            tenure_retention: config.tenure_retention.max(1),
            batch: TRIM_BATCH,
        }
    }
}

/// What one batch (or one round) trimmed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Events deleted.
    pub events: u64,
    /// Object changes deleted.
    pub changes: u64,
    /// Tenures deleted.
    pub tenures: u64,
    /// Another host holds the cluster's retention lock: nothing was tried.
    pub skipped: bool,
    /// Tables vacuumed at the round's end (PostgreSQL).
    pub vacuumed: u64,
}

impl Trimmed {
    /// Rows deleted, all tables together.
    pub fn total(&self) -> u64 {
        self.events + self.changes + self.tenures
    }

    fn add(&mut self, other: Trimmed) {
        self.events += other.events;
        self.changes += other.changes;
        self.tenures += other.tenures;
        self.skipped |= other.skipped;
        self.vacuumed += other.vacuumed;
    }

    /// Whether some table had a full batch (more may be left).
    fn full(&self, batch: usize) -> bool {
        let batch = batch as u64;
        self.events >= batch || self.changes >= batch || self.tenures >= batch
    }
}

/// Trim `cluster` until nothing old is left, batch after batch with
/// [`TRIM_PAUSE`] between them; stops early when `stop` turns true.
pub async fn trim_round(
    store: &dyn super::Store,
    cluster: &str,
    policy: &Policy,
    stop: &watch::Receiver<bool>,
) -> Result<Trimmed, StoreError> {
    let mut total = Trimmed::default();
    loop {
        let batch = store.trim(cluster, policy).await?;
        total.add(batch);
        if batch.skipped || !batch.full(policy.batch) || *stop.borrow() {
            return Ok(total);
        }
        tokio::time::sleep(TRIM_PAUSE).await;
    }
}

/// The background trimmer of one host: a round every [`TRIM_INTERVAL`]
/// until `stop` turns true. Failures are logged and retried next round.
pub async fn run(
    store: std::sync::Arc<dyn super::Store>,
    cluster: String,
    policy: Policy,
    mut stop: watch::Receiver<bool>,
) {
    tracing::info!(
        cluster,
        event_retention = %humantime::format_duration(policy.event_retention),
        tenure_retention = policy.tenure_retention,
        "retention trimmer started"
    );
    loop {
        if *stop.borrow() {
            return;
        }
        match trim_round(store.as_ref(), &cluster, &policy, &stop).await {
            Ok(trimmed) if trimmed.total() > 0 => tracing::info!(
                cluster,
                events = trimmed.events,
                changes = trimmed.changes,
                tenures = trimmed.tenures,
                vacuumed = trimmed.vacuumed,
                "trimmed what retention no longer keeps"
            ),
            Ok(trimmed) if trimmed.vacuumed > 0 => tracing::info!(
                cluster,
                vacuumed = trimmed.vacuumed,
                "vacuumed store tables with many dead rows"
            ),
            Ok(trimmed) if trimmed.skipped => tracing::debug!(
                cluster,
                "another host is trimming this cluster; skipping this round"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(cluster, %e, "retention trim failed; retrying next round"),
        }
        tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep(TRIM_INTERVAL) => {}
        }
    }
}

const TRY_LOCK_SQL: &str = "SELECT pg_try_advisory_xact_lock($1::int4, hashtext($2::text))";

const FLOORS_SQL: &str = "
SELECT events_floor, changes_floor FROM leasehold_retention WHERE cluster = $1::text";

/// The oldest events above the floor and below the mark, and whether each
/// is older than the retention (by the database's clock).
const OLD_EVENTS_SQL: &str = "
SELECT seq, at < now() - make_interval(secs => $4::float8)
  FROM leasehold_events
 WHERE cluster = $1::text AND seq > $2::int8 AND seq <= $3::int8
 ORDER BY seq
 LIMIT $5::int8";

/// Like [`OLD_EVENTS_SQL`], for the change stream.
const OLD_CHANGES_SQL: &str = "
SELECT position, at < now() - make_interval(secs => $4::float8)
  FROM leasehold_changes
 WHERE cluster = $1::text AND position > $2::int8 AND position <= $3::int8
 ORDER BY position
 LIMIT $5::int8";

const RAISE_EVENTS_FLOOR_SQL: &str = "
INSERT INTO leasehold_retention AS r (cluster, events_floor) VALUES ($1::text, $2::int8)
ON CONFLICT (cluster) DO UPDATE
   SET events_floor = greatest(r.events_floor, EXCLUDED.events_floor),
       trimmed_at = clock_timestamp()";

const RAISE_CHANGES_FLOOR_SQL: &str = "
INSERT INTO leasehold_retention AS r (cluster, changes_floor) VALUES ($1::text, $2::int8)
ON CONFLICT (cluster) DO UPDATE
   SET changes_floor = greatest(r.changes_floor, EXCLUDED.changes_floor),
       trimmed_at = clock_timestamp()";

const DELETE_EVENTS_SQL: &str = "
DELETE FROM leasehold_events WHERE cluster = $1::text AND seq > $2::int8 AND seq <= $3::int8";

const DELETE_CHANGES_SQL: &str = "
DELETE FROM leasehold_changes
 WHERE cluster = $1::text AND position > $2::int8 AND position <= $3::int8";

/// Tenures beyond the newest `$2` of their lease, at most `$3`, never the
/// lease's live one (left out before the limit, so a batch is never spent
/// on it).
const DELETE_TENURES_SQL: &str = "
DELETE FROM leasehold_tenures t
 USING (SELECT r.lease, r.epoch
          FROM (SELECT lease, epoch,
                       row_number() OVER (PARTITION BY lease ORDER BY epoch DESC) AS rank
                  FROM leasehold_tenures
                 WHERE cluster = $1::text) AS r
         WHERE r.rank > $2::int8
           AND NOT EXISTS (SELECT 1 FROM leasehold_leases l
                            WHERE l.cluster = $1::text AND l.name = r.lease
                              AND l.epoch = r.epoch)
         ORDER BY r.lease, r.epoch
         LIMIT $3::int8) AS d
 WHERE t.cluster = $1::text AND t.lease = d.lease AND t.epoch = d.epoch";

/// Which of `$1` (table names, resolved like the store's statements) have
/// dead rows enough to vacuum: the server's count plus `$2` (the rows this
/// batch just deleted from each, which the count may not show yet) reach
/// `$3` and a fifth of the live rows.
const DEAD_ROWS_SQL: &str = "
SELECT t.name
  FROM unnest($1::text[], $2::int8[]) AS t(name, deleted)
  JOIN pg_stat_user_tables s ON s.relid = to_regclass(t.name)
 WHERE s.n_dead_tup + t.deleted >= greatest($3::int8, s.n_live_tup / 5)
 ORDER BY t.name";

/// One batch on PostgreSQL, in one transaction: the retention lock (or
/// nothing, `skipped`), then for each stream the oldest run of positions
/// above its floor that are all past the retention and below the
/// high-water mark, at most `policy.batch`: the floor raised to the last of
/// them and the rows deleted; then at most `policy.batch` tenures. A batch
/// that was not full ends its round: after its commit, the store tables
/// with many dead rows are vacuumed (see the module documentation).
///
/// Every statement goes through [`Database::prepare`], so behind a
/// transaction pooler they run unnamed like the rest of the host's.
///
/// Like every write, a trim goes only to the database this host verified
/// (`pin`, when the store is pinned): checked inside the trim's own
/// transaction, before anything is deleted.
pub(crate) async fn trim_postgres(
    db: &Database,
    pin: Option<&crate::authority::WritePin>,
    cluster: &str,
    policy: &Policy,
) -> Result<Trimmed, StoreError> {
    let unavailable = |e: crate::db::DbError| {
        StoreError::Unavailable(format!("retention trim of cluster {cluster}: {e}"))
    };
    let mut client = db.client().await.map_err(unavailable)?;
    let secs = policy.event_retention.as_secs_f64();
    let batch = i64::try_from(policy.batch).unwrap_or(i64::MAX);
    let keep = i64::try_from(policy.tenure_retention.max(1)).unwrap_or(i64::MAX);
    // The high-water mark by an earlier statement than the rows it bounds
    // (see `postgres_feed`); read before the transaction, it can only be
    // lower than the mark at the deletes, never past a position in flight.
    let mark = bounded(db, async {
        let statement = db
            .prepare(&client, super::postgres_feed::HIGH_WATER_SQL)
            .await?;
        super::postgres_feed::high_water(&client, &statement).await
    })
    .await
    .map_err(unavailable)?;
    let mark = i64::try_from(mark.high_water).unwrap_or(i64::MAX);
    let refused = bounded(db, async {
        let tx = client.transaction().await?;
        let try_lock = db.prepare(&tx, TRY_LOCK_SQL).await?;
        let floors = db.prepare(&tx, FLOORS_SQL).await?;
        let tenures = db.prepare(&tx, DELETE_TENURES_SQL).await?;
        if let Some(pin) = pin {
            let identity = db.prepare(&tx, super::postgres::DATABASE_ID_SQL).await?;
            let row = identity.query_one(tx.client(), &[]).await?;
            if let Some(problems) = pin.refusal(&super::postgres::write_target(&row)) {
                tx.rollback().await?;
                return Ok(Err(problems));
            }
        }
        let locked: bool = try_lock
            .query_one(tx.client(), &[&LOCK_KEY, &cluster])
            .await?
            .get(0);
        if !locked {
            tx.rollback().await?;
            return Ok(Ok(Trimmed {
                skipped: true,
                ..Trimmed::default()
            }));
        }
        let (events_floor, changes_floor) = match floors.query_opt(tx.client(), &[&cluster]).await?
        {
            Some(row) => (row.get::<_, i64>(0), row.get::<_, i64>(1)),
            None => (0, 0),
        };
        let mut trimmed = Trimmed::default();
        for (floor, select, raise, delete, count) in [
            (
                events_floor,
                OLD_EVENTS_SQL,
                RAISE_EVENTS_FLOOR_SQL,
                DELETE_EVENTS_SQL,
                &mut trimmed.events,
            ),
            (
                changes_floor,
                OLD_CHANGES_SQL,
                RAISE_CHANGES_FLOOR_SQL,
                DELETE_CHANGES_SQL,
                &mut trimmed.changes,
            ),
        ] {
            let rows = db
                .prepare(&tx, select)
                .await?
                .query(tx.client(), &[&cluster, &floor, &mark, &secs, &batch])
                .await?;
            // The run of old rows from the floor up, stopping at the first
            // one still kept: positions are taken before commit, so `at`
            // is not strictly ordered by position, and nothing above a
            // kept row is trimmed.
            let Some(new_floor) = rows
                .iter()
                .take_while(|r| r.get::<_, Option<bool>>(1).unwrap_or(false))
                .map(|r| r.get::<_, i64>(0))
                .last()
            else {
                continue;
            };
            db.prepare(&tx, raise)
                .await?
                .execute(tx.client(), &[&cluster, &new_floor])
                .await?;
            *count = db
                .prepare(&tx, delete)
                .await?
                .execute(tx.client(), &[&cluster, &floor, &new_floor])
                .await?;
        }
        trimmed.tenures = tenures
            .execute(tx.client(), &[&cluster, &keep, &batch])
            .await?;
        tx.commit().await?;
        Ok::<_, tokio_postgres::Error>(Ok(trimmed))
    })
    .await
    .map_err(unavailable)?;
    let mut trimmed = refused.map_err(|problems| {
        StoreError::Unavailable(format!(
            "retention trim of cluster {cluster}: database {} is not the one this host \
             verified, or cannot take writes: {problems}; refusing to trim",
            db.endpoint()
        ))
    })?;
    if !trimmed.skipped && !trimmed.full(policy.batch) {
        trimmed.vacuumed = vacuum(db, client, &trimmed).await.map_err(|e| {
            StoreError::Unavailable(format!("retention trim of cluster {cluster}: {e}"))
        })?;
    }
    Ok(trimmed)
}

/// The end of a round: `VACUUM (SKIP_LOCKED, ANALYZE)` of the store tables
/// with dead rows enough (counting what `trimmed` just deleted), in one
/// statement outside any transaction. Returns how many were named.
async fn vacuum(
    db: &Database,
    client: deadpool_postgres::Object,
    trimmed: &Trimmed,
) -> Result<u64, crate::db::DbError> {
    let deleted: Vec<i64> = VACUUMED_TABLES
        .iter()
        .map(|table| match *table {
            "leasehold_changes" => trimmed.changes,
            "leasehold_events" => trimmed.events,
            "leasehold_tenures" => trimmed.tenures,
            _ => 0,
        })
        .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
        .collect();
    let names: Vec<String> = bounded(db, async {
        let statement = db.prepare(&client, DEAD_ROWS_SQL).await?;
        statement
            .query(
                &client,
                &[&&VACUUMED_TABLES[..], &deleted, &VACUUM_MIN_DEAD],
            )
            .await
    })
    .await?
    .iter()
    .map(|row| row.get::<_, String>(0))
    .collect();
    // Only names of the fixed list go into the statement's text.
    let tables: Vec<&str> = VACUUMED_TABLES
        .into_iter()
        .filter(|table| names.iter().any(|name| name == table))
        .collect();
    if tables.is_empty() {
        return Ok(0);
    }
    let sql = format!("VACUUM (SKIP_LOCKED, ANALYZE) {}", tables.join(", "));
    match tokio::time::timeout(VACUUM_LIMIT, client.batch_execute(&sql)).await {
        Ok(done) => done.map_err(|e| db.unavailable(e))?,
        Err(_) => {
            // Still running, or the connection is gone: never hand it to
            // another caller.
            drop(deadpool_postgres::Object::take(client));
            return Err(db.unavailable(format!(
                "VACUUM of {} gave no answer within {}",
                tables.join(", "),
                humantime::format_duration(VACUUM_LIMIT)
            )));
        }
    }
    Ok(tables.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{PostgresStore, Store};
    use crate::testing::TestDatabase;

    async fn epochs(db: &Database, lease: &str) -> Vec<i64> {
        db.client()
            .await
            .unwrap()
            .query(
                "SELECT epoch FROM leasehold_tenures WHERE cluster = 'c1' AND lease = $1 \
                 ORDER BY epoch",
                &[&lease],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// Tenures 1..=`last` of `lease`, the lease row at `live`.
    async fn tenures(db: &Database, lease: &str, last: i64, live: i64) {
        let client = db.client().await.unwrap();
        client
            .execute(
                "INSERT INTO leasehold_leases (cluster, name, holder, epoch, acquired_at, \
                 renewed_at, expires_at) VALUES ('c1', $1, 'h', $2, now(), now(), now())",
                &[&lease, &live],
            )
            .await
            .unwrap();
        client
            .execute(
                "INSERT INTO leasehold_tenures (cluster, lease, epoch, holder, endpoint, \
                 acquired_at, ended_at, end_reason) \
                 SELECT 'c1', $1, e, 'h', 'x', now(), now(), 'released' \
                   FROM generate_series(1::int8, $2::int8) AS e",
                &[&lease, &last],
            )
            .await
            .unwrap();
    }

    /// Tenure history keeps the newest `tenure_retention` of each lease and
    /// the live one whatever its rank, trimmed a batch at a time.
    #[tokio::test]
    async fn tenures_keep_the_newest_and_the_live_one_in_batches() {
        let test = TestDatabase::create().await;
        let db = test.database(2);
        let store = PostgresStore::new(db.clone());
        // `a`'s lease row names epoch 3: not the newest, but the one a
        // holder may still write under.
        tenures(&db, "a", 8, 3).await;
        tenures(&db, "b", 2, 2).await;
        let policy = Policy {
            event_retention: Duration::from_secs(3600),
            tenure_retention: 2,
            batch: 3,
        };
        let first = store.trim("c1", &policy).await.unwrap();
        assert_eq!(first.tenures, 3);
        let second = store.trim("c1", &policy).await.unwrap();
        assert_eq!(second.tenures, 2);
        let third = store.trim("c1", &policy).await.unwrap();
        assert_eq!(third.tenures, 0);
        assert_eq!(epochs(&db, "a").await, [3, 7, 8]);
        assert_eq!(epochs(&db, "b").await, [1, 2]);
    }

    /// Manual `VACUUM`s and `ANALYZE`s each of `tables` has had, in order.
    async fn maintenance(db: &Database, tables: &[&str]) -> Vec<(i64, i64)> {
        let client = db.client().await.unwrap();
        let mut counts = Vec::new();
        for table in tables {
            let row = client
                .query_one(
                    "SELECT vacuum_count, analyze_count FROM pg_stat_user_tables \
                     WHERE relid = to_regclass($1::text)",
                    &[table],
                )
                .await
                .unwrap();
            counts.push((row.get(0), row.get(1)));
        }
        counts
    }

    /// `objects` tasks created and deleted in one transaction of a fresh
    /// session, whose statistics (the dead rows) are flushed as it commits.
    async fn churn(test: &TestDatabase, objects: i64) {
        let (client, connection) = tokio_postgres::connect(test.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        let connection = tokio::spawn(connection);
        client
            .batch_execute(&format!(
                "BEGIN; \
                 SELECT pg_stat_force_next_flush(); \
                 INSERT INTO leasehold_objects (cluster, kind, name, version, value, updated_at) \
                 SELECT 'c1', 'tasks', 'task-' || n, n, '{{\"status\":\"pending\"}}', now() \
                   FROM generate_series(1, {objects}) AS n; \
                 DELETE FROM leasehold_objects WHERE cluster = 'c1' AND kind = 'tasks'; \
                 COMMIT"
            ))
            .await
            .unwrap();
        drop(client);
        connection.await.unwrap().unwrap();
    }

    /// A round's end vacuums (and analyzes) the store tables whose dead
    /// rows reach the threshold, counting what the batch itself deleted:
    /// the events it trimmed and the objects a workload created and
    /// deleted. Tables with few dead rows are left to autovacuum. The same
    /// in both pooler modes (behind a transaction pooler every statement is
    /// unnamed).
    #[tokio::test]
    async fn a_rounds_end_vacuums_the_tables_with_many_dead_rows() {
        for pooler in [crate::db::Pooler::None, crate::db::Pooler::Transaction] {
            let test = TestDatabase::create().await;
            let db = test.database(2).with_pooler(pooler);
            let store = PostgresStore::new(db.clone());
            let old = VACUUM_MIN_DEAD + 200;
            let client = db.client().await.unwrap();
            client
                .batch_execute(&format!(
                    "SELECT setval('leasehold_positions', {old}); \
                     INSERT INTO leasehold_events (cluster, seq, revision, at, kind, name, reason, message) \
                     SELECT 'c1', n, n, now() - interval '2 hours', 'tasks', 't', 'Assigned', '' \
                       FROM generate_series(1, {old}) AS n"
                ))
                .await
                .unwrap();
            // Whatever the server's autovacuum does, it stays out of these
            // counts.
            for table in [
                "leasehold_changes",
                "leasehold_events",
                "leasehold_objects",
                "leasehold_tenures",
            ] {
                client
                    .batch_execute(&format!(
                        "ALTER TABLE {table} SET (autovacuum_enabled = false)"
                    ))
                    .await
                    .unwrap();
            }
            drop(client);
            churn(&test, VACUUM_MIN_DEAD + 500).await;
            tenures(&db, "a", 3, 3).await;
            let tables = [
                "leasehold_changes",
                "leasehold_events",
                "leasehold_objects",
                "leasehold_tenures",
            ];
            assert_eq!(maintenance(&db, &tables).await, [(0, 0); 4]);
            let policy = Policy {
                event_retention: Duration::from_secs(3600),
                tenure_retention: 1,
                batch: 10_000,
            };
            let trimmed = store.trim("c1", &policy).await.unwrap();
            assert_eq!(
                (trimmed.events, trimmed.tenures, trimmed.vacuumed),
                (old as u64, 2, 2),
                "{pooler:?}"
            );
            assert_eq!(
                maintenance(&db, &tables).await,
                [(0, 0), (1, 1), (1, 1), (0, 0)],
                "{pooler:?}: events and objects vacuumed and analyzed, nothing else"
            );
        }
    }

    /// Below the threshold nothing is vacuumed: a server whose autovacuum
    /// keeps up gets no extra work.
    #[tokio::test]
    async fn few_dead_rows_are_left_to_autovacuum() {
        let test = TestDatabase::create().await;
        let db = test.database(2);
        let store = PostgresStore::new(db.clone());
        churn(&test, VACUUM_MIN_DEAD / 10).await;
        tenures(&db, "a", 5, 5).await;
        let policy = Policy {
            event_retention: Duration::from_secs(3600),
            tenure_retention: 1,
            batch: 100,
        };
        let trimmed = store.trim("c1", &policy).await.unwrap();
        assert_eq!((trimmed.tenures, trimmed.vacuumed), (4, 0));
        assert_eq!(
            maintenance(&db, &["leasehold_objects", "leasehold_tenures"]).await,
            [(0, 0), (0, 0)]
        );
    }

    /// A store pinned to another database (its connection string now
    /// reaches a copy, say) deletes nothing there: the trim is refused like
    /// a write. Pinned to the database it reaches, it trims.
    #[tokio::test]
    async fn a_pinned_store_trims_only_the_database_it_was_pinned_to() {
        let test = TestDatabase::create().await;
        let db = test.database(2);
        tenures(&db, "a", 5, 5).await;
        let policy = Policy {
            event_retention: Duration::from_secs(3600),
            tenure_retention: 1,
            batch: 10,
        };
        let elsewhere = PostgresStore::new(db.clone());
        elsewhere.pin_database(uuid::Uuid::new_v4());
        match elsewhere.trim("c1", &policy).await {
            Err(StoreError::Unavailable(reason)) => {
                assert!(reason.contains("refusing to trim"), "{reason}")
            }
            other => panic!("a trim reached a database other than the pinned one: {other:?}"),
        }
        assert_eq!(epochs(&db, "a").await, [1, 2, 3, 4, 5]);
        let actual: uuid::Uuid = db
            .client()
            .await
            .unwrap()
            .query_one("SELECT id FROM leasehold_database", &[])
            .await
            .unwrap()
            .get(0);
        let here = PostgresStore::new(db.clone());
        here.pin_database(actual);
        assert_eq!(here.trim("c1", &policy).await.unwrap().tenures, 4);
        assert_eq!(epochs(&db, "a").await, [5]);
    }

    /// While another session holds the cluster's retention lock, a host
    /// trims nothing and says it skipped.
    #[tokio::test]
    async fn one_host_trims_a_cluster_at_a_time() {
        let test = TestDatabase::create().await;
        let db = test.database(2);
        let store = PostgresStore::new(db.clone());
        tenures(&db, "a", 3, 3).await;
        let policy = Policy {
            event_retention: Duration::from_secs(3600),
            tenure_retention: 1,
            batch: 10,
        };
        let mut other = db.client().await.unwrap();
        let tx = other.transaction().await.unwrap();
        tx.execute(TRY_LOCK_SQL, &[&LOCK_KEY, &"c1"]).await.unwrap();
        let skipped = store.trim("c1", &policy).await.unwrap();
        assert!(skipped.skipped);
        assert_eq!(skipped.total(), 0);
        tx.rollback().await.unwrap();
        let trimmed = store.trim("c1", &policy).await.unwrap();
        assert!(!trimmed.skipped);
        assert_eq!(trimmed.tenures, 2);
        assert_eq!(epochs(&db, "a").await, [3]);
    }

    /// A round takes batch after batch until nothing old is left; the
    /// background loop trims at start and ends when told to stop.
    #[tokio::test]
    async fn a_round_trims_every_batch_and_the_loop_stops_when_told() {
        let authority = crate::authority::memory::MemoryAuthority::new();
        let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(crate::store::MemoryStore::new(
            std::sync::Arc::new(authority),
        ));
        for name in ["t1", "t2", "t3", "t4", "t5"] {
            let task = crate::store::ObjectKey {
                kind: "tasks".into(),
                name: name.into(),
            };
            store.put("c1", &task, "{}", None).await.unwrap();
        }
        let policy = Policy {
            event_retention: Duration::ZERO,
            tenure_retention: 1,
            batch: 2,
        };
        let (stop_tx, stop) = watch::channel(false);
        let round = trim_round(store.as_ref(), "c1", &policy, &stop)
            .await
            .unwrap();
        assert_eq!((round.events, round.changes), (5, 5));

        store
            .put(
                "c1",
                &crate::store::ObjectKey {
                    kind: "tasks".into(),
                    name: "t6".into(),
                },
                "{}",
                None,
            )
            .await
            .unwrap();
        let last = store.events("c1", 0, 10).await.unwrap_err();
        let task = tokio::spawn(run(store.clone(), "c1".into(), policy, stop));
        // The first round runs at once and trims t6's event: the floor
        // rises past where it was. (Trimming wakes no watcher: the test
        // yields to the trimmer until it shows, bounded by WAIT.)
        let StoreError::TooOld {
            oldest_kept: before,
            ..
        } = last
        else {
            panic!("{last:?}")
        };
        tokio::time::timeout(crate::store::conformance::WAIT, async {
            loop {
                if let Err(StoreError::TooOld { oldest_kept, .. }) = store.events("c1", 0, 10).await
                    && oldest_kept > before
                {
                    return;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the trimmer's first round did not trim t6"));
        stop_tx.send(true).unwrap();
        tokio::time::timeout(crate::store::conformance::WAIT, task)
            .await
            .expect("the trimmer did not stop when told")
            .unwrap();
    }
}
