//! Handover latency between two real `leasehold` processes on PostgreSQL,
//! from the event to the successor's first reconcile:
//!
//! - orderly release (SIGTERM to the leader), `crash_detection = "session"`
//!   (the default) — goal p50 <= 100 ms;
//! - SIGKILL of the leader with `crash_detection = "session"`: the standby
//!   takes the lease over once the leader's liveness session is gone —
//!   goals p50 <= 300 ms and p99 <= 1 s over the whole renew cycle;
//! - SIGKILL of the leader with `crash_detection = "ttl"` set explicitly,
//!   default ttl (10 s) — goal <= ttl + 1 s (the figure earlier runs
//!   measured before session detection became the default);
//! - partition of the leader from the database (a proxy that stops
//!   forwarding, connections left open) under the default
//!   `crash_detection = "session"`: the leader's session stays open, so
//!   only the ttl can end its tenure — goal <= ttl + 1 s.
//!
//! Cost of detection: the standby's database transactions per second while
//! it waits, under `"session"` and under `"ttl"`: the database's
//! `xact_commit + xact_rollback` (pg_stat_database) over an idle window
//! with both replicas running, minus the same over a window with the
//! standby stopped (the leader alone). The server flushes a busy session's
//! counts at most once a second, so each window's figure may be off by
//! about a second's worth of the standby's transactions.
//!
//! Both replicas run the `misbehaving` fixture as their only controller,
//! with the default lease timing, and one object `cmd/ok`: a new tenure's
//! start-up resync reconciles it, and that first reconcile commits
//! `marks/m-1` (deleted before each event, so it can). Both ends are read
//! on the database's clock: the event's moment is `clock_timestamp()` read
//! right before the signal (or the cut), and the first reconcile's moment
//! is the successor tenure's `last_write_at` (its one write). After each
//! run the old leader is started again and waits as the standby.
//!
//! A ttl SIGKILL or partition run waits out the ttl, so those runs are few;
//! session SIGKILL runs are quick, so there are 20 of them. Where the
//! event falls in the leader's renew cycle decides how much of the ttl is
//! left (and, under session detection, whether a renewal is in flight), so
//! the runs of each kind strike at offsets spread uniformly over the whole
//! cycle, both ends included: run k of n strikes k/(n-1) of the way from
//! just after a renewal landed (the worst phase for the ttl: the successor
//! waits out a whole ttl) to [`JUST_BEFORE_RENEWAL`] before the next renewal is
//! due. Each run's offset, read on the database's clock at the event, is
//! printed with its time, then the spread (min / median / max) and the
//! worst, which the goal is held to.

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use chrono::{DateTime, Utc};
use leasehold_host::testing::TestDatabase;
use leasehold_host::timeouts::{LEASE_TTL, RENEW_INTERVAL};

use crate::Scale;
use crate::http;
use crate::process::{Replica, eventually, free_port};
use crate::proxy::Proxy;
use crate::report::{Report, Samples, duration, duration_spread};
use crate::support::{self, TempDir};

