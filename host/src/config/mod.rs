//! The host's configuration: one TOML file, read and checked once at start.
//!
//! Owns: the file's keys and their defaults, the environment overrides
//! (`LEASEHOLD_DATABASE_URL`, `LEASEHOLD_GUEST_DIR`), path resolution
//! relative to the config file, and every bound a configured value must
//! stay within. Must never: connect to the database, compile components or
//! start anything; deeper checks belong to `leasehold check`.
//!
//! Checking collects every problem in the file, each with its line, so one
//! run of `leasehold check` shows all of them. Unknown keys are refused by
//! name: a misspelt `lease_tll` must not silently fall back to a default.
//!
//! ```toml
//! cluster = "demo"                 # required: a DNS label
//! holder = "replica-a"             # optional: default <hostname>-<pid>-<4 hex>
//! crash_detection = "session"      # default of every controller: "session" or "ttl"
//! data_dir = "leasehold-data"      # the embedded backend's folder, relative to this file
//!
//! [database]
//! url = "postgres://postgres@127.0.0.1:5432/postgres"  # absent: embedded SQLite in data_dir;
//!                                  # "memory:": in memory, one process, not durable
//! session_url = "postgres://…"     # optional: the dedicated sessions, never via a pooler
//! pooler = "none"                  # or "transaction": url goes through PgBouncer pool_mode = transaction
//! max_connections = 16
//! expected_database_id = "…uuid…"  # optional: refuse any other database
//! expected_system_identifier = "…" # optional: refuse any other server
//!
//! [http]
//! listen = "127.0.0.1:8080"
//! tls_cert = "tls/api.pem"         # optional: serve HTTPS only (with tls_key)
//! tls_key = "tls/api.key"
//! tls_client_ca = "tls/clients.pem" # optional: clients must present a certificate from these CAs
//! token = "…"                      # optional: shorthand for one write token named "default"
//!
//! [[http.tokens]]                  # optional: with any token, every /v1 request needs one
//! name = "tasks-team"              # a DNS label, unique
//! file = "tokens/tasks-team"       # the token is the file's content; relative to this file
//! role = "write"                   # or "read"
//! kinds = ["tasks"]                # optional: the only object kinds it may read or write
//!
//! [runtime]
//! pooling = true
//! cache_dir = "cache"              # optional, relative to the config file
//!
//! [store]
//! event_retention = "7days"        # events and changes older than this are trimmed
//! tenure_retention = 1000          # newest tenures kept per lease
//!
//! [[controllers]]
//! name = "scheduler"
//! component = "${LEASEHOLD_GUEST_DIR}/scheduler.wasm"
//! lease_ttl = "10s"
//! renew_interval = "2s"
//! renew_deadline = "7s"
//! reconcile_deadline = "30s"
//! backoff_min = "100ms"
//! backoff_max = "30s"
//! memory_limit = "64MiB"
//! max_queue = 100000
//! max_creates_per_second = 100     # write quotas of the guest
//! create_burst = 1000
//! max_objects_per_kind = 100000
//! dirs = [{ host = "data", guest = "/data", writable = false }]
//! http_allow = ["https://api.example.com", "http://127.0.0.1:9000/hooks/"]
//! http_ca = "company-ca.pem"       # optional: CAs trusted beside the public roots for its HTTPS
//! crash_detection = "session"      # or "ttl"; default: the top-level key
//!
//! [controllers.settings]           # optional: any table, for the guest
//! max_tasks_per_project = 10
//! regions = ["eu-west", "us-east"]
//! ```
//!
//! `crash_detection` says how a controller's lease is taken over when the
//! host holding it dies without releasing it. `"session"` (the default):
//! as soon as the database sees the host's liveness session gone (a
//! SIGKILL, a crash, a terminated backend: well under a second), and by
//! expiry otherwise (a partition that leaves the session open). `"ttl"`:
//! only once the lease expired, `lease_ttl` after its last renewal. Safety
//! never rests on either: every write of an old tenure is refused inside
//! its own transaction, whichever way the next one was granted.
//!
//! `http_allow` lists where the controller's guest may send HTTP requests
//! (`wasi:http/outgoing-handler`): each entry is `scheme://host[:port]`
//! with an optional path prefix; absent or empty, the guest reaches no
//! network at all. Entries never hold credentials (`user:password@` is
//! refused, and no message quotes one).
//!
//! `[controllers.settings]` is any TOML table, handed to the controller's
//! guest as a JSON object (`settings.get` of `leasehold:controller@0.2.0`;
//! the Rust SDK's `leasehold_guest::settings::<T>()`): tables become
//! objects, date-times RFC 3339 strings. It may hold at most
//! [`crate::limits::MAX_SETTINGS_BYTES`] of JSON and no `nan` or infinite
//! float. A reload (SIGHUP) that changes it restarts the controller, whose
//! next instance reads the new settings; a component built against
//! `leasehold:controller@0.1.0` cannot read them. Settings are never
//! logged: they may hold secrets.

