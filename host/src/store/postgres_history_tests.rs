//! PostgreSQL: positions and versions across a failover that lost commits,
//! and across an adopted copy (migration 19).
//!
//! A failover is simulated in one database, as a promoted standby that
//! lacked the former primary's last commits would be: the rows those
//! commits wrote are taken back out, the sequence is set to what the
//! standby replayed (its last WAL-logged value, up to 32 numbers ahead of
//! the last one it saw used), and the position floor moves up a bucket,
//! as a promotion to the next timeline moves it. (`tests/tests/failover.rs`
//! does it for real, with a standby of its own.)

use std::collections::BTreeSet;

use tokio_postgres::NoTls;

use crate::db::Database;
use crate::testing::TestDatabase;

use super::conformance::{WAIT, key};
use super::{PostgresStore, Store, StoreError, TooOldCause};

const CLUSTER: &str = "c1";

/// The first number a commit may take once the floor moved up a bucket
/// from 0 (a database on its first timeline, failed over once).
const NEXT_FLOOR: u64 = (1 << 44) + 1;

async fn one(db: &Database, sql: &str) -> i64 {
    db.client()
        .await
        .unwrap()
        .query_one(sql, &[])
        .await
        .unwrap()
        .get(0)
}

/// The last number the sequence handed out.
async fn head(db: &Database) -> u64 {
    one(
        db,
        "SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END FROM leasehold_positions",
    )
    .await as u64
}

