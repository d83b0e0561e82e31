//! A rig for fault scenarios: one throwaway database, one cluster, and
//! several real `leasehold` processes, each reaching PostgreSQL through
//! its own [`FaultProxy`] (so the test can partition, slow down, reset or
//! terminate exactly one host's sessions), plus the API writes the test
//! saw acknowledged, for the [checker](super::checker). A rig may also
//! hold the fenced receiver (`leasehold-receiver`, in this process) its
//! controllers call out to ([`Rig::receiver`]); the checker then judges
//! the receiver's record too. Controllers get extra config lines (their
//! `http_allow`) through [`RigSpec::configure`].
//!
//! Everything the rig waits on is observable state of another process —
//! the lease row in the database, a host's own `/metrics` — polled with
//! [`eventually`]; it never sleeps in place of an ordering.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leasehold_host::authority::postgres::holder_claim::CLAIM_APPLICATION;
use leasehold_host::testing::TestDatabase;
use leasehold_receiver::{Fault, FaultSpec, RunningReceiver};
use serde_json::{Value, json};

use leasehold_host::db::Database;
use leasehold_host::store::retention::{Policy, Trimmed};
use leasehold_host::store::{PostgresStore, Store as _};

use super::checker::{self, Ack, Acks, Evidence, Report, Rule};
use super::reader::FeedRecord;
use super::watch::{Holds, HostLogs};
use crate::guest_dir;
use crate::http;
use crate::process::{Replica, binary, eventually, free_port, unfenced_binary};
use crate::proxy::FaultProxy;

/// Lease timing for every controller of a rig.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// `lease_ttl`.
    pub ttl: Duration,
    /// `renew_interval`.
    pub renew_interval: Duration,
    /// `renew_deadline`.
    pub renew_deadline: Duration,
}

impl Timing {
    /// The scenarios' timing: short enough that a takeover after a silent
    /// death takes about two seconds, long enough that a debug build on a
    /// busy two-core machine does not lose leases spuriously.
    pub const SCENARIO: Timing = Timing {
        ttl: Duration::from_millis(2000),
        renew_interval: Duration::from_millis(200),
        renew_deadline: Duration::from_millis(1400),
    };

    /// The randomized schedules' timing: one-second leases, so a schedule
    /// sees several takeovers in a few seconds.
    pub const FAST: Timing = Timing {
        ttl: Duration::from_millis(1000),
        renew_interval: Duration::from_millis(150),
        renew_deadline: Duration::from_millis(700),
    };
}

/// Which build of the host a rig runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// `leasehold`.
    Fenced,
    /// `leasehold-unfenced`: the fence check disabled.
    Unfenced,
}

/// Environment variable that, set to `unfenced`, makes every rig run the
/// unfenced build whatever its spec says: a diagnostic, to see which
/// scenarios and schedules catch a build without the fence (their
/// assertions and checker then fail where they do). Never set in CI.
pub const BUILD_ENV: &str = "LEASEHOLD_FAULT_BUILD";

impl Build {
    /// `wanted`, unless [`BUILD_ENV`] forces the unfenced build.
    pub fn effective(wanted: Build) -> Build {
        match std::env::var(BUILD_ENV).as_deref() {
            Ok("unfenced") => Build::Unfenced,
            Ok("") | Ok("fenced") | Err(_) => wanted,
            Ok(other) => panic!("{BUILD_ENV}={other:?}: expected \"unfenced\" or \"fenced\""),
        }
    }
}

/// What a rig starts with.
#[derive(Debug, Clone)]
pub struct RigSpec {
    /// Hosts started at once.
    pub hosts: usize,
    /// Lease timing.
    pub timing: Timing,
    /// Controllers every host runs (`scheduler`, `rollout`).
    pub controllers: Vec<&'static str>,
    /// Which binary.
    pub build: Build,
    /// Extra TOML lines for a controller's `[[controllers]]` table, by
    /// controller name (e.g. `http_allow = ["http://127.0.0.1:9000"]` for
    /// the provisioner).
    pub controller_config: BTreeMap<String, String>,
    /// Whether hosts log in JSON with every reconcile (the worker's
    /// `reconciled` line, level trace): the evidence of the checker's
    /// wake-up rule ([`Rig::host_logs`]).
    pub log_reconciles: bool,
    /// `[placement] enabled` in every host's config; `None` leaves the
    /// section out (the host's default).
    pub placement: Option<bool>,
    /// Components that are not in the guest folder, by controller name
    /// (a controller built by `leasehold build` in a project of its own).
    pub components: BTreeMap<String, std::path::PathBuf>,
}

impl RigSpec {
    /// `hosts` fenced hosts running the scheduler with [`Timing::SCENARIO`].
    pub fn scheduler(hosts: usize) -> Self {
        Self {
            hosts,
            timing: Timing::SCENARIO,
            controllers: vec!["scheduler"],
            build: Build::Fenced,
            controller_config: BTreeMap::new(),
            log_reconciles: false,
            placement: None,
            components: BTreeMap::new(),
        }
    }