mod raw;
mod resolve;
mod settings;
#[cfg(test)]
mod tests;
mod units;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use thiserror::Error;

use crate::authority::{CrashDetection, ExpectedIdentity, LeaseTiming};
use crate::outbound::AllowList;
use crate::runtime::{DirGrant, EngineConfig, GuestLimits};

/// Environment variable naming the folder that `${LEASEHOLD_GUEST_DIR}` in
/// a component path expands to.
pub const GUEST_DIR_ENV: &str = "LEASEHOLD_GUEST_DIR";

/// Where `${LEASEHOLD_GUEST_DIR}` points when the variable is not set,
/// relative to the parent of the config file's folder. This is where
/// `cargo xtask guests` puts the example components, so a config kept in
/// `examples/` of a checkout finds them without any setup.
pub const DEFAULT_GUEST_DIR: &str = "target/wasm32-wasip2/guest";

/// The placeholder expanded in component paths.
pub const GUEST_DIR_PLACEHOLDER: &str = "${LEASEHOLD_GUEST_DIR}";

/// Default `[http] listen`: loopback only, so a development host is not
/// reachable from the network until someone decides it should be.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

// Floors and ceilings of the durations, with their reasons, live with
// every other duration.
pub use crate::limits::{
    DEFAULT_MAX_CONNECTIONS, MAX_CONFIG_BYTES, MAX_DATABASE_CONNECTIONS, MAX_DIRS,
    MAX_GUEST_MEMORY_BYTES, MAX_GUEST_PATH_BYTES, MAX_TOKEN_BYTES, MIN_GUEST_MEMORY_BYTES,
};
pub use crate::timeouts::{MAX_BACKOFF, MAX_LEASE_TTL, MAX_RECONCILE_DEADLINE, MIN_LEASE_TTL};

/// The checked configuration of one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The cluster every lease and object of this host belongs to (a DNS
    /// label). Replicas of one deployment share it; different deployments
    /// sharing one database must not.
    pub cluster: String,
    /// This replica's holder identity in leases and history. Always `Some`
    /// after [`Config::load`] or [`Config::parse`]: when the file has no
    /// `holder`, the process-wide default from [`default_holder`] is filled
    /// in, so every part of one process uses the same identity.
    pub holder: Option<String>,
    /// `[database]`.
    pub database: DatabaseConfig,
    /// `[http]`.
    pub http: HttpConfig,
    /// `[runtime]`.
    pub runtime: RuntimeConfig,
    /// `[telemetry]`.
    pub telemetry: TelemetryConfig,
    /// `[store]`: retention (see [`crate::store::retention`]).
    pub store: StoreConfig,
    /// `[placement]`: fair placement of leases across the live hosts
    /// (see [`crate::supervisor::placement`]). Read at start.
    pub placement: crate::supervisor::placement::PlacementSettings,
    /// `[[controllers]]`, in file order, names unique.
    pub controllers: Vec<ControllerConfig>,
    /// `data_dir`, absolute: where the embedded backend keeps its
    /// database, used when `[database] url` is absent (default
    /// [`DEFAULT_DATA_DIR`] beside the config file). Several hosts on this
    /// machine naming the same folder share its state and leases.
    pub data_dir: PathBuf,
    /// The absolute folder of the config file; relative paths in the file
    /// are resolved against it. Not a TOML key.
    pub base_dir: PathBuf,
}

/// Default `data_dir`, relative to the config file's folder.
pub const DEFAULT_DATA_DIR: &str = "leasehold-data";

/// `[database] url` naming the in-memory backend: one process, nothing
/// durable (tests and throwaway experiments).
pub const MEMORY_URL: &str = "memory:";

/// Which backend a config selects ([`DatabaseConfig::backend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend<'a> {
    /// No `url`: the durable embedded backend (SQLite in `data_dir`),
    /// shared by the hosts of one machine.
    Embedded,
    /// `url = "memory:"`: the in-memory backend, one process, not durable.
    Memory,
    /// A PostgreSQL URL.
    Postgres(&'a str),
}

/// `[database]`.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseConfig {
    /// PostgreSQL URL, or [`MEMORY_URL`]. `None` selects the embedded
    /// backend in `data_dir` ([`Backend`]). `LEASEHOLD_DATABASE_URL`
    /// overrides it (see [`DatabaseConfig::apply_url_override`]).
    pub url: Option<String>,
    /// Where the host's dedicated, never-pooled sessions connect: the
    /// liveness session holding the holder claim, and the release
    /// listener. `None`: `url`. Set it when `url` goes through a
    /// transaction-pooling proxy: these sessions need PostgreSQL itself
    /// (a session lock, the backend pid, LISTEN).
    pub session_url: Option<String>,
    /// What `url` goes through (`pooler`, default `"none"`):
    /// [`crate::db::Pooler::Transaction`] for a pooler in transaction
    /// pooling (PgBouncer's `pool_mode = transaction`), in which nothing on
    /// a pooled connection relies on session state. Requires
    /// `session_url`.
    pub pooler: crate::db::Pooler,
    /// Pool size (1 to [`MAX_DATABASE_CONNECTIONS`], default
    /// [`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// If set, refuse to lead against a database whose `leasehold_database`
    /// id differs.
    pub expected_database_id: Option<uuid::Uuid>,
    /// If set, refuse to lead against a server whose system identifier
    /// differs. May be written as a string in TOML, since identifiers can
    /// exceed TOML's signed 64-bit integers.
    pub expected_system_identifier: Option<u64>,
}