/// Every number the database holds: positions, event seqs, revisions and
/// versions.
async fn numbers(db: &Database) -> BTreeSet<u64> {
    db.client()
        .await
        .unwrap()
        .query(
            "SELECT position FROM leasehold_changes UNION SELECT revision FROM leasehold_changes
             UNION SELECT version FROM leasehold_changes UNION SELECT seq FROM leasehold_events
             UNION SELECT revision FROM leasehold_events UNION SELECT version FROM leasehold_objects",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>(0) as u64)
        .collect()
}

/// Keep the objects as they are now, to be put back by [`fail_over`].
async fn keep_objects(db: &Database) {
    db.client()
        .await
        .unwrap()
        .batch_execute("CREATE TABLE kept_objects AS SELECT * FROM leasehold_objects")
        .await
        .unwrap();
}

/// A failover to a standby that replayed everything up to the sequence's
/// head `replayed` (and the objects [`keep_objects`] kept), and nothing
/// after: the rows written since are gone, the sequence shows what the
/// standby's WAL logged (32 numbers ahead), and the floor is the next
/// timeline's.
async fn fail_over(db: &Database, replayed: u64) {
    db.client()
        .await
        .unwrap()
        .batch_execute(&format!(
            "DELETE FROM leasehold_changes WHERE position > {replayed};
             DELETE FROM leasehold_events WHERE seq > {replayed};
             DELETE FROM leasehold_objects;
             INSERT INTO leasehold_objects SELECT * FROM kept_objects;
             SELECT setval('leasehold_positions', {replayed} + 32);
             UPDATE leasehold_database SET position_base_bucket = position_base_bucket + 1;"
        ))
        .await
        .unwrap();
}

/// `result` is a cursor the store never issued, resuming after `resume`.
#[track_caller]
fn assert_not_issued<T: std::fmt::Debug>(result: Result<T, StoreError>, resume: u64) {
    match result {
        Err(StoreError::TooOld {
            cause: TooOldCause::NotIssued,
            oldest_kept,
            ..
        }) => assert_eq!(oldest_kept - 1, resume, "where to resume"),
        other => panic!("expected TooOld (not issued), got {other:?}"),
    }
}

/// Positions, versions and event seqs a former primary issued are never
/// issued again on the standby that replaced it, and a reader (or a
/// writer with `If-Match`) holding one is told, never served a different
/// change under the same number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_lost_commits_never_issues_a_number_again() {
    let test = TestDatabase::create().await;
    let db = test.database(4);
    let store = PostgresStore::new(db.clone());
    // Replayed by the standby: five tasks.
    for i in 0..5 {
        let t = key("tasks", &format!("t{i}"));
        store.put(CLUSTER, &t, "1", None).await.unwrap();
    }
    keep_objects(&db).await;
    let replayed = head(&db).await;
    let kept = *numbers(&db).await.last().unwrap();
    // Lost with the former primary: forty writes of t1, a new task, t0's
    // deletion (over a hundred numbers: more than the 32 the standby's
    // sequence logged ahead).
    let t1 = key("tasks", "t1");
    let mut lost = Vec::new();
    for n in 0..40 {
        lost.push(
            store
                .put(CLUSTER, &t1, &n.to_string(), None)
                .await
                .unwrap()
                .version,
        );
    }
    store
        .put(CLUSTER, &key("tasks", "t5"), "1", None)
        .await
        .unwrap();
    store
        .delete(CLUSTER, &key("tasks", "t0"), None)
        .await
        .unwrap();
    let issued = numbers(&db).await;
    // A reader followed the former primary to its end.
    let cursor = store.changes(CLUSTER, &[], 0, 500).await.unwrap().through;
    let seq_cursor = store
        .events(CLUSTER, 0, 500)
        .await
        .unwrap()
        .last()
        .unwrap()
        .seq;
    assert!(cursor > replayed + 32 && seq_cursor > replayed + 32);

    fail_over(&db, replayed).await;
    // Before anything is written on the new primary, the reader's cursor
    // is beyond the last position it handed out: told to re-list, and to
    // resume after its mark (its head: nothing is in flight).
    assert_not_issued(
        store.changes(CLUSTER, &[], cursor, 100).await,
        replayed + 32,
    );
    assert_not_issued(store.events(CLUSTER, seq_cursor, 100).await, replayed + 32);

    // The first commit takes numbers above the floor, above every number
    // the former primary issued.
    let first = store.put(CLUSTER, &t1, "\"after\"", None).await.unwrap();
    assert!(first.version >= NEXT_FLOOR, "{}", first.version);
    let now = numbers(&db).await;
    for n in now.difference(&issued) {
        assert!(
            *n > *issued.last().unwrap(),
            "{n} is not above every number issued before the failover"
        );
    }
    // The gap is on record: what was kept, and the floor.
    let (gap_kept, gap_floor) = {
        let row = db
            .client()
            .await
            .unwrap()
            .query_one("SELECT kept, floor FROM leasehold_position_gaps", &[])
            .await
            .unwrap();
        (row.get::<_, i64>(0) as u64, row.get::<_, i64>(1) as u64)
    };
    assert_eq!((gap_kept, gap_floor), (kept, NEXT_FLOOR));

    // The reader's cursor, and any above what was kept (the numbers the
    // standby's sequence logged ahead included), are from a history the
    // database no longer has: re-list, and resume after what was kept.
    for stale in [cursor, kept + 1, replayed + 32, NEXT_FLOOR - 2] {
        assert_not_issued(store.changes(CLUSTER, &[], stale, 100).await, kept);
    }
    assert_not_issued(store.events(CLUSTER, seq_cursor, 100).await, kept);
    // From there, the reader reads exactly the new history.
    let page = store.changes(CLUSTER, &[], kept, 100).await.unwrap();
    let read: Vec<(String, u64)> = page
        .changes
        .iter()
        .map(|c| (c.name.clone(), c.version))
        .collect();
    assert_eq!(read, [("t1".to_string(), first.version)]);

    // A version of t1 the lost history gave never matches again: If-Match
    // with one is refused, however often t1 is written.
    for version in &lost {
        match store.put(CLUSTER, &t1, "\"again\"", Some(*version)).await {
            Err(StoreError::Conflict { .. }) => {}
            other => panic!("If-Match: {version} (lost) must conflict, got {other:?}"),
        }
    }
    for n in 0..40 {
        let v = store
            .put(CLUSTER, &t1, &n.to_string(), None)
            .await
            .unwrap()
            .version;
        assert!(!issued.contains(&v), "version {v} was issued before");
    }
}

