//! Sharded scheduling (issue 19): how fast the example scheduler places a
//! backlog when it runs as 1, 2 and 4 shards (`shards = N`), on one host
//! and on two, real `leasehold` processes (release build) on PostgreSQL.
//!
//! Each configuration has a cluster of its own in one database: 8 nodes
//! of 10,000 slots and [`BACKLOG`] tasks created *held* (`{"status":
//! "held"}`: the scheduler reads only pending tasks, so it lets them be).
//! The hosts start (`[placement]` on, `min_tenure = "1s"` so the shards
//! spread in seconds), and once every shard is led, spread over the hosts
//! as placement wants (each host within one lease of the other), and every
//! work queue is empty, the bench turns every task pending at once:
//! conditional updates through the store, 128 per commit, 8 writers. From
//! the first of those commits to the last `Assigned` event is the drain;
//! reported is tasks per second. Each shard places only its own tasks
//! (FNV-1a of `tasks/NAME`) and every shard watches every node, so the
//! shards share the nodes' slots through conditional updates of them.
//!
//! What bounds it on 2 cores is reported beside it: the conflicts on the
//! nodes (shards racing for one node's count) and where the host's time
//! went are in each host's metrics; a row per configuration says which
//! host led which shard.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use futures::{StreamExt, TryStreamExt, stream};
use leasehold_host::store::{ObjectKey, Op, PostgresStore, Store};
use leasehold_host::testing::TestDatabase;

use crate::Scale;
use crate::end_to_end;
use crate::http;
use crate::process::{Replica, eventually, free_port};
use crate::report::{Report, rate};
use crate::support::{self, TempDir};

const PART: &str = "sharded";
const NODES: usize = 8;
const NODE_CAPACITY: usize = 10_000;
/// Tasks each configuration drains.
const BACKLOG: usize = 5_000;
const QUICK_BACKLOG: usize = 500;
/// Writers seeding and releasing the backlog, and ops per commit.
const WRITERS: usize = 8;
const OPS_PER_COMMIT: usize = 128;
const SHARD_COUNTS: [u32; 3] = [1, 2, 4];
const HOST_COUNTS: [usize; 2] = [1, 2];
const START_LIMIT: Duration = Duration::from_secs(120);
/// Longest the shards may take to be led and spread.
const SPREAD_LIMIT: Duration = Duration::from_secs(60);

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

/// One host's config: the scheduler as `shards` shards (unsharded for 1).
fn config(cluster: &str, holder: &str, port: u16, url: &str, shards: u32) -> Result<String> {
    let cache = support::component_cache();
    let scheduler = support::guest("scheduler")?;
    let shards = if shards > 1 {
        format!("shards = {shards}")
    } else {
        String::new()
    };
    Ok(format!(
        r#"
cluster = "{cluster}"
holder = "{holder}"

[database]
url = "{url}"
max_connections = 16

[http]
listen = "127.0.0.1:{port}"

[runtime]
pooling = true
cache_dir = "{cache}"

[placement]
min_tenure = "1s"

[[controllers]]
name = "scheduler"
component = "{scheduler}"
{shards}
"#,
        cache = cache.display(),
        scheduler = scheduler.display(),
    ))
}

/// The scheduler's leases for `shards` shards.
fn leases(shards: u32) -> Vec<String> {
    if shards > 1 {
        (0..shards).map(|i| format!("scheduler-{i}")).collect()
    } else {
        vec!["scheduler".to_string()]
    }
}

/// Who holds each of `leases`, by `GET /v1/leases` of `addr`, once every
/// one is held and the holders are within one lease of each other over
/// `hosts`.
async fn spread(addr: &str, leases: &[String], hosts: &[String]) -> Option<Vec<(String, String)>> {
    let listed = http::get(addr, "/v1/leases").await.ok()?.json().ok()?;
    let mut held = Vec::new();
    for lease in leases {
        let item = listed["items"]
            .as_array()?
            .iter()
            .find(|i| i["name"] == lease.as_str())?;
        if item["active"] != true {
            return None;
        }
        held.push((lease.clone(), item["holder"].as_str()?.to_string()));
    }
    let per_host: Vec<usize> = hosts
        .iter()
        .map(|h| held.iter().filter(|(_, by)| by == h).count())
        .collect();
    let (min, max) = (per_host.iter().min()?, per_host.iter().max()?);
    (max - min <= 1).then_some(held)
}

