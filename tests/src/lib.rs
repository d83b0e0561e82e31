//! Support for Leasehold's integration tests: where the compiled guest
//! components are, memory backends wired together, a store wrapper whose
//! calls a test can observe and hold, and bounded waits ([`within`],
//! [`until`]) so a test that hangs fails with a message instead.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use leasehold_host::authority::memory::MemoryAuthority;
use leasehold_host::authority::{AcquireRequest, Acquired, Authority, Grant};
use leasehold_host::fence::{Fence, LeaseKey};
use leasehold_host::store::memory::MemoryStore;
use leasehold_host::store::{
    Committed, Event, NewEvent, Object, ObjectKey, Op, Page, Selector, Store, StoreError,
};
use tokio::sync::{mpsc, watch};

pub mod browser;
pub mod embedded;
pub mod faults;
pub mod fuse;
pub mod harness;
pub mod http;
pub mod interpreter_abort;
pub mod patroni;
pub mod pgbouncer;
pub mod pgcluster;
pub mod pki;
pub mod process;
pub mod proxy;
pub mod scheduler_component;

/// Longest a test waits for something its own actions cause (a hook to
/// fire, a task to finish, a counter to move): a hang detector, far beyond
/// any healthy run of a debug build on two busy cores, never a timing
/// claim.
pub const TEST_WAIT: Duration = Duration::from_secs(30);

/// `future`'s output, or a panic naming `what` once `limit` passed.
pub async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?} waiting until {what}"))
}

/// Yield to the runtime until `done` holds, or panic naming `what` once
/// `limit` passed. For in-process state that has no notification (an
/// atomic counter).
pub async fn until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        tokio::task::yield_now().await;
    }
}

/// The folder holding the guest components built by `cargo xtask guests`.
pub fn guest_dir() -> PathBuf {
    match std::env::var_os("LEASEHOLD_GUEST_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasm32-wasip2/guest"),
    }
}

/// A host's config on PostgreSQL at `url` running the scheduler (from
/// [`guest_dir`]) under a short lease (ttl 2 s, renewals every 400 ms), so
/// that takeovers after a failover or a crash do not wait long.
pub fn short_lease_config(cluster: &str, holder: &str, port: u16, url: &str) -> String {
    const SCHEDULER: &str = "scheduler";
    let guests = guest_dir();
    let cache = guests.join("../../leasehold-test-cache");
    format!(
        r#"cluster = "{cluster}"
holder = "{holder}"

[database]
url = "{url}"

[http]
listen = "127.0.0.1:{port}"

[runtime]
cache_dir = "{cache}"

[[controllers]]
name = "{SCHEDULER}"
component = "{guests}/{SCHEDULER}.wasm"
lease_ttl = "2000ms"
renew_interval = "400ms"
renew_deadline = "1400ms"
backoff_max = "1s"
"#,
        cache = cache.display(),
        guests = guests.display(),
    )
}

/// The path of a built guest component, or a panic that says how to build
/// it.
pub fn guest(name: &str) -> PathBuf {
    let path = guest_dir().join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "guest component {} is missing: run `cargo xtask guests` (or the README's test command) first",
        path.display()
    );
    path
}

