//! Retention: database size and transactions per second while one
//! `leasehold` process runs the end-to-end workload for a compressed day
//! with retention on.
//!
//! The workload is the end-to-end one made to last: 8 API clients create
//! pending tasks at a steady offered rate ([`RATE`]), the scheduler assigns
//! them, and a client deletes each task as soon as its `Assigned` event
//! appears (the task's finalizer holds it until the scheduler has freed its
//! slot). Objects therefore stay few; what grows without retention is the
//! event log, the change stream and, across handovers, tenure history.
//!
//! **Compressing time.** 24 hours run in [`RUN`] (10 minutes: 144 times
//! faster). Retention is compressed with it as far as the host allows:
//! `[store] event_retention` is 60 s, its minimum, which stands for 2.4 h of
//! the compressed day; the run passes it ten times, so the trimmer (a round
//! every minute, in bounded batches) reaches its steady state early. The
//! default of 7 days would be 70 minutes here, longer than the run: the log
//! would only grow, as it does over a real host's first week. Tenure
//! history is kept to the newest 10 per lease; this run has one tenure per
//! lease, so it does not grow either way.
//!
//! **Samples** every [`SAMPLE_EVERY`]: `pg_database_size`, the store's
//! tables (with their indexes and TOAST), the rows of the event log and
//! of the objects (a growing count is a scheduler falling behind: pending
//! tasks pile up), the dead rows `VACUUM` has yet to reclaim (the server's
//! statistics), and the database's committed plus rolled-back transactions
//! (`pg_stat_database`, which sessions report up to a few seconds late).
//! Reported: the size at the start, middle and end of the run, the largest,
//! each table at the end, transactions per second per third of the run, and
//! the goal: the last third's growth of the database size is at most
//! [`GROWTH_GOAL_PERCENT`] (the size has plateaued).
//!
//! `--quick` runs 3 minutes: retention passes only about twice, so the
//! size may not have settled; its figures say little.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::{StreamExt, stream};
use leasehold_host::testing::TestDatabase;
use tokio::sync::Semaphore;

use crate::Scale;
use crate::http;
use crate::report::{Report, mib, rate};
use crate::support::{self, Stats, TempDir};

const PART: &str = "retention";
/// The compressed day.
const RUN: Duration = Duration::from_secs(600);
const QUICK_RUN: Duration = Duration::from_secs(180);
/// How much faster than real time the day runs.
const COMPRESSION: u32 = 144;
/// `[store] event_retention`: the host's minimum.
const EVENT_RETENTION: &str = "60s";
/// `[store] tenure_retention`.
const TENURE_RETENTION: u32 = 10;
/// Tasks created per second, offered.
const RATE: f64 = 100.0;
/// Concurrent API clients creating, and deleting, tasks.
const CLIENTS: usize = 8;
const NODES: usize = 8;
/// Slots per node: the workload deletes each task once assigned, so a few
/// seconds' worth of tasks is plenty.
const NODE_CAPACITY: usize = 1_000;
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
const QUICK_SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The goal: the database grows by at most this much over the run's last
/// third.
const GROWTH_GOAL_PERCENT: f64 = 10.0;
/// Events per page the deleting client reads.
const EVENT_PAGE: usize = 500;

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

/// One sample of the database.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    database: u64,
    objects: u64,
    events: u64,
    changes: u64,
    tenures: u64,
    event_rows: u64,
    /// Objects kept: pending tasks waiting for the scheduler, mostly.
    object_rows: u64,
    /// Dead rows in the store's tables, by the server's statistics: what
    /// `VACUUM` has yet to reclaim.
    dead_rows: u64,
    transactions: i64,
}

const SAMPLE_SQL: &str = "SELECT pg_database_size(current_database())::int8,
        pg_total_relation_size('leasehold_objects')::int8,
        pg_total_relation_size('leasehold_events')::int8,
        pg_total_relation_size('leasehold_changes')::int8,
        pg_total_relation_size('leasehold_tenures')::int8,
        (SELECT count(*) FROM leasehold_events)::int8,
        (SELECT count(*) FROM leasehold_objects)::int8,
        (SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables
          WHERE relname LIKE 'leasehold\\_%')::int8";

