//! The command: `leasehold sim FILE [--runs N] [--seed S] [--steps M]
//! [--json]`, its output and its exit codes.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use super::run::{RunReport, Simulator};
use super::world::World;
use crate::config::Environment;
use crate::limits::{
    GUEST_MEMORY_BYTES, SIM_DEFAULT_RUNS, SIM_DEFAULT_STEPS, SIM_MAX_GUESTS, SIM_MAX_RUNS,
    SIM_MAX_STEPS,
};
use crate::runtime::{EngineConfig, Runtime, RuntimeError};

/// Every run passed.
pub const EXIT_PASSED: u8 = 0;
/// A run broke a property.
pub const EXIT_FAILED: u8 = 1;
/// The world file (or a flag) is wrong: nothing was simulated.
pub const EXIT_BAD_FILE: u8 = 2;

/// `leasehold sim`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// The world file (TOML; paths in it are relative to it).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// How many runs: seeds S, S+1, ... (default 100).
    #[arg(long, value_name = "N")]
    pub runs: Option<u64>,
    /// The first run's seed (default: a random one, printed).
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Steps of each run's fault phase, and the most reconciles the world
    /// then gets to settle (default 200).
    #[arg(long, value_name = "M")]
    pub steps: Option<u64>,
    /// Print one JSON object per run instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The engine a simulation runs its component in: the host's, sized for
/// one tenure's guest and its successor, without a compile cache.
pub fn engine() -> Result<Runtime, RuntimeError> {
    Runtime::new(&EngineConfig {
        max_guests: SIM_MAX_GUESTS,
        memory_bytes: GUEST_MEMORY_BYTES,
        pooling: true,
        cache_dir: None,
    })
}

/// Run the command on a thread of its own (one thread: the simulation's
/// determinism rests on it); its exit code.
pub fn command(args: SimArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    ExitCode::from(runtime.block_on(simulate(args)))
}

fn bounded(flag: &str, value: Option<u64>, default: u64, max: u64) -> Result<u64, String> {
    let value = value.unwrap_or(default);
    if !(1..=max).contains(&value) {
        return Err(format!("{flag} {value}: it must be between 1 and {max}"));
    }
    Ok(value)
}

async fn simulate(args: SimArgs) -> u8 {
    let file = args.file.display().to_string();
    let bad = |what: String| {
        eprintln!("error: {what}");
        EXIT_BAD_FILE
    };
    let runs = match bounded("--runs", args.runs, SIM_DEFAULT_RUNS, SIM_MAX_RUNS) {
        Ok(runs) => runs,
        Err(why) => return bad(why),
    };
    let steps = match bounded("--steps", args.steps, SIM_DEFAULT_STEPS, SIM_MAX_STEPS) {
        Ok(steps) => steps,
        Err(why) => return bad(why),
    };
    let world = match World::load(&args.file, &Environment::from_process()) {
        Ok(world) => world,
        Err(e) => return bad(format!("{file}: {e}")),
    };
    if let Err(e) = world.check_steps(steps) {
        return bad(format!("{file}: {e}"));
    }
    let engine = match engine() {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    let simulator = match Simulator::new(&engine, world) {
        Ok(simulator) => simulator,
        Err(e) => return bad(format!("{file}: {e}")),
    };
    let first = args.seed.unwrap_or_else(rand::random);
    if !args.json {
        println!("leasehold sim: {file}: {runs} run(s) of {steps} steps, seeds from {first}");
    }
    for i in 0..runs {
        let seed = first.wrapping_add(i);
        let report = simulator.run(seed, steps).await;
        let replay = format!("leasehold sim {file} --seed {seed} --runs 1 --steps {steps}");
        if report.passed() {
            print_run(&report, args.json, i, runs, None, &replay);
            continue;
        }
        let shrunk = simulator.shrink(&report).await;
        print_run(&report, args.json, i, runs, Some(&shrunk), &replay);
        return EXIT_FAILED;
    }
    if !args.json {
        println!("all {runs} run(s) passed");
    }
    EXIT_PASSED
}

fn faults_json(report: &RunReport) -> serde_json::Value {
    report
        .faults
        .iter()
        .map(|f| json!({ "step": f.step, "fault": f.kind.key(), "detail": f.describe() }))
        .collect()
}

fn print_run(
    report: &RunReport,
    as_json: bool,
    i: u64,
    runs: u64,
    shrunk: Option<&RunReport>,
    replay: &str,
) {
    let mut out = std::io::stdout().lock();
    if as_json {
        let mut object = json!({
            "seed": report.seed,
            "trace": report.digest,
            "passed": report.passed(),
            "steps": report.steps,
            "reconciles": report.reconciles,
            "tenures": report.tenures,
            "faults": faults_json(report),
        });
        if let (Some(failure), Some(shrunk)) = (&report.failure, shrunk) {
            object["failure"] = json!({
                "property": failure.property,
                "step": failure.step,
                "message": failure.message,
                "trace_lines": report.lines,
                "replay": replay,
                "shrunk": {
                    "faults": faults_json(shrunk),
                    "property": shrunk.failure.as_ref().map(|f| f.property.clone()),
                    "step": shrunk.failure.as_ref().map(|f| f.step),
                    "trace": shrunk.digest,
                    "trace_lines": shrunk.lines,
                },
            });
        }
        let _ = writeln!(out, "{object}");
        return;
    }
    let _ = writeln!(out, "seed={}", report.seed);
    let _ = writeln!(out, "trace={}", report.digest);
    let summary = format!(
        "{} reconciles, {} tenure(s), {} fault(s)",
        report.reconciles,
        report.tenures,
        report.faults.len()
    );
    let Some(failure) = &report.failure else {
        let _ = writeln!(out, "run {} of {runs}: passed ({summary})", i + 1);
        return;
    };
    let _ = writeln!(
        out,
        "run {} of {runs}: FAILED property {:?} at step {} ({summary})",
        i + 1,
        failure.property,
        failure.step
    );
    let _ = writeln!(out, "  {}", failure.message);
    let _ = writeln!(out, "trace:");
    for line in &report.lines {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out, "replay: {replay}");
    if let Some(shrunk) = shrunk {
        let _ = writeln!(
            out,
            "shrunk: {} of {} fault(s) still break {:?} (step {}):",
            shrunk.faults.len(),
            report.faults.len(),
            shrunk
                .failure
                .as_ref()
                .map_or(failure.property.as_str(), |f| f.property.as_str()),
            shrunk.failure.as_ref().map_or(failure.step, |f| f.step)
        );
        for fault in &shrunk.faults {
            let _ = writeln!(out, "  step {}: {}", fault.step, fault.describe());
        }
        let _ = writeln!(out, "shrunk trace (trace={}):", shrunk.digest);
        for line in &shrunk.lines {
            let _ = writeln!(out, "  {line}");
        }
    }
}
