//! Running the workspace's test binaries in parallel lanes.
//!
//! `cargo test` runs one test binary after another. Most of this
//! workspace's test time is spent waiting (lease ttls running out, handovers,
//! PostgreSQL clusters starting, fault schedules playing out) rather than
//! computing, so one binary at a time leaves the machine idle for most of
//! the run. Here the binaries `cargo test --no-run` built are started the
//! way cargo starts them (in their package's folder, with its `CARGO_*`
//! variables), up to [`lanes`] at once, the longest first; each binary's
//! output is printed whole when it ends, every binary runs even after one
//! failed, and a summary names every failure with the command that reruns
//! it. Doc tests still run through `cargo test --doc` afterwards.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Test binaries known to run long, longest first (their target names):
/// started before the others so that no long one starts last. Measured
/// on two cores; a binary not listed starts after these, in build order,
/// and the ones in [`ALONE`] run last of all.
const LONG_FIRST: &[&str] = &[
    "failover",
    // Builds a project in each language (a first cargo build of the SDK's
    // dependencies is minutes) and runs two provisioners end to end.
    "authoring",
    // Installs Patroni and etcd from Debian's packages on first use, then
    // runs two failovers of a cluster of its own.
    "patroni",
    // Silent partitions and terminated sessions, one at a time.
    "session_safety",
    "leasehold_host",
    "pgbouncer",
    "python_guest",
    "placement",
    "schema_versions",
    "js_guest",
    "service",
    "crash_handover",
    "outbound_e2e",
    "server_restart",
    "supervisor",
    "starvation",
    "related_watches",
    "telemetry",
    "guest_toolchains",
];

/// Test binaries that run alone, after every other: nothing else runs
/// beside them. The fault suite's random schedules and its control run on
/// the deliberately unfenced build (which must still catch the overlapping
/// writers the schedules provoke) keep the timing they were tuned with,
/// the machine to themselves.
const ALONE: &[&str] = &["faults"];

/// One test binary as `cargo test --no-run` reported it.
#[derive(Debug, Clone)]
pub struct TestBinary {
    /// The package it belongs to.
    pub package: String,
    /// The target's name (`faults`, or the library's name for unit tests).
    pub target: String,
    /// The target's kind (`lib`, `bin`, `test`, `example`).
    pub kind: String,
    /// The built executable.
    pub executable: PathBuf,
    /// The package's folder: cargo runs its tests there.
    pub package_dir: PathBuf,
}

impl TestBinary {
    /// The `cargo test` arguments that run this binary alone.
    fn rerun(&self) -> String {
        let which = match self.kind.as_str() {
            "lib" => "--lib".to_string(),
            "bin" => format!("--bin {}", self.target),
            "example" => format!("--example {}", self.target),
            "bench" => format!("--bench {}", self.target),
            _ => format!("--test {}", self.target),
        };
        format!("cargo test -p {} {which}", self.package)
    }

    fn label(&self) -> String {
        format!("{} ({} {})", self.target, self.package, self.kind)
    }

    fn alone(&self) -> bool {
        ALONE.contains(&self.target.as_str())
    }
}

/// Parse the JSON messages of `cargo test --no-run --message-format=json`
/// into the test binaries it built, in build order.
pub fn parse_build_messages(output: &str) -> Result<Vec<TestBinary>, String> {
    let mut found = Vec::new();
    for line in output.lines().filter(|l| l.starts_with('{')) {
        let message: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("cargo printed a line that is not JSON ({e}): {line}"))?;
        if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
            continue;
        }
        let Some(executable) = message["executable"].as_str() else {
            continue;
        };
        let text = |value: &serde_json::Value, what: &str| {
            value
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("cargo's artifact message has no {what}: {line}"))
        };
        let manifest = PathBuf::from(text(&message["manifest_path"], "manifest_path")?);
        let package_dir = manifest
            .parent()
            .ok_or_else(|| format!("manifest path without a folder: {}", manifest.display()))?
            .to_path_buf();
        let package = package_name(&message["package_id"], &package_dir)?;
        let kind = message["target"]["kind"]
            .as_array()
            .and_then(|kinds| kinds.first())
            .and_then(|k| k.as_str())
            .unwrap_or("test")
            .to_string();
        found.push(TestBinary {
            package,
            target: text(&message["target"]["name"], "target name")?,
            kind,
            executable: PathBuf::from(executable),
            package_dir,
        });
    }
    Ok(found)
}

