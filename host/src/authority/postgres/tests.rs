//! PostgreSQL-only lease tests: the retained-lock pitfall, identity checks,
//! terminated connections, contention, and failures that must read clearly.
//!
//! Where a test waits for another server process (a backend blocked on a
//! lock, a listener reconnecting, a ttl running out on the database clock)
//! it re-reads the server's state until a bounded deadline: the server
//! cannot notify us of those, and the condition, not the wait, is asserted.

use std::future::Future;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{LISTENER_APPLICATION, PostgresAuthority};
use crate::authority::conformance::{PROMPT, TTL, grant, refused, request};
use crate::authority::fence_check::{FenceStatements, check_fence, check_fence_and_count};
use crate::authority::{
    AcquireRequest, Acquired, Authority, AuthorityError, EndReason, ExpectedIdentity, Renewed,
};
use crate::db::Database;
use crate::fence::Epoch;
use crate::testing::TestDatabase;
use crate::timeouts::DATABASE_CONNECT;

/// How often a test re-reads server state it is waiting for.
const POLL: Duration = Duration::from_millis(10);

/// Re-check `condition` until it holds, failing after [`PROMPT`].
async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PROMPT;
    while !condition().await {
        assert!(Instant::now() < deadline, "{what}: not within {PROMPT:?}");
        tokio::time::sleep(POLL).await;
    }
}

fn authority(database: Database) -> PostgresAuthority {
    PostgresAuthority::new(database, ExpectedIdentity::default())
}

/// A pool whose sessions carry `application_name`, so a test can find them.
fn named_pool(test: &TestDatabase, application: &str, size: usize) -> Database {
    let mut url = url::Url::parse(test.url()).unwrap();
    url.query_pairs_mut()
        .append_pair("application_name", application);
    Database::new(url.as_str(), size).unwrap()
}

/// Terminate the sessions of `application` on `database`; returns how many.
/// The call sits in the target list, so it runs only for rows the WHERE
/// clause kept (in a WHERE clause the planner may call it on any row).
async fn terminate(admin: &Database, database: &str, application: &str) -> i64 {
    count(
        admin,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
          WHERE datname = $1 AND application_name = $2",
        &[&database, &application],
    )
    .await
}

