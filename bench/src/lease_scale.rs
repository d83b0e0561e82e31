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
//! Measured at the authority, not through supervisors: the host-level
//! batching lives in the supervisor's renewer, which sends exactly one such
//! call per interval; the `memory` part reports what a running host's
//! renewals cost the database.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};
use futures::{StreamExt, TryStreamExt, stream};
use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::authority::{Authority, ExpectedIdentity, Renewed};
use leasehold_host::fence::Fence;
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
const GOAL_P99_AT_LARGE: Duration = Duration::from_millis(50);
/// Batched renewals are "independent of the lease count" if every count
/// costs at most this many transactions per interval.
const MAX_BATCHED_TRANSACTIONS: f64 = 1.5;

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
    }
    let worst = batched_per_interval
        .iter()
        .map(|(_, t)| *t)
        .fold(0.0, f64::max);
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
        worst <= MAX_BATCHED_TRANSACTIONS,
    );
    Ok(())
}