/// A throwaway folder for a test's configs and logs, removed when dropped
/// (unless `LEASEHOLD_KEEP_TEST_DIRS` is set).
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new, empty folder under the system's temporary directory.
    pub fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("leasehold-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("create a temporary folder");
        Self(dir)
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // `LEASEHOLD_KEEP_TEST_DIRS=1` keeps the folder (the hosts' logs
        // of a failed fault schedule) for a look afterwards.
        if std::env::var_os("LEASEHOLD_KEEP_TEST_DIRS").is_some() {
            eprintln!("kept {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A memory authority and a memory store fenced by it.
pub struct MemoryBackends {
    /// The authority (with fault injection).
    pub authority: Arc<MemoryAuthority>,
    /// The store, fenced by `authority`.
    pub store: Arc<MemoryStore>,
}

impl MemoryBackends {
    /// Fresh, empty backends.
    pub fn new() -> Self {
        let authority = Arc::new(MemoryAuthority::new());
        let store = Arc::new(MemoryStore::new(authority.clone()));
        Self { authority, store }
    }

    /// Grant `lease` of `cluster` to `holder`, panicking if it is held.
    pub async fn grant(&self, cluster: &str, lease: &str, holder: &str) -> Grant {
        let request = AcquireRequest {
            key: LeaseKey::new(cluster, lease),
            holder: holder.into(),
            ttl: std::time::Duration::from_secs(60),
        };
        match self.authority.acquire(&request).await.expect("acquire") {
            Acquired::Granted(grant) => grant,
            Acquired::Held { holder, .. } => panic!("{lease} is held by {holder}"),
        }
    }
}

impl Default for MemoryBackends {
    fn default() -> Self {
        Self::new()
    }
}

/// A store wrapper that reports calls and can hold commits.
///
/// - every `get` sends its key on `gets`;
/// - while `hold_commits` is set, a commit reports itself on
///   `commit_entered` and then never finishes; when its future is dropped
///   (the guest was aborted) it reports on `commit_dropped`;
/// - `commits_ok` counts commits that landed, and each is reported on
///   `commit_landed`.
pub struct HookedStore {
    inner: Arc<dyn Store>,
    gets: mpsc::UnboundedSender<ObjectKey>,
    /// Hold every commit that starts while set.
    pub hold_commits: AtomicBool,
    commit_entered: mpsc::UnboundedSender<()>,
    commit_dropped: mpsc::UnboundedSender<()>,
    commit_landed: mpsc::UnboundedSender<Committed>,
    /// Commits that landed.
    pub commits_ok: AtomicU64,
}

/// The receiving ends of a [`HookedStore`]'s reports.
pub struct StoreHooks {
    /// Keys read.
    pub gets: mpsc::UnboundedReceiver<ObjectKey>,
    /// A held commit started.
    pub commit_entered: mpsc::UnboundedReceiver<()>,
    /// A held commit's future was dropped.
    pub commit_dropped: mpsc::UnboundedReceiver<()>,
    /// A commit landed.
    pub commit_landed: mpsc::UnboundedReceiver<Committed>,
}

impl HookedStore {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn Store>) -> (Arc<Self>, StoreHooks) {
        let (gets_tx, gets) = mpsc::unbounded_channel();
        let (entered_tx, commit_entered) = mpsc::unbounded_channel();
        let (dropped_tx, commit_dropped) = mpsc::unbounded_channel();
        let (landed_tx, commit_landed) = mpsc::unbounded_channel();
        (
            Arc::new(Self {
                inner,
                gets: gets_tx,
                hold_commits: AtomicBool::new(false),
                commit_entered: entered_tx,
                commit_dropped: dropped_tx,
                commit_landed: landed_tx,
                commits_ok: AtomicU64::new(0),
            }),
            StoreHooks {
                gets,
                commit_entered,
                commit_dropped,
                commit_landed,
            },
        )
    }
}

struct DropReport(mpsc::UnboundedSender<()>);

impl Drop for DropReport {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

#[async_trait]
impl Store for HookedStore {
    async fn get(&self, cluster: &str, key: &ObjectKey) -> Result<Option<Object>, StoreError> {
        let _ = self.gets.send(key.clone());
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
        if self.hold_commits.load(Ordering::SeqCst) {
            let _report = DropReport(self.commit_dropped.clone());
            let _ = self.commit_entered.send(());
            std::future::pending::<()>().await;
        }
        let result = self.inner.commit_fenced(fence, ops, events).await;
        if let Ok(committed) = &result {
            self.commits_ok.fetch_add(1, Ordering::SeqCst);
            let _ = self.commit_landed.send(committed.clone());
        }
        result
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
