//! `GET /metrics`: the supervisors' counters in the Prometheus text
//! exposition format (version 0.0.4). Every series carries
//! `controller="<name>"` (docs/design.md, point 6), but the API's own,
//! which belongs to the whole host:
//!
//! | series | type | extra labels |
//! |---|---|---|
//! | `leasehold_leader` | gauge: 1 while this replica leads | |
//! | `leasehold_epoch` | gauge: epoch of the tenure held here, 0 if none | |
//! | `leasehold_acquisitions_total` | counter | |
//! | `leasehold_losses_total` | counter | `reason` |
//! | `leasehold_aborts_total` | counter | `reason` |
//! | `leasehold_reconcile_duration_seconds` | histogram | |
//! | `leasehold_commits_total` | counter | `result` = ok, fenced, conflict, failed |
//! | `leasehold_renew_duration_seconds` | histogram | |
//! | `leasehold_quota_refusals_total` | counter: commits a write quota refused | `quota` = max_creates_per_second, max_objects_per_kind |
//! | `leasehold_outbound_requests_total` | counter: outbound HTTP requests of the guests, by what became of them | `outcome` = sent, denied, refused_after_loss, cancelled, timed_out, limited, error |
//! | `leasehold_outbound_request_seconds` | histogram: from sending a request to its response head (or its failure on the wire) | |
//! | `leasehold_http_overloaded_total` | counter: API requests answered 503 `overloaded` (no `controller` label) | `budget` = requests, events |
//! | `leasehold_abort_duration_seconds` | histogram: from a lease loss detected to the guest's Store dropped | |
//! | `leasehold_fenced_refusals_total` | counter: guest commits refused by the fence | `cause` = never_granted, superseded, released, expired, revoked |
//! | `leasehold_controller_degraded` | gauge: 1 while its reconciles keep failing (`degraded_after_failures` in a row, or none succeeding for `degraded_after`) | `controller` |
//! | `leasehold_reconcile_failures_in_a_row` | gauge: failed reconciles since its last success | `controller` |
//! | `leasehold_work_queue_depth` | gauge: keys of the running guest's work queue ready to reconcile now | |
//! | `leasehold_work_queue_oldest_seconds` | gauge: how long the longest-waiting ready key has waited, 0 when none | |
//!
//! The host's own series ([`HostMetrics`]; no `controller` label):
//!
//! | series | type | labels |
//! |---|---|---|
//! | `leasehold_build_info` | gauge, always 1 | `version`, `wit_versions` (the WIT worlds this host links, comma-separated) |
//! | `leasehold_http_requests_total` | counter: API requests answered | `route` (the route template, `unmatched` for none), `method`, `status` |
//! | `leasehold_http_request_duration_seconds` | histogram: from the request reaching the router to its response built | `route`, `method` |
//! | `leasehold_db_pool_connections` | gauge: pooled connections | `pool` = main, authority; `state` = in_use, idle |
//! | `leasehold_db_pool_max_connections` | gauge: the pool's size | `pool` |
//! | `leasehold_db_pool_waiting` | gauge: callers waiting for a connection | `pool` |
//! | `leasehold_db_pool_timeouts_total` | counter: calls that got no connection in time | `pool`, `kind` = wait, create, recycle |
//! | `leasehold_db_tls` | gauge: 1 when the last session the pool opened is encrypted (TLS), else 0; `session` for the dedicated sessions (claim, listener, change feed) | `pool` |
//! | `leasehold_db_notifications_verified` | gauge: the start-up notification self-test: 1 a `NOTIFY` sent through the pool reached the LISTEN session, 0 it did not (a pooler or proxy drops notifications: watchers poll), -1 not run yet | `pool` |
//! | `leasehold_lease_leaderless_seconds` | gauge: 0 while the lease's record shows a live tenure, else the time since its last tenure ended or expired | `lease` |
//! | `leasehold_lease_epoch` | gauge: the lease's last granted epoch, from the database | `lease` |
//! | `leasehold_lease_observe_failures_total` | counter: scrapes that could not read the lease records | |
//! | `leasehold_lease_shard` | gauge, always 1: a lease this host's config runs as a shard of a sharded controller (with `leasehold_leader{controller=LEASE}`, where each shard lives) | `lease`, `controller` (the sharded controller), `index`, `count` |
//! | `leasehold_placement_moves_total` | counter: leases placement moved to this host (counted by the grant that recorded the move) | `reason` = over_share, no_other_host, lapsed |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`, `process_threads`, `process_start_time_seconds` | the standard process series, read from `/proc` (Linux only) | |
//!
//! Known loss and abort reasons, every quota, every outbound outcome and
//! every request budget, every pool's timeout kinds and every served
//! route's latency histogram are always exported (at 0 until they happen),
//! so a rate query works before the first incident. The pool series exist
//! only on PostgreSQL (the embedded backend has no pool), the lease series
//! for the leases of the controllers configured on this host.
//!
//! The lease series are read from the database's records when `/metrics`
//! is scraped: one bounded query ([`crate::timeouts::READINESS_PROBE_TIMEOUT`]),
//! plus one history read per lease that was released, cached for
//! [`crate::timeouts::READINESS_PROBE_MAX_AGE`] so a scrape flood costs at
//! most one round of queries per interval. "Leaderless since" is the
//! record's end (the last tenure's `ended_at` when it was released, else
//! its `expires_at`) against this host's clock; a lease never granted
//! counts from this host's start.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::AppState;
use crate::authority::{Authority, MoveReason};
use crate::db::{Database, PoolStats};
use crate::fence::LeaseKey;
use crate::quota::Quota;
use crate::status::{
    ControllerState, ControllerStatus, Histogram, LATENCY_BUCKETS, OutboundSnapshot, Status,
};

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Loss reasons the supervisors record (see
/// [`crate::status::ControllerMetrics::losses`]).
const LOSS_REASONS: &[&str] = &[
    "renew_refused",
    "renew_deadline",
    "identity_changed",
    "fenced",
];

/// Abort reasons the supervisors record (see
/// [`crate::status::ControllerMetrics::aborts`]).
const ABORT_REASONS: &[&str] = &["lease_lost", "trap", "deadline", "memory", "shutdown"];

pub(super) async fn handler(State(shared): State<AppState>) -> impl IntoResponse {
    let mut text = render(&shared.api.status);
    render_overloaded(&mut text, &[&shared.requests, &shared.events]);
    let host = &shared.host;
    let leases = host
        .leases
        .read(
            shared.api.authority.as_ref(),
            &shared.api.cluster,
            &shared.api.status,
        )
        .await;
    host.render(&mut text, &leases, shared.api.status.placement_moves());
    render_shards(&mut text, &shared.api.status);
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text)
}

