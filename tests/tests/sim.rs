//! `leasehold sim`: the example controllers pass their world files, planted
//! bugs (in Rust, Python and JavaScript) and a controller that never
//! converges are caught by the property they break, a failed run repeats
//! from its seed with the same digest, bad world files are refused naming
//! the key, and the runtime's simulation seam keeps production's fence,
//! allow list and abort.
//!
//! The components are built by `cargo xtask guests`. Runs are made in
//! process against one engine with the test binaries' compile cache (an
//! interpreter component takes minutes to compile in a debug host); the
//! exit codes, replay and output are checked through the `leasehold`
//! binary.

use std::future::Future;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use leasehold_host::config::Environment;
use leasehold_host::fence::{Epoch, Fence};
use leasehold_host::outbound::AllowList;
use leasehold_host::runtime::{
    EngineConfig, GuestEnvironment, GuestError, GuestLimits, Reconciled, Runtime, SimulatedRequest,
    SimulatedResponse, SimulatedSend, Simulation,
};
use leasehold_host::sim::{NO_TRAP, QUIESCENCE, RunReport, Simulator, World};
use leasehold_host::store::{ObjectKey, Store};
use leasehold_tests::process::run_to_end;
use leasehold_tests::{MemoryBackends, TempDir, guest, guest_dir};
use serde_json::{Value, json};

/// The example world files' folder.
fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Runs of the example provisioner's world that must all pass, and within
/// which each planted bug must be caught (the issue's figure).
const RUNS: u64 = 200;
/// Steps of every run here: the command's default.
const STEPS: u64 = leasehold_host::limits::SIM_DEFAULT_STEPS;
/// The invariant the planted bug breaks, as the example world names it.
const EACH_SPEC_ONCE: &str = "each spec applied once";

/// One engine per test binary, with the compile cache the other component
/// tests use.
fn engine() -> &'static Runtime {
    static ENGINE: OnceLock<Runtime> = OnceLock::new();
    ENGINE.get_or_init(|| {
        Runtime::new(&EngineConfig {
            max_guests: 16,
            memory_bytes: leasehold_host::limits::GUEST_MEMORY_BYTES,
            pooling: true,
            cache_dir: Some(guest_dir().join("../../leasehold-test-cache")),
        })
        .expect("build the Wasm engine")
    })
}

fn environment() -> Environment {
    Environment {
        guest_dir: Some(guest_dir()),
        ..Environment::default()
    }
}

/// The example world `file` with its component replaced by `component`
/// (a file in the guest folder).
fn example_world(file: &str, component: &str) -> World {
    let path = examples().join(file);
    let text = std::fs::read_to_string(&path).expect("read the example world");
    let text = text.replace(
        "${LEASEHOLD_GUEST_DIR}/provisioner.wasm",
        &format!("${{LEASEHOLD_GUEST_DIR}}/{component}"),
    );
    World::parse(&text, &path, &examples(), &environment())
        .unwrap_or_else(|e| panic!("{file} with {component}: {e}"))
}

fn simulator(world: World) -> Simulator {
    Simulator::new(engine(), world).unwrap_or_else(|e| panic!("load the world's component: {e}"))
}

/// Drive `future` on a thread of its own, as the command does.
fn on_one_thread<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
        .block_on(future)
}

/// What a failed run shows of itself in an assertion.
fn shown(report: &RunReport) -> String {
    let tail: Vec<&String> = report.lines.iter().rev().take(60).collect();
    format!(
        "seed {} failed {:?}; the end of its trace:\n{}",
        report.seed,
        report.failure,
        tail.into_iter()
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    )
}

fn every_run_passes(sim: &Simulator, seeds: RangeInclusive<u64>) {
    on_one_thread(async {
        for seed in seeds {
            let report = sim.run(seed, STEPS).await;
            assert!(report.passed(), "{}", shown(&report));
            assert!(
                report.reconciles >= STEPS,
                "every step reconciles something"
            );
        }
    });
}

/// The first failing run among `seeds`, if any.
async fn first_failure(sim: &Simulator, seeds: RangeInclusive<u64>) -> Option<RunReport> {
    for seed in seeds {
        let report = sim.run(seed, STEPS).await;
        if !report.passed() {
            return Some(report);
        }
    }
    None
}

