//! Crash detection and failover at their edges (issue 36, items 2, 3, 4
//! and 7), with real PostgreSQL servers and `leasehold` processes:
//!
//! - the highest timeline a host saw outlives a restart: a former primary
//!   brought back without a rewind is refused by a freshly restarted host
//!   (its data directory's record), and by any host once the database's
//!   own record is above the server's timeline;
//! - `session_url` naming another database, or a hot standby of the right
//!   one: the host refuses to lead, naming both endpoints, and no lease
//!   changes hands;
//! - a `ttl`-mode controller keeps its tenure across `pg_terminate_backend`
//!   of its host's liveness (claim) session.

use std::time::Duration;

use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::authority::{AuthorityError, ExpectedIdentity};
use leasehold_host::db::Database;
use leasehold_host::testing::TestDatabase;
use leasehold_tests::pgcluster::ScratchCluster;
use leasehold_tests::process::{Replica, binary, eventually, free_port};
use leasehold_tests::{TempDir, guest_dir};

const SCHEDULER: &str = "scheduler";

/// The first epoch a grant on timeline 2 may carry.
const TIMELINE_2_FLOOR: i64 = (1 << 32) + 1;

/// The multi-process tests of this file run one at a time: their timing
/// assertions must not measure each other's load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A host running the scheduler on a short lease, keeping its state in
/// `data_dir`.
fn config(cluster: &str, holder: &str, port: u16, url: &str, data_dir: &std::path::Path) -> String {
    config_with(cluster, holder, port, url, None, data_dir)
}

/// [`config`], with `[database] session_url` when given.
fn config_with(
    cluster: &str,
    holder: &str,
    port: u16,
    url: &str,
    session_url: Option<&str>,
    data_dir: &std::path::Path,
) -> String {
    let session_url = session_url
        .map(|url| format!("session_url = \"{url}\"\n"))
        .unwrap_or_default();
    let guests = guest_dir();
    let cache = guests.join("../../leasehold-test-cache");
    format!(
        r#"cluster = "{cluster}"
holder = "{holder}"
data_dir = "{data}"

[database]
url = "{url}"
{session_url}
[http]
listen = "127.0.0.1:{port}"

[runtime]
cache_dir = "{cache}"

[[controllers]]
name = "{SCHEDULER}"
component = "{guests}/{SCHEDULER}.wasm"
lease_ttl = "2000ms"
renew_interval = "400ms"
renew_deadline = "1400ms"
backoff_max = "1s"
"#,
        cache = cache.display(),
        guests = guests.display(),
        data = data_dir.display(),
    )
}

/// One value of the first row of `query` on the server at `url`.
async fn query_one<T>(url: &str, query: &str) -> Option<T>
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(connection);
    let row = client.query_opt(query, &[]).await.ok()??;
    Some(row.get(0))
}

/// The scheduler's lease on the server at `url`: (holder, epoch, active).
async fn lease_row(url: &str, cluster: &str) -> Option<(String, i64, bool)> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(connection);
    let row = client
        .query_opt(
            "SELECT holder, epoch, NOT released AND expires_at > clock_timestamp()
               FROM leasehold_leases WHERE cluster = $1 AND name = $2",
            &[&cluster, &SCHEDULER],
        )
        .await
        .ok()??;
    Some((row.get(0), row.get(1), row.get(2)))
}

/// Wait until `host` leads the scheduler on the server at `url` at an
/// epoch of at least `from`; returns the epoch.
async fn leads_from(url: &str, cluster: &str, host: &Replica, from: i64) -> i64 {
    eventually(
        &format!("the host leads {SCHEDULER} at an epoch from {from}"),
        secs(60),
        || async {
            let (_, epoch, active) = lease_row(url, cluster).await?;
            let leads = host.leads(SCHEDULER).await?;
            (active && epoch >= from && leads).then_some(epoch)
        },
    )
    .await
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

/// Prints the end of each host's log when the test fails.
struct Tails(Vec<std::path::PathBuf>);

impl Drop for Tails {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for path in &self.0 {
                let log = std::fs::read_to_string(path).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                eprintln!(
                    "---- {} ----\n{}",
                    path.display(),
                    lines[lines.len().saturating_sub(40)..].join("\n")
                );
            }
        }
    }
}

