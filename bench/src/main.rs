//! Leasehold's benchmarks: what the system exists for, measured side by
//! side in one run and printed as one table. Not tests: a missed goal is a
//! row that says so, never a failure.
//!
//! Run everything, or name parts:
//!
//!     cargo xtask bench [PART...]
//!
//! which builds the guest components and the release `leasehold` binary,
//! then runs `cargo run --release -p leasehold-bench -- [PART...]`. See
//! `BENCHMARKS.md` at the repository root for the figures and what each
//! part measures.
//!
//! `BENCHMARKS.md` is generated: with `--write` (which `cargo xtask bench`
//! passes on a full run) the runner fills `bench/BENCHMARKS.template.md`
//! with this run's machine, goals, table and timings and writes the whole
//! file, so every figure in it comes from one run. Without `--write` a run
//! only prints.

mod abort;
mod abort_loss;
mod document;
mod embedded;
mod end_to_end;
mod fencing;
mod handover;
mod http;
mod instantiate;
mod languages;
mod lease_scale;
mod memory;
mod outbound;
mod placement;
mod process;
mod proxy;
mod renew_load;
mod report;
mod retention;
mod sharded;
mod sim;
mod store_writes;
mod support;
mod throughput;
mod tls_cost;
mod tracing_cost;
mod wasm_cost;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use report::Report;

/// How much work each part does.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    /// Few runs: checks that a part works, figures mean little.
    pub quick: bool,
}

impl Scale {
    /// `full` runs normally, `quick` with `--quick`.
    pub fn pick(self, full: usize, quick: usize) -> usize {
        if self.quick { quick } else { full }
    }
}

type PartFn = fn(Scale, &mut Report) -> anyhow::Result<()>;

/// Every part, in the order a full run takes them, with what it needs.
const PARTS: &[(&str, PartFn, &str)] = &[
    (
        "abort",
        abort::run,
        "guest abort latency on lease loss, CPU-bound and blocked guests",
    ),
    (
        "instantiate",
        instantiate::run,
        "new tenure (Store + instance), with and without pooling",
    ),
    (
        "languages",
        languages::run,
        "the scheduler in Rust, Python and JavaScript: size, compile (cold, cached), instantiate, reconcile rate, handover",
    ),
    (
        "sim",
        sim::run,
        "leasehold sim runs of the example provisioner's world in Rust, Python and JavaScript: runs per second, a 1,000-step run",
    ),
    (
        "reconcile-throughput",
        throughput::run,
        "no-op reconciles per second on one core",
    ),
    (
        "wasm-cost",
        wasm_cost::run,
        "scheduler reconcile as a component vs native (memory, PostgreSQL)",
    ),
    (
        "tracing-cost",
        tracing_cost::run,
        "scheduler reconcile throughput with traces exported (10 % sampled) vs off",
    ),
    (
        "fencing",
        fencing::run,
        "fenced vs unfenced commit throughput (PostgreSQL)",
    ),
    (
        "store-writes",
        store_writes::run,
        "fenced commits at 1, 4, 8 writers vs raw PostgreSQL without a counter row; change-feed lag (PostgreSQL)",
    ),
    (
        "tls",
        tls_cost::run,
        "API keep-alive reads over HTTPS vs plain HTTP; fenced commits with sslmode=require vs disable (PostgreSQL)",
    ),
    (
        "outbound",
        outbound::run,
        "guest HTTP call vs native, refusal after loss, abort while blocked in a call",
    ),
    (
        "lease-scale",
        lease_scale::run,
        "renewing 10..10,000 leases: round trips, latency, transactions (PostgreSQL)",
    ),
    (
        "handover",
        handover::run,
        "release, SIGKILL (session and ttl detection) and partition handover between two processes (PostgreSQL, minutes)",
    ),
    (
        "embedded",
        embedded::run,
        "the embedded backend (SQLite) next to PostgreSQL: fenced commits at 1 and 4 writers, orderly and SIGKILL handover between two processes",
    ),
    (
        "placement",
        placement::run,
        "fair placement of 12 leases over 3 processes, default settings (--quick: min_tenure 1 s): convergence after a join, a SIGKILL and the return (PostgreSQL, minutes)",
    ),
    (
        "renew-under-load",
        renew_load::run,
        "renew latency while fenced writes hold the lease row and the API is flooded (PostgreSQL)",
    ),
    (
        "end-to-end",
        end_to_end::run,
        "scheduler tasks assigned per second and creation-to-assignment latency (PostgreSQL)",
    ),
    (
        "sharded",
        sharded::run,
        "the scheduler as 1, 2 and 4 shards on 1 and 2 processes: a released backlog's drain rate (PostgreSQL)",
    ),
    (
        "retention",
        retention::run,
        "database size and transactions per second over 24 h of the end-to-end workload compressed into 10 min, retention on (PostgreSQL, minutes)",
    ),
    (
        "memory",
        memory::run,
        "host RSS with 1, 10, 100 idle controllers (PostgreSQL)",
    ),
];

