//! A PostgreSQL cluster of the test's own, for scenarios that must do to
//! the server what no test may do to a shared one: restart it, stop it,
//! make a streaming standby of it ([`ScratchCluster::standby_of`],
//! `pg_basebackup`) and promote that standby.
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
        let cluster = Self::made();
        cluster.ctl("start");
        cluster
    }

    /// Create and start a cluster that speaks TLS with `cert` (its server
    /// certificate and key), trusts `client_ca` for client certificates,
    /// and authenticates by `hba` (the whole `pg_hba.conf`; `local`
    /// connections are the test's own way in). Returns once it accepts
    /// connections.
    pub fn create_with_tls(cert: &crate::pki::Issued, client_ca: &Path, hba: &str) -> Self {
        let cluster = Self::made();
        let conf = cluster.config_directory();
        // The server reads its key only if its own user owns it, 0600.
        let place = |from: &Path, name: &str| {
            let to = Path::new(&conf).join(name);
            std::fs::copy(from, &to)
                .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
            let owned = Command::new("chown")
                .args(["postgres:postgres", to.to_str().expect("utf-8 path")])
                .status()
                .unwrap_or_else(|e| panic!("chown not runnable: {e}"));
            assert!(owned.success(), "chown of {} failed", to.display());
            crate::pki::owner_only(&to);
            to.display().to_string()
        };
        let cert_file = place(&cert.cert, "server.pem");
        let key_file = place(&cert.key, "server.key");
        let ca_file = place(client_ca, "client-ca.pem");
        let settings = format!(
            "\nssl = on\nssl_cert_file = '{cert_file}'\nssl_key_file = '{key_file}'\n\
             ssl_ca_file = '{ca_file}'\nlisten_addresses = 'localhost'\n"
        );
        let postgresql_conf = format!("{conf}/postgresql.conf");
        let mut text = std::fs::read_to_string(&postgresql_conf)
            .unwrap_or_else(|e| panic!("read {postgresql_conf}: {e}"));
        text.push_str(&settings);
        std::fs::write(&postgresql_conf, text)
            .unwrap_or_else(|e| panic!("write {postgresql_conf}: {e}"));
        std::fs::write(format!("{conf}/pg_hba.conf"), hba)
            .unwrap_or_else(|e| panic!("write {conf}/pg_hba.conf: {e}"));
        cluster.ctl("start");
        cluster
    }

    /// `psql` through the server's Unix socket (whatever `pg_hba.conf`
    /// says of TCP): one value `query` answers in database `database`.
    pub fn local_sql(&self, database: &str, query: &str) -> String {
        let output = Command::new(self.bin("psql"))
            .args(["-h", "/var/run/postgresql", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", database, "-XtAc", query])
            .output()
            .unwrap_or_else(|e| panic!("psql not runnable: {e}"));
        assert!(
            output.status.success(),
            "{query:?} on {} failed: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// The folder of its `postgresql.conf` and `pg_hba.conf`.
    fn config_directory(&self) -> String {
        format!("/etc/postgresql/{}/{}", self.version, self.name)
    }

    /// A new cluster that is a streaming standby of `primary` (asynchronous
    /// replication, hot standby: it answers reads and refuses writes),
    /// streaming from `primary`'s own port.
    pub fn standby_of(primary: &ScratchCluster) -> Self {
        Self::standby_streaming_from(primary, primary.port)
    }

    /// [`ScratchCluster::standby_of`], streaming through `port` on
    /// localhost (a fault proxy in front of `primary`, so a test can cut
    /// replication). Made by `pg_basebackup -R` over that port: the data
    /// directory is `primary`'s as of now, and the standby follows it from
    /// there. Returns once the standby accepts connections.
    pub fn standby_streaming_from(primary: &ScratchCluster, port: u16) -> Self {
        let standby = Self::made();
        let data = standby.data_directory();
        std::fs::remove_dir_all(&data)
            .unwrap_or_else(|e| panic!("empty the standby's data directory {data}: {e}"));
        let output = Command::new(standby.bin("pg_basebackup"))
            .args(["-D", &data, "-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-U", "postgres", "-X", "stream", "-R", "-c", "fast"])
            .output()
            .unwrap_or_else(|e| panic!("pg_basebackup not runnable: {e}"));
        assert!(
            output.status.success(),
            "pg_basebackup of {} into {} failed: {}",
            primary.name,
            standby.name,
            String::from_utf8_lossy(&output.stderr)
        );
        // The server runs as `postgres`; a backup taken as root is not
        // its own until handed over.
        let owned = Command::new("chown")
            .args(["-R", "postgres:postgres", &data])
            .status()
            .unwrap_or_else(|e| panic!("chown not runnable: {e}"));
        assert!(owned.success(), "chown of {data} failed");
        standby.ctl("start");
        standby
    }

    /// A new cluster, not started.
    fn made() -> Self {
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
        cluster
    }

    /// `pg_ctlcluster … promote`: the standby ends recovery, moves to a new
    /// timeline and takes writes; returns once it says it is no longer in
    /// recovery.
    pub fn promote(&self) {
        self.ctl("promote");
        let start = Instant::now();
        while self.sql("SELECT pg_is_in_recovery()") != "f" {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "standby {} still in recovery 30 s after promotion",
                self.name
            );
            // Polling the server's own state: nothing notifies the end of
            // recovery.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until this standby has replayed everything `primary` has
    /// written so far.
    pub fn catch_up_with(&self, primary: &ScratchCluster) {
        let written = primary.sql("SELECT pg_current_wal_lsn()");
        let start = Instant::now();
        while self.sql(&format!(
            "SELECT pg_last_wal_replay_lsn() >= '{written}'::pg_lsn"
        )) != "t"
        {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "standby {} has not replayed up to {written} within 30 s",
                self.name
            );
            // As in `promote`: replay progress is only polled.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One value `query` answers in the `postgres` database (`psql -tAc`).
    pub fn sql(&self, query: &str) -> String {
        let output = Command::new(self.bin("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-XtAc", query])
            .output()
            .unwrap_or_else(|e| panic!("psql not runnable: {e}"));
        assert!(
            output.status.success(),
            "{query:?} on {} failed: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// The path of one of the server version's programs (`psql`,
    /// `pg_dump`, `pg_restore`, `pg_basebackup`).
    pub fn bin(&self, program: &str) -> String {
        format!("/usr/lib/postgresql/{}/bin/{program}", self.version)
    }

    /// The data directory, as `pg_lsclusters` shows it.
    fn data_directory(&self) -> String {
        let output = Command::new("pg_lsclusters")
            .args(["-h", &self.version, &self.name])
            .output()
            .unwrap_or_else(|e| panic!("pg_lsclusters not runnable: {e}"));
        String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .nth(5)
            .unwrap_or_else(|| panic!("pg_lsclusters shows no data directory for {}", self.name))
            .to_string()
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
        if action == "stop" || action == "restart" {
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

/// The path of a program of the newest PostgreSQL installed (`psql`,
/// `pg_dump`, `pg_restore`), for any server a test reaches.
pub fn server_program(program: &str) -> String {
    format!(
        "/usr/lib/postgresql/{}/bin/{program}",
        newest_server_version()
    )
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
