//! Your own controller, one command (issue 38): `leasehold new` writes a
//! project outside the repository in each language, `leasehold build`
//! builds its component with the pinned tools, and what it wrote passes
//! out of the box: its unit tests against the language's fake host
//! (`cargo test`, pytest, `node --test`), `leasehold check` on its config,
//! and `leasehold sim` on its world. The Python and JavaScript provisioners,
//! copied out of the repository and built by `leasehold build`, pass their
//! fake-host tests and run end to end on two replicas against PostgreSQL
//! and the fenced receiver, through a SIGKILL of the leader: each bucket
//! created once, each deleted one deleted once, epochs never backwards.
//!
//! Speed: the tool folders `cargo xtask` installed into target/tools are
//! reused (linked into the test's cache) when their pins are the binary's,
//! which is also what they must be; Rust projects share one cargo target
//! folder across runs; the end-to-end tests run one at a time beside the
//! project tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use leasehold_host::author::{cache, embedded};
use leasehold_receiver::{Fault, FaultSpec, Outcome, Receiver, ReceiverConfig, RecordEntry};
use leasehold_tests::faults::rig::{Rig, RigSpec, Timing, bucket};
use leasehold_tests::process::{binary, eventually};
use serde_json::Value;

/// Longest one command of a test may run: a first `leasehold build` of a
/// Rust project compiles the SDK's dependencies, a first `cargo test` the
/// native ones; a hang detector, not a timing claim.
const COMMAND_LIMIT: Duration = Duration::from_secs(15 * 60);

/// How often a running command is looked at.
const COMMAND_POLL: Duration = Duration::from_millis(50);

/// Bounds of the end-to-end waits: debug hosts on two busy cores compile
/// an interpreter component before they lead.
const LEAD_WITHIN: Duration = Duration::from_secs(120);
const SETTLE_WITHIN: Duration = Duration::from_secs(60);

/// `leasehold sim` runs per generated world: enough to show it passes, few
/// enough to stay quick (a run is a fraction of a second).
const SIM_RUNS: &str = "5";

/// The end-to-end tests run one at a time: each starts two debug hosts
/// compiling a large component, and their leases must not starve.
static ONE_END_TO_END: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the repository")
        .to_path_buf()
}

fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"))
}

/// A fresh folder outside the repository for this process's projects.
fn outside() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-authoring-{}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        std::fs::create_dir_all(&dir).expect("create the projects' folder");
        dir
    })
}

/// The tests' `LEASEHOLD_CACHE_DIR`, kept across runs under target/. The
/// repository's tool folders are linked into it when they hold the pins
/// this binary carries; otherwise `leasehold build` installs its own.
fn tool_cache() -> &'static Path {
    static CACHE: OnceLock<PathBuf> = OnceLock::new();
    CACHE.get_or_init(|| {
        let cache = target().join("leasehold-authoring").join("cache");
        let tools = target().join("tools");
        for (ours, theirs, stamp) in [
            (
                cache::python_tools(&cache, &embedded::python_stamp()),
                tools.join("python"),
                embedded::python_stamp(),
            ),
            (
                cache::js_tools(&cache, &embedded::js_stamp()),
                tools.join("js"),
                embedded::js_stamp(),
            ),
        ] {
            if cache::installed(&ours, &stamp) || !cache::installed(&theirs, &stamp) {
                continue;
            }
            if std::fs::symlink_metadata(&ours).is_ok() {
                let _ = std::fs::remove_file(&ours).or_else(|_| std::fs::remove_dir_all(&ours));
            }
            std::fs::create_dir_all(ours.parent().expect("a tools folder")).expect("cache");
            std::os::unix::fs::symlink(&theirs, &ours).expect("link the repository's tools");
        }
        cache
    })
}

/// The cargo target folder Rust projects build in: shared by the tests
/// and kept across runs, so the SDK's dependencies compile once.
fn cargo_target() -> PathBuf {
    target().join("leasehold-authoring").join("cargo")
}