/// The package's name from cargo's package id: `path+file:///…/dir#name@0.1.0`
/// or `path+file:///…/name#0.1.0` (when the name is the folder's).
fn package_name(id: &serde_json::Value, dir: &std::path::Path) -> Result<String, String> {
    let id = id
        .as_str()
        .ok_or_else(|| "cargo's artifact message has no package_id".to_string())?;
    let fragment = id.rsplit_once('#').map(|(_, f)| f).unwrap_or(id);
    match fragment.split_once('@') {
        Some((name, _)) => Ok(name.to_string()),
        None => dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| format!("cannot tell the package of {id}")),
    }
}

/// Order the binaries: the ones known to be long first, in [`LONG_FIRST`]
/// order, then the rest as built, then the ones that run [`ALONE`].
pub fn order(mut binaries: Vec<TestBinary>) -> Vec<TestBinary> {
    let rank = |b: &TestBinary| {
        let long = LONG_FIRST
            .iter()
            .position(|name| *name == b.target)
            .unwrap_or(LONG_FIRST.len());
        (b.alone(), long)
    };
    binaries.sort_by_key(rank);
    binaries
}

/// How many binaries run at once: `LEASEHOLD_TEST_LANES`, or the number of
/// cores (at least one).
pub fn lanes() -> Result<usize, String> {
    match std::env::var("LEASEHOLD_TEST_LANES") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!(
                "LEASEHOLD_TEST_LANES must be a whole number of at least 1, not {v:?}"
            )),
        },
        Err(_) => Ok(std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)),
    }
}

/// What one binary's run came to.
struct Outcome {
    binary: TestBinary,
    passed: bool,
    took: Duration,
}

/// Run `binaries` up to `lanes` at a time, `env` added to each; passes
/// `args` (e.g. a test name filter) to every binary. Returns an error
/// naming every binary that failed.
pub fn run(
    binaries: Vec<TestBinary>,
    lanes: usize,
    env: &[(String, OsString)],
    args: &[String],
) -> Result<(), String> {
    let started = Instant::now();
    let total = binaries.len();
    println!("xtask: running {total} test binaries, up to {lanes} at once");
    let lanes_state = Arc::new(Lanes::new(binaries));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let printing = Arc::new(Mutex::new(()));
    let workers: Vec<_> = (0..lanes)
        .map(|_| {
            let lanes_state = Arc::clone(&lanes_state);
            let outcomes = Arc::clone(&outcomes);
            let printing = Arc::clone(&printing);
            let env = env.to_vec();
            let args = args.to_vec();
            std::thread::spawn(move || {
                while let Some(binary) = lanes_state.next() {
                    let outcome = run_one(binary, &env, &args, &printing);
                    lanes_state.ended(outcome.binary.alone());
                    outcomes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(outcome);
                }
            })
        })
        .collect();
    for worker in workers {
        worker
            .join()
            .map_err(|_| "a test lane panicked".to_string())?;
    }
    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap_or_else(PoisonError::into_inner));
    let mut by_time: Vec<&Outcome> = outcomes.iter().collect();
    by_time.sort_by_key(|o| std::cmp::Reverse(o.took));
    println!(
        "xtask: {total} test binaries in {:.0} s; the longest:",
        started.elapsed().as_secs_f64()
    );
    for o in by_time.iter().take(12) {
        println!(
            "xtask:   {:>6.1} s  {}",
            o.took.as_secs_f64(),
            o.binary.label()
        );
    }
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.passed).collect();
    if failed.is_empty() {
        return Ok(());
    }
    let mut message = format!("{} of {total} test binaries failed:", failed.len());
    for o in failed {
        message.push_str(&format!(
            "\n  {} (rerun: {})",
            o.binary.label(),
            o.binary.rerun()
        ));
    }
    Err(message)
}

/// The binaries not started yet and what runs now, shared by the lanes.
struct Lanes {
    schedule: Mutex<Schedule>,
    /// Signalled whenever a binary ends.
    ended: Condvar,
}

struct Schedule {
    waiting: VecDeque<TestBinary>,
    running: usize,
    alone_running: bool,
}

impl Lanes {
    fn new(binaries: Vec<TestBinary>) -> Self {
        Self {
            schedule: Mutex::new(Schedule {
                waiting: binaries.into_iter().collect(),
                running: 0,
                alone_running: false,
            }),
            ended: Condvar::new(),
        }
    }