/// Families whose series belong to the whole host and carry no
/// `controller` label (every other family does).
pub const HOST_FAMILIES: &[&str] = &[
    "leasehold_http_",
    "leasehold_build_info",
    "leasehold_db_pool_",
    "leasehold_lease_",
    "leasehold_placement_",
    "process_",
];

/// Whether a sample line (or family name) is one of [`HOST_FAMILIES`].
pub fn is_host_series(line: &str) -> bool {
    HOST_FAMILIES.iter().any(|prefix| line.starts_with(prefix))
}

/// The host's own metrics: build, HTTP routes, database pools, the leases'
/// records and the process. One per API router.
#[derive(Debug)]
pub struct HostMetrics {
    /// Requests by route and status, with latencies.
    pub http: HttpMetrics,
    /// The database pools to report (none on the embedded backend).
    pools: Vec<Database>,
    /// The lease records, read at scrape time.
    leases: LeaseRecords,
}

impl Default for HostMetrics {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl HostMetrics {
    /// Metrics of a host whose database pools are `pools` (the main one
    /// and the authority's; none for the embedded backend).
    pub fn new(pools: Vec<Database>) -> Self {
        Self {
            http: HttpMetrics::default(),
            pools,
            leases: LeaseRecords::new(
                crate::timeouts::READINESS_PROBE_TIMEOUT,
                crate::timeouts::READINESS_PROBE_MAX_AGE,
            ),
        }
    }

    /// The database pools now (empty on the embedded backend).
    pub fn pool_stats(&self) -> Vec<PoolStats> {
        self.pools.iter().map(Database::pool_stats).collect()
    }

    /// Append every host family to `out`.
    fn render(&self, out: &mut String, leases: &LeaseSnapshot, moves: [(MoveReason, u64); 3]) {
        render_build_info(out);
        self.http.render(out);
        render_pools(
            out,
            &self
                .pools
                .iter()
                .map(Database::pool_stats)
                .collect::<Vec<_>>(),
        );
        render_leases(out, leases, self.leases.failures());
        render_placement(out, moves);
        render_process(out, &process_snapshot());
    }
}

/// `leasehold_placement_moves_total{reason}`: the placement moves this
/// process's grants recorded ([`Status::placement_moves`]),
/// every reason from the first scrape.
fn render_placement(out: &mut String, moves: [(MoveReason, u64); 3]) {
    header(
        out,
        "leasehold_placement_moves_total",
        "counter",
        "Leases placement moved to this host, counted by the grant that recorded the move, by \
         reason: over_share (handed over by orderly release from a host above its fair share), \
         no_other_host (taken beyond this host's share because no other live host able to run it \
         was below its own), lapsed (taken beyond this host's share because its holder stopped \
         renewing it).",
    );
    for (reason, n) in moves {
        sample(
            out,
            "leasehold_placement_moves_total",
            &labels(&[("reason", reason.as_str())]),
            n,
        );
    }
}

/// `leasehold_build_info`: the version, and the WIT worlds this host links
/// (from the runtime's own list).
fn render_build_info(out: &mut String) {
    header(
        out,
        "leasehold_build_info",
        "gauge",
        "Always 1; the labels name this build: its version and the WIT worlds \
         (leasehold:controller versions) it runs.",
    );
    let worlds: Vec<&str> = crate::runtime::WorldVersion::SUPPORTED
        .iter()
        .map(|v| v.number())
        .collect();
    sample(
        out,
        "leasehold_build_info",
        &labels(&[
            ("version", env!("CARGO_PKG_VERSION")),
            ("wit_versions", &worlds.join(",")),
        ]),
        1,
    );
}

/// HTTP API requests by route template, method and status, and their
/// latencies. Every route the router serves has its latency histogram
/// from the start; counts appear per status as they happen.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    /// `(route, method)` -> latency histogram.
    latencies: std::sync::Mutex<BTreeMap<(String, String), std::sync::Arc<Histogram>>>,
    /// `(route, method, status)` -> requests.
    counts: std::sync::Mutex<BTreeMap<(String, String, u16), u64>>,
}

/// The route label of a request no route matched.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Methods counted under their own name; any other is `other`, so a
/// client cannot grow the label set.
const KNOWN_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
];

impl HttpMetrics {
    /// Export `route` (a template) for `method` from now on, at zero.
    pub fn declare(&self, method: &str, route: &str) {
        self.latency(method, route);
    }

