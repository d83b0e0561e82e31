//! Lease scale: one host holding 10, 100, 1,000 and 10,000 leases in
//! PostgreSQL. Reported per count:
//!
//! - round trips per renew interval: one `Authority::renew(&fences, ttl)`
//!   call covering every held fence (what a host-level batching renewer
//!   sends), against one call per lease (what a renewer per lease sends);
//! - the database transactions each costs, counted by the server
//!   (`pg_stat_database`, read after the measuring pool's sessions closed,
//!   so every transaction has been counted), and what that is per second at
//!   the default renew interval;
//! - batched renew latency, p50/p99 (goal: p99 <= 50 ms at 10,000).
//!
//! Measured twice: at the authority (the calls above, made directly), and
//! through the host's renewer (`supervisor::Renewer`, what supervisors
//! register their fences with), whose renew calls are counted by a
//! wrapper around the authority. The renewer runs at a 1 s interval here to
//! keep the part short; the round trips and transactions per interval do
//! not depend on the interval. The `memory` part reports what a whole
//! running host's upkeep costs the database.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};
use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt, stream};
use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::authority::{
    AcquireRequest, Acquired, Authority, AuthorityError, DatabaseIdentity, EndReason,
    ExpectedIdentity, LeaseRecord, Renewed, TenureRecord,
};
use leasehold_host::fence::{Fence, LeaseKey};
use leasehold_host::supervisor::Renewer;
use leasehold_host::testing::TestDatabase;
use leasehold_host::timeouts::RENEW_INTERVAL;

use crate::Scale;
use crate::report::{Report, Samples, duration, thousands};
use crate::support::{self, BENCH_LEASE_TTL, Stats};

const PART: &str = "lease-scale";
const COUNTS: &[usize] = &[10, 100, 1_000, 10_000];
const QUICK_COUNTS: &[usize] = &[10, 100];
/// Pool size of each authority: the example config's `max_connections`.
const POOL: usize = 16;
/// Acquisitions in flight while setting up.
const ACQUIRE_CONCURRENCY: usize = 16;
/// Batched renewals timed per count (fewer at 10,000, where each carries
/// 10,000 fences).
const RENEWS: usize = 50;
const RENEWS_LARGE: usize = 20;
const QUICK_RENEWS: usize = 5;
/// Rounds of one call per lease.
const SINGLE_ROUNDS: usize = 3;
const SINGLE_ROUNDS_LARGE: usize = 1;
const LARGE: usize = 10_000;
/// Renew interval of the host renewer while measured.
const RENEWER_INTERVAL: Duration = Duration::from_secs(1);
/// Rounds of the host renewer measured per count.
const RENEWER_ROUNDS: usize = 3;
const QUICK_RENEWER_ROUNDS: usize = 2;
const GOAL_P99_AT_LARGE: Duration = Duration::from_millis(50);
/// Batched renewals are "independent of the lease count" if the largest
/// count costs at most this factor of the smallest's transactions.
const MAX_GROWTH: f64 = 1.5;

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