/// Issue 36, item 7: a host leads on a primary (timeline 1), then on its
/// promoted standby (timeline 2), and is stopped. The former primary comes
/// back without a rewind, writable, on timeline 1, and the host is started
/// again with a URL naming it: a fresh process, which never saw timeline 2
/// in memory, refuses it (its data directory recorded timeline 2), leads
/// nothing there, and says why. The promoted server's own row recorded
/// timeline 2 as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_former_primary_brought_back_unrewound_is_refused_by_a_restarted_host() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let primary = std::sync::Arc::new(blocking(ScratchCluster::create).await);
    let db = TestDatabase::create_on(&primary.url()).await;
    let name = db.url().rsplit('/').next().unwrap().to_string();
    let standby = {
        let primary = primary.clone();
        std::sync::Arc::new(blocking(move || ScratchCluster::standby_of(&primary)).await)
    };
    let primary_url = format!("postgres://postgres@127.0.0.1:{}/{name}", primary.port());
    let standby_url = format!("postgres://postgres@127.0.0.1:{}/{name}", standby.port());
    let both = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{name}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let cluster = format!("tl-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let dir = TempDir::new();
    let data = dir.path().join("a-data");
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let _tails = Tails(vec![dir.path().join("a.log")]);
    let mut a = Replica::start_binary(
        binary(),
        dir.path(),
        "a",
        port,
        &config(&cluster, "host-a", port, &both, &data),
    );
    a.wait_healthy(secs(60)).await;
    assert_eq!(leads_from(&primary_url, &cluster, &a, 1).await, 1);

    // The standby has everything; the primary stops, the standby is
    // promoted, and the host leads there, on timeline 2.
    {
        let (primary, standby) = (primary.clone(), standby.clone());
        blocking(move || standby.catch_up_with(&primary)).await;
    }
    a.kill().await;
    {
        let primary = primary.clone();
        blocking(move || primary.stop()).await;
    }
    {
        let standby = standby.clone();
        blocking(move || standby.promote()).await;
    }
    a.restart();
    let after = leads_from(&standby_url, &cluster, &a, TIMELINE_2_FLOOR).await;
    eprintln!("host-a leads at epoch {after} on the promoted standby");
    let recorded: Option<i64> = query_one(
        &standby_url,
        "SELECT highest_timeline FROM leasehold_database",
    )
    .await;
    assert_eq!(
        recorded,
        Some(2),
        "the promoted server records the timeline it was verified on"
    );
    let file = std::fs::read_to_string(data.join("timelines")).unwrap_or_default();
    assert!(
        file.lines().any(|line| line.ends_with(" 2")),
        "the host's data directory records timeline 2: {file:?}"
    );

    // The host stops; the former primary comes back unrewound, and the
    // host starts again, fresh, with a URL naming only the former primary.
    a.kill().await;
    {
        let primary = primary.clone();
        blocking(move || primary.start()).await;
    }
    let writable: Option<bool> = query_one(&primary_url, "SELECT NOT pg_is_in_recovery()").await;
    assert_eq!(writable, Some(true), "the former primary is writable again");
    a.set_config(&config(&cluster, "host-a", port, &primary_url, &data));
    a.restart();
    let refused = match a.exited(secs(60)).await {
        Some(code) => {
            assert_ne!(code, 0, "host-a must not run against the former primary");
            a.log()
        }
        None => panic!(
            "host-a keeps running against the former primary: {}",
            a.log_tail(30)
        ),
    };
    assert!(
        refused.contains("former primary") && refused.contains("on timeline 1"),
        "the refusal names the former primary and its timeline: {}",
        a.log_tail(30)
    );
    // Nothing was granted there after the failover.
    let (_, epoch, _) = lease_row(&primary_url, &cluster)
        .await
        .expect("the former primary answers");
    assert_eq!(epoch, 1, "no grant on the former primary");
    drop(db);
}

