//! PostgreSQL-only store tests: fenced commits racing a takeover (checked
//! from the database's own record), lock ordering, the change feed across
//! processes (NOTIFY, reconnect, polling fallback), attribution and error
//! hygiene.

use std::collections::HashMap;
use std::sync::Arc;

use rand::Rng;
use tokio::sync::{Barrier, Mutex, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::authority::postgres::LOCK_LEASE;
use crate::db::Database;
use crate::fence::{Epoch, Fence, LeaseKey};
use crate::testing::TestDatabase;

use super::conformance::{Leases, WAIT, all_events, create, event, key, update};
use super::fixtures::PgLeases;
use super::plan::Batch;
use super::postgres::tests_hook::BeforeCommit;
use super::{Origin, PostgresStore, Store, StoreError};

const CLUSTER: &str = "c1";
const LEASE: &str = "ctl";

/// A grant as the authority makes it, in one transaction: lock the lease
/// row and the live tenure's row first, with the authority's own statement
/// (this waits for every fenced commit holding the tenure row),
/// note the event seqs visible at that moment (the grant's horizon: every
/// write of the old epoch must be among them; seqs are not commit order, so
/// no single number can say this), then move the
/// lease to the next epoch with `acquired_at` read *after* the lock, and
/// record the tenures.
async fn take_over(db: &Database, key: &LeaseKey, holder: &str) -> (Fence, Horizon) {
    take_over_held(db, key, holder, None).await
}

/// A test's hold on a grant: told when the grant has locked the lease row,
/// the grant goes on when `go` fires (or its sender is dropped).
struct GrantHold {
    locked: oneshot::Sender<()>,
    go: oneshot::Receiver<()>,
}

/// [`take_over`], holding the lease row locked after its first statement
/// until the test lets it go, if `hold` is given.
async fn take_over_held(
    db: &Database,
    key: &LeaseKey,
    holder: &str,
    hold: Option<GrantHold>,
) -> (Fence, Horizon) {
    let mut client = db.client().await.unwrap();
    let tx = client.transaction().await.unwrap();
    tx.query_one(LOCK_LEASE, &[&key.cluster, &key.name])
        .await
        .unwrap();
    if let Some(GrantHold { locked, go }) = hold {
        let _ = locked.send(());
        let _ = go.await;
    }
    let horizon: Horizon = tx
        .query(
            "SELECT seq FROM leasehold_events WHERE cluster = $1",
            &[&key.cluster],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>(0) as u64)
        .collect();
    let row = tx
        .query_one(
            "UPDATE leasehold_leases
                SET epoch = epoch + 1, holder = $3, acquired_at = clock_timestamp(),
                    renewed_at = clock_timestamp(),
                    expires_at = clock_timestamp() + interval '1 hour', released = false
              WHERE cluster = $1 AND name = $2
          RETURNING epoch, acquired_at",
            &[&key.cluster, &key.name, &holder],
        )
        .await
        .unwrap();
    let epoch: i64 = row.get(0);
    let acquired_at: chrono::DateTime<chrono::Utc> = row.get(1);
    tx.execute(
        "UPDATE leasehold_tenures SET ended_at = $4, end_reason = 'superseded'
          WHERE cluster = $1 AND lease = $2 AND epoch = $3",
        &[&key.cluster, &key.name, &(epoch - 1), &acquired_at],
    )
    .await
    .unwrap();
    tx.execute(
        "INSERT INTO leasehold_tenures (cluster, lease, epoch, holder, endpoint, acquired_at)
         VALUES ($1, $2, $3, $4, 'test', $5)",
        &[&key.cluster, &key.name, &epoch, &holder, &acquired_at],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let fence = Fence {
        key: key.clone(),
        epoch: Epoch(epoch as u64),
        holder: holder.into(),
    };
    (fence, horizon)
}

/// The event seqs a grant saw.
type Horizon = std::collections::BTreeSet<u64>;

/// Every way the record can show a write of epoch e landing after epoch
/// e+1 was granted:
/// - an event or object of epoch e stamped at or after the grant's
///   `acquired_at` (taken after the grant held the lease row);
/// - an event of epoch e that the grant did not see;
/// - a tenure whose write count disagrees with the commits attributed to it.
async fn stale_writes(db: &Database, horizons: &HashMap<u64, Horizon>) -> Vec<String> {
    let client = db.client().await.unwrap();
    let mut found = Vec::new();
    for row in client
        .query(
            "SELECT e.seq, e.epoch FROM leasehold_events e
               JOIN leasehold_tenures t
                 ON t.cluster = e.cluster AND t.lease = e.lease AND t.epoch = e.epoch + 1
              WHERE e.at >= t.acquired_at",
            &[],
        )
        .await
        .unwrap()
    {
        let (seq, epoch): (i64, i64) = (row.get(0), row.get(1));
        found.push(format!(
            "event {seq} of epoch {epoch} stamped after epoch {} was granted",
            epoch + 1
        ));
    }
    for row in client
        .query(
            "SELECT o.kind, o.name, o.epoch FROM leasehold_objects o
               JOIN leasehold_tenures t
                 ON t.cluster = o.cluster AND t.lease = o.lease AND t.epoch = o.epoch + 1
              WHERE o.updated_at >= t.acquired_at",
            &[],
        )
        .await
        .unwrap()
    {
        let (kind, name, epoch): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
        found.push(format!(
            "{kind}/{name} written by epoch {epoch} after epoch {} was granted",
            epoch + 1
        ));
    }
    for row in client
        .query(
            "SELECT seq, epoch FROM leasehold_events WHERE epoch IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
    {
        let (seq, epoch): (i64, i64) = (row.get(0), row.get(1));
        if let Some(horizon) = horizons.get(&(epoch as u64 + 1))
            && !horizon.contains(&(seq as u64))
        {
            found.push(format!(
                "event {seq} of epoch {epoch} committed after epoch {} was granted (its grant saw {} events)",
                epoch + 1,
                horizon.len()
            ));
        }
    }
    for row in client
        .query(
            "SELECT t.epoch, t.writes, count(DISTINCT e.revision)
               FROM leasehold_tenures t
               LEFT JOIN leasehold_events e
                 ON e.cluster = t.cluster AND e.lease = t.lease AND e.epoch = t.epoch
              GROUP BY t.epoch, t.writes
             HAVING t.writes <> count(DISTINCT e.revision)",
            &[],
        )
        .await
        .unwrap()
    {
        let (epoch, writes, commits): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        found.push(format!(
            "tenure {epoch} counts {writes} writes but made {commits} commits"
        ));
    }
    found
}

struct Fixture {
    _database: TestDatabase,
    db: Database,
    store: Arc<PostgresStore>,
    leases: PgLeases,
}

async fn fixture() -> Fixture {
    let database = TestDatabase::create().await;
    let db = database.database(8);
    Fixture {
        store: Arc::new(PostgresStore::new(db.clone())),
        leases: PgLeases { db: db.clone() },
        db,
        _database: database,
    }
}

/// Where a round of the race lets the takeover meet the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meeting {
    /// The commit has passed its fence check and holds its tenure row
    /// (paused just before `COMMIT`) when the takeover starts; it goes on
    /// after a random number of yields, while the grant queues on the row
    /// or is still on its way. It must land, below the grant's horizon.
    CommitFirst,
    /// The grant holds the lease and tenure rows (locked, not yet
    /// updated) when the commit starts; the grant goes on after a random number of yields,
    /// while the commit waits on the row or is still on its way. It must be
    /// refused.
    GrantFirst,
    /// Both start together, each after a random number of yields: either
    /// outcome, decided by the server.
    Free,
}

impl Meeting {
    const ALL: [Meeting; 3] = [Meeting::CommitFirst, Meeting::GrantFirst, Meeting::Free];
}

/// Yields before one side of a round goes on: enough to vary which
/// statement of the other side the server has reached.
const MAX_YIELDS: u32 = 4;

async fn random_yields() {
    let yields = rand::rng().random_range(0..MAX_YIELDS);
    for _ in 0..yields {
        tokio::task::yield_now().await;
    }
}

/// A task's result within [`WAIT`], or a failure naming it.
async fn joined<T>(task: JoinHandle<T>, what: &str) -> T {
    tokio::time::timeout(WAIT, task)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {WAIT:?}"))
        .unwrap_or_else(|e| panic!("{what} failed: {e}"))
}

/// Either side of the race, each a fenced commit in flight while another
/// holder takes over, over 200 rounds. Every round meets the two at a
/// different point ([`Meeting`]): a third with the commit past its fence
/// check, a third with the grant holding the lease and tenure rows, a third racing
/// freely. Both outcomes therefore happen (checked), and whichever happens,
/// no write of the old epoch lands after the new epoch was granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_lands_after_a_takeover_over_many_races() {
    const ROUNDS: usize = 200;
    let f = fixture().await;
    let lease = LeaseKey::new(CLUSTER, LEASE);
    let (paused_store, mut paused, resume) = paused_store(&f.db);
    let paused_store = Arc::new(paused_store);
    let mut fence = Leases::grant(&f.leases, CLUSTER, LEASE, "holder-1").await;
    let mut horizons = HashMap::new();
    let (mut landed, mut refused) = (0, 0);
    let mut free = (0, 0);
    for round in 0..ROUNDS {
        let meeting = Meeting::ALL[round % Meeting::ALL.len()];
        let object = key("tasks", &format!("t{round}"));
        let holder = format!("holder-{}", round + 2);
        let commit = |store: Arc<PostgresStore>, start: Option<Arc<Barrier>>| {
            let (fence, object) = (fence.clone(), object.clone());
            tokio::spawn(async move {
                if let Some(start) = start {
                    start.wait().await;
                    random_yields().await;
                }
                store
                    .commit_fenced(&fence, &[create(&object, "1")], &[event(&object, "Made")])
                    .await
            })
        };
        let grant = |hold: Option<GrantHold>, start: Option<Arc<Barrier>>| {
            let (db, lease, holder) = (f.db.clone(), lease.clone(), holder.clone());
            tokio::spawn(async move {
                if let Some(start) = start {
                    start.wait().await;
                    random_yields().await;
                }
                take_over_held(&db, &lease, &holder, hold).await
            })
        };
        let (written, (next, horizon)) = match meeting {
            Meeting::CommitFirst => {
                let writer = commit(Arc::clone(&paused_store), None);
                tokio::time::timeout(WAIT, paused.recv())
                    .await
                    .unwrap_or_else(|_| panic!("round {round}: the commit never reached COMMIT"))
                    .expect("the paused store is alive");
                let granting = grant(None, None);
                random_yields().await;
                tokio::time::timeout(WAIT, resume.send(()))
                    .await
                    .expect("the paused commit takes its go")
                    .expect("the paused commit waits for its go");
                let written = joined(writer, "the commit").await;
                (written, joined(granting, "the grant").await)
            }
            Meeting::GrantFirst => {
                let (locked_tx, locked) = oneshot::channel();
                let (go, go_rx) = oneshot::channel();
                let granting = grant(
                    Some(GrantHold {
                        locked: locked_tx,
                        go: go_rx,
                    }),
                    None,
                );
                tokio::time::timeout(WAIT, locked)
                    .await
                    .unwrap_or_else(|_| panic!("round {round}: the grant never locked the row"))
                    .expect("the grant reports its lock");
                let writer = commit(Arc::clone(&f.store), None);
                random_yields().await;
                let _ = go.send(());
                let written = joined(writer, "the commit").await;
                (written, joined(granting, "the grant").await)
            }
            Meeting::Free => {
                let start = Arc::new(Barrier::new(2));
                let writer = commit(Arc::clone(&f.store), Some(Arc::clone(&start)));
                let granting = grant(None, Some(start));
                let written = joined(writer, "the commit").await;
                (written, joined(granting, "the grant").await)
            }
        };
        assert_eq!(next.epoch.0, fence.epoch.0 + 1);
        let seen = horizon.clone();
        horizons.insert(next.epoch.0, horizon);
        match written {
            Ok(committed) => {
                assert_ne!(
                    meeting,
                    Meeting::GrantFirst,
                    "round {round}: a commit of epoch {} started after epoch {} held the lease and tenure rows, and landed",
                    fence.epoch.0,
                    next.epoch.0
                );
                assert!(
                    committed.event_seqs.iter().all(|seq| seen.contains(seq)),
                    "round {round}: {committed:?} is not among the events {seen:?} the grant it preceded saw"
                );
                landed += 1;
                if meeting == Meeting::Free {
                    free.0 += 1;
                }
            }
            Err(StoreError::Fenced { fence: stale, .. }) => {
                assert_ne!(
                    meeting,
                    Meeting::CommitFirst,
                    "round {round}: a commit past its fence check was refused (the grant did not wait for it)"
                );
                assert_eq!(stale, fence);
                assert_eq!(f.store.get(CLUSTER, &object).await.unwrap(), None);
                refused += 1;
                if meeting == Meeting::Free {
                    free.1 += 1;
                }
            }
            Err(e) => panic!("round {round} ({meeting:?}): {e}"),
        }
        fence = next;
    }
    println!(
        "{ROUNDS} races: {landed} commits landed before the takeover, {refused} were fenced \
         (racing freely: {} landed, {} fenced)",
        free.0, free.1
    );
    assert!(
        landed > 0 && refused > 0,
        "the race must show both outcomes: {landed} landed, {refused} fenced"
    );
    let stale = stale_writes(&f.db, &horizons).await;
    assert!(stale.is_empty(), "{stale:#?}");
    let events = all_events(&*f.store, CLUSTER).await;
    assert_eq!(events.len(), landed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_race_checker_catches_an_unfenced_write() {
    // Without this, the race test above could pass by checking nothing.
    let f = fixture().await;
    let lease = LeaseKey::new(CLUSTER, LEASE);
    let old = Leases::grant(&f.leases, CLUSTER, LEASE, "holder-1").await;
    let t = key("tasks", "t");
    let made = f
        .store
        .commit_fenced(&old, &[create(&t, "1")], &[event(&t, "Made")])
        .await
        .unwrap();
    let (_, horizon) = take_over(&f.db, &lease, "holder-2").await;
    let horizons = HashMap::from([(old.epoch.0 + 1, horizon)]);
    assert!(stale_writes(&f.db, &horizons).await.is_empty());
    // The same write without its fence check, after the takeover.
    let batch = Batch::fenced(
        &old,
        &[update(&t, made.revision, "2")],
        &[event(&t, "Late")],
    )
    .unwrap();
    f.store.commit(&batch, None).await.unwrap();
    let stale = stale_writes(&f.db, &horizons).await;
    assert!(
        stale.iter().any(|s| s.contains("stamped after epoch 2")),
        "{stale:#?}"
    );
    assert!(
        stale
            .iter()
            .any(|s| s.contains("tasks/t written by epoch 1")),
        "{stale:#?}"
    );
    assert!(
        stale.iter().any(|s| s.contains("committed after epoch 2")),
        "{stale:#?}"
    );
}

/// A store that pauses every commit just before `COMMIT`, and the handles
/// to observe and resume it.
fn paused_store(db: &Database) -> (PostgresStore, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (paused_tx, paused_rx) = mpsc::channel(1);
    let (resume_tx, resume_rx) = mpsc::channel(1);
    let mut store = PostgresStore::new(db.clone());
    store.before_commit = Some(BeforeCommit {
        paused: paused_tx,
        resume: Arc::new(Mutex::new(resume_rx)),
    });
    (store, paused_rx, resume_tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_waits_for_a_fenced_commit_in_flight() {
    let f = fixture().await;
    let lease = LeaseKey::new(CLUSTER, LEASE);
    let old = Leases::grant(&f.leases, CLUSTER, LEASE, "holder-1").await;
    let (store, mut paused, resume) = paused_store(&f.db);
    let store = Arc::new(store);
    let t = key("tasks", "t");
    let commit = {
        let (store, old, t) = (Arc::clone(&store), old.clone(), t.clone());
        tokio::spawn(async move {
            store
                .commit_fenced(&old, &[create(&t, "1")], &[event(&t, "Made")])
                .await
        })
    };
    tokio::time::timeout(WAIT, paused.recv())
        .await
        .unwrap_or_else(|_| panic!("the commit did not reach COMMIT within {WAIT:?}"))
        .expect("the commit reached COMMIT");

    // While the commit holds the tenure row (its count), a grant (which
    // locks the lease row and then the tenure row first, with the
    // authority's own statement) cannot take it: with a lock timeout it
    // gives up...
    let client = f.db.client().await.unwrap();
    client
        .batch_execute("BEGIN; SET LOCAL lock_timeout = '100ms'")
        .await
        .unwrap();
    let blocked = client
        .query_one(LOCK_LEASE, &[&CLUSTER, &LEASE])
        .await
        .expect_err("the grant must wait for the fenced commit");
    assert_eq!(
        blocked.code(),
        Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE),
        "{blocked}"
    );
    client.batch_execute("ROLLBACK").await.unwrap();
    // ...and without one it waits until the commit is done.
    let grant = {
        let (db, lease) = (f.db.clone(), lease.clone());
        tokio::spawn(async move { take_over(&db, &lease, "holder-2").await })
    };
    resume.send(()).await.unwrap();
    let committed = joined(commit, "the paused commit")
        .await
        .expect("landed before the takeover");
    let (new, horizon) = joined(grant, "the grant").await;
    assert_eq!(new.epoch.0, 2);
    assert!(horizon.contains(&committed.event_seqs[0]));
    let stale = stale_writes(&f.db, &HashMap::from([(2, horizon)])).await;
    assert!(stale.is_empty(), "{stale:#?}");
    assert_fenced_now(&store, &old, &t).await;
}

async fn assert_fenced_now(store: &PostgresStore, old: &Fence, t: &super::ObjectKey) {
    match store.commit_fenced(old, &[update(t, 1, "2")], &[]).await {
        Err(StoreError::Fenced {
            fence,
            cause,
            reason,
        }) => {
            assert_eq!(&fence, old);
            assert_eq!(cause, crate::fence::FenceCause::Superseded);
            assert!(reason.contains("epoch 2"), "{reason}");
        }
        other => panic!("a stale fence wrote: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_commit_waiting_on_a_grant_in_flight_is_refused() {
    let f = fixture().await;
    let old = Leases::grant(&f.leases, CLUSTER, LEASE, "holder-1").await;
    // A grant holds the lease row and the tenure row, not yet committed:
    // locked first with the authority's own statement, then the lease
    // moved on and the tenure ended, as the authority's grant does.
    let mut granting = f.db.client().await.unwrap();
    let grant = granting.transaction().await.unwrap();
    grant
        .query_one(LOCK_LEASE, &[&CLUSTER, &LEASE])
        .await
        .unwrap();
    grant
        .execute(
            "UPDATE leasehold_leases SET epoch = epoch + 1, holder = 'holder-2'
              WHERE cluster = $1 AND name = $2",
            &[&CLUSTER, &LEASE],
        )
        .await
        .unwrap();
    grant
        .execute(
            "UPDATE leasehold_tenures SET ended_at = clock_timestamp(), end_reason = 'superseded'
              WHERE cluster = $1 AND lease = $2 AND epoch = 1",
            &[&CLUSTER, &LEASE],
        )
        .await
        .unwrap();
    let grant_pid: i32 = grant
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let t = key("tasks", "t");
    let commit = {
        let (store, old, t) = (Arc::clone(&f.store), old.clone(), t.clone());
        tokio::spawn(async move { store.commit_fenced(&old, &[create(&t, "1")], &[]).await })
    };
    // Wait until the commit is observed blocked behind the grant: it
    // judges the tenure row under the grant's lock, not a stale copy.
    let observer = f.db.client().await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let waiting: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                &[&grant_pid],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the commit never reached the tenure row"
        );
        tokio::task::yield_now().await;
    }
    grant.commit().await.unwrap();
    match joined(commit, "the commit behind the grant").await {
        Err(StoreError::Fenced {
            fence,
            cause,
            reason,
        }) => {
            assert_eq!(fence, old);
            assert_eq!(cause, crate::fence::FenceCause::Superseded);
            assert!(reason.contains("epoch 2"), "{reason}");
        }
        other => panic!("a write of epoch 1 landed after epoch 2 was granted: {other:?}"),
    }
    assert_eq!(f.store.get(CLUSTER, &t).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_locking_the_same_objects_in_any_order_do_not_deadlock() {
    const OBJECTS: usize = 60;
    const ROUNDS: usize = 20;
    let f = fixture().await;
    let fence = Leases::grant(&f.leases, CLUSTER, LEASE, "holder-1").await;
    let keys: Vec<_> = (0..OBJECTS)
        .map(|i| key("tasks", &format!("t{i:02}")))
        .collect();
    let ops: Vec<_> = keys.iter().map(|k| create(k, "0")).collect();
    f.store.commit_fenced(&fence, &ops, &[]).await.unwrap();
    // Two writers name the same objects in opposite orders: locking in
    // the order given would deadlock them (and PostgreSQL would abort one
    // after deadlock_timeout, failing the test as unavailable).
    let mut reversed = keys.clone();
    reversed.reverse();
    let tasks: Vec<_> = [keys, reversed]
        .into_iter()
        .map(|order| {
            let (store, fence) = (Arc::clone(&f.store), fence.clone());
            tokio::spawn(async move {
                let mut done = 0;
                while done < ROUNDS {
                    let page = store.list(CLUSTER, "tasks", None, OBJECTS).await.unwrap();
                    let versions: HashMap<String, u64> = page
                        .objects
                        .into_iter()
                        .map(|o| (o.name, o.version))
                        .collect();
                    let ops: Vec<_> = order
                        .iter()
                        .map(|k| update(k, versions[&k.name], "1"))
                        .collect();
                    match store.commit_fenced(&fence, &ops, &[]).await {
                        Ok(_) => done += 1,
                        Err(StoreError::Conflict { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        joined(task, "a writer of the deadlock test").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_wake_watchers_in_other_processes() {
    let f = fixture().await;
    // No fallback poll within the test's lifetime: only NOTIFY can wake it.
    let watcher = PostgresStore::with_feed_poll(f.db.clone(), WAIT * 100);
    let mut feed = watcher.watch(CLUSTER);
    let mut sessions = watcher.feed_sessions();
    tokio::time::timeout(WAIT, sessions.wait_for(|&n| n >= 1))
        .await
        .expect("the feed listens")
        .unwrap();
    let t = key("tasks", "t");
    let put = f.store.put(CLUSTER, &t, "1", None).await.unwrap();
    let seq = all_events(&*f.store, CLUSTER).await.last().unwrap().seq;
    tokio::time::timeout(WAIT, feed.wait_for(|&s| s >= seq))
        .await
        .expect("the NOTIFY woke the other process's watcher")
        .unwrap();
    assert_eq!(watcher.get(CLUSTER, &t).await.unwrap(), Some(put));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_reconnects_when_its_session_is_killed() {
    let f = fixture().await;
    let watcher = PostgresStore::with_feed_poll(f.db.clone(), WAIT * 100);
    let mut feed = watcher.watch(CLUSTER);
    let mut sessions = watcher.feed_sessions();
    tokio::time::timeout(WAIT, sessions.wait_for(|&n| n >= 1))
        .await
        .expect("the feed listens")
        .unwrap();
    let killed: i64 =
        f.db.client()
            .await
            .unwrap()
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
              WHERE application_name = $1 AND datname = current_database()",
                &[&super::postgres_feed::APPLICATION_NAME],
            )
            .await
            .unwrap()
            .get(0);
    assert_eq!(killed, 1);
    tokio::time::timeout(WAIT, sessions.wait_for(|&n| n >= 2))
        .await
        .expect("the feed reconnected")
        .unwrap();
    f.store
        .put(CLUSTER, &key("tasks", "t"), "1", None)
        .await
        .unwrap();
    tokio::time::timeout(WAIT, feed.wait_for(|&s| s >= 1))
        .await
        .expect("the reconnected feed woke the watcher")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_polls_when_a_notification_is_missed() {
    let f = fixture().await;
    let watcher = PostgresStore::new(f.db.clone());
    let mut feed = watcher.watch(CLUSTER);
    // A committed change without its NOTIFY, as if the notification was
    // lost.
    let position: i64 = f
        .db
        .client()
        .await
        .unwrap()
        .query_one(
            "INSERT INTO leasehold_changes (cluster, position, revision, at, kind, name, change, version)
             SELECT $1, nextval('leasehold_positions'), 1, clock_timestamp(), 'tasks', 't', 'created', 1
             RETURNING position",
            &[&CLUSTER],
        )
        .await
        .unwrap()
        .get(0);
    tokio::time::timeout(WAIT, feed.wait_for(|&s| s == position as u64))
        .await
        .expect("the poll caught up")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_attributed_on_objects_and_events() {
    let f = fixture().await;
    let fence = Leases::grant(&f.leases, CLUSTER, LEASE, "holder-1").await;
    let (t, n) = (key("tasks", "t"), key("nodes", "n"));
    f.store
        .commit_fenced(&fence, &[create(&t, "1")], &[event(&t, "Made")])
        .await
        .unwrap();
    f.store.put(CLUSTER, &n, "1", None).await.unwrap();
    let guest = Origin::Guest {
        lease: LEASE.into(),
        epoch: fence.epoch,
        holder: "holder-1".into(),
    };
    assert_eq!(
        f.store.written_by(CLUSTER, &t).await.unwrap(),
        Some(guest.clone())
    );
    assert_eq!(
        f.store.written_by(CLUSTER, &n).await.unwrap(),
        Some(Origin::Api { token: None })
    );
    assert_eq!(
        f.store
            .written_by(CLUSTER, &key("tasks", "none"))
            .await
            .unwrap(),
        None
    );
    let origins: Vec<Origin> = all_events(&*f.store, CLUSTER)
        .await
        .into_iter()
        .map(|e| e.origin)
        .collect();
    assert_eq!(origins, vec![guest, Origin::Api { token: None }]);
}

#[tokio::test]
async fn an_unreachable_database_is_unavailable_without_its_password() {
    // Port 1 refuses connections at once.
    let db = Database::new("postgres://leasehold:s3cret@127.0.0.1:1/leasehold", 1).unwrap();
    let store = PostgresStore::new(db);
    let t = key("tasks", "t");
    let fence = Fence {
        key: LeaseKey::new(CLUSTER, LEASE),
        epoch: Epoch(1),
        holder: "holder-1".into(),
    };
    let results = [
        store.get(CLUSTER, &t).await.map(|_| ()),
        store.put(CLUSTER, &t, "1", None).await.map(|_| ()),
        store
            .commit_fenced(&fence, &[create(&t, "1")], &[])
            .await
            .map(|_| ()),
        store.events(CLUSTER, 0, 10).await.map(|_| ()),
    ];
    for result in results {
        match result {
            Err(StoreError::Unavailable(message)) => {
                assert!(!message.contains("s3cret"), "{message}");
                assert!(message.contains("127.0.0.1:1"), "{message}");
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_stuck_on_a_lock_is_unavailable_and_leaves_nothing() {
    let f = fixture().await;
    let fence = Leases::grant(&f.leases, CLUSTER, LEASE, "holder-1").await;
    let t = key("tasks", "t");
    let made = f
        .store
        .commit_fenced(&fence, &[create(&t, "1")], &[event(&t, "Made")])
        .await
        .unwrap();
    // Someone holds the object's row and does not let go.
    let mut holding = f.db.client().await.unwrap();
    let hold = holding.transaction().await.unwrap();
    hold.execute(
        "SELECT 1 FROM leasehold_objects WHERE cluster = $1 AND name = 't' FOR UPDATE",
        &[&CLUSTER],
    )
    .await
    .unwrap();
    let started = tokio::time::Instant::now();
    match f
        .store
        .commit_fenced(
            &fence,
            &[update(&t, made.revision, "2")],
            &[event(&t, "Bumped")],
        )
        .await
    {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("unknown"), "{message}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert!(started.elapsed() >= crate::timeouts::DATABASE_STATEMENT);
    hold.rollback().await.unwrap();
    // The abandoned transaction's session was closed, not pooled: nothing
    // of it committed, and the store keeps working.
    assert_eq!(f.store.get(CLUSTER, &t).await.unwrap().unwrap().value, "1");
    let again = f
        .store
        .commit_fenced(
            &fence,
            &[update(&t, made.revision, "3")],
            &[event(&t, "Bumped")],
        )
        .await
        .unwrap();
    let events = all_events(&*f.store, CLUSTER).await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].revision, again.revision);
    assert_eq!(Leases::writes(&f.leases, &fence).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_store_writes_only_to_the_database_it_was_pinned_to() {
    let f = fixture().await;
    let t = key("tasks", "t");
    let actual: uuid::Uuid =
        f.db.client()
            .await
            .unwrap()
            .query_one("SELECT id FROM leasehold_database", &[])
            .await
            .unwrap()
            .get(0);
    // As if the connection string now reached another database.
    let elsewhere = PostgresStore::new(f.db.clone());
    elsewhere.pin_database(uuid::Uuid::new_v4());
    match elsewhere.put(CLUSTER, &t, "1", None).await {
        Err(StoreError::Unavailable(reason)) => {
            assert!(reason.contains(&actual.to_string()), "{reason}");
            assert!(reason.contains("refusing to write"), "{reason}");
        }
        other => panic!("a write reached a database other than the pinned one: {other:?}"),
    }
    assert_eq!(f.store.get(CLUSTER, &t).await.unwrap(), None);
    let fence = Leases::grant(&f.leases, CLUSTER, LEASE, "holder-1").await;
    assert!(matches!(
        elsewhere
            .commit_fenced(&fence, &[create(&t, "1")], &[])
            .await,
        Err(StoreError::Unavailable(_))
    ));
    // Pinned to the database it reaches, it writes.
    let here = PostgresStore::new(f.db.clone());
    here.pin_database(actual);
    let put = here.put(CLUSTER, &t, "1", None).await.unwrap();
    here.commit_fenced(&fence, &[update(&t, put.version, "2")], &[])
        .await
        .unwrap();
}

/// What a reader that ignores the high-water mark would see: every change
/// committed so far, straight from the table.
async fn visible_positions(db: &Database) -> Vec<u64> {
    db.client()
        .await
        .unwrap()
        .query(
            "SELECT position FROM leasehold_changes WHERE cluster = $1 ORDER BY position",
            &[&CLUSTER],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>(0) as u64)
        .collect()
}

/// Start an API put through a store that pauses before `COMMIT`, and wait
/// until it is paused there (its positions taken, its floor held).
async fn held_put(
    db: &Database,
    name: &str,
) -> (
    JoinHandle<Result<super::Object, StoreError>>,
    mpsc::Sender<()>,
) {
    let (store, mut paused, resume) = paused_store(db);
    let k = key("tasks", name);
    let put = tokio::spawn(async move { store.put(CLUSTER, &k, "1", None).await });
    tokio::time::timeout(WAIT, paused.recv())
        .await
        .unwrap_or_else(|_| panic!("the put did not reach COMMIT within {WAIT:?}"))
        .expect("the put reached COMMIT");
    (put, resume)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_in_flight_does_not_hold_up_other_commits() {
    // The counter row this replaces made every commit of a cluster wait
    // for the one before it to finish COMMIT.
    let f = fixture().await;
    let fence = Leases::grant(&f.leases, CLUSTER, LEASE, "holder-1").await;
    let (held, resume) = held_put(&f.db, "held").await;
    let other = key("tasks", "other");
    let (made, put) = tokio::time::timeout(WAIT, async {
        let made = f
            .store
            .commit_fenced(&fence, &[create(&other, "1")], &[event(&other, "Made")])
            .await
            .unwrap();
        let put = f
            .store
            .put(CLUSTER, &key("nodes", "n"), "1", None)
            .await
            .unwrap();
        (made, put)
    })
    .await
    .expect("commits of other objects finish while one is held open before COMMIT");
    assert!(made.revision < put.version);
    resume.send(()).await.unwrap();
    let held = joined(held, "the held put").await.unwrap();
    // The held put took its numbers first, and committed last.
    assert!(held.version < made.revision);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_stop_below_a_commit_in_flight_and_skip_nothing() {
    let f = fixture().await;
    let (held, resume) = held_put(&f.db, "held").await;
    // A later commit lands while the held one is still open: its position
    // is above the held one's, and it is visible.
    let later = f
        .store
        .put(CLUSTER, &key("tasks", "later"), "1", None)
        .await
        .unwrap();
    let visible = visible_positions(&f.db).await;
    assert_eq!(visible.len(), 1, "{visible:?}");
    let (head, mark) = f.store.high_water().await.unwrap();
    assert!(
        mark < visible[0] && visible[0] <= head,
        "mark {mark}, head {head}, {visible:?}"
    );
    // A reader (both streams, and the watch) stops below the held commit.
    let page = f.store.changes(CLUSTER, &[], 0, 10).await.unwrap();
    assert!(page.changes.is_empty(), "{page:?}");
    assert!(page.through < visible[0]);
    assert!(f.store.events(CLUSTER, 0, 10).await.unwrap().is_empty());
    let cursor = page.through;
    resume.send(()).await.unwrap();
    let held = joined(held, "the held put").await.unwrap();
    // Resuming after its cursor, the reader gets both, in position order:
    // the held commit was not skipped.
    let page = f.store.changes(CLUSTER, &[], cursor, 10).await.unwrap();
    let seen: Vec<(&str, u64)> = page
        .changes
        .iter()
        .map(|c| (c.name.as_str(), c.version))
        .collect();
    assert_eq!(seen, [("held", held.version), ("later", later.version)]);
    let events = f.store.events(CLUSTER, 0, 10).await.unwrap();
    assert_eq!(events.len(), 2);
    assert!(events[0].seq < events[1].seq && events[0].name == "held");
}

/// A change-feed read bounded by a position the watch published trusts
/// that bound: it reads up to it without finding the high-water mark again
/// (one statement less per read), and no further. Shown with a commit held
/// open, which holds the mark below a later commit's change: a bound above
/// the mark (which the watch never publishes) is read through, where
/// [`Store::changes`] stops at the mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_through_a_published_position_computes_no_mark() {
    let f = fixture().await;
    let (held, resume) = held_put(&f.db, "held").await;
    f.store
        .put(CLUSTER, &key("tasks", "later"), "1", None)
        .await
        .unwrap();
    let visible = visible_positions(&f.db).await;
    assert_eq!(visible.len(), 1, "{visible:?}");
    let later = visible[0];
    let page = f.store.changes(CLUSTER, &[], 0, 10).await.unwrap();
    assert!(page.changes.is_empty(), "the mark holds {page:?} back");
    let page = f
        .store
        .changes_through(CLUSTER, &[], 0, later, 10)
        .await
        .unwrap();
    let names: Vec<&str> = page.changes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["later"]);
    assert_eq!(page.through, later);
    let page = f
        .store
        .changes_through(CLUSTER, &[], 0, later - 1, 10)
        .await
        .unwrap();
    assert!(page.changes.is_empty(), "{page:?}");
    assert_eq!(page.through, later - 1);
    resume.send(()).await.unwrap();
    joined(held, "the held put").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_rolls_back_leaves_a_gap_the_mark_passes() {
    let f = fixture().await;
    let (held, _resume) = held_put(&f.db, "held").await;
    let later = f
        .store
        .put(CLUSTER, &key("tasks", "later"), "1", None)
        .await
        .unwrap();
    assert!(f.store.events(CLUSTER, 0, 10).await.unwrap().is_empty());
    // Dropping the paused commit rolls its transaction back (its session
    // goes back to the pool without COMMIT): its numbers are never used.
    held.abort();
    let _ = held.await;
    let events = tokio::time::timeout(WAIT, async {
        loop {
            let events = f.store.events(CLUSTER, 0, 10).await.unwrap();
            if !events.is_empty() {
                return events;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the mark passes a rolled-back commit");
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].name.as_str(), events[0].revision),
        ("later", later.version)
    );
    assert_eq!(
        f.store.get(CLUSTER, &key("tasks", "held")).await.unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_wakes_once_a_held_commit_ends() {
    let f = fixture().await;
    // No fallback poll within the test: only a notification, a local
    // commit or the settle re-read can wake it.
    let watcher = PostgresStore::with_feed_poll(f.db.clone(), WAIT * 100);
    let mut feed = watcher.watch(CLUSTER);
    let mut sessions = watcher.feed_sessions();
    tokio::time::timeout(WAIT, sessions.wait_for(|&n| n >= 1))
        .await
        .expect("the feed listens")
        .unwrap();
    let (held, resume) = held_put(&f.db, "held").await;
    let later = f
        .store
        .put(CLUSTER, &key("tasks", "later"), "1", None)
        .await
        .unwrap();
    // The later commit's notification may arrive while the held one keeps
    // the mark below it; the held one's own, sent after its COMMIT, must
    // then wake the watcher.
    resume.send(()).await.unwrap();
    joined(held, "the held put").await.unwrap();
    // Both committed: the watcher reaches the later one's change.
    let last = visible_positions(&f.db).await.into_iter().max().unwrap();
    tokio::time::timeout(WAIT, feed.wait_for(|&p| p >= last))
        .await
        .expect("the watcher woke after the held commit ended")
        .unwrap();
    assert!(later.version < last);
}

/// The plan a selective list statement gets for these values, as JSON
/// text (run unnamed, as the store runs it).
async fn list_plan(db: &Database, sql: &str, conditions: &[&serde_json::Value]) -> String {
    use tokio_postgres::types::{ToSql, Type};
    let client = db.client().await.unwrap();
    let (cluster, kind, after, fetch) = (CLUSTER, "tasks", "", 101i64);
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
        (&cluster, Type::TEXT),
        (&kind, Type::TEXT),
        (&after, Type::TEXT),
        (&fetch, Type::INT8),
    ];
    params.extend(
        conditions
            .iter()
            .map(|c| (*c as &(dyn ToSql + Sync), Type::JSONB)),
    );
    let rows = client
        .query_typed(&format!("EXPLAIN (FORMAT JSON) {sql}"), &params)
        .await
        .unwrap();
    rows.iter()
        .map(|r| r.get::<_, serde_json::Value>(0).to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selective_lists_are_served_by_the_gin_indexes() {
    use super::postgres::{LIST_CONTAINS_SQL, LIST_LABELS_SQL, LIST_SELECTED_SQL};
    let f = fixture().await;
    // 5,000 tasks, about 1% pending and 2% of each team, spread without
    // relation to their names or values (md5), as a backlog looks.
    f.db.client()
        .await
        .unwrap()
        .batch_execute(
            "INSERT INTO leasehold_objects (cluster, kind, name, version, value, updated_at, labels)
             SELECT 'c1', 'tasks', 't' || i, i,
                    jsonb_build_object(
                        'n', i,
                        'status', CASE WHEN md5(i::text) < '03' THEN 'pending' ELSE 'done' END
                    )::text,
                    now(),
                    jsonb_build_object('team', 'team-' || (i % 50))
               FROM generate_series(1, 5000) AS i;
             ANALYZE leasehold_objects;",
        )
        .await
        .unwrap();
    let pending = serde_json::json!({"status": "pending"});
    let team = serde_json::json!({"team": "team-7"});
    let plans = [
        (
            "labels",
            list_plan(&f.db, LIST_LABELS_SQL, &[&team]).await,
            "leasehold_objects_labels",
        ),
        (
            "contains",
            list_plan(&f.db, LIST_CONTAINS_SQL, &[&pending]).await,
            "leasehold_objects_value",
        ),
    ];
    for (what, plan, index) in &plans {
        assert!(
            plan.contains(index),
            "a {what} selector's plan does not use {index}: {plan}"
        );
    }
    let both = list_plan(&f.db, LIST_SELECTED_SQL, &[&team, &pending]).await;
    assert!(
        both.contains("leasehold_objects_labels") || both.contains("leasehold_objects_value"),
        "a combined selector's plan uses neither GIN index: {both}"
    );
    // And the store answers what the table holds, page by page.
    let expected: Vec<String> =
        f.db.client()
            .await
            .unwrap()
            .query(
                "SELECT name FROM leasehold_objects
              WHERE kind = 'tasks' AND value::jsonb @> '{\"status\": \"pending\"}'
              ORDER BY name",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
    assert!(expected.len() > 20, "about 1% of 5,000 are pending");
    let selector = super::Selector {
        labels: Default::default(),
        contains: Some(pending),
    };
    let mut listed: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = f
            .store
            .list_selected(CLUSTER, "tasks", &selector, after.as_deref(), 16)
            .await
            .unwrap();
        listed.extend(page.objects.into_iter().map(|o| o.name));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(listed, expected);
}

/// A grant by the real authority, insisted on.
async fn authority_grant(
    authority: &crate::authority::postgres::PostgresAuthority,
    lease: &str,
    holder: &str,
) -> Fence {
    use crate::authority::{AcquireRequest, Acquired, Authority};
    let request = AcquireRequest {
        key: LeaseKey::new(CLUSTER, lease),
        holder: holder.into(),
        ttl: std::time::Duration::from_secs(3600),
    };
    match authority.acquire(&request).await.unwrap() {
        Acquired::Granted(grant) => grant.fence,
        other => panic!("{holder} expected a grant of {lease}, got {other:?}"),
    }
}

/// The tenure of `fence` as the authority's history shows it.
async fn tenure_of(
    authority: &crate::authority::postgres::PostgresAuthority,
    fence: &Fence,
) -> crate::authority::TenureRecord {
    use crate::authority::Authority;
    authority
        .history(&fence.key, 100)
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.epoch == fence.epoch)
        .unwrap_or_else(|| panic!("no tenure {fence} in the history"))
}

/// L6 through the real authority and store: every accepted fenced commit
/// is counted once, concurrent ones too, with the time of the last; a
/// refused commit (a conflict, a released or superseded fence) and an API
/// write count nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_counts_every_accepted_fenced_commit_and_its_last_time() {
    use crate::authority::postgres::PostgresAuthority;
    use crate::authority::{Authority, EndReason, ExpectedIdentity};
    const WRITERS: usize = 6;
    const EACH: usize = 5;
    let f = fixture().await;
    let authority = PostgresAuthority::new(f.db.clone(), ExpectedIdentity::default());
    let fence = authority_grant(&authority, LEASE, "holder-1").await;
    let fresh = tenure_of(&authority, &fence).await;
    assert_eq!((fresh.writes, fresh.last_write_at), (0, None));

    // Concurrent commits of one tenure, each writer on its own objects.
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, fence) = (Arc::clone(&f.store), fence.clone());
            tokio::spawn(async move {
                let t = key("tasks", &format!("w{w}"));
                let mut version = 0;
                for i in 0..EACH {
                    let op = if i == 0 {
                        create(&t, "0")
                    } else {
                        update(&t, version, &i.to_string())
                    };
                    version = store
                        .commit_fenced(&fence, &[op], &[event(&t, "Bumped")])
                        .await
                        .unwrap()
                        .revision;
                }
            })
        })
        .collect();
    for writer in writers {
        joined(writer, "a writer").await;
    }
    let t = key("tasks", "w0");
    // Neither a refused commit nor an API write counts.
    match f.store.commit_fenced(&fence, &[create(&t, "9")], &[]).await {
        Err(StoreError::Conflict { .. }) => {}
        other => panic!("a create of an existing object: {other:?}"),
    }
    f.store
        .put(CLUSTER, &key("nodes", "n"), "1", None)
        .await
        .unwrap();
    let counted = tenure_of(&authority, &fence).await;
    assert_eq!(counted.writes, (WRITERS * EACH) as u64);
    let last = counted.last_write_at.expect("a last write time");
    assert!(last >= counted.acquired_at, "{last} before the grant");

    // One more, alone: counted, and its time is the new last one, taken
    // in its own transaction before the commit's own time.
    let current = f.store.get(CLUSTER, &t).await.unwrap().unwrap();
    let revision = f
        .store
        .commit_fenced(&fence, &[update(&t, current.version, "7")], &[])
        .await
        .unwrap()
        .revision;
    let written_at: chrono::DateTime<chrono::Utc> =
        f.db.client()
            .await
            .unwrap()
            .query_one(
                "SELECT at FROM leasehold_changes WHERE cluster = $1 AND revision = $2",
                &[&CLUSTER, &(revision as i64)],
            )
            .await
            .unwrap()
            .get(0);
    let after = tenure_of(&authority, &fence).await;
    assert_eq!(after.writes, (WRITERS * EACH + 1) as u64);
    let newest = after.last_write_at.unwrap();
    assert!(
        last < newest && newest <= written_at,
        "last write {newest} is not between the previous one {last} and the commit's time {written_at}"
    );

    // Released: refused with that cause, and not counted.
    authority
        .release(&fence, EndReason::Released)
        .await
        .unwrap();
    match f
        .store
        .commit_fenced(&fence, &[create(&key("tasks", "x"), "1")], &[])
        .await
    {
        Err(StoreError::Fenced { cause, .. }) => {
            assert_eq!(cause, crate::fence::FenceCause::Released)
        }
        other => panic!("a released fence wrote: {other:?}"),
    }
    // Superseded: likewise.
    let next = authority_grant(&authority, LEASE, "holder-2").await;
    match f
        .store
        .commit_fenced(&fence, &[create(&key("tasks", "y"), "1")], &[])
        .await
    {
        Err(StoreError::Fenced { cause, .. }) => {
            assert_eq!(cause, crate::fence::FenceCause::Superseded)
        }
        other => panic!("a superseded fence wrote: {other:?}"),
    }
    let ended = tenure_of(&authority, &fence).await;
    assert_eq!(
        (ended.writes, ended.last_write_at),
        (after.writes, after.last_write_at)
    );
    assert_eq!(tenure_of(&authority, &next).await.writes, 0);
}

/// A fenced commit that reaches its tenure row while a release holds it
/// (locked with the authority's own statement, the lease marked released
/// and the tenure ended, not yet committed) waits, then is refused as
/// `Released`, although the lease row its statement's snapshot shows is
/// still current: the tenure row decides, read in its newest version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_commit_waiting_on_a_release_in_flight_is_refused_as_released() {
    let f = fixture().await;
    let old = Leases::grant(&f.leases, CLUSTER, LEASE, "holder-1").await;
    let mut releasing = f.db.client().await.unwrap();
    let release = releasing.transaction().await.unwrap();
    release
        .query_one(LOCK_LEASE, &[&CLUSTER, &LEASE])
        .await
        .unwrap();
    release
        .execute(
            "UPDATE leasehold_leases SET released = true WHERE cluster = $1 AND name = $2",
            &[&CLUSTER, &LEASE],
        )
        .await
        .unwrap();
    release
        .execute(
            "UPDATE leasehold_tenures SET ended_at = clock_timestamp(), end_reason = 'released'
              WHERE cluster = $1 AND lease = $2 AND epoch = 1",
            &[&CLUSTER, &LEASE],
        )
        .await
        .unwrap();
    let release_pid: i32 = release
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let t = key("tasks", "t");
    let commit = {
        let (store, old, t) = (Arc::clone(&f.store), old.clone(), t.clone());
        tokio::spawn(async move { store.commit_fenced(&old, &[create(&t, "1")], &[]).await })
    };
    let observer = f.db.client().await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let waiting: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                &[&release_pid],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the commit never reached the tenure row"
        );
        tokio::task::yield_now().await;
    }
    release.commit().await.unwrap();
    match joined(commit, "the commit behind the release").await {
        Err(StoreError::Fenced { fence, cause, .. }) => {
            assert_eq!(fence, old);
            assert_eq!(cause, crate::fence::FenceCause::Released);
        }
        other => panic!("a write of epoch 1 landed after its release: {other:?}"),
    }
    assert_eq!(f.store.get(CLUSTER, &t).await.unwrap(), None);
    assert_eq!(Leases::writes(&f.leases, &old).await, 0);
}

/// Rows of `leasehold_objects` read by scans so far (sequential, and
/// fetched through an index or a bitmap), as the statistics collector
/// counts them; `session` is asked to flush its counts first.
async fn objects_rows_read(
    session: &tokio_postgres::Client,
    reader: &tokio_postgres::Client,
) -> i64 {
    // Flushed when `session` next goes idle, which is before this
    // statement's answer reaches us.
    session
        .batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    reader
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    reader
        .query_one(
            "SELECT (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::int8
               FROM pg_stat_user_tables WHERE relname = 'leasehold_objects'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// A commit's statements are planned once per pooled session (generic
/// plans), often while the cluster has few objects. Such a plan must still
/// reach each object by its key once the table has grown: a plan that
/// joined the commit's keys against a scan of the cluster read every
/// object of it per commit (33–41 ms for a 45-task assignment over 2,000
/// objects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_planned_on_a_small_table_reads_only_its_own_rows_once_it_grew() {
    const GROWN: usize = 3_000;
    const TOUCHED: usize = 50;
    let database = TestDatabase::create().await;
    // One pooled session: every commit below runs on the session whose
    // plans the first commits made.
    let db = database.database(1);
    let store = PostgresStore::new(db.clone());
    let leases = PgLeases { db: db.clone() };
    let fence = Leases::grant(&leases, CLUSTER, LEASE, "holder-1").await;
    // Plans made on a table of one object: a create, an update and a
    // delete (one lock and one write statement serve all three).
    let first = key("tasks", "first");
    let made = store
        .commit_fenced(&fence, &[create(&first, "0")], &[])
        .await
        .unwrap();
    let made = store
        .commit_fenced(&fence, &[update(&first, made.revision, "1")], &[])
        .await
        .unwrap();
    store
        .commit_fenced(
            &fence,
            &[super::conformance::delete(&first, made.revision)],
            &[],
        )
        .await
        .unwrap();
    // The table grows behind the session's back: no statistics are taken,
    // so nothing makes the server plan the commit's statements again.
    let (reader, connection) = tokio_postgres::connect(database.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    reader
        .batch_execute(&format!(
            "INSERT INTO leasehold_objects (cluster, kind, name, version, value, updated_at)
             SELECT '{CLUSTER}', 'tasks', 't' || lpad(i::text, 5, '0'), i, '0', now()
               FROM generate_series(1, {GROWN}) AS i"
        ))
        .await
        .unwrap();
    // Inserted with version i, named t<i>.
    let updates: Vec<_> = (1..=TOUCHED)
        .map(|i| {
            let n = i * (GROWN / TOUCHED);
            update(&key("tasks", &format!("t{n:05}")), n as u64, "2")
        })
        .collect();
    let touched: Vec<_> = updates.iter().map(|op| op.key().clone()).collect();
    let session = db.client().await.unwrap();
    let before = objects_rows_read(&session, &reader).await;
    drop(session);
    let updated = store.commit_fenced(&fence, &updates, &[]).await.unwrap();
    let deletes: Vec<_> = touched[..TOUCHED / 2]
        .iter()
        .map(|k| super::conformance::delete(k, updated.revision))
        .collect();
    store.commit_fenced(&fence, &deletes, &[]).await.unwrap();
    let session = db.client().await.unwrap();
    let read = objects_rows_read(&session, &reader).await - before;
    // Each object is read by the lock and found again by the write (a few
    // reads each); a scan would read the whole cluster at least once.
    let written = TOUCHED + TOUCHED / 2;
    assert!(
        read <= (4 * written) as i64,
        "{written} updates and deletes read {read} rows of a cluster of {GROWN} objects"
    );
    // The lock statement alone fetches each object through the primary
    // key: fewer counted means the statistics were not flushed.
    assert!(
        read >= TOUCHED as i64,
        "the statistics counted {read} rows read for {written} writes: too few to judge"
    );
}
