//! New tenure instantiation: a fresh `Store` plus instance from the
//! compiled `InstancePre`, as every tenure (and every restart inside one)
//! gets. Goal: p99 <= 100 µs. Measured with and without the pooling
//! allocator, for the small `misbehaving` fixture and the example
//! `scheduler`, on one thread (a current-thread runtime).
//!
//! The clock covers `CompiledController::instantiate` (WASI context, host
//! state, Store, limits, instantiation); dropping the instance is timed
//! separately, since a tenure's end pays it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use leasehold_host::runtime::CommitCounters;

use crate::Scale;
use crate::report::{Report, Samples};
use crate::support::{self, MemoryBackends};

const PART: &str = "instantiate";
const CLUSTER: &str = "bench";
const RUNS: usize = 5000;
const QUICK_RUNS: usize = 200;
const WARMUP: usize = 100;
const GOAL: Duration = Duration::from_micros(100);

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let backends = MemoryBackends::new();
    let runs = scale.pick(RUNS, QUICK_RUNS);
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
            let compiled = support::compile(&runtime, component, component)?;
            let lease = format!("{component}-{}", if pooling { "pooled" } else { "plain" });
            let fence = support::grant(backends.authority.as_ref(), CLUSTER, &lease).await?;
            let counters = Arc::new(CommitCounters::default());
            let mut created = Samples::with_capacity(runs);
            let mut dropped = Samples::with_capacity(runs);
            for i in 0..WARMUP + runs {
                let revocation = compiled.revocation();
                let started = Instant::now();
                let guest = compiled
                    .instantiate(
                        fence.clone(),
                        backends.store.clone(),
                        counters.clone(),
                        revocation,
                    )
                    .await
                    .map_err(|e| anyhow!("{e}"))?;
                let made = started.elapsed();
                let started = Instant::now();
                drop(guest);
                let gone = started.elapsed();
                if i >= WARMUP {
                    created.push(made);
                    dropped.push(gone);
                }
            }
            let p99 = created.p99();
            report.goal(
                PART,
                format!("{component}, {allocator}: new Store + instance"),
                created.summary(),
                "p99 <= 100 µs",
                p99 <= GOAL,
            );
            report.info(
                PART,
                format!("{component}, {allocator}: drop the instance"),
                dropped.summary(),
            );
        }
    }
    Ok(())
}
