//! End to end: the example scheduler assigning tasks on PostgreSQL, in one
//! real `leasehold` process with the example-like config (scheduler and
//! rollout controllers, default timing).
//!
//! - **Steady**: with 8 nodes, 1,000 tasks are created through the HTTP API
//!   by 8 concurrent clients as fast as they go, while the scheduler
//!   assigns them. Reported: tasks assigned per second over the whole run,
//!   and the p50/p99 from a task's creation to its assignment (goals: p50
//!   <= 20 ms, p99 <= 250 ms). Both ends are events in the log (`Created`
//!   by the API write, `Assigned` by the scheduler's commit), read from
//!   `GET /v1/events`, so both are the database's clock.
//! - **Backlog**: 10,000 tasks are already pending when a fresh process
//!   starts (written straight into the store beforehand); reported is how
//!   fast the scheduler drains them, first to last `Assigned` (goal: >=
//!   2,000 tasks/s).
//!
//! Each phase also reports the scheduler's reconciles per assignment and
//! where its time went, from the host's own metrics: reconciles, their
//! mean duration and the share of the phase they filled (reconciles of one
//! controller run one at a time, so near 100 % the scheduler itself is the
//! bottleneck; far below, the time is spent before it is called), and its
//! commits with the tasks each carried.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use leasehold_host::store::{PostgresStore, Store};
use leasehold_host::testing::TestDatabase;

use crate::Scale;
use crate::http;
use crate::process::{Replica, eventually, free_port};
use crate::report::{Report, Samples, rate};
use crate::support::{self, TempDir};

const PART: &str = "end-to-end";
const NODES: usize = 8;
const NODE_CAPACITY: usize = 10_000;
const TASKS: usize = 1000;
const QUICK_TASKS: usize = 100;
/// Pending tasks the backlog phase starts with.
const BACKLOG_TASKS: usize = 10_000;
const QUICK_BACKLOG_TASKS: usize = 1_000;
/// Goals of issue 17: creation -> assignment at the steady phase's offered
/// rate, and the backlog's drain rate.
const STEADY_P50_GOAL: Duration = Duration::from_millis(20);
const STEADY_P99_GOAL: Duration = Duration::from_millis(250);
const BACKLOG_RATE_GOAL: f64 = 2_000.0;
/// Concurrent writers seeding the backlog.
const SEEDERS: usize = 8;
/// Concurrent API clients creating tasks.
const CLIENTS: usize = 8;
const START_LIMIT: Duration = Duration::from_secs(120);
/// Longest the scheduler may take to assign every task.
const ASSIGN_LIMIT: Duration = Duration::from_secs(300);
/// Events per page read.
const EVENT_PAGE: usize = 500;

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

/// The process's config: `extra` (top-level tables, such as `[store]`) goes
/// before the controllers.
fn config(cluster: &str, port: u16, url: &str, extra: &str) -> Result<String> {
    let cache = support::component_cache();
    let scheduler = support::guest("scheduler")?;
    let rollout = support::guest("rollout")?;
    Ok(format!(
        r#"
cluster = "{cluster}"
holder = "bench-replica"

[database]
url = "{url}"
max_connections = 16

[http]
listen = "127.0.0.1:{port}"

[runtime]
pooling = true
cache_dir = "{cache}"

{extra}

[[controllers]]
name = "scheduler"
component = "{scheduler}"
lease_ttl = "10s"
renew_interval = "2s"
renew_deadline = "7s"

[[controllers]]
name = "rollout"
component = "{rollout}"
"#,
        cache = cache.display(),
        scheduler = scheduler.display(),
        rollout = rollout.display(),
    ))
}

async fn start(dir: &TempDir, database: &TestDatabase, cluster: &str) -> Result<Replica> {
    start_with(dir, database, cluster, "").await
}

/// A process of the end-to-end config plus `extra`, healthy and with the
/// scheduler leading.
pub(crate) async fn start_with(
    dir: &TempDir,
    database: &TestDatabase,
    cluster: &str,
    extra: &str,
) -> Result<Replica> {
    let port = free_port()?;
    let replica = Replica::start(
        dir.path(),
        cluster,
        port,
        &config(cluster, port, database.url(), extra)?,
    )?;
    replica.wait_healthy(START_LIMIT).await?;
    eventually("the scheduler leads", START_LIMIT, || async {
        (replica.controller_state("scheduler").await? == "leading").then_some(())
    })
    .await
    .with_context(|| replica.log_tail())?;
    Ok(replica)
}

/// One event, as far as this part needs it.
struct Seen {
    seq: u64,
    at: DateTime<Utc>,
    kind: String,
    name: String,
    reason: String,
}