/// The example provisioner passes 200 runs of its world (seeds 1 to 200,
/// in two tests so they run side by side).
#[test]
fn the_example_provisioner_passes_its_world_seeds_1_to_100() {
    let sim = simulator(example_world("provisioner.sim.toml", "provisioner.wasm"));
    every_run_passes(&sim, 1..=RUNS / 2);
}

#[test]
fn the_example_provisioner_passes_its_world_seeds_101_to_200() {
    let sim = simulator(example_world("provisioner.sim.toml", "provisioner.wasm"));
    every_run_passes(&sim, RUNS / 2 + 1..=RUNS);
}

#[test]
fn the_example_scheduler_passes_its_world() {
    let path = examples().join("scheduler.sim.toml");
    let world = World::load(&path, &environment()).expect("the scheduler's world");
    every_run_passes(&simulator(world), 1..=40);
}

/// The same seed gives the same run (the same digest), another seed
/// another; the run's own faults, given back as a schedule, repeat it too
/// (what shrinking relies on).
#[test]
fn a_run_repeats_from_its_seed_and_from_its_faults() {
    let sim = simulator(example_world("provisioner.sim.toml", "provisioner.wasm"));
    on_one_thread(async {
        let first = sim.run(7, STEPS).await;
        let again = sim.run(7, STEPS).await;
        assert_eq!(first.digest, again.digest);
        assert_eq!(first.lines, again.lines);
        assert!(!first.faults.is_empty());
        let other = sim.run(8, STEPS).await;
        assert_ne!(first.digest, other.digest);
        let scheduled = sim.replay(7, STEPS, first.faults.clone()).await;
        assert_eq!(first.digest, scheduled.digest);
        let calm = sim.replay(7, STEPS, Vec::new()).await;
        assert_ne!(first.digest, calm.digest, "the faults are in the digest");
        assert!(calm.passed(), "{}", shown(&calm));
    });
}

/// A world file with the example's properties around `component`, in
/// `dir`, naming it by its absolute path (so the binary finds it).
fn world_file(dir: &Path, example: &str, component: &str) -> PathBuf {
    let text = std::fs::read_to_string(examples().join(example)).expect("read the example");
    let text = text.replace(
        "${LEASEHOLD_GUEST_DIR}/provisioner.wasm",
        &guest_dir().join(component).display().to_string(),
    );
    let path = dir.join(example);
    std::fs::write(&path, text).expect("write the world");
    path
}

fn digests(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("trace="))
        .collect()
}

/// The planted bug (a key from the version its Pending status write just
/// made) is caught within 200 runs naming the invariant; the shrunk run
/// breaks the same invariant with fewer faults; the command fails with
/// exit 1, a trace, the replay command and a shrunk trace, and its replay
/// gives the failed run's digest twice.
#[test]
fn a_planted_bug_is_caught_by_its_invariant_and_its_replay_repeats() {
    let sim = simulator(example_world(
        "provisioner.sim.toml",
        "provisioner_bug.wasm",
    ));
    let (failed, shrunk) = on_one_thread(async {
        let failed = first_failure(&sim, 1..=RUNS)
            .await
            .expect("the planted bug was not caught within 200 runs");
        let shrunk = sim.shrink(&failed).await;
        (failed, shrunk)
    });
    let property = failed.failure.as_ref().map(|f| f.property.as_str());
    assert_eq!(property, Some(EACH_SPEC_ONCE), "{}", shown(&failed));
    assert_eq!(
        shrunk.failure.as_ref().map(|f| f.property.as_str()),
        Some(EACH_SPEC_ONCE),
        "{}",
        shown(&shrunk)
    );
    assert!(shrunk.faults.len() <= failed.faults.len());
    assert!(
        !shrunk.faults.is_empty(),
        "without faults the bug does no harm: a reply must be lost"
    );

    let dir = TempDir::new();
    let file = world_file(dir.path(), "provisioner.sim.toml", "provisioner_bug.wasm");
    let seed = failed.seed.to_string();
    let args = [
        "sim",
        file.to_str().unwrap(),
        "--seed",
        &seed,
        "--runs",
        "1",
        "--steps",
        "200",
    ];
    let (code, first, stderr) = run_to_end(&args, &[]);
    assert_eq!(code, 1, "{first}\n{stderr}");
    let (code, second, _) = run_to_end(&args, &[]);
    assert_eq!(code, 1);
    assert_eq!(digests(&first), vec![failed.digest.as_str()]);
    assert_eq!(
        digests(&first),
        digests(&second),
        "a replay repeats the run"
    );
    assert!(first.contains(&format!("seed={seed}")), "{first}");
    assert!(
        first.contains(&format!("FAILED property {EACH_SPEC_ONCE:?} at step")),
        "{first}"
    );
    assert!(
        first.contains(&format!(
            "replay: leasehold sim {} --seed {seed} --runs 1 --steps 200",
            file.display()
        )),
        "{first}"
    );
    assert!(first.contains("! fault"), "the trace shows its faults");
    assert!(
        first.contains("http PUT http://cloud.sim/buckets/"),
        "{first}"
    );
    assert!(first.contains("shrunk: "), "{first}");
    assert!(
        first.contains(&format!("shrunk trace (trace={})", shrunk.digest)),
        "{first}"
    );
}

