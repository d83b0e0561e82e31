//! What several parts share: where the guest components and the
//! `leasehold` binary are, a runtime and memory backends set up like the
//! host's, a store wrapper that reports reads and holds commits, and the
//! PostgreSQL statistics the database parts read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use async_trait::async_trait;
use leasehold_host::authority::memory::MemoryAuthority;
use leasehold_host::authority::{AcquireRequest, Acquired, Authority};
use leasehold_host::fence::{Fence, LeaseKey};
use leasehold_host::runtime::{
    CommitCounters, CompiledController, EngineConfig, GuestInstance, GuestLimits, Revocation,
    Runtime,
};
use leasehold_host::store::memory::MemoryStore;
use leasehold_host::store::{
    Committed, Event, NewEvent, Object, ObjectKey, Op, Page, Selector, Store, StoreError,
};
use tokio::sync::{mpsc, watch};

/// Guests alive at once in one engine: sizes the pooling allocator.
const MAX_GUESTS: u32 = 64;
/// Guest linear memory limit, as the example config sets it.
const GUEST_MEMORY_BYTES: usize = 64 << 20;
/// How long a lease granted for an in-process benchmark lasts: longer than
/// any part runs, so no part is disturbed by an expiry.
pub const BENCH_LEASE_TTL: Duration = Duration::from_secs(3600);
/// How long to wait for the server to end the sessions of a closed pool.
const SESSIONS_CLOSE_WAIT: Duration = Duration::from_secs(10);

/// The folder holding the guest components built by `cargo xtask guests`.
pub fn guest_dir() -> PathBuf {
    match std::env::var_os("LEASEHOLD_GUEST_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasm32-wasip2/guest"),
    }
}

/// A built guest component, or an error that says how to build it.
pub fn guest(name: &str) -> Result<PathBuf> {
    let path = guest_dir().join(format!("{name}.wasm"));
    if !path.is_file() {
        bail!(
            "guest component {} is missing: run `cargo xtask guests` (or `cargo xtask bench`)",
            path.display()
        );
    }
    Ok(path)
}

/// The `leasehold` binary of the same profile as this benchmark.
pub fn leasehold_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the benchmark binary")?;
    let path = exe
        .parent()
        .map(|dir| dir.join("leasehold"))
        .ok_or_else(|| anyhow!("the benchmark binary has no folder"))?;
    if !path.is_file() {
        bail!(
            "{} is missing: build it with `cargo build --release -p leasehold-host --bin leasehold` \
             (`cargo xtask bench` does)",
            path.display()
        );
    }
    Ok(path)
}

/// Where compiled components are cached between the processes a part
/// starts, so a restarted replica does not recompile.
pub fn component_cache() -> PathBuf {
    guest_dir().join("../../leasehold-bench-cache")
}

/// An engine configured as the host configures it.
pub fn runtime(pooling: bool) -> Result<Runtime> {
    runtime_with_cache(pooling, None)
}

/// [`runtime`], with compiled components cached on disk in `cache_dir`
/// (as a host with a `cache_dir` runs).
pub fn runtime_with_cache(pooling: bool, cache_dir: Option<&Path>) -> Result<Runtime> {
    Runtime::new(&EngineConfig {
        max_guests: MAX_GUESTS,
        memory_bytes: GUEST_MEMORY_BYTES,
        pooling,
        cache_dir: cache_dir.map(Path::to_path_buf),
    })
    .map_err(|e| anyhow!("{e}"))
}

/// Compile `component` (a guest name) as controller `name`.
pub fn compile(runtime: &Runtime, name: &str, component: &str) -> Result<CompiledController> {
    runtime
        .load(name, &guest(component)?, GuestLimits::default(), Vec::new())
        .map_err(|e| anyhow!("{e}"))
}

/// A new instance of `compiled` for the tenure `fence` on `store`, its
/// commits counted in `counters`, aborted through `revocation`: the call a
/// new tenure makes, with nothing around it (some parts time it).
pub async fn instantiate(
    compiled: &CompiledController,
    fence: Fence,
    store: Arc<dyn Store>,
    counters: Arc<CommitCounters>,
    revocation: Revocation,
) -> Result<GuestInstance> {
    compiled
        .instantiate(fence, store, counters, revocation)
        .await
        .map_err(|e| anyhow!("{e}"))
}

/// A tenure of `compiled` on `fence` in `backends`' store, with commit
/// counters of its own, aborted through `revocation`, that has answered
/// `describe` (as the supervisor starts one).
pub async fn tenure(
    compiled: &CompiledController,
    backends: &MemoryBackends,
    fence: Fence,
    revocation: Revocation,
) -> Result<GuestInstance> {
    let mut guest = instantiate(
        compiled,
        fence,
        backends.store.clone(),
        Arc::default(),
        revocation,
    )
    .await?;
    guest.describe().await.map_err(|e| anyhow!("{e}"))?;
    Ok(guest)
}