    fn latency(&self, method: &str, route: &str) -> std::sync::Arc<Histogram> {
        let method = method_label(method);
        self.latencies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry((route.to_string(), method.to_string()))
            .or_insert_with(|| std::sync::Arc::new(Histogram::new(LATENCY_BUCKETS)))
            .clone()
    }

    /// Count one answered request.
    pub fn observe(&self, method: &str, route: &str, status: u16, took: std::time::Duration) {
        self.latency(method, route).observe(took);
        *self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry((route.to_string(), method_label(method).to_string(), status))
            .or_insert(0) += 1;
    }

    fn render(&self, out: &mut String) {
        header(
            out,
            "leasehold_http_requests_total",
            "counter",
            "HTTP API requests answered, by route template (unmatched: no route), method and \
             status.",
        );
        let counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for ((route, method, status), count) in counts {
            sample(
                out,
                "leasehold_http_requests_total",
                &labels(&[
                    ("route", &route),
                    ("method", &method),
                    ("status", &status.to_string()),
                ]),
                count,
            );
        }
        let name = "leasehold_http_request_duration_seconds";
        header(
            out,
            name,
            "histogram",
            "Time from an HTTP API request reaching the router to its response built, by route \
             template and method.",
        );
        let latencies = self
            .latencies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for ((route, method), h) in latencies {
            histogram_with(out, name, &[("route", &route), ("method", &method)], &h);
        }
    }
}

fn method_label(method: &str) -> &str {
    KNOWN_METHODS
        .iter()
        .find(|known| **known == method)
        .copied()
        .unwrap_or("other")
}

fn render_pools(out: &mut String, pools: &[PoolStats]) {
    header(
        out,
        "leasehold_db_pool_connections",
        "gauge",
        "Pooled database connections by pool (main: the store's and the API's; authority: the \
         lease authority's own) and state (in_use, idle).",
    );
    for p in pools {
        for (state, n) in [("in_use", p.in_use), ("idle", p.idle)] {
            sample(
                out,
                "leasehold_db_pool_connections",
                &labels(&[("pool", &p.name), ("state", state)]),
                n,
            );
        }
    }
    header(
        out,
        "leasehold_db_pool_max_connections",
        "gauge",
        "The size of each database pool.",
    );
    for p in pools {
        sample(
            out,
            "leasehold_db_pool_max_connections",
            &labels(&[("pool", &p.name)]),
            p.max,
        );
    }
    header(
        out,
        "leasehold_db_pool_waiting",
        "gauge",
        "Callers waiting for a connection of each database pool now.",
    );
    for p in pools {
        sample(
            out,
            "leasehold_db_pool_waiting",
            &labels(&[("pool", &p.name)]),
            p.waiting,
        );
    }
    header(
        out,
        "leasehold_db_notifications_verified",
        "gauge",
        "The start-up notification self-test: 1 when a NOTIFY sent through the pool reached \
         this host's LISTEN session, 0 when it did not (a pooler or proxy between drops \
         notifications; standbys and watchers poll), -1 until it ran.",
    );
    for p in pools {
        sample(
            out,
            "leasehold_db_notifications_verified",
            &labels(&[("pool", &p.name)]),
            match p.notifications {
                Some(true) => 1,
                Some(false) => 0,
                None => -1,
            },
        );
    }
    header(
        out,
        "leasehold_db_tls",
        "gauge",
        "1 when the last session a database pool opened is encrypted (TLS), else 0; pool \
         session: the dedicated sessions (liveness claim, release listener, change feed).",
    );
    for p in pools {
        sample(
            out,
            "leasehold_db_tls",
            &labels(&[("pool", &p.name)]),
            u8::from(p.encrypted == Some(true)),
        );
    }
    if let Some(session) = pools.iter().find_map(|p| p.session_encrypted) {
        sample(
            out,
            "leasehold_db_tls",
            &labels(&[("pool", "session")]),
            u8::from(session),
        );
    }
    header(
        out,
        "leasehold_db_pool_timeouts_total",
        "counter",
        "Calls that got no database connection in time, by pool and kind: wait (every \
         connection busy: the pool is starved), create (connecting took too long), recycle.",
    );
    for p in pools {
        for (kind, n) in p.timeouts {
            sample(
                out,
                "leasehold_db_pool_timeouts_total",
                &labels(&[("pool", &p.name), ("kind", kind)]),
                n,
            );
        }
    }
}

/// What the lease records said at one read.
#[derive(Debug, Clone, Default)]
pub struct LeaseSnapshot {
    /// `(lease, seconds without a leader, last granted epoch)`; the epoch
    /// is 0 for a lease never granted.
    pub leases: Vec<(String, f64, u64)>,
}

/// The lease records, read from the authority at most once per
/// `max_age`, each read bounded by `timeout`.
#[derive(Debug)]
struct LeaseRecords {
    timeout: std::time::Duration,
    max_age: std::time::Duration,
    /// When these metrics were made: a lease never granted has had no
    /// leader since (at least) then.
    since: chrono::DateTime<chrono::Utc>,
    cache: tokio::sync::Mutex<Option<(std::time::Instant, Option<LeaseSnapshot>)>>,
    failures: std::sync::atomic::AtomicU64,
}