// By hand, so a password in the URL never reaches a log line through
// `{:?}`.
impl fmt::Debug for DatabaseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("url", &self.url.as_deref().map(crate::db::redact))
            .field(
                "session_url",
                &self.session_url.as_deref().map(crate::db::redact),
            )
            .field("pooler", &self.pooler)
            .field("max_connections", &self.max_connections)
            .field("expected_database_id", &self.expected_database_id)
            .field(
                "expected_system_identifier",
                &self.expected_system_identifier,
            )
            .finish()
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: None,
            session_url: None,
            pooler: crate::db::Pooler::None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            expected_database_id: None,
            expected_system_identifier: None,
        }
    }
}

impl DatabaseConfig {
    /// Let the value of `LEASEHOLD_DATABASE_URL` (passed in, so tests need
    /// not touch the process environment) replace the configured URL. An
    /// empty value counts as unset. Returns whether it replaced anything.
    pub fn apply_url_override(&mut self, env_value: Option<String>) -> bool {
        match env_value {
            Some(url) if !url.trim().is_empty() => {
                self.url = Some(url);
                true
            }
            _ => false,
        }
    }

    /// The backend `url` selects.
    pub fn backend(&self) -> Backend<'_> {
        match self.url.as_deref() {
            None => Backend::Embedded,
            Some(url) if url.trim() == MEMORY_URL => Backend::Memory,
            Some(url) => Backend::Postgres(url),
        }
    }

    /// The URL with its password redacted, or a description of the
    /// embedded or in-memory backend: safe to log.
    pub fn endpoint(&self) -> String {
        match self.backend() {
            Backend::Postgres(url) => crate::db::redact(url),
            Backend::Embedded => "embedded backend (SQLite in data_dir)".to_string(),
            Backend::Memory => "in-memory backend (single process, not durable)".to_string(),
        }
    }

    /// The identity the database must show before this host leads.
    pub fn expected_identity(&self) -> ExpectedIdentity {
        ExpectedIdentity {
            database_id: self.expected_database_id,
            system_identifier: self.expected_system_identifier,
        }
    }
}

/// `[http]`.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// Address the API listens on (default [`DEFAULT_LISTEN`]).
    pub listen: SocketAddr,
    /// `[http] token`: shorthand for one write token named
    /// [`DEFAULT_TOKEN_NAME`], written in the file itself.
    pub token: Option<String>,
    /// `[[http.tokens]]`: named tokens read from files. With any token
    /// (these or `token`), every `/v1` request needs one.
    pub tokens: Vec<TokenConfig>,
    /// `tls_cert`, `tls_key`, `tls_client_ca`: when set, the listener
    /// serves only HTTPS.
    pub tls: Option<crate::tls::ServerFiles>,
}

/// The name of the token `[http] token` configures.
pub const DEFAULT_TOKEN_NAME: &str = "default";

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRole {
    /// Every `GET` of `/v1`.
    Read,
    /// Reads, and `PUT` and `DELETE` of objects.
    Write,
}

impl TokenRole {
    /// As written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::Read => "read",
            TokenRole::Write => "write",
        }
    }
}

/// One `[[http.tokens]]` entry (the token itself stays in its file until
/// the API reads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenConfig {
    /// Its name: a DNS label, unique; recorded as the origin of what it
    /// writes, and safe to log.
    pub name: String,
    /// The file holding it, absolute.
    pub file: PathBuf,
    /// What it may do.
    pub role: TokenRole,
    /// The only object kinds it may read or write; `None`: every kind.
    pub kinds: Option<Vec<String>>,
}

// By hand, so the token never reaches a log line through `{:?}`.
impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("tokens", &self.tokens)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN
                .parse()
                .expect("the default listen address parses"),
            token: None,
            tokens: Vec::new(),
            tls: None,
        }
    }
}

/// `[runtime]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Use wasmtime's pooling allocator (default true; the runtime falls
    /// back to on-demand allocation if the pool cannot be reserved).
    pub pooling: bool,
    /// Where compiled components are cached, absolute (written relative to
    /// the config file). `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            pooling: true,
            cache_dir: None,
        }
    }
}

/// Most `[placement] slack` allowed.
pub const MAX_PLACEMENT_SLACK: u64 = 10_000;
/// Most `[placement] min_tenure` allowed.
pub const MAX_PLACEMENT_MIN_TENURE: Duration = Duration::from_secs(24 * 3600);