/// Issue 36, item 7, the database's record: a server whose
/// `leasehold_database` row records a timeline above its own is refused by
/// any host, one that never saw the higher timeline included, naming both
/// timelines.
#[tokio::test]
async fn a_database_recorded_on_a_higher_timeline_is_refused() {
    let db = TestDatabase::create().await;
    let timeline: i64 = query_one(db.url(), "SELECT highest_timeline FROM leasehold_database")
        .await
        .expect("migration 20 records the timeline");
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .execute(
            "UPDATE leasehold_database SET highest_timeline = $1",
            &[&(timeline + 1)],
        )
        .await
        .unwrap();
    let authority = PostgresAuthority::new(
        Database::new(db.url(), 2).unwrap(),
        ExpectedIdentity::default(),
    );
    match authority.verify().await {
        Err(AuthorityError::WrongDatabase { problems, .. }) => {
            assert!(
                problems.contains(&format!("timeline {timeline}"))
                    && problems.contains(&format!("timeline {}", timeline + 1))
                    && problems.contains("former primary"),
                "{problems}"
            );
        }
        other => panic!("a database recorded on a higher timeline must be refused, got {other:?}"),
    }
}

/// A host with `session_url` at `session_url` joins `leader` (which leads
/// the scheduler at `epoch` on `url`'s database): it must refuse to lead,
/// naming both endpoints, and the lease must stay where it is. Returns the
/// refusal it logged.
async fn refused_session_url(
    dir: &TempDir,
    cluster: &str,
    url: &str,
    session_url: &str,
    leader: &mut Replica,
    epoch: i64,
) -> String {
    let port = free_port();
    let data = dir.path().join("b-data");
    std::fs::create_dir_all(&data).unwrap();
    let mut b = Replica::start_binary(
        binary(),
        dir.path(),
        "b",
        port,
        &config_with(cluster, "host-b", port, url, Some(session_url), &data),
    );
    let url_name = url.rsplit('/').next().unwrap().to_string();
    let session_name = session_url.rsplit('/').next().unwrap().to_string();
    let refusal = eventually(
        "host-b refuses to lead, naming both endpoints",
        secs(60),
        || async {
            let log = b.log();
            log.lines()
                .find(|line| line.contains("(database.session_url) does not reach"))
                .map(str::to_string)
        },
    )
    .await;
    assert!(
        refusal.contains(&format!(
            "127.0.0.1:{}/{session_name}",
            endpoint_port(session_url)
        )) && refusal.contains(&format!("127.0.0.1:{}/{url_name}", endpoint_port(url))),
        "the refusal names both endpoints: {refusal}"
    );
    // It says so where an operator looks, and stays that way.
    let (status, body) = eventually("host-b's readiness says why", secs(30), || async {
        let (status, body) = b.readyz().await?;
        (body.to_string().contains("wrong_database")).then_some((status, body))
    })
    .await;
    assert_ne!(status, 200, "host-b is not ready: {body}");
    // The leader keeps the lease while host-b refuses. (On a loaded
    // machine the leader's own renewals may miss their short deadline and
    // it leads again at a later epoch: still host-a, never host-b.)
    let (holder, now, _) = lease_row(url, cluster).await.expect("the lease row");
    assert!(
        holder == "host-a" && now >= epoch,
        "no lease changed hands: {holder} at epoch {now}"
    );
    eventually("host-a leads", secs(30), || async {
        (leader.leads(SCHEDULER).await == Some(true)).then_some(())
    })
    .await;
    // Even a free lease is not taken: the leader stops, its lease expires
    // by the database's clock, and host-b, retrying every backoff_max
    // (1 s), still takes nothing for several of its attempts.
    leader.kill().await;
    let (holder, epoch, _) = lease_row(url, cluster).await.expect("the lease row");
    assert_eq!(holder, "host-a", "no lease changed hands");
    eventually("the leader's lease expires", secs(30), || async {
        let (_, _, active) = lease_row(url, cluster).await?;
        (!active).then_some(())
    })
    .await;
    let watch_until = std::time::Instant::now() + secs(4);
    while std::time::Instant::now() < watch_until {
        let (holder, now, _) = lease_row(url, cluster).await.expect("the lease row");
        assert_eq!(
            (holder.as_str(), now),
            ("host-a", epoch),
            "host-b took the lease over through a session at another database"
        );
        assert_ne!(b.leads(SCHEDULER).await, Some(true), "host-b leads");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(b.running(), "host-b keeps running, refusing");
    assert!(
        !b.log().contains("lease acquired"),
        "host-b never acquired a lease"
    );
    b.kill().await;
    refusal
}

/// The port of a `postgres://user@host:port/db` URL.
fn endpoint_port(url: &str) -> u16 {
    url::Url::parse(url).unwrap().port().unwrap_or(5432)
}

/// Issue 36, item 3: `session_url` naming another database of the same
/// server (migrated, so every query there works) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_url_at_another_database_is_refused() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let db = TestDatabase::create().await;
    let other = TestDatabase::create().await;
    let cluster = format!("su-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let dir = TempDir::new();
    let data = dir.path().join("a-data");
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let _tails = Tails(vec![dir.path().join("a.log"), dir.path().join("b.log")]);
    let mut a = Replica::start_binary(
        binary(),
        dir.path(),
        "a",
        port,
        &config(&cluster, "host-a", port, db.url(), &data),
    );
    a.wait_healthy(secs(60)).await;
    let epoch = leads_from(db.url(), &cluster, &a, 1).await;
    let refusal = refused_session_url(&dir, &cluster, db.url(), other.url(), &mut a, epoch).await;
    eprintln!("session_url at another database: {refusal}");
}

/// Issue 36, item 3: `session_url` naming the right database on a hot
/// standby (advisory locks work in recovery) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_url_at_a_hot_standby_is_refused() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let primary = std::sync::Arc::new(blocking(ScratchCluster::create).await);
    let db = TestDatabase::create_on(&primary.url()).await;
    let name = db.url().rsplit('/').next().unwrap().to_string();
    let standby = {
        let primary = primary.clone();
        std::sync::Arc::new(blocking(move || ScratchCluster::standby_of(&primary)).await)
    };
    {
        let (primary, standby) = (primary.clone(), standby.clone());
        blocking(move || standby.catch_up_with(&primary)).await;
    }
    let primary_url = format!("postgres://postgres@127.0.0.1:{}/{name}", primary.port());
    let standby_url = format!("postgres://postgres@127.0.0.1:{}/{name}", standby.port());
    let cluster = format!("sh-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let dir = TempDir::new();
    let data = dir.path().join("a-data");
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let _tails = Tails(vec![dir.path().join("a.log"), dir.path().join("b.log")]);
    let mut a = Replica::start_binary(
        binary(),
        dir.path(),
        "a",
        port,
        &config(&cluster, "host-a", port, &primary_url, &data),
    );
    a.wait_healthy(secs(60)).await;
    let epoch = leads_from(&primary_url, &cluster, &a, 1).await;
    let refusal =
        refused_session_url(&dir, &cluster, &primary_url, &standby_url, &mut a, epoch).await;
    assert!(refusal.contains("in recovery"), "{refusal}");
    eprintln!("session_url at a hot standby: {refusal}");
    drop((a, db));
}

/// Issue 36, item 4: a host leads the scheduler under crash detection
/// `ttl` (and the rollout under `session`, as a control); its liveness
/// session alone is terminated. The `session` tenure ends (a dead session
/// lets a standby take it over), but the `ttl` one keeps its epoch and its
/// tenure, held by the same host, through the host's next claim session:
/// a dead session lets nobody take a ttl grant over before it expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_tenure_survives_the_termination_of_its_claim_session() {
    let _serial = ONE_AT_A_TIME.lock().await;
    use leasehold_host::authority::postgres::holder_claim::CLAIM_APPLICATION;
    use leasehold_tests::faults::rig::{Rig, RigSpec};

    const ROLLOUT: &str = "rollout";
    let spec = RigSpec {
        controllers: vec![SCHEDULER, ROLLOUT],
        ..RigSpec::scheduler(1)
    }
    .configure(SCHEDULER, "crash_detection = \"ttl\"");
    let rig = Rig::start(spec).await;
    let (host, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    let (_, rollout_epoch) = rig.leader(ROLLOUT, secs(30)).await;
    let sql = rig.sql().await;
    let claim_sessions = || async {
        let ports: Vec<i32> = rig.hosts[host]
            .proxy
            .upstream_ports()
            .into_iter()
            .map(i32::from)
            .collect();
        sql.query(
            "SELECT pid FROM pg_stat_activity
              WHERE datname = $1 AND client_port = ANY($2) AND application_name LIKE $3 || '-%'",
            &[&rig.database_name(), &ports, &CLAIM_APPLICATION],
        )
        .await
        .expect("list the claim sessions")
        .iter()
        .map(|row| row.get::<_, i32>(0))
        .collect::<Vec<i32>>()
    };
    let before = claim_sessions().await;
    assert_eq!(before.len(), 1, "one liveness session: {before:?}");
    let terminated: bool = sql
        .query_one("SELECT pg_terminate_backend($1)", &[&before[0]])
        .await
        .unwrap()
        .get(0);
    assert!(terminated);
    // The host claims its name again on a new session; the `session`
    // tenure ended with the old one and the rollout is granted again.
    eventually("a new liveness session", secs(30), || async {
        let now = claim_sessions().await;
        (now.len() == 1 && now[0] != before[0]).then_some(())
    })
    .await;
    let (_, rollout_after) = rig.leader_after(ROLLOUT, rollout_epoch, secs(30)).await;
    eprintln!(
        "claim session {} terminated: rollout (session) epoch {rollout_epoch} -> \
         {rollout_after}",
        before[0]
    );
    // The scheduler's tenure ran throughout: same epoch, same holder,
    // never ended, and the host never counted it lost.
    let (holder, now, active) = lease_row(rig.db.url(), &rig.cluster)
        .await
        .expect("the scheduler's lease row");
    assert_eq!(
        (holder.as_str(), now, active),
        (rig.hosts[host].holder.as_str(), epoch, true),
        "the ttl tenure is kept"
    );
    let ended: Option<String> = sql
        .query_one(
            "SELECT end_reason FROM leasehold_tenures
              WHERE cluster = $1 AND lease = $2 AND epoch = $3",
            &[&rig.cluster, &SCHEDULER, &epoch],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended, None, "the ttl tenure never ended");
    let losses = rig.hosts[host]
        .replica
        .metric(&format!(
            "leasehold_losses_total{{controller=\"{SCHEDULER}\",reason=\"claim_lost\"}}"
        ))
        .await
        .unwrap_or(0.0);
    assert_eq!(losses, 0.0, "the ttl tenure was not lost to the claim");
    assert_eq!(rig.hosts[host].replica.leads(SCHEDULER).await, Some(true));
}

/// The test fixture that sends the requests its `calls` objects describe.
const CALLER: &str = "caller";

/// How long the receiver waits before each answer while the holder calls
/// out: its requests arrive about this far apart, and one reconcile's
/// requests (at most 64) span about 19 s, longer than any window here.
const CALL_SPACING: Duration = Duration::from_millis(300);

/// How late after its liveness lapses a request of the old holder may
/// still reach the receiver: one admitted just before is still being
/// connected and written (a debug build on two busy cores).
const SEND_MARGIN: Duration = Duration::from_millis(500);

/// Lease timing where neither the ttl nor the renew deadline stops the old
/// holder before a standby takes over by session detection: only the
/// liveness budget does.
const LONG_LEASE: leasehold_tests::faults::rig::Timing = leasehold_tests::faults::rig::Timing {
    ttl: Duration::from_secs(30),
    renew_interval: Duration::from_secs(2),
    renew_deadline: Duration::from_secs(20),
};

/// Two hosts running the `caller` fixture under crash detection `session`
/// (the default) with [`LONG_LEASE`], a fenced receiver answering every
/// request after [`CALL_SPACING`], and the leader calling out steadily:
/// (rig, leader, standby, epoch).
async fn calling_out() -> (leasehold_tests::faults::rig::Rig, usize, usize, i64) {
    use leasehold_receiver::{Fault, FaultSpec, Receiver, ReceiverConfig};
    use leasehold_tests::faults::rig::{Rig, RigSpec};

    let cloud = Receiver::start(ReceiverConfig::default().with_test_hooks(true))
        .await
        .expect("start the fenced receiver");
    let endpoint = cloud.url();
    let allow = format!("http_allow = [\"{endpoint}\"]");
    let spec = RigSpec {
        hosts: 2,
        timing: LONG_LEASE,
        controllers: vec![CALLER],
        ..RigSpec::scheduler(2)
    }
    .configure(CALLER, &allow);
    let mut rig = Rig::start(spec).await;
    cloud
        .set_fault(FaultSpec::times(
            Fault::Delay {
                delay_ms: CALL_SPACING.as_millis() as u64,
            },
            leasehold_receiver::MAX_FAULT_REQUESTS,
        ))
        .expect("set a fault");
    rig.receiver = Some(std::sync::Arc::new(cloud));
    let (a, epoch) = rig.leader(CALLER, secs(30)).await;
    let b = 1 - a;
    rig.create(
        b,
        "calls",
        "steady",
        serde_json::json!({
            "url": format!("{endpoint}/buckets/steady"),
            "method": "GET",
            "repeat": leasehold_host::limits::HTTP_OUT_REQUESTS_PER_RECONCILE,
            "record": false,
        }),
    )
    .await
    .expect("the call is acknowledged");
    eventually("the leader calls out steadily", secs(20), || async {
        (of_epoch(&rig, epoch).len() >= 3).then_some(())
    })
    .await;
    (rig, a, b, epoch)
}

/// Every request of the caller's lease at `epoch` the receiver recorded,
/// in decision order.
fn of_epoch(
    rig: &leasehold_tests::faults::rig::Rig,
    epoch: i64,
) -> Vec<leasehold_receiver::RecordEntry> {
    let lease = format!("{}/{CALLER}", rig.cluster);
    rig.receiver
        .as_ref()
        .expect("the rig has a receiver")
        .record()
        .into_iter()
        .filter(|e| e.lease.as_deref() == Some(lease.as_str()) && e.epoch == Some(epoch as u64))
        .collect()
}

/// Microseconds since the Unix epoch (the receiver's clock, this
/// machine's).
fn micros(at: std::time::SystemTime) -> i64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// After the successor called out a few times: (requests of the old epoch
/// arriving after `cut`, requests of the old epoch decided after the
/// successor's first, the last old request's arrival in ms after `cut`,
/// the successor's first arrival in ms after `cut`).
async fn outcome(
    rig: &leasehold_tests::faults::rig::Rig,
    epoch: i64,
    cut: std::time::SystemTime,
) -> (usize, Vec<leasehold_receiver::RecordEntry>, i64, i64) {
    eventually("the successor calls out", secs(30), || async {
        (of_epoch(rig, epoch + 1).len() >= 3).then_some(())
    })
    .await;
    let old = of_epoch(rig, epoch);
    let new = of_epoch(rig, epoch + 1);
    let first_new = new.first().expect("the successor called out");
    let after_cut = old
        .iter()
        .filter(|e| e.arrived_at.timestamp_micros() >= micros(cut))
        .count();
    let overlapping = old
        .iter()
        .filter(|e| e.seq > first_new.seq)
        .cloned()
        .collect();
    let last_old = old.last().expect("the leader called out");
    (
        after_cut,
        overlapping,
        (last_old.arrived_at.timestamp_micros() - micros(cut)) / 1000,
        (first_new.arrived_at.timestamp_micros() - micros(cut)) / 1000,
    )
}

/// Issue 36, item 2 (a): the leader is partitioned silently (its proxy
/// black-holes both directions, and ends each of its server-side sessions
/// only once nothing passed on it for the server's own keepalive
/// detection time, `claim_session_drop`, as the server would find a host
/// that vanished). The standby takes the lease over once the server
/// dropped the leader's liveness session, long before the ttl or the
/// leader's renew deadline; the leader stopped calling out before: no
/// request of its epoch reaches the receiver after the successor's first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_partitioned_holder_stops_calling_out_before_its_successor_starts() {
    let _serial = ONE_AT_A_TIME.lock().await;
    use leasehold_tests::proxy::Mode;

    let (rig, a, b, epoch) = calling_out().await;
    let cut = std::time::SystemTime::now();
    let drop_after = leasehold_host::timeouts::claim_session_drop();
    rig.hosts[a].proxy.set(Mode::SilentPartition(drop_after));
    let (next, next_epoch) = rig
        .leader_after(CALLER, epoch, LONG_LEASE.ttl - secs(5))
        .await;
    assert_eq!((next, next_epoch), (b, epoch + 1));
    let (after_cut, overlapping, last_old_ms, first_new_ms) = outcome(&rig, epoch, cut).await;
    eprintln!(
        "silent partition: {after_cut} requests of epoch {epoch} after the cut, the last {last_old_ms} \
         ms after it; the successor's first {first_new_ms} ms after it (server drop {drop_after:?}, \
         liveness budget {:?})",
        leasehold_host::timeouts::LIVENESS_BUDGET
    );
    assert!(
        after_cut > 0,
        "the leader must have gone on calling out while partitioned, or the test proves nothing"
    );
    assert!(
        overlapping.is_empty(),
        "requests of epoch {epoch} reached the receiver after the successor's first: {overlapping:?}"
    );
    rig.hosts[a].proxy.set(Mode::Pass);
}