/// The sum of the scheduler's work queue depths and of a counter over its
/// shards, from `/metrics` of `addr`.
async fn scheduler_metric(addr: &str, name: &str, labels: &str) -> Result<f64> {
    let body = http::get(addr, "/metrics").await?.body;
    Ok(body
        .lines()
        .filter(|l| l.starts_with(name) && l.contains("controller=\"scheduler"))
        .filter(|l| l.contains(labels))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let database = TestDatabase::create().await;
    let dir = TempDir::new("sharded")?;
    let backlog = scale.pick(BACKLOG, QUICK_BACKLOG);
    let store = Arc::new(PostgresStore::new(database.database(WRITERS)));
    for hosts in HOST_COUNTS {
        for shards in SHARD_COUNTS {
            let cluster = format!("h{hosts}s{shards}");
            let label =
                format!("{shards} shard(s) on {hosts} host(s), {backlog} tasks released at once");
            let (drain, conflicts, placed_by) =
                drain(&dir, &database, &store, &cluster, hosts, shards, backlog).await?;
            let tasks_per_second = backlog as f64 / drain.as_secs_f64();
            eprintln!("{PART}: {label}: {}", rate(tasks_per_second));
            report.info(
                PART,
                format!("{label}: assigned per second"),
                rate(tasks_per_second),
            );
            report.info(
                PART,
                format!("{label}: node conflicts; shards per host"),
                format!("{conflicts} conflict(s); {placed_by}"),
            );
        }
    }
    Ok(())
}

/// One configuration: seed, start, spread, release, drain. The drain's
/// length, the scheduler's conflicted commits over every host, and which
/// host led which shard.
async fn drain(
    dir: &TempDir,
    database: &TestDatabase,
    store: &Arc<PostgresStore>,
    cluster: &str,
    hosts: usize,
    shards: u32,
    backlog: usize,
) -> Result<(Duration, f64, String)> {
    for n in 0..NODES {
        store
            .put(
                cluster,
                &support::key("nodes", &format!("node-{n}")),
                &format!("{{\"capacity\":{NODE_CAPACITY}}}"),
                None,
            )
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    let held: Vec<(ObjectKey, u64)> = stream::iter(0..backlog)
        .map(|i| {
            let store = store.clone();
            let key = support::key("tasks", &format!("task-{i:05}"));
            async move {
                let object = store
                    .put(cluster, &key, "{\"status\":\"held\"}", None)
                    .await
                    .map_err(|e| anyhow!("{e}"))?;
                Ok::<_, anyhow::Error>((key, object.version))
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect()
        .await?;

    let holders: Vec<String> = (0..hosts).map(|i| format!("{cluster}-host-{i}")).collect();
    let mut replicas = Vec::new();
    for holder in &holders {
        let port = free_port()?;
        let config = config(cluster, holder, port, database.url(), shards)?;
        replicas.push(Replica::start(dir.path(), holder, port, &config)?);
    }
    for replica in &replicas {
        replica.wait_healthy(START_LIMIT).await?;
    }
    let addr = replicas[0].addr.clone();
    let leases = leases(shards);
    let placed = eventually("the shards are led and spread", SPREAD_LIMIT, || {
        spread(&addr, &leases, &holders)
    })
    .await
    .with_context(|| replicas[0].log_tail())?;
    // The held tasks' own changes reconciled (nothing to place) first.
    eventually("the work queues are empty", SPREAD_LIMIT, || async {
        let mut depth = 0.0;
        for replica in &replicas {
            depth += scheduler_metric(&replica.addr, "leasehold_work_queue_depth", "")
                .await
                .ok()?;
        }
        (depth == 0.0).then_some(())
    })
    .await?;
    let after = end_to_end::last_seq(&addr).await?;

    // Release every task at once, in commits of 128.
    let started = Instant::now();
    let chunks: Vec<Vec<(ObjectKey, u64)>> = held
        .chunks(OPS_PER_COMMIT)
        .map(<[(ObjectKey, u64)]>::to_vec)
        .collect();
    stream::iter(chunks)
        .map(|chunk| {
            let store = store.clone();
            async move {
                let ops: Vec<Op> = chunk
                    .into_iter()
                    .map(|(key, version)| Op::Update {
                        key,
                        expected_version: version,
                        value: "{\"status\":\"pending\",\"command\":\"make test\"}".into(),
                    })
                    .collect();
                store
                    .commit_api(cluster, &ops, &[])
                    .await
                    .map(drop)
                    .map_err(|e| anyhow!("{e}"))
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    let (_, assigned) = end_to_end::collect(&addr, after, backlog)
        .await
        .with_context(|| replicas[0].log_tail())?;
    let last = assigned.values().max().copied();
    // From the release's start (bench clock) to the last assignment
    // (database clock: the same machine's).
    let drain = match last {
        Some(last) => {
            let now = chrono::Utc::now();
            let since_last = (now - last).to_std().unwrap_or_default();
            started.elapsed().saturating_sub(since_last)
        }
        None => bail!("nothing was assigned"),
    };
    let mut conflicts = 0.0;
    for replica in &replicas {
        conflicts += scheduler_metric(
            &replica.addr,
            "leasehold_commits_total",
            "result=\"conflict\"",
        )
        .await?;
    }
    let placed_by = holders
        .iter()
        .map(|h| {
            let mine: Vec<&str> = placed
                .iter()
                .filter(|(_, by)| by == h)
                .map(|(lease, _)| lease.as_str())
                .collect();
            let mine = if mine.is_empty() {
                "(none)".to_string()
            } else {
                mine.join(" ")
            };
            format!("{}: {mine}", h.rsplit('-').next().unwrap_or(h))
        })
        .collect::<Vec<_>>()
        .join(", ");
    drop(replicas);
    Ok((drain, conflicts, format!("host {placed_by}")))
}