/// The turns of `count` configurations measured alike: rounds of `round`
/// measurements of one configuration, each round starting one
/// configuration further, so drift in the machine's load hits them alike;
/// `(configuration, counted)` per measurement, the first `warmup` of each
/// configuration not counted. Each configuration gets `warmup + runs`
/// measurements rounded up to whole rounds.
pub fn rotation(
    count: usize,
    warmup: usize,
    runs: usize,
    round: usize,
) -> impl Iterator<Item = (usize, bool)> {
    let rounds = (warmup + runs).div_ceil(round);
    (0..rounds).flat_map(move |r| {
        (0..count)
            .flat_map(move |k| (0..round).map(move |i| ((r + k) % count, r * round + i >= warmup)))
    })
}

/// A memory authority and a memory store fenced by it.
pub struct MemoryBackends {
    pub authority: Arc<MemoryAuthority>,
    pub store: Arc<MemoryStore>,
}

impl MemoryBackends {
    pub fn new() -> Self {
        let authority = Arc::new(MemoryAuthority::new());
        let store = Arc::new(MemoryStore::new(authority.clone()));
        Self { authority, store }
    }
}

/// Take `lease` of `cluster` for a benchmark holder.
pub async fn grant(authority: &dyn Authority, cluster: &str, lease: &str) -> Result<Fence> {
    let request = AcquireRequest {
        key: LeaseKey::new(cluster, lease),
        holder: "bench-host".into(),
        ttl: BENCH_LEASE_TTL,
    };
    match authority
        .acquire(&request)
        .await
        .map_err(|e| anyhow!("{e}"))?
    {
        Acquired::Granted(grant) => Ok(grant.fence),
        Acquired::Held { holder, .. } => bail!("lease {cluster}/{lease} is held by {holder}"),
    }
}

/// A store wrapper for the abort benchmark: every `get` is reported (the
/// spinning guest reads once right before it spins), and while `hold` is
/// set a fenced commit reports that it started and then never finishes
/// (the blocked guest).
pub struct HeldStore {
    inner: Arc<dyn Store>,
    hold: AtomicBool,
    gets: mpsc::UnboundedSender<()>,
    held: mpsc::UnboundedSender<()>,
}

/// The receiving ends of a [`HeldStore`]'s reports.
pub struct HeldStoreReports {
    /// A `get` was made.
    pub gets: mpsc::UnboundedReceiver<()>,
    /// A commit started and is being held.
    pub held: mpsc::UnboundedReceiver<()>,
}

impl HeldStore {
    pub fn new(inner: Arc<dyn Store>) -> (Arc<Self>, HeldStoreReports) {
        let (gets_tx, gets) = mpsc::unbounded_channel();
        let (held_tx, held) = mpsc::unbounded_channel();
        (
            Arc::new(Self {
                inner,
                hold: AtomicBool::new(false),
                gets: gets_tx,
                held: held_tx,
            }),
            HeldStoreReports { gets, held },
        )
    }

    /// Hold every commit that starts from now on (or stop holding).
    pub fn hold(&self, hold: bool) {
        self.hold.store(hold, Ordering::SeqCst);
    }
}

#[async_trait]
impl Store for HeldStore {
    async fn get(&self, cluster: &str, key: &ObjectKey) -> Result<Option<Object>, StoreError> {
        let _ = self.gets.send(());
        self.inner.get(cluster, key).await
    }

    async fn list(
        &self,
        cluster: &str,
        kind: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.inner.list(cluster, kind, after, limit).await
    }

    async fn list_selected(
        &self,
        cluster: &str,
        kind: &str,
        selector: &Selector,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.inner
            .list_selected(cluster, kind, selector, after, limit)
            .await
    }

    async fn commit_fenced(
        &self,
        fence: &Fence,
        ops: &[Op],
        events: &[NewEvent],
    ) -> Result<Committed, StoreError> {
        if self.hold.load(Ordering::SeqCst) {
            let _ = self.held.send(());
            std::future::pending::<()>().await;
        }
        self.inner.commit_fenced(fence, ops, events).await
    }

    async fn put(
        &self,
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        expected_version: Option<u64>,
    ) -> Result<Object, StoreError> {
        self.inner.put(cluster, key, value, expected_version).await
    }

    async fn delete(
        &self,
        cluster: &str,
        key: &ObjectKey,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        self.inner.delete(cluster, key, expected_version).await
    }

    async fn write(
        &self,
        cluster: &str,
        write: &leasehold_host::store::ApiWrite,
    ) -> Result<leasehold_host::store::Written, StoreError> {
        self.inner.write(cluster, write).await
    }

    async fn events(
        &self,
        cluster: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.inner.events(cluster, after, limit).await
    }

    async fn changes(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Result<leasehold_host::store::ChangePage, StoreError> {
        self.inner.changes(cluster, kinds, after, limit).await
    }

    fn watch(&self, cluster: &str) -> watch::Receiver<u64> {
        self.inner.watch(cluster)
    }
}

/// An object key.
pub fn key(kind: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind: kind.into(),
        name: name.into(),
    }
}

/// The server the test databases are created on (the admin URL).
pub fn admin_url() -> String {
    std::env::var(leasehold_host::db::URL_ENV)
        .unwrap_or_else(|_| leasehold_host::db::DEFAULT_URL.to_string())
}