/// An HTTP receiver that is not fenced: it answers every request `200`
/// after [`CALL_SPACING`] and records when each arrived and the epoch and
/// lease it carried, whatever the order of epochs.
struct Unfenced {
    url: String,
    record: std::sync::Arc<std::sync::Mutex<Vec<(std::time::SystemTime, String, i64)>>>,
}

impl Unfenced {
    async fn start() -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let record = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let shared = record.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let record = shared.clone();
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                            match conn.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        };
                        let arrived = std::time::SystemTime::now();
                        let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                        buffer.drain(..end + 4);
                        let header = |name: &str| {
                            head.lines()
                                .find_map(|l| l.strip_prefix(name))
                                .map(|v| v.trim().to_string())
                        };
                        let epoch = header("leasehold-epoch:")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(-1);
                        let lease = header("leasehold-lease:").unwrap_or_default();
                        record.lock().unwrap().push((arrived, lease, epoch));
                        tokio::time::sleep(CALL_SPACING).await;
                        if conn
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        Self { url, record }
    }

    /// Arrival times of the requests of `lease` at `epoch`.
    fn of_epoch(&self, lease: &str, epoch: i64) -> Vec<std::time::SystemTime> {
        self.record
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, l, e)| l == &lease.to_ascii_lowercase() && *e == epoch)
            .map(|(at, _, _)| *at)
            .collect()
    }
}

