//! No-op reconcile throughput on one core: one guest instance of the
//! `misbehaving` fixture answering `reconcile("cmd", "noop")` (it only
//! bumps a counter and returns `done`), called back to back from a
//! current-thread runtime. Goal: >= 20,000 reconciles/s.
//!
//! What a call costs here is the host's per-call path: the revocation and
//! deadline guards, the async call into the component, lifting and lowering
//! the two strings and the result.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, anyhow, bail};
use leasehold_host::runtime::{GuestInstance, Reconciled};

use crate::Scale;
use crate::report::{Report, Samples, Spread, median, rate};
use crate::support::{self, MemoryBackends};

const PART: &str = "reconcile-throughput";
const CLUSTER: &str = "bench";
/// Batches measured; the figure is the median batch.
const BATCHES: usize = 15;
const QUICK_BATCHES: usize = 3;
/// Reconciles per batch.
const BATCH: usize = 20_000;
const QUICK_BATCH: usize = 2_000;
const GOAL_PER_SECOND: f64 = 20_000.0;

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

async fn reconcile(guest: &mut GuestInstance) -> Result<()> {
    match guest
        .reconcile("cmd", "noop")
        .await
        .map_err(|e| anyhow!("{e}"))?
    {
        Reconciled::Done => Ok(()),
        Reconciled::Failed { message, .. } if message.contains("unknown command") => bail!(
            "the misbehaving fixture has no `noop` command: rebuild the guests \
             (`cargo xtask guests`)"
        ),
        other => bail!("unexpected reply to noop: {other:?}"),
    }
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let runtime = support::runtime(true)?;
    let compiled = support::compile(&runtime, "misbehaving", "misbehaving")?;
    let backends = MemoryBackends::new();
    let fence = support::grant(backends.authority.as_ref(), CLUSTER, "misbehaving").await?;
    let mut guest = support::instantiate(
        &compiled,
        fence,
        backends.store.clone(),
        Arc::default(),
        compiled.revocation(),
    )
    .await?;
    let batch = scale.pick(BATCH, QUICK_BATCH);
    // Warm-up: the guest's memory, the host's caches.
    for _ in 0..batch / 10 {
        reconcile(&mut guest).await?;
    }
    let mut rates = Vec::new();
    for _ in 0..scale.pick(BATCHES, QUICK_BATCHES) {
        let started = Instant::now();
        for _ in 0..batch {
            reconcile(&mut guest).await?;
        }
        rates.push(batch as f64 / started.elapsed().as_secs_f64());
    }
    let mut latencies = Samples::with_capacity(batch);
    for _ in 0..batch {
        let started = Instant::now();
        reconcile(&mut guest).await?;
        latencies.push(started.elapsed());
    }
    let typical = median(&rates);
    report.goal(
        PART,
        format!(
            "no-op reconciles per second, one core (median of {} batches of {batch})",
            rates.len()
        ),
        rate(typical),
        ">= 20,000/s",
        typical >= GOAL_PER_SECOND,
    );
    if let Some(spread) = Spread::of(&rates) {
        report.info(PART, "batches, reconciles per second", spread.with(rate));
    }
    report.info(PART, "one no-op reconcile", latencies.summary());
    Ok(())
}
