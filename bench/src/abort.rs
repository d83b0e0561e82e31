//! Guest abort latency: from the loss signal (`Revocation::revoke`) to the
//! guest's `Store` dropped, for a CPU-bound guest and for a guest blocked
//! in a host call. Goal: p99 <= 1 ms for both.
//!
//! Each run instantiates the `misbehaving` fixture, starts a task that owns
//! the instance and calls `reconcile("cmd", "spin" | "block")`, waits until
//! the guest is spinning (it reads once right before its loop, then gets a
//! few epoch ticks) or blocked (its commit is held by [`HeldStore`]), then
//! revokes. The clock stops when the task's `JoinHandle` completes: the
//! task returns only after it dropped the instance, Store included. The
//! runtime is multi-threaded like the host's, so the revoking task and the
//! guest run on different threads. The two cases alternate run by run.
//!
//! That figure starts at the revoke; [`crate::abort_loss`] adds the same
//! two guests under a real supervisor, timed from the moment the loss is
//! detected (the renew deadline passed, or a renewal was refused) to the
//! guest stopped as the supervisor's status reports it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use leasehold_host::runtime::{CommitCounters, GuestError};

use crate::Scale;
use crate::report::{Report, Samples, duration};
use crate::support::{self, HeldStore, MemoryBackends};

const PART: &str = "abort";
const CLUSTER: &str = "bench";
/// Runs per case (after [`WARMUP`]).
const RUNS: usize = 1000;
const QUICK_RUNS: usize = 50;
const WARMUP: usize = 20;
/// How long a spinning guest spins before the loss: several epoch ticks, so
/// the guest is deep in its loop, yielding at ticks as it does in service.
const SPIN_BEFORE_LOSS: Duration = Duration::from_millis(3);
/// Goal for p99.
const GOAL: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy)]
enum Case {
    /// CPU-bound: an infinite loop that never calls the host.
    Spin,
    /// Blocked inside the `commit` host call.
    Block,
}

impl Case {
    fn command(self) -> &'static str {
        match self {
            Case::Spin => "spin",
            Case::Block => "block",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Case::Spin => "CPU-bound guest (infinite loop)",
            Case::Block => "guest blocked in a host call (commit)",
        }
    }
}

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let runtime = support::runtime(true)?;
    let compiled = support::compile(&runtime, "misbehaving", "misbehaving")?;
    let backends = MemoryBackends::new();
    let fence = support::grant(backends.authority.as_ref(), CLUSTER, "misbehaving").await?;
    let (store, mut reports) = HeldStore::new(backends.store.clone());
    store.hold(true);
    let counters = Arc::new(CommitCounters::default());
    let runs = scale.pick(RUNS, QUICK_RUNS);
    const CASES: [Case; 2] = [Case::Spin, Case::Block];
    // Per case: the whole, and revoke -> guest call returned; -> instance
    // dropped; -> the revoking task saw the JoinHandle complete.
    let mut totals: [Samples; 2] = Default::default();
    let mut phases: [[Samples; 3]; 2] = Default::default();
    // The cases alternate, so drift in the machine's load hits them alike.
    for i in 0..WARMUP + runs {
        for (c, case) in CASES.into_iter().enumerate() {
            let revocation = compiled.revocation();
            let mut guest = compiled
                .instantiate(
                    fence.clone(),
                    store.clone(),
                    counters.clone(),
                    revocation.clone(),
                )
                .await
                .map_err(|e| anyhow!("{e}"))?;
            let command = case.command();
            let task = tokio::spawn(async move {
                let result = guest.reconcile("cmd", command).await;
                let stopped = Instant::now();
                // The instance (and its Store) is gone before the task ends.
                drop(guest);
                (result, stopped, Instant::now())
            });
            match case {
                Case::Spin => {
                    reports.gets.recv().await;
                    tokio::time::sleep(SPIN_BEFORE_LOSS).await;
                }
                Case::Block => {
                    reports.held.recv().await;
                }
            }
            let started = Instant::now();
            revocation.revoke();
            let (result, stopped, dropped) = task.await?;
            let joined = Instant::now();
            if !matches!(result, Err(GuestError::Aborted { .. })) {
                bail!("{} was not aborted: {result:?}", case.label());
            }
            if i >= WARMUP {
                totals[c].push(joined - started);
                phases[c][0].push(stopped.saturating_duration_since(started));
                phases[c][1].push(dropped - stopped);
                phases[c][2].push(joined.saturating_duration_since(dropped));
            }
        }
    }
    for (c, case) in CASES.into_iter().enumerate() {
        let samples = &mut totals[c];
        let p99 = samples.p99();
        let max = samples.max();
        report.goal(
            PART,
            format!("{}: revoke -> Store dropped", case.label()),
            samples.summary(),
            "p99 <= 1 ms",
            p99 <= GOAL,
        );
        report.info(PART, format!("{}: worst run", case.label()), duration(max));
        let [stop, drop_, join] = &mut phases[c];
        report.info(
            PART,
            format!("{}: where the time goes (p50 / p99)", case.label()),
            format!(
                "guest stopped {} / {}, Store dropped {} / {}, join seen {} / {}",
                duration(stop.p50()),
                duration(stop.p99()),
                duration(drop_.p50()),
                duration(drop_.p99()),
                duration(join.p50()),
                duration(join.p99()),
            ),
        );
    }
    crate::abort_loss::measure(scale, report, &compiled).await
}