/// What a finished command printed, and whether it succeeded.
struct Ran {
    ok: bool,
    text: String,
}

/// Run `cmd` to its end, within [`COMMAND_LIMIT`].
fn run(what: &str, cmd: &mut Command) -> Ran {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("LEASEHOLD_DATABASE_URL")
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {:?}: {e}", cmd.get_program()));
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > COMMAND_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {COMMAND_LIMIT:?}");
        }
        std::thread::sleep(COMMAND_POLL);
    };
    let text = format!(
        "{}{}",
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default()
    );
    eprintln!(
        "{what}: {status} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ran {
        ok: status.success(),
        text,
    }
}

/// [`run`], which must succeed.
fn must(what: &str, cmd: &mut Command) -> Ran {
    let ran = run(what, cmd);
    assert!(ran.ok, "{what} failed:\n{}", ran.text);
    ran
}

/// `leasehold ARGS` in `dir`, with the tests' cache and cargo folder.
fn leasehold(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(binary());
    cmd.current_dir(dir)
        .args(args)
        .env(cache::CACHE_ENV, tool_cache())
        .env("CARGO_TARGET_DIR", cargo_target());
    cmd
}

fn cargo() -> Command {
    Command::new(option_env!("CARGO").unwrap_or("cargo"))
}

fn node() -> Command {
    Command::new(std::env::var_os("LEASEHOLD_NODE").unwrap_or_else(|| "node".into()))
}

/// pytest from the Python tool folder `leasehold build` used (the pinned
/// one).
fn pytest(dir: &Path) -> Command {
    let tools = cache::python_tools(tool_cache(), &embedded::python_stamp());
    let mut cmd = Command::new(tools.join("bin/python"));
    cmd.current_dir(dir)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}

/// The unit tests of the project in `dir`, natively.
fn unit_tests(language: &str, dir: &Path) -> Ran {
    match language {
        "rust" => must(
            "cargo test of the new Rust project",
            cargo()
                .current_dir(dir)
                .args(["test", "--locked"])
                .env("CARGO_TARGET_DIR", cargo_target()),
        ),
        "python" => must("pytest of the Python project", &mut pytest(dir)),
        _ => must(
            "node --test of the JavaScript project",
            node().current_dir(dir).arg("--test"),
        ),
    }
}

/// `leasehold new LANGUAGE greeter` outside the repository, then build,
/// test, check and rehearse it.
fn new_project_passes_out_of_the_box(language: &str) {
    let dir = outside().join(format!("greeter-{language}"));
    let dir_text = dir.to_str().expect("a UTF-8 folder").to_string();
    let wrote = must(
        &format!("leasehold new {language}"),
        &mut leasehold(outside(), &["new", language, "greeter", "--dir", &dir_text]),
    );
    assert!(wrote.text.contains("leasehold build"), "{}", wrote.text);
    for file in [
        "leasehold.toml",
        "greeter.sim.toml",
        "README.md",
        ".gitignore",
    ] {
        assert!(dir.join(file).is_file(), "{file} was not written");
    }
    let config = std::fs::read_to_string(dir.join("leasehold.toml")).unwrap();
    assert!(config.contains("# http_allow = ["), "{config}");
    assert!(
        dir.join("vendor/wit/controller.wit").is_file(),
        "the WIT is vendored"
    );

    let built = must(
        &format!("leasehold build of the new {language} project"),
        &mut leasehold(&dir, &["build"]),
    );
    let component = dir.join("build/greeter.wasm");
    assert!(component.is_file(), "{}", built.text);
    assert!(
        built.text.contains("built ") && built.text.contains("greeter.wasm"),
        "{}",
        built.text
    );

    let tests = unit_tests(language, &dir);
    assert!(!tests.text.is_empty());

    let checked = must(
        &format!("leasehold check of the new {language} project's config"),
        &mut leasehold(&dir, &["check", "--config", "leasehold.toml"]),
    );
    assert!(checked.text.contains("check passed"), "{}", checked.text);
    assert!(
        checked
            .text
            .contains("controller greeter: watches [\"greetings\"]"),
        "{}",
        checked.text
    );
    assert!(
        dir.join("leasehold-data/compile-cache").is_dir(),
        "the config's compile cache holds what check compiled"
    );

    let rehearsed = must(
        &format!("leasehold sim of the new {language} project's world"),
        &mut leasehold(
            &dir,
            &["sim", "greeter.sim.toml", "--runs", SIM_RUNS, "--seed", "1"],
        ),
    );
    assert!(
        rehearsed
            .text
            .contains(&format!("all {SIM_RUNS} run(s) passed")),
        "{}",
        rehearsed.text
    );
}