const PART: &str = "handover";
const CONTROLLER: &str = "misbehaving";
const HOLDERS: [&str; 2] = ["replica-a", "replica-b"];
const RELEASE_RUNS: usize = 20;
const QUICK_RELEASE_RUNS: usize = 2;
/// SIGKILL runs under `"ttl"`: offsets 0, 1/4, 1/2, 3/4 and the end of
/// the cycle.
const KILL_RUNS: usize = 5;
const QUICK_KILL_RUNS: usize = 2;
/// SIGKILL runs under `"session"`: 20 offsets spread over the cycle.
const SESSION_KILL_RUNS: usize = 20;
const QUICK_SESSION_KILL_RUNS: usize = 3;
/// Idle window over which the database's transactions are counted, per
/// side (both replicas; the leader alone).
const COST_WINDOW: Duration = Duration::from_secs(10);
const QUICK_COST_WINDOW: Duration = Duration::from_secs(3);
/// Partition runs: offsets 0, 1/2 and the end of the cycle.
const PARTITION_RUNS: usize = 3;
const QUICK_PARTITION_RUNS: usize = 1;
/// How long before the next renewal is due the last run of a cycle
/// strikes: close to the end of the cycle, but before the renewer sends
/// (it sends one interval after its previous send; the database stamps
/// `renewed_at` a round trip later).
const JUST_BEFORE_RENEWAL: Duration = Duration::from_millis(25);
/// Longest wait for the leader's next renewal to land.
const RENEWAL_WAIT: Duration = Duration::from_secs(10);
/// Start-up of a replica (compiling the component the first time).
const START_LIMIT: Duration = Duration::from_secs(120);
/// Longest a handover may take before the run is called broken.
const HANDOVER_LIMIT: Duration = Duration::from_secs(60);
/// How long an orderly shutdown may take (the shutdown grace is 5 s).
const EXIT_LIMIT: Duration = Duration::from_secs(30);
/// Goals.
const RELEASE_GOAL_P50: Duration = Duration::from_millis(100);
const SESSION_KILL_GOAL_P50: Duration = Duration::from_millis(300);
const SESSION_KILL_GOAL_P99: Duration = Duration::from_secs(1);
const SLACK_OVER_TTL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Release,
    /// SIGKILL under `crash_detection = "ttl"`.
    Kill,
    /// SIGKILL under `crash_detection = "session"`.
    SessionKill,
    Partition,
}

impl Event {
    fn label(self) -> &'static str {
        match self {
            Event::Release => "orderly release (SIGTERM), crash_detection = session",
            Event::Kill => "SIGKILL, crash_detection = ttl, default ttl 10 s",
            Event::SessionKill => "SIGKILL, crash_detection = session",
            Event::Partition => {
                "partition from the database, crash_detection = session (session left open), default ttl 10 s"
            }
        }
    }

    /// Whether the successor waits for the lease to expire.
    fn waits_for_expiry(self) -> bool {
        matches!(self, Event::Kill | Event::Partition)
    }
}

/// The replicas' `crash_detection`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detection {
    Session,
    Ttl,
}

impl Detection {
    fn key(self) -> &'static str {
        match self {
            Detection::Session => "session",
            Detection::Ttl => "ttl",
        }
    }
}

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

fn config(
    cluster: &str,
    holder: &str,
    port: u16,
    url: &str,
    detection: Detection,
) -> Result<String> {
    let guest = support::guest(CONTROLLER)?;
    let cache = support::component_cache();
    Ok(format!(
        r#"
cluster = "{cluster}"
holder = "{holder}"

[database]
url = "{url}"
max_connections = 4

[http]
listen = "127.0.0.1:{port}"

[runtime]
cache_dir = "{cache}"

# Default lease timing: ttl 10 s, renew every 2 s, deadline 7 s.
[[controllers]]
name = "{CONTROLLER}"
component = "{guest}"
crash_detection = "{detection}"
"#,
        cache = cache.display(),
        guest = guest.display(),
        detection = detection.key(),
    ))
}

/// Two replicas of one cluster, optionally each behind its own proxy.
struct Pair {
    cluster: String,
    replicas: [Replica; 2],
    proxies: Option<[Proxy; 2]>,
    _dir: TempDir,
}

impl Pair {
    async fn start(
        database: &TestDatabase,
        cluster: &str,
        proxied: bool,
        detection: Detection,
    ) -> Result<Self> {
        let dir = TempDir::new(cluster)?;
        let proxies = if proxied {
            let upstream = support::server_address(database.url())?;
            Some([Proxy::start(upstream).await?, Proxy::start(upstream).await?])
        } else {
            None
        };
        let mut replicas = Vec::new();
        for (i, holder) in HOLDERS.iter().enumerate() {
            let url = match &proxies {
                Some(proxies) => support::with_address(database.url(), proxies[i].addr())?,
                None => database.url().to_string(),
            };
            let port = free_port()?;
            replicas.push(Replica::start(
                dir.path(),
                holder,
                port,
                &config(cluster, holder, port, &url, detection)?,
            )?);
        }
        let replicas: [Replica; 2] = replicas.try_into().map_err(|_| anyhow!("two replicas"))?;
        for replica in &replicas {
            replica.wait_healthy(START_LIMIT).await?;
        }
        // The object whose reconcile is each tenure's first.
        let created = http::put(&replicas[0].addr, "/v1/objects/cmd/ok", "{}").await?;
        if !(200..300).contains(&created.status) {
            bail!("creating cmd/ok: {} {}", created.status, created.body);
        }
        Ok(Self {
            cluster: cluster.to_string(),
            replicas,
            proxies,
            _dir: dir,
        })
    }
}