    /// The next binary a lane may start, waiting while the one at the
    /// head must run alone and others still run, or while one runs alone;
    /// `None` when nothing is left.
    fn next(&self) -> Option<TestBinary> {
        let mut q = self.schedule.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let head_alone = q.waiting.front()?.alone();
            if !q.alone_running && (!head_alone || q.running == 0) {
                let binary = q.waiting.pop_front()?;
                q.running += 1;
                q.alone_running = head_alone;
                return Some(binary);
            }
            q = self.ended.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// A binary [`Lanes::next`] handed out ended.
    fn ended(&self, alone: bool) {
        let mut q = self.schedule.lock().unwrap_or_else(PoisonError::into_inner);
        q.running -= 1;
        if alone {
            q.alone_running = false;
        }
        drop(q);
        self.ended.notify_all();
    }
}

fn run_one(
    binary: TestBinary,
    env: &[(String, OsString)],
    args: &[String],
    printing: &Mutex<()>,
) -> Outcome {
    let started = Instant::now();
    let mut cmd = Command::new(&binary.executable);
    cmd.args(args)
        .current_dir(&binary.package_dir)
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .env("CARGO_PKG_NAME", &binary.package)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null());
    let output = cmd.output();
    let took = started.elapsed();
    let _print = printing.lock().unwrap_or_else(PoisonError::into_inner);
    println!(
        "\n     Running {} ({})",
        binary.label(),
        binary.executable.display()
    );
    let passed = match output {
        Ok(out) => {
            print!("{}", String::from_utf8_lossy(&out.stdout));
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
            out.status.success()
        }
        Err(e) => {
            println!("cannot start {}: {e}", binary.executable.display());
            false
        }
    };
    println!(
        "xtask: {} {} in {:.1} s",
        binary.label(),
        if passed { "passed" } else { "FAILED" },
        took.as_secs_f64()
    );
    Outcome {
        binary,
        passed,
        took,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary(target: &str) -> TestBinary {
        TestBinary {
            package: "p".into(),
            target: target.into(),
            kind: "test".into(),
            executable: PathBuf::from(format!("/x/{target}")),
            package_dir: PathBuf::from("/x"),
        }
    }

    #[test]
    fn artifact_messages_give_the_test_binaries_with_their_package_folder() {
        let output = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#leasehold-tests@0.1.0","manifest_path":"/w/tests/Cargo.toml","target":{"kind":["test"],"name":"faults"},"profile":{"test":true},"executable":"/w/target/debug/deps/faults-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/host#leasehold-host@0.1.0","manifest_path":"/w/host/Cargo.toml","target":{"kind":["lib"],"name":"leasehold_host"},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","package_id":"path+file:///w/xtask#0.1.0","manifest_path":"/w/xtask/Cargo.toml","target":{"kind":["bin"],"name":"xtask"},"profile":{"test":true},"executable":"/w/target/debug/deps/xtask-2"}
{"reason":"build-finished","success":true}"#;
        let found = parse_build_messages(output).expect("parsed");
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].package, "leasehold-tests");
        assert_eq!(found[0].target, "faults");
        assert_eq!(found[0].package_dir, PathBuf::from("/w/tests"));
        assert_eq!(
            found[0].rerun(),
            "cargo test -p leasehold-tests --test faults"
        );
        assert_eq!(found[1].package, "xtask");
        assert_eq!(found[1].rerun(), "cargo test -p xtask --bin xtask");
    }

    #[test]
    fn long_binaries_start_first_and_the_rest_keep_their_order() {
        let ordered = order(vec![
            binary("a"),
            binary("crash_handover"),
            binary("b"),
            binary("faults"),
        ]);
        let names: Vec<_> = ordered.iter().map(|b| b.target.as_str()).collect();
        assert_eq!(names, ["crash_handover", "a", "b", "faults"]);
    }

    #[test]
    fn a_binary_that_runs_alone_waits_for_the_others_and_holds_them_back() {
        let lanes = Lanes::new(vec![binary("a"), binary("faults"), binary("b")]);
        assert_eq!(lanes.next().expect("a starts").target, "a");
        // `a` still runs: `faults` must wait for it. Another thread ends
        // `a` a little later; a lane that did not wait would start `faults`
        // beside it (two running).
        let running = |l: &Lanes| l.schedule.lock().unwrap().running;
        let (alone, running_then) = std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                lanes.ended(false);
            });
            let alone = lanes.next().expect("faults starts once a ended");
            (alone, running(&lanes))
        });
        assert_eq!(alone.target, "faults");
        assert_eq!(running_then, 1, "faults started while a still ran");
        assert!(lanes.schedule.lock().unwrap().alone_running);
        // While it runs alone nothing else starts: end it, then `b` starts.
        lanes.ended(true);
        assert_eq!(lanes.next().expect("b").target, "b");
        assert!(lanes.next().is_none());
    }
}
