//! The embedded backend with real `leasehold` processes: SQLite in a data
//! directory, no database server.
//!
//! - objects, events, tenure history and epochs survive SIGTERM and
//!   SIGKILL of a host, and the next epoch is above every earlier one;
//! - two hosts on one data directory: one leads, the other stands by, and
//!   a SIGKILL of the leader hands over within a second (its liveness file
//!   lock is freed by the kernel);
//! - random fault schedules (SIGKILL, SIGSTOP, orderly restart) over three
//!   hosts on one data directory, judged by the embedded checker from the
//!   database file itself (`leasehold_tests::embedded`), with a hand-written
//!   broken record to show the checker reports every rule it judges;
//! - a data directory that cannot be written, or that is on a read-only
//!   mount, is refused at start with the reason;
//! - `leasehold export` from the embedded backend and `leasehold import`
//!   into PostgreSQL: the objects are equal and epochs continue above the
//!   exported ones.
//!
//! Ordering comes from observable state (a host's `/metrics`, `/readyz`,
//! the database file); the only sleeps are the ones a fault is made of
//! and the random schedule's own clock.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use leasehold_tests::TempDir;
use leasehold_tests::embedded;
use leasehold_tests::faults::checker::{Ack, Rule};
use leasehold_tests::faults::schedule::SplitMix;
use leasehold_tests::http;
use leasehold_tests::process::{Replica, eventually, free_port, run_to_end};
use serde_json::{Value, json};

const CLUSTER: &str = "demo";
const SCHEDULER: &str = "scheduler";

/// Slack for a debug build on a busy two-core machine: a start-up, a
/// guest's compilation from the cache, a takeover's wake-up.
const START: Duration = Duration::from_secs(60);

/// The issue's bound on a takeover after the leader is killed outright.
const SIGKILL_HANDOVER: Duration = Duration::from_secs(1);

/// The tests of this file run one at a time: each starts debug builds of
/// the host, and the handover bound must not measure another test's load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Lease timing of a host's controllers.
#[derive(Clone, Copy)]
struct Timing {
    ttl: &'static str,
    renew_interval: &'static str,
    renew_deadline: &'static str,
}

/// The defaults (10 s / 2 s / 7 s): a takeover after SIGKILL can only be
/// fast through the liveness lock, never by expiry.
const DEFAULT_TIMING: Timing = Timing {
    ttl: "10s",
    renew_interval: "2s",
    renew_deadline: "7s",
};

/// The random schedules' timing: one-second leases, so a schedule sees
/// several takeovers by expiry (after SIGSTOP) in a few seconds.
const FAST: Timing = Timing {
    ttl: "1s",
    renew_interval: "150ms",
    renew_deadline: "700ms",
};

/// A host running the example scheduler on the embedded backend in
/// `data_dir`.
fn config(holder: &str, port: u16, data_dir: &Path, timing: Timing) -> String {
    let guests = leasehold_tests::guest_dir();
    let cache = guests.join("../../leasehold-test-cache");
    let scheduler = leasehold_tests::guest(SCHEDULER);
    let Timing {
        ttl,
        renew_interval,
        renew_deadline,
    } = timing;
    format!(
        r#"cluster = "{CLUSTER}"
holder = "{holder}"
data_dir = "{data}"

[http]
listen = "127.0.0.1:{port}"

[runtime]
cache_dir = "{cache}"

[[controllers]]
name = "{SCHEDULER}"
component = "{scheduler}"
lease_ttl = "{ttl}"
renew_interval = "{renew_interval}"
renew_deadline = "{renew_deadline}"
"#,
        data = data_dir.display(),
        cache = cache.display(),
        scheduler = scheduler.display(),
    )
}

async fn start(dir: &TempDir, holder: &str, data_dir: &Path, timing: Timing) -> Replica {
    let port = free_port();
    let replica = Replica::start(
        dir.path(),
        holder,
        port,
        &config(holder, port, data_dir, timing),
    );
    replica.wait_healthy(START).await;
    replica
}

/// Wait until `replica` leads the scheduler, by its own metrics.
async fn leads(replica: &Replica, limit: Duration) {
    eventually(
        &format!("{} leads the scheduler", replica.name),
        limit,
        || async { replica.leads(SCHEDULER).await.filter(|l| *l) },
    )
    .await;
}