async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .context("connecting to the benchmark database")?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let database = TestDatabase::create().await;
    let client = connect(database.url()).await?;
    let stats = support::Stats::connect().await?;
    let name = support::database_name(database.url())?;
    let window = if scale.quick {
        QUICK_COST_WINDOW
    } else {
        COST_WINDOW
    };
    let mut results: Vec<(Event, Phases)> = Vec::new();
    let mut costs: Vec<(Detection, Cost)> = Vec::new();
    for detection in [Detection::Session, Detection::Ttl] {
        let cluster = format!("handover-{}", detection.key());
        let mut pair = Pair::start(&database, &cluster, false, detection).await?;
        costs.push((
            detection,
            standby_cost(&mut pair, &client, &stats, &name, window).await?,
        ));
        let events = match detection {
            Detection::Session => vec![
                (Event::Release, scale.pick(RELEASE_RUNS, QUICK_RELEASE_RUNS)),
                (
                    Event::SessionKill,
                    scale.pick(SESSION_KILL_RUNS, QUICK_SESSION_KILL_RUNS),
                ),
            ],
            Detection::Ttl => vec![(Event::Kill, scale.pick(KILL_RUNS, QUICK_KILL_RUNS))],
        };
        for (event, runs) in events {
            let mut phases = Phases::default();
            for offset in offsets(runs) {
                phases.add(one_run(&mut pair, &client, event, offset).await?);
            }
            results.push((event, phases));
        }
        drop(pair);
        // The next pair's cost window must not count this pair's sessions.
        others_gone(&client).await?;
    }
    {
        let mut pair = Pair::start(&database, "partition", true, Detection::Session).await?;
        let mut phases = Phases::default();
        let runs = scale.pick(PARTITION_RUNS, QUICK_PARTITION_RUNS);
        for offset in offsets(runs) {
            phases.add(one_run(&mut pair, &client, Event::Partition, offset).await?);
        }
        results.push((Event::Partition, phases));
    }
    let slow_limit = LEASE_TTL + SLACK_OVER_TTL;
    for (event, mut phases) in results {
        let samples = &mut phases.total;
        let measure = format!("{} -> successor's first reconcile", event.label());
        match event {
            Event::Release => {
                let p50 = samples.p50();
                report.goal(
                    PART,
                    measure,
                    samples.summary(),
                    "p50 <= 100 ms",
                    p50 <= RELEASE_GOAL_P50,
                );
            }
            Event::SessionKill => {
                let p50 = samples.p50();
                let p99 = samples.p99();
                let max = samples.max();
                let result = format!(
                    "p50 {}, p99 {}, worst {} over {} runs",
                    duration(p50),
                    duration(p99),
                    duration(max),
                    samples.len()
                );
                report.goal(
                    PART,
                    format!("{measure}, over the whole renew cycle"),
                    result,
                    "p50 <= 300 ms, p99 <= 1 s",
                    p50 <= SESSION_KILL_GOAL_P50 && p99 <= SESSION_KILL_GOAL_P99,
                );
            }
            Event::Kill | Event::Partition => {
                let max = samples.max();
                report.goal(
                    PART,
                    format!("{measure}, over the whole renew cycle"),
                    format!(
                        "worst {}; {}",
                        duration(max),
                        duration_spread(samples.values())
                    ),
                    "worst <= ttl + 1 s = 11 s",
                    max <= slow_limit,
                );
            }
        }
        if event != Event::Release {
            let each: Vec<String> = phases
                .runs
                .iter()
                .map(|(offset, total)| format!("{} -> {}", duration(*offset), duration(*total)))
                .collect();
            report.info(
                PART,
                format!(
                    "{}: each run, time since the leader's last renewal at the event -> handover",
                    event.label()
                ),
                each.join(", "),
            );
        }
        let mut steps = Vec::new();
        match event {
            Event::Release => {
                steps.push(format!(
                    "stop + release {}",
                    duration(phases.released.p50())
                ));
                steps.push(format!(
                    "wake + acquire {}",
                    duration(phases.acquired.p50())
                ));
            }
            Event::SessionKill => {
                steps.push(format!(
                    "session gone + standby scan + acquire {}",
                    duration(phases.acquired.p50())
                ));
            }
            Event::Kill | Event::Partition => {
                steps.push(format!(
                    "rest of the ttl {}",
                    duration(phases.expired.p50())
                ));
                steps.push(format!(
                    "standby poll + acquire {}",
                    duration(phases.acquired.p50())
                ));
            }
        }
        steps.push(format!(
            "instantiate + first reconcile {}",
            duration(phases.first.p50())
        ));
        report.info(
            PART,
            format!("{}: where the time goes (medians)", event.label()),
            steps.join(", "),
        );
    }
    for (detection, cost) in costs {
        report.info(
            PART,
            format!(
                "cost of detection: the waiting standby's database transactions per second, crash_detection = {}",
                detection.key()
            ),
            format!(
                "{:.1}/s (both replicas {:.1}/s, the leader alone {:.1}/s; {} s windows)",
                cost.both - cost.leader,
                cost.both,
                cost.leader,
                cost.window.as_secs()
            ),
        );
    }
    Ok(())
}

