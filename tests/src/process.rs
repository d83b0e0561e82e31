//! Real `leasehold` processes for multi-process tests: each replica gets
//! its own config file, port and log file, and is killed when dropped.
//! Every wait here on a process (its exit, its health, its state) has a
//! bound and fails with a message naming what it waited for; none may
//! block a test forever.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::http;

/// The `leasehold` binary built alongside the tests.
pub fn binary() -> PathBuf {
    binary_named("leasehold")
}

/// The deliberately broken `leasehold-unfenced` binary: the same program
/// with the fence check compiled out of fenced commits, built by the
/// test-fixture package of that name (tests/fixtures/unfenced-host, which
/// enables leasehold-host's feature `unsafe-disable-fence`). Only the
/// fault suite runs it, to prove its invariant checker catches stale-epoch
/// writes.
pub fn unfenced_binary() -> PathBuf {
    built_binary("leasehold-unfenced", "cargo build -p leasehold-unfenced")
}

/// A binary of the host package, next to the test executable.
pub fn binary_named(name: &str) -> PathBuf {
    built_binary(name, &format!("cargo build -p leasehold-host --bin {name}"))
}

/// The binary `name` next to the test executable, which `build` builds.
fn built_binary(name: &str, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build it with `{build}` (`cargo xtask test` does)",
        path.display()
    );
    path
}

/// A loopback port nobody listens on right now, for a process the test
/// starts to listen on.
///
/// Taken below the kernel's ephemeral range, so no outgoing connection
/// (a host's or a proxy's session to PostgreSQL) can take it before the
/// process binds it, and handed out at most once per test process, so two
/// replicas never get the same port (asking the kernel for port 0 twice
/// can return the same port once the first probe released it).
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral.max(10_001));
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..10_000 {
        let random = uuid::Uuid::new_v4().as_u128();
        let port = low + (random % u128::from(high - low)) as u16;
        if handed_out.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
    panic!("no free loopback port between {low} and {high}");
}

/// Longest a one-shot command (`leasehold check`, `migrate`, `leases`) may
/// run: `check` compiles every component, which takes seconds in a debug
/// build on busy cores, so this only catches a command that hangs.
const RUN_TO_END: Duration = Duration::from_secs(120);

/// How often a bounded wait on a child process or on another process's
/// observable state looks again.
const CHILD_POLL: Duration = Duration::from_millis(20);

/// How often [`eventually`] and [`Replica::exited`] look again: often
/// enough that a measured handover is not rounded up much.
const STATE_POLL: Duration = Duration::from_millis(10);

/// Longest a SIGKILLed process takes to be reaped: the kernel ends it at
/// once, so this only catches a process that cannot be killed.
const KILLED_EXIT: Duration = Duration::from_secs(10);

/// Run `leasehold` with `args` to completion; returns (exit code, stdout,
/// stderr). A command still running after [`RUN_TO_END`] is killed and the
/// test fails with what it printed so far.
pub fn run_to_end(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(binary());
    // The test's own database URL (CI exports one) would override the URL in
    // the config under test; only `env` may set it.
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("LEASEHOLD_DATABASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run leasehold");
    // Drained on their own threads: a command writing more than a pipe
    // holds would otherwise block before it exits.
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
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for leasehold") {
            break status;
        }
        if started.elapsed() > RUN_TO_END {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`leasehold {}` did not finish within {RUN_TO_END:?}; stdout:\n{}\nstderr:\n{}",
                args.join(" "),
                stdout.join().unwrap_or_default(),
                stderr.join().unwrap_or_default()
            );
        }
        std::thread::sleep(CHILD_POLL);
    };
    (
        status.code().unwrap_or(-1),
        stdout.join().expect("stdout reader"),
        stderr.join().expect("stderr reader"),
    )
}

/// Longest a probe of a replica's own view (`/metrics`, `/readyz`) waits.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// One running replica.
pub struct Replica {
    /// A name for messages.
    pub name: String,
    /// host:port of its HTTP API.
    pub addr: String,
    /// Its config file.
    pub config: PathBuf,
    binary: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Replica {
    /// Write `config` (TOML) into `dir` and start `leasehold run` on it.
    /// The config must listen on `port`.
    pub fn start(dir: &Path, name: &str, port: u16, config: &str) -> Self {
        Self::start_binary(binary(), dir, name, port, config)
    }

    /// [`Replica::start`] running `binary` (see [`unfenced_binary`]).
    pub fn start_binary(binary: PathBuf, dir: &Path, name: &str, port: u16, config: &str) -> Self {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, config).expect("write config");
        let log = dir.join(format!("{name}.log"));
        let mut replica = Self {
            name: name.to_string(),
            addr: format!("127.0.0.1:{port}"),
            config: path,
            binary,
            log,
            child: None,
        };
        replica.spawn();
        replica
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(&self.binary)
            .args(["run", "--config"])
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .env_remove("LEASEHOLD_DATABASE_URL")
            .spawn()
            .expect("spawn leasehold");
        self.child = Some(child);
    }

