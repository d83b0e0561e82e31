//! Hosts behind a real PgBouncer in transaction pooling (`[database]
//! pooler = "transaction"`, issue 18 point 4), against a PgBouncer of the
//! test's own ([`leasehold_tests::pgbouncer`], installed when missing):
//!
//! - the lease authority's and the store's operations, many at once over
//!   a few server sessions, and the same with the mode off failing on
//!   named prepared statements (what the mode is for);
//! - the fenced-write race: a stale tenure's commits, racing the
//!   successor's grant through the pooler, are refused from the grant on;
//! - the notification self-test: passes with LISTEN on a direct session,
//!   warns when LISTEN goes through the pooler too;
//! - a handover between two real `leasehold` processes through PgBouncer
//!   (SIGKILL of the leader: the other leads at the next epoch), with a
//!   workload and the invariant checker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::authority::{AcquireRequest, Acquired, Authority, EndReason, ExpectedIdentity};
use leasehold_host::db::{AUTHORITY_APPLICATION, Database, Pooler};
use leasehold_host::fence::{Fence, LeaseKey};
use leasehold_host::store::postgres::PostgresStore;
use leasehold_host::store::{NewEvent, ObjectKey, Op, Store, StoreError};
use leasehold_host::testing::TestDatabase;
use leasehold_tests::TEST_WAIT;
use leasehold_tests::faults::rig::{Rig, RigSpec, Timing};
use leasehold_tests::pgbouncer::PgBouncer;
use leasehold_tests::process::eventually;

const SCHEDULER: &str = "scheduler";

/// The server the test database lives on, as PgBouncer reaches it.
fn server_of(db: &TestDatabase) -> std::net::SocketAddr {
    let url = url::Url::parse(db.url()).expect("database url");
    let host = match url.host_str() {
        None | Some("localhost") => "127.0.0.1",
        Some(host) => host,
    };
    format!("{host}:{}", url.port().unwrap_or(5432))
        .parse()
        .expect("database address")
}

/// A pool through `bouncer` in `pooler` mode, its dedicated sessions at
/// the server itself.
fn pooled(bouncer: &PgBouncer, db: &TestDatabase, pooler: Pooler, size: usize) -> Database {
    Database::new(&bouncer.url_for(db.url()), size)
        .expect("pooled url")
        .with_pooler(pooler)
        .with_session_url(db.url())
        .expect("session url")
}

fn key(kind: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind: kind.into(),
        name: name.into(),
    }
}

fn request(cluster: &str, lease: &str, holder: &str, ttl: Duration) -> AcquireRequest {
    AcquireRequest {
        key: LeaseKey::new(cluster, lease),
        holder: holder.into(),
        ttl,
    }
}

async fn granted(authority: &dyn Authority, request: &AcquireRequest) -> Fence {
    match authority.acquire(request).await.expect("acquire") {
        Acquired::Granted(grant) => grant.fence,
        Acquired::Held { holder, .. } => panic!("{} is held by {holder}", request.key),
    }
}

