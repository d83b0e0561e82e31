//! A PostgreSQL cluster of the test's own, for scenarios that must do to
//! the server what no test may do to a shared one: restart it, stop it,
//! or (later) make a standby of it.
//!
//! The cluster is made with Debian's cluster tools (`pg_createcluster`,
//! `pg_ctlcluster`, `pg_dropcluster`), which every machine that runs the
//! suite has; it listens on localhost on a free port with `trust`
//! authentication, starts only when told (`--start-conf=manual`) and is
//! dropped, data and all, when the value is. The tools need the rights of
//! root or of the `postgres` user: CI runs as root.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// One scratch cluster; dropped (stopped and deleted) with this value.
pub struct ScratchCluster {
    version: String,
    name: String,
    port: u16,
}

impl ScratchCluster {
    /// Create and start a new cluster; returns once it accepts
    /// connections. Panics with what to install or fix when the cluster
    /// tools are missing or refuse.
    pub fn create() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let version = newest_server_version();
        let name = format!(
            "lh-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let port = crate::process::free_port();
        let cluster = Self {
            version,
            name,
            port,
        };
        cluster.tool(
            "pg_createcluster",
            &[
                "-p",
                &port.to_string(),
                "--start-conf=manual",
                "-o",
                // A restart must not wait for a checkpoint's fsyncs; the
                // data of a scratch cluster is worth nothing after the test.
                "fsync=off",
                "-o",
                "max_connections=200",
                "--",
                "--auth=trust",
            ],
            true,
        );
        cluster.ctl("start");
        cluster
    }

    /// A URL of the cluster's `postgres` database as superuser.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Its TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `pg_ctlcluster … restart` (fast shutdown: every session is ended,
    /// open transactions roll back); returns once it accepts connections
    /// again.
    pub fn restart(&self) {
        self.ctl("restart");
    }

    /// `pg_ctlcluster … stop` (fast).
    pub fn stop(&self) {
        self.ctl("stop");
    }

    /// `pg_ctlcluster … start`; returns once it accepts connections.
    pub fn start(&self) {
        self.ctl("start");
    }

    fn ctl(&self, action: &str) {
        let mut command = Command::new("pg_ctlcluster");
        command.arg("--skip-systemctl-redirect");
        if action != "start" {
            command.args(["--mode", "fast"]);
        }
        let status = command
            .args([&self.version, &self.name, action])
            .status()
            .unwrap_or_else(|e| panic!("pg_ctlcluster {action}: {e}"));
        assert!(
            status.success(),
            "pg_ctlcluster {} {} {action} failed ({status}); see /var/log/postgresql/postgresql-{}-{}.log",
            self.version,
            self.name,
            self.version,
            self.name
        );
        if action != "stop" {
            self.wait_ready(Duration::from_secs(30));
        }
    }

    /// Wait until the server answers `pg_isready`.
    fn wait_ready(&self, limit: Duration) {
        let start = Instant::now();
        loop {
            let ready = Command::new("pg_isready")
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "scratch cluster {} on port {} not ready after {limit:?}",
                self.name,
                self.port
            );
            // Polling a server's readiness: nothing else tells us when it
            // accepts connections.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn tool(&self, tool: &str, extra: &[&str], must: bool) {
        let output = Command::new(tool)
            .arg(&self.version)
            .arg(&self.name)
            .args(extra)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "{tool} not runnable ({e}): the scratch-cluster tests need Debian's \
                     postgresql-common tools and the rights of root or postgres"
                )
            });
        if must {
            assert!(
                output.status.success(),
                "{tool} {} {} failed: {}{}",
                self.version,
                self.name,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

impl Drop for ScratchCluster {
    fn drop(&mut self) {
        self.tool("pg_dropcluster", &["--stop"], false);
    }
}

/// The newest PostgreSQL server installed (`/usr/lib/postgresql/<v>`).
fn newest_server_version() -> String {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, String)> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}: no PostgreSQL server installed", root.display()))
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let number = name.parse::<u32>().ok()?;
            root.join(&name)
                .join("bin/postgres")
                .is_file()
                .then_some((number, name))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, name)| name)
        .unwrap_or_else(|| panic!("no PostgreSQL server under {}", root.display()))
}