/// The scheduler's lease as `replica`'s API shows it.
async fn lease(replica: &Replica) -> Value {
    let leases = replica.leases().await.expect("the lease list answers");
    leases
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["name"] == SCHEDULER)
        .cloned()
        .unwrap_or(Value::Null)
}

async fn put(replica: &Replica, path: &str, body: &str) -> Value {
    let r = http::put(&replica.addr, path, body).await.expect("PUT");
    assert!(
        r.status == 200 || r.status == 201,
        "PUT {path}: {} {}",
        r.status,
        r.body
    );
    r.json()
}

async fn get(replica: &Replica, path: &str) -> http::Response {
    http::get(&replica.addr, path).await.expect("GET")
}

async fn assigned(replica: &Replica, task: &str) -> Value {
    eventually(&format!("task {task} is assigned"), START, || async {
        let r = get(replica, &format!("/v1/objects/tasks/{task}")).await;
        (r.status == 200 && r.json()["value"]["status"] == "assigned").then(|| r.json())
    })
    .await
}

/// Every event of the cluster, through `replica`'s API.
async fn events(replica: &Replica) -> Vec<Value> {
    let mut all = Vec::new();
    let mut after = 0;
    loop {
        let page = get(replica, &format!("/v1/events?after={after}&limit=500"))
            .await
            .json();
        let items = page["items"].as_array().cloned().unwrap_or_default();
        all.extend(items);
        match page["next"].as_u64() {
            Some(next) => after = next,
            None => return all,
        }
    }
}