    /// Add `lines` (TOML) to `controller`'s table in every host's config.
    pub fn configure(mut self, controller: &str, lines: &str) -> Self {
        let entry = self
            .controller_config
            .entry(controller.to_string())
            .or_default();
        entry.push_str(lines);
        entry.push('\n');
        self
    }
}

pub use crate::TempDir;

/// One host of the rig.
pub struct Host {
    /// The process.
    pub replica: Replica,
    /// Its proxy to PostgreSQL.
    pub proxy: FaultProxy,
    /// Its holder name in leases and history.
    pub holder: String,
    /// Its HTTP port.
    pub port: u16,
    /// Its lease timing.
    pub timing: Timing,
}

/// The lease row of one controller, read from the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// Holder named by the row.
    pub holder: String,
    /// Its epoch.
    pub epoch: i64,
    /// Neither released nor expired, by the database clock.
    pub active: bool,
    /// Released.
    pub released: bool,
}

/// One tenure, read from the database.
#[derive(Debug, Clone)]
pub struct TenureView {
    /// Epoch.
    pub epoch: i64,
    /// Holder.
    pub holder: String,
    /// How it ended; `None` while it runs.
    pub end_reason: Option<String>,
    /// Writes counted.
    pub writes: i64,
    /// Outbound HTTP requests counted (recorded when the tenure ends on its
    /// host).
    pub outbound_requests: i64,
}

/// A database, a cluster and its hosts. Dropping it kills the hosts, stops
/// the proxies and drops the database; if the test is panicking, it first
/// prints the end of every host's log.
pub struct Rig {
    /// The hosts, in the order they were added.
    pub hosts: Vec<Host>,
    /// API writes the test saw acknowledged.
    pub acks: Acks,
    /// What the finalizer workload did ([`Rig::finalizer_workload`]).
    pub holds: Holds,
    /// The `[store] tenure_retention` a trimmer of this rig trims tenures
    /// to, once one ran ([`Rig::start_trimmer`]): the checker must know.
    pub tenure_retention: Option<u64>,
    /// The checker's copy of the change stream and event log (a feed
    /// reader's record), once a test has one: what retention trimmed is
    /// judged from it.
    pub copy: Option<FeedRecord>,
    /// The trimmer running over the cluster, if any
    /// ([`Rig::start_trimmer`]).
    pub trimmer: Option<Trimmer>,
    /// The cluster.
    pub cluster: String,
    /// The fenced receiver the cluster's controllers call, if the test
    /// runs one: [`Rig::check`] judges its record too.
    pub receiver: Option<Arc<RunningReceiver>>,
    spec: RigSpec,
    upstream: std::net::SocketAddr,
    /// Extra TOML lines for every host's `[database]` table.
    database_lines: String,
    dir: TempDir,
    /// The database (dropped last).
    pub db: TestDatabase,
}

impl Rig {
    /// Create the database and start `spec.hosts` hosts; returns once every
    /// host answers `/healthz`.
    pub async fn start(spec: RigSpec) -> Self {
        Self::start_on(spec, TestDatabase::create().await).await
    }

    /// [`Rig::start`] on a database the test created itself (on its own
    /// PostgreSQL cluster, for instance).
    pub async fn start_on(spec: RigSpec, db: TestDatabase) -> Self {
        Self::start_through(spec, db, None, "").await
    }