#[test]
fn a_new_rust_controller_builds_tests_checks_and_rehearses() {
    new_project_passes_out_of_the_box("rust");
    // The SDK's dependencies resolved to the repository's pinned versions:
    // every package of the project's lockfile but its own is the
    // repository's, at the same version (and `cargo test --locked` above
    // passed on it as written).
    let dir = outside().join("greeter-rust");
    let versions = |path: &Path| -> BTreeMap<(String, String), ()> {
        let lock: toml::Table = std::fs::read_to_string(path).unwrap().parse().unwrap();
        lock["package"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    (
                        p["name"].as_str().unwrap().to_string(),
                        p["version"].as_str().unwrap().to_string(),
                    ),
                    (),
                )
            })
            .collect()
    };
    let ours = versions(&dir.join("Cargo.lock"));
    let repository = versions(&repo().join("Cargo.lock"));
    let foreign: Vec<_> = ours
        .keys()
        .filter(|(name, _)| name != "greeter")
        .filter(|key| !repository.contains_key(*key))
        .collect();
    assert!(
        foreign.is_empty(),
        "versions the repository does not pin: {foreign:?}"
    );
    assert!(ours.keys().any(|(name, _)| name == "wit-bindgen"));
}

#[test]
fn a_new_python_controller_builds_tests_checks_and_rehearses() {
    new_project_passes_out_of_the_box("python");
}

#[test]
fn a_new_javascript_controller_builds_tests_checks_and_rehearses() {
    new_project_passes_out_of_the_box("js");
}

/// A missing toolchain is named with what to install, and a build that
/// fails shows the tool's own error.
#[test]
fn missing_tools_and_failed_builds_say_what_to_do() {
    let empty_cache = outside().join("empty-cache");
    for (language, variable, says) in [
        ("python", "LEASEHOLD_PYTHON", "Python 3.11 or newer"),
        ("js", "LEASEHOLD_NODE", "Node.js 20 or newer"),
        ("rust", "CARGO", "install Rust with rustup"),
    ] {
        let dir = outside().join(format!("no-tools-{language}"));
        let dir_text = dir.to_str().unwrap().to_string();
        must(
            "leasehold new",
            &mut leasehold(outside(), &["new", language, "greeter", "--dir", &dir_text]),
        );
        let failed = run(
            &format!("leasehold build without {variable}'s tool"),
            leasehold(&dir, &["build"])
                .env(cache::CACHE_ENV, &empty_cache)
                .env(variable, "/nonexistent/leasehold-test-tool"),
        );
        assert!(!failed.ok, "{}", failed.text);
        assert!(
            failed.text.contains("/nonexistent/leasehold-test-tool") && failed.text.contains(says),
            "{language}: the error names the tool and what to install:\n{}",
            failed.text
        );
        assert!(!dir.join("build/greeter.wasm").exists());
    }

    // A controller that does not compile: the tool's own words.
    let dir = outside().join("broken-python");
    let dir_text = dir.to_str().unwrap().to_string();
    must(
        "leasehold new",
        &mut leasehold(outside(), &["new", "python", "greeter", "--dir", &dir_text]),
    );
    std::fs::write(dir.join("controller.py"), "def broken(:\n").unwrap();
    let failed = run(
        "leasehold build of a controller with a syntax error",
        &mut leasehold(&dir, &["build"]),
    );
    assert!(!failed.ok, "{}", failed.text);
    assert!(
        failed.text.contains("componentize-py failed") && failed.text.contains("SyntaxError"),
        "{}",
        failed.text
    );
}

