//! A PostgreSQL cluster run by Patroni, of the test's own: one etcd member
//! as Patroni's store and two or more Patroni-managed PostgreSQL nodes,
//! everything on loopback ports and in a throwaway folder, for failover
//! rehearsals an operator's high-availability setup would put Leasehold
//! through.
//!
//! # What is installed, and how
//!
//! Debian's packages, at pinned versions ([`PATRONI_PACKAGE`],
//! [`ETCD_PACKAGE`]): [`installed`] runs `apt-get install` the first time
//! a test needs them and they are missing or at another version (as
//! root, which CI is; anyone else is told the command), after `apt-get
//! update` when the package lists do not know them yet, waiting for the
//! package manager's lock rather than failing beside another install.
//! PostgreSQL itself is the machine's newest server
//! (`/usr/lib/postgresql/<v>/bin`), as for the scratch clusters.
//!
//! # The cluster
//!
//! Patroni is configured from scratch here ([`PatroniCluster::start`]):
//! the etcd v3 API as its store, a leader key of `ttl` 20 s renewed every
//! `loop_wait` 1 s (`retry_timeout` 5 s: `loop_wait + 2 × retry_timeout
//! <= ttl`), `primary_start_timeout` 0 so that a primary whose PostgreSQL
//! dies is failed over at once instead of being restarted in place,
//! `maximum_lag_on_failover` 1 GiB (an asynchronous replica that fell far
//! behind may still be promoted: the failover may lose commits), and
//! `synchronous_mode` on request. `use_pg_rewind` (with `wal_log_hints`)
//! lets a former primary rejoin as a replica. Every node listens on its
//! own port with `trust` authentication; its *advertised* address (the one
//! the other nodes replicate from) is a [`FaultProxy`] in front of it, so
//! a test can cut a node's outgoing replication
//! ([`PatroniCluster::replication_from`]) while clients still reach it.
//!
//! PostgreSQL refuses to run as root: when the test runs as root, Patroni
//! (and so PostgreSQL) runs as the `postgres` user, which owns each node's
//! folder. Every wait polls real state (Patroni's REST API, the servers'
//! own WAL positions) and is bounded. On a failing test (a panic while
//! the cluster is alive) the cluster prints its members as Patroni's REST
//! API shows them and the tail of every Patroni and etcd log. Dropping it
//! stops every process it started, by process id.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::TempDir;
use crate::process::free_port;
use crate::proxy::FaultProxy;

/// Debian's Patroni package, at the version the tests were written for.
pub const PATRONI_PACKAGE: (&str, &str) = ("patroni", "3.0.2-1");

/// Debian's etcd server package (etcd 3.4.23), Patroni's store here.
pub const ETCD_PACKAGE: (&str, &str) = ("etcd-server", "3.4.23-4+b4");

/// Seconds the leader key lives without a renewal (Patroni's `ttl`): the
/// documented minimum. A crashed PostgreSQL is failed over without waiting
/// for it (`primary_start_timeout` 0); it bounds a dead Patroni.
const TTL: u64 = 20;

/// Seconds between Patroni's rounds (`loop_wait`), the least allowed: how
/// soon the primary's Patroni sees its PostgreSQL gone.
const LOOP_WAIT: u64 = 1;

/// Patroni's `retry_timeout`: `LOOP_WAIT + 2 × RETRY_TIMEOUT <= TTL`.
const RETRY_TIMEOUT: u64 = 5;

const _: () = assert!(LOOP_WAIT + 2 * RETRY_TIMEOUT <= TTL);

/// Bytes a replica may lag and still be promoted: far more than any test
/// writes, so a replica cut off from its primary stays a candidate and the
/// failover loses what it never received.
pub const MAXIMUM_LAG_ON_FAILOVER: u64 = 1 << 30;

/// Longest the cluster takes to form (etcd up, one node initialized,
/// every other one cloned and streaming): a hang detector.
const FORM_LIMIT: Duration = Duration::from_secs(90);

/// How often a wait on the cluster's state looks again.
const POLL: Duration = Duration::from_millis(50);

/// Longest one request to a Patroni REST API or etcd may take.
const API_LIMIT: Duration = Duration::from_secs(2);

/// Lines of each log a failing test prints.
const TAIL_LINES: usize = 40;

/// The cluster's shape.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// PostgreSQL nodes (at least 2).
    pub nodes: usize,
    /// Patroni's `synchronous_mode`: a commit returns once a synchronous
    /// standby has it, and only that standby may be promoted.
    pub synchronous: bool,
}