/// The feed's values and a page's `through` belong to the history they
/// were read in: a value published before a failover is no bound on the
/// new primary, and the feed starts every watcher anew once it sees the
/// other history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_starts_anew_in_another_history() {
    let test = TestDatabase::create().await;
    let db = test.database(4);
    let store = PostgresStore::new(db.clone());
    let watcher = PostgresStore::new(db.clone());
    let mut feed = watcher.watch(CLUSTER);
    for i in 0..3 {
        let t = key("tasks", &format!("t{i}"));
        store.put(CLUSTER, &t, "1", None).await.unwrap();
    }
    keep_objects(&db).await;
    let replayed = head(&db).await;
    let kept = *numbers(&db).await.last().unwrap();
    for n in 0..40 {
        let t = key("tasks", &format!("lost{n}"));
        store.put(CLUSTER, &t, "1", None).await.unwrap();
    }
    let last = *numbers(&db).await.last().unwrap();
    // A local commit wakes the watcher's feed at once.
    watcher
        .put(CLUSTER, &key("tasks", "seen"), "1", None)
        .await
        .unwrap();
    let seen = tokio::time::timeout(WAIT, feed.wait_for(|&p| p > last))
        .await
        .expect("the feed published the former primary's positions")
        .map(|p| *p)
        .unwrap();

    fail_over(&db, replayed).await;
    // The published value is above the new primary's head: a read bounded
    // by it goes no further than the store's own mark.
    let page = store
        .changes_through(CLUSTER, &[], kept, seen, 100)
        .await
        .unwrap();
    assert!(page.changes.is_empty());
    assert!(
        page.through <= head(&db).await,
        "read through {} past the head {}",
        page.through,
        head(&db).await
    );

    // The watcher's next read finds the other history (the floor moved,
    // the head went back): its channel closes, and a new subscription
    // starts at the new history's values.
    let first = watcher
        .put(CLUSTER, &key("tasks", "after"), "1", None)
        .await
        .unwrap();
    let ended = tokio::time::timeout(WAIT, async {
        loop {
            if feed.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the feed's channel of the former history stays open"
    );
    let mut again = watcher.watch(CLUSTER);
    tokio::time::timeout(WAIT, again.wait_for(|&p| p > first.version))
        .await
        .expect("the new channel follows the new history")
        .unwrap();
}

/// A database made by the test (a template copy), dropped with this value.
struct Copy {
    admin_url: String,
    name: String,
}

impl Copy {
    /// A `CREATE DATABASE … TEMPLATE` copy of `of` (its sessions ended).
    async fn of(of: &TestDatabase) -> Self {
        let mut admin = url::Url::parse(of.url()).unwrap();
        let source = admin.path().trim_start_matches('/').to_string();
        admin.set_path("postgres");
        let admin_url = admin.to_string();
        let (client, connection) = tokio_postgres::connect(&admin_url, NoTls).await.unwrap();
        tokio::spawn(connection);
        let name = format!("leasehold_copy_{}", uuid::Uuid::new_v4().simple());
        client
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                &[&source],
            )
            .await
            .unwrap();
        client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {source}"))
            .await
            .unwrap();
        Self { admin_url, name }
    }

    fn database(&self) -> Database {
        let mut url = url::Url::parse(&self.admin_url).unwrap();
        url.set_path(&self.name);
        Database::new(url.as_str(), 4).unwrap()
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                if let Ok((client, connection)) = tokio_postgres::connect(&admin_url, NoTls).await {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// A copy adopted by the README's procedure (a restore replacing a lost
/// original) issues positions and versions above every number the
/// original issued, those it issued after the copy was taken included, and
/// a reader of the original is told to re-list there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_copy_issues_numbers_above_the_originals() {
    let original = TestDatabase::create().await;
    let t = key("tasks", "t");
    {
        let store = PostgresStore::new(original.database(1));
        store.put(CLUSTER, &t, "1", None).await.unwrap();
    }
    let copy = Copy::of(&original).await;
    // The original goes on after the copy was taken.
    let store = PostgresStore::new(original.database(4));
    for n in 0..20 {
        store.put(CLUSTER, &t, &n.to_string(), None).await.unwrap();
    }
    let cursor = store.changes(CLUSTER, &[], 0, 500).await.unwrap().through;
    let issued = numbers(&original.database(1)).await;

    let adopted = copy.database();
    adopted
        .client()
        .await
        .unwrap()
        .batch_execute(
            "UPDATE leasehold_database
                SET system_identifier = (SELECT system_identifier FROM pg_control_system()),
                    database_oid = (SELECT oid FROM pg_database WHERE datname = current_database()),
                    database_name = current_database();
             UPDATE leasehold_leases SET epoch = ((epoch >> 32) + 1) << 32, released = true;",
        )
        .await
        .unwrap();
    let kept = *numbers(&adopted).await.last().unwrap();
    let on_copy = PostgresStore::new(adopted.clone());
    let written = on_copy.put(CLUSTER, &t, "\"copy\"", None).await.unwrap();
    assert!(
        written.version > *issued.last().unwrap() && written.version >= NEXT_FLOOR,
        "version {} on the adopted copy; the original issued up to {}",
        written.version,
        issued.last().unwrap()
    );
    assert_not_issued(on_copy.changes(CLUSTER, &[], cursor, 100).await, kept);
}