/// Events after `after`, waiting up to a few seconds for one.
async fn events(addr: &str, after: u64) -> Result<Vec<Seen>> {
    let response = http::get(
        addr,
        &format!("/v1/events?after={after}&limit={EVENT_PAGE}&wait=5s"),
    )
    .await?;
    if response.status != 200 {
        bail!("GET /v1/events: {} {}", response.status, response.body);
    }
    let json = response.json()?;
    let mut seen = Vec::new();
    for event in json["items"].as_array().into_iter().flatten() {
        let text = |field: &str| event[field].as_str().unwrap_or_default().to_string();
        seen.push(Seen {
            seq: event["seq"].as_u64().context("event without seq")?,
            at: DateTime::parse_from_rfc3339(&text("at"))
                .context("event time")?
                .with_timezone(&Utc),
            kind: text("kind"),
            name: text("name"),
            reason: text("reason"),
        });
    }
    Ok(seen)
}

/// Read events from `after` until `tasks` tasks were assigned; the creation
/// and assignment times of each task.
pub(crate) async fn collect(
    addr: &str,
    mut after: u64,
    tasks: usize,
) -> Result<(
    HashMap<String, DateTime<Utc>>,
    HashMap<String, DateTime<Utc>>,
)> {
    let mut created = HashMap::new();
    let mut assigned = HashMap::new();
    let deadline = tokio::time::Instant::now() + ASSIGN_LIMIT;
    while assigned.len() < tasks {
        if tokio::time::Instant::now() > deadline {
            bail!(
                "only {} of {tasks} tasks were assigned within {ASSIGN_LIMIT:?}",
                assigned.len()
            );
        }
        for event in events(addr, after).await? {
            after = after.max(event.seq);
            if event.kind != "tasks" {
                continue;
            }
            match event.reason.as_str() {
                "Created" => {
                    created.insert(event.name, event.at);
                }
                "Assigned" if assigned.insert(event.name.clone(), event.at).is_some() => {
                    bail!("task {} was assigned twice", event.name);
                }
                _ => {}
            }
        }
    }
    Ok((created, assigned))
}

/// The last event's sequence number.
pub(crate) async fn last_seq(addr: &str) -> Result<u64> {
    let mut after = 0;
    loop {
        let response = http::get(
            addr,
            &format!("/v1/events?after={after}&limit={EVENT_PAGE}"),
        )
        .await?;
        let json = response.json()?;
        let page = json["items"].as_array().cloned().unwrap_or_default();
        after = page.last().and_then(|e| e["seq"].as_u64()).unwrap_or(after);
        // `next` is null once the page reached the end of the log.
        if json["next"].is_null() {
            return Ok(after);
        }
    }
}