/// Transactions per second of the benchmark database over an idle window.
struct Cost {
    /// Leader and standby running.
    both: f64,
    /// The standby stopped.
    leader: f64,
    window: Duration,
}

/// The database's transactions per second over `window`, from
/// pg_stat_database read on the admin database (which counts no
/// transaction of the database under measurement).
async fn rate(stats: &support::Stats, name: &str, window: Duration) -> Result<f64> {
    let before = stats.transactions(name).await?;
    tokio::time::sleep(window).await;
    let after = stats.transactions(name).await?;
    Ok((after - before) as f64 / window.as_secs_f64())
}

/// The database's transaction rate with the settled pair running, then
/// with the standby stopped (SIGTERM, and its sessions gone, which flushes
/// their counts before the second window opens); the standby is started
/// again afterwards.
async fn standby_cost(
    pair: &mut Pair,
    client: &tokio_postgres::Client,
    stats: &support::Stats,
    name: &str,
    window: Duration,
) -> Result<Cost> {
    let (leader, _) = leader(pair, client).await?;
    let standby = 1 - leader;
    eventually("the other replica stands by", START_LIMIT, || async {
        (pair.replicas[standby].controller_state(CONTROLLER).await? == "standby").then_some(())
    })
    .await
    .with_context(|| pair.replicas[standby].log_tail())?;
    let both = rate(stats, name, window).await?;
    let before = session_count(client).await?;
    pair.replicas[standby].terminate()?;
    pair.replicas[standby].wait_exit(EXIT_LIMIT).await?;
    eventually("the standby's sessions ended", EXIT_LIMIT, || async {
        (session_count(client).await.ok()? < before).then_some(())
    })
    .await?;
    let alone = rate(stats, name, window).await?;
    pair.replicas[standby].restart()?;
    pair.replicas[standby].wait_healthy(START_LIMIT).await?;
    Ok(Cost {
        both,
        leader: alone,
        window,
    })
}

/// Sessions on the benchmark database other than `client`'s own.
async fn session_count(client: &tokio_postgres::Client) -> Result<i64> {
    Ok(client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await?
        .get(0))
}

/// Wait until no session but `client`'s is connected to the benchmark
/// database (a dropped pair's processes were killed; the server ends their
/// sessions, flushing their statistics, a moment later).
async fn others_gone(client: &tokio_postgres::Client) -> Result<()> {
    eventually("the previous pair's sessions ended", EXIT_LIMIT, || async {
        (session_count(client).await.ok()? == 0).then_some(())
    })
    .await
}

/// One handover's time, split at the moments the database recorded.
struct Timing {
    /// Event to the successor's first write.
    total: Duration,
    /// How long after the leader's last renewal the event struck, on the
    /// database's clock (SIGKILL and partition only).
    offset: Option<Duration>,
    /// Event to the old tenure's end (orderly release only).
    released: Option<Duration>,
    /// Event to the lease's expiry as it stood at the event (the rest of
    /// the ttl since the last renewal; SIGKILL and partition only).
    expired: Option<Duration>,
    /// From the old tenure's end (or the expiry) to the grant.
    acquired: Duration,
    /// From the grant to the first write.
    first: Duration,
}