/// One lease's life and a store workload under it: grant, fenced commits
/// (creates, an update, events), renewals, reads of every kind, a
/// takeover after release and the stale fence refused. Answers the first
/// error, as text.
async fn lease_and_store_round(
    authority: &PostgresAuthority,
    store: &PostgresStore,
    cluster: &str,
    lease: &str,
) -> Result<(), String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |error: &dyn std::fmt::Display| format!("{lease}: {what}: {error}")
    };
    let ttl = Duration::from_secs(10);
    let first = match authority
        .acquire(&request(cluster, lease, "host-a", ttl))
        .await
        .map_err(|x| e("acquire")(&x))?
    {
        Acquired::Granted(grant) => grant.fence,
        Acquired::Held { holder, .. } => return Err(format!("{lease}: held by {holder}")),
    };
    let mut version = 0;
    for i in 0..3 {
        let task = key("tasks", &format!("{lease}-{i}"));
        let committed = store
            .commit_fenced(
                &first,
                &[Op::Create {
                    key: task.clone(),
                    value: format!("{{\"n\":{i}}}"),
                }],
                &[NewEvent {
                    key: task.clone(),
                    reason: "Created".into(),
                    message: format!("{task} created"),
                }],
            )
            .await
            .map_err(|x| e("commit")(&x))?;
        version = committed.revision;
        authority
            .renew(std::slice::from_ref(&first), ttl)
            .await
            .map_err(|x| e("renew")(&x))?;
    }
    let last = key("tasks", &format!("{lease}-2"));
    store
        .commit_fenced(
            &first,
            &[Op::Update {
                key: last.clone(),
                expected_version: version,
                value: "{\"n\":\"done\"}".into(),
            }],
            &[],
        )
        .await
        .map_err(|x| e("update")(&x))?;
    let got = store
        .get(cluster, &last)
        .await
        .map_err(|x| e("get")(&x))?
        .ok_or_else(|| format!("{lease}: {last} is missing"))?;
    if !got.value.contains("done") {
        return Err(format!("{lease}: {last} reads {}", got.value));
    }
    store
        .list(cluster, "tasks", None, 100)
        .await
        .map_err(|x| e("list")(&x))?;
    store
        .events(cluster, 0, 100)
        .await
        .map_err(|x| e("events")(&x))?;
    store
        .changes(cluster, &[], 0, 100)
        .await
        .map_err(|x| e("changes")(&x))?;
    store
        .count(cluster, "tasks", 1000)
        .await
        .map_err(|x| e("count")(&x))?;
    store
        .written_by(cluster, &last)
        .await
        .map_err(|x| e("written_by")(&x))?;
    authority
        .observe(cluster)
        .await
        .map_err(|x| e("observe")(&x))?;
    authority
        .release(&first, EndReason::Released)
        .await
        .map_err(|x| e("release")(&x))?;
    let next = match authority
        .acquire(&request(cluster, lease, "host-b", ttl))
        .await
        .map_err(|x| e("acquire after release")(&x))?
    {
        Acquired::Granted(grant) => grant.fence,
        Acquired::Held { holder, .. } => {
            return Err(format!("{lease}: held by {holder} after its release"));
        }
    };
    if next.epoch.0 != first.epoch.0 + 1 {
        return Err(format!("{lease}: {first} was followed by {next}"));
    }
    match store
        .commit_fenced(
            &first,
            &[Op::Create {
                key: key("tasks", &format!("{lease}-stale")),
                value: "{}".into(),
            }],
            &[],
        )
        .await
    {
        Err(StoreError::Fenced { .. }) => {}
        other => return Err(format!("{lease}: the stale {first} committed: {other:?}")),
    }
    let history = authority
        .history(&next.key, 10)
        .await
        .map_err(|x| e("history")(&x))?;
    let tenure = history
        .iter()
        .find(|t| t.epoch == first.epoch)
        .ok_or_else(|| format!("{lease}: no tenure {} in {history:?}", first.epoch.0))?;
    if tenure.writes != 4 {
        return Err(format!(
            "{lease}: tenure {} counted {} writes, not 4",
            first.epoch.0, tenure.writes
        ));
    }
    authority
        .release(&next, EndReason::Released)
        .await
        .map_err(|x| e("last release")(&x))?;
    Ok(())
}

