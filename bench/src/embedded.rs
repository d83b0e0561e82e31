//! The embedded backend (SQLite in a data directory) next to PostgreSQL,
//! in the same run:
//!
//! - fenced commit throughput at 1 and 4 writers, in process through the
//!   `Store` of each backend (a commit updates one object and appends one
//!   event, each writer on its own lease and object; the embedded backend
//!   commits with `synchronous = FULL`, one fsync per commit);
//! - handover between two real `leasehold` processes running the example
//!   scheduler: orderly (SIGTERM to the leader) and SIGKILL of the leader,
//!   each timed from the signal to the moment the standby's own
//!   `leasehold_leader` gauge says it leads (polled every 5 ms, so a figure
//!   may be up to one poll and one request late). Goals on the embedded
//!   backend: SIGKILL p99 <= 300 ms, orderly p50 <= 50 ms; PostgreSQL's
//!   figures are shown beside them, not judged here (the `handover` part
//!   judges its own).
//!
//! After each run the old leader is started again and waits as the
//! standby, so runs alternate which process leads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use leasehold_host::authority::sqlite::SqliteAuthority;
use leasehold_host::authority::{AcquireRequest, Acquired, Authority, ExpectedIdentity};
use leasehold_host::embedded::{Access, EmbeddedDb};
use leasehold_host::fence::{Fence, LeaseKey};
use leasehold_host::store::{NewEvent, ObjectKey, Op, PostgresStore, SqliteStore, Store};
use leasehold_host::testing::TestDatabase;

use crate::Scale;
use crate::http;
use crate::process::{Replica, eventually, free_port};
use crate::report::{Report, Samples, duration, rate};
use crate::support::{self, TempDir};

const PART: &str = "embedded";
const CLUSTER: &str = "bench";
const WRITERS: &[usize] = &[1, 4];
/// Commits per writer.
const COMMITS: usize = 300;
const QUICK_COMMITS: usize = 30;
const HANDOVER_RUNS: usize = 20;
const QUICK_HANDOVER_RUNS: usize = 3;
const START_LIMIT: Duration = Duration::from_secs(120);
const HANDOVER_LIMIT: Duration = Duration::from_secs(30);
const LEADER_POLL: Duration = Duration::from_millis(5);
const KILL_GOAL_P99: Duration = Duration::from_millis(300);
const ORDERLY_GOAL_P50: Duration = Duration::from_millis(50);

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let dir = TempDir::new("embedded")?;
    let database = TestDatabase::create().await;
    let commits = scale.pick(COMMITS, QUICK_COMMITS);
    for &writers in WRITERS {
        let sqlite = {
            let db = EmbeddedDb::open(
                &dir.path().join(format!("commits-{writers}")),
                Access::Shared,
            )
            .await?;
            let authority: Arc<dyn Authority> = Arc::new(SqliteAuthority::new(db.clone()));
            let store: Arc<dyn Store> = Arc::new(SqliteStore::new(db));
            throughput(authority, store, writers, commits).await?
        };
        let postgres = {
            let db = database.database(writers + 2);
            let authority: Arc<dyn Authority> =
                Arc::new(leasehold_host::authority::postgres::PostgresAuthority::new(
                    db.clone(),
                    ExpectedIdentity::default(),
                ));
            let store: Arc<dyn Store> = Arc::new(PostgresStore::new(db));
            throughput(authority, store, writers, commits).await?
        };
        report.info(
            PART,
            format!("fenced commits/s, {writers} writer(s): embedded SQLite | PostgreSQL"),
            format!("{} | {}", rate(sqlite), rate(postgres)),
        );
    }
    let runs = scale.pick(HANDOVER_RUNS, QUICK_HANDOVER_RUNS);
    let mut embedded = Pair::start(&dir, "handover-embedded", None).await?;
    let (orderly, killed) = handovers(&mut embedded, runs).await?;
    drop(embedded);
    let mut postgres = Pair::start(&dir, "handover-postgres", Some(database.url())).await?;
    let (pg_orderly, pg_killed) = handovers(&mut postgres, runs).await?;
    drop(postgres);
    let (mut orderly, mut killed, mut pg_orderly, mut pg_killed) =
        (orderly, killed, pg_orderly, pg_killed);
    report.goal(
        PART,
        "orderly handover (SIGTERM), embedded -> standby leads",
        orderly.summary(),
        "p50 <= 50 ms",
        orderly.p50() <= ORDERLY_GOAL_P50,
    );
    report.info(
        PART,
        "orderly handover (SIGTERM), PostgreSQL -> standby leads",
        pg_orderly.summary(),
    );
    let p99 = killed.p99();
    report.goal(
        PART,
        "SIGKILL handover, embedded (file lock freed) -> standby leads",
        format!(
            "p50 {}, p99 {}, worst {} over {} runs",
            duration(killed.p50()),
            duration(p99),
            duration(killed.max()),
            killed.len()
        ),
        "p99 <= 300 ms",
        p99 <= KILL_GOAL_P99,
    );
    report.info(
        PART,
        "SIGKILL handover, PostgreSQL (liveness session) -> standby leads",
        format!(
            "p50 {}, p99 {}, worst {} over {} runs",
            duration(pg_killed.p50()),
            duration(pg_killed.p99()),
            duration(pg_killed.max()),
            pg_killed.len()
        ),
    );
    Ok(())
}