/// The pins `leasehold build` installs are the ones `cargo xtask` reads:
/// one file each, compiled into the binary.
#[test]
fn the_binary_carries_the_repositorys_pins() {
    let read = |path: &str| std::fs::read_to_string(repo().join(path)).unwrap();
    assert_eq!(
        embedded::PYTHON_REQUIREMENTS,
        read("guest-sdk/python/tools/requirements.txt")
    );
    assert_eq!(
        embedded::JS_PACKAGE,
        read("guest-sdk/js/tools/package.json")
    );
    assert_eq!(
        embedded::JS_LOCK,
        read("guest-sdk/js/tools/package-lock.json")
    );
    assert_eq!(embedded::WORKSPACE_LOCK, read("Cargo.lock"));
    // xtask reads those files, and spells no pin of its own.
    let xtask = read("xtask/src/main.rs");
    assert!(xtask.contains("\"guest-sdk/python/tools/requirements.txt\""));
    assert!(xtask.contains("\"guest-sdk/js/tools\""));
    for pin in embedded::python_pins() {
        let name = pin.split("==").next().unwrap();
        assert!(
            !xtask.contains(&format!("{name}==")),
            "xtask pins {name} itself"
        );
    }
    // A tool folder `cargo xtask` installed carries the stamp this binary
    // writes for the same pins, so either may use the other's.
    for (folder, stamp) in [
        ("python", embedded::python_stamp()),
        ("js", embedded::js_stamp()),
    ] {
        let stamp_file = target().join("tools").join(folder).join(cache::STAMP);
        if let Ok(theirs) = std::fs::read_to_string(&stamp_file) {
            assert_eq!(
                theirs,
                stamp,
                "{} was installed from other pins: run `cargo xtask guests`",
                stamp_file.display()
            );
        }
    }
}

/// Copy the repository's `controllers/<name>` outside it, as a user
/// would: its files without what a build or a test made, and without its
/// `vendor/` (links into the repository).
fn copy_out(name: &str) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let file_name = entry.file_name();
            let skip = [
                "vendor",
                "build",
                "__pycache__",
                "node_modules",
                ".pytest_cache",
            ];
            if skip.iter().any(|s| file_name == *s) {
                continue;
            }
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                copy(&path, &to.join(&file_name));
            } else {
                std::fs::copy(&path, to.join(&file_name)).unwrap();
            }
        }
    }
    let to = outside().join(name);
    copy(&repo().join("controllers").join(name), &to);
    to
}

async fn stored(rig: &Rig, name: &str) -> Option<Value> {
    let row = rig
        .sql()
        .await
        .query_opt(
            "SELECT status FROM leasehold_objects
              WHERE cluster = $1 AND kind = 'buckets' AND name = $2",
            &[&rig.cluster, &name],
        )
        .await
        .expect("read a bucket object")?;
    Some(
        row.get::<_, Option<&str>>(0)
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or(Value::Null),
    )
}

fn the_receiver(rig: &Rig) -> &leasehold_receiver::RunningReceiver {
    rig.receiver.as_ref().expect("the rig has a receiver")
}

/// The receiver's decided mutations of bucket `name`.
fn mutations(rig: &Rig, name: &str) -> Vec<RecordEntry> {
    let path = format!("/buckets/{name}");
    the_receiver(rig)
        .record()
        .into_iter()
        .filter(|e| e.path == path && e.outcome != Outcome::Read)
        .collect()
}

