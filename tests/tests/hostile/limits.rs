//! Hostile cases: limits. Durations that make no sense are refused by
//! `leasehold check`, naming the key, the floor and why; a guest that
//! creates objects without end is held to its controller's write quotas:
//! refused with the typed quota error once its creates are spent (never
//! more than `create_burst + max_creates_per_second × elapsed` land), the
//! refusal is counted in `/metrics`, and the cap on objects of a kind is
//! counted in the store, so a restart does not reset it.

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_host::testing::TestDatabase;
use leasehold_tests::TempDir;
use leasehold_tests::process::{Replica, eventually, free_port, run_to_end};
use leasehold_tests::{guest_dir, http};

/// How long a replica may take to start, lead, or show a refusal.
const PATIENCE: Duration = Duration::from_secs(30);

fn cluster() -> String {
    format!("lim-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// A replica running the `misbehaving` fixture as controller `flood`, with
/// the service suite's short lease timing and `quota` (TOML keys).
fn flood_config(cluster: &str, port: u16, url: &str, quota: &str) -> String {
    let guests = guest_dir();
    let cache = guests.join("../../leasehold-test-cache");
    format!(
        "cluster = \"{cluster}\"\nholder = \"replica-a\"\n\n[database]\nurl = \"{url}\"\n\n\
         [http]\nlisten = \"127.0.0.1:{port}\"\n\n[runtime]\ncache_dir = \"{cache}\"\n\n\
         [[controllers]]\nname = \"flood\"\ncomponent = \"{guests}/misbehaving.wasm\"\n\
         lease_ttl = \"2000ms\"\nrenew_interval = \"200ms\"\nrenew_deadline = \"1400ms\"\n\
         backoff_max = \"1s\"\n{quota}\n",
        cache = cache.display(),
        guests = guests.display(),
    )
}

/// Objects of kind `marks` in `cluster`, from the database's own record.
async fn marks(db: &TestDatabase, cluster: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    let conn = tokio::spawn(conn);
    let count: i64 = client
        .query_one(
            "SELECT count(*) FROM leasehold_objects WHERE cluster = $1 AND kind = 'marks'",
            &[&cluster],
        )
        .await
        .expect("count marks")
        .get(0);
    drop(client);
    let _ = conn.await;
    count
}

fn refusals(quota: &str) -> String {
    format!("leasehold_quota_refusals_total{{controller=\"flood\",quota=\"{quota}\"}}")
}

async fn start_leading(dir: &Path, port: u16, config: &str) -> Replica {
    let replica = Replica::start(dir, "a", port, config);
    replica.wait_healthy(PATIENCE).await;
    lead(&replica).await;
    replica
}

async fn lead(replica: &Replica) {
    eventually("the replica leads flood", PATIENCE, || async {
        replica.leads("flood").await.and_then(|l| l.then_some(()))
    })
    .await;
}

async fn command_flood(replica: &Replica) {
    let put = http::put(&replica.addr, "/v1/objects/cmd/flood", "{}")
        .await
        .expect("put cmd/flood");
    assert_eq!(put.status, 201, "{}", put.body);
}

#[test]
fn check_refuses_a_100ms_ttl_with_a_1ns_renew_interval_naming_both_keys_floors_and_why() {
    let dir = TempDir::new();
    let path = dir.path().join("flapping.toml");
    // Ordered as L3 wants (1ns < 50ms < 100ms): this used to pass `check`
    // and flapped thousands of times in seconds.
    let config = format!(
        "cluster = \"demo\"\n\n[[controllers]]\nname = \"flood\"\n\
         component = \"{}/misbehaving.wasm\"\nlease_ttl = \"100ms\"\n\
         renew_interval = \"1ns\"\nrenew_deadline = \"50ms\"\n",
        guest_dir().display()
    );
    std::fs::write(&path, config).unwrap();
    let (code, stdout, stderr) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_ne!(code, 0, "check passed:\n{stdout}{stderr}");
    for expected in [
        "line 6: controller \"flood\": lease_ttl is 100ms; it must be at least 1s: shorter \
         leases flap between replicas on ordinary database latency",
        "line 7: controller \"flood\": renew_interval is 1ns; it must be at least 100ms: each \
         renewal is a database round trip",
    ] {
        assert!(stderr.contains(expected), "no {expected:?} in:\n{stderr}");
    }
    assert!(!stdout.contains("check passed"), "{stdout}");
}

#[tokio::test]
async fn a_flooding_guest_is_refused_once_its_create_rate_is_spent() {
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let cluster = cluster();
    let port = free_port();
    let (rate, burst) = (20.0, 40.0);
    let config = flood_config(
        &cluster,
        port,
        db.url(),
        "max_creates_per_second = 20\ncreate_burst = 40\n",
    );
    let replica = start_leading(dir.path(), port, &config).await;
    assert_eq!(marks(&db, &cluster).await, 0);

    // The guest cannot create before it reconciles this command.
    let commanded = Instant::now();
    command_flood(&replica).await;
    // The guest retries 50 ms after each refusal, spending every create it
    // earns: wait for a good number of refusals.
    let series = refusals("max_creates_per_second");
    eventually(
        "the rate quota refused the flood ten times",
        PATIENCE,
        || async { replica.metric(&series).await.filter(|n| *n >= 10.0) },
    )
    .await;
    let landed = marks(&db, &cluster).await as f64;
    let elapsed = commanded.elapsed().as_secs_f64();
    let bound = burst + rate * elapsed;
    eprintln!("{landed} creates landed in {elapsed:.2} s (bound {bound:.0})");
    assert!(
        landed <= bound,
        "{landed} creates landed in {elapsed:.2} s; the quota allows at most {bound:.0}"
    );
    // The burst itself was granted: the quota limits, it does not block.
    assert!(landed >= burst, "only {landed} creates landed");

    // The guest saw the typed refusal (the fixture logs what it got).
    let log = replica.log();
    assert!(
        log.contains("flood refused: quota exceeded: controller=flood quota=max_creates_per_second limit=20 retry_after_ms="),
        "no typed refusal in the log:\n{}",
        replica.log_tail(30)
    );
    // The other quota was not what refused it.
    assert_eq!(
        replica.metric(&refusals("max_objects_per_kind")).await,
        Some(0.0)
    );
}

#[tokio::test]
async fn the_cap_on_objects_of_a_kind_holds_across_a_restart_because_it_is_counted_in_the_store() {
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let cluster = cluster();
    let port = free_port();
    let config = flood_config(
        &cluster,
        port,
        db.url(),
        "max_creates_per_second = 1000\ncreate_burst = 1000\nmax_objects_per_kind = 30\n",
    );
    let mut replica = start_leading(dir.path(), port, &config).await;
    command_flood(&replica).await;
    let series = refusals("max_objects_per_kind");
    eventually("the cap refused the flood", PATIENCE, || async {
        replica.metric(&series).await.filter(|n| *n >= 1.0)
    })
    .await;
    assert_eq!(marks(&db, &cluster).await, 30, "the cap is 30");

    // A new process: a fresh rate bucket and no memory of the count. The
    // new tenure's resync reconciles cmd/flood again, and the guest floods.
    replica.signal("TERM");
    assert!(
        replica.exited(PATIENCE).await.is_some(),
        "the replica did not stop on SIGTERM:\n{}",
        replica.log_tail(30)
    );
    let cap_refusal = "flood refused: quota exceeded: controller=flood \
                       quota=max_objects_per_kind limit=30 kind=marks: ";
    let refused_before = replica.log().matches(cap_refusal).count();
    assert!(
        refused_before >= 1,
        "no typed cap refusal:\n{}",
        replica.log_tail(30)
    );
    replica.restart();
    replica.wait_healthy(PATIENCE).await;
    lead(&replica).await;
    eventually("the restarted host refused the flood", PATIENCE, || async {
        replica.metric(&series).await.filter(|n| *n >= 1.0)
    })
    .await;
    assert_eq!(
        marks(&db, &cluster).await,
        30,
        "objects beyond the cap landed after the restart"
    );
    eventually(
        "the restarted guest saw the typed refusal",
        PATIENCE,
        || async { (replica.log().matches(cap_refusal).count() > refused_before).then_some(()) },
    )
    .await;
}