async fn history(replica: &Replica) -> Vec<Value> {
    get(replica, &format!("/v1/leases/{SCHEDULER}/history"))
        .await
        .json()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn objects_events_history_and_epochs_survive_sigterm_and_sigkill() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = TempDir::new();
    let data = dir.path().join("data");
    let mut host = start(&dir, "host-a", &data, DEFAULT_TIMING).await;
    leads(&host, START).await;
    put(&host, "/v1/objects/nodes/n1", r#"{"capacity": 5}"#).await;
    put(&host, "/v1/objects/tasks/t1", r#"{"status": "pending"}"#).await;
    put(&host, "/v1/objects/tasks/t2", r#"{"status": "pending"}"#).await;
    let t1 = assigned(&host, "t1").await;
    assigned(&host, "t2").await;
    let first = lease(&host).await["epoch"].as_u64().expect("an epoch");
    let before = events(&host).await;
    assert!(
        before.iter().any(|e| e["reason"] == "Assigned"),
        "{before:?}"
    );

    // SIGTERM: released in order; everything is there after the restart.
    host.signal("TERM");
    assert_eq!(host.exited(START).await, Some(0), "{}", host.log_tail(20));
    host.restart();
    host.wait_healthy(START).await;
    leads(&host, START).await;
    let second = lease(&host).await["epoch"].as_u64().expect("an epoch");
    // Readiness tells the truth about the backend.
    let (_, ready) = host.readyz().await.expect("readyz answers");
    assert_eq!(ready["database"]["state"], "embedded", "{ready}");
    assert_eq!(ready["database"]["durable"], true, "{ready}");
    assert!(
        ready["database"]["endpoint"]
            .as_str()
            .is_some_and(|e| e.ends_with("leasehold.db")),
        "{ready}"
    );
    assert!(second > first, "epoch {second} after {first}");
    assert_eq!(
        get(&host, "/v1/objects/tasks/t1").await.json(),
        t1,
        "the task as it was, version and all"
    );
    let after_term = events(&host).await;
    assert_eq!(
        after_term[..before.len()],
        before[..],
        "the event log is kept, seqs and all"
    );
    let tenures = history(&host).await;
    assert_eq!(tenures.len(), 2, "{tenures:?}");
    assert_eq!(tenures[1]["epoch"], first);
    assert_eq!(tenures[1]["end_reason"], "released");
    assert!(tenures[1]["writes"].as_u64().unwrap() >= 1, "{tenures:?}");

    // SIGKILL: nothing released, nothing lost; the next epoch is above.
    put(&host, "/v1/objects/tasks/t3", r#"{"status": "pending"}"#).await;
    let t3 = assigned(&host, "t3").await;
    let killed_events = events(&host).await;
    host.kill().await;
    host.restart();
    host.wait_healthy(START).await;
    // Taken over at once: the same holder's new process claims the name
    // again, so the killed one's grant is no longer live (session).
    leads(&host, Duration::from_secs(5)).await;
    let third = lease(&host).await["epoch"].as_u64().expect("an epoch");
    assert!(third > second, "epoch {third} after {second}");
    assert_eq!(get(&host, "/v1/objects/tasks/t3").await.json(), t3);
    let after_kill = events(&host).await;
    assert_eq!(after_kill[..killed_events.len()], killed_events[..]);
    let tenures = history(&host).await;
    assert_eq!(
        tenures
            .iter()
            .map(|t| t["epoch"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![third, second, first]
    );
    assert_eq!(tenures[1]["end_reason"], "superseded", "{tenures:?}");
    // The new tenure still works.
    put(&host, "/v1/objects/tasks/t4", r#"{"status": "pending"}"#).await;
    assigned(&host, "t4").await;
    host.signal("TERM");
    host.exited(START).await;
    embedded::check(&data, CLUSTER, &[]).assert_clean("after SIGTERM and SIGKILL");
}

#[tokio::test]
async fn two_hosts_on_one_data_directory_share_it_and_a_sigkill_hands_over_within_a_second() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = TempDir::new();
    let data = dir.path().join("data");
    let mut a = start(&dir, "host-a", &data, DEFAULT_TIMING).await;
    leads(&a, START).await;
    let b = start(&dir, "host-b", &data, DEFAULT_TIMING).await;
    // One leader: b stands by behind a.
    eventually("host-b stands by behind host-a", START, || async {
        let (_, body) = b.readyz().await?;
        let state = &body["controllers"][SCHEDULER];
        (state["state"] == "standby" && state["holder"] == "host-a").then_some(())
    })
    .await;
    assert_eq!(b.leads(SCHEDULER).await, Some(false));
    // One state: a write through b is read through a, and a's scheduler
    // acts on it.
    put(&b, "/v1/objects/nodes/n1", r#"{"capacity": 5}"#).await;
    put(&b, "/v1/objects/tasks/t1", r#"{"status": "pending"}"#).await;
    let t1 = assigned(&a, "t1").await;
    assert_eq!(get(&b, "/v1/objects/tasks/t1").await.json(), t1);
    let old = lease(&b).await;
    assert_eq!(old["holder"], "host-a");

    // SIGKILL of the leader: b leads within a second.
    a.signal("KILL");
    let killed = Instant::now();
    eventually("host-b leads after host-a was killed", START, || async {
        b.leads(SCHEDULER).await.filter(|l| *l)
    })
    .await;
    let took = killed.elapsed();
    a.exited(START).await;
    eprintln!("SIGKILL handover on the embedded backend took {took:?}");
    assert!(
        took < SIGKILL_HANDOVER,
        "host-b led {took:?} after host-a was killed; the bound is {SIGKILL_HANDOVER:?}"
    );
    let new = lease(&b).await;
    assert_eq!(new["holder"], "host-b");
    // The same record read straight from the data directory, beside the
    // running host.
    let (code, out, stderr) = run_to_end(
        &["leases", "--config", b.config.to_str().unwrap(), "--json"],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let listed: Value = serde_json::from_str(&out).expect("leases --json");
    assert_eq!(listed[0]["holder"], "host-b", "{listed}");
    assert_eq!(listed[0]["epoch"], new["epoch"], "{listed}");
    assert!(
        new["epoch"].as_u64() > old["epoch"].as_u64(),
        "{new} after {old}"
    );
    put(&b, "/v1/objects/tasks/t2", r#"{"status": "pending"}"#).await;
    assigned(&b, "t2").await;
    let tenures = history(&b).await;
    assert_eq!(tenures[1]["end_reason"], "superseded", "{tenures:?}");
    embedded::check(&data, CLUSTER, &[]).assert_clean("after the SIGKILL handover");
}

#[tokio::test]
async fn a_data_directory_that_is_not_writable_is_refused_at_start() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = TempDir::new();
    let data = dir.path().join("locked");
    std::fs::create_dir(&data).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o555)).unwrap();
    let port = free_port();
    let path = dir.path().join("host.toml");
    std::fs::write(&path, config("host-a", port, &data, DEFAULT_TIMING)).unwrap();
    let root = effective_uid() == 0;
    let output = if root {
        // Root writes anywhere; the refusal is shown to a user who cannot.
        std::os::unix::fs::chown(&data, Some(NOBODY), Some(NOBODY)).unwrap();
        for open in [dir.path(), path.as_path()] {
            let mode = if open.is_dir() { 0o755 } else { 0o644 };
            std::fs::set_permissions(open, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        run_as(NOBODY, &["run", "--config", path.to_str().unwrap()])
    } else {
        let (code, _, stderr) = run_to_end(&["run", "--config", path.to_str().unwrap()], &[]);
        (code, stderr)
    };
    let (code, stderr) = output;
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("is not writable by this process") && stderr.contains("locked"),
        "{stderr}"
    );
    let check = if root {
        run_as(NOBODY, &["check", "--config", path.to_str().unwrap()])
    } else {
        let (code, _, stderr) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
        (code, stderr)
    };
    assert_ne!(check.0, 0, "{}", check.1);
    assert!(check.1.contains("is not writable"), "{}", check.1);
}

#[tokio::test]
async fn a_data_directory_on_a_read_only_mount_is_refused_at_start() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = TempDir::new();
    let data = dir.path().join("ro");
    std::fs::create_dir(&data).unwrap();
    let Some(_mount) = Mount::tmpfs_read_only(&data) else {
        eprintln!("skipped: this test needs to mount a read-only tmpfs (root with CAP_SYS_ADMIN)");
        return;
    };
    let port = free_port();
    let path = dir.path().join("host.toml");
    std::fs::write(&path, config("host-a", port, &data, DEFAULT_TIMING)).unwrap();
    let (code, _, stderr) = run_to_end(&["run", "--config", path.to_str().unwrap()], &[]);
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("mounted read-only"), "{stderr}");
}

#[tokio::test]
async fn a_data_directory_on_a_fuse_filesystem_is_refused_at_start() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = TempDir::new();
    let data = dir.path().join("fuse");
    std::fs::create_dir(&data).unwrap();
    let Some(mount) = leasehold_tests::fuse::FuseMount::start(&data) else {
        eprintln!("skipped: this test needs to mount a FUSE filesystem (root, /dev/fuse)");
        return;
    };
    let port = free_port();
    let path = dir.path().join("host.toml");
    std::fs::write(&path, config("host-a", port, &data, DEFAULT_TIMING)).unwrap();
    for command in ["run", "check"] {
        let (code, _, stderr) = run_to_end(&[command, "--config", path.to_str().unwrap()], &[]);
        assert_ne!(code, 0, "{command}: {stderr}");
        assert!(
            stderr.contains("is on FUSE") && stderr.contains("needs a local filesystem"),
            "{command}: {stderr}"
        );
    }
    drop(mount);
}

#[tokio::test]
async fn a_data_directory_another_users_process_holds_is_refused_at_start() {
    let _one = ONE_AT_A_TIME.lock().await;
    if effective_uid() != 0 {
        eprintln!("skipped: running a process as another user needs root");
        return;
    }
    let dir = TempDir::new();
    let data = dir.path().join("shared");
    std::fs::create_dir(&data).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let lock = data.join("leasehold.lock");
    std::fs::write(&lock, b"").unwrap();
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Another user's process holds the directory lock, as its host would.
    use std::os::unix::process::CommandExt;
    let mut holder = std::process::Command::new("flock")
        .args(["--shared", lock.to_str().unwrap(), "sleep", "60"])
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .expect("run flock as another user");
    let pid = holder.id();
    eventually("the other user's process holds the lock", START, || async {
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        locks
            .lines()
            .any(|l| l.split_whitespace().nth(4) == Some(&pid.to_string()))
            .then_some(())
    })
    .await;
    let port = free_port();
    let path = dir.path().join("host.toml");
    std::fs::write(&path, config("host-a", port, &data, DEFAULT_TIMING)).unwrap();
    for command in ["run", "check"] {
        let (code, _, stderr) = run_to_end(&[command, "--config", path.to_str().unwrap()], &[]);
        assert_ne!(code, 0, "{command}: {stderr}");
        assert!(
            stderr.contains(&format!("in use by process {pid} of user {NOBODY}")),
            "{command}: {stderr}"
        );
    }
    let _ = holder.kill();
    let _ = holder.wait();
}

const NOBODY: u32 = 65534;

/// This process's effective user id (`id -u`).
fn effective_uid() -> u32 {
    let out = std::process::Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Run `leasehold args` as user `uid` (the test runs as root); returns the
/// exit code and standard error.
fn run_as(uid: u32, args: &[&str]) -> (i32, String) {
    use std::os::unix::process::CommandExt;
    let output = std::process::Command::new(leasehold_tests::process::binary())
        .args(args)
        .uid(uid)
        .gid(uid)
        .env_remove("LEASEHOLD_DATABASE_URL")
        .output()
        .expect("run leasehold");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A filesystem the test mounted, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs_read_only(at: &Path) -> Option<Self> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self(at.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[tokio::test]
async fn export_from_the_embedded_backend_and_import_into_postgres_keeps_objects_and_epochs() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = TempDir::new();
    let data = dir.path().join("data");
    let mut host = start(&dir, "host-a", &data, DEFAULT_TIMING).await;
    leads(&host, START).await;
    put(&host, "/v1/objects/nodes/n1", r#"{"capacity": 2}"#).await;
    put(&host, "/v1/objects/tasks/t1", r#"{"status": "pending"}"#).await;
    assigned(&host, "t1").await;
    // Metadata, status and a deletion mark move too.
    let object = |body: Value| body.to_string();
    let r = http::request(
        &host.addr,
        "PUT",
        "/v1/objects/widgets/w1",
        &[("Content-Type", "application/vnd.leasehold.object+json")],
        Some(&object(json!({
            "value": {"size": 3, "tags": ["a", "b"]},
            "labels": {"team": "a"},
            "finalizers": ["example/cleanup"]
        }))),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    let r = http::request(
        &host.addr,
        "PUT",
        "/v1/objects/parts/p1",
        &[("Content-Type", "application/vnd.leasehold.object+json")],
        // Owned by the node, which stays (an object owned by the widget
        // would go with the widget's deletion request).
        Some(&object(
            json!({"value": 1, "owner": {"kind": "nodes", "name": "n1"}}),
        )),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    put(
        &host,
        "/v1/objects/widgets/w1/status",
        r#"{"phase": "ready"}"#,
    )
    .await;
    put(
        &host,
        "/v1/objects/widgets/w1",
        r#"{"size": 4, "tags": ["a", "b"]}"#,
    )
    .await;
    let r = http::request(&host.addr, "DELETE", "/v1/objects/widgets/w1", &[], None)
        .await
        .unwrap();
    assert_eq!(r.status, 202, "marked, its finalizer holds it: {}", r.body);
    let epoch = lease(&host).await["epoch"].as_u64().unwrap();
    let before = all_objects(&host).await;
    assert_eq!(before.len(), 4, "{before:?}");

    // Export refuses while the lease is held.
    let file = dir.path().join("demo.json");
    let data_arg = data.to_str().unwrap();
    let file_arg = file.to_str().unwrap();
    let export = [
        "export",
        "--data-dir",
        data_arg,
        "--cluster",
        CLUSTER,
        "--output",
        file_arg,
    ];
    let (code, _, stderr) = run_to_end(&export, &[]);
    assert_ne!(code, 0);
    assert!(stderr.contains("are held"), "{stderr}");
    host.signal("TERM");
    assert_eq!(host.exited(START).await, Some(0));
    let (code, _, stderr) = run_to_end(&export, &[]);
    assert_eq!(code, 0, "{stderr}");
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(exported["leases"][0]["epoch"], epoch);

    let database = leasehold_host::testing::TestDatabase::create().await;
    let import = [
        "import",
        "--database-url",
        database.url(),
        "--input",
        file_arg,
    ];
    let (code, _, stderr) = run_to_end(&import, &[]);
    assert_eq!(code, 0, "{stderr}");
    // Not twice into the same cluster.
    let (code, _, stderr) = run_to_end(&import, &[]);
    assert_ne!(code, 0);
    assert!(stderr.contains("already holds objects"), "{stderr}");

    // A host on PostgreSQL: the same objects, and the next epoch above.
    let port = free_port();
    let pg = config("host-p", port, &dir.path().join("unused"), DEFAULT_TIMING).replace(
        "[http]",
        &format!("[database]\nurl = \"{}\"\n\n[http]", database.url()),
    );
    let mut on_pg = Replica::start(dir.path(), "on-postgres", port, &pg);
    on_pg.wait_healthy(START).await;
    leads(&on_pg, START).await;
    let after = all_objects(&on_pg).await;
    let comparable = |objects: &[Value]| -> Vec<Value> {
        objects
            .iter()
            .map(|o| {
                let mut o = o.clone();
                // Versions are each backend's own commit numbers.
                o.as_object_mut().unwrap().remove("version");
                o
            })
            .collect()
    };
    assert_eq!(comparable(&after), comparable(&before));
    let next = lease(&on_pg).await["epoch"].as_u64().unwrap();
    assert_eq!(
        next,
        epoch + 1,
        "the first grant on PostgreSQL follows the exported epoch"
    );
    on_pg.signal("TERM");
    on_pg.exited(START).await;

    // And back: from PostgreSQL into a new data directory, the epoch going
    // on above PostgreSQL's.
    let back = dir.path().join("back.json");
    let back_arg = back.to_str().unwrap();
    let (code, _, stderr) = run_to_end(
        &[
            "export",
            "--database-url",
            database.url(),
            "--cluster",
            CLUSTER,
            "--output",
            back_arg,
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let again = dir.path().join("again");
    let (code, _, stderr) = run_to_end(
        &[
            "import",
            "--data-dir",
            again.to_str().unwrap(),
            "--input",
            back_arg,
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let home = start(&dir, "host-e", &again, DEFAULT_TIMING).await;
    leads(&home, START).await;
    assert_eq!(comparable(&all_objects(&home).await), comparable(&before));
    let last = lease(&home).await["epoch"].as_u64().unwrap();
    assert_eq!(
        last,
        next + 1,
        "the first grant back home follows PostgreSQL's"
    );
}

/// Every object of the kinds the export test writes, in kind and name
/// order.
async fn all_objects(replica: &Replica) -> Vec<Value> {
    let mut all = Vec::new();
    for kind in ["nodes", "parts", "tasks", "widgets"] {
        let page = get(replica, &format!("/v1/objects/{kind}?limit=500"))
            .await
            .json();
        all.extend(page["items"].as_array().cloned().unwrap_or_default());
    }
    all
}

/// The faults of the embedded schedules: no network lies between a host
/// and its data directory, so these are the process faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGKILL, started again after a while.
    Kill,
    /// SIGSTOP for a while (past the ttl or not), then SIGCONT.
    Stop,
    /// SIGTERM (orderly shutdown), started again.
    Restart,
}

/// The fixed seeds every run replays; `LEASEHOLD_EMBEDDED_FAULT_SEED`
/// replays one schedule alone.
const SEEDS: [u64; 3] = [11, 12, 13];

/// Faults per schedule.
const FAULTS: usize = 6;

#[tokio::test]
async fn random_fault_schedules_on_one_data_directory_break_no_invariant() {
    let _one = ONE_AT_A_TIME.lock().await;
    let seeds: Vec<u64> = match std::env::var("LEASEHOLD_EMBEDDED_FAULT_SEED") {
        Ok(seed) => vec![seed.parse().expect("a seed is a number")],
        Err(_) => {
            let fresh = uuid::Uuid::new_v4().as_u128() as u64 % 1_000_000;
            SEEDS.iter().copied().chain([fresh]).collect()
        }
    };
    for seed in seeds {
        eprintln!(
            "embedded fault schedule, seed {seed} (replay: LEASEHOLD_EMBEDDED_FAULT_SEED={seed} \
             cargo test -p leasehold-tests --test embedded random_fault)"
        );
        run_schedule(seed).await;
    }
}

async fn run_schedule(seed: u64) {
    let mut random = SplitMix::new(seed);
    let dir = TempDir::new();
    let data = dir.path().join("data");
    let mut hosts = Vec::new();
    for i in 0..3 {
        hosts.push(start(&dir, &format!("host-{i}"), &data, FAST).await);
    }
    eventually("a host leads the scheduler", START, || async {
        for host in &hosts {
            if host.leads(SCHEDULER).await == Some(true) {
                return Some(());
            }
        }
        None
    })
    .await;
    let addrs: Vec<String> = hosts.iter().map(|h| h.addr.clone()).collect();
    let mut acks = Vec::new();
    for (i, node) in ["n1", "n2", "n3"].iter().enumerate() {
        let body = json!({"capacity": 1000});
        let r = put(
            &hosts[i],
            &format!("/v1/objects/nodes/{node}"),
            &body.to_string(),
        )
        .await;
        acks.push(ack("nodes", node, &r, body));
    }
    // The workload: a task every 100 ms through the hosts in turn; a
    // stopped or dead host's request fails and is not acknowledged.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let workload = tokio::spawn(async move {
        let mut acks = Vec::new();
        let mut n = 0;
        while !*stop_rx.borrow() {
            let addr = &addrs[n % addrs.len()];
            let name = format!("t{n}");
            let body = json!({"status": "pending", "n": n});
            if let Ok(r) = http::request_within(
                Duration::from_millis(500),
                addr,
                "PUT",
                &format!("/v1/objects/tasks/{name}"),
                &[],
                Some(&body.to_string()),
            )
            .await
                && (r.status == 200 || r.status == 201)
            {
                acks.push(ack("tasks", &name, &r.json(), body));
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        acks
    });
    let mut struck = Vec::new();
    for _ in 0..FAULTS {
        tokio::time::sleep(random.millis(300, 1500)).await;
        let fault = [Fault::Kill, Fault::Stop, Fault::Restart][random.below(3) as usize];
        // Half the faults aim at the leader, by the database's record.
        let target = if random.below(2) == 0 {
            leader(&data).and_then(|holder| hosts.iter().position(|h| h.name == holder))
        } else {
            None
        }
        .unwrap_or_else(|| random.below(hosts.len() as u64) as usize);
        let hold = random.millis(200, 2500);
        struck.push(format!("{fault:?} host-{target} for {hold:?}"));
        let host = &mut hosts[target];
        match fault {
            Fault::Kill => {
                host.kill().await;
                tokio::time::sleep(hold).await;
                host.restart();
            }
            Fault::Stop => {
                host.signal("STOP");
                tokio::time::sleep(hold).await;
                host.signal("CONT");
            }
            Fault::Restart => {
                host.signal("TERM");
                host.exited(START).await;
                tokio::time::sleep(hold.min(Duration::from_millis(500))).await;
                host.restart();
            }
        }
    }
    eprintln!("seed {seed}: {struck:?}");
    let _ = stop_tx.send(true);
    acks.extend(workload.await.expect("the workload runs"));
    for host in &hosts {
        host.wait_healthy(START).await;
    }
    // Settled: every acknowledged task assigned (the nodes have room for
    // all of them).
    let tasks: Vec<String> = acks
        .iter()
        .filter(|a| a.kind == "tasks")
        .map(|a| a.name.clone())
        .collect();
    assert!(
        tasks.len() > 10,
        "the workload made progress: {}",
        tasks.len()
    );
    for task in &tasks {
        assigned(&hosts[0], task).await;
    }
    let report = embedded::check(&data, CLUSTER, &acks);
    eprintln!("seed {seed}: {report}");
    report.assert_clean(&format!("embedded fault schedule, seed {seed}"));
    let tenures = report.tenures.get(SCHEDULER).copied().unwrap_or(0);
    assert!(
        tenures > 1,
        "seed {seed}: the faults moved the lease: {tenures} tenures"
    );
    for host in &mut hosts {
        host.signal("TERM");
        host.exited(START).await;
    }
}

fn ack(kind: &str, name: &str, answer: &Value, value: Value) -> Ack {
    Ack {
        kind: kind.to_string(),
        name: name.to_string(),
        version: answer["version"].as_u64().expect("a version"),
        value,
    }
}

/// The scheduler's holder by the database file, if a tenure is open.
fn leader(data: &Path) -> Option<String> {
    let connection = embedded::open(data);
    connection
        .query_row(
            "SELECT holder FROM leasehold_tenures
              WHERE cluster = ?1 AND lease = ?2 AND ended_at IS NULL",
            [CLUSTER, SCHEDULER],
            |r| r.get(0),
        )
        .ok()
}

#[tokio::test]
async fn the_embedded_checker_reports_a_hand_written_broken_record() {
    let dir = TempDir::new();
    let data = dir.path().join("data");
    // A real schema, made by the host's own migrations.
    leasehold_host::embedded::EmbeddedDb::open(&data, leasehold_host::embedded::Access::Shared)
        .await
        .unwrap();
    let connection = embedded::open(&data);
    connection
        .execute_batch(
            "INSERT INTO leasehold_leases
                    (cluster, name, holder, epoch, acquired_at, renewed_at, expires_at,
                     expires_mono, boot, released)
             VALUES ('demo', 'scheduler', 'b', 2, 20, 20, 30, 0, 'x', 1);
             INSERT INTO leasehold_tenures
                    (cluster, lease, epoch, holder, endpoint, acquired_at, ended_at,
                     end_reason, writes, granted_mark, released_mark)
             VALUES ('demo', 'scheduler', 1, 'a', 'e', 10, 25, 'superseded', 0, 0, NULL),
                    ('demo', 'scheduler', 2, 'b', 'e', 20, 30, 'released', 1, 5, 8);
             -- Epoch 1's write after grant 2 (revision 7 > mark 5); epoch 2's
             -- by the wrong holder; epoch 2's after its release (9 > 8).
             INSERT INTO leasehold_changes
                    (cluster, position, revision, at, kind, name, change, version,
                     lease, epoch, holder, labels)
             VALUES ('demo', 7, 7, 0, 'tasks', 't1', 'updated', 7, 'scheduler', 1, 'a', '{}'),
                    ('demo', 8, 6, 0, 'tasks', 't2', 'updated', 6, 'scheduler', 2, 'a', '{}'),
                    ('demo', 9, 9, 0, 'tasks', 't3', 'updated', 9, 'scheduler', 2, 'b', '{}');
             INSERT INTO leasehold_objects
                    (cluster, kind, name, version, value, generation)
             VALUES ('demo', 'nodes', 'n1', 1, '{\"capacity\":1}', 1),
                    ('demo', 'tasks', 't1', 7, '{\"status\":\"assigned\",\"node\":\"n1\"}', 1),
                    ('demo', 'tasks', 't3', 9, '{\"status\":\"assigned\",\"node\":\"n1\"}', 1);
             INSERT INTO leasehold_events
                    (cluster, seq, revision, at, kind, name, reason, message)
             VALUES ('demo', 10, 7, 0, 'tasks', 't1', 'Assigned', 'assigned to node n1'),
                    ('demo', 11, 9, 0, 'tasks', 't1', 'Assigned', 'assigned to node n1');",
        )
        .unwrap();
    let lost = Ack {
        kind: "tasks".into(),
        name: "t9".into(),
        version: 3,
        value: json!({"status": "pending"}),
    };
    let report = embedded::check(&data, CLUSTER, &[lost]);
    eprintln!("{report}");
    for rule in [
        Rule::CommittedAfterNextGrant,
        Rule::WrongTenure,
        Rule::AfterRelease,
        Rule::WriteCount,
        Rule::Overlap,
        Rule::DoubleAssignment,
        Rule::Assignment,
        Rule::Capacity,
        Rule::LostAck,
    ] {
        assert!(report.breaks(rule), "{rule:?} is not reported:\n{report}");
    }
    // And a clean record of the same shape is clean.
    let clean = dir.path().join("clean");
    leasehold_host::embedded::EmbeddedDb::open(&clean, leasehold_host::embedded::Access::Shared)
        .await
        .unwrap();
    embedded::check(&clean, CLUSTER, &[]).assert_clean("an empty record");
}