fn applied(entries: &[RecordEntry], method: &str) -> usize {
    entries
        .iter()
        .filter(|e| e.method == method && e.outcome == Outcome::Applied)
        .count()
}

/// One request through host `i`'s API; its status.
async fn api(rig: &Rig, i: usize, method: &str, name: &str, body: Option<&str>) -> u16 {
    let (header, value) = if method == "PUT" {
        ("If-None-Match", "*")
    } else {
        ("If-Match", "*")
    };
    leasehold_tests::http::request_within(
        secs(10),
        &rig.hosts[i].replica.addr,
        method,
        &format!("/v1/objects/buckets/{name}"),
        &[(header, value)],
        body,
    )
    .await
    .unwrap_or_else(|e| panic!("{method} bucket {name}: {e}"))
    .status
}

/// The provisioner in `controllers/<name>`, copied out, built by
/// `leasehold build`, its fake-host tests run there, then two replicas of
/// it on PostgreSQL with the fenced receiver, the leader SIGKILLed with a
/// request applied but unanswered.
async fn provisioner_end_to_end(name: &'static str, language: &str) {
    let dir = copy_out(name);
    let built = tokio::task::block_in_place(|| {
        must(
            &format!("leasehold build of {name} outside the repository"),
            &mut leasehold(&dir, &["build"]),
        )
    });
    assert!(
        built.text.contains("wrote vendor/"),
        "the copy had no SDK: leasehold build writes it\n{}",
        built.text
    );
    assert!(dir.join("vendor/.leasehold-sdk").is_file());
    let component = dir.join(format!("build/{name}.wasm"));
    let tests = tokio::task::block_in_place(|| unit_tests(language, &dir));
    eprintln!("{name}'s fake-host tests:\n{}", tests.text);

    let _serial = ONE_END_TO_END.lock().await;
    let cloud = Receiver::start(ReceiverConfig::default().with_test_hooks(true))
        .await
        .expect("start the fenced receiver");
    let endpoint = cloud.url();
    let spec = RigSpec {
        hosts: 2,
        timing: Timing::SCENARIO,
        controllers: vec![name],
        components: BTreeMap::from([(name.to_string(), component)]),
        ..RigSpec::scheduler(2)
    }
    .configure(name, &format!("http_allow = [\"{endpoint}\"]"));
    let started = Instant::now();
    let mut rig = Rig::start(spec).await;
    rig.receiver = Some(Arc::new(cloud));
    let (a, epoch) = rig.leader(name, LEAD_WITHIN).await;
    let b = 1 - a;
    eprintln!(
        "{name}: two replicas up, {} leads at epoch {epoch}, after {:.1} s",
        rig.hosts[a].holder,
        started.elapsed().as_secs_f64()
    );

    // Buckets made while the first leader leads; one answer is lost after
    // the receiver applied it (the retry is replayed under its key).
    let mut kept = vec!["photos", "logs"];
    for bucket_name in &kept {
        rig.create(b, "buckets", bucket_name, bucket(bucket_name, &endpoint))
            .await
            .expect("acknowledged");
    }
    the_receiver(&rig)
        .set_fault(FaultSpec::once(Fault::DropAfterApply))
        .unwrap();
    rig.create(b, "buckets", "lost-reply", bucket("lost-reply", &endpoint))
        .await
        .expect("acknowledged");
    kept.push("lost-reply");
    rig.provisioned(SETTLE_WITHIN).await;

    // A request in flight when the leader dies: applied at the receiver,
    // never answered; the successor repeats it with the same key.
    the_receiver(&rig)
        .set_fault(FaultSpec::once(Fault::Hang))
        .unwrap();
    rig.create(b, "buckets", "in-flight", bucket("in-flight", &endpoint))
        .await
        .expect("acknowledged");
    kept.push("in-flight");
    eventually(
        "the leader's PUT of bucket in-flight is applied",
        SETTLE_WITHIN,
        || async {
            mutations(&rig, "in-flight")
                .iter()
                .any(|e| e.outcome == Outcome::Applied)
                .then_some(())
        },
    )
    .await;
    rig.hosts[a].replica.kill().await;
    let (next, next_epoch) = rig.leader_after(name, epoch, LEAD_WITHIN).await;
    assert_eq!(next, b, "the surviving replica leads");
    assert!(next_epoch > epoch);
    rig.provisioned(SETTLE_WITHIN).await;

    // Deleted through the finalizer: the API marks them (202) and they go
    // once the bucket is deleted at the receiver; one DELETE's answer is
    // lost.
    let doomed = ["doomed-1", "doomed-2"];
    for bucket_name in doomed {
        let value = bucket(bucket_name, &endpoint).to_string();
        assert_eq!(api(&rig, b, "PUT", bucket_name, Some(&value)).await, 201);
    }
    rig.provisioned(SETTLE_WITHIN).await;
    the_receiver(&rig)
        .set_fault(FaultSpec::once(Fault::DropAfterApply))
        .unwrap();
    for bucket_name in doomed {
        assert_eq!(
            api(&rig, b, "DELETE", bucket_name, None).await,
            202,
            "the finalizer holds {bucket_name}"
        );
    }
    for bucket_name in doomed {
        eventually(
            &format!("bucket {bucket_name}'s object goes"),
            SETTLE_WITHIN,
            || async { stored(&rig, bucket_name).await.is_none().then_some(()) },
        )
        .await;
    }

    // Each bucket created once; each deleted one deleted once and gone.
    for bucket_name in kept.iter().chain(&doomed) {
        let entries = mutations(&rig, bucket_name);
        assert_eq!(
            applied(&entries, "PUT"),
            1,
            "bucket {bucket_name} created once: {entries:#?}"
        );
        let ready = stored(&rig, bucket_name).await;
        if kept.contains(bucket_name) {
            let status = ready.expect("kept");
            assert_eq!(status["phase"], "Ready", "{bucket_name}: {status}");
            assert_eq!(applied(&entries, "DELETE"), 0, "{entries:#?}");
        } else {
            assert_eq!(
                applied(&entries, "DELETE"),
                1,
                "bucket {bucket_name} deleted once: {entries:#?}"
            );
            assert!(the_receiver(&rig).bucket(bucket_name).is_none());
        }
    }
    // The lost answers were repeated under their keys, and replayed.
    assert!(
        mutations(&rig, "in-flight")
            .iter()
            .any(|e| e.outcome == Outcome::Replayed
                && e.epoch.is_some_and(|epoch| epoch >= next_epoch as u64)),
        "the successor repeated the in-flight request: {:#?}",
        mutations(&rig, "in-flight")
    );
    // Epochs never go backwards at the receiver: what it accepted, in the
    // order it decided, carries a non-decreasing epoch.
    let accepted: Vec<u64> = the_receiver(&rig)
        .record()
        .iter()
        .filter(|e| e.outcome.is_accepted())
        .filter_map(|e| e.epoch)
        .collect();
    assert!(
        accepted.windows(2).all(|w| w[0] <= w[1]),
        "epochs went backwards: {accepted:?}"
    );
    assert!(
        accepted
            .last()
            .is_some_and(|&last| last >= next_epoch as u64),
        "the successor's requests were accepted last: {accepted:?}"
    );
    let report = rig.check().await;
    eprintln!("{name}: {report}");
    report.assert_clean(&format!("{name} built by leasehold build"));
    eprintln!(
        "{name}: end to end in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_provisioner_built_outside_the_repository_acts_once_across_a_sigkill() {
    provisioner_end_to_end("provisioner-py", "python").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_provisioner_built_outside_the_repository_acts_once_across_a_sigkill() {
    provisioner_end_to_end("provisioner-js", "js").await;
}