/// One member as Patroni's REST API lists it (`GET /cluster`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its name (`n0`, `n1`, ...).
    pub name: String,
    /// `leader`, `replica` or `sync_standby`.
    pub role: String,
    /// `running`, `stopped`, `starting`, `crashed`, ...
    pub state: String,
    /// Its WAL timeline, when its PostgreSQL runs.
    pub timeline: Option<u64>,
}

/// One node: a Patroni process and the PostgreSQL it runs.
pub struct Node {
    /// Its member name.
    pub name: String,
    /// The port its PostgreSQL listens on.
    pub pg_port: u16,
    /// The port of its Patroni REST API.
    pub api_port: u16,
    /// In front of its PostgreSQL: the address it advertises, which the
    /// other nodes replicate from.
    advertised: FaultProxy,
    dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn api(&self) -> String {
        format!("127.0.0.1:{}", self.api_port)
    }

    /// The process id of its postmaster, when one runs on its data
    /// directory (read from `postmaster.pid` and checked against
    /// `/proc`, so a stale file never names another process).
    fn postmaster(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.data_dir().join("postmaster.pid")).ok()?;
        let pid: i32 = text.lines().next()?.trim().parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let data = self.data_dir();
        let data = data.to_str()?.as_bytes();
        cmdline
            .windows(data.len())
            .any(|w| w == data)
            .then_some(pid)
    }
}

/// etcd and the Patroni nodes; everything stops when dropped.
pub struct PatroniCluster {
    scope: String,
    synchronous: bool,
    etcd_port: u16,
    etcd: Option<Child>,
    etcd_log: PathBuf,
    nodes: Vec<Node>,
    dir: TempDir,
}

