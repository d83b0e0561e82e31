//! The `leasehold` service: wires config -> backends -> runtime ->
//! supervisors -> HTTP, runs until SIGTERM/SIGINT, and shuts down in order
//! (stop taking work, finish or abort the running reconciles, release every
//! lease, exit). SIGHUP re-reads the config and applies its controllers
//! ([`Reloads`]). Under a service manager (`NOTIFY_SOCKET`) it reports
//! readiness, reloads and shutdown, and pings the watchdog while its loops
//! beat ([`crate::notify`]).
//!
//! Must never: start a supervisor before its component compiled, or
//! acquire before the database identity was verified (the supervisors wait
//! for the identity check).

use std::sync::Arc;

use thiserror::Error;
use tokio::sync::watch;

use crate::authority::memory::MemoryAuthority;
use crate::authority::postgres::PostgresAuthority;
use crate::authority::{Authority, AuthorityError};
use crate::config::Config;
use crate::db::{Database, DbError};
use crate::notify::{self, Heartbeat, Notifier};
use crate::runtime::Runtime;
use crate::status::{ControllerState, DatabaseState, Status};
use crate::store::Store;
use crate::store::memory::MemoryStore;
use crate::store::postgres::PostgresStore;
use crate::supervisor::Renewer;
use crate::supervisor::identity::{self, IdentityCheck};

mod controllers;
mod http;
mod sharding;

use controllers::Controllers;
pub use sharding::reshard;