fn planted_bug_in(component: &str) {
    let sim = simulator(example_world("provisioner.sim.toml", component));
    let failed = on_one_thread(first_failure(&sim, 1..=RUNS))
        .unwrap_or_else(|| panic!("{component}'s planted bug was not caught within 200 runs"));
    assert_eq!(
        failed.failure.as_ref().map(|f| f.property.as_str()),
        Some(EACH_SPEC_ONCE),
        "{}",
        shown(&failed)
    );
    let again = on_one_thread(sim.run(failed.seed, STEPS));
    assert_eq!(again.digest, failed.digest, "{component} repeats its run");
}

#[test]
fn the_planted_bug_in_python_is_caught() {
    planted_bug_in("provisioner-bug-py.wasm");
}

#[test]
fn the_planted_bug_in_javascript_is_caught() {
    planted_bug_in("provisioner-bug-js.wasm");
}

/// The guide's world file (guest-sdk/README.md, "Rehearse your
/// controller") is a world the command accepts, and its runs pass.
#[test]
fn the_guides_world_file_is_one() {
    let readme = std::fs::read_to_string(examples().join("../guest-sdk/README.md")).unwrap();
    let section = readme
        .split("## Rehearse your controller")
        .nth(1)
        .expect("the guide has the section");
    let block = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section shows a world file");
    let world = World::parse(block, Path::new("guide.toml"), &examples(), &environment())
        .unwrap_or_else(|e| panic!("the guide's world: {e}"));
    assert_eq!(world.invariants.len(), 1);
    every_run_passes(&simulator(world), 1..=5);
}