impl PatroniCluster {
    /// Install what is missing, start etcd and `settings.nodes` Patroni
    /// nodes, and return once one leads, every other one streams from it
    /// and (synchronous mode) one is its synchronous standby.
    pub async fn start(settings: Settings) -> Self {
        assert!(settings.nodes >= 2, "a failover needs at least two nodes");
        let (patroni, etcd) = installed();
        let dir = TempDir::new();
        let scope = format!("lh-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let runner = Runner::new();
        let (etcd_port, peer_port) = (free_port(), free_port());
        let etcd_log = dir.path().join("etcd.log");
        let etcd_child = spawn_logged(
            Command::new(&etcd)
                .args(["--name", &scope, "--data-dir"])
                .arg(dir.path().join("etcd"))
                .args([
                    "--listen-client-urls",
                    &format!("http://127.0.0.1:{etcd_port}"),
                ])
                .args([
                    "--advertise-client-urls",
                    &format!("http://127.0.0.1:{etcd_port}"),
                ])
                .args([
                    "--listen-peer-urls",
                    &format!("http://127.0.0.1:{peer_port}"),
                ])
                .args([
                    "--initial-advertise-peer-urls",
                    &format!("http://127.0.0.1:{peer_port}"),
                ])
                .args([
                    "--initial-cluster",
                    &format!("{scope}=http://127.0.0.1:{peer_port}"),
                ])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", &scope]),
            &etcd_log,
        );
        let mut cluster = Self {
            scope,
            synchronous: settings.synchronous,
            etcd_port,
            etcd: Some(etcd_child),
            etcd_log,
            nodes: Vec::new(),
            dir,
        };
        cluster.wait_etcd_healthy().await;
        for i in 0..settings.nodes {
            let name = format!("n{i}");
            let (pg_port, api_port) = (free_port(), free_port());
            let advertised =
                FaultProxy::start_opaque(SocketAddr::from(([127, 0, 0, 1], pg_port))).await;
            let node_dir = cluster.dir.path().join(&name);
            std::fs::create_dir_all(&node_dir)
                .unwrap_or_else(|e| panic!("create {}: {e}", node_dir.display()));
            runner.own(&node_dir);
            let config = node_dir.join("patroni.yml");
            let text = cluster.config(&name, pg_port, api_port, advertised.addr(), &node_dir);
            std::fs::write(&config, text)
                .unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
            let log = node_dir.join("patroni.log");
            let mut command = Command::new(&patroni);
            command.arg(&config).env("HOME", &node_dir);
            runner.apply(&mut command);
            let child = spawn_logged(&mut command, &log);
            cluster.nodes.push(Node {
                name,
                pg_port,
                api_port,
                advertised,
                dir: node_dir,
                log,
                child: Some(child),
            });
        }
        cluster.wait_formed().await;
        cluster
    }

    /// A node's Patroni configuration (JSON, which YAML reads as it is).
    fn config(
        &self,
        name: &str,
        pg_port: u16,
        api_port: u16,
        advertised: SocketAddr,
        dir: &Path,
    ) -> String {
        let bin_dir = crate::pgcluster::server_program("postgres");
        let bin_dir = Path::new(&bin_dir)
            .parent()
            .expect("the server's bin folder");
        let config = json!({
            "scope": self.scope,
            "namespace": "/leasehold-test/",
            "name": name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": format!("127.0.0.1:{api_port}"),
                "connect_address": format!("127.0.0.1:{api_port}"),
            },
            "etcd3": {"host": format!("127.0.0.1:{}", self.etcd_port)},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": MAXIMUM_LAG_ON_FAILOVER,
                    "primary_start_timeout": 0,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": true,
                        "use_slots": true,
                        "parameters": {
                            // pg_rewind needs hint bits WAL-logged.
                            "wal_log_hints": "on",
                            // Each host takes about 23 sessions.
                            "max_connections": 200,
                            // A kill of the postmaster loses nothing the
                            // kernel has; the data is worth nothing after
                            // the test.
                            "fsync": "off",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": format!("127.0.0.1:{pg_port}"),
                "connect_address": advertised.to_string(),
                "data_dir": dir.join("data"),
                "bin_dir": bin_dir,
                "pgpass": dir.join("pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                },
                "parameters": {"unix_socket_directories": dir},
            },
        });
        serde_json::to_string_pretty(&config).expect("a JSON config")
    }

    async fn wait_etcd_healthy(&mut self) {
        let addr = format!("127.0.0.1:{}", self.etcd_port);
        let started = Instant::now();
        loop {
            if let Ok(r) =
                crate::http::request_within(API_LIMIT, &addr, "GET", "/health", &[], None).await
                && r.status == 200
                && r.body.contains("true")
            {
                return;
            }
            if let Some(Ok(Some(status))) = self.etcd.as_mut().map(Child::try_wait) {
                panic!(
                    "etcd exited at start ({status}):\n{}",
                    tail(&self.etcd_log, TAIL_LINES)
                );
            }
            assert!(
                started.elapsed() < FORM_LIMIT,
                "etcd on {addr} not healthy within {FORM_LIMIT:?}:\n{}",
                tail(&self.etcd_log, TAIL_LINES)
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Wait until one member leads and runs, every other runs as its
    /// replica and streams from it, and in synchronous mode one is its
    /// synchronous standby.
    async fn wait_formed(&mut self) {
        let started = Instant::now();
        loop {
            for node in &mut self.nodes {
                if let Some(Ok(Some(status))) = node.child.as_mut().map(Child::try_wait) {
                    panic!(
                        "Patroni of {} exited at start ({status}):\n{}",
                        node.name,
                        tail(&node.log, TAIL_LINES)
                    );
                }
            }
            if self.formed().await {
                return;
            }
            assert!(
                started.elapsed() < FORM_LIMIT,
                "the Patroni cluster did not form within {FORM_LIMIT:?}\n{}",
                self.report()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn formed(&self) -> bool {
        let Some(members) = self.members().await else {
            return false;
        };
        let Some(leader) = members
            .iter()
            .find(|m| m.role == "leader" && m.state == "running")
        else {
            return false;
        };
        let replicas: Vec<&Member> = members.iter().filter(|m| m.name != leader.name).collect();
        if replicas.len() + 1 != self.nodes.len()
            || replicas.iter().any(|m| m.state != "running")
            || (self.synchronous && !replicas.iter().any(|m| m.role == "sync_standby"))
        {
            return false;
        }
        // Streaming, by the leader's own account.
        let Some(leader) = self.index(&leader.name) else {
            return false;
        };
        let streaming = self
            .sql(
                leader,
                "postgres",
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
            )
            .await;
        streaming.and_then(|n| n.parse::<usize>().ok()) == Some(self.nodes.len() - 1)
    }

    /// The members as the first Patroni REST API that answers lists them.
    pub async fn members(&self) -> Option<Vec<Member>> {
        for node in &self.nodes {
            let Ok(r) =
                crate::http::request_within(API_LIMIT, &node.api(), "GET", "/cluster", &[], None)
                    .await
            else {
                continue;
            };
            if r.status != 200 {
                continue;
            }
            if let Ok(value) = serde_json::from_str::<Value>(&r.body) {
                return Some(parse_members(&value));
            }
        }
        None
    }

    /// The node that leads and runs now, with its timeline.
    pub async fn leader(&self) -> Option<(usize, u64)> {
        let members = self.members().await?;
        let leader = members
            .iter()
            .find(|m| m.role == "leader" && m.state == "running")?;
        Some((self.index(&leader.name)?, leader.timeline?))
    }

    /// Wait (at most `limit`) until a node other than `former` leads, runs
    /// and takes writes, on a timeline above `timeline`; returns it and its
    /// timeline.
    pub async fn wait_failover(
        &self,
        former: usize,
        timeline: u64,
        limit: Duration,
    ) -> (usize, u64) {
        let started = Instant::now();
        loop {
            if let Some((leader, now)) = self.leader().await
                && leader != former
                && now > timeline
                && self
                    .sql(leader, "postgres", "SELECT pg_is_in_recovery()")
                    .await
                    .as_deref()
                    == Some("f")
            {
                return (leader, now);
            }
            assert!(
                started.elapsed() < limit,
                "Patroni did not fail over from {} within {limit:?}\n{}",
                self.nodes[former].name,
                self.report()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// A URL of `database` on node `i` alone, as superuser.
    pub fn node_url(&self, i: usize, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}",
            self.nodes[i].pg_port
        )
    }

    /// The URL a Leasehold host is given: every node, in node order, and
    /// `target_session_attrs=read-write`, so a connection goes to whichever
    /// node takes writes now.
    pub fn url(&self, database: &str) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.pg_port))
            .collect();
        format!(
            "postgres://postgres@{}/{database}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// The proxy the other nodes replicate from node `i` through: set it
    /// to [`crate::proxy::Mode::Reset`] to cut them off (node `i` keeps
    /// taking writes; they fall behind), back to `Pass` to let them catch
    /// up.
    pub fn replication_from(&self, i: usize) -> &FaultProxy {
        &self.nodes[i].advertised
    }

    /// One value `query` answers in `database` on node `i`, or `None` when
    /// the node does not answer.
    pub async fn sql(&self, i: usize, database: &str, query: &str) -> Option<String> {
        let url = self.node_url(i, database);
        let connect = tokio_postgres::connect(&url, tokio_postgres::NoTls);
        let (client, connection) = tokio::time::timeout(API_LIMIT, connect).await.ok()?.ok()?;
        tokio::spawn(connection);
        let rows = tokio::time::timeout(API_LIMIT, client.simple_query(query))
            .await
            .ok()?
            .ok()?;
        rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
    }

    /// Run `statement` in `database` on node `i`; panics (with the
    /// cluster's report) when it fails.
    pub async fn execute(&self, i: usize, database: &str, statement: &str) {
        let url = self.node_url(i, database);
        let result = async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            client.batch_execute(statement).await
        };
        match tokio::time::timeout(Duration::from_secs(30), result).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!(
                "{statement:?} on {} failed: {e}\n{}",
                self.nodes[i].name,
                self.report()
            ),
            Err(_) => panic!(
                "{statement:?} on {} did not end within 30 s\n{}",
                self.nodes[i].name,
                self.report()
            ),
        }
    }

    /// Wait until every running replica has replayed everything the
    /// leader `leader` has written so far.
    pub async fn wait_caught_up(&self, leader: usize, limit: Duration) {
        let written = self
            .sql(leader, "postgres", "SELECT pg_current_wal_lsn()")
            .await
            .unwrap_or_else(|| {
                panic!(
                    "the leader {} answers\n{}",
                    self.nodes[leader].name,
                    self.report()
                )
            });
        let started = Instant::now();
        for i in (0..self.nodes.len()).filter(|i| *i != leader) {
            let query = format!("SELECT pg_last_wal_replay_lsn() >= '{written}'::pg_lsn");
            while self.sql(i, "postgres", &query).await.as_deref() != Some("t") {
                assert!(
                    started.elapsed() < limit,
                    "{} has not replayed the leader's WAL up to {written} within {limit:?}\n{}",
                    self.nodes[i].name,
                    self.report()
                );
                tokio::time::sleep(POLL).await;
            }
        }
    }

    /// SIGKILL node `i`'s postmaster (its backends end with it); Patroni
    /// lives on. Returns the process id killed.
    pub fn kill_postgres(&self, i: usize) -> i32 {
        let node = &self.nodes[i];
        let pid = node.postmaster().unwrap_or_else(|| {
            panic!(
                "no postmaster runs on {}'s data directory\n{}",
                node.name,
                self.report()
            )
        });
        signal(pid, libc::SIGKILL);
        pid
    }

    /// What a failing test prints: the members as Patroni's REST API lists
    /// them (what `patronictl list` shows), and the tail of every Patroni
    /// log and of etcd's.
    pub fn report(&self) -> String {
        let mut out = format!(
            "Patroni cluster {} (etcd on 127.0.0.1:{}, synchronous_mode {}):\n",
            self.scope, self.etcd_port, self.synchronous
        );
        let listed = self
            .nodes
            .iter()
            .find_map(|n| blocking_get(&n.api(), "/cluster"));
        match listed {
            Some(value) => {
                out.push_str(&format!(
                    "  {:<6} {:<13} {:<10} {:>8} {:>11}  {:<16} {}\n",
                    "member", "role", "state", "timeline", "lag (bytes)", "postgres", "api"
                ));
                for m in value["members"].as_array().into_iter().flatten() {
                    let name = m["name"].as_str().unwrap_or("?");
                    let node = self.nodes.iter().find(|n| n.name == name);
                    out.push_str(&format!(
                        "  {:<6} {:<13} {:<10} {:>8} {:>11}  {:<16} {}\n",
                        name,
                        m["role"].as_str().unwrap_or("?"),
                        m["state"].as_str().unwrap_or("?"),
                        m["timeline"]
                            .as_u64()
                            .map(|t| t.to_string())
                            .unwrap_or_default(),
                        m["lag"].as_u64().map(|l| l.to_string()).unwrap_or_default(),
                        node.map(|n| format!("127.0.0.1:{}", n.pg_port))
                            .unwrap_or_default(),
                        m["api_url"].as_str().unwrap_or(""),
                    ));
                }
            }
            None => out.push_str("  no Patroni REST API answered GET /cluster\n"),
        }
        for node in &self.nodes {
            out.push_str(&format!(
                "---- Patroni {} (postgres 127.0.0.1:{}, api 127.0.0.1:{}, advertised {}): last {TAIL_LINES} lines ----\n{}\n",
                node.name,
                node.pg_port,
                node.api_port,
                node.advertised.addr(),
                tail(&node.log, TAIL_LINES)
            ));
        }
        out.push_str(&format!(
            "---- etcd: last {TAIL_LINES} lines ----\n{}\n",
            tail(&self.etcd_log, TAIL_LINES)
        ));
        out
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.report());
        }
        // Patroni first (it would start PostgreSQL again), then each
        // postmaster by its own pid: an immediate shutdown, then a kill if
        // it lingers.
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        for node in &self.nodes {
            if let Some(pid) = node.postmaster() {
                signal(pid, libc::SIGQUIT);
                let started = Instant::now();
                while Path::new(&format!("/proc/{pid}")).exists()
                    && started.elapsed() < Duration::from_secs(5)
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if node.postmaster() == Some(pid) {
                    signal(pid, libc::SIGKILL);
                }
            }
        }
        if let Some(mut etcd) = self.etcd.take() {
            let _ = etcd.kill();
            let _ = etcd.wait();
        }
    }
}

fn signal(pid: i32, signal: libc::c_int) {
    // SAFETY: kill(2) with a pid read from the node's own postmaster.pid
    // and checked against /proc; no memory is involved.
    unsafe {
        libc::kill(pid, signal);
    }
}

fn parse_members(value: &Value) -> Vec<Member> {
    value["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| Member {
            name: m["name"].as_str().unwrap_or_default().to_string(),
            role: m["role"].as_str().unwrap_or_default().to_string(),
            state: m["state"].as_str().unwrap_or_default().to_string(),
            timeline: m["timeline"].as_u64(),
        })
        .collect()
}

/// `GET path` on a local HTTP server without a runtime (for a report
/// printed while a test unwinds): the JSON body, if it answered 200.
fn blocking_get(addr: &str, path: &str) -> Option<Value> {
    let addr: SocketAddr = addr.parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, API_LIMIT).ok()?;
    stream.set_read_timeout(Some(API_LIMIT)).ok()?;
    stream.set_write_timeout(Some(API_LIMIT)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = String::new();
    stream.take(1 << 20).read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    head.split_whitespace().nth(1).filter(|s| *s == "200")?;
    serde_json::from_str(body).ok()
}

/// The last `lines` lines of the file at `path`.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn spawn_logged(command: &mut Command, log: &Path) -> Child {
    let file =
        std::fs::File::create(log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log file"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("start {:?}: {e}", command.get_program()))
}

/// Who runs Patroni: the `postgres` user when the test runs as root
/// (PostgreSQL refuses root), else the test's own user.
struct Runner {
    ids: Option<(u32, u32)>,
}

impl Runner {
    fn new() -> Self {
        if !running_as_root() {
            return Self { ids: None };
        }
        let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
        let ids = passwd
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.first() == Some(&"postgres") && f.len() > 3)
            .and_then(|f| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
            .expect("a `postgres` user (Debian's PostgreSQL packages make one)");
        Self { ids: Some(ids) }
    }

    /// Give `dir` to the user Patroni runs as.
    fn own(&self, dir: &Path) {
        if let Some((uid, gid)) = self.ids {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", dir.display()));
        }
    }

    fn apply(&self, command: &mut Command) {
        use std::os::unix::process::CommandExt;
        if let Some((uid, gid)) = self.ids {
            command.uid(uid).gid(gid);
        }
    }
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let uid = status.lines().find(|l| l.starts_with("Uid:"))?;
            Some(uid.split_whitespace().nth(1)? == "0")
        })
        .unwrap_or(false)
}

