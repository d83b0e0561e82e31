//! Hostile cases: database. A database that refuses writes and then
//! accepts them again, and a second host started with a live host's
//! holder name, each against real `leasehold` processes on a database of
//! their own.

use std::time::Duration;

use leasehold_host::testing::TestDatabase;
use leasehold_tests::TempDir;
use leasehold_tests::process::{Replica, eventually, free_port};
use leasehold_tests::{guest_dir, http};
use serde_json::Value;

/// Short lease timing, as in the service suite: a lost lease is noticed
/// within 1.4 s.
const TIMING: &str =
    "lease_ttl = \"2000ms\"\nrenew_interval = \"200ms\"\nrenew_deadline = \"1400ms\"\n";

/// Bound on each step that waits for the host to notice something.
const NOTICE: Duration = Duration::from_secs(15);

/// Pool size of the read-only case: small, so a burst of requests fills
/// the pool with sessions opened while the database was read-only.
const POOL: usize = 4;

/// A replica config running the scheduler example controller, with a pool
/// of `pool` sessions.
fn config(cluster: &str, holder: &str, port: u16, url: &str, pool: usize) -> String {
    let guests = guest_dir();
    let cache = guest_dir().join("../../leasehold-test-cache");
    format!(
        "cluster = \"{cluster}\"\nholder = \"{holder}\"\n\n[database]\nurl = \"{url}\"\n\n\
         max_connections = {pool}\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n[runtime]\ncache_dir = \"{}\"\n\n\
         [[controllers]]\nname = \"scheduler\"\ncomponent = \"{}/scheduler.wasm\"\n{TIMING}",
        cache.display(),
        guests.display()
    )
}

fn cluster() -> String {
    format!(
        "hostile-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

async fn start(
    dir: &TempDir,
    name: &str,
    cluster: &str,
    holder: &str,
    url: &str,
    pool: usize,
) -> Replica {
    let port = free_port();
    let config = config(cluster, holder, port, url, pool);
    let replica = Replica::start(dir.path(), name, port, &config);
    replica.wait_healthy(Duration::from_secs(60)).await;
    replica
}

async fn sql(db: &TestDatabase) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(connection);
    client
}

fn database_name(db: &TestDatabase) -> String {
    db.url().rsplit('/').next().unwrap().to_string()
}

/// The scheduler's lease as this replica reports it.
async fn scheduler_lease(replica: &Replica) -> Option<Value> {
    replica
        .leases()
        .await?
        .as_array()?
        .iter()
        .find(|l| l["name"] == "scheduler")
        .cloned()
}

/// `/readyz` once it answers with `status` and `accept` holds for its body.
async fn readyz_until(
    replica: &Replica,
    what: &str,
    status: u16,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    eventually(what, NOTICE, || async {
        let (code, body) = replica.readyz().await?;
        (code == status && accept(&body)).then_some(body)
    })
    .await
}

/// `failed` of a `/readyz` body names `check`.
fn names_failed(body: &Value, check: &str) -> bool {
    body["failed"]
        .as_array()
        .is_some_and(|failed| failed.iter().any(|f| f == check))
}

async fn put(replica: &Replica, name: &str) -> http::Response {
    http::put(
        &replica.addr,
        &format!("/v1/objects/nodes/{name}"),
        r#"{"capacity": 1}"#,
    )
    .await
    .expect("the API answers")
}

/// Issue 14, item 3: a database set read-only (`default_transaction_read_only`)
/// and back must not wedge the host. While it refuses writes the host stops
/// leading, API writes answer 503 naming SQLSTATE 25006 and `/readyz`
/// answers 503 naming the `writes` check; once it accepts writes again the
/// same process serves writes and leads again, without a restart, although
/// every pooled session it opened meanwhile keeps the read-only default.
#[tokio::test]
async fn a_database_that_refused_writes_serves_again_without_a_restart() {
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let replica = start(&dir, "a", &cluster(), "replica-a", db.url(), POOL).await;
    eventually("the replica leads the scheduler", NOTICE, || async {
        replica.holds("scheduler").await.then_some(())
    })
    .await;
    readyz_until(&replica, "ready", 200, |_| true).await;
    let put_before = put(&replica, "before").await;
    assert!(
        put_before.status == 201 || put_before.status == 200,
        "{put_before:?}"
    );

    // Read-only for new sessions, and the host's sessions ended so its
    // pool reconnects read-only.
    let admin = sql(&db).await;
    let name = database_name(&db);
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET default_transaction_read_only = on"
        ))
        .await
        .unwrap();
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .await
        .unwrap();

    eventually("the replica stops leading", NOTICE, || async {
        (!replica.leads("scheduler").await?).then_some(())
    })
    .await;
    let refused = eventually("an API write is refused", NOTICE, || async {
        let reply = put(&replica, "during").await;
        (reply.status == 503).then_some(reply)
    })
    .await;
    assert!(
        refused.body.contains("25006"),
        "the refusal names the SQLSTATE: {}",
        refused.body
    );
    // Bursts of writes open every session the pool may hold, each with the
    // read-only default (as a busy host's pool would be by now). On a busy
    // machine one burst may be served by fewer sessions, so burst until the
    // pool is full.
    eventually("the pool fills with sessions opened read-only", NOTICE, || async {
        let burst: Vec<_> = (0..POOL * 3)
            .map(|i| {
                let addr = replica.addr.clone();
                tokio::spawn(async move {
                    http::put(
                        &addr,
                        &format!("/v1/objects/nodes/burst-{i}"),
                        r#"{"capacity": 1}"#,
                    )
                    .await
                })
            })
            .collect();
        for request in burst {
            let reply = request.await.unwrap().expect("the API answers");
            assert_eq!(reply.status, 503, "{reply:?}");
        }
        let sessions: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'leasehold'",
                &[&name],
            )
            .await
            .unwrap()
            .get(0);
        (sessions == POOL as i64).then_some(())
    })
    .await;
    let unready = readyz_until(&replica, "/readyz names the refused writes", 503, |body| {
        names_failed(body, "writes") && body["checks"]["writes"]["sqlstate"] == "25006"
    })
    .await;
    eprintln!("read-only: /readyz says {unready}");

    admin
        .batch_execute(&format!(
            "ALTER DATABASE {name} RESET default_transaction_read_only"
        ))
        .await
        .unwrap();
    let recovered = std::time::Instant::now();
    eventually("an API write succeeds again", NOTICE, || async {
        let reply = put(&replica, "after").await;
        (reply.status == 201 || reply.status == 200).then_some(())
    })
    .await;
    eventually("the replica leads again", NOTICE, || async {
        replica.holds("scheduler").await.then_some(())
    })
    .await;
    readyz_until(&replica, "ready again", 200, |_| true).await;
    eprintln!(
        "writes and leading back {:?} after RESET",
        recovered.elapsed()
    );
}