/// A world around `component` (a file of the guest folder) with `rest`.
fn inline_world(component: &str, rest: &str) -> World {
    let text = format!(
        "[controller]\ncomponent = \"{}\"\n{rest}",
        guest(component.trim_end_matches(".wasm")).display()
    );
    World::parse(
        &text,
        Path::new("inline.toml"),
        &guest_dir(),
        &environment(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A controller that rewrites its object on every reconcile never settles:
/// quiescence fails, and needs no fault to (the shrunk run has none).
#[test]
fn a_controller_that_never_converges_fails_quiescence() {
    let world = inline_world(
        "churn.wasm",
        "[[objects]]\nkind = \"counters\"\nname = \"c\"\nvalue = { count = 0 }\n",
    );
    let sim = simulator(world);
    let (failed, shrunk) = on_one_thread(async {
        let failed = sim.run(3, 50).await;
        let shrunk = sim.shrink(&failed).await;
        (failed, shrunk)
    });
    let failure = failed.failure.clone().expect("it never settles");
    assert_eq!(failure.property, QUIESCENCE, "{}", shown(&failed));
    assert!(
        failure.message.contains("counters/c"),
        "{}",
        failure.message
    );
    assert_eq!(shrunk.failure.map(|f| f.property), Some(QUIESCENCE.into()));
    assert!(shrunk.faults.is_empty());
}

/// A component of the first WIT version runs in the simulation like any
/// other: the 0.1.0 fixture echoes each note into another kind on every
/// reconcile, so the world settles but a resync still writes, which
/// quiescence reports.
#[test]
fn a_component_of_wit_0_1_0_is_simulated_too() {
    let world = inline_world(
        "v010.wasm",
        "[[objects]]\nkind = \"notes\"\nname = \"a\"\nvalue = { text = \"hello\" }\n[faults]\nlease_lost = 0\n",
    );
    let report = on_one_thread(simulator(world).run(5, 30));
    let failure = report.failure.clone().expect("its resync writes");
    assert_eq!(failure.property, QUIESCENCE, "{}", shown(&report));
    assert!(failure.message.contains("a resync"), "{}", failure.message);
    assert!(
        report
            .lines
            .iter()
            .any(|l| l.contains("commit at epoch 1: create echoes/a")),
        "{}",
        shown(&report)
    );
}

/// A component that traps breaks "no trap"; the simulation's own aborts
/// (every run above loses leases) never do.
#[test]
fn a_guest_that_traps_fails_no_trap() {
    let sim = simulator(inline_world("start_trap.wasm", ""));
    let report = on_one_thread(sim.run(1, 10));
    let failure = report.failure.expect("it traps at its start");
    assert_eq!(failure.property, NO_TRAP);
    assert!(failure.message.contains("trapped"), "{}", failure.message);
}

/// A bad world file exits 2 naming the key, before anything runs.
#[test]
fn bad_world_files_exit_2_naming_the_key() {
    let dir = TempDir::new();
    let good = std::fs::read_to_string(world_file(
        dir.path(),
        "provisioner.sim.toml",
        "provisioner.wasm",
    ))
    .unwrap();
    let cases = [
        (format!("speed = 3\n{good}"), "speed", "unknown key", vec![]),
        (
            good.replace("when = \"always\"", "when = \"always\"\ncolour = 1"),
            "invariants[0].colour",
            "unknown key",
            vec![],
        ),
        (
            good.replace(
                "objects.buckets.all(b, b.status != null",
                "objects.buckets.all(b, b.status != null &&",
            ),
            "invariants[3].expr",
            "does not compile",
            vec![],
        ),
        (
            good.replace(
                "url = \"http://cloud.sim/buckets\"",
                "url = \"http://other.sim/buckets\"",
            ),
            "services[0].url",
            "outside the controller's http_allow",
            vec![],
        ),
        (
            good.clone(),
            "actions[2].at",
            "beyond the run's 100 steps",
            vec!["--steps", "100"],
        ),
    ];
    for (i, (text, key, problem, flags)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad-{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let mut args = vec!["sim", path.to_str().unwrap(), "--runs", "1"];
        args.extend(flags.iter().copied());
        let (code, stdout, stderr) = run_to_end(&args, &[]);
        assert_eq!(code, 2, "{key}: {stdout}\n{stderr}");
        assert!(
            stderr.contains(&format!("{key}: ")) && stderr.contains(problem),
            "{key}: {stderr}"
        );
        assert!(!stdout.contains("seed="), "nothing ran: {stdout}");
    }
}

/// `--json` prints one object per run, with its seed, digest and result,
/// and the command exits 0 when every run passed.
#[test]
fn json_prints_one_object_per_run() {
    let dir = TempDir::new();
    let file = world_file(dir.path(), "provisioner.sim.toml", "provisioner.wasm");
    let args = [
        "sim",
        file.to_str().unwrap(),
        "--runs",
        "2",
        "--seed",
        "40",
        "--steps",
        "130",
        "--json",
    ];
    let (code, stdout, stderr) = run_to_end(&args, &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let runs: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON object per line"))
        .collect();
    assert_eq!(runs.len(), 2, "{stdout}");
    for (run, seed) in runs.iter().zip([40, 41]) {
        assert_eq!(run["seed"], json!(seed));
        assert_eq!(run["passed"], json!(true));
        assert_eq!(run["trace"].as_str().map(str::len), Some(64));
        assert!(run["faults"].is_array());
    }
}

/// A simulation for the seam's own test: records what reaches it and
/// answers 200, or, given a revocation, revokes it and never answers (the
/// lease lost while the request is on its way).
#[derive(Default)]
struct Recording {
    requests: Mutex<Vec<SimulatedRequest>>,
    revoke: Mutex<Option<leasehold_host::runtime::Revocation>>,
}

impl Simulation for Recording {
    fn wall_clock(&self) -> Duration {
        Duration::from_secs(leasehold_host::sim::SIM_EPOCH_UNIX_SECS)
    }

    fn monotonic_clock(&self) -> u64 {
        0
    }

    fn random_seed(&self) -> u64 {
        1
    }

    fn send(&self, request: SimulatedRequest) -> SimulatedSend {
        self.requests.lock().unwrap().push(request);
        if let Some(revocation) = self.revoke.lock().unwrap().take() {
            revocation.revoke();
            return Box::pin(std::future::pending());
        }
        Box::pin(std::future::ready(Ok(SimulatedResponse {
            status: 200,
            headers: Vec::new(),
            body: b"{}".to_vec(),
        })))
    }
}

fn key(kind: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind: kind.into(),
        name: name.into(),
    }
}

/// The simulation takes over only the delivery: a request outside
/// `http_allow` is denied before the simulation sees it; one inside
/// reaches it stamped with the tenure's fence over what the guest set; a
/// revocation while the simulation holds a request aborts the guest.
#[test]
fn the_simulation_seam_keeps_the_allow_list_the_fence_and_the_abort() {
    on_one_thread(async {
        const CLUSTER: &str = "components";
        let backends = MemoryBackends::new();
        let fence: Fence = backends.grant(CLUSTER, "caller", "host-a").await.fence;
        let recording = Arc::new(Recording::default());
        let limits = GuestLimits {
            http_allow: Arc::new(AllowList::parse(&["http://cloud.sim"]).unwrap()),
            ..GuestLimits::default()
        };
        let compiled = engine()
            .load("caller", &guest("caller"), limits, Vec::new())
            .expect("load caller")
            .with_environment(GuestEnvironment::Simulated(recording.clone()));
        let call =
            |url: &str| json!({ "url": url, "headers": [["leasehold-epoch", "999"]] }).to_string();
        let store = backends.store.clone();
        store
            .put(
                CLUSTER,
                &key("calls", "in"),
                &call("http://cloud.sim/x"),
                None,
            )
            .await
            .unwrap();
        store
            .put(
                CLUSTER,
                &key("calls", "out"),
                &call("http://elsewhere.sim/y"),
                None,
            )
            .await
            .unwrap();
        let mut guest = compiled
            .instantiate(
                fence.clone(),
                store.clone(),
                Arc::default(),
                compiled.revocation(),
            )
            .await
            .expect("instantiate");
        for name in ["in", "out"] {
            assert_eq!(
                guest.reconcile("calls", name).await.unwrap(),
                Reconciled::Done
            );
        }
        let result = |name: &'static str| {
            let store = store.clone();
            async move {
                let object = store.get(CLUSTER, &key("results", name)).await.unwrap();
                serde_json::from_str::<Value>(&object.expect("a result").value).unwrap()
            }
        };
        assert_eq!(result("in").await["status"], json!(200));
        let denied = result("out").await["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(denied.starts_with("Denied"), "{denied}");
        let requests = recording.requests.lock().unwrap().clone();
        assert_eq!(requests.len(), 1, "the denied request never reached it");
        assert_eq!(requests[0].url, "http://cloud.sim/x");
        assert_eq!(requests[0].header("leasehold-epoch"), Some("1"));
        assert_eq!(
            requests[0].header("leasehold-lease"),
            Some("components/caller")
        );
        assert_eq!(fence.epoch, Epoch(1));

        let revocation = compiled.revocation();
        *recording.revoke.lock().unwrap() = Some(revocation.clone());
        let mut cut = compiled
            .instantiate(fence.clone(), store.clone(), Arc::default(), revocation)
            .await
            .expect("instantiate");
        let aborted = tokio::time::timeout(Duration::from_secs(30), cut.reconcile("calls", "in"))
            .await
            .expect("the revocation ends the call");
        assert!(
            matches!(aborted, Err(GuestError::Aborted { .. })),
            "{aborted:?}"
        );
        assert_eq!(recording.requests.lock().unwrap().len(), 2);
    });
}