/// The `patroni` and `etcd` programs, installed from Debian's packages at
/// the pinned versions when missing or at another version.
pub fn installed() -> (PathBuf, PathBuf) {
    static INSTALL: Mutex<Option<Result<(PathBuf, PathBuf), String>>> = Mutex::new(None);
    let mut done = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if done.is_none() {
        *done = Some(install());
    }
    done.clone()
        .expect("set above")
        .unwrap_or_else(|why| panic!("{why}"))
}

fn install() -> Result<(PathBuf, PathBuf), String> {
    let programs = (
        PathBuf::from("/usr/bin/patroni"),
        PathBuf::from("/usr/bin/etcd"),
    );
    let packages = [PATRONI_PACKAGE, ETCD_PACKAGE];
    let pinned = |p: &(&str, &str)| format!("{}={}", p.0, p.1);
    let missing: Vec<String> = packages
        .iter()
        .filter(|p| installed_version(p.0).as_deref() != Some(p.1))
        .map(pinned)
        .collect();
    if missing.is_empty() && programs.0.is_file() && programs.1.is_file() {
        return Ok(programs);
    }
    let wanted: Vec<String> = packages.iter().map(pinned).collect();
    if !running_as_root() {
        return Err(format!(
            "the Patroni tests need Debian's {}: install them with `sudo apt-get install -y {}`",
            missing.join(", "),
            wanted.join(" ")
        ));
    }
    let apt = |args: &[&str]| {
        eprintln!(
            "installing the Patroni tests' tools: apt-get {}",
            args.join(" ")
        );
        Command::new("apt-get")
            // Another install running beside this one (another test's)
            // holds the package manager's lock: wait for it.
            .args(["-o", "DPkg::Lock::Timeout=300"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("apt-get could not run: {e}"))
    };
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend(wanted.iter().map(String::as_str));
    let first = apt(&args)?;
    if !first.status.success() {
        // A fresh machine may have no package lists yet.
        let update = apt(&["update"])?;
        let second = apt(&args)?;
        if !second.status.success() {
            return Err(format!(
                "`apt-get install -y {}` failed (after `apt-get update`, which {}): {}",
                wanted.join(" "),
                if update.status.success() {
                    "succeeded"
                } else {
                    "failed"
                },
                String::from_utf8_lossy(&second.stderr)
            ));
        }
    }
    for (package, version) in packages {
        let found = installed_version(package);
        if found.as_deref() != Some(version) {
            return Err(format!(
                "apt-get installed {package} but dpkg shows version {found:?}, not {version}"
            ));
        }
    }
    if !(programs.0.is_file() && programs.1.is_file()) {
        return Err(format!(
            "the packages are installed but {} or {} is missing",
            programs.0.display(),
            programs.1.display()
        ));
    }
    Ok(programs)
}

/// The version dpkg shows installed for `package`, if any.
fn installed_version(package: &str) -> Option<String> {
    let output = Command::new("dpkg-query")
        .args(["-W", "-f", "${db:Status-Status} ${Version}", package])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (status, version) = text.split_once(' ')?;
    (output.status.success() && status == "installed").then(|| version.trim().to_string())
}