    /// Start the same replica again after it stopped.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is still running", self.name);
        self.spawn();
    }

    /// Replace the config file; the next [`Replica::restart`] reads it.
    pub fn set_config(&mut self, config: &str) {
        std::fs::write(&self.config, config).expect("write config");
    }

    /// Whether the process is still running (a stopped one is).
    pub fn running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    /// Wait without blocking the test's runtime (proxies and clients keep
    /// running) for the process to exit; returns its exit code.
    pub async fn exited(&mut self, limit: Duration) -> Option<i32> {
        let started = Instant::now();
        loop {
            let Some(child) = self.child.as_mut() else {
                panic!(
                    "{} is not running (it exited on its own?):\n{}",
                    self.name,
                    self.log_tail(20)
                );
            };
            if let Some(status) = child.try_wait().expect("wait") {
                self.child = None;
                return Some(status.code().unwrap_or(-1));
            }
            if started.elapsed() > limit {
                return None;
            }
            tokio::time::sleep(STATE_POLL).await;
        }
    }

    /// SIGKILL (a stopped process dies too) and reap it.
    pub async fn kill(&mut self) {
        if self.running() {
            self.signal("KILL");
            self.exited(KILLED_EXIT)
                .await
                .expect("a killed process exits");
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Send a signal (`TERM`, `KILL`, `STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Wait for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let started = Instant::now();
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                self.child = None;
                return Some(status.code().unwrap_or(-1));
            }
            if started.elapsed() > limit {
                return None;
            }
            std::thread::sleep(CHILD_POLL);
        }
    }

    /// The replica's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// `/metrics` as text, if the replica answers within a few seconds
    /// (a stopped replica accepts the connection but never answers).
    pub async fn metrics(&self) -> Option<String> {
        let r = http::request_within(PROBE_TIMEOUT, &self.addr, "GET", "/metrics", &[], None)
            .await
            .ok()?;
        (r.status == 200).then_some(r.body)
    }

    /// One sample of `/metrics`: `series` is the name with its labels, as
    /// printed (`leasehold_leader{controller="scheduler"}`).
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let metrics = self.metrics().await?;
        let prefix = format!("{series} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Whether this replica itself believes it leads `controller` (its
    /// `leasehold_leader` gauge), without a database round trip: it
    /// answers while the replica is cut off from the database.
    pub async fn leads(&self, controller: &str) -> Option<bool> {
        self.metric(&format!("leasehold_leader{{controller=\"{controller}\"}}"))
            .await
            .map(|v| v == 1.0)
    }

    /// `/readyz`: status code and JSON body.
    pub async fn readyz(&self) -> Option<(u16, serde_json::Value)> {
        let r = http::request_within(PROBE_TIMEOUT, &self.addr, "GET", "/readyz", &[], None)
            .await
            .ok()?;
        Some((r.status, serde_json::from_str(&r.body).ok()?))
    }

    /// Wait until `/healthz` answers.
    pub async fn wait_healthy(&self, limit: Duration) {
        let started = Instant::now();
        loop {
            if let Ok(r) = http::get(&self.addr, "/healthz").await
                && r.status == 200
            {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "{} did not become healthy within {limit:?}; log:\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(CHILD_POLL).await;
        }
    }

    /// Every lease `/v1/leases` lists, as one JSON array: the `items` of
    /// each page, following `next` to the last page.
    pub async fn leases(&self) -> Option<serde_json::Value> {
        let mut leases = Vec::new();
        let mut path = "/v1/leases".to_string();
        loop {
            let r = http::get(&self.addr, &path).await.ok()?;
            if r.status != 200 {
                return None;
            }
            let page = r.json();
            leases.extend(page["items"].as_array()?.iter().cloned());
            match page["next"].as_str() {
                Some(after) => path = format!("/v1/leases?after={after}"),
                None => return Some(serde_json::Value::Array(leases)),
            }
        }
    }

    /// Whether this replica holds `lease` now, by its own API.
    pub async fn holds(&self, lease: &str) -> bool {
        self.leases().await.is_some_and(|leases| {
            leases
                .as_array()
                .into_iter()
                .flatten()
                .any(|l| l["name"] == lease && l["held_here"] == true)
        })
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Poll `probe` every few milliseconds until it returns `Some`, or panic
/// with `what` after `limit`. For waiting on another process's observable
/// state (there is no notification to subscribe to across processes).
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        tokio::time::sleep(STATE_POLL).await;
    }
}