    /// [`Rig::start_on`] with every host's proxy forwarding to `upstream`
    /// (a pooler in front of the database's server, say) instead of the
    /// server itself, and `database_lines` (TOML) added to every host's
    /// `[database]` table. The rig's own sessions go to the server.
    pub async fn start_through(
        spec: RigSpec,
        db: TestDatabase,
        upstream: Option<std::net::SocketAddr>,
        database_lines: &str,
    ) -> Self {
        let url = url::Url::parse(db.url()).expect("database url");
        let host = url.host_str().unwrap_or("127.0.0.1");
        let host = if host == "localhost" {
            "127.0.0.1"
        } else {
            host
        };
        let upstream = upstream.unwrap_or_else(|| {
            format!("{host}:{}", url.port().unwrap_or(5432))
                .parse()
                .expect("database address")
        });
        let mut rig = Self {
            hosts: Vec::new(),
            acks: Acks::default(),
            holds: Holds::default(),
            tenure_retention: None,
            copy: None,
            trimmer: None,
            cluster: format!("flt-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            receiver: None,
            spec: spec.clone(),
            upstream,
            database_lines: database_lines.to_string(),
            dir: TempDir::new(),
            db,
        };
        for _ in 0..spec.hosts {
            rig.spawn_host(&spec.controllers, spec.timing).await;
        }
        rig.wait_healthy().await;
        rig
    }

    /// Start one more host running `controllers`; returns its index once
    /// it answers `/healthz`.
    pub async fn add_host(&mut self, controllers: &[&str]) -> usize {
        self.add_host_with(controllers, self.spec.timing).await
    }

    /// [`Rig::add_host`] with its own lease timing.
    pub async fn add_host_with(&mut self, controllers: &[&str], timing: Timing) -> usize {
        let i = self.spawn_host(controllers, timing).await;
        self.hosts[i]
            .replica
            .wait_healthy(Duration::from_secs(60))
            .await;
        i
    }

    async fn spawn_host(&mut self, controllers: &[&str], timing: Timing) -> usize {
        let i = self.hosts.len();
        let proxy = FaultProxy::start(self.upstream).await;
        let port = free_port();
        let holder = format!("host-{i}");
        let config = self.config(
            &holder,
            port,
            &proxy.url_for(self.db.url()),
            controllers,
            timing,
        );
        let binary = match Build::effective(self.spec.build) {
            Build::Fenced => binary(),
            Build::Unfenced => unfenced_binary(),
        };
        let binary = if self.spec.log_reconciles {
            self.logging_reconciles(&binary, i)
        } else {
            binary
        };
        let replica =
            Replica::start_binary(binary, self.dir.path(), &format!("h{i}"), port, &config);
        self.hosts.push(Host {
            replica,
            proxy,
            holder,
            port,
            timing,
        });
        i
    }

    /// A script running `binary` with JSON logs that include every
    /// reconcile (the worker's `reconciled` line, level trace).
    fn logging_reconciles(&self, binary: &std::path::Path, i: usize) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self
            .dir
            .path()
            .join(format!("leasehold-h{i}-logging-reconciles"));
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\nexec '{}' --log-format json --log-level '{RECONCILE_LOG_FILTER}' \"$@\"\n",
                binary.display()
            ),
        )
        .expect("write the host's start script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("make the host's start script executable");
        path
    }

    /// Every host's log, read for the wake-up rule (hosts started with
    /// [`RigSpec::log_reconciles`]).
    pub fn host_logs(&self) -> HostLogs {
        let mut logs = HostLogs::default();
        for host in &self.hosts {
            logs.add(&host.holder, &host.replica.log());
        }
        logs
    }

    /// Wait until every running host answers `/healthz`.
    pub async fn wait_healthy(&mut self) {
        for host in &mut self.hosts {
            if host.replica.running() {
                host.replica.wait_healthy(Duration::from_secs(60)).await;
            }
        }
    }

    /// The config of a host named `holder` on `port`, reaching the
    /// database at `url`, running `controllers` with `timing`.
    pub fn config(
        &self,
        holder: &str,
        port: u16,
        url: &str,
        controllers: &[&str],
        timing: Timing,
    ) -> String {
        let guests = guest_dir();
        // Compiled components are cached across hosts, tests and runs.
        let cache = guests.join("../../leasehold-test-cache");
        let Timing {
            ttl,
            renew_interval,
            renew_deadline,
        } = timing;
        let mut config = format!(
            r#"cluster = "{cluster}"
holder = "{holder}"

[database]
url = "{url}"
{database_lines}

[http]
listen = "127.0.0.1:{port}"

[runtime]
cache_dir = "{cache}"
"#,
            cluster = self.cluster,
            cache = cache.display(),
            database_lines = self.database_lines,
        );
        if let Some(enabled) = self.spec.placement {
            config.push_str(&format!("\n[placement]\nenabled = {enabled}\n"));
        }
        for name in controllers {
            config.push_str(&format!(
                r#"
[[controllers]]
name = "{name}"
component = "{component}"
lease_ttl = "{ttl}ms"
renew_interval = "{renew}ms"
renew_deadline = "{deadline}ms"
backoff_max = "1s"
{extra}"#,
                component = self
                    .spec
                    .components
                    .get(*name)
                    .cloned()
                    .unwrap_or_else(|| guests.join(format!("{name}.wasm")))
                    .display(),
                ttl = ttl.as_millis(),
                renew = renew_interval.as_millis(),
                deadline = renew_deadline.as_millis(),
                extra = self
                    .spec
                    .controller_config
                    .get(*name)
                    .map_or("", String::as_str),
            ));
        }
        config
    }

    /// Rewrite host `i`'s config to run only `controllers` (read at its
    /// next restart).
    pub fn set_controllers(&mut self, i: usize, controllers: &[&str]) {
        let host = &self.hosts[i];
        let config = self.config(
            &host.holder,
            host.port,
            &host.proxy.url_for(self.db.url()),
            controllers,
            host.timing,
        );
        self.hosts[i].replica.set_config(&config);
    }

    /// The scheduler's lease: `scheduler`, or its shard 0's,
    /// `scheduler-0`, when the spec runs it sharded (`shards = N` in its
    /// controller config). The random schedules aim "the leader" faults at
    /// its holder.
    pub fn scheduler_lease(&self) -> String {
        let sharded = self
            .spec
            .controller_config
            .get("scheduler")
            .is_some_and(|lines| lines.lines().any(|l| l.trim_start().starts_with("shards")));
        if sharded {
            "scheduler-0".to_string()
        } else {
            "scheduler".to_string()
        }
    }

    /// The lease timing.
    pub fn timing(&self) -> Timing {
        self.spec.timing
    }

    /// The index of the host named `holder`.
    pub fn index_of(&self, holder: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.holder == holder)
    }

    /// A new session on the test database, straight to the server.
    pub async fn sql(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(self.db.url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(connection);
        client
    }

    /// The test database's name.
    pub fn database_name(&self) -> String {
        url::Url::parse(self.db.url())
            .expect("database url")
            .path()
            .trim_start_matches('/')
            .to_string()
    }

    /// The lease row of `lease`, if it was ever granted.
    pub async fn lease(&self, lease: &str) -> Option<LeaseView> {
        let client = self.sql().await;
        let row = client
            .query_opt(
                "SELECT holder, epoch, NOT released AND expires_at > clock_timestamp(), released
                   FROM leasehold_leases WHERE cluster = $1 AND name = $2",
                &[&self.cluster, &lease],
            )
            .await
            .expect("read the lease row")?;
        Some(LeaseView {
            holder: row.get(0),
            epoch: row.get(1),
            active: row.get(2),
            released: row.get(3),
        })
    }

    /// Every tenure of `lease`, oldest first.
    pub async fn history(&self, lease: &str) -> Vec<TenureView> {
        self.sql()
            .await
            .query(
                "SELECT epoch, holder, end_reason, writes, outbound_requests FROM leasehold_tenures
                  WHERE cluster = $1 AND lease = $2 ORDER BY epoch",
                &[&self.cluster, &lease],
            )
            .await
            .expect("read the history")
            .iter()
            .map(|r| TenureView {
                epoch: r.get(0),
                holder: r.get(1),
                end_reason: r.get(2),
                writes: r.get(3),
                outbound_requests: r.get(4),
            })
            .collect()
    }

    /// Wait until the database shows `lease` actively held at an epoch
    /// above `after` by a host that itself reports leading it; returns
    /// (host index, epoch).
    pub async fn leader_after(&self, lease: &str, after: i64, limit: Duration) -> (usize, i64) {
        eventually(
            &format!("one host leads {lease} at an epoch above {after}"),
            limit,
            || async {
                let row = self.lease(lease).await?;
                if !row.active || row.epoch <= after {
                    return None;
                }
                let i = self.index_of(&row.holder)?;
                self.hosts[i]
                    .replica
                    .leads(lease)
                    .await?
                    .then_some((i, row.epoch))
            },
        )
        .await
    }

    /// [`Rig::leader_after`] any epoch.
    pub async fn leader(&self, lease: &str, limit: Duration) -> (usize, i64) {
        self.leader_after(lease, 0, limit).await
    }

    /// Create `kind/name` with `value` through the first host that answers,
    /// trying host `first` first; records and returns the acknowledgement.
    pub async fn create(&self, first: usize, kind: &str, name: &str, value: Value) -> Option<Ack> {
        let addrs: Vec<String> = self.hosts.iter().map(|h| h.replica.addr.clone()).collect();
        put_any(&addrs, first, &self.acks, kind, name, value).await
    }

    /// Create nodes `(name, capacity)`, each acknowledged.
    pub async fn nodes(&self, nodes: &[(&str, u64)]) {
        for (i, (name, capacity)) in nodes.iter().enumerate() {
            self.create(i, "nodes", name, json!({ "capacity": capacity }))
                .await
                .unwrap_or_else(|| panic!("no host acknowledged node {name}"));
        }
    }

    /// Create pending task `name`, acknowledged.
    pub async fn task(&self, first: usize, name: &str) -> Ack {
        self.create(
            first,
            "tasks",
            name,
            json!({ "status": "pending", "id": name }),
        )
        .await
        .unwrap_or_else(|| panic!("no host acknowledged task {name}"))
    }

    /// A task's value, from the database.
    pub async fn task_value(&self, name: &str) -> Option<Value> {
        let row = self
            .sql()
            .await
            .query_opt(
                "SELECT value FROM leasehold_objects WHERE cluster = $1 AND kind = 'tasks' AND name = $2",
                &[&self.cluster, &name],
            )
            .await
            .expect("read a task")?;
        serde_json::from_str(row.get::<_, &str>(0)).ok()
    }

    /// (pending tasks, free slots) from the database.
    pub async fn backlog(&self) -> (u64, u64) {
        let client = self.sql().await;
        let rows = client
            .query(
                "SELECT kind, value FROM leasehold_objects WHERE cluster = $1",
                &[&self.cluster],
            )
            .await
            .expect("read objects");
        let (mut pending, mut capacity, mut assigned) = (0u64, 0u64, 0u64);
        for row in rows {
            let value: Value = serde_json::from_str(row.get::<_, &str>(1)).unwrap_or(Value::Null);
            match row.get::<_, &str>(0) {
                "nodes" => capacity += value["capacity"].as_u64().unwrap_or(0),
                "tasks" if value["status"] == "pending" => pending += 1,
                "tasks" if value["status"] == "assigned" => assigned += 1,
                _ => {}
            }
        }
        (pending, capacity.saturating_sub(assigned))
    }

    /// Wait until no task is pending while a node has room: the scheduler
    /// has caught up.
    pub async fn settled(&self, limit: Duration) {
        eventually(
            "every pending task that fits is assigned",
            limit,
            || async {
                let (pending, free) = self.backlog().await;
                (pending == 0 || free == 0).then_some(())
            },
        )
        .await;
    }

    /// Wait until the provisioner recorded the cloud's answer (phase
    /// `Ready` or `Failed` in the status part; `Pending` is recorded
    /// before the request) for every bucket object: it has caught up.
    pub async fn provisioned(&self, limit: Duration) {
        eventually("every bucket's status is recorded", limit, || async {
            let waiting: i64 = self
                .sql()
                .await
                .query_one(
                    "SELECT count(*) FROM leasehold_objects
                          WHERE cluster = $1 AND kind = 'buckets'
                            AND coalesce(status::jsonb ->> 'phase', '') NOT IN ('Ready', 'Failed')",
                    &[&self.cluster],
                )
                .await
                .expect("read buckets")
                .get(0);
            (waiting == 0).then_some(())
        })
        .await;
    }

    /// Terminate every backend of host `i` (its sessions through its
    /// proxy: the pool, the change feed and the release listener);
    /// returns how many.
    pub async fn terminate_backends(&self, i: usize) -> i64 {
        self.terminate_sessions(i, "leasehold%").await
    }

    /// Terminate host `i`'s liveness (claim) session only, found by its
    /// `application_name` (`leasehold-claim-<instance>`) among the sessions
    /// through host `i`'s own proxy (every host claims through its proxy,
    /// so the port tells the hosts apart); its pool, change feed and
    /// listener go on. Returns how many were terminated: 1, or 0 while the
    /// host is down or has not claimed its name again after an earlier
    /// fault.
    pub async fn terminate_liveness(&self, i: usize) -> i64 {
        self.terminate_sessions(i, &format!("{CLAIM_APPLICATION}-%"))
            .await
    }

    /// Terminate the sessions through host `i`'s proxy whose
    /// `application_name` is `LIKE` `application`; returns how many.
    async fn terminate_sessions(&self, i: usize, application: &str) -> i64 {
        let ports: Vec<i32> = self.hosts[i]
            .proxy
            .upstream_ports()
            .into_iter()
            .map(i32::from)
            .collect();
        let datname = self.database_name();
        self.sql()
            .await
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE datname = $1 AND client_port = ANY($2) AND application_name LIKE $3
                    AND pid <> pg_backend_pid()",
                &[&datname, &ports, &application],
            )
            .await
            .expect("terminate sessions")
            .get(0)
    }

    /// Run the invariant checker over the cluster, and over the
    /// receiver's record if the rig has one.
    ///
    /// With [`RigSpec::log_reconciles`], the hosts' logs are the evidence
    /// of the wake-up rule, and a change committed just before the check
    /// may not be reconciled yet: the check is repeated, for at most
    /// [`WAKE_UP_QUIESCENCE`], until it reports no missed wake-up (or
    /// until the bound, when it reports what is still missed).
    pub async fn check(&self) -> Report {
        let receiver = self.receiver.clone();
        let record = move || receiver.as_ref().map(|r| r.record()).unwrap_or_default();
        let started = Instant::now();
        loop {
            let evidence = Evidence {
                acks: self.acks.all(),
                holds: self.holds.all(),
                logs: self.spec.log_reconciles.then(|| self.host_logs()),
                copy: self.copy.clone(),
                tenure_retention: self.tenure_retention,
            };
            let report = checker::check_all(self.db.url(), &self.cluster, &evidence, &record).await;
            if !report.breaks(Rule::MissedWakeUp) || started.elapsed() > WAKE_UP_QUIESCENCE {
                return report;
            }
            tokio::time::sleep(WAKE_UP_POLL).await;
        }
    }

    /// Run a trimmer with `policy` over the rig's cluster, in this process,
    /// every [`TRIM_EVERY`] until stopped: the hosts' own trimmer with ages
    /// short enough for a schedule of seconds (the config allows a minute
    /// at least, and a round a minute). The same code, `Store::trim`, on
    /// the database the rig created (pinned by its id).
    ///
    /// Stopped by [`Rig::stop_trimmer`] (a random schedule stops it before
    /// its feed reader stops: nothing is trimmed that the checker's copy
    /// could lack).
    pub async fn start_trimmer(&mut self, policy: Policy) {
        self.tenure_retention = Some(policy.tenure_retention);
        let db = Database::new(self.db.url(), 2).expect("the trimmer's database url");
        let id: uuid::Uuid = self
            .sql()
            .await
            .query_one("SELECT id FROM leasehold_database", &[])
            .await
            .expect("read the database's id")
            .get(0);
        let store = PostgresStore::new(db);
        store.pin_database(id);
        let cluster = self.cluster.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let task_stop = stop.clone();
        let task = tokio::spawn(async move {
            let mut trimmed = Trimmed::default();
            while !task_stop.load(Ordering::SeqCst) {
                // A round fails while a fault has the server's sessions;
                // the next one tries again.
                if let Ok(t) = store.trim(&cluster, &policy).await {
                    trimmed.events += t.events;
                    trimmed.changes += t.changes;
                    trimmed.tenures += t.tenures;
                }
                // Pacing, not ordering.
                tokio::time::sleep(TRIM_EVERY).await;
            }
            trimmed
        });
        self.trimmer = Some(Trimmer { stop, task });
    }

    /// Stop the trimmer, if one runs; returns what it trimmed.
    pub async fn stop_trimmer(&mut self) -> Option<Trimmed> {
        Some(self.trimmer.take()?.stop().await)
    }

    /// A workload creating a pending task named `{prefix}-{n}` every
    /// `every` through the hosts in turn, recording acknowledgements, until
    /// stopped.
    pub fn workload(&self, prefix: &str, every: Duration) -> Workload {
        let all: Vec<usize> = (0..self.hosts.len()).collect();
        self.workload_via(&all, prefix, every)
    }

    /// [`Rig::workload`] through `hosts` only.
    pub fn workload_via(&self, hosts: &[usize], prefix: &str, every: Duration) -> Workload {
        let addrs: Vec<String> = hosts
            .iter()
            .map(|&i| self.hosts[i].replica.addr.clone())
            .collect();
        let next: NextObject = Arc::new(|_, name| json!({ "status": "pending", "id": name }));
        Workload::start(addrs, self.acks.clone(), "tasks", prefix, every, next)
    }

    /// A workload that keeps finalizers on objects, through the hosts in
    /// turn, until stopped: every `every` it creates `{HOLD_KIND}/{prefix}-{n}`
    /// with the finalizer [`HOLD_FINALIZER`], deletes the object created
    /// [`MARK_AFTER`] steps before (which must only mark it: 202), and
    /// removes the finalizer of the one created `RELEASE_AFTER` steps
    /// before (a conditional `PUT` at the version it last saw, which must
    /// remove the object: 204). What it sent and saw acknowledged goes to
    /// [`Rig::holds`], for the checker's finalizer rule.
    ///
    /// Each step also creates a finished task `tasks/{prefix}-{n}` (status
    /// `done`: the scheduler watches it but never gives it a slot, so no
    /// finalizer holds it) and deletes the one created [`MARK_AFTER`] steps
    /// before, which removes it at once: deletions of a watched kind for
    /// the wake-up rule to judge, landing whenever the schedule's faults
    /// leave the scheduler without a tenure.
    pub fn finalizer_workload(&self, prefix: &str, every: Duration) -> FinalizerWorkload {
        let addrs: Vec<String> = self.hosts.iter().map(|h| h.replica.addr.clone()).collect();
        let holds = self.holds.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let task_stop = stop.clone();
        let prefix = prefix.to_string();
        let task = tokio::spawn(async move {
            let path = |n: usize| format!("/v1/objects/{HOLD_KIND}/{prefix}-{n:04}");
            let name = |n: usize| format!("{prefix}-{n:04}");
            let mut last_version: BTreeMap<usize, u64> = BTreeMap::new();
            let mut n = 0usize;
            while !task_stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                // Recorded before it is sent: it may land unacknowledged.
                holds.update(HOLD_KIND, &name(n), HOLD_FINALIZER, |_| {});
                let body = json!({ "value": { "n": n }, "finalizers": [HOLD_FINALIZER] });
                if let Some((201, v)) = object_request(
                    &addrs,
                    n,
                    "PUT",
                    &path(n),
                    Some(&body),
                    &[("If-None-Match", "*")],
                )
                .await
                    && let Some(v) = v
                {
                    holds.update(HOLD_KIND, &name(n), HOLD_FINALIZER, |h| h.held.push(v));
                    last_version.insert(n, v);
                }
                if let Some(m) = n.checked_sub(MARK_AFTER)
                    && last_version.contains_key(&m)
                    && let Some((202, Some(v))) =
                        object_request(&addrs, n + 1, "DELETE", &path(m), None, &[]).await
                {
                    holds.update(HOLD_KIND, &name(m), HOLD_FINALIZER, |h| h.held.push(v));
                    last_version.insert(m, v);
                }
                if let Some(m) = n.checked_sub(RELEASE_AFTER)
                    && let Some(v) = last_version.remove(&m)
                {
                    holds.update(HOLD_KIND, &name(m), HOLD_FINALIZER, |h| {
                        h.removal_sent = true
                    });
                    let body = json!({ "value": { "n": m }, "finalizers": [] });
                    let version = v.to_string();
                    object_request(
                        &addrs,
                        n + 2,
                        "PUT",
                        &path(m),
                        Some(&body),
                        &[("If-Match", &version)],
                    )
                    .await;
                }
                let task_path = |n: usize| format!("/v1/objects/tasks/{prefix}-{n:04}");
                let done = json!({ "value": { "status": "done", "id": name(n) } });
                object_request(
                    &addrs,
                    n + 3,
                    "PUT",
                    &task_path(n),
                    Some(&done),
                    &[("If-None-Match", "*")],
                )
                .await;
                if let Some(m) = n.checked_sub(MARK_AFTER) {
                    object_request(&addrs, n + 4, "DELETE", &task_path(m), None, &[]).await;
                }
                n += 1;
                // Pacing, not ordering.
                tokio::time::sleep(every.saturating_sub(started.elapsed())).await;
            }
        });
        FinalizerWorkload { stop, task }
    }

    /// A workload creating bucket `{prefix}-{n}` every `every` through the
    /// hosts in turn, each naming `endpoint` (the provisioner calls it), and
    /// recording acknowledgements, until stopped. Before every
    /// [`UNCERTAIN_EVERY`]th bucket it sets a one-shot fault on the rig's
    /// receiver, alternating a reply lost after the effect
    /// (`drop_after_apply`) and a slow reply (`delay`), so the provisioner
    /// keeps retrying effects whose outcome it does not know, and keeps
    /// requests in flight when faults strike.
    pub fn bucket_workload(&self, prefix: &str, endpoint: &str, every: Duration) -> Workload {
        let addrs: Vec<String> = self.hosts.iter().map(|h| h.replica.addr.clone()).collect();
        let receiver = self.receiver.clone();
        let endpoint = endpoint.to_string();
        let next: NextObject = Arc::new(move |n, name| {
            if let Some(receiver) = &receiver
                && n % UNCERTAIN_EVERY == UNCERTAIN_EVERY - 1
            {
                let fault = if (n / UNCERTAIN_EVERY).is_multiple_of(2) {
                    Fault::DropAfterApply
                } else {
                    Fault::Delay {
                        delay_ms: SLOW_REPLY.as_millis() as u64,
                    }
                };
                receiver
                    .set_fault(FaultSpec::once(fault))
                    .expect("the rig's receiver has its test hooks on");
            }
            bucket(name, &endpoint)
        });
        Workload::start(addrs, self.acks.clone(), "buckets", prefix, every, next)
    }
}