fn authority(database: &TestDatabase) -> PostgresAuthority {
    PostgresAuthority::new(database.database(POOL), ExpectedIdentity::default())
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let database = TestDatabase::create().await;
    let name = support::database_name(database.url())?;
    let stats = Stats::connect().await?;
    let counts = if scale.quick { QUICK_COUNTS } else { COUNTS };
    let mut batched_per_interval = Vec::new();
    let mut host_per_interval: Vec<(usize, f64, f64)> = Vec::new();
    let interval = RENEW_INTERVAL.as_secs_f64();
    for &count in counts {
        let cluster = format!("scale-{count}");
        let large = count >= LARGE;

        // Set up: `count` leases held by one holder.
        let acquiring = authority(&database);
        let started = Instant::now();
        let fences: Vec<Fence> = stream::iter(0..count)
            .map(|i| {
                let (acquiring, cluster) = (&acquiring, &cluster);
                async move { support::grant(acquiring, cluster, &format!("lease-{i:05}")).await }
            })
            .buffer_unordered(ACQUIRE_CONCURRENCY)
            .try_collect()
            .await?;
        let acquired_in = started.elapsed();
        drop(acquiring);
        stats.sessions_closed(&name).await?;
        report.info(
            PART,
            format!("{} leases: acquire all (setup)", thousands(count as u64)),
            format!(
                "{} ({:.0}/s)",
                duration(acquired_in),
                count as f64 / acquired_in.as_secs_f64()
            ),
        );

        // One call covering every fence.
        let renews = scale.pick(if large { RENEWS_LARGE } else { RENEWS }, QUICK_RENEWS);
        let before = stats.transactions(&name).await?;
        let renewing = authority(&database);
        let mut latencies = Samples::with_capacity(renews);
        for _ in 0..renews {
            let started = Instant::now();
            let outcomes = renewing
                .renew(&fences, BENCH_LEASE_TTL)
                .await
                .map_err(|e| anyhow!("{e}"))?;
            latencies.push(started.elapsed());
            ensure!(
                outcomes
                    .iter()
                    .all(|o| matches!(o, Renewed::Extended { .. })),
                "a renewal was refused"
            );
        }
        drop(renewing);
        stats.sessions_closed(&name).await?;
        let batched = (stats.transactions(&name).await? - before) as f64 / renews as f64;
        batched_per_interval.push((count, batched));
        let mut statement = statement_alone(&database, &fences, renews).await?;

        // One call per lease, as many at once as the pool allows.
        let rounds = if large {
            SINGLE_ROUNDS_LARGE
        } else {
            scale.pick(SINGLE_ROUNDS, 1)
        };
        let before = stats.transactions(&name).await?;
        let renewing = authority(&database);
        let mut round_times = Samples::with_capacity(rounds);
        for _ in 0..rounds {
            let started = Instant::now();
            let outcomes: Vec<Vec<Renewed>> = stream::iter(fences.iter())
                .map(|fence| renewing.renew(std::slice::from_ref(fence), BENCH_LEASE_TTL))
                .buffer_unordered(POOL)
                .try_collect()
                .await
                .map_err(|e| anyhow!("{e}"))?;
            round_times.push(started.elapsed());
            ensure!(outcomes.len() == count);
        }
        drop(renewing);
        stats.sessions_closed(&name).await?;
        let single = (stats.transactions(&name).await? - before) as f64 / rounds as f64;

        // The host's renewer, as supervisors use it.
        let renewer_rounds = scale.pick(RENEWER_ROUNDS, QUICK_RENEWER_ROUNDS);
        let before = stats.transactions(&name).await?;
        let (calls, round_latency) = through_renewer(&database, &fences, renewer_rounds).await?;
        stats.sessions_closed(&name).await?;
        let host = (stats.transactions(&name).await? - before) as f64 / renewer_rounds as f64;
        let host_calls = calls as f64 / renewer_rounds as f64;
        host_per_interval.push((count, host_calls, host));

        let label = thousands(count as u64);
        let p99 = latencies.p99();
        let latency = latencies.summary();
        if large {
            report.goal(
                PART,
                format!("{label} leases: one renew call for all, latency"),
                latency,
                "p99 <= 50 ms",
                p99 <= GOAL_P99_AT_LARGE,
            );
        } else {
            report.info(
                PART,
                format!("{label} leases: one renew call for all, latency"),
                latency,
            );
        }
        report.info(
            PART,
            format!("{label} leases: the renew statement alone (server + transfer)"),
            statement.summary(),
        );
        report.info(
            PART,
            format!("{label} leases: round trips / transactions per interval, batched"),
            format!(
                "1 / {batched:.1} ({:.2} tx/s at {}s)",
                batched / interval,
                interval
            ),
        );
        report.info(
            PART,
            format!("{label} leases: round trips / transactions per interval, one call per lease"),
            format!(
                "{} / {} ({:.0} tx/s at {}s)",
                thousands(count as u64),
                thousands(single.round() as u64),
                single / interval,
                interval
            ),
        );
        report.info(
            PART,
            format!("{label} leases: one call per lease, wall time of a round"),
            duration(round_times.p50()),
        );
        report.info(
            PART,
            format!("{label} leases: host renewer, round trips / transactions per interval"),
            format!(
                "{host_calls:.1} / {host:.1} (round sent -> every outcome delivered: {})",
                duration(round_latency)
            ),
        );
    }
    // Each batched call is the pool's liveness check (an empty query, which
    // the server counts as a transaction) plus the renew statement, and a
    // statement preparation on each new session: a constant, whatever the
    // count. "Independent" = the largest count costs at most
    // [`MAX_GROWTH`] times what the smallest does.
    let smallest = batched_per_interval.first().map_or(0.0, |(_, t)| *t);
    let largest = batched_per_interval.last().map_or(0.0, |(_, t)| *t);
    let listed = batched_per_interval
        .iter()
        .map(|(count, t)| format!("{}: {t:.1}", thousands(*count as u64)))
        .collect::<Vec<_>>()
        .join(", ");
    report.goal(
        PART,
        "transactions per renew interval vs lease count (authority, batched)",
        listed,
        "independent of the count",
        largest <= smallest * MAX_GROWTH,
    );
    let most_calls = host_per_interval
        .iter()
        .map(|(_, calls, _)| *calls)
        .fold(0.0, f64::max);
    let listed = host_per_interval
        .iter()
        .map(|(count, calls, tx)| format!("{}: {calls:.0} / {tx:.1}", thousands(*count as u64)))
        .collect::<Vec<_>>()
        .join(", ");
    report.goal(
        PART,
        "host renewer: round trips / transactions per interval vs lease count",
        listed,
        "independent of the count",
        most_calls <= 1.0,
    );
    Ok(())
}