impl LeaseRecords {
    fn new(timeout: std::time::Duration, max_age: std::time::Duration) -> Self {
        Self {
            timeout,
            max_age,
            since: chrono::Utc::now(),
            cache: tokio::sync::Mutex::new(None),
            failures: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The records of the configured controllers' leases: cached, or read
    /// now. An empty snapshot when the read failed (counted).
    async fn read(
        &self,
        authority: &dyn Authority,
        cluster: &str,
        status: &Status,
    ) -> LeaseSnapshot {
        let mut cache = self.cache.lock().await;
        if let Some((at, snapshot)) = cache.as_ref()
            && at.elapsed() < self.max_age
        {
            return snapshot.clone().unwrap_or_default();
        }
        let names: Vec<String> = status
            .controllers()
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let read = tokio::time::timeout(self.timeout, self.read_now(authority, cluster, &names));
        let snapshot = match read.await {
            Ok(Ok(snapshot)) => Some(snapshot),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "/metrics cannot read the lease records");
                None
            }
            Err(_) => {
                tracing::debug!(timeout = ?self.timeout, "/metrics: reading the lease records timed out");
                None
            }
        };
        if snapshot.is_none() {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        *cache = Some((std::time::Instant::now(), snapshot.clone()));
        snapshot.unwrap_or_default()
    }

    async fn read_now(
        &self,
        authority: &dyn Authority,
        cluster: &str,
        names: &[String],
    ) -> Result<LeaseSnapshot, crate::authority::AuthorityError> {
        let records = authority.observe(cluster).await?;
        let now = chrono::Utc::now();
        let seconds_since = |at: chrono::DateTime<chrono::Utc>| {
            ((now - at).num_milliseconds().max(0) as f64) / 1000.0
        };
        let mut leases = Vec::with_capacity(names.len());
        for name in names {
            let Some(record) = records.iter().find(|r| &r.name == name) else {
                leases.push((name.clone(), seconds_since(self.since), 0));
                continue;
            };
            let leaderless = if record.active {
                0.0
            } else if record.released {
                // Released: its last tenure's end is when it lost its
                // leader (the row keeps the grant's expiry).
                let key = LeaseKey::new(cluster, name);
                let last = authority.history_before(&key, None, 1).await?;
                let ended = last
                    .first()
                    .and_then(|t| t.ended_at)
                    .unwrap_or(record.expires_at);
                seconds_since(ended.min(record.expires_at))
            } else {
                seconds_since(record.expires_at)
            };
            leases.push((name.clone(), leaderless, record.epoch.0));
        }
        Ok(LeaseSnapshot { leases })
    }
}

fn render_leases(out: &mut String, snapshot: &LeaseSnapshot, failures: u64) {
    header(
        out,
        "leasehold_lease_leaderless_seconds",
        "gauge",
        "0 while the database's record of the lease shows a live tenure; else seconds since its \
         last tenure ended or expired (a lease never granted: since this host started).",
    );
    for (lease, seconds, _) in &snapshot.leases {
        sample(
            out,
            "leasehold_lease_leaderless_seconds",
            &labels(&[("lease", lease)]),
            seconds,
        );
    }
    header(
        out,
        "leasehold_lease_epoch",
        "gauge",
        "The lease's last granted epoch, from the database's record (0: never granted).",
    );
    for (lease, _, epoch) in &snapshot.leases {
        sample(
            out,
            "leasehold_lease_epoch",
            &labels(&[("lease", lease)]),
            epoch,
        );
    }
    header(
        out,
        "leasehold_lease_observe_failures_total",
        "counter",
        "Scrapes of /metrics that could not read the lease records in time (the lease series \
         are missing from those).",
    );
    let _ = writeln!(out, "leasehold_lease_observe_failures_total {failures}");
}

/// `leasehold_lease_shard{lease, controller, index, count}`: one series,
/// always 1, per lease this host's config runs as a shard, in lease order;
/// the family is left out when there is none.
fn render_shards(out: &mut String, status: &Status) {
    let mut shards: Vec<(String, String, crate::shard::Shard)> = status
        .controllers()
        .iter()
        .filter_map(|c| {
            let (controller, shard) = status.shard_of(&c.name)?;
            Some((c.name.clone(), controller, shard))
        })
        .collect();
    if shards.is_empty() {
        return;
    }
    shards.sort_by(|a, b| a.0.cmp(&b.0));
    header(
        out,
        "leasehold_lease_shard",
        "gauge",
        "Always 1: a lease this host runs as shard index of count of a sharded controller \
         (shards = count); leasehold_leader{controller=<lease>} says whether it leads here.",
    );
    for (lease, controller, shard) in shards {
        sample(
            out,
            "leasehold_lease_shard",
            &labels(&[
                ("lease", &lease),
                ("controller", &controller),
                ("index", &shard.index.to_string()),
                ("count", &shard.count.to_string()),
            ]),
            1,
        );
    }
}

/// The process as `/proc` shows it; `None` fields are left out.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProcessSnapshot {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size, bytes.
    pub resident_bytes: Option<u64>,
    /// Virtual memory size, bytes.
    pub virtual_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The file-descriptor limit (soft).
    pub max_fds: Option<u64>,
    /// Threads.
    pub threads: Option<u64>,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

/// Read the process's figures (Linux: `/proc/self`); elsewhere nothing.
pub fn process_snapshot() -> ProcessSnapshot {
    #[cfg(target_os = "linux")]
    {
        linux_process()
    }
    #[cfg(not(target_os = "linux"))]
    {
        ProcessSnapshot::default()
    }
}

#[cfg(target_os = "linux")]
fn linux_process() -> ProcessSnapshot {
    // SAFETY: `sysconf` only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let mut snapshot = ProcessSnapshot::default();
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        let parsed = parse_stat(&stat);
        if let Some(p) = parsed {
            if ticks > 0 {
                let ticks = ticks as f64;
                snapshot.cpu_seconds = Some((p.utime + p.stime) as f64 / ticks);
                let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|text| {
                    text.lines()
                        .find_map(|l| l.strip_prefix("btime "))
                        .and_then(|v| v.trim().parse::<u64>().ok())
                });
                snapshot.start_time_seconds = boot.map(|b| b as f64 + p.starttime as f64 / ticks);
            }
            snapshot.virtual_bytes = Some(p.vsize);
            if page > 0 {
                snapshot.resident_bytes = Some(p.rss.saturating_mul(page as u64));
            }
            snapshot.threads = Some(p.threads);
        }
    }
    snapshot.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|dir| dir.count() as u64);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` into the pointer given, which
    // points at a live value.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        snapshot.max_fds = Some(limit.rlim_cur);
    }
    snapshot
}

/// The fields of `/proc/self/stat` the process series need.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    utime: u64,
    stime: u64,
    threads: u64,
    starttime: u64,
    vsize: u64,
    rss: u64,
}

/// Parse `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may hold spaces or parentheses itself, so fields are counted from
/// after its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `fields[0]` is field 3 (state): field n is at n - 3.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        threads: field(20)?,
        starttime: field(22)?,
        vsize: field(23)?,
        rss: field(24)?,
    })
}