/// The log filter of hosts started with [`RigSpec::log_reconciles`]: the
/// default, and the worker's trace lines (one per reconcile).
pub const RECONCILE_LOG_FILTER: &str =
    "info,tokio_postgres=warn,leasehold_host::supervisor::worker=trace";

/// How long [`Rig::check`] waits for the hosts to reconcile the last
/// changes of a run: well above a reconcile's time, below the example
/// controllers' resync period (a minute), whose reconciles would cover a
/// missed wake-up.
pub const WAKE_UP_QUIESCENCE: Duration = Duration::from_secs(15);

/// How often [`Rig::check`] looks again while it waits for wake-ups.
const WAKE_UP_POLL: Duration = Duration::from_millis(500);

/// How often a rig's trimmer ([`Rig::start_trimmer`]) runs a round.
pub const TRIM_EVERY: Duration = Duration::from_millis(500);

/// A trimmer running over a rig's cluster ([`Rig::start_trimmer`]).
pub struct Trimmer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Trimmed>,
}

impl Trimmer {
    /// Stop after the current round; returns what every round trimmed.
    pub async fn stop(self) -> Trimmed {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("trimmer task")
    }
}

/// The finalizer every object of [`Rig::finalizer_workload`] is created
/// with.
pub const HOLD_FINALIZER: &str = "leasehold.test/hold";