fn usage() -> String {
    let mut text = String::from(
        "leasehold-bench [--quick] [--write] [--output FILE] [PART...]\n\n\
         Runs the named parts (default: all) and prints one table. --quick does few\n\
         runs per part (a smoke test; its figures mean little). --write writes the\n\
         whole report (bench/BENCHMARKS.template.md filled with this run) to\n\
         BENCHMARKS.md at the repository root, or to FILE with --output; a partial or\n\
         quick run says so in the file. Without either, nothing is written.\n\nParts:\n",
    );
    for (name, _, about) in PARTS {
        text.push_str(&format!("  {name:<22} {about}\n"));
    }
    text.push_str(
        "\nNeeds the guest components (`cargo xtask guests`), the `leasehold` binary of the\n\
         same profile for handover, embedded, placement, end-to-end, sharded, retention and\n\
         memory, and\n\
         PostgreSQL at LEASEHOLD_DATABASE_URL (default\n\
         postgres://postgres@127.0.0.1:5432/postgres) for the database parts. Each\n\
         database part creates its own database and drops it.\n",
    );
    text
}

fn main() -> ExitCode {
    let mut quick = false;
    let mut output: Option<PathBuf> = None;
    let mut chosen: Vec<&'static str> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--write" => {
                output.get_or_insert_with(document::default_output);
            }
            "--output" => match args.next() {
                Some(path) => output = Some(PathBuf::from(path)),
                None => {
                    eprintln!("leasehold-bench: --output needs a file\n\n{}", usage());
                    return ExitCode::FAILURE;
                }
            },
            "-h" | "--help" | "help" => {
                print!("{}", usage());
                return ExitCode::SUCCESS;
            }
            name => match PARTS.iter().find(|(n, _, _)| *n == name) {
                Some((n, _, _)) => chosen.push(n),
                None => {
                    eprintln!("leasehold-bench: unknown part {name:?}\n\n{}", usage());
                    return ExitCode::FAILURE;
                }
            },
        }
    }
    let every_part = chosen.is_empty() || PARTS.iter().all(|(n, _, _)| chosen.contains(n));
    if chosen.is_empty() {
        chosen = PARTS.iter().map(|(n, _, _)| *n).collect();
    }
    let scale = Scale { quick };
    let started_at = chrono::Utc::now();
    let started = Instant::now();
    let machine = document::Machine::read();
    let load_start = document::load_average();
    let commit = document::git_commit();
    let postgres = postgres_version();
    println!("machine: {}", machine.line());
    println!("load average (1 / 5 / 15 min) at the start: {load_start}");
    println!("commit: {commit}");
    match &postgres {
        Some(version) => println!("PostgreSQL: {version}"),
        None => println!("PostgreSQL: not answering"),
    }
    if quick {
        println!("--quick: few runs per part; the figures below mean little");
    }
    let mut report = Report::default();
    let mut ran = Vec::new();
    // The CPUs this run may use: a load above it means threads waited.
    let cpus = machine.available.max(1);
    for (name, run, _) in PARTS.iter().filter(|(n, _, _)| chosen.contains(n)) {
        println!("\n== {name}");
        let load_before = report::Load::read();
        if let Some(load) = &load_before {
            println!("  load average (1 / 5 / 15 min) at the part's start: {load}; {cpus} CPUs");
        }
        let part_started = Instant::now();
        let outcome = run(scale, &mut report)
            .map(|()| part_started.elapsed())
            .map_err(|e| format!("{e:#}"));
        if let Err(e) = &outcome {
            eprintln!("leasehold-bench: part {name} could not run: {e}");
        }
        if let (Some(before), Some(after)) = (load_before, report::Load::read()) {
            report.load(name, &before, &after, cpus);
        }
        report.timed(name, outcome);
        ran.push(*name);
    }
    let load_end = document::load_average();
    println!("\nload average (1 / 5 / 15 min) at the end: {load_end}\n");
    println!("{}", report.markdown());
    let run = document::Run {
        machine,
        postgres,
        started: started_at,
        commit,
        load_start,
        load_end,
        parts: ran,
        every_part,
        quick,
        elapsed: started.elapsed(),
    };
    let written = match output {
        None => true,
        Some(path) => write_report(&path, &run, &report),
    };
    if report.all_ran() && written {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Write the whole report to `path`, unless a part could not run (the
/// file must hold one run's complete figures); whether it was written.
fn write_report(path: &std::path::Path, run: &document::Run, report: &Report) -> bool {
    if !report.all_ran() {
        eprintln!(
            "leasehold-bench: not writing {}: a part could not run (see above)",
            path.display()
        );
        return false;
    }
    let text = match document::render(document::TEMPLATE, run, report) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("leasehold-bench: {e}");
            return false;
        }
    };
    match std::fs::write(path, text) {
        Ok(()) => {
            println!("wrote {}", path.display());
            true
        }
        Err(e) => {
            eprintln!("leasehold-bench: writing {}: {e}", path.display());
            false
        }
    }
}

/// The PostgreSQL server's version, if one answers.
fn postgres_version() -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let stats =
            tokio::time::timeout(std::time::Duration::from_secs(3), support::Stats::connect())
                .await
                .ok()?
                .ok()?;
        stats.server_version().await.ok()
    })
}