fn render_process(out: &mut String, p: &ProcessSnapshot) {
    let families: [(&str, &str, &str, Option<String>); 7] = [
        (
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            p.cpu_seconds.map(|v| v.to_string()),
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            p.resident_bytes.map(|v| v.to_string()),
        ),
        (
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            p.virtual_bytes.map(|v| v.to_string()),
        ),
        (
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            p.open_fds.map(|v| v.to_string()),
        ),
        (
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            p.max_fds.map(|v| v.to_string()),
        ),
        (
            "process_threads",
            "gauge",
            "Number of OS threads in the process.",
            p.threads.map(|v| v.to_string()),
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            p.start_time_seconds.map(|v| v.to_string()),
        ),
    ];
    for (name, kind, help, value) in families {
        // Absent where it cannot be read (not Linux): no family at all.
        if let Some(value) = value {
            header(out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
    }
}

/// `leasehold_http_overloaded_total`: the refusals of each request budget.
fn render_overloaded(out: &mut String, budgets: &[&super::serve::Limiter]) {
    header(
        out,
        "leasehold_http_overloaded_total",
        "counter",
        "HTTP API requests answered 503 overloaded (with Retry-After) because their budget of \
         requests at once was spent, by budget: requests (every /v1 request but events), events.",
    );
    for budget in budgets {
        sample(
            out,
            "leasehold_http_overloaded_total",
            &labels(&[("budget", budget.name())]),
            budget.refused(),
        );
    }
}

/// Escape a label value: backslash, double quote and newline.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels_text: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{name}{labels_text} {value}");
}

/// Counts by reason: every known reason, plus any other the supervisors
/// recorded.
fn by_reason(
    map: &std::sync::Mutex<BTreeMap<&'static str, u64>>,
    known: &[&'static str],
) -> BTreeMap<String, u64> {
    let recorded = map
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let mut all: BTreeMap<String, u64> = known.iter().map(|r| (r.to_string(), 0)).collect();
    for (reason, count) in recorded {
        all.insert(reason.to_string(), count);
    }
    all
}

fn histogram(out: &mut String, name: &str, controller: &str, h: &Histogram) {
    histogram_with(out, name, &[("controller", controller)], h);
}

/// One histogram's series, with `base` labels on each.
fn histogram_with(out: &mut String, name: &str, base: &[(&str, &str)], h: &Histogram) {
    let (buckets, sum, count) = h.snapshot();
    let with_le = |le: &str| {
        let mut all = base.to_vec();
        all.push(("le", le));
        labels(&all)
    };
    for (bound, cumulative) in buckets {
        sample(
            out,
            &format!("{name}_bucket"),
            &with_le(&format!("{bound}")),
            cumulative,
        );
    }
    sample(out, &format!("{name}_bucket"), &with_le("+Inf"), count);
    let plain = labels(base);
    sample(out, &format!("{name}_sum"), &plain, sum);
    sample(out, &format!("{name}_count"), &plain, count);
}

/// Render every controller's metrics.
pub fn render(status: &Status) -> String {
    let controllers = status.controllers();
    let controllers: Vec<&ControllerStatus> = controllers.iter().map(AsRef::as_ref).collect();
    let mut out = String::new();

    header(
        &mut out,
        "leasehold_leader",
        "gauge",
        "1 while this replica holds the controller's lease and runs its guest, else 0.",
    );
    for c in &controllers {
        let leading = matches!(c.get(), ControllerState::Leading { .. });
        sample(
            &mut out,
            "leasehold_leader",
            &labels(&[("controller", &c.name)]),
            u8::from(leading),
        );
    }

    header(
        &mut out,
        "leasehold_epoch",
        "gauge",
        "Fencing epoch of the tenure this replica holds; 0 when it holds none.",
    );
    for c in &controllers {
        let epoch = match c.get() {
            ControllerState::Leading { epoch, .. } => epoch,
            _ => 0,
        };
        sample(
            &mut out,
            "leasehold_epoch",
            &labels(&[("controller", &c.name)]),
            epoch,
        );
    }

    header(
        &mut out,
        "leasehold_acquisitions_total",
        "counter",
        "Leases acquired by this replica.",
    );
    for c in &controllers {
        sample(
            &mut out,
            "leasehold_acquisitions_total",
            &labels(&[("controller", &c.name)]),
            c.metrics.acquisitions.load(Ordering::Relaxed),
        );
    }

    header(
        &mut out,
        "leasehold_losses_total",
        "counter",
        "Leases this replica lost, by reason.",
    );
    for c in &controllers {
        for (reason, count) in by_reason(&c.metrics.losses, LOSS_REASONS) {
            sample(
                &mut out,
                "leasehold_losses_total",
                &labels(&[("controller", &c.name), ("reason", &reason)]),
                count,
            );
        }
    }

    header(
        &mut out,
        "leasehold_aborts_total",
        "counter",
        "Guest instances torn down, by reason.",
    );
    for c in &controllers {
        for (reason, count) in by_reason(&c.metrics.aborts, ABORT_REASONS) {
            sample(
                &mut out,
                "leasehold_aborts_total",
                &labels(&[("controller", &c.name), ("reason", &reason)]),
                count,
            );
        }
    }

    header(
        &mut out,
        "leasehold_reconcile_duration_seconds",
        "histogram",
        "Duration of one reconcile call.",
    );
    for c in &controllers {
        histogram(
            &mut out,
            "leasehold_reconcile_duration_seconds",
            &c.name,
            &c.metrics.reconcile_seconds,
        );
    }

    header(
        &mut out,
        "leasehold_commits_total",
        "counter",
        "Fenced commits by result: ok, fenced (stale epoch refused), conflict (version), failed.",
    );
    for c in &controllers {
        let commits = &c.metrics.commits;
        for (result, counter) in [
            ("ok", &commits.ok),
            ("fenced", &commits.fenced),
            ("conflict", &commits.conflict),
            ("failed", &commits.failed),
        ] {
            sample(
                &mut out,
                "leasehold_commits_total",
                &labels(&[("controller", &c.name), ("result", result)]),
                counter.load(Ordering::Relaxed),
            );
        }
    }

    header(
        &mut out,
        "leasehold_quota_refusals_total",
        "counter",
        "Guest commits refused by a write quota (nothing written), by quota.",
    );
    for c in &controllers {
        for quota in Quota::ALL {
            sample(
                &mut out,
                "leasehold_quota_refusals_total",
                &labels(&[("controller", &c.name), ("quota", quota.key())]),
                c.metrics
                    .commits
                    .quota_refusals(quota)
                    .load(Ordering::Relaxed),
            );
        }
    }

    header(
        &mut out,
        "leasehold_outbound_requests_total",
        "counter",
        "Outbound HTTP requests of the guests, by outcome: sent (a response head arrived), denied \
         (not in http_allow), refused_after_loss, cancelled (in flight when the lease was lost or \
         the guest aborted), timed_out, limited (a host bound), error.",
    );
    let outbound: Vec<OutboundSnapshot> = controllers
        .iter()
        .map(|c| c.metrics.outbound.snapshot())
        .collect();
    for (c, totals) in controllers.iter().zip(&outbound) {
        for (outcome, count) in &totals.outcomes {
            sample(
                &mut out,
                "leasehold_outbound_requests_total",
                &labels(&[("controller", &c.name), ("outcome", outcome.label())]),
                count,
            );
        }
    }

    header(
        &mut out,
        "leasehold_outbound_request_seconds",
        "histogram",
        "Time from sending an outbound HTTP request to its response head (or its failure on the \
         wire).",
    );
    for (c, totals) in controllers.iter().zip(&outbound) {
        let name = "leasehold_outbound_request_seconds";
        for (bound, cumulative) in &totals.buckets {
            let le = if bound.is_finite() {
                format!("{bound}")
            } else {
                "+Inf".to_string()
            };
            sample(
                &mut out,
                &format!("{name}_bucket"),
                &labels(&[("controller", &c.name), ("le", &le)]),
                cumulative,
            );
        }
        let plain = labels(&[("controller", &c.name)]);
        sample(&mut out, &format!("{name}_sum"), &plain, totals.sum);
        sample(&mut out, &format!("{name}_count"), &plain, totals.count);
    }

    header(
        &mut out,
        "leasehold_renew_duration_seconds",
        "histogram",
        "Round-trip time of lease renewals.",
    );
    for c in &controllers {
        histogram(
            &mut out,
            "leasehold_renew_duration_seconds",
            &c.name,
            &c.metrics.renew_seconds,
        );
    }

    header(
        &mut out,
        "leasehold_fenced_refusals_total",
        "counter",
        "Guest commits refused because the tenure's fence was no longer current, by \
         cause: the database's verdict (never_granted, superseded, released, expired) \
         or revoked (the host knew the lease was lost and sent nothing).",
    );
    for c in &controllers {
        for (cause, count) in c.metrics.commits.fenced_by_cause() {
            sample(
                &mut out,
                "leasehold_fenced_refusals_total",
                &labels(&[("controller", &c.name), ("cause", cause)]),
                count,
            );
        }
    }

    header(
        &mut out,
        "leasehold_controller_degraded",
        "gauge",
        "1 while the controller's reconciles keep failing on this replica \
         (degraded_after_failures in a row, or none succeeding for degraded_after); \
         /readyz lists it under degraded with its last error.",
    );
    let degraded_now = tokio::time::Instant::now();
    for c in &controllers {
        sample(
            &mut out,
            "leasehold_controller_degraded",
            &labels(&[("controller", &c.name)]),
            u8::from(c.metrics.health.degraded(degraded_now).is_some()),
        );
    }
    header(
        &mut out,
        "leasehold_reconcile_failures_in_a_row",
        "gauge",
        "Failed reconciles of the controller on this replica since its last success.",
    );
    for c in &controllers {
        sample(
            &mut out,
            "leasehold_reconcile_failures_in_a_row",
            &labels(&[("controller", &c.name)]),
            c.metrics.health.failures_in_a_row(),
        );
    }

    header(
        &mut out,
        "leasehold_work_queue_depth",
        "gauge",
        "Keys in the running guest's work queue that are ready to reconcile now \
         (timers not yet due are not counted); 0 while no guest runs here.",
    );
    for c in &controllers {
        sample(
            &mut out,
            "leasehold_work_queue_depth",
            &labels(&[("controller", &c.name)]),
            c.metrics.queue.depth(),
        );
    }

    header(
        &mut out,
        "leasehold_work_queue_oldest_seconds",
        "gauge",
        "How long the longest-waiting ready key of the work queue has waited for \
         the worker, in seconds; 0 when none waits.",
    );
    let now = std::time::Instant::now();
    for c in &controllers {
        sample(
            &mut out,
            "leasehold_work_queue_oldest_seconds",
            &labels(&[("controller", &c.name)]),
            c.metrics.queue.oldest_age(now).as_secs_f64(),
        );
    }

    header(
        &mut out,
        "leasehold_abort_duration_seconds",
        "histogram",
        "From a lease loss detected to the guest's Store dropped (the hard abort).",
    );
    for c in &controllers {
        histogram(
            &mut out,
            "leasehold_abort_duration_seconds",
            &c.name,
            &c.metrics.abort_seconds,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_refusals_are_exported_by_cause_from_the_start() {
        let status = Status::new("c1".into(), "host-a".into(), &["sched".to_string()]);
        let text = render(&status);
        assert!(
            text.contains("# TYPE leasehold_fenced_refusals_total counter"),
            "{text}"
        );
        for cause in crate::runtime::host::store::FENCED_CAUSES {
            assert!(
                text.contains(&format!(
                    "leasehold_fenced_refusals_total{{controller=\"sched\",cause=\"{cause}\"}} 0\n"
                )),
                "{cause}: {text}"
            );
        }
        let sched = status.controller("sched").expect("configured");
        sched
            .metrics
            .commits
            .fenced_because(Some(crate::fence::FenceCause::Superseded));
        let text = render(&status);
        assert!(
            text.contains(
                "leasehold_fenced_refusals_total{controller=\"sched\",cause=\"superseded\"} 1\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_work_queue_is_exported_per_controller_and_its_age_grows_at_scrape() {
        let status = Status::new("c1".into(), "host-a".into(), &["sched".to_string()]);
        let text = render(&status);
        // From the first scrape, at 0.
        assert!(
            text.contains("leasehold_work_queue_depth{controller=\"sched\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_work_queue_oldest_seconds{controller=\"sched\"} 0\n"),
            "{text}"
        );
        let sched = status.controller("sched").expect("configured");
        let since = std::time::Instant::now() - std::time::Duration::from_secs(30);
        sched.metrics.queue.publish(3, Some(since));
        let text = render(&status);
        assert!(
            text.contains("leasehold_work_queue_depth{controller=\"sched\"} 3\n"),
            "{text}"
        );
        let age: f64 = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("leasehold_work_queue_oldest_seconds{controller=\"sched\"} ")
            })
            .expect("the age series")
            .parse()
            .expect("a number");
        assert!((30.0..60.0).contains(&age), "{age}");
        // The worker gone: back to 0.
        sched.metrics.queue.publish(0, None);
        assert!(
            render(&status)
                .contains("leasehold_work_queue_oldest_seconds{controller=\"sched\"} 0\n")
        );
    }

    #[test]
    fn quota_refusals_are_exported_per_controller_and_quota() {
        let status = Status::new("c1".into(), "host-a".into(), &["flood".to_string()]);
        let flood = status.controller("flood").expect("configured");
        flood
            .metrics
            .commits
            .quota_refusals(Quota::CreatesPerSecond)
            .fetch_add(3, Ordering::Relaxed);
        let text = render(&status);
        assert!(
            text.contains("# TYPE leasehold_quota_refusals_total counter"),
            "{text}"
        );
        assert!(
            text.contains(
                "leasehold_quota_refusals_total{controller=\"flood\",quota=\"max_creates_per_second\"} 3\n"
            ),
            "{text}"
        );
        // Exported at 0 before the first refusal.
        assert!(
            text.contains(
                "leasehold_quota_refusals_total{controller=\"flood\",quota=\"max_objects_per_kind\"} 0\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn outbound_requests_are_exported_per_controller_and_outcome() {
        use crate::outbound::{OutboundCounters, Outcome};
        let status = Status::new(
            "c1".into(),
            "host-a".into(),
            &["caller".to_string(), "quiet".to_string()],
        );
        let caller = status.controller("caller").expect("configured");
        let counters = std::sync::Arc::new(OutboundCounters::default());
        for _ in 0..3 {
            counters.count(Outcome::Sent);
        }
        counters.count(Outcome::RefusedAfterLoss);
        counters.observe(std::time::Duration::from_millis(3));
        counters.observe(std::time::Duration::from_secs(20));
        caller.metrics.outbound.attach(counters);
        let text = render(&status);
        let has = |line: &str| text.lines().any(|l| l == line);
        for line in [
            "# TYPE leasehold_outbound_requests_total counter",
            "leasehold_outbound_requests_total{controller=\"caller\",outcome=\"sent\"} 3",
            "leasehold_outbound_requests_total{controller=\"caller\",outcome=\"refused_after_loss\"} 1",
            "# TYPE leasehold_outbound_request_seconds histogram",
            "leasehold_outbound_request_seconds_bucket{controller=\"caller\",le=\"0.0025\"} 0",
            "leasehold_outbound_request_seconds_bucket{controller=\"caller\",le=\"0.005\"} 1",
            "leasehold_outbound_request_seconds_bucket{controller=\"caller\",le=\"10\"} 1",
            "leasehold_outbound_request_seconds_bucket{controller=\"caller\",le=\"+Inf\"} 2",
            "leasehold_outbound_request_seconds_sum{controller=\"caller\"} 20.003",
            "leasehold_outbound_request_seconds_count{controller=\"caller\"} 2",
            // A controller that never sent anything shows zeros, not nothing.
            "leasehold_outbound_request_seconds_bucket{controller=\"quiet\",le=\"+Inf\"} 0",
            "leasehold_outbound_request_seconds_count{controller=\"quiet\"} 0",
        ] {
            assert!(has(line), "missing {line:?} in\n{text}");
        }
        // Every outcome, zero included, for every controller.
        for controller in ["caller", "quiet"] {
            for outcome in Outcome::ALL {
                let prefix = format!(
                    "leasehold_outbound_requests_total{{controller=\"{controller}\",outcome=\"{}\"}} ",
                    outcome.label()
                );
                assert_eq!(
                    text.lines().filter(|l| l.starts_with(&prefix)).count(),
                    1,
                    "{prefix} in\n{text}"
                );
            }
        }
        assert!(has(
            "leasehold_outbound_requests_total{controller=\"quiet\",outcome=\"denied\"} 0"
        ));
        // Exactly one +Inf bucket (the counters' own last bound).
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with(
                    "leasehold_outbound_request_seconds_bucket{controller=\"caller\",le=\"+Inf\"}"
                ))
                .count(),
            1
        );
        assert!(!text.contains("le=\"inf\""), "{text}");
    }

    /// The lease series follow the database's record: 0 while a tenure
    /// is live, the time since its end once released, and since this
    /// host's start for a lease never granted.
    #[tokio::test]
    async fn leaderless_seconds_follow_the_lease_record() {
        use crate::authority::memory::MemoryAuthority;
        use crate::authority::{AcquireRequest, Acquired, EndReason};
        let authority = MemoryAuthority::new();
        let status = Status::new(
            "c1".into(),
            "host-a".into(),
            &["led".to_string(), "never".to_string()],
        );
        let records =
            LeaseRecords::new(std::time::Duration::from_secs(1), std::time::Duration::ZERO);
        let Acquired::Granted(grant) = authority
            .acquire(&AcquireRequest {
                key: LeaseKey::new("c1", "led"),
                holder: "host-a".into(),
                ttl: std::time::Duration::from_secs(60),
            })
            .await
            .unwrap()
        else {
            panic!("granted")
        };
        let snapshot = records.read(&authority, "c1", &status).await;
        let led = snapshot.leases.iter().find(|l| l.0 == "led").unwrap();
        assert_eq!((led.1, led.2), (0.0, 1), "{snapshot:?}");
        let never = snapshot.leases.iter().find(|l| l.0 == "never").unwrap();
        assert_eq!(never.2, 0);
        assert!(never.1 >= 0.0);

        authority
            .release(&grant.fence, EndReason::Released)
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let snapshot = records.read(&authority, "c1", &status).await;
        let led = snapshot.leases.iter().find(|l| l.0 == "led").unwrap();
        assert!(led.1 >= 0.02 && led.1 < 30.0, "{snapshot:?}");
        assert_eq!(led.2, 1);
        let mut text = String::new();
        render_leases(&mut text, &snapshot, records.failures());
        assert!(
            text.contains("leasehold_lease_epoch{lease=\"led\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("leasehold_lease_observe_failures_total 0\n"));
    }

    /// Each lease this host runs as a shard is one `leasehold_lease_shard`
    /// series naming its controller, index and count; an unsharded lease
    /// has none, and a host without shards exports no such family.
    #[test]
    fn shards_are_exported_with_their_controller_index_and_count() {
        let status = Status::new(
            "c1".into(),
            "host-a".into(),
            &[
                "sched-0".to_string(),
                "sched-1".to_string(),
                "plain".to_string(),
            ],
        );
        let mut text = String::new();
        render_shards(&mut text, &status);
        assert!(text.is_empty(), "{text}");
        for index in 0..2 {
            status.set_shard(
                &format!("sched-{index}"),
                "sched",
                crate::shard::Shard { index, count: 2 },
            );
        }
        render_shards(&mut text, &status);
        assert!(
            text.contains("# TYPE leasehold_lease_shard gauge\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "leasehold_lease_shard{lease=\"sched-0\",controller=\"sched\",index=\"0\",count=\"2\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "leasehold_lease_shard{lease=\"sched-1\",controller=\"sched\",index=\"1\",count=\"2\"} 1\n"
            ),
            "{text}"
        );
        assert!(!text.contains("plain"), "{text}");
    }

    #[test]
    fn proc_stat_fields_are_counted_after_the_command_name() {
        // The command name may hold spaces and parentheses.
        let line = "4242 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 110 220 11 12 20 0 7 0 5000 \
                    123456789 300 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                utime: 110,
                stime: 220,
                threads: 7,
                starttime: 5000,
                vsize: 123456789,
                rss: 300,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        #[cfg(target_os = "linux")]
        {
            let now = process_snapshot();
            assert!(now.threads.unwrap() >= 1);
            assert!(now.resident_bytes.unwrap() > 0);
            assert!(now.open_fds.unwrap() >= 3);
            let started = now.start_time_seconds.unwrap();
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            assert!(
                started <= wall + 1.0 && started > wall - 86_400.0,
                "{started}"
            );
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("line\nbreak"), "line\\nbreak");
        assert_eq!(labels(&[("controller", "x\"y")]), "{controller=\"x\\\"y\"}");
    }
}
