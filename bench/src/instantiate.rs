//! New tenure instantiation: a fresh `Store` plus instance from the
//! compiled `InstancePre`, as every tenure (and every restart inside one)
//! gets. Goal: p99 <= 100 µs. Measured with and without the pooling
//! allocator, for the small `misbehaving` fixture and the example
//! `scheduler`, on one thread (a current-thread runtime).
//!
//! The four configurations take turns in rounds of 100 instantiations.
//! The clock covers `CompiledController::instantiate` (WASI context, host
//! state, Store, limits, instantiation); dropping the instance is timed
//! separately, since a tenure's end pays it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use leasehold_host::fence::Fence;
use leasehold_host::runtime::{CommitCounters, CompiledController};

use crate::Scale;
use crate::report::{Report, Samples};
use crate::support::{self, MemoryBackends};

const PART: &str = "instantiate";
const CLUSTER: &str = "bench";
const RUNS: usize = 5000;
const QUICK_RUNS: usize = 200;
const WARMUP: usize = 100;
/// Instantiations of one configuration before the next takes its turn.
const ROUND: usize = 100;
const GOAL: Duration = Duration::from_micros(100);

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

/// One configuration: an allocator and a component.
struct Subject {
    label: String,
    compiled: CompiledController,
    fence: Fence,
    created: Samples,
    dropped: Samples,
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let backends = MemoryBackends::new();
    let runs = scale.pick(RUNS, QUICK_RUNS);
    let mut subjects = Vec::new();
    for pooling in [true, false] {
        let runtime = support::runtime(pooling)?;
        let allocator = if runtime.pooling() {
            "pooling"
        } else if pooling {
            "on-demand (pooling unavailable here)"
        } else {
            "on-demand"
        };
        for component in ["misbehaving", "scheduler"] {
            let lease = format!("{component}-{}", if pooling { "pooled" } else { "plain" });
            subjects.push(Subject {
                label: format!("{component}, {allocator}"),
                compiled: support::compile(&runtime, component, component)?,
                fence: support::grant(backends.authority.as_ref(), CLUSTER, &lease).await?,
                created: Samples::with_capacity(runs),
                dropped: Samples::with_capacity(runs),
            });
        }
    }
    let counters = Arc::new(CommitCounters::default());
    let turns = support::rotation(subjects.len(), WARMUP, runs, ROUND);
    for (index, counted) in turns {
        let subject = &mut subjects[index];
        let revocation = subject.compiled.revocation();
        let started = Instant::now();
        let guest = support::instantiate(
            &subject.compiled,
            subject.fence.clone(),
            backends.store.clone(),
            counters.clone(),
            revocation,
        )
        .await?;
        let made = started.elapsed();
        let started = Instant::now();
        drop(guest);
        let gone = started.elapsed();
        if counted {
            subject.created.push(made);
            subject.dropped.push(gone);
        }
    }
    for subject in &mut subjects {
        let p99 = subject.created.p99();
        report.goal(
            PART,
            format!("{}: new Store + instance", subject.label),
            subject.created.summary(),
            "p99 <= 100 µs",
            p99 <= GOAL,
        );
        report.info(
            PART,
            format!("{}: drop the instance", subject.label),
            subject.dropped.summary(),
        );
    }
    Ok(())
}