/// The database name in a PostgreSQL URL.
pub fn database_name(url: &str) -> Result<String> {
    let parsed = url::Url::parse(url).context("parsing the database url")?;
    Ok(parsed.path().trim_start_matches('/').to_string())
}

/// `url` with its host and port replaced (to route through a proxy).
pub fn with_address(url: &str, addr: std::net::SocketAddr) -> Result<String> {
    let mut parsed = url::Url::parse(url).context("parsing the database url")?;
    parsed
        .set_host(Some(&addr.ip().to_string()))
        .map_err(|e| anyhow!("{e}"))?;
    parsed
        .set_port(Some(addr.port()))
        .map_err(|()| anyhow!("cannot set a port"))?;
    Ok(parsed.to_string())
}

/// The address (host:port) of the PostgreSQL server in `url`.
pub fn server_address(url: &str) -> Result<std::net::SocketAddr> {
    let parsed = url::Url::parse(url).context("parsing the database url")?;
    let host = parsed.host_str().unwrap_or("127.0.0.1");
    let port = parsed.port().unwrap_or(5432);
    std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .context("resolving the database server")?
        .next()
        .ok_or_else(|| anyhow!("no address for {host}:{port}"))
}

/// A session on the admin database, to read server statistics without
/// counting as a transaction of the database under measurement.
pub struct Stats {
    client: tokio_postgres::Client,
    connection: tokio::task::JoinHandle<()>,
}

impl Stats {
    pub async fn connect() -> Result<Self> {
        let (client, connection) = tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls)
            .await
            .context("connecting to PostgreSQL for statistics")?;
        let connection = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Self { client, connection })
    }

    /// Committed plus rolled-back transactions of `database` so far.
    ///
    /// The server counts a session's transactions when the session flushes
    /// its statistics: when it goes idle at least a second after its last
    /// flush, when it ends, or up to ten seconds later. Exact counts over a
    /// window therefore come from [`Stats::sessions_closed`] first.
    pub async fn transactions(&self, database: &str) -> Result<i64> {
        let row = self
            .client
            .query_one(
                "SELECT coalesce(sum(xact_commit + xact_rollback), 0)::int8
                   FROM pg_stat_database WHERE datname = $1",
                &[&database],
            )
            .await
            .context("reading pg_stat_database")?;
        Ok(row.get(0))
    }

    /// Wait until no session is connected to `database` (a pool was closed
    /// and the server has ended its sessions, flushing their statistics).
    pub async fn sessions_closed(&self, database: &str) -> Result<()> {
        let started = std::time::Instant::now();
        loop {
            let row = self
                .client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                    &[&database],
                )
                .await?;
            if row.get::<_, i64>(0) == 0 {
                return Ok(());
            }
            if started.elapsed() > SESSIONS_CLOSE_WAIT {
                bail!("sessions to {database} are still open after {SESSIONS_CLOSE_WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The server's version string.
    pub async fn server_version(&self) -> Result<String> {
        let row = self.client.query_one("SHOW server_version", &[]).await?;
        Ok(row.get(0))
    }
}

impl Drop for Stats {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// A throwaway folder, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(what: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-bench-{what}-{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp_micros()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// While alive, this process's stderr goes to `/dev/null`.
///
/// The SDK's `FakeHost` echoes every guest log line to stderr (for failing
/// tests); in a benchmark that would flood the terminal and charge the
/// native side a terminal write per line, where the component's log lines
/// go to `tracing`. Silenced, the native side still pays one `write(2)`
/// per line.
pub struct Silenced {
    saved: std::os::fd::OwnedFd,
}

impl Silenced {
    pub fn stderr() -> Result<Self> {
        use std::os::fd::{AsRawFd, FromRawFd};
        let null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .context("opening /dev/null")?;
        // SAFETY: dup and dup2 on descriptors this process owns; the saved
        // descriptor is owned by `saved` from here on.
        unsafe {
            let saved = libc::dup(libc::STDERR_FILENO);
            if saved < 0 {
                bail!("dup(stderr): {}", std::io::Error::last_os_error());
            }
            let saved = std::os::fd::OwnedFd::from_raw_fd(saved);
            if libc::dup2(null.as_raw_fd(), libc::STDERR_FILENO) < 0 {
                bail!("dup2(stderr): {}", std::io::Error::last_os_error());
            }
            Ok(Self { saved })
        }
    }
}

impl Drop for Silenced {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: restores the descriptor saved in `stderr`.
        unsafe {
            libc::dup2(self.saved.as_raw_fd(), libc::STDERR_FILENO);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::rotation;

    #[test]
    fn rotation_takes_turns_in_whole_rounds_and_skips_each_configurations_warmup() {
        // Two configurations, one warm-up and two counted measurements
        // each, in rounds of two: two rounds, the second starting with the
        // other configuration.
        let turns: Vec<_> = rotation(2, 1, 2, 2).collect();
        assert_eq!(
            turns,
            [
                (0, false),
                (0, true),
                (1, false),
                (1, true),
                (1, true),
                (1, true),
                (0, true),
                (0, true),
            ]
        );
    }
}