/// Fenced commits per second of `writers` writers making `commits` each.
async fn throughput(
    authority: Arc<dyn Authority>,
    store: Arc<dyn Store>,
    writers: usize,
    commits: usize,
) -> Result<f64> {
    let mut fences = Vec::new();
    for w in 0..writers {
        let request = AcquireRequest {
            // Leases of their own for each writer count: the PostgreSQL
            // database is the same for every count.
            key: LeaseKey::new(CLUSTER, format!("writers-{writers}-{w}")),
            holder: "bench".to_string(),
            ttl: Duration::from_secs(600),
        };
        match authority.acquire(&request).await? {
            Acquired::Granted(grant) => fences.push(grant.fence),
            held => bail!("writer {w} not granted: {held:?}"),
        }
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (w, fence) in fences.into_iter().enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            write(store.as_ref(), &fence, w, commits).await
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok((writers * commits) as f64 / started.elapsed().as_secs_f64())
}

async fn write(store: &dyn Store, fence: &Fence, w: usize, commits: usize) -> Result<()> {
    let key = ObjectKey {
        kind: "items".to_string(),
        name: format!("{}-{w}", fence.key.name),
    };
    let mut version = 0;
    for i in 0..commits {
        let op = if version == 0 {
            Op::Create {
                key: key.clone(),
                value: format!("{{\"n\":{i}}}"),
            }
        } else {
            Op::Update {
                key: key.clone(),
                expected_version: version,
                value: format!("{{\"n\":{i}}}"),
            }
        };
        let event = NewEvent {
            key: key.clone(),
            reason: "Wrote".to_string(),
            message: format!("write {i}"),
        };
        version = store.commit_fenced(fence, &[op], &[event]).await?.revision;
    }
    Ok(())
}

/// Two `leasehold` processes running the scheduler, on one data directory
/// (`url` none) or one PostgreSQL database.
struct Pair {
    replicas: [Replica; 2],
    _dir: TempDir,
}

impl Pair {
    async fn start(dir: &TempDir, name: &str, url: Option<&str>) -> Result<Self> {
        let own = TempDir::new(name)?;
        let guest = support::guest("scheduler")?;
        let cache = support::component_cache();
        let backend = match url {
            Some(url) => format!("[database]\nurl = \"{url}\"\n"),
            None => format!(
                "data_dir = \"{}\"\n",
                dir.path().join(format!("{name}-data")).display()
            ),
        };
        let mut replicas = Vec::new();
        for holder in ["replica-a", "replica-b"] {
            let port = free_port()?;
            let config = format!(
                r#"cluster = "{name}"
holder = "{holder}"
{backend}
[http]
listen = "127.0.0.1:{port}"

[runtime]
cache_dir = "{cache}"

[[controllers]]
name = "scheduler"
component = "{guest}"
"#,
                cache = cache.display(),
                guest = guest.display(),
            );
            let replica = Replica::start(own.path(), holder, port, &config)?;
            replica.wait_healthy(START_LIMIT).await?;
            // The first leads before the second starts: a known leader.
            if replicas.is_empty() {
                leading(&replica, START_LIMIT).await?;
            }
            replicas.push(replica);
        }
        let replicas: [Replica; 2] = replicas.try_into().map_err(|_| anyhow!("two replicas"))?;
        Ok(Self {
            replicas,
            _dir: own,
        })
    }
}

/// Whether `replica` says it leads the scheduler (`leasehold_leader`).
async fn leads(replica: &Replica) -> Option<bool> {
    let metrics = http::get(&replica.addr, "/metrics").await.ok()?;
    let line = metrics
        .body
        .lines()
        .find(|l| l.starts_with("leasehold_leader{controller=\"scheduler\"}"))?;
    Some(line.trim_end().ends_with(" 1"))
}

async fn leading(replica: &Replica, limit: Duration) -> Result<()> {
    eventually(&format!("{} leads", replica.name), limit, || async {
        leads(replica).await.filter(|l| *l).map(|_| ())
    })
    .await
}

/// `runs` orderly handovers, then `runs` SIGKILL handovers: the time from
/// the signal to the standby leading.
async fn handovers(pair: &mut Pair, runs: usize) -> Result<(Samples, Samples)> {
    let mut orderly = Samples::with_capacity(runs);
    let mut killed = Samples::with_capacity(runs);
    let mut leader = 0;
    for kill in [false, true] {
        for _ in 0..runs {
            let standby = 1 - leader;
            // The standby is ready and waiting.
            eventually("the standby stands by", START_LIMIT, || async {
                pair.replicas[standby]
                    .controller_state("scheduler")
                    .await
                    .filter(|s| s == "standby")
            })
            .await?;
            let started = Instant::now();
            if kill {
                pair.replicas[leader].kill().await?;
            } else {
                pair.replicas[leader].terminate()?;
            }
            let probe = &pair.replicas[standby];
            loop {
                if leads(probe).await == Some(true) {
                    break;
                }
                if started.elapsed() > HANDOVER_LIMIT {
                    bail!(
                        "{} did not lead within {HANDOVER_LIMIT:?}; its log:\n{}",
                        probe.name,
                        probe.log_tail()
                    );
                }
                tokio::time::sleep(LEADER_POLL).await;
            }
            let took = started.elapsed();
            if kill {
                killed.push(took);
            } else {
                orderly.push(took);
                pair.replicas[leader].wait_exit(START_LIMIT).await?;
            }
            pair.replicas[leader].restart()?;
            pair.replicas[leader].wait_healthy(START_LIMIT).await?;
            leader = standby;
        }
    }
    Ok((orderly, killed))
}