/// Register every fence with a fresh host renewer on its own pool, let it
/// run `rounds` intervals, and stop it (closing the pool). The number of
/// renew calls it made, and the slowest round's time from sending to the
/// last outcome delivered.
async fn through_renewer(
    database: &TestDatabase,
    fences: &[Fence],
    rounds: usize,
) -> Result<(u64, Duration)> {
    let counting = Arc::new(Counting {
        inner: authority(database),
        renews: AtomicU64::new(0),
    });
    let renewer = Renewer::start(counting.clone());
    let mut registrations: Vec<_> = fences
        .iter()
        .map(|fence| renewer.register(fence.clone(), BENCH_LEASE_TTL, RENEWER_INTERVAL))
        .collect();
    let mut slowest = Duration::ZERO;
    for _ in 0..rounds {
        let mut sent_at = None;
        for registration in &mut registrations {
            let (sent, outcome) = registration
                .next()
                .await
                .ok_or_else(|| anyhow!("the renewer stopped"))?;
            let outcome = outcome.map_err(|e| anyhow!("{e}"))?;
            ensure!(
                matches!(outcome, Renewed::Extended { .. }),
                "a renewal was refused"
            );
            sent_at.get_or_insert(sent);
        }
        if let Some(sent) = sent_at {
            slowest = slowest.max(sent.elapsed());
        }
    }
    drop(registrations);
    drop(renewer);
    let calls = counting.renews.load(Ordering::SeqCst);
    // The renewer's task holds the authority until it notices it is
    // unused; wait for that, so the pool's sessions close.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&counting) > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(counting);
    Ok((calls, slowest))
}

/// The authority with its renew calls counted.
struct Counting {
    inner: PostgresAuthority,
    renews: AtomicU64,
}

#[async_trait]
impl Authority for Counting {
    async fn identity(&self) -> Result<DatabaseIdentity, AuthorityError> {
        self.inner.identity().await
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquired, AuthorityError> {
        self.inner.acquire(request).await
    }

    async fn renew(&self, fences: &[Fence], ttl: Duration) -> Result<Vec<Renewed>, AuthorityError> {
        self.renews.fetch_add(1, Ordering::SeqCst);
        self.inner.renew(fences, ttl).await
    }

    async fn release(&self, fence: &Fence, reason: EndReason) -> Result<(), AuthorityError> {
        self.inner.release(fence, reason).await
    }

    async fn observe(&self, cluster: &str) -> Result<Vec<LeaseRecord>, AuthorityError> {
        self.inner.observe(cluster).await
    }

    async fn history_before(
        &self,
        key: &LeaseKey,
        before: Option<leasehold_host::fence::Epoch>,
        limit: usize,
    ) -> Result<Vec<TenureRecord>, AuthorityError> {
        self.inner.history_before(key, before, limit).await
    }

    async fn record_outbound(
        &self,
        fence: &Fence,
        requests: u64,
        last_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<(), AuthorityError> {
        self.inner.record_outbound(fence, requests, last_at).await
    }

    fn released(&self, cluster: &str) -> tokio::sync::watch::Receiver<u64> {
        self.inner.released(cluster)
    }
}

/// The authority's renew statement (a copy of its SQL), run from a plain
/// session with the same arrays: how much of a batched renewal is the
/// database's work and the transfer, as opposed to the host's handling of
/// the answer.
async fn statement_alone(
    database: &TestDatabase,
    fences: &[Fence],
    runs: usize,
) -> Result<Samples> {
    const RENEW_SQL: &str = "
    UPDATE leasehold_leases l
       SET renewed_at = clock_timestamp(),
           expires_at = clock_timestamp() + $5::bigint * interval '1 microsecond'
      FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS f(cluster, name, epoch, holder)
     WHERE l.cluster = f.cluster AND l.name = f.name AND l.epoch = f.epoch AND l.holder = f.holder
       AND NOT l.released AND l.expires_at > clock_timestamp()
    RETURNING l.cluster, l.name, l.epoch, l.holder, l.expires_at";
    let (client, connection) =
        tokio_postgres::connect(database.url(), tokio_postgres::NoTls).await?;
    let connection = tokio::spawn(connection);
    let clusters: Vec<&str> = fences.iter().map(|f| f.key.cluster.as_str()).collect();
    let names: Vec<&str> = fences.iter().map(|f| f.key.name.as_str()).collect();
    let epochs: Vec<i64> = fences.iter().map(|f| f.epoch.0 as i64).collect();
    let holders: Vec<&str> = fences.iter().map(|f| f.holder.as_str()).collect();
    let micros = BENCH_LEASE_TTL.as_micros() as i64;
    let statement = client.prepare(RENEW_SQL).await?;
    let mut samples = Samples::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let rows = client
            .query(&statement, &[&clusters, &names, &epochs, &holders, &micros])
            .await?;
        samples.push(started.elapsed());
        ensure!(
            rows.len() == fences.len(),
            "the statement renewed {} of {}",
            rows.len(),
            fences.len()
        );
    }
    drop(client);
    let _ = connection.await;
    Ok(samples)
}