/// What the workload's clients did.
#[derive(Debug, Default)]
struct Counts {
    created: AtomicU64,
    create_failures: AtomicU64,
    deleted: AtomicU64,
    delete_failures: AtomicU64,
    assigned: AtomicU64,
    released: AtomicU64,
    /// Times the deleting client's cursor fell behind the retention floor
    /// (410) and skipped ahead.
    too_old: AtomicU64,
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let run = if scale.quick { QUICK_RUN } else { RUN };
    let sample_every = if scale.quick {
        QUICK_SAMPLE_EVERY
    } else {
        SAMPLE_EVERY
    };
    let database = TestDatabase::create().await;
    let name = support::database_name(database.url())?;
    let dir = TempDir::new("retention")?;
    let extra = format!(
        "[store]\nevent_retention = \"{EVENT_RETENTION}\"\ntenure_retention = {TENURE_RETENTION}\n"
    );
    let replica = crate::end_to_end::start_with(&dir, &database, "retention", &extra).await?;
    let addr = Arc::new(replica.addr.clone());
    for n in 0..NODES {
        let r = http::put(
            &addr,
            &format!("/v1/objects/nodes/node-{n}"),
            &format!("{{\"capacity\":{NODE_CAPACITY}}}"),
        )
        .await?;
        if !(200..300).contains(&r.status) {
            bail!("creating a node: {} {}", r.status, r.body);
        }
    }
    let (sampler, connection) = tokio_postgres::connect(database.url(), tokio_postgres::NoTls)
        .await
        .context("connecting to the bench database for sizes")?;
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let stats = Stats::connect().await?;

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let creator = tokio::spawn(create(addr.clone(), counts.clone(), stop.clone(), started));
    let deleter = tokio::spawn(delete(addr.clone(), counts.clone(), stop.clone()));

    let mut samples = Vec::new();
    loop {
        let row = sampler.query_one(SAMPLE_SQL, &[]).await?;
        let size = |i: usize| row.get::<_, i64>(i).max(0) as u64;
        let sample = Sample {
            at: started.elapsed(),
            database: size(0),
            objects: size(1),
            events: size(2),
            changes: size(3),
            tenures: size(4),
            event_rows: size(5),
            object_rows: size(6),
            dead_rows: size(7),
            transactions: stats.transactions(&name).await?,
        };
        println!(
            "  {:>5.0} s: database {}, events {} ({} rows), changes {}, objects {} ({} rows); {} dead rows; {} tasks created, {} deleted",
            sample.at.as_secs_f64(),
            mib(sample.database),
            mib(sample.events),
            sample.event_rows,
            mib(sample.changes),
            mib(sample.objects),
            sample.object_rows,
            sample.dead_rows,
            counts.created.load(Ordering::Relaxed),
            counts.deleted.load(Ordering::Relaxed),
        );
        samples.push(sample);
        if started.elapsed() >= run {
            break;
        }
        tokio::time::sleep(sample_every.min(run.saturating_sub(started.elapsed()))).await;
    }
    stop.store(true, Ordering::Relaxed);
    creator.await??;
    deleter.await??;
    if replica
        .controller_state("scheduler")
        .await
        .is_none_or(|s| s != "leading")
    {
        bail!(
            "the scheduler stopped leading during the run:\n{}",
            replica.log_tail()
        );
    }
    drop(replica);
    connection.abort();

    let ran = samples.last().map_or(run, |s| s.at);
    let created = counts.created.load(Ordering::Relaxed);
    report.info(
        PART,
        format!(
            "workload: {} compressed into {} (x{COMPRESSION}), event_retention {EVENT_RETENTION}",
            "24 h",
            crate::report::duration(run)
        ),
        format!(
            "{} tasks created ({} offered, {} failed), {} assigned, {} deleted, {} freed by the scheduler; reader behind the floor {} time(s)",
            created,
            rate(RATE),
            counts.create_failures.load(Ordering::Relaxed),
            counts.assigned.load(Ordering::Relaxed),
            counts.deleted.load(Ordering::Relaxed),
            counts.released.load(Ordering::Relaxed),
            counts.too_old.load(Ordering::Relaxed),
        ),
    );
    let first = samples.first().copied().context("no sample")?;
    let last = samples.last().copied().context("no sample")?;
    let at = |fraction: f64| -> Sample {
        let target = ran.mul_f64(fraction);
        samples
            .iter()
            .copied()
            .min_by_key(|s| s.at.abs_diff(target))
            .unwrap_or(last)
    };
    let (middle, two_thirds) = (at(0.5), at(2.0 / 3.0));
    let largest = samples.iter().map(|s| s.database).max().unwrap_or(0);
    report.info(
        PART,
        "database size: start / middle / end (largest)",
        format!(
            "{} / {} / {} ({})",
            mib(first.database),
            mib(middle.database),
            mib(last.database),
            mib(largest)
        ),
    );
    report.info(
        PART,
        "at the end: events / changes / objects / tenures (tables with indexes); dead rows",
        format!(
            "{} ({} rows kept) / {} / {} ({} rows) / {}; {} dead rows",
            mib(last.events),
            last.event_rows,
            mib(last.changes),
            mib(last.objects),
            last.object_rows,
            mib(last.tenures),
            last.dead_rows
        ),
    );
    let third = |from: Sample, to: Sample| -> String {
        let seconds = (to.at - from.at).as_secs_f64().max(1e-9);
        rate((to.transactions - from.transactions) as f64 / seconds)
    };
    report.info(
        PART,
        "transactions per second: first / second / last third",
        format!(
            "{} / {} / {}",
            third(first, at(1.0 / 3.0)),
            third(at(1.0 / 3.0), two_thirds),
            third(two_thirds, last)
        ),
    );
    let growth = |from: Sample, to: Sample| -> f64 {
        100.0 * (to.database as f64 - from.database as f64) / (from.database as f64).max(1.0)
    };
    let early = growth(first, at(1.0 / 3.0));
    let late = growth(two_thirds, last);
    report.goal(
        PART,
        "size bounded: database growth over the last third",
        format!(
            "{late:+.1} % ({} -> {}); first third {early:+.1} %",
            mib(two_thirds.database),
            mib(last.database)
        ),
        "<= 10 %",
        late <= GROWTH_GOAL_PERCENT,
    );
    Ok(())
}