pub use crate::store::retention::{
    DEFAULT_EVENT_RETENTION, DEFAULT_TENURE_RETENTION, MAX_EVENT_RETENTION, MAX_TENURE_RETENTION,
    MIN_EVENT_RETENTION, StoreConfig,
};
pub use crate::telemetry::{DEFAULT_SAMPLE_RATIO, TelemetryConfig};

/// One `[[controllers]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// Controller and lease name (a DNS label, unique in the file).
    pub name: String,
    /// The component file, absolute. Written relative to the config file's
    /// folder; `${LEASEHOLD_GUEST_DIR}` expands to that environment
    /// variable, or to [`DEFAULT_GUEST_DIR`] under the config folder's
    /// parent when it is unset. The file existed when the config was read.
    pub component: PathBuf,
    /// Lease lifetime without renewal ([`MIN_LEASE_TTL`] to
    /// [`MAX_LEASE_TTL`]).
    pub lease_ttl: Duration,
    /// How often the lease is renewed; below `renew_deadline`. When the
    /// file does not set it, 2/10 of `lease_ttl` (the defaults' proportion).
    pub renew_interval: Duration,
    /// The holder gives the lease up this long after its last successful
    /// renewal was sent; below `lease_ttl` (L3). When the file does not set
    /// it, 7/10 of `lease_ttl`.
    pub renew_deadline: Duration,
    /// Longest single reconcile before the guest is torn down.
    pub reconcile_deadline: Duration,
    /// First retry delay after a failed acquire or guest.
    pub backoff_min: Duration,
    /// Largest retry delay; at least `backoff_min`.
    pub backoff_max: Duration,
    /// Largest linear memory of the guest, in bytes
    /// ([`MIN_GUEST_MEMORY_BYTES`] to [`MAX_GUEST_MEMORY_BYTES`]).
    pub memory_limit: usize,
    /// Most core instances in the guest's store (`max_instances`, 1 to
    /// [`crate::limits::MAX_GUEST_INSTANCES`], default
    /// [`crate::limits::GUEST_INSTANCES`]).
    pub max_instances: usize,
    /// Most tables in the guest's store (`max_tables`, 1 to
    /// [`crate::limits::MAX_GUEST_TABLES`], default
    /// [`crate::limits::GUEST_TABLES`]).
    pub max_tables: usize,
    /// Most linear memories in the guest's store (`max_memories`, 1 to
    /// [`crate::limits::MAX_GUEST_MEMORIES`], default
    /// [`crate::limits::GUEST_MEMORIES`]).
    pub max_memories: usize,
    /// Most distinct keys in the work queue (1 to
    /// [`crate::limits::WORK_QUEUE_KEYS`]).
    pub max_queue: usize,
    /// Directories granted to the guest; none by default (G5).
    pub dirs: Vec<DirConfig>,
    /// The guest's write quotas (`max_creates_per_second`, `create_burst`,
    /// `max_objects_per_kind`).
    pub quota: crate::quota::QuotaLimits,
    /// Where the guest may send HTTP requests (`http_allow`); empty (the
    /// default): nowhere.
    pub http_allow: AllowList,
    /// `http_ca`: a PEM bundle of CAs its outbound HTTPS trusts beside the
    /// public roots (absolute); `None`: the public roots only.
    pub http_ca: Option<PathBuf>,
    /// `http_forwarded_headers`: the forwarding headers (`Forwarded`,
    /// `X-Forwarded-*`, `X-Real-IP`) its guest may send, lowercase; any
    /// other is refused (a receiver may trust them for who is calling).
    pub http_forwarded_headers: Vec<String>,
    /// How the lease is taken over if this host dies (`crash_detection`;
    /// default: the top-level key, else `session`).
    pub crash_detection: CrashDetection,
    /// `[controllers.settings]` as the JSON object the guest reads; `{}`
    /// when absent. Its `Debug` shows only its size.
    pub settings: crate::runtime::Settings,
    /// `shards = N` (1 to [`crate::shard::MAX_SHARDS`]): the controller
    /// runs as N leases `NAME-0 … NAME-(N-1)`, each owning the objects
    /// [`crate::shard::Shard::of`] puts in it. `None` (the key absent):
    /// one lease named `NAME` that owns every object.
    pub shards: Option<u32>,
    /// When its reconciles count as failing for good (`degraded_after_failures`,
    /// `degraded_after`): listed under `degraded` in `/readyz`.
    pub degraded: crate::status::DegradedRule,
}

/// One directory granted to a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirConfig {
    /// The directory on the host, absolute (written relative to the config
    /// file). It existed when the config was read.
    pub host: PathBuf,
    /// Where the guest sees it: an absolute guest path such as `/data`.
    pub guest: String,
    /// Whether the guest may write there (default false: read-only).
    pub writable: bool,
}