/// The kind [`Rig::finalizer_workload`] writes: no controller watches it.
pub const HOLD_KIND: &str = "claims";

/// How many objects later [`Rig::finalizer_workload`] deletes (marks) an
/// object, and removes its finalizer.
const MARK_AFTER: usize = 3;
const RELEASE_AFTER: usize = 6;

/// How often [`Rig::bucket_workload`] makes the next request's outcome
/// uncertain at the receiver: one bucket in this many.
pub const UNCERTAIN_EVERY: usize = 3;

/// The slow replies of [`Rig::bucket_workload`]: long enough that a fault
/// can strike a request in flight, short against the provisioner's
/// timeouts.
pub const SLOW_REPLY: Duration = Duration::from_millis(300);

/// The value of bucket object `name`, provisioned at `endpoint` (a base
/// URL in the provisioner's `http_allow`).
pub fn bucket(name: &str, endpoint: &str) -> Value {
    json!({
        "spec": { "size_gb": 1 + name.len() % 50, "region": "eu-1" },
        "endpoint": endpoint,
    })
}

/// Makes the `n`th object of a workload, named `name`; it may prepare the
/// world for it first (a receiver fault).
type NextObject = Arc<dyn Fn(usize, &str) -> Value + Send + Sync>;

impl Drop for Rig {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for host in &self.hosts {
                eprintln!(
                    "---- {} ({}) log tail ----\n{}",
                    host.replica.name,
                    host.holder,
                    host.replica.log_tail(60)
                );
            }
            if let Some(receiver) = &self.receiver {
                let record = receiver.record();
                eprintln!("---- receiver record (last 40 of {}) ----", record.len());
                for e in &record[record.len().saturating_sub(40)..] {
                    eprintln!(
                        "#{} {} {} {} {} lease {:?} epoch {:?} holder {:?} key {:?} fault {:?}",
                        e.seq,
                        e.arrived_at.format("%H:%M:%S%.3f"),
                        e.method,
                        e.path,
                        e.outcome,
                        e.lease,
                        e.epoch,
                        e.holder,
                        e.idempotency_key,
                        e.fault
                    );
                }
            }
        }
    }
}