#[derive(Default)]
struct Phases {
    total: Samples,
    released: Samples,
    expired: Samples,
    acquired: Samples,
    first: Samples,
    /// Each run's offset in the renew cycle and its total, in run order.
    runs: Vec<(Duration, Duration)>,
}

impl Phases {
    fn add(&mut self, timing: Timing) {
        self.total.push(timing.total);
        if let Some(offset) = timing.offset {
            self.runs.push((offset, timing.total));
        }
        if let Some(released) = timing.released {
            self.released.push(released);
        }
        if let Some(expired) = timing.expired {
            self.expired.push(expired);
        }
        self.acquired.push(timing.acquired);
        self.first.push(timing.first);
    }
}

fn between(from: DateTime<Utc>, to: DateTime<Utc>) -> Duration {
    (to - from).to_std().unwrap_or_default()
}

/// The replica that leads now (index into the pair) and its epoch, once
/// its tenure's first reconcile wrote.
async fn leader(pair: &Pair, client: &tokio_postgres::Client) -> Result<(usize, i64)> {
    eventually(
        "a replica leads and has reconciled",
        HANDOVER_LIMIT,
        || async {
            let row = client
                .query_opt(
                    "SELECT l.holder, l.epoch, t.writes FROM leasehold_leases l
                   JOIN leasehold_tenures t
                     ON t.cluster = l.cluster AND t.lease = l.name AND t.epoch = l.epoch
                  WHERE l.cluster = $1 AND l.name = $2
                    AND NOT l.released AND l.expires_at > clock_timestamp()",
                    &[&pair.cluster, &CONTROLLER],
                )
                .await
                .ok()??;
            let holder: String = row.get(0);
            let writes: i64 = row.get(2);
            let index = HOLDERS.iter().position(|h| *h == holder)?;
            (writes > 0).then(|| (index, row.get::<_, i64>(1)))
        },
    )
    .await
}

/// One handover: wait for a settled leader and standby, make room for the
/// successor's first write, cause `event`, and time it on the database
/// clock. Then bring the old leader back as the standby.
async fn one_run(
    pair: &mut Pair,
    client: &tokio_postgres::Client,
    event: Event,
    offset: Duration,
) -> Result<Timing> {
    let (leader, epoch) = leader(pair, client).await?;
    let standby = 1 - leader;
    let standby_addr = pair.replicas[standby].addr.clone();
    eventually("the other replica stands by", START_LIMIT, || async {
        (pair.replicas[standby].controller_state(CONTROLLER).await? == "standby").then_some(())
    })
    .await
    .with_context(|| pair.replicas[standby].log_tail())?;
    let deleted = http::delete(&standby_addr, "/v1/objects/marks/m-1").await?;
    if !(200..300).contains(&deleted.status) && deleted.status != 404 {
        bail!("deleting marks/m-1: {} {}", deleted.status, deleted.body);
    }
    if event != Event::Release {
        at_renew_offset(pair, client, offset).await?;
    }

    let moment = client
        .query_one(
            "SELECT clock_timestamp(), expires_at, renewed_at
               FROM leasehold_leases WHERE cluster = $1 AND name = $2",
            &[&pair.cluster, &CONTROLLER],
        )
        .await?;
    let started: DateTime<Utc> = moment.get(0);
    let expires: Option<DateTime<Utc>> = moment.get(1);
    let renewed: DateTime<Utc> = moment.get(2);
    match event {
        Event::Release => pair.replicas[leader].terminate()?,
        Event::Kill | Event::SessionKill => pair.replicas[leader].kill().await?,
        Event::Partition => proxies(pair)?[leader].partition(true),
    }
    let (granted, first_write): (DateTime<Utc>, DateTime<Utc>) = eventually(
        "the successor's first reconcile wrote",
        HANDOVER_LIMIT,
        || async {
            let row = client
                .query_opt(
                    "SELECT acquired_at, last_write_at FROM leasehold_tenures
                      WHERE cluster = $1 AND lease = $2 AND epoch > $3 AND writes > 0
                      ORDER BY epoch LIMIT 1",
                    &[&pair.cluster, &CONTROLLER, &epoch],
                )
                .await
                .ok()??;
            Some((row.get(0), row.get::<_, Option<DateTime<Utc>>>(1)?))
        },
    )
    .await
    .with_context(|| pair.replicas[standby].log_tail())?;
    if first_write < started {
        bail!("the successor wrote before the event");
    }
    let ended: Option<DateTime<Utc>> = client
        .query_one(
            "SELECT ended_at FROM leasehold_tenures
              WHERE cluster = $1 AND lease = $2 AND epoch = $3",
            &[&pair.cluster, &CONTROLLER, &epoch],
        )
        .await?
        .get(0);
    let released = ended.filter(|_| event == Event::Release);
    let expired = expires.filter(|_| event.waits_for_expiry());
    let timing = Timing {
        total: between(started, first_write),
        offset: (event != Event::Release).then(|| between(renewed, started)),
        released: released.map(|at| between(started, at)),
        expired: expired.map(|at| between(started, at)),
        acquired: between(released.or(expired).unwrap_or(started), granted),
        first: between(granted, first_write),
    };

    let old = &mut pair.replicas[leader];
    match event {
        Event::Release => old.wait_exit(EXIT_LIMIT).await?,
        Event::Kill | Event::SessionKill => {}
        Event::Partition => {
            // It fenced itself at its renew deadline; start it afresh on a
            // healed path rather than wait out its acquire backoff.
            old.kill().await?;
            proxies(pair)?[leader].partition(false);
        }
    }
    let old = &mut pair.replicas[leader];
    old.restart()?;
    old.wait_healthy(START_LIMIT).await?;
    Ok(timing)
}