impl ControllerConfig {
    /// The leases this controller runs as, each with its shard: its own
    /// name alone when it is not sharded, else `NAME-0 … NAME-(N-1)`.
    pub fn leases(&self) -> Vec<(String, Option<crate::shard::Shard>)> {
        match self.shards {
            None => vec![(self.name.clone(), None)],
            Some(count) => crate::shard::Shard::all(count)
                .map(|shard| {
                    (
                        crate::shard::Shard::lease_name(&self.name, shard.index),
                        Some(shard),
                    )
                })
                .collect(),
        }
    }

    /// The lease timing of this controller.
    pub fn timing(&self) -> LeaseTiming {
        LeaseTiming {
            ttl: self.lease_ttl,
            renew_interval: self.renew_interval,
            renew_deadline: self.renew_deadline,
        }
    }

    /// The runtime limits of this controller's guest: the configured memory,
    /// deadline, quotas, `http_allow` and settings, the rest at their
    /// defaults.
    pub fn guest_limits(&self) -> GuestLimits {
        GuestLimits {
            memory_bytes: self.memory_limit,
            instances: self.max_instances,
            tables: self.max_tables,
            memories: self.max_memories,
            reconcile_deadline: self.reconcile_deadline,
            quota: self.quota,
            http_allow: Arc::new(self.http_allow.clone()),
            http_ca: self.http_ca.clone(),
            http_forwarded_headers: Arc::new(self.http_forwarded_headers.clone()),
            http: crate::outbound::HttpLimits {
                request_total: crate::timeouts::HTTP_OUT_REQUEST_TOTAL
                    .min(self.reconcile_deadline * 2 / 3),
                ..crate::outbound::HttpLimits::default()
            },
            settings: self.settings.clone(),
            ..GuestLimits::default()
        }
    }

    /// How many pooled guest slots one guest of this controller takes: 1
    /// within the default store counts
    /// ([`crate::limits::GUEST_INSTANCES`], `GUEST_TABLES`,
    /// `GUEST_MEMORIES`, which every toolchain's components fit), more for
    /// a controller allowed more (`max_instances = 100` takes 5), so the
    /// engine's pool is sized for what its guests may make; times its
    /// shards, each of which runs a guest of its own.
    pub fn pool_weight(&self) -> usize {
        use crate::limits::{GUEST_INSTANCES, GUEST_MEMORIES, GUEST_TABLES};
        let per_guest = [
            self.max_instances.div_ceil(GUEST_INSTANCES),
            self.max_tables.div_ceil(GUEST_TABLES),
            self.max_memories.div_ceil(GUEST_MEMORIES),
        ]
        .into_iter()
        .max()
        .unwrap_or(1)
        .max(1);
        per_guest * self.shards.unwrap_or(1) as usize
    }

    /// The directories granted to the guest, as the runtime takes them.
    pub fn dir_grants(&self) -> Vec<DirGrant> {
        self.dirs
            .iter()
            .map(|dir| DirGrant {
                host_path: dir.host.clone(),
                guest_path: dir.guest.clone(),
                writable: dir.writable,
            })
            .collect()
    }
}

/// A `[[controllers]]` entry's `component` as written (relative to
/// `base_dir`, `${LEASEHOLD_GUEST_DIR}` expanded by `env`), resolved and
/// checked as the config resolves it: an existing file, or what is wrong.
/// For other files that name a controller the same way (`leasehold sim`'s
/// world file).
pub fn controller_component(
    written: &str,
    base_dir: &Path,
    env: &Environment,
) -> Result<PathBuf, String> {
    resolve::component_path(written, base_dir, &resolve::guest_dir(base_dir, env))
}

/// A `[[controllers]]` entry's `settings`, checked as the config checks
/// them: every problem, each naming its key path (`settings.db.port`),
/// never a value.
pub fn controller_settings(value: &toml::Value) -> Result<crate::runtime::Settings, Vec<String>> {
    settings::settings(value)
}

/// Environment variable naming this host's holder, overriding the file's
/// `holder`: one config file for every replica, each with its own name
/// (a Kubernetes pod's name, say).
pub const HOLDER_ENV: &str = "LEASEHOLD_HOLDER";

/// What the process environment contributes to a config. Passed in
/// explicitly so tests never have to change the real environment.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// The value of `LEASEHOLD_DATABASE_URL`, if set.
    pub database_url: Option<String>,
    /// The value of `LEASEHOLD_GUEST_DIR`, if set.
    pub guest_dir: Option<PathBuf>,
    /// The value of `LEASEHOLD_HOLDER`, if set: the holder name, overriding
    /// `holder` (e.g. a Kubernetes pod's name, from the downward API).
    pub holder: Option<String>,
    /// The value of `OTEL_EXPORTER_OTLP_ENDPOINT`, if set: the trace
    /// collector when `[telemetry] otlp_endpoint` is absent.
    pub otlp_endpoint: Option<String>,
}