/// How long one workload or rig write waits for a host: a stopped host
/// accepts the connection but never answers.
const PUT_TIMEOUT: Duration = Duration::from_secs(2);

async fn put_any(
    addrs: &[String],
    first: usize,
    acks: &Acks,
    kind: &str,
    name: &str,
    value: Value,
) -> Option<Ack> {
    let body = value.to_string();
    let path = format!("/v1/objects/{kind}/{name}");
    // Create-only: an attempt that timed out on one host may still land
    // later; an unconditional PUT retried on another host could then
    // overwrite an assigned task with "pending" (a client's doing, which the
    // checker would see as a second assignment). With `If-None-Match: *`
    // the late one conflicts instead.
    let create_only = [("If-None-Match", "*")];
    for k in 0..addrs.len() {
        let addr = &addrs[(first + k) % addrs.len()];
        let Ok(response) =
            http::request_within(PUT_TIMEOUT, addr, "PUT", &path, &create_only, Some(&body)).await
        else {
            continue;
        };
        if response.status == 409 {
            // An earlier, unacknowledged attempt created it.
            return None;
        }
        if response.status == 201 {
            let version = serde_json::from_str::<Value>(&response.body)
                .ok()
                .and_then(|v| v["version"].as_u64())
                .expect("an acknowledged write names its version");
            let ack = Ack {
                kind: kind.to_string(),
                name: name.to_string(),
                version,
                value,
            };
            acks.record(ack.clone());
            return Some(ack);
        }
    }
    None
}