/// Why the service could not start or stopped with an error.
#[derive(Debug, Error)]
pub enum ServiceError {
    /// The database could not be set up.
    #[error(transparent)]
    Database(#[from] DbError),
    /// The lease authority refused (e.g. the wrong database).
    #[error(transparent)]
    Authority(#[from] AuthorityError),
    /// The embedded backend's data directory or database cannot be used.
    #[error(transparent)]
    Embedded(#[from] crate::embedded::EmbeddedError),
    /// The Wasm engine could not be built.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    /// Components failed to load; one line each.
    #[error("{}", .0.join("\n"))]
    Components(Vec<String>),
    /// The API's TLS files or token files cannot be used; one line each,
    /// naming the key and file, never a secret.
    #[error("{}", .0.join("\n"))]
    Http(Vec<String>),
    /// The HTTP listener could not be opened.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// Why.
        reason: String,
    },
}

/// The lease and state backends chosen by the config.
pub struct Backends {
    /// The lease authority: the supervisors' and the renewer's. On
    /// PostgreSQL it has a pool of its own
    /// ([`crate::limits::AUTHORITY_POOL_CONNECTIONS`]), so neither guest
    /// writes nor API traffic can make a renewal wait for a connection.
    pub authority: Arc<dyn Authority>,
    /// What the HTTP API reads leases, history and the readiness probe
    /// through: the same database over the main pool (the store's), so an
    /// API flood queues for the connections it shares with the store, never
    /// for the authority's. The same instance as `authority` in memory.
    pub api_authority: Arc<dyn Authority>,
    /// The state store.
    pub store: Arc<dyn Store>,
    /// Which backend these are.
    pub kind: crate::status::BackendKind,
    /// The database pools, for `/metrics`: the main one and the
    /// authority's (none in memory).
    pub pools: Vec<Database>,
    /// The host registry lease placement beats into (the authority's
    /// backend).
    pub hosts: Arc<dyn crate::authority::hosts::HostRegistry>,
}

/// Open the configured backends: the embedded one (SQLite in `data_dir`,
/// the default), PostgreSQL (migrated, identity verified), or the
/// in-memory ones (`url = "memory:"`).
pub async fn open_backends(config: &Config) -> Result<Backends, ServiceError> {
    match config.database.backend() {
        crate::config::Backend::Memory => {
            tracing::warn!(
                "IN-MEMORY BACKEND (url = \"memory:\"): single-process and NOT durable: state \
                 is lost on exit and other replicas cannot share it. Remove [database] url for \
                 the durable embedded backend, or set a PostgreSQL URL."
            );
            let authority = Arc::new(MemoryAuthority::new());
            let store = Arc::new(MemoryStore::new(authority.clone()));
            Ok(Backends {
                hosts: authority.clone(),
                api_authority: authority.clone(),
                authority,
                store,
                kind: crate::status::BackendKind::Memory,
                pools: Vec::new(),
            })
        }
        crate::config::Backend::Embedded => open_embedded(config).await,
        crate::config::Backend::Postgres(url) => {
            // A database that drops or refuses connections while the host
            // starts (a restart, a failover, sessions terminated) is
            // retried, with backoff, for a bounded time (see
            // STARTUP_DATABASE_RETRY for what counts); a wrong database or
            // a bad URL fails at once.
            let started = tokio::time::Instant::now();
            let mut delay = std::time::Duration::from_millis(100);
            loop {
                match open_postgres(config, url).await {
                    Ok(backends) => return Ok(backends),
                    Err(error)
                        if unavailable(&error)
                            && started.elapsed() + delay
                                < crate::timeouts::STARTUP_DATABASE_RETRY =>
                    {
                        tracing::warn!(
                            %error,
                            retry_in = ?delay,
                            "the database is unavailable while this host starts; retrying"
                        );
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(std::time::Duration::from_secs(2));
                    }
                    Err(error) => return Err(error),
                }
            }
        }
    }
}

/// The embedded backends: the data directory opened (created, checked),
/// its database migrated, one authority and one store on it.
async fn open_embedded(config: &Config) -> Result<Backends, ServiceError> {
    let db = crate::embedded::EmbeddedDb::open(&config.data_dir, crate::embedded::Access::Shared)
        .await?;
    tracing::info!(
        data_dir = %config.data_dir.display(),
        endpoint = db.endpoint(),
        database_id = %db.database_id(),
        "embedded backend opened (durable; shared by the hosts of this machine that name this \
         data directory)"
    );
    let authority = Arc::new(crate::authority::sqlite::SqliteAuthority::new(db.clone()));
    let store = Arc::new(crate::store::sqlite::SqliteStore::new(db));
    Ok(Backends {
        hosts: authority.clone(),
        api_authority: authority.clone(),
        authority,
        store,
        kind: crate::status::BackendKind::Embedded,
        pools: Vec::new(),
    })
}

/// Whether an error opening the PostgreSQL backends is the database being
/// unreachable or dropping the connection (worth retrying while the host
/// starts), rather than a refusal that retrying cannot change.
fn unavailable(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::Database(DbError::Unavailable { .. })
            | ServiceError::Authority(AuthorityError::Unavailable { .. })
    )
}

/// The PostgreSQL backends: migrated, identity verified, the store pinned
/// to the verified database. One attempt of [`open_backends`].
async fn open_postgres(config: &Config, url: &str) -> Result<Backends, ServiceError> {
    let db = Database::new(url, config.database.max_connections)?.configured(&config.database)?;
    for warning in db.tls().params().warnings() {
        tracing::warn!("{warning}");
    }
    let applied = db.migrate().await?;
    tracing::info!(
        endpoint = db.endpoint(),
        tls = %db.tls().params().summary(),
        encrypted = db.tls().encryption().known(),
        "database connected"
    );
    if !applied.is_empty() {
        tracing::info!(endpoint = db.endpoint(), ?applied, "applied migrations");
    }
    // Renewals get connections of their own (issue 16, item 6).
    let lease_db = db.sibling(
        crate::limits::AUTHORITY_POOL_CONNECTIONS,
        crate::db::AUTHORITY_APPLICATION,
    )?;
    let pools = vec![db.clone(), lease_db.clone()];
    // The highest timeline this host saw each database on outlives a
    // restart in data_dir, when it exists.
    crate::authority::timeline_floor::keep_in(&config.data_dir);
    let authority =
        PostgresAuthority::connect(lease_db, config.database.expected_identity()).await?;
    // The liveness (claim) session and the release listener reach
    // PostgreSQL itself, never a pooler: `configured` gave the pool (and
    // so its sibling) `session_url`, with its own TLS.
    // Writes land only in the database just verified (no round
    // trip: `connect` remembered the identity).
    let identity = authority.verify().await?;
    // Notifications sent through the pool must reach the LISTEN sessions;
    // checked in the background, so a slow answer never delays the start.
    let probe = authority.clone();
    tokio::spawn(async move {
        match probe
            .check_notifications(crate::timeouts::NOTIFICATION_SELF_TEST)
            .await
        {
            Ok(took) => tracing::info!(?took, "notification self-test passed"),
            Err(warning) => tracing::warn!("{warning}"),
        }
    });
    // Reads only (leases, history, identity): it never acquires, so
    // it needs no verification of its own; the readiness probe
    // compares what it reads with the identity verified above.
    let api_authority = PostgresAuthority::new(db.clone(), config.database.expected_identity());
    let store = PostgresStore::new(db);
    store.pin_database(&identity);
    Ok(Backends {
        hosts: Arc::new(authority.clone()),
        api_authority: Arc::new(api_authority),
        authority: Arc::new(authority),
        store: Arc::new(store),
        kind: crate::status::BackendKind::Postgres,
        pools,
    })
}

/// Validate what `run` would run without leading anything: compile every
/// component against the WIT world and verify the database identity.
/// Returns one line per problem.
pub async fn check(config: &Config) -> Result<Vec<String>, Vec<String>> {
    let mut notes = Vec::new();
    let mut problems = Vec::new();
    // How each controller runs as leases, for the database's record.
    let mut rules = Vec::new();
    match Runtime::new(&config.engine_config()) {
        Ok(runtime) => match controllers::prepare(&runtime, config.controllers.clone()).await {
            Ok(prepared) => {
                for p in prepared {
                    rules.push(p.sharding_rule(&config.cluster).await);
                    notes.push(format!(
                        "controller {}: component compiles and fits the world",
                        p.name()
                    ));
                    for url in p.uncovered_urls() {
                        notes.push(format!(
                            "WARNING: controller {}: {url} is an http(s) URL its http_allow does \
                             not cover: its guest cannot call it",
                            p.name()
                        ));
                    }
                    if !p.http_allow().is_empty() {
                        notes.push(format!(
                            "controller {}: may send HTTP requests to {}",
                            p.name(),
                            p.http_allow()
                        ));
                    }
                    match p.check_description(&config.cluster).await {
                        Ok(note) => notes.push(note),
                        Err(mut p) => problems.append(&mut p),
                    }
                }
            }
            Err(mut p) => problems.append(&mut p),
        },
        Err(e) => problems.push(e.to_string()),
    }
    match config.database.backend() {
        crate::config::Backend::Memory => notes.push(
            "database: in-memory backend (url = \"memory:\"; single process, not durable)"
                .to_string(),
        ),
        crate::config::Backend::Embedded => {
            match crate::embedded::DataDir::check(&config.data_dir) {
                Ok(note) => {
                    notes.push(format!(
                        "database: embedded backend (SQLite, durable, this machine only); {note}"
                    ));
                    // A database the hosts made already: judge the config
                    // by its record (a missing one is made at start).
                    let file = config.data_dir.join(crate::embedded::dir::DATABASE_FILE);
                    if file.is_file() {
                        match crate::embedded::EmbeddedDb::open(
                            &config.data_dir,
                            crate::embedded::Access::Shared,
                        )
                        .await
                        {
                            Ok(db) => {
                                let authority = crate::authority::sqlite::SqliteAuthority::new(db);
                                let (mut n, mut p) =
                                    sharding::check(&authority, &config.cluster, &rules).await;
                                notes.append(&mut n);
                                problems.append(&mut p);
                            }
                            Err(e) => problems.push(e.to_string()),
                        }
                    }
                }
                Err(e) => problems.push(e.to_string()),
            }
        }
        crate::config::Backend::Postgres(url) => {
            match Database::new(url, 1).and_then(|db| db.configured(&config.database)) {
                Err(e) => problems.push(e.to_string()),
                Ok(db) => {
                    let authority =
                        PostgresAuthority::new(db.clone(), config.database.expected_identity());
                    match authority.verify().await {
                        Ok(id) => {
                            notes.push(format!(
                            "database {}: identity verified (database id {}, system identifier {})",
                            id.endpoint, id.database_id, id.system_identifier
                        ));
                            if let Some(url) = &config.database.session_url
                                && let Err(e) = authority.use_session_url(url)
                            {
                                problems.push(e.to_string());
                            }
                            notes.push(format!(
                                "database: pooler = {:?}",
                                config.database.pooler.as_str()
                            ));
                            notes.push(tls_note(&db));
                            match authority
                                .check_notifications(crate::timeouts::NOTIFICATION_SELF_TEST)
                                .await
                            {
                                Ok(took) => notes.push(format!(
                                    "database: a notification sent through url reached the LISTEN \
                                 session in {}",
                                    humantime::format_duration(took)
                                )),
                                Err(warning) => notes.push(format!("WARNING: {warning}")),
                            }
                            let (mut n, mut p) =
                                sharding::check(&authority, &config.cluster, &rules).await;
                            notes.append(&mut n);
                            problems.append(&mut p);
                        }
                        // A database `run` would migrate: what it will do,
                        // and the rest is still checked.
                        Err(AuthorityError::Schema { endpoint, reason }) => {
                            notes.push(format!(
                                "database {endpoint}: the schema is not migrated yet ({reason}); \
                                 `leasehold run` applies this host's {} migrations at start, as \
                                 `leasehold migrate` does; the database identity is checked then",
                                crate::db::known_migrations().len()
                            ));
                            notes.push(tls_note(&db));
                        }
                        Err(e) => problems.push(e.to_string()),
                    }
                    // Crash detection `session` reads pg_locks inside grants.
                    let session = crate::authority::CrashDetection::Session;
                    if config
                        .controllers
                        .iter()
                        .any(|c| c.crash_detection == session)
                    {
                        match crate::authority::postgres::holder_claim::check_liveness(&db).await {
                            Ok(note) => notes.push(note),
                            Err(problem) => problems.push(problem),
                        }
                    }
                }
            }
        }
    }
    match http_security(config) {
        Ok((access, tls)) => {
            if let Some(tls) = &tls {
                notes.push(format!(
                    "http: HTTPS with the certificate of http.tls_cert{}",
                    if tls.mutual() {
                        "; clients must present a certificate from http.tls_client_ca"
                    } else {
                        ""
                    }
                ));
            }
            if access.is_open() {
                notes.push("http: no token: the API is open to whoever reaches it".to_string());
            } else {
                notes.push(format!(
                    "http: every /v1 request needs one of the tokens {}",
                    access.names().join(", ")
                ));
            }
        }
        Err(mut p) => problems.append(&mut p),
    }
    for warning in crate::api::auth::warnings(&config.http) {
        notes.push(format!("WARNING: {warning}"));
    }
    for controller in &config.controllers {
        if let Some(path) = &controller.http_ca
            && let Err(e) = crate::tls::read_roots("http_ca", path)
        {
            problems.push(format!("controller {}: {e}", controller.name));
        }
    }
    if let Some(warning) = unauthenticated_listen_warning(config) {
        notes.push(format!("WARNING: {warning}"));
    }
    if problems.is_empty() {
        Ok(notes)
    } else {
        Err(problems)
    }
}

/// What `check` says of the database connection's encryption: the
/// mode, and whether the session it just used is encrypted.
fn tls_note(db: &Database) -> String {
    let encrypted = match db.tls().encryption().known() {
        Some(true) => "encrypted (TLS)",
        Some(false) => "NOT encrypted",
        None => "encryption unknown",
    };
    let mut note = format!(
        "database: connection {encrypted}; {}",
        db.tls().params().summary()
    );
    for warning in db.tls().params().warnings() {
        note.push_str(&format!("\nWARNING: {warning}"));
    }
    note
}

/// The warnings for an API reachable beyond this machine without TLS or
/// without tokens. Warnings, not refusals: a host behind a firewall, a
/// private network or a TLS-terminating proxy may mean it, and refusing
/// would break configs that run today.
pub fn unauthenticated_listen_warning(config: &Config) -> Option<String> {
    let listen = config.http.listen;
    if listen.ip().is_loopback() {
        return None;
    }
    let tokens = config.http.token.is_some() || !config.http.tokens.is_empty();
    let tls = config.http.tls.is_some();
    let missing = match (tokens, tls) {
        (true, true) => return None,
        (false, true) => {
            "no token is configured ([http] token or [[http.tokens]]): anyone who can reach it \
             can read, write and delete objects"
        }
        (true, false) => {
            "it serves plain HTTP ([http] tls_cert and tls_key are not set): tokens and \
             objects cross the network readable by anyone on the path"
        }
        (false, false) => {
            "it serves plain HTTP and no token is configured: anyone who can reach it can read, \
             write and delete objects, and everything crosses the network readable"
        }
    };
    Some(format!(
        "the HTTP API listens on {listen}, beyond this machine, and {missing}. Configure \
         [http] tls_cert, tls_key and [[http.tokens]], or listen on 127.0.0.1"
    ))
}

/// The API's tokens and, when it serves HTTPS, its TLS.
pub type HttpSecurity = (
    Arc<crate::api::auth::Access>,
    Option<Arc<crate::tls::ServerTls>>,
);

/// The API's access rules and TLS, their files read now; every problem
/// named, never a secret.
pub fn http_security(config: &Config) -> Result<HttpSecurity, Vec<String>> {
    let access = crate::api::auth::Access::load(&config.http);
    let tls = config
        .http
        .tls
        .clone()
        .map(crate::tls::ServerTls::load)
        .transpose()
        .map_err(|e| e.to_string());
    match (access, tls) {
        (Ok(access), Ok(tls)) => Ok((Arc::new(access), tls.map(Arc::new))),
        (access, tls) => {
            let mut problems = access.err().unwrap_or_default();
            problems.extend(tls.err());
            Err(problems)
        }
    }
}

/// On SIGHUP: read the token files and the API's certificate again. What
/// cannot be read is logged and the old value kept.
fn reload_http_files(access: &crate::api::auth::Access, tls: Option<&crate::tls::ServerTls>) {
    match access.reload() {
        Ok(0) => {}
        Ok(n) => tracing::info!(tokens = n, "API tokens re-read"),
        Err(problems) => {
            for problem in problems {
                tracing::error!(
                    problem,
                    "API tokens not re-read; the old ones stay in force"
                );
            }
        }
    }
    if let Some(tls) = tls {
        match tls.reload() {
            Ok(()) => tracing::info!("API certificate re-read; new connections use it"),
            Err(e) => tracing::error!(
                problem = %e,
                "API certificate not re-read; the old one stays in use"
            ),
        }
    }
}

/// Run the service until SIGTERM or SIGINT. With `path` (the file `config`
/// was loaded from), SIGHUP reloads it: see [`Reloads`].
pub async fn run(config: Config, path: Option<std::path::PathBuf>) -> Result<(), ServiceError> {
    use tokio::signal::unix::{SignalKind, signal};
    let shutdown = async {
        let mut term = signal(SignalKind::terminate()).expect("install the SIGTERM handler");
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received; shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received; shutting down"),
        }
    };
    let reloads = match path {
        Some(path) => {
            let (tx, requests) = tokio::sync::mpsc::channel(1);
            let mut hangup = signal(SignalKind::hangup()).expect("install the SIGHUP handler");
            tokio::spawn(async move {
                while hangup.recv().await.is_some() {
                    // A reload already queued covers this one too.
                    if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) = tx.try_send(())
                    {
                        break;
                    }
                }
            });
            Some(Reloads { path, requests })
        }
        None => None,
    };
    let notifier = Notifier::from_env().unwrap_or_else(|e| {
        tracing::warn!("{e}");
        Notifier::disabled()
    });
    let watchdog = if notifier.enabled() {
        notify::watchdog_period_from_env().unwrap_or_else(|e| {
            tracing::warn!("{e}");
            None
        })
    } else {
        None
    };
    run_managed(config, reloads, shutdown, notifier, watchdog).await
}