// By hand, so a password in `LEASEHOLD_DATABASE_URL` never reaches a log
// line through `{:?}`.
impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Environment")
            .field(
                "database_url",
                &self.database_url.as_deref().map(crate::db::redact),
            )
            .field("guest_dir", &self.guest_dir)
            .field("holder", &self.holder)
            .field(
                "otlp_endpoint",
                &self.otlp_endpoint.as_deref().map(crate::db::redact),
            )
            .finish()
    }
}

impl Environment {
    /// Read the variables from this process's environment. Empty values
    /// count as unset.
    pub fn from_process() -> Self {
        Self {
            database_url: std::env::var(crate::db::URL_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty()),
            guest_dir: std::env::var_os(GUEST_DIR_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            holder: std::env::var(HOLDER_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty()),
            otlp_endpoint: std::env::var(crate::telemetry::OTLP_ENDPOINT_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty()),
        }
    }
}

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The 1-based line it is on, when it is about one place in the file.
    pub line: Option<usize>,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Where in the file a syntax error is, told without quoting the file:
/// any line may hold a password or the token.
struct SourcePlace {
    /// 1-based, in characters.
    column: usize,
    /// The dotted key of the line (`database.url`), when the line starts
    /// with a plain `key =` outside any multi-line string.
    key: Option<String>,
}

impl SourcePlace {
    /// The place of byte `offset` (a character boundary) of `text`.
    fn of(text: &str, offset: usize) -> Self {
        let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
        let column = text[line_start..offset].chars().count() + 1;
        let line = text[line_start..].lines().next().unwrap_or("");
        // The key ends at the first `=`; a quoted key could be anything, so
        // a line whose key part holds a quote names no key.
        let equals = line
            .find('=')
            .filter(|&at| !line[..at].contains(['"', '\'']));
        let inside_string = ["\"\"\"", "'''"]
            .iter()
            .any(|quotes| text[..line_start].matches(quotes).count() % 2 == 1);
        let key = equals
            .filter(|_| !inside_string)
            .and_then(|at| plain_key(&line[..at]))
            .map(|key| match table_of(&text[..line_start]) {
                Some(table) => format!("{table}.{key}"),
                None => key,
            });
        Self { column, key }
    }
}

/// `written` as a dotted key of bare TOML keys (`a.b`), or `None` if it is
/// anything else.
fn plain_key(written: &str) -> Option<String> {
    let parts: Vec<&str> = written.split('.').map(str::trim).collect();
    let bare = |part: &&str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    parts.iter().all(bare).then(|| parts.join("."))
}

/// The table the last header in `before` opens (`http`, `controllers`).
fn table_of(before: &str) -> Option<String> {
    let header = before
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| line.starts_with('['))?;
    let inner = header.trim_start_matches('[');
    plain_key(&inner[..inner.find(']')?])
}

/// A TOML reader message with the value it quotes cut out. Readers quote
/// the offending value before `, expected ...` (`invalid type: string
/// "VALUE", expected i64`); what follows comes from the program (expected
/// types, key names) and stays.
fn without_quoted_value(message: &str) -> String {
    let (head, tail) = match message.rfind(", expected") {
        Some(at) => message.split_at(at),
        None => (message, ""),
    };
    let is_quote = |c: char| c == '"' || c == '`';
    let Some(first) = head.find(is_quote) else {
        return message.to_string();
    };
    let last = head.rfind(is_quote).filter(|&last| last > first);
    let after = last.map_or("", |last| &head[last + 1..]);
    format!("{}{after}{tail}", head[..first].trim_end())
}

/// The largest character boundary of `text` at or before `offset`.
fn char_boundary_at_or_before(text: &str, offset: usize) -> usize {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// Why a config could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why. Shown in the message rather than chained as a source, so
        /// it is printed once however the error is displayed.
        reason: std::io::Error,
    },
    /// The file is not TOML, has a key this version does not know, or a
    /// value of the wrong type. Reading stops at the first such problem.
    #[error("{}", render(file, std::slice::from_ref(problem)))]
    Syntax {
        /// The file (as given) or `<config>` for parsed text.
        file: String,
        /// The problem.
        problem: Problem,
    },
    /// The file reads, but values are wrong. Lists every problem found.
    #[error("{}", render(file, problems))]
    Invalid {
        /// The file (as given) or `<config>` for parsed text.
        file: String,
        /// Every problem, in file order where they have a line.
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// Every problem, one message each (with its line), for callers that
    /// list them alongside their own.
    pub fn problems(&self) -> Vec<String> {
        match self {
            ConfigError::Read { .. } => vec![self.to_string()],
            ConfigError::Syntax { problem, .. } => vec![problem.to_string()],
            ConfigError::Invalid { problems, .. } => {
                problems.iter().map(ToString::to_string).collect()
            }
        }
    }
}

/// One problem reads as one line; several get a header naming the file and
/// one line each.
fn render(file: &str, problems: &[Problem]) -> String {
    match problems {
        [one] => format!("invalid config {file}: {one}"),
        many => {
            let mut text = format!("invalid config {file} ({} problems):", many.len());
            for problem in many {
                text.push_str("\n  ");
                text.push_str(&problem.to_string());
            }
            text
        }
    }
}