/// Issue 14, item 9: a second host started with the holder name of a live
/// host never runs as that holder. It never reports the other host's lease
/// as held here, acquires nothing, says why in `/readyz` (the `holder`
/// check) and loudly in its log; once the first host stops, it claims the
/// name and leads.
#[tokio::test]
async fn a_copy_of_a_live_holder_never_leads_until_that_host_stops() {
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let cluster = cluster();
    let mut first = start(&dir, "first", &cluster, "twin", db.url(), 16).await;
    let held = eventually("the first host leads the scheduler", NOTICE, || async {
        let lease = scheduler_lease(&first).await?;
        (lease["held_here"] == true).then_some(lease)
    })
    .await;
    let copy = start(&dir, "copy", &cluster, "twin", db.url(), 16).await;

    let unready = readyz_until(
        &copy,
        "the copy's /readyz names the holder check",
        503,
        |body| names_failed(body, "holder") && body["checks"]["holder"]["state"] == "taken",
    )
    .await;
    let reason = unready["checks"]["holder"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("twin") && reason.contains("own `holder`"),
        "{reason}"
    );
    eventually("the copy's log says it refuses to lead", NOTICE, || async {
        let log = copy.log();
        (log.contains("REFUSING TO LEAD") && log.contains("twin")).then_some(())
    })
    .await;

    // The first host's lease, same holder name, is not the copy's.
    let seen = scheduler_lease(&copy).await.expect("the copy lists leases");
    assert_eq!(seen["holder"], "twin");
    assert_eq!(seen["epoch"], held["epoch"]);
    assert_eq!(seen["held_here"], false, "{seen}");
    assert_eq!(
        copy.metric("leasehold_acquisitions_total{controller=\"scheduler\"}")
            .await,
        Some(0.0),
        "the copy acquired a lease"
    );
    assert_eq!(copy.leads("scheduler").await, Some(false));

    first.signal("TERM");
    assert_eq!(
        first.exited(NOTICE).await,
        Some(0),
        "{}",
        first.log_tail(20)
    );
    let taken_over = eventually(
        "the copy leads once the first host stopped",
        NOTICE,
        || async {
            let lease = scheduler_lease(&copy).await?;
            (lease["held_here"] == true).then_some(lease)
        },
    )
    .await;
    assert!(
        taken_over["epoch"].as_u64() > held["epoch"].as_u64(),
        "{taken_over} after {held}"
    );
    readyz_until(&copy, "the copy is ready", 200, |body| {
        body["checks"]["holder"]["state"] == "claimed"
    })
    .await;
}