/// `rounds` of [`lease_and_store_round`] on `leases` leases at once,
/// through a pool of `pooler` mode; every error, as text.
async fn run_rounds(
    bouncer: &PgBouncer,
    database: &TestDatabase,
    pooler: Pooler,
    leases: usize,
) -> Vec<String> {
    let db = pooled(bouncer, database, pooler, 6);
    let authority = match PostgresAuthority::connect(
        db.sibling(3, AUTHORITY_APPLICATION)
            .expect("authority pool"),
        ExpectedIdentity::default(),
    )
    .await
    {
        Ok(authority) => authority,
        Err(e) => return vec![format!("connect: {e}")],
    };
    let identity = match authority.verify().await {
        Ok(identity) => identity,
        Err(e) => return vec![format!("verify: {e}")],
    };
    let store = PostgresStore::new(db);
    store.pin_database(&identity);
    let (authority, store) = (Arc::new(authority), Arc::new(store));
    let cluster = format!("pgb-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let tasks: Vec<_> = (0..leases)
        .map(|i| {
            let (authority, store, cluster) = (authority.clone(), store.clone(), cluster.clone());
            tokio::spawn(async move {
                lease_and_store_round(&authority, &store, &cluster, &format!("ctl-{i}")).await
            })
        })
        .collect();
    let mut errors = Vec::new();
    for task in tasks {
        match leasehold_tests::within(TEST_WAIT, "a round finishes", task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("task: {e}")),
        }
    }
    errors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_and_store_operations_run_through_pgbouncer_in_transaction_mode() {
    let database = TestDatabase::create().await;
    let bouncer = PgBouncer::start(server_of(&database));
    let errors = run_rounds(&bouncer, &database, Pooler::Transaction, 8).await;
    assert!(
        errors.is_empty(),
        "through PgBouncer in transaction pooling, with pooler = \"transaction\":\n{}\n\
         PgBouncer log:\n{}",
        errors.join("\n"),
        bouncer.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_mode_named_statements_fail_through_pgbouncer() {
    let database = TestDatabase::create().await;
    let bouncer = PgBouncer::start(server_of(&database));
    let errors = run_rounds(&bouncer, &database, Pooler::None, 8).await;
    assert!(
        errors.iter().any(|e| e.contains("prepared statement")),
        "with the mode off, named statements were expected to fail through PgBouncer in \
         transaction pooling (\"prepared statement … does not exist / already exists\"); \
         errors: {errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_tenures_racing_writes_are_refused_from_the_successors_grant_on() {
    let database = TestDatabase::create().await;
    let bouncer = PgBouncer::start(server_of(&database));
    let db = pooled(&bouncer, &database, Pooler::Transaction, 6);
    let authority = PostgresAuthority::connect(
        db.sibling(3, AUTHORITY_APPLICATION)
            .expect("authority pool"),
        ExpectedIdentity::default(),
    )
    .await
    .expect("authority through PgBouncer");
    let identity = authority.verify().await.expect("verify");
    let store = Arc::new(PostgresStore::new(db));
    store.pin_database(&identity);
    let cluster = "race";
    // The shortest grant: it expires while its holder keeps writing.
    let old = granted(
        &authority,
        &request(cluster, SCHEDULER, "host-a", Duration::from_secs(1)),
    )
    .await;
    let granted_next = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(AtomicU64::new(0));
    let writer = {
        let (store, old) = (store.clone(), old.clone());
        let (granted_next, accepted) = (granted_next.clone(), accepted.clone());
        tokio::spawn(async move {
            for i in 0.. {
                let after_grant = granted_next.load(Ordering::SeqCst);
                let result = store
                    .commit_fenced(
                        &old,
                        &[Op::Create {
                            key: key("tasks", &format!("t-{i}")),
                            value: "{}".into(),
                        }],
                        &[],
                    )
                    .await;
                match result {
                    Ok(_) => {
                        assert!(
                            !after_grant,
                            "commit {i} of the stale {old}, started after the successor's \
                             grant, was accepted"
                        );
                        accepted.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(StoreError::Fenced { .. }) => return i,
                    Err(e) => panic!("commit {i} of {old}: {e}"),
                }
            }
            unreachable!()
        })
    };
    // The successor asks until the old grant expired (by the database
    // clock) and it is granted.
    let next = eventually("host-b is granted the lease", TEST_WAIT, || async {
        match authority
            .acquire(&request(
                cluster,
                SCHEDULER,
                "host-b",
                Duration::from_secs(10),
            ))
            .await
            .expect("acquire")
        {
            Acquired::Granted(grant) => Some(grant.fence),
            Acquired::Held { .. } => None,
        }
    })
    .await;
    granted_next.store(true, Ordering::SeqCst);
    assert_eq!(next.epoch.0, old.epoch.0 + 1);
    let attempts = leasehold_tests::within(TEST_WAIT, "the stale writer is fenced", writer)
        .await
        .expect("the stale writer");
    let accepted = accepted.load(Ordering::SeqCst);
    assert!(accepted > 0, "no commit of {old} landed before its expiry");
    // Every accepted write is counted against the old tenure, and each
    // landed object says so.
    let history = authority.history(&next.key, 10).await.expect("history");
    let tenure = history
        .iter()
        .find(|t| t.epoch == old.epoch)
        .expect("the old tenure");
    assert_eq!(tenure.writes, accepted, "{history:?}");
    for i in 0..attempts {
        let origin = store
            .written_by(cluster, &key("tasks", &format!("t-{i}")))
            .await
            .expect("written_by");
        assert!(origin.is_some(), "t-{i} of the stale writer is missing");
    }
    let stale = store
        .get(cluster, &key("tasks", &format!("t-{attempts}")))
        .await
        .expect("get");
    assert!(stale.is_none(), "the refused commit left {stale:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notification_self_test_passes_on_a_direct_session_and_warns_through_the_pooler() {
    let database = TestDatabase::create().await;
    let bouncer = PgBouncer::start(server_of(&database));
    let db = pooled(&bouncer, &database, Pooler::Transaction, 2);

    let direct = PostgresAuthority::connect(db.clone(), ExpectedIdentity::default())
        .await
        .expect("authority");
    let took = direct
        .check_notifications(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("LISTEN on the server itself: {e}"));
    eprintln!("a notification through PgBouncer reached the direct LISTEN session in {took:?}");
    assert_eq!(db.pool_stats().notifications, Some(true));

    // LISTEN through the pooler as well: the notification never reaches
    // the listening client.
    let through = PostgresAuthority::connect(db.clone(), ExpectedIdentity::default())
        .await
        .expect("authority");
    through
        .use_session_url(&bouncer.url_for(database.url()))
        .expect("session url");
    let warning = through
        .check_notifications(Duration::from_secs(2))
        .await
        .expect_err("LISTEN through a transaction pooler must fail the self-test");
    assert!(
        warning.contains("did not arrive") && warning.contains("session_url"),
        "{warning}"
    );
    assert_eq!(
        db.pool_stats().notifications,
        Some(false),
        "the failed self-test shows in the pool's metrics"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_behind_pgbouncer_hand_over_at_the_next_epoch_and_the_checker_finds_nothing() {
    let database = TestDatabase::create().await;
    let direct = database.url().to_string();
    let bouncer = PgBouncer::start(server_of(&database));
    let lines = format!("pooler = \"transaction\"\nsession_url = \"{direct}\"\n");
    let mut spec = RigSpec::scheduler(2);
    spec.timing = Timing::SCENARIO;
    let mut rig = Rig::start_through(spec, database, Some(bouncer.addr()), &lines).await;
    rig.nodes(&[("n1", 100), ("n2", 100)]).await;
    let (leader, epoch) = rig.leader(SCHEDULER, Duration::from_secs(30)).await;
    // Both hosts' notifications, sent through PgBouncer, reached their
    // LISTEN sessions at session_url: logged and in /metrics.
    for i in 0..2 {
        eventually(
            &format!("host-{i} passes the notification self-test"),
            TEST_WAIT,
            || async {
                let shown = rig.hosts[i]
                    .replica
                    .metric("leasehold_db_notifications_verified{pool=\"main\"}")
                    .await?;
                (shown != -1.0).then_some(())
            },
        )
        .await;
        assert_eq!(
            rig.hosts[i]
                .replica
                .metric("leasehold_db_notifications_verified{pool=\"main\"}")
                .await,
            Some(1.0),
            "{}",
            rig.hosts[i].replica.log_tail(40)
        );
        assert!(
            rig.hosts[i]
                .replica
                .log()
                .contains("notification self-test passed")
        );
    }
    let load = rig.workload("t", Duration::from_millis(50));
    load.wait_acknowledged(3, TEST_WAIT).await;
    rig.hosts[leader].replica.kill().await;
    let (next, next_epoch) = rig
        .leader_after(SCHEDULER, epoch, Duration::from_secs(30))
        .await;
    assert_eq!((next, next_epoch), (1 - leader, epoch + 1));
    load.wait_acknowledged(load.acknowledged() + 3, TEST_WAIT)
        .await;
    load.stop().await;
    rig.settled(Duration::from_secs(30)).await;
    let report = rig.check().await;
    eprintln!("handover through PgBouncer: {report}");
    report.assert_clean("handover through PgBouncer");
    // The pooler goes first: the rig's database is dropped after it.
    drop(bouncer);
}