/// The holder identity used when the config names none:
/// `<hostname>-<pid>-<4 random hex digits>`. Computed once per process, so
/// every caller gets the same value; the random part tells apart two
/// processes that reuse a pid on one host (containers often all run as
/// pid 1).
pub fn default_holder() -> &'static str {
    static HOLDER: OnceLock<String> = OnceLock::new();
    HOLDER.get_or_init(|| {
        let host = hostname();
        let suffix: u16 = rand::random();
        format!("{host}-{}-{suffix:04x}", std::process::id())
    })
}

/// The host name, reduced to what a holder may contain. std has no
/// portable call for it; Linux exposes it in procfs. Elsewhere the holder
/// starts with "leasehold" (the pid and random part still tell processes
/// apart); set `holder` in the config for a meaningful name.
fn hostname() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let cleaned: String = raw
        .trim()
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(200)
        .collect();
    if cleaned.is_empty() {
        "leasehold".to_string()
    } else {
        cleaned
    }
}

impl Config {
    /// Read and check the config file at `path`, with the process
    /// environment's overrides.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        Self::load_with(path, &Environment::from_process())
    }

    /// [`Config::load`] with an explicit environment.
    pub fn load_with(path: impl AsRef<Path>, env: &Environment) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let read_error = |reason| ConfigError::Read {
            path: path.to_path_buf(),
            reason,
        };
        let file = path.display().to_string();
        let size = std::fs::metadata(path).map_err(read_error)?.len();
        if size > MAX_CONFIG_BYTES {
            return Err(ConfigError::Invalid {
                file,
                problems: vec![Problem {
                    line: None,
                    message: format!(
                        "the file is {size} bytes; a config file may be at most {MAX_CONFIG_BYTES} bytes"
                    ),
                }],
            });
        }
        let text = std::fs::read_to_string(path).map_err(read_error)?;
        let absolute = std::path::absolute(path).map_err(read_error)?;
        let base_dir = absolute
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        Self::parse_named(&text, &base_dir, &file, env)
    }

    /// Check config `text` as if it were a file in `base_dir`, with the
    /// process environment's overrides.
    pub fn parse(text: &str, base_dir: impl AsRef<Path>) -> Result<Config, ConfigError> {
        Self::parse_with(text, base_dir, &Environment::from_process())
    }

    /// [`Config::parse`] with an explicit environment.
    pub fn parse_with(
        text: &str,
        base_dir: impl AsRef<Path>,
        env: &Environment,
    ) -> Result<Config, ConfigError> {
        Self::parse_named(text, base_dir.as_ref(), "<config>", env)
    }

    fn parse_named(
        text: &str,
        base_dir: &Path,
        file: &str,
        env: &Environment,
    ) -> Result<Config, ConfigError> {
        let base_dir = if base_dir.as_os_str().is_empty() {
            std::env::current_dir().map_err(|reason| ConfigError::Read {
                path: PathBuf::from(file),
                reason,
            })?
        } else {
            std::path::absolute(base_dir).map_err(|reason| ConfigError::Read {
                path: PathBuf::from(file),
                reason,
            })?
        };
        let raw: raw::RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            file: file.to_string(),
            problem: resolve::syntax_problem(text, &e),
        })?;
        resolve::resolve(raw, text, &base_dir, env).map_err(|problems| ConfigError::Invalid {
            file: file.to_string(),
            problems,
        })
    }

    /// This replica's holder identity: the configured one, or the process
    /// default.
    pub fn holder(&self) -> &str {
        self.holder.as_deref().unwrap_or_else(|| default_holder())
    }

    /// Whether the embedded backend is selected (no database URL): SQLite
    /// in [`Config::data_dir`], durable, shared by the hosts of this
    /// machine.
    pub fn is_embedded(&self) -> bool {
        self.database.backend() == Backend::Embedded
    }

    /// The controller names, in file order.
    pub fn controller_names(&self) -> Vec<String> {
        self.controllers.iter().map(|c| c.name.clone()).collect()
    }

    /// The leases the controllers run as, in file order: a controller's
    /// name, or its shards' `NAME-0 …` (what the host supervises, reports
    /// in `/readyz` and `/metrics`, and registers as what it can run).
    pub fn lease_names(&self) -> Vec<String> {
        self.controllers
            .iter()
            .flat_map(|c| c.leases().into_iter().map(|(lease, _)| lease))
            .collect()
    }

    /// How to build the shared engine for these controllers: the pool holds
    /// every guest, each as large as the largest memory limit and counted
    /// by its [`ControllerConfig::pool_weight`] (a controller allowed more
    /// instances, tables or memories than the defaults takes more slots),
    /// with room for controllers a config reload may add (at least
    /// [`crate::limits::POOLED_CONTROLLERS`] guests, each at least
    /// [`crate::limits::GUEST_MEMORY_BYTES`]).
    pub fn engine_config(&self) -> EngineConfig {
        let guests = self
            .controllers
            .iter()
            .map(ControllerConfig::pool_weight)
            .sum::<usize>()
            .max(crate::limits::POOLED_CONTROLLERS);
        EngineConfig {
            max_guests: u32::try_from(guests).unwrap_or(u32::MAX),
            memory_bytes: self
                .controllers
                .iter()
                .map(|c| c.memory_limit)
                .max()
                .unwrap_or_default()
                .max(crate::limits::GUEST_MEMORY_BYTES),
            pooling: self.runtime.pooling,
            cache_dir: self.runtime.cache_dir.clone(),
        }
    }
}