/// Issue 36, item 2 (b): the server ends the leader's liveness session at
/// once (`pg_terminate_backend`) while the leader hears nothing (its proxy
/// black-holes both directions). The standby may be granted at once; the
/// leader stops calling out when its liveness lapses, within the liveness
/// budget of the last statement its session answered (so at most
/// LIVENESS_BUDGET after the cut): the residual window (L8) a receiver
/// that is not fenced can see overlapping requests in. The fenced
/// receiver refuses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_liveness_session_behind_a_black_hole_overlaps_within_the_budget() {
    let _serial = ONE_AT_A_TIME.lock().await;
    use leasehold_host::authority::postgres::holder_claim::CLAIM_APPLICATION;
    use leasehold_tests::faults::rig::{Rig, RigSpec};
    use leasehold_tests::proxy::Mode;

    let receiver = Unfenced::start().await;
    let allow = format!("http_allow = [\"{}\"]", receiver.url);
    let spec = RigSpec {
        hosts: 2,
        timing: LONG_LEASE,
        controllers: vec![CALLER],
        ..RigSpec::scheduler(2)
    }
    .configure(CALLER, &allow);
    let rig = Rig::start(spec).await;
    let (a, epoch) = rig.leader(CALLER, secs(30)).await;
    let b = 1 - a;
    let lease = format!("{}/{CALLER}", rig.cluster);
    rig.create(
        b,
        "calls",
        "steady",
        serde_json::json!({
            "url": format!("{}/steady", receiver.url),
            "method": "GET",
            "repeat": leasehold_host::limits::HTTP_OUT_REQUESTS_PER_RECONCILE,
            "record": false,
        }),
    )
    .await
    .expect("the call is acknowledged");
    eventually("the leader calls out steadily", secs(20), || async {
        (receiver.of_epoch(&lease, epoch).len() >= 3).then_some(())
    })
    .await;
    let ports: Vec<i32> = rig.hosts[a]
        .proxy
        .upstream_ports()
        .into_iter()
        .map(i32::from)
        .collect();
    let sql = rig.sql().await;
    rig.hosts[a].proxy.set(Mode::Blackhole);
    let cut = std::time::SystemTime::now();
    let terminated: i64 = sql
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
              WHERE datname = $1 AND client_port = ANY($2) AND application_name LIKE $3 || '-%'",
            &[&rig.database_name(), &ports, &CLAIM_APPLICATION],
        )
        .await
        .expect("terminate the claim session")
        .get(0);
    assert_eq!(terminated, 1, "one liveness session");
    let (next, next_epoch) = rig
        .leader_after(CALLER, epoch, LONG_LEASE.ttl - secs(5))
        .await;
    assert_eq!((next, next_epoch), (b, epoch + 1));
    eventually("the successor calls out", secs(30), || async {
        (receiver.of_epoch(&lease, next_epoch).len() >= 3).then_some(())
    })
    .await;
    // The old holder's requests stop once its liveness lapsed: wait until
    // the successor has called out past the budget's end.
    let budget = leasehold_host::timeouts::LIVENESS_BUDGET;
    let past = cut + budget + SEND_MARGIN;
    eventually(
        "the successor calls out past the budget",
        secs(30),
        || async {
            receiver
                .of_epoch(&lease, next_epoch)
                .iter()
                .any(|at| *at > past)
                .then_some(())
        },
    )
    .await;
    let old = receiver.of_epoch(&lease, epoch);
    let first_new = receiver.of_epoch(&lease, next_epoch)[0];
    let ms = |at: std::time::SystemTime| (micros(at) - micros(cut)) / 1000;
    let last_old = *old.last().expect("the leader called out");
    let overlapping = old.iter().filter(|at| **at > first_new).count();
    eprintln!(
        "terminated behind a black hole: the successor's first request {} ms after the cut, the \
         old holder's last {} ms after it; {overlapping} of its requests overlapped (liveness \
         budget {budget:?})",
        ms(first_new),
        ms(last_old)
    );
    assert!(
        overlapping > 0,
        "the residual window: the old holder, hearing nothing, calls out until its liveness lapses"
    );
    assert!(
        last_old <= past,
        "the old holder called out {} ms after the cut, past its liveness budget ({budget:?} + \
         {SEND_MARGIN:?})",
        ms(last_old)
    );
    rig.hosts[a].proxy.set(Mode::Pass);
}
