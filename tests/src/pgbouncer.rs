//! A PgBouncer of the test's own, in transaction pooling, in front of the
//! test server: what operators put between hosts and PostgreSQL, so the
//! host's `[database] pooler = "transaction"` mode is tested against the
//! real thing.
//!
//! [`PgBouncer::start`] installs PgBouncer when `pgbouncer` is not on the
//! machine (`apt-get install -y pgbouncer`: CI runs as root on Debian 12,
//! whose PgBouncer is 1.18, without protocol-level prepared statements),
//! and panics saying what failed when it cannot: nothing is skipped. The
//! process runs in the foreground on a free port, with its config in a
//! throwaway folder: `pool_mode = transaction`, `auth_type = trust`, every
//! database forwarded to the server, and [`POOL_SIZE`] server connections
//! per database and user, so the hosts' many client connections really
//! share a few server sessions. It is stopped (by its own pid) when the
//! value is dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::TempDir;

/// Server connections per database and user (`default_pool_size`): few,
/// so consecutive transactions of one client run on different server
/// sessions and session state would be seen to leak.
pub const POOL_SIZE: usize = 3;

/// A running PgBouncer; stopped when dropped.
pub struct PgBouncer {
    child: Child,
    port: u16,
    upstream: SocketAddr,
    log: PathBuf,
    _dir: TempDir,
}

impl PgBouncer {
    /// Start one in front of the server at `upstream` (installing PgBouncer
    /// first if needed); returns once it accepts connections.
    pub fn start(upstream: SocketAddr) -> Self {
        let program = installed();
        let dir = TempDir::new();
        let port = crate::process::free_port();
        let ini = dir.path().join("pgbouncer.ini");
        let users = dir.path().join("userlist.txt");
        let log = dir.path().join("pgbouncer.log");
        // trust still wants every user listed.
        std::fs::write(&users, "\"postgres\" \"\"\n").expect("write the PgBouncer user list");
        // PgBouncer refuses to run as root; it drops to `user` when
        // started as root (CI), and needs to read its files as that user.
        let root = running_as_root();
        let drop_to = if root { "user = postgres\n" } else { "" };
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 * = host={host} port={upstream_port}\n\
                 \n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {users}\n\
                 pool_mode = transaction\n\
                 default_pool_size = {POOL_SIZE}\n\
                 min_pool_size = 0\n\
                 reserve_pool_size = 0\n\
                 max_client_conn = 500\n\
                 max_db_connections = {POOL_SIZE}\n\
                 server_reset_query =\n\
                 {drop_to}",
                host = upstream.ip(),
                upstream_port = upstream.port(),
                users = users.display(),
            ),
        )
        .expect("write pgbouncer.ini");
        if root {
            for path in [dir.path(), &ini, &users] {
                let status = Command::new("chmod")
                    .arg(if path.is_dir() { "755" } else { "644" })
                    .arg(path)
                    .status()
                    .unwrap_or_else(|e| panic!("chmod not runnable: {e}"));
                assert!(status.success(), "chmod of {} failed", path.display());
            }
        }
        let output = std::fs::File::create(&log).expect("create the PgBouncer log");
        let child = Command::new(&program)
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(output.try_clone().expect("PgBouncer log"))
            .stderr(output)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let mut bouncer = Self {
            child,
            port,
            upstream,
            log,
            _dir: dir,
        };
        bouncer.wait_accepting(Duration::from_secs(20));
        bouncer
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The server it forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// `url` (a URL of a database on the upstream server) through this
    /// PgBouncer.
    pub fn url_for(&self, url: &str) -> String {
        let mut url = url::Url::parse(url).expect("database url");
        url.set_host(Some("127.0.0.1")).expect("host");
        url.set_port(Some(self.port)).expect("port");
        url.to_string()
    }

    /// What it logged so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_accepting(&mut self, limit: Duration) {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("PgBouncer exited at start ({status}):\n{}", self.log());
            }
            if std::net::TcpStream::connect(self.addr()).is_ok() {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "PgBouncer did not accept connections on {} within {limit:?}:\n{}",
                self.addr(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The `pgbouncer` program, installed with apt when it is not there.
fn installed() -> PathBuf {
    if let Some(found) = find() {
        return found;
    }
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = find() {
        return found;
    }
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "pgbouncer"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
    };
    let mut output = install();
    if !output.as_ref().is_ok_and(|o| o.status.success()) {
        // A fresh machine may have no package lists yet.
        let _ = Command::new("apt-get").arg("update").output();
        output = install();
    }
    match output {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "pgbouncer is not installed and `apt-get install -y pgbouncer` failed ({}): {}\n\
             install PgBouncer (Debian: apt-get install pgbouncer) and run the tests again",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "pgbouncer is not installed and apt-get could not be run ({e}); install PgBouncer \
             (Debian: apt-get install pgbouncer) and run the tests again"
        ),
    }
    find().unwrap_or_else(|| {
        panic!("apt-get installed pgbouncer but no `pgbouncer` program is on PATH or in /usr/sbin")
    })
}

fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("pgbouncer"))
        .find(|candidate| is_file(candidate))
}

fn is_file(path: &Path) -> bool {
    path.is_file()
}