/// Create pending tasks at [`RATE`] per second with up to [`CLIENTS`]
/// requests in flight, until `stop`.
async fn create(
    addr: Arc<String>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    started: Instant,
) -> Result<()> {
    let clients = Arc::new(Semaphore::new(CLIENTS));
    let mut next = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let due = (started.elapsed().as_secs_f64() * RATE) as u64;
        while next < due && !stop.load(Ordering::Relaxed) {
            let permit = clients.clone().acquire_owned().await?;
            let (addr, counts) = (addr.clone(), counts.clone());
            let name = format!("task-{next:07}");
            next += 1;
            tokio::spawn(async move {
                let created = http::put(
                    &addr,
                    &format!("/v1/objects/tasks/{name}"),
                    "{\"status\":\"pending\",\"command\":\"make test\"}",
                )
                .await
                .is_ok_and(|r| (200..300).contains(&r.status));
                let counter = if created {
                    &counts.created
                } else {
                    &counts.create_failures
                };
                counter.fetch_add(1, Ordering::Relaxed);
                drop(permit);
            });
        }
    }
    // Let the requests in flight finish.
    let _ = clients.acquire_many(CLIENTS as u32).await?;
    Ok(())
}

/// Follow the event log and delete each task once its `Assigned` event
/// appears, until `stop`.
async fn delete(addr: Arc<String>, counts: Arc<Counts>, stop: Arc<AtomicBool>) -> Result<()> {
    let mut after = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let response = http::get(
            &addr,
            &format!("/v1/events?after={after}&limit={EVENT_PAGE}&wait=1s"),
        )
        .await?;
        let json = response.json()?;
        if response.status == 410 {
            // Trimmed past our cursor: go on from the oldest kept.
            counts.too_old.fetch_add(1, Ordering::Relaxed);
            after = json["oldest_kept"]
                .as_u64()
                .context("a 410 names the oldest kept position")?
                .saturating_sub(1);
            continue;
        }
        if response.status != 200 {
            bail!("GET /v1/events: {} {}", response.status, response.body);
        }
        let mut assigned = Vec::new();
        for event in json["items"].as_array().into_iter().flatten() {
            after = after.max(event["seq"].as_u64().context("event without seq")?);
            if event["kind"] != "tasks" {
                continue;
            }
            match event["reason"].as_str() {
                Some("Assigned") => {
                    counts.assigned.fetch_add(1, Ordering::Relaxed);
                    assigned.push(event["name"].as_str().unwrap_or_default().to_string());
                }
                Some("Released") => {
                    counts.released.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        stream::iter(assigned)
            .for_each_concurrent(CLIENTS, |name| {
                let (addr, counts) = (addr.clone(), counts.clone());
                async move {
                    let deleted = http::delete(&addr, &format!("/v1/objects/tasks/{name}"))
                        .await
                        .is_ok_and(|r| (200..300).contains(&r.status));
                    let counter = if deleted {
                        &counts.deleted
                    } else {
                        &counts.delete_failures
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
            .await;
    }
    Ok(())
}