fn span(times: impl Iterator<Item = DateTime<Utc>> + Clone) -> Option<Duration> {
    let first = times.clone().min()?;
    let last = times.max()?;
    (last - first).to_std().ok()
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let database = TestDatabase::create().await;
    let dir = TempDir::new("end-to-end")?;
    let tasks = scale.pick(TASKS, QUICK_TASKS);

    // Steady: create through the API while the scheduler runs.
    let replica = start(&dir, &database, "steady").await?;
    for n in 0..NODES {
        let r = http::put(
            &replica.addr,
            &format!("/v1/objects/nodes/node-{n}"),
            &format!("{{\"capacity\":{NODE_CAPACITY}}}"),
        )
        .await?;
        if !(200..300).contains(&r.status) {
            bail!("creating a node: {} {}", r.status, r.body);
        }
    }
    let after = last_seq(&replica.addr).await?;
    let addr = Arc::new(replica.addr.clone());
    stream::iter(0..tasks)
        .map(|i| {
            let addr = addr.clone();
            async move {
                let r = http::put(
                    &addr,
                    &format!("/v1/objects/tasks/task-{i:05}"),
                    "{\"status\":\"pending\",\"command\":\"make test\"}",
                )
                .await?;
                if !(200..300).contains(&r.status) {
                    bail!("creating a task: {} {}", r.status, r.body);
                }
                Ok(())
            }
        })
        .buffer_unordered(CLIENTS)
        .try_collect::<Vec<()>>()
        .await?;
    let (created, assigned) = collect(&replica.addr, after, tasks)
        .await
        .with_context(|| replica.log_tail())?;
    let mut latencies = Samples::with_capacity(tasks);
    for (name, at) in &assigned {
        let made = created
            .get(name)
            .ok_or_else(|| anyhow!("no Created event for {name}"))?;
        latencies.push((*at - *made).to_std().unwrap_or_default());
    }
    let creating = span(created.values().copied()).unwrap_or_default();
    let whole = span(created.values().chain(assigned.values()).copied()).unwrap_or_default();
    report.info(
        PART,
        format!("steady, {tasks} tasks: created through the API ({CLIENTS} clients)"),
        rate(tasks as f64 / creating.as_secs_f64()),
    );
    report.info(
        PART,
        format!("steady, {tasks} tasks: assigned per second (first creation to last assignment)"),
        rate(tasks as f64 / whole.as_secs_f64()),
    );
    let (p50, p99) = (latencies.p50(), latencies.p99());
    report.goal(
        PART,
        format!("steady, {tasks} tasks: creation -> assignment, p50"),
        latencies.summary(),
        "p50 <= 20 ms",
        p50 <= STEADY_P50_GOAL,
    );
    report.goal(
        PART,
        format!("steady, {tasks} tasks: creation -> assignment, p99"),
        format!("p99 {}", crate::report::duration(p99)),
        "p99 <= 250 ms",
        p99 <= STEADY_P99_GOAL,
    );
    let steady = Scheduler::read(&replica.addr).await?;
    steady.report(report, &format!("steady, {tasks} tasks"), tasks, whole);
    drop(replica);

    // Backlog: every task pending before the process starts.
    const BACKLOG: &str = "backlog";
    let backlog = scale.pick(BACKLOG_TASKS, QUICK_BACKLOG_TASKS);
    let store = Arc::new(PostgresStore::new(database.database(SEEDERS)));
    for n in 0..NODES {
        store
            .put(
                BACKLOG,
                &support::key("nodes", &format!("node-{n}")),
                &format!("{{\"capacity\":{NODE_CAPACITY}}}"),
                None,
            )
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    stream::iter(0..backlog)
        .map(|i| {
            let store = store.clone();
            async move {
                store
                    .put(
                        BACKLOG,
                        &support::key("tasks", &format!("task-{i:05}")),
                        "{\"status\":\"pending\",\"command\":\"make test\"}",
                        None,
                    )
                    .await
                    .map(drop)
                    .map_err(|e| anyhow!("{e}"))
            }
        })
        .buffer_unordered(SEEDERS)
        .try_collect::<Vec<()>>()
        .await?;
    drop(store);
    let replica = start(&dir, &database, BACKLOG).await?;
    let (_, assigned) = collect(&replica.addr, 0, backlog)
        .await
        .with_context(|| replica.log_tail())?;
    let draining = span(assigned.values().copied()).unwrap_or_default();
    let drained = backlog as f64 / draining.as_secs_f64();
    report.goal(
        PART,
        format!("backlog, {backlog} pending tasks: assigned per second (first to last)"),
        rate(drained),
        ">= 2,000/s",
        drained >= BACKLOG_RATE_GOAL,
    );
    let drain = Scheduler::read(&replica.addr).await?;
    drain.report(
        report,
        &format!("backlog, {backlog} pending tasks"),
        backlog,
        draining,
    );
    Ok(())
}

/// What the scheduler did, from the host's own metrics.
struct Scheduler {
    reconciles: f64,
    /// Seconds spent in reconciles, all together.
    busy: f64,
    commits_ok: f64,
    conflicts: f64,
}

/// Longest the scheduler's work queue may take to empty after the last
/// assignment (its own changes coming back), before its metrics are read
/// anyway.
const QUEUE_SETTLE: Duration = Duration::from_secs(30);

impl Scheduler {
    /// The scheduler's figures once its work queue is empty (the
    /// reconciles its own commits caused included), or after
    /// [`QUEUE_SETTLE`].
    async fn read(addr: &str) -> Result<Self> {
        let settle = tokio::time::Instant::now() + QUEUE_SETTLE;
        let response = loop {
            let response = http::get(addr, "/metrics").await?;
            let depth: f64 = response
                .body
                .lines()
                .filter(|l| {
                    l.starts_with("leasehold_work_queue_depth")
                        && l.contains("controller=\"scheduler\"")
                })
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum();
            if depth == 0.0 || tokio::time::Instant::now() > settle {
                break response;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let value = |name: &str, labels: &str| -> f64 {
            response
                .body
                .lines()
                .filter(|l| l.starts_with(name) && l.contains("controller=\"scheduler\""))
                .filter(|l| l.contains(labels))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum()
        };
        let commits =
            |result: &str| value("leasehold_commits_total", &format!("result=\"{result}\""));
        Ok(Self {
            reconciles: value("leasehold_reconcile_duration_seconds_count", ""),
            busy: value("leasehold_reconcile_duration_seconds_sum", ""),
            commits_ok: commits("ok"),
            conflicts: commits("conflict"),
        })
    }

    /// Rows for a phase of `tasks` assignments that took `phase`.
    fn report(&self, report: &mut Report, phase: &str, tasks: usize, phase_time: Duration) {
        let mean = if self.reconciles > 0.0 {
            self.busy / self.reconciles
        } else {
            0.0
        };
        report.info(
            PART,
            format!("{phase}: scheduler reconciles per assignment"),
            format!(
                "{:.3} ({:.0} reconciles, mean {})",
                self.reconciles / tasks as f64,
                self.reconciles,
                crate::report::duration(Duration::from_secs_f64(mean))
            ),
        );
        report.info(
            PART,
            format!("{phase}: where the time goes"),
            format!(
                "reconciles took {1} (from the start until the queue emptied) for a phase of {2} ({0:.0} %); commits ok {3:.0} ({4:.1} tasks each), conflict {5:.0}",
                100.0 * self.busy / phase_time.as_secs_f64().max(1e-9),
                crate::report::duration(Duration::from_secs_f64(self.busy)),
                crate::report::duration(phase_time),
                self.commits_ok,
                tasks as f64 / self.commits_ok.max(1.0),
                self.conflicts,
            ),
        );
    }
}