async fn count(
    admin: &Database,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> i64 {
    admin
        .client()
        .await
        .unwrap()
        .query_one(sql, params)
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_cancelled_holder_leaves_nothing_held_and_another_pool_takes_over_at_once() {
    // The classic pitfall: a holder cancelled mid-tenure returns its pooled
    // connection with a lock still held, and a "release" skips the unlock,
    // so a different pool cannot take over. Here: cancel a holder in the
    // middle of a fenced write transaction, release in order, and take over
    // from another pool on the first attempt.
    let test = TestDatabase::create().await;
    let pool_a = test.database(2);
    let holder = authority(pool_a.clone());
    let standby = authority(test.database(2));
    let admin = test.database(1);
    let held = grant(&holder, &request("east", "scheduler", "host-a")).await;

    let (locked_tx, locked) = oneshot::channel();
    let in_flight = tokio::spawn({
        let pool = pool_a.clone();
        let fence = held.fence.clone();
        async move {
            let mut client = pool.client().await.unwrap();
            let statements = FenceStatements::cached(&client).await.unwrap();
            let tx = client.transaction().await.unwrap();
            check_fence(&tx, &statements, &fence).await.unwrap();
            locked_tx.send(()).unwrap();
            // Holds the tenure row FOR SHARE until cancelled.
            std::future::pending::<()>().await;
        }
    });
    locked.await.unwrap();
    in_flight.abort();
    assert!(in_flight.await.unwrap_err().is_cancelled());

    let started = Instant::now();
    holder
        .release(&held.fence, EndReason::Released)
        .await
        .unwrap();
    let taken = match standby
        .acquire(&request("east", "scheduler", "host-b"))
        .await
        .unwrap()
    {
        Acquired::Granted(grant) => grant,
        held => panic!("the standby must be granted on its first attempt, got {held:?}"),
    };
    assert_eq!(taken.fence.epoch, Epoch(2));
    assert!(
        started.elapsed() < TTL,
        "took over without waiting for the ttl"
    );

    // Nothing session-scoped was ever taken, and nothing is left open.
    let database = test.url().rsplit('/').next().unwrap().to_string();
    assert_eq!(
        count(
            &admin,
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                        WHERE d.datname = $1 AND l.locktype = 'advisory'",
            &[&database]
        )
        .await,
        0,
        "no advisory (session) lock is used"
    );
    assert_eq!(
        count(
            &admin,
            "SELECT count(*) FROM pg_stat_activity
                        WHERE datname = $1 AND state LIKE 'idle in transaction%'",
            &[&database]
        )
        .await,
        0,
        "the cancelled transaction was rolled back, not parked in the pool"
    );
    assert_eq!(
        count(&admin, "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                        WHERE c.relname = 'leasehold_leases' AND l.pid <> pg_backend_pid()
                          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())", &[]).await,
        0,
        "no session holds the lease table"
    );
}

#[tokio::test]
async fn the_lease_lifecycle_never_takes_a_session_lock() {
    let test = TestDatabase::create().await;
    let holder = authority(test.database(2));
    let admin = test.database(1);
    let _wakes = holder.released("east");
    let held = grant(&holder, &request("east", "scheduler", "host-a")).await;
    holder
        .renew(std::slice::from_ref(&held.fence), TTL)
        .await
        .unwrap();
    {
        let mut client = holder.database().client().await.unwrap();
        let statements = FenceStatements::cached(&client).await.unwrap();
        let tx = client.transaction().await.unwrap();
        check_fence(&tx, &statements, &held.fence).await.unwrap();
        tx.commit().await.unwrap();
    }
    holder.observe("east").await.unwrap();
    // Checked while the tenure runs and after it ends.
    for _ in 0..2 {
        assert_eq!(
            count(&admin, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
                            AND pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database())", &[]).await,
            0
        );
        holder
            .release(&held.fence, EndReason::Released)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn the_wrong_database_is_refused_naming_what_differed() {
    let pinned_db = TestDatabase::create().await;
    let other_db = TestDatabase::create().await;
    let pinned = authority(pinned_db.database(1)).identity().await.unwrap();
    let actual = authority(other_db.database(1)).identity().await.unwrap();
    assert_ne!(pinned.database_id, actual.database_id);
    assert_eq!(
        pinned.system_identifier, actual.system_identifier,
        "one server"
    );
    assert!(!actual.in_recovery);

    let expected = ExpectedIdentity {
        database_id: Some(pinned.database_id),
        system_identifier: Some(pinned.system_identifier),
    };
    let wrong = PostgresAuthority::new(other_db.database(2), expected.clone());
    match wrong.acquire(&request("east", "scheduler", "host-a")).await {
        Err(AuthorityError::WrongDatabase { endpoint, problems }) => {
            assert!(endpoint.contains(other_db.url().rsplit('/').next().unwrap()));
            assert!(
                problems.contains(&format!(
                    "database id is {} but {} is expected",
                    actual.database_id, pinned.database_id
                )),
                "{problems}"
            );
            assert!(!problems.contains("system identifier"), "{problems}");
        }
        other => panic!("acquiring against the wrong database must be refused, got {other:?}"),
    }
    assert!(
        authority(other_db.database(1))
            .observe("east")
            .await
            .unwrap()
            .is_empty(),
        "nothing was acquired"
    );

    let other_server = ExpectedIdentity {
        database_id: Some(actual.database_id),
        system_identifier: Some(actual.system_identifier ^ 1),
    };
    match PostgresAuthority::connect(other_db.database(1), other_server).await {
        Err(AuthorityError::WrongDatabase { problems, .. }) => {
            assert!(problems.contains("system identifier is"), "{problems}");
            assert!(!problems.contains("database id"), "{problems}");
        }
        other => panic!("another server must be refused, got {other:?}"),
    }

    let right = PostgresAuthority::connect(pinned_db.database(2), expected)
        .await
        .unwrap();
    grant(&right, &request("east", "scheduler", "host-a")).await;
}

#[tokio::test]
async fn a_missing_or_old_schema_is_reported_as_such() {
    let test = TestDatabase::create().await;
    let admin = test.database(1);
    let leases = authority(test.database(1));
    admin
        .client()
        .await
        .unwrap()
        .batch_execute("DELETE FROM leasehold_migrations")
        .await
        .unwrap();
    match leases
        .acquire(&request("east", "scheduler", "host-a"))
        .await
    {
        Err(AuthorityError::Schema { reason, .. }) => assert!(reason.contains("older"), "{reason}"),
        other => panic!("an old schema must be reported, got {other:?}"),
    }
    admin
        .client()
        .await
        .unwrap()
        .batch_execute("DROP TABLE leasehold_database")
        .await
        .unwrap();
    match leases.identity().await {
        Err(e @ AuthorityError::Schema { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("leasehold_database") && text.contains("leasehold migrate"),
                "{text}"
            );
        }
        other => panic!("a missing schema must be reported, got {other:?}"),
    }
}

#[tokio::test]
async fn terminated_connections_during_renew_never_yield_two_holders() {
    let test = TestDatabase::create().await;
    let database = test.url().rsplit('/').next().unwrap().to_string();
    let holder = authority(named_pool(&test, "holder-a", 2));
    let standby = authority(test.database(2));
    let admin = test.database(2);
    let held = grant(&holder, &request("east", "scheduler", "host-a")).await;

    // Pin the renewal mid-flight: another session holds the lease row.
    let mut blocker = admin.client().await.unwrap();
    let lock = blocker.transaction().await.unwrap();
    lock.execute("SELECT 1 FROM leasehold_leases FOR UPDATE", &[])
        .await
        .unwrap();
    let renewal = tokio::spawn({
        let holder = holder.clone();
        let fence = held.fence.clone();
        async move { holder.renew(&[fence], TTL).await }
    });
    eventually("the renewal waits on the row lock", || async {
        count(&admin, "SELECT count(*) FROM pg_stat_activity
                        WHERE datname = $1 AND application_name = 'holder-a' AND wait_event_type = 'Lock'",
              &[&database]).await == 1
    })
    .await;
    let terminated = terminate(&admin, &database, "holder-a").await;
    assert!(terminated >= 1);
    match renewal.await.unwrap() {
        Err(AuthorityError::Unavailable { endpoint, reason }) => {
            assert!(endpoint.contains(&database));
            assert!(
                reason.contains("renewing lease east/scheduler epoch 1"),
                "{reason}"
            );
        }
        other => panic!("a terminated renewal must fail cleanly, got {other:?}"),
    }
    lock.rollback().await.unwrap();

    // The lease is still the holder's: nobody else is granted, and the
    // holder recovers on a fresh connection.
    assert_eq!(
        refused(&standby, &request("east", "scheduler", "host-b")).await,
        ("host-a".into(), Epoch(1))
    );
    assert!(matches!(
        holder
            .renew(std::slice::from_ref(&held.fence), TTL)
            .await
            .unwrap()[0],
        Renewed::Extended { .. }
    ));

    // If the outage outlasts the ttl, the successor is granted and the old
    // holder learns it lost the lease: still never two holders.
    terminate(&admin, &database, "holder-a").await;
    admin
        .client()
        .await
        .unwrap()
        .execute(
            "UPDATE leasehold_leases SET expires_at = clock_timestamp()",
            &[],
        )
        .await
        .unwrap();
    let taken = grant(&standby, &request("east", "scheduler", "host-b")).await;
    let after = holder.renew(std::slice::from_ref(&held.fence), TTL).await;
    let after = match after {
        // The first call may still meet a terminated pooled connection.
        Err(AuthorityError::Unavailable { .. }) => {
            holder.renew(std::slice::from_ref(&held.fence), TTL).await
        }
        other => other,
    };
    assert_eq!(after.unwrap(), vec![Renewed::Lost]);
    let leases = standby.observe("east").await.unwrap();
    assert_eq!(
        (leases[0].holder.as_str(), leases[0].epoch),
        ("host-b", taken.fence.epoch)
    );
}

#[tokio::test]
async fn fifty_concurrent_contenders_yield_exactly_one_holder_per_epoch() {
    const CONTENDERS: usize = 50;
    const POOLS: usize = 5;
    const ROUNDS: u64 = 3;
    let test = TestDatabase::create().await;
    let authorities: Vec<PostgresAuthority> =
        (0..POOLS).map(|_| authority(test.database(4))).collect();
    let mut waiting: Vec<AcquireRequest> = (0..CONTENDERS)
        .map(|i| request("east", "scheduler", &format!("host-{i}")))
        .collect();

    for round in 1..=ROUNDS {
        let answers = join_all(
            waiting
                .iter()
                .enumerate()
                .map(|(i, r)| authorities[i % POOLS].acquire(r)),
        )
        .await;
        let mut winners = Vec::new();
        let mut refusals = Vec::new();
        for answer in answers {
            match answer.unwrap() {
                Acquired::Granted(grant) => winners.push(grant),
                Acquired::Held { holder, epoch, .. } => refusals.push((holder, epoch)),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one holder");
        let winner = winners.remove(0).fence;
        assert_eq!(winner.epoch, Epoch(round));
        assert!(
            refusals
                .iter()
                .all(|r| *r == (winner.holder.clone(), winner.epoch)),
            "round {round}: every refusal names the one holder"
        );
        waiting.retain(|r| r.holder != winner.holder);
        authorities[0]
            .release(&winner, EndReason::Released)
            .await
            .unwrap();
    }

    let history = authorities[0].history(&waiting[0].key, 10).await.unwrap();
    assert_eq!(history.len() as u64, ROUNDS);
    let mut holders: Vec<&str> = history.iter().map(|t| t.holder.as_str()).collect();
    holders.sort_unstable();
    holders.dedup();
    assert_eq!(
        holders.len() as u64,
        ROUNDS,
        "one tenure per holder per epoch"
    );
    assert!(
        history
            .iter()
            .all(|t| t.end_reason == Some(EndReason::Released))
    );
}

#[tokio::test]
async fn an_unreachable_database_fails_fast_and_names_it_without_the_password() {
    // Port 1 on the loopback interface: nothing listens, so the connection
    // is refused at once.
    let unreachable =
        Database::new("postgres://leasehold:s3cret@127.0.0.1:1/leasehold", 1).unwrap();
    let leases = authority(unreachable);
    let started = Instant::now();
    let result = tokio::time::timeout(
        DATABASE_CONNECT,
        leases.acquire(&request("east", "scheduler", "host-a")),
    )
    .await
    .expect("an unreachable database is reported before the connect timeout");
    match result {
        Err(e @ AuthorityError::Unavailable { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("postgres://leasehold:***@127.0.0.1:1/leasehold"),
                "{text}"
            );
            assert!(text.contains("refused"), "{text}");
            assert!(!text.contains("s3cret"), "{text}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < DATABASE_CONNECT);
}

/// A login role with no grants, dropped with the guard.
struct Role {
    admin_url: String,
    name: String,
}

impl Role {
    async fn create(test: &TestDatabase) -> Self {
        let name = format!("leasehold_test_role_{}", uuid::Uuid::new_v4().simple());
        let admin = test.database(1);
        admin
            .client()
            .await
            .unwrap()
            .batch_execute(&format!("CREATE ROLE {name} LOGIN"))
            .await
            .unwrap();
        Self {
            admin_url: test.url().to_string(),
            name,
        }
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok((client, conn)) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                {
                    tokio::spawn(conn);
                    let _ = client
                        .batch_execute(&format!("DROP ROLE IF EXISTS {name}"))
                        .await;
                }
            });
        })
        .join();
    }
}

#[tokio::test]
async fn missing_permissions_are_reported_clearly() {
    let test = TestDatabase::create().await;
    let role = Role::create(&test).await;
    let mut url = url::Url::parse(test.url()).unwrap();
    url.set_username(&role.name).unwrap();
    url.set_password(Some("s3cret")).unwrap();
    let database = Database::new(url.as_str(), 1).unwrap();
    let leases = authority(database.clone());
    match leases
        .acquire(&request("east", "scheduler", "host-a"))
        .await
    {
        Err(e @ AuthorityError::Unavailable { .. }) => {
            let text = e.to_string();
            assert!(text.contains("permission denied"), "{text}");
            assert!(text.contains(&format!("{}:***@", role.name)), "{text}");
            assert!(!text.contains("s3cret"), "{text}");
        }
        other => panic!("a role without grants must be refused clearly, got {other:?}"),
    }
    drop(leases);
    database.pool().close();
}

#[tokio::test]
async fn expiry_is_judged_by_the_database_clock() {
    const SHORT_TTL: Duration = Duration::from_millis(200);
    let test = TestDatabase::create().await;
    let first = authority(test.database(2));
    let second = authority(test.database(2));
    let short = AcquireRequest {
        ttl: SHORT_TTL,
        ..request("east", "scheduler", "host-a")
    };
    let held = grant(&first, &short).await;
    assert_eq!(
        (held.expires_at - held.acquired_at).to_std().unwrap(),
        SHORT_TTL
    );
    let other = request("east", "scheduler", "host-b");
    assert_eq!(refused(&second, &other).await, ("host-a".into(), Epoch(1)));

    eventually("the grant expires by the database clock", || async {
        !second.observe("east").await.unwrap()[0].active
    })
    .await;
    let taken = grant(&second, &other).await;
    assert_eq!(taken.fence.epoch, Epoch(2));
    let history = second.history(&other.key, 10).await.unwrap();
    assert_eq!(history[1].end_reason, Some(EndReason::Expired));
    assert_eq!(
        history[1].ended_at,
        Some(held.expires_at),
        "ended when it expired"
    );
}

/// Placement moves are recorded through a transaction pooler too: the
/// grant, release and observe statements that carry them, sent as unnamed
/// statements with the parameter types the server inferred
/// (`Database::prepare` under `pooler = "transaction"`).
#[tokio::test]
async fn placement_moves_are_recorded_with_unnamed_statements() {
    use crate::authority::{CrashDetection, MoveReason};
    let test = TestDatabase::create().await;
    let pooled = || authority(test.database(2).with_pooler(crate::db::Pooler::Transaction));
    let (first, second) = (pooled(), pooled());
    let a = request("east", "scheduler", "host-a");
    let held = grant(&first, &a).await;
    first
        .release_placed(
            &held.fence,
            EndReason::Released,
            Some(MoveReason::OverShare),
        )
        .await
        .unwrap();
    let to_b = request("east", "scheduler", "host-b");
    let taken = grant(&second, &to_b).await;
    let moved = first.observe("east").await.unwrap()[0].last_move.clone();
    let moved = moved.expect("the handover is recorded");
    assert_eq!(moved.reason, MoveReason::OverShare);
    assert_eq!(moved.at, taken.acquired_at);
    assert_eq!(
        (moved.from.as_deref(), moved.to.as_str()),
        (Some("host-a"), "host-b")
    );

    let admin = test.database(1);
    admin
        .client()
        .await
        .unwrap()
        .execute(
            "UPDATE leasehold_leases SET expires_at = clock_timestamp()",
            &[],
        )
        .await
        .unwrap();
    let lapsed = match first
        .acquire_placed(&a, CrashDetection::Ttl, Some(MoveReason::Lapsed))
        .await
        .unwrap()
    {
        Acquired::Granted(grant) => grant,
        other => panic!("a lapsed lease is granted: {other:?}"),
    };
    let moved = second.observe("east").await.unwrap()[0].last_move.clone();
    let moved = moved.expect("the takeover is recorded");
    assert_eq!(moved.reason, MoveReason::Lapsed);
    assert_eq!(moved.at, lapsed.acquired_at);
    assert_eq!(
        (moved.from.as_deref(), moved.to.as_str()),
        (Some("host-b"), "host-a")
    );
}

#[tokio::test]
async fn history_names_the_endpoint_without_the_password() {
    let test = TestDatabase::create().await;
    let mut url = url::Url::parse(test.url()).unwrap();
    // Trust authentication never asks for it, so any password connects.
    url.set_password(Some("s3cret")).unwrap();
    let leases = authority(Database::new(url.as_str(), 1).unwrap());
    let held = grant(&leases, &request("east", "scheduler", "host-a")).await;
    let history = leases.history(&held.fence.key, 1).await.unwrap();
    assert!(
        history[0].endpoint.contains(":***@"),
        "{}",
        history[0].endpoint
    );
    assert!(!history[0].endpoint.contains("s3cret"));
    assert_eq!(
        leases.identity().await.unwrap().endpoint,
        history[0].endpoint
    );
}

#[tokio::test]
async fn the_release_listener_reconnects_and_closes_its_own_session() {
    let test = TestDatabase::create().await;
    let database = test.url().rsplit('/').next().unwrap().to_string();
    let admin = test.database(1);
    let standby = authority(test.database(1));
    let holder = authority(test.database(1));
    let listeners = || async {
        count(
            &admin,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2",
            &[&database, &LISTENER_APPLICATION],
        )
        .await
    };

    let mut wakes = standby.released("east");
    let mut sessions = standby.listener_sessions();
    tokio::time::timeout(PROMPT, sessions.wait_for(|&n| n == 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(listeners().await, 1);
    assert_eq!(
        standby.database().pool().status().size,
        0,
        "the listener is not a pooled session"
    );

    assert_eq!(terminate(&admin, &database, LISTENER_APPLICATION).await, 1);
    tokio::time::timeout(PROMPT, sessions.wait_for(|&n| n == 2))
        .await
        .expect("the listener reconnects")
        .unwrap();
    // Releases missed while it was down are covered by one catch-up wake.
    assert!(wakes.has_changed().unwrap());
    wakes.borrow_and_update();

    let held = grant(&holder, &request("east", "scheduler", "host-a")).await;
    holder
        .release(&held.fence, EndReason::Released)
        .await
        .unwrap();
    tokio::time::timeout(PROMPT, wakes.changed())
        .await
        .expect("the reconnected listener delivers releases")
        .unwrap();

    drop(standby);
    eventually("the listener's session is closed", || async {
        listeners().await == 0
    })
    .await;
}

/// Whether the snapshot in `column` of tenure `epoch` (east/scheduler)
/// sees transaction `xid` as finished.
async fn tenure_snapshot_sees(admin: &Database, column: &str, epoch: i64, xid: &str) -> bool {
    admin
        .client()
        .await
        .unwrap()
        .query_one(
            &format!(
                "SELECT pg_visible_in_snapshot($1::text::xid8, {column}) FROM leasehold_tenures
                  WHERE cluster = 'east' AND lease = 'scheduler' AND epoch = $2"
            ),
            &[&xid, &epoch],
        )
        .await
        .unwrap()
        .get::<_, Option<bool>>(0)
        .unwrap_or_else(|| panic!("tenure {epoch} recorded no {column}"))
}

/// The fault suite's checker orders writes by the grant and release
/// snapshots (migration 4); they must be taken after the lease row is
/// locked, so a fenced write still in flight when the release (or grant)
/// starts, and committed while it waits for the row, is visible in them.
#[tokio::test]
async fn grant_and_release_snapshots_see_every_fenced_write_committed_before_them() {
    let test = TestDatabase::create().await;
    let pool = test.database(3);
    let holder = authority(pool.clone());
    let standby = authority(test.database(2));
    let admin = test.database(1);
    let held = grant(&holder, &request("east", "scheduler", "host-a")).await;

    // A fenced write, in flight: its tenure row held FOR SHARE.
    let mut client = pool.client().await.unwrap();
    let statements = FenceStatements::cached(&client).await.unwrap();
    let tx = client.transaction().await.unwrap();
    check_fence(&tx, &statements, &held.fence).await.unwrap();
    let xid: String = tx
        .query_one("SELECT pg_current_xact_id()::text", &[])
        .await
        .unwrap()
        .get(0);

    // The release must wait for it; commit the write only once it does.
    let release = tokio::spawn({
        let holder = holder.clone();
        let fence = held.fence.clone();
        async move { holder.release(&fence, EndReason::Released).await }
    });
    eventually("the release waits for the fenced write's row lock", || {
        let admin = admin.clone();
        async move {
            count(
                &admin,
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
                > 0
        }
    })
    .await;
    tx.commit().await.unwrap();
    tokio::time::timeout(PROMPT, release)
        .await
        .expect("the release finishes once the write committed")
        .unwrap()
        .unwrap();

    assert!(
        !tenure_snapshot_sees(&admin, "granted_snapshot", 1, &xid).await,
        "epoch 1's grant snapshot sees a write made under epoch 1"
    );
    assert!(
        tenure_snapshot_sees(&admin, "released_snapshot", 1, &xid).await,
        "the release snapshot was taken before the release had the lease row: \
         it misses a fenced write that committed while the release waited"
    );
    let next = grant(&standby, &request("east", "scheduler", "host-b")).await;
    assert_eq!(next.fence.epoch, Epoch(2));
    assert!(
        tenure_snapshot_sees(&admin, "granted_snapshot", 2, &xid).await,
        "epoch 2's grant snapshot misses a write of epoch 1 committed before it"
    );
}

/// A fenced write held open (a slow guest, a `COMMIT` stalled in the
/// network) must delay neither the holder's renewals nor a standby's
/// probe of the held lease, while a grant still waits for it (L4): a
/// write holds its tenure row and only reads the lease row, renewals take
/// the lease row `FOR NO KEY UPDATE`, and a probe reads the row without
/// locking it unless the lease is grantable. The write here is the store's
/// own fence check and count.
#[tokio::test]
async fn a_write_held_open_delays_no_renewal_and_no_probe() {
    // Well below the 5 s a blocked renewal would wait (the idle bound of
    // the write's transaction, and the database statement bound).
    const QUICK: Duration = Duration::from_secs(1);
    let test = TestDatabase::create().await;
    let pool = test.database(3);
    let holder = authority(pool.clone());
    let standby = authority(test.database(2));
    let held = grant(&holder, &request("east", "scheduler", "host-a")).await;

    let mut client = pool.client().await.unwrap();
    let statements = FenceStatements::cached(&client).await.unwrap();
    let tx = client.transaction().await.unwrap();
    check_fence_and_count(tx.client(), &statements, &held.fence)
        .await
        .unwrap();

    // Renewals while the write is open: each answers at once.
    for _ in 0..3 {
        let renewed =
            tokio::time::timeout(QUICK, holder.renew(std::slice::from_ref(&held.fence), TTL))
                .await
                .expect("a renewal must not wait for a fenced write")
                .unwrap();
        assert!(
            matches!(renewed.as_slice(), [Renewed::Extended { .. }]),
            "{renewed:?}"
        );
    }
    // A standby's probe of the held lease answers at once too, locking
    // nothing: a renewal right after it is not queued behind it.
    let probed = tokio::time::timeout(
        QUICK,
        standby.acquire(&request("east", "scheduler", "host-b")),
    )
    .await
    .expect("a probe of a held lease must not wait for a fenced write")
    .unwrap();
    assert!(matches!(probed, Acquired::Held { .. }), "{probed:?}");
    tokio::time::timeout(QUICK, holder.renew(std::slice::from_ref(&held.fence), TTL))
        .await
        .expect("a renewal after a probe")
        .unwrap();
    tx.commit().await.unwrap();
}

/// A grant that waits behind a fenced write the holder left open (a
/// partition, say) gives up within its bound instead of holding one of the
/// authority's connections until the server ends that write; once the
/// write ends, the lease is granted at the next epoch.
#[tokio::test]
async fn a_grant_behind_an_open_fenced_write_gives_up_within_its_bound() {
    let test = TestDatabase::create().await;
    let holder = authority(test.database(2));
    let standby = authority(test.database(2));
    let admin = test.database(2);
    let held = grant(&holder, &request("east", "scheduler", "host-a")).await;

    // The holder's write in flight: the store's own fence check and count
    // (holding the tenure row), left open. The lease then expires.
    let mut writer = admin.client().await.unwrap();
    let statements = FenceStatements::cached(&writer).await.unwrap();
    let write = writer.transaction().await.unwrap();
    check_fence_and_count(write.client(), &statements, &held.fence)
        .await
        .unwrap();
    admin
        .client()
        .await
        .unwrap()
        .execute(
            "UPDATE leasehold_leases SET expires_at = clock_timestamp()",
            &[],
        )
        .await
        .unwrap();

    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(3),
        standby.acquire(&request("east", "scheduler", "host-b")),
    )
    .await
    .expect("the grant must give up on the lock within its bound, not wait for the write")
    .unwrap();
    let waited = started.elapsed();
    match answer {
        Acquired::Held { holder, epoch, .. } => {
            assert_eq!((holder.as_str(), epoch), ("host-a", held.fence.epoch));
        }
        other => panic!("granted while a fenced write of the old tenure is open: {other:?}"),
    }
    assert!(
        waited >= crate::timeouts::GRANT_LOCK_TIMEOUT,
        "gave up after {waited:?}, before the bound: it did not wait for the lock"
    );

    // The write ends: the standby is granted the next epoch.
    write.rollback().await.unwrap();
    let next = grant(&standby, &request("east", "scheduler", "host-b")).await;
    assert_eq!(next.fence.epoch, Epoch(held.fence.epoch.0 + 1));
}

/// A database made by a test from another (a template copy), dropped with
/// this value, under whatever name it then has.
struct MadeDatabase {
    admin_url: String,
    name: std::sync::Mutex<String>,
}

impl MadeDatabase {
    /// `CREATE DATABASE <new> TEMPLATE <of>` on the server of `of`; the
    /// sessions on `of` are ended first (a template must have none).
    async fn template_copy(of: &TestDatabase) -> Self {
        let source = database_name(of.url());
        let admin_url = admin_url(of.url());
        let name = format!("leasehold_copy_{}", uuid::Uuid::new_v4().simple());
        let admin = admin_client(&admin_url).await;
        end_sessions(&admin, &source).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {source}"))
            .await
            .expect("template copy");
        Self {
            admin_url,
            name: std::sync::Mutex::new(name),
        }
    }

    fn name(&self) -> String {
        self.name.lock().unwrap().clone()
    }

    fn url(&self) -> String {
        let mut url = url::Url::parse(&self.admin_url).unwrap();
        url.set_path(&self.name());
        url.to_string()
    }
}

impl Drop for MadeDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let admin = admin_client(&admin_url).await;
                let _ = admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
            });
        })
        .join();
    }
}

fn database_name(url: &str) -> String {
    url::Url::parse(url)
        .unwrap()
        .path()
        .trim_start_matches('/')
        .to_string()
}

/// The server's `postgres` database, where databases are made and renamed.
fn admin_url(url: &str) -> String {
    let mut url = url::Url::parse(url).unwrap();
    url.set_path("postgres");
    url.to_string()
}

async fn admin_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// End every other session on database `name` (CREATE DATABASE ...
/// TEMPLATE and RENAME need none), until none is left: a pool may open a
/// new one meanwhile.
async fn end_sessions(admin: &tokio_postgres::Client, name: &str) {
    let deadline = Instant::now() + PROMPT;
    loop {
        let left: i64 = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE datname = $1 AND pid <> pg_backend_pid()",
                &[&name],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "sessions on {name} keep coming");
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn a_template_copy_is_refused_as_a_copy_naming_both_databases() {
    let original = TestDatabase::create().await;
    let first = authority(original.database(1)).identity().await.unwrap();
    let copy = MadeDatabase::template_copy(&original).await;
    let copy_db = Database::new(&copy.url(), 2).unwrap();
    // Everything the uuid and the server say is the same: only the oid
    // tells the copy from the original.
    let copied: uuid::Uuid = copy_db
        .client()
        .await
        .unwrap()
        .query_one("SELECT id FROM leasehold_database", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        copied, first.database_id,
        "a template copy carries the uuid"
    );

    let leases = authority(copy_db.clone());
    for refused in [
        leases.identity().await.map(drop),
        leases
            .acquire(&request("east", "scheduler", "host-a"))
            .await
            .map(drop),
    ] {
        match refused {
            Err(AuthorityError::WrongDatabase { problems, .. }) => {
                assert!(problems.contains("is a copy"), "{problems}");
                assert!(problems.contains(&copy.name()), "{problems}");
                assert!(
                    problems.contains(&database_name(original.url())),
                    "{problems}"
                );
                assert!(
                    problems.contains(&format!("oid {}", first.database_oid)),
                    "{problems}"
                );
            }
            other => panic!("a template copy must be refused, got {other:?}"),
        }
    }
    let granted: i64 = copy_db
        .client()
        .await
        .unwrap()
        .query_one("SELECT count(*) FROM leasehold_leases", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(granted, 0, "nothing was granted in the copy");
    // The original is still itself.
    grant(
        &authority(original.database(2)),
        &request("east", "scheduler", "host-a"),
    )
    .await;
}

/// The URL a host uses comes to reach another database of the same server
/// (a restore put in place under the original's name): renewals, releases
/// and store writes are refused, first as a copy, then, once the copy's
/// row claims to be where it is (as if adopted), by the oid pinned when
/// the host verified the original.
#[tokio::test]
async fn renew_release_and_writes_refuse_a_copy_put_in_the_originals_place() {
    use crate::store::{ObjectKey, Store as _};
    let task = |name: &str| ObjectKey {
        kind: "tasks".into(),
        name: name.into(),
    };
    let original = TestDatabase::create().await;
    let name = database_name(original.url());
    let holder = authority(original.database(2));
    let verified = holder.verify().await.unwrap();
    let held = grant(&holder, &request("east", "scheduler", "host-a")).await;
    let store = crate::store::PostgresStore::new(original.database(2));
    store.pin_database(&verified);
    store.put("east", &task("t1"), "{}", None).await.unwrap();

    // Swap: the original moves aside, the copy takes its name.
    let copy = MadeDatabase::template_copy(&original).await;
    let admin = admin_client(&admin_url(original.url())).await;
    let aside = format!("{name}_aside");
    end_sessions(&admin, &name).await;
    admin
        .batch_execute(&format!("ALTER DATABASE {name} RENAME TO {aside}"))
        .await
        .unwrap();
    end_sessions(&admin, &copy.name()).await;
    admin
        .batch_execute(&format!("ALTER DATABASE {} RENAME TO {name}", copy.name()))
        .await
        .unwrap();
    // Dropped under its new name by `original`; the original under its
    // new one by `copy`.
    *copy.name.lock().unwrap() = aside;

    let t2 = task("t2");
    let write = || store.put("east", &t2, "{}", None);
    for phase in [
        "is a copy".to_string(),
        format!("had oid {}", verified.database_oid),
    ] {
        // A call may first meet a session the swap ended; the next one
        // reaches the copy.
        let mut renewed = holder.renew(std::slice::from_ref(&held.fence), TTL).await;
        if matches!(renewed, Err(AuthorityError::Unavailable { .. })) {
            renewed = holder.renew(std::slice::from_ref(&held.fence), TTL).await;
        }
        match renewed {
            Err(AuthorityError::WrongDatabase { problems, .. }) => {
                assert!(problems.contains(&phase), "{phase:?} missing: {problems}");
            }
            other => panic!("renewing at a copy must be refused ({phase}), got {other:?}"),
        }
        match holder.release(&held.fence, EndReason::Released).await {
            Err(AuthorityError::WrongDatabase { problems, .. }) => {
                assert!(problems.contains(&phase), "{phase:?} missing: {problems}");
            }
            other => panic!("releasing at a copy must be refused ({phase}), got {other:?}"),
        }
        // The store refuses by its pin, the same in both phases.
        let mut written = write().await;
        if matches!(&written, Err(e) if !e.to_string().contains("verified")) {
            written = write().await;
        }
        let text = written
            .expect_err("a write to the copy must be refused")
            .to_string();
        assert!(
            text.contains(&format!("oid {} was verified", verified.database_oid)),
            "{text}"
        );
        // Make the copy's row claim to be where it is now (what adopting
        // it would do): then only the pinned oid tells it apart.
        admin_client(original.url())
            .await
            .batch_execute(
                "UPDATE leasehold_database
                    SET database_oid = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .await
            .unwrap();
    }
    let released: bool = admin_client(original.url())
        .await
        .query_one(
            "SELECT released FROM leasehold_leases WHERE cluster = 'east' AND name = 'scheduler'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!released, "nothing was released in the copy");
}

/// Two hosts of different schema versions: the newer one migrates (one
/// migration more than this build has), and the older one, leading and
/// writing until then, refuses to renew, acquire, write or start, each
/// time saying to upgrade it.
#[tokio::test]
async fn a_newer_host_migrates_and_the_older_one_refuses_saying_to_upgrade() {
    use crate::store::{ObjectKey, Store as _};
    let test = TestDatabase::create().await;
    let older = authority(test.database(2));
    let verified = older.verify().await.unwrap();
    let held = grant(&older, &request("east", "scheduler", "host-a")).await;
    let store = crate::store::PostgresStore::new(test.database(2));
    store.pin_database(&verified);
    let task = ObjectKey {
        kind: "tasks".into(),
        name: "t1".into(),
    };
    store.put("east", &task, "{}", None).await.unwrap();

    let mut newer: Vec<(i32, &str)> = crate::db::MIGRATIONS.to_vec();
    let future = newer.iter().map(|(v, _)| *v).max().unwrap() + 1;
    newer.push((future, "CREATE TABLE leasehold_from_a_newer_host (id int)"));
    let applied = test
        .database(1)
        .migrate_with(&newer, crate::timeouts::MIGRATION_LOCK_WAIT)
        .await
        .unwrap();
    assert_eq!(applied, [future], "the newer host applies its migration");

    let upgrade = |text: &str| {
        assert!(
            text.contains("upgrade this host") && text.contains(&future.to_string()),
            "{text}"
        );
    };
    match older.renew(std::slice::from_ref(&held.fence), TTL).await {
        Err(e @ AuthorityError::WrongDatabase { .. }) => upgrade(&e.to_string()),
        other => panic!("the older host must not renew, got {other:?}"),
    }
    match older.acquire(&request("east", "rollout", "host-a")).await {
        Err(e @ AuthorityError::WrongDatabase { .. }) => upgrade(&e.to_string()),
        other => panic!("the older host must not acquire, got {other:?}"),
    }
    let written = store.put("east", &task, "{\"again\": true}", None).await;
    upgrade(
        &written
            .expect_err("the older host must not write")
            .to_string(),
    );
    let started = test.database(1).migrate().await;
    upgrade(
        &started
            .expect_err("the older host must not start")
            .to_string(),
    );
}

/// A host that finds the migration lock held (another host migrating, or
/// stalled mid-migration) gives up after its wait, naming that session,
/// and changes nothing.
#[tokio::test]
async fn a_held_migration_lock_is_reported_naming_its_holder() {
    let test = TestDatabase::create().await;
    let mut other = test.database(1).client().await.unwrap();
    let migrating = other.transaction().await.unwrap();
    let pid: i32 = migrating
        .query_one(
            "SELECT pg_backend_pid() FROM (SELECT pg_advisory_xact_lock(7263414711)) AS locked",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let error = tokio::time::timeout(
        PROMPT,
        test.database(1)
            .migrate_with(crate::db::MIGRATIONS, Duration::from_millis(200)),
    )
    .await
    .expect("the wait for the migration lock is bounded")
    .expect_err("the lock is held")
    .to_string();
    assert!(error.contains("holds the migration lock"), "{error}");
    assert!(error.contains(&format!("backend pid {pid}")), "{error}");
    migrating.rollback().await.unwrap();
    assert_eq!(
        test.database(1).migrate().await.unwrap(),
        Vec::<i32>::new(),
        "once the lock is free, there is nothing left to do"
    );
}

/// A migration that needs a table lock a long transaction holds gives up
/// after its bound instead of queueing every later query of that table
/// behind it, and applies nothing.
#[tokio::test]
async fn a_migration_behind_a_long_transaction_gives_up_without_wedging_the_table() {
    let test = TestDatabase::create().await;
    let mut reader = test.database(1).client().await.unwrap();
    let long = reader.transaction().await.unwrap();
    long.query("SELECT * FROM leasehold_database", &[])
        .await
        .unwrap();
    let mut newer: Vec<(i32, &str)> = crate::db::MIGRATIONS.to_vec();
    let future = newer.iter().map(|(v, _)| *v).max().unwrap() + 1;
    newer.push((
        future,
        "ALTER TABLE leasehold_database ADD COLUMN from_a_newer_host int",
    ));
    let db = test.database(1);
    let migrating = tokio::spawn({
        let newer: Vec<(i32, String)> = newer.iter().map(|(v, s)| (*v, s.to_string())).collect();
        async move {
            let newer: Vec<(i32, &str)> = newer.iter().map(|(v, s)| (*v, s.as_str())).collect();
            db.migrate_with(&newer, crate::timeouts::MIGRATION_LOCK_WAIT)
                .await
        }
    });
    let admin = test.database(1);
    eventually("the migration waits for its table lock", || async {
        count(
            &admin,
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'",
            &[],
        )
        .await
            == 1
    })
    .await;
    let bound = crate::timeouts::MIGRATION_STATEMENT_LOCK * 3;
    let error = tokio::time::timeout(bound, migrating)
        .await
        .unwrap_or_else(|_| panic!("the migration still waits after {bound:?}"))
        .unwrap()
        .expect_err("the migration must give up")
        .to_string();
    assert!(error.contains("gave up"), "{error}");
    assert!(error.contains(&format!("migration {future}")), "{error}");
    long.rollback().await.unwrap();
    let applied: i64 = count(
        &admin,
        "SELECT count(*) FROM leasehold_migrations WHERE version = $1",
        &[&future],
    )
    .await;
    assert_eq!(applied, 0, "nothing of the migration was applied");
}

/// The server's current WAL timeline, as grants read it.
async fn wal_timeline(db: &Database) -> i64 {
    db.client()
        .await
        .unwrap()
        .query_one(concat!("SELECT ", wal_timeline!()), &[])
        .await
        .unwrap()
        .get(0)
}

/// The highest epoch `db` ever issued, from its lease rows and tenures.
async fn highest_epoch(db: &Database) -> i64 {
    db.client()
        .await
        .unwrap()
        .query_one(
            "SELECT greatest((SELECT max(epoch) FROM leasehold_leases),
                             (SELECT max(epoch) FROM leasehold_tenures))",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// The floor a grant would get on `timeline` (what a failover to it
/// would give: the same function the grants call).
async fn floor_on(db: &Database, timeline: i64) -> i64 {
    db.client()
        .await
        .unwrap()
        .query_one("SELECT leasehold_epoch_floor($1)", &[&timeline])
        .await
        .unwrap()
        .get(0)
}

/// Adopting a copy moves every epoch up a 2^32 bucket on a server still at
/// its timeline (ARCHITECTURE, "Failover"): the floor of the next
/// failover must still clear every epoch issued, before the adoption and
/// after it, and a grant after the adoption starts above every epoch the
/// original gave, whatever the operator's statements did to the leases.
#[tokio::test]
async fn after_an_adoption_a_failovers_floor_is_above_every_epoch_issued() {
    let original = TestDatabase::create().await;
    let original_db = original.database(2);
    let before = authority(original_db.clone());
    // Epochs 1 and 2 of one lease, 1 of another.
    let first = grant(&before, &request("east", "scheduler", "host-a")).await;
    before
        .release(&first.fence, EndReason::Released)
        .await
        .unwrap();
    grant(&before, &request("east", "scheduler", "host-b")).await;
    grant(&before, &request("east", "rollout", "host-a")).await;
    let timeline = wal_timeline(&original_db).await;
    assert!(
        floor_on(&original_db, timeline + 1).await > highest_epoch(&original_db).await,
        "the next timeline's floor is above the epochs of this one"
    );

    // A copy, adopted as the README says (every host stopped).
    let copy = MadeDatabase::template_copy(&original).await;
    let copy_db = Database::new(&copy.url(), 2).unwrap();
    admin_client(&copy.url())
        .await
        .batch_execute(
            "UPDATE leasehold_database
                SET system_identifier = (SELECT system_identifier FROM pg_control_system()),
                    database_oid = (SELECT oid FROM pg_database WHERE datname = current_database()),
                    database_name = current_database();
             UPDATE leasehold_leases SET epoch = ((epoch >> 32) + 1) << 32, released = true;",
        )
        .await
        .unwrap();
    let adopted = authority(copy_db.clone());
    let after = grant(&adopted, &request("east", "scheduler", "host-c")).await;
    assert!(
        after.fence.epoch.0 > 1 << 32,
        "the adopted copy leads above the original's epochs: {after:?}"
    );
    // A lease the adoption did not move (an operator who skipped the
    // lease update, or a lease first granted now) starts above them too.
    let fresh = grant(&adopted, &request("east", "provisioner", "host-c")).await;
    assert!(fresh.fence.epoch.0 > 1 << 32, "{fresh:?}");
    grant(&adopted, &request("east", "rollout", "host-c")).await;

    // Simulated failover: the next timeline's floor is above every epoch
    // the adopted copy issued (the grants a promoted standby may lack).
    let issued = highest_epoch(&copy_db).await;
    let timeline = wal_timeline(&copy_db).await;
    let floor = floor_on(&copy_db, timeline + 1).await;
    assert!(
        floor > issued,
        "after the adoption, a failover to timeline {} would grant from {floor}, not above \
         epoch {issued} already issued on timeline {timeline}",
        timeline + 1
    );
    // And the one after that, above the floor before it.
    assert!(floor_on(&copy_db, timeline + 2).await > floor + (1 << 31));
}