/// Config reloads: each message on `requests` re-reads the config file at
/// `path` and applies its `[[controllers]]`. A removed controller stops
/// (its lease released) while the host and the other controllers keep
/// running; an added one starts; a changed one (settings or component
/// bytes) restarts. A file that does not load, changes a setting that only
/// applies at start-up, or names a component that does not compile is
/// refused whole, with every reason logged, and the host runs on as before.
pub struct Reloads {
    /// The config file.
    pub path: std::path::PathBuf,
    /// One message per reload request.
    pub requests: tokio::sync::mpsc::Receiver<()>,
}

/// Run the service until `stop` resolves, then shut down in order.
pub async fn run_until(
    config: Config,
    reloads: Option<Reloads>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), ServiceError> {
    run_managed(config, reloads, stop, Notifier::disabled(), None).await
}

/// [`run_until`], telling `notifier` (the service manager) when the host is
/// ready, reloading and stopping, and pinging its watchdog every half
/// `watchdog` while the host's loops beat ([`crate::notify`]).
pub async fn run_managed(
    config: Config,
    reloads: Option<Reloads>,
    stop: impl std::future::Future<Output = ()>,
    notifier: Notifier,
    watchdog: Option<std::time::Duration>,
) -> Result<(), ServiceError> {
    let holder = config.holder().to_string();
    let runtime = Runtime::new(&config.engine_config())?;
    if !runtime.pooling() && config.runtime.pooling {
        tracing::warn!("running guests without the pooling allocator");
    }
    let mut prepared = controllers::prepare(&runtime, config.controllers.clone())
        .await
        .map_err(ServiceError::Components)?;
    controllers::check_settings(&mut prepared, &config.cluster)
        .await
        .map_err(ServiceError::Components)?;
    let (access, api_tls) = http_security(&config).map_err(ServiceError::Http)?;
    for warning in crate::api::auth::warnings(&config.http) {
        tracing::warn!("{warning}");
    }
    let backends = open_backends(&config).await?;
    let status = Arc::new(Status::new(
        config.cluster.clone(),
        holder.clone(),
        &config.lease_names(),
    ));
    if backends.kind == crate::status::BackendKind::Memory {
        status.set_database(DatabaseState::Memory);
    }

    let listener = tokio::net::TcpListener::bind(config.http.listen)
        .await
        .map_err(|e| ServiceError::Listen {
            addr: config.http.listen,
            reason: e.to_string(),
        })?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (identity_tx, identity_rx) = watch::channel(IdentityCheck::Pending);
    let identity_task = tokio::spawn(identity::watch_identity(
        backends.authority.clone(),
        config.database.expected_identity(),
        backends.kind,
        status.clone(),
        identity_tx,
        crate::timeouts::IDENTITY_RECHECK,
        shutdown_rx.clone(),
    ));

    // Retention: the event log, the change stream and tenure history are
    // trimmed in the background (one host per cluster at a time).
    let retention_task = tokio::spawn(crate::store::retention::run(
        backends.store.clone(),
        config.cluster.clone(),
        crate::store::retention::Policy::from_config(&config.store),
        shutdown_rx.clone(),
    ));

    let heartbeat = Heartbeat::new();
    // Fair placement of leases across the live hosts ([placement]).
    let placement = crate::supervisor::placement::Placement::start(
        backends.hosts.clone(),
        &config.cluster,
        &holder,
        config.placement,
    );
    let renewer = Renewer::start_beating(backends.authority.clone(), &heartbeat)
        .with_placement(placement.clone());
    let mut controllers = Controllers::new(controllers::Shared {
        cluster: config.cluster.clone(),
        holder: holder.clone(),
        authority: backends.authority.clone(),
        renewer: renewer.clone(),
        store: backends.store.clone(),
        status: status.clone(),
        identity: identity_rx.clone(),
        heartbeat: heartbeat.clone(),
    });
    for prepared in prepared {
        controllers.start(prepared);
    }
    let watchdog_task = watchdog.map(|period| {
        tracing::info!(period = ?period, "pinging the service manager's watchdog");
        tokio::spawn(notify::watchdog(
            notifier.clone(),
            heartbeat.clone(),
            period,
        ))
    });
    let mut ready_task = tokio::spawn(announce_ready(status.clone(), notifier.clone()));

    let (http_stop_tx, http_stop_rx) = watch::channel(false);
    let host_metrics = Arc::new(crate::api::metrics::HostMetrics::new(
        backends.pools.clone(),
    ));
    let api = crate::api::router_for_host(
        crate::api::ApiState {
            cluster: config.cluster.clone(),
            holder: holder.clone(),
            status: status.clone(),
            authority: backends.api_authority.clone(),
            store: backends.store.clone(),
            access: access.clone(),
            stopping: http_stop_rx.clone(),
        },
        host_metrics,
    );
    let (limits, fd_limit) = crate::api::ServeLimits::for_this_process();
    // On a runtime of its own: a flood of requests cannot delay the
    // supervisors and the renewer on this one.
    let http = http::start(
        listener,
        config.http.listen,
        api,
        limits,
        api_tls.clone(),
        http_stop_rx,
    )?;
    if let Some(warning) = unauthenticated_listen_warning(&config) {
        tracing::warn!(listen = %config.http.listen, "{warning}");
    }
    tracing::info!(
        cluster = config.cluster,
        holder,
        listen = %config.http.listen,
        https = api_tls.is_some(),
        client_certificates = api_tls.as_ref().is_some_and(|t| t.mutual()),
        tokens = ?access.names(),
        max_connections = limits.max_connections,
        http_threads = http.threads(),
        open_files_limit = fd_limit,
        controllers = config.controllers.len(),
        "leasehold is running"
    );

    let mut config = config;
    let mut reloads = reloads;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            request = async { reloads.as_mut()?.requests.recv().await }, if reloads.is_some() => {
                match (request, &reloads) {
                    (Some(()), Some(Reloads { path, .. })) => {
                        ready_task.abort();
                        notifier.reloading();
                        if let Some(next) = reload(&mut controllers, &runtime, &config, path).await {
                            config = next;
                        }
                        // Whatever the config file's reload came to, rotated
                        // token and certificate files take effect.
                        reload_http_files(&access, api_tls.as_deref());
                        // Applied or refused, the reload is over: ready
                        // again once the controllers settled.
                        ready_task = tokio::spawn(announce_ready(status.clone(), notifier.clone()));
                    }
                    // No one can ask any more.
                    _ => reloads = None,
                }
            }
        }
    }
    ready_task.abort();
    notifier.stopping();
    // The others count this host out before its leases are released, so
    // they take them at once.
    placement.deregister().await;
    let _ = shutdown_tx.send(true);
    // Supervisors finish their reconcile (within the grace period), stop
    // their guests and release their leases before they return.
    controllers.stop_all().await;
    identity_task.abort();
    // Told to stop with the rest; a batch in flight is one transaction,
    // committed or rolled back whole.
    retention_task.abort();
    let _ = http_stop_tx.send(true);
    http.stopped().await;
    if let Some(task) = watchdog_task {
        task.abort();
    }
    tracing::info!("leasehold stopped");
    Ok(())
}