/// Where run k of `runs` strikes in the renew cycle: spread uniformly
/// from just after a renewal (offset zero) to [`JUST_BEFORE_RENEWAL`]
/// before the next one is due, both ends included. A single run takes
/// the worst phase, just after a renewal.
fn offsets(runs: usize) -> Vec<Duration> {
    let span = RENEW_INTERVAL.saturating_sub(JUST_BEFORE_RENEWAL);
    if runs <= 1 {
        return vec![Duration::ZERO; runs];
    }
    (0..runs)
        .map(|k| span.mul_f64(k as f64 / (runs - 1) as f64))
        .collect()
}

/// Wait until `offset` has passed since the leader's last renewal, so the
/// runs sample the whole cycle: a crash just after a renewal leaves the
/// successor the full ttl to wait, one just before the next a renew
/// interval less. (Left alone, the event would fall at the same point of
/// the cycle every run, since restarts take about as long each time.)
/// Offset zero waits for the next renewal to land and returns at once.
async fn at_renew_offset(
    pair: &Pair,
    client: &tokio_postgres::Client,
    offset: Duration,
) -> Result<()> {
    let query = "SELECT renewed_at, extract(epoch FROM clock_timestamp() - renewed_at)::float8
                   FROM leasehold_leases WHERE cluster = $1 AND name = $2";
    let row = client
        .query_one(query, &[&pair.cluster, &CONTROLLER])
        .await?;
    let last: DateTime<Utc> = row.get(0);
    if offset.is_zero() {
        eventually("the leader's next renewal landed", RENEWAL_WAIT, || async {
            let row = client
                .query_one(query, &[&pair.cluster, &CONTROLLER])
                .await
                .ok()?;
            (row.get::<_, DateTime<Utc>>(0) > last).then_some(())
        })
        .await?;
        return Ok(());
    }
    let since = Duration::from_secs_f64(row.get::<_, f64>(1).max(0.0));
    let wait = if since <= offset {
        offset - since
    } else {
        // The next renewal is due one interval after the last one.
        (RENEW_INTERVAL + offset).saturating_sub(since)
    };
    tokio::time::sleep(wait).await;
    Ok(())
}

fn proxies(pair: &Pair) -> Result<&[Proxy; 2]> {
    pair.proxies
        .as_ref()
        .ok_or_else(|| anyhow!("this pair has no proxies"))
}
