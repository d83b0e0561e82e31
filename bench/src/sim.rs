//! Sim: `leasehold sim` runs of the example provisioner's world
//! (`examples/provisioner.sim.toml`, faults at their weights) with the
//! provisioner in Rust (`provisioner`), Python (`provisioner-py`) and
//! JavaScript (`provisioner-js`), on one core (a current-thread runtime, as
//! the command runs). Goal: a run of 1,000 steps of the Rust provisioner
//! takes well under a second (median <= 500 ms).
//!
//! Per language: runs of the command's default 200 steps per second
//! (consecutive seeds, timed as a batch), and runs of 1,000 steps, min /
//! median / max. The component is compiled once (from the bench's compile
//! cache) before anything is timed; each run builds its own memory
//! backends, simulated services and guest instances, as the command does.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};
use leasehold_host::config::Environment;
use leasehold_host::sim::{Simulator, World};

use crate::Scale;
use crate::report::{Report, duration, duration_spread};
use crate::support;

const PART: &str = "sim";

/// The example world every language runs.
const WORLD: &str = "provisioner.sim.toml";

/// (language, component) of each provisioner.
const LANGUAGES: [(&str, &str); 3] = [
    ("Rust", "provisioner"),
    ("Python", "provisioner-py"),
    ("JavaScript", "provisioner-js"),
];

/// Runs of 200 steps timed per language.
const SHORT_RUNS: usize = 20;
const QUICK_SHORT_RUNS: usize = 3;
/// Steps of a short run: the command's default.
const SHORT_STEPS: u64 = leasehold_host::limits::SIM_DEFAULT_STEPS;
/// Runs of 1,000 steps timed per language.
const LONG_RUNS: usize = 7;
const QUICK_LONG_RUNS: usize = 2;
const LONG_STEPS: u64 = 1_000;
/// The goal for the Rust provisioner's 1,000-step run.
const GOAL_LANGUAGE: &str = "Rust";
const GOAL_LONG_RUN: Duration = Duration::from_millis(500);

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let runtime = support::runtime_with_cache(true, Some(&support::component_cache()))?;
    for (language, component) in LANGUAGES {
        let world = world(component)?;
        let sim = Simulator::new(&runtime, world).map_err(|e| anyhow!("{component}: {e}"))?;
        // Unmeasured: the first run warms the engine's pool and caches.
        let warm = rt.block_on(sim.run(0, SHORT_STEPS));
        ensure!(
            warm.passed(),
            "{component}: seed 0 failed: {:?}",
            warm.failure
        );

        let runs = scale.pick(SHORT_RUNS, QUICK_SHORT_RUNS);
        let started = Instant::now();
        for seed in 1..=runs as u64 {
            let report = rt.block_on(sim.run(seed, SHORT_STEPS));
            ensure!(
                report.passed(),
                "{component}: seed {seed} failed: {:?}",
                report.failure
            );
        }
        let per_second = runs as f64 / started.elapsed().as_secs_f64();
        report.info(
            PART,
            format!("{language}: runs of {SHORT_STEPS} steps per second ({component})"),
            format!("{per_second:.1}/s"),
        );

        let mut long = Vec::new();
        for seed in 1..=scale.pick(LONG_RUNS, QUICK_LONG_RUNS) as u64 {
            let started = Instant::now();
            let report = rt.block_on(sim.run(1_000 + seed, LONG_STEPS));
            long.push(started.elapsed());
            ensure!(
                report.passed(),
                "{component}: seed {} failed: {:?}",
                1_000 + seed,
                report.failure
            );
        }
        let measure = format!("{language}: one run of {LONG_STEPS} steps, min / median / max");
        if language == GOAL_LANGUAGE {
            let mut sorted = long.clone();
            sorted.sort();
            let median = sorted[sorted.len() / 2];
            report.goal(
                PART,
                measure,
                duration_spread(&long),
                &format!("median <= {}", duration(GOAL_LONG_RUN)),
                median <= GOAL_LONG_RUN,
            );
        } else {
            report.info(PART, measure, duration_spread(&long));
        }
    }
    Ok(())
}

/// The example world with its provisioner replaced by `component`.
fn world(component: &str) -> Result<World> {
    let examples = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let path = examples.join(WORLD);
    let text = std::fs::read_to_string(&path)?.replace(
        "${LEASEHOLD_GUEST_DIR}/provisioner.wasm",
        &format!("${{LEASEHOLD_GUEST_DIR}}/{component}.wasm"),
    );
    let env = Environment {
        guest_dir: Some(support::guest_dir()),
        ..Environment::default()
    };
    World::parse(&text, &path, &examples, &env).map_err(|e| anyhow!("{WORLD}: {e}"))
}