/// Syntax errors and `Debug` never show a secret; the rest of the
/// config's tests are in `tests.rs`.
#[cfg(test)]
mod secret_tests {
    use super::*;

    const MARK: &str = "hunter2-0f3c";

    /// The whole message of a config that fails to read.
    fn refusal(text: &str) -> String {
        let error = Config::parse_with(text, "/", &Environment::default())
            .expect_err("the config is refused");
        assert!(matches!(error, ConfigError::Syntax { .. }), "{error}");
        error.to_string()
    }

    fn assert_hidden(message: &str) {
        assert!(!message.contains(MARK), "the secret leaked: {message}");
        assert!(!message.contains("hunter2"), "the secret leaked: {message}");
    }

    #[test]
    fn a_broken_url_line_is_placed_by_line_column_and_key_only() {
        for url in [
            format!("\"postgres://u:{MARK}@h/db"),
            format!("postgres://u:{MARK}@h/db"),
            format!("\"postgres://u:{MARK}@h/db\" trailing"),
        ] {
            let message = refusal(&format!("cluster = \"c\"\n[database]\nurl = {url}\n"));
            assert_hidden(&message);
            assert!(message.contains("line 3:"), "{message}");
            assert!(message.contains("column "), "{message}");
            assert!(message.contains("key `database.url`"), "{message}");
        }
    }

    #[test]
    fn a_broken_token_line_is_placed_without_the_token() {
        let message = refusal(&format!("cluster = \"c\"\n[http]\ntoken = '{MARK}\n"));
        assert_hidden(&message);
        assert!(message.contains("line 3:"), "{message}");
        assert!(message.contains("key `http.token`"), "{message}");
    }

    #[test]
    fn a_misspelt_key_is_named_without_its_value() {
        let message = refusal(&format!("cluster = \"c\"\n[http]\ntokn = \"{MARK}\"\n"));
        assert_hidden(&message);
        assert!(message.contains("unknown field `tokn`"), "{message}");
        assert!(message.contains("key `http.tokn`"), "{message}");
        assert!(message.contains("line 3:"), "{message}");
    }

    #[test]
    fn a_value_of_the_wrong_type_is_not_quoted() {
        let message = refusal(&format!(
            "cluster = \"c\"\n[database]\nmax_connections = \"{MARK}\"\n"
        ));
        assert_hidden(&message);
        assert!(
            message.contains("invalid type: string, expected i64"),
            "{message}"
        );
        let message = refusal("cluster = \"c\"\n[http]\ntoken = 7355608123\n");
        assert!(!message.contains("7355608123"), "{message}");
        assert!(message.contains("key `http.token`"), "{message}");
    }

    #[test]
    fn a_quoted_key_holding_a_connection_string_is_redacted() {
        let message = refusal(&format!(
            "cluster = \"c\"\n[http]\n\"postgres://u:{MARK}@h/db\" = 1\n"
        ));
        assert_hidden(&message);
        assert!(message.contains("unknown field"), "{message}");
    }

    #[test]
    fn a_secret_inside_a_multi_line_string_names_no_key() {
        let message = refusal(&format!(
            "cluster = \"c\"\n[http]\ntoken = \"\"\"\n{MARK} = \\q\n\"\"\"\n"
        ));
        // The reader stops inside the string, on a line that looks like a
        // `key = value` line: its "key" is the secret.
        assert!(message.contains("line 4:"), "{message}");
        assert_hidden(&message);
    }

    #[test]
    fn debug_shows_no_password_and_no_token() {
        let env = Environment {
            database_url: Some(format!("postgres://u@h/db?password={MARK}")),
            guest_dir: None,
            ..Default::default()
        };
        assert_hidden(&format!("{env:?}"));
        let config = Config::parse_with(
            &format!(
                "cluster = \"c\"\n[database]\nurl = \"host=h password='{MARK} x'\"\n\
                 [http]\ntoken = \"{MARK}\"\n"
            ),
            "/",
            &Environment::default(),
        )
        .expect("a valid config");
        let shown = format!("{config:?} {}", config.database.endpoint());
        assert_hidden(&shown);
        assert!(shown.contains("password=***"), "{shown}");
    }
}