/// One request of the finalizer workload, with the object media type
/// (metadata in the body), through the first host that answers from
/// `first` on: its status and the version its body names.
async fn object_request(
    addrs: &[String],
    first: usize,
    method: &str,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> Option<(u16, Option<u64>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.map(Value::to_string).unwrap_or_default();
    for k in 0..addrs.len() {
        let addr = &addrs[(first + k) % addrs.len()];
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if !body.is_empty() {
            head.push_str("Content-Type: application/vnd.leasehold.object+json\r\n");
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect(addr).await?;
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
            let mut raw = Vec::new();
            stream.read_to_end(&mut raw).await?;
            Ok::<_, std::io::Error>(raw)
        };
        let Ok(Ok(raw)) = tokio::time::timeout(PUT_TIMEOUT, exchange).await else {
            continue;
        };
        let text = String::from_utf8_lossy(&raw);
        let Some(status) = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
        else {
            continue;
        };
        if status >= 500 {
            continue;
        }
        let version = text
            .split_once("\r\n\r\n")
            .and_then(|(_, b)| serde_json::from_str::<Value>(b).ok())
            .and_then(|v| v["version"].as_u64());
        return Some((status, version));
    }
    None
}

/// The finalizer workload ([`Rig::finalizer_workload`]).
pub struct FinalizerWorkload {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl FinalizerWorkload {
    /// Stop after the current step.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("finalizer workload task");
    }
}

/// Objects (tasks, or buckets) created in the background while faults
/// strike.
pub struct Workload {
    stop: Arc<AtomicBool>,
    created: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Workload {
    fn start(
        addrs: Vec<String>,
        acks: Acks,
        kind: &'static str,
        prefix: &str,
        every: Duration,
        next: NextObject,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let created = Arc::new(AtomicU64::new(0));
        let (task_stop, task_created) = (stop.clone(), created.clone());
        let prefix = prefix.to_string();
        let task = tokio::spawn(async move {
            let mut names = Vec::new();
            let mut n = 0usize;
            while !task_stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let name = format!("{prefix}-{n:04}");
                let value = next(n, &name);
                // Unacknowledged writes may still have landed; the checker
                // only holds the acknowledged ones to account.
                if put_any(&addrs, n, &acks, kind, &name, value)
                    .await
                    .is_some()
                {
                    task_created.fetch_add(1, Ordering::SeqCst);
                }
                names.push(name);
                n += 1;
                // Pacing, not ordering: the load arrives at a steady rate.
                tokio::time::sleep(every.saturating_sub(started.elapsed())).await;
            }
            names
        });
        Self {
            stop,
            created,
            task,
        }
    }

    /// Objects acknowledged so far.
    pub fn acknowledged(&self) -> u64 {
        self.created.load(Ordering::SeqCst)
    }

    /// Wait until at least `n` objects were acknowledged.
    pub async fn wait_acknowledged(&self, n: u64, limit: Duration) {
        eventually(
            &format!("{n} workload objects are acknowledged"),
            limit,
            || async { (self.acknowledged() >= n).then_some(()) },
        )
        .await;
    }

    /// Stop and return the name of every object it tried to create.
    pub async fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("workload task")
    }
}