/// Tell the service manager `READY=1` once every controller has settled
/// (leading or standing by; with none configured, at once).
async fn announce_ready(status: Arc<Status>, notifier: Notifier) {
    let (leading, standby) = settled(&status).await;
    tracing::debug!(leading, standby, "every controller settled; ready");
    notifier.ready(&format!(
        "{leading} controllers leading, {standby} standing by"
    ));
}

/// Wait until every controller of `status` is leading or standing by;
/// returns how many do which. Woken by the controllers' own state changes.
async fn settled(status: &Status) -> (usize, usize) {
    let mut names = status.controller_names();
    loop {
        names.borrow_and_update();
        let mut watches: Vec<_> = status.controllers().iter().map(|c| c.subscribe()).collect();
        let (mut leading, mut standby) = (0, 0);
        for watch in &mut watches {
            match &*watch.borrow_and_update() {
                ControllerState::Leading { .. } => leading += 1,
                ControllerState::Standby { .. } => standby += 1,
                _ => {}
            }
        }
        if leading + standby == watches.len() {
            return (leading, standby);
        }
        let changes = watches.iter_mut().map(|w| Box::pin(w.changed()));
        tokio::select! {
            _ = futures::future::select_all(changes) => {}
            changed = names.changed() => {
                if changed.is_err() {
                    // The status is going away with the host.
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// Re-read the config at `path` and apply it to `controllers`; returns the
/// config now in force, or `None` (logged) when it was refused.
async fn reload(
    controllers: &mut Controllers,
    runtime: &Runtime,
    current: &Config,
    path: &std::path::Path,
) -> Option<Config> {
    tracing::info!(config = %path.display(), "SIGHUP received; reloading the config");
    let next = match Config::load(path) {
        Ok(next) => next,
        Err(e) => {
            tracing::error!(config = %path.display(), error = %e, "config reload refused; running as before");
            return None;
        }
    };
    match controllers.reload(runtime, current, &next).await {
        Ok(summary) => {
            tracing::info!(
                config = %path.display(),
                added = ?summary.added,
                removed = ?summary.removed,
                restarted = ?summary.restarted,
                unchanged = ?summary.unchanged,
                "config reloaded"
            );
            Some(next)
        }
        Err(problems) => {
            for problem in problems {
                tracing::error!(config = %path.display(), problem, "config reload refused; running as before");
            }
            None
        }
    }
}
