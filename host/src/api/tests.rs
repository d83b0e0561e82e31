//! The API served on a real listener over the memory backends, spoken to
//! with plain HTTP/1.1, so status codes, headers and body limits are the
//! ones a client sees.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use super::*;
use crate::api::auth::Access;
use crate::authority::memory::MemoryAuthority;
use crate::authority::{
    AcquireRequest, Acquired, AuthorityError, DatabaseIdentity, EndReason, LeaseRecord, Renewed,
    TenureRecord,
};
use crate::fence::{Fence, LeaseKey};
use crate::status::{ControllerState, DatabaseState};
use crate::store::memory::MemoryStore;
use crate::store::{Committed, Event, NewEvent, ObjectKey, Op, Page, StoreError};

const CLUSTER: &str = "demo";
const HERE: &str = "replica-here";

/// An authority whose database can be made unreachable, counting identity
/// probes; everything else is the memory backend.
struct Switchable {
    inner: MemoryAuthority,
    down: AtomicBool,
    probes: AtomicUsize,
}

#[async_trait]
impl Authority for Switchable {
    async fn identity(&self) -> Result<DatabaseIdentity, AuthorityError> {
        self.probes.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(AuthorityError::Unavailable {
                endpoint: "test".into(),
                reason: "connection refused".into(),
            });
        }
        self.inner.identity().await
    }
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquired, AuthorityError> {
        self.inner.acquire(request).await
    }
    async fn renew(&self, fences: &[Fence], ttl: Duration) -> Result<Vec<Renewed>, AuthorityError> {
        self.inner.renew(fences, ttl).await
    }
    async fn release(&self, fence: &Fence, reason: EndReason) -> Result<(), AuthorityError> {
        self.inner.release(fence, reason).await
    }
    async fn observe(&self, cluster: &str) -> Result<Vec<LeaseRecord>, AuthorityError> {
        self.inner.observe(cluster).await
    }
    async fn history_before(
        &self,
        key: &LeaseKey,
        before: Option<crate::fence::Epoch>,
        limit: usize,
    ) -> Result<Vec<TenureRecord>, AuthorityError> {
        self.inner.history_before(key, before, limit).await
    }
    async fn record_outbound(
        &self,
        fence: &Fence,
        requests: u64,
        last_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<(), AuthorityError> {
        self.inner.record_outbound(fence, requests, last_at).await
    }
    fn released(&self, cluster: &str) -> watch::Receiver<u64> {
        self.inner.released(cluster)
    }
}

/// A store that tells the test each time events or changes were read, so
/// a test can write only once a long poll has looked and found nothing.
struct Observed {
    inner: MemoryStore,
    reads: AtomicUsize,
    read: Notify,
}

#[async_trait]
impl Store for Observed {
    async fn get(
        &self,
        cluster: &str,
        key: &ObjectKey,
    ) -> Result<Option<crate::store::Object>, StoreError> {
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
        selector: &crate::store::Selector,
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
        self.inner.commit_fenced(fence, ops, events).await
    }
    async fn put(
        &self,
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        expected_version: Option<u64>,
    ) -> Result<crate::store::Object, StoreError> {
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
        write: &crate::store::ApiWrite,
    ) -> Result<crate::store::Written, StoreError> {
        self.inner.write(cluster, write).await
    }
    async fn events(
        &self,
        cluster: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let events = self.inner.events(cluster, after, limit).await;
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.read.notify_one();
        events
    }
    async fn changes(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Result<crate::store::ChangePage, StoreError> {
        let changes = self.inner.changes(cluster, kinds, after, limit).await;
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.read.notify_one();
        changes
    }
    fn watch(&self, cluster: &str) -> watch::Receiver<u64> {
        self.inner.watch(cluster)
    }
}

struct Host {
    addr: SocketAddr,
    authority: Arc<Switchable>,
    store: Arc<Observed>,
    status: Arc<Status>,
    /// The server's stopping signal (see [`ApiState::stopping`]).
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Host {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn host_with(token: Option<&str>, probe_max_age: Duration) -> Host {
    host_limited(
        token.map_or_else(Access::open, Access::single),
        probe_max_age,
        crate::timeouts::HTTP_BODY_READ,
        ServeLimits::for_this_process().0,
    )
    .await
}

/// A host with its own body deadline and connection limits.
async fn host_limited(
    access: Access,
    probe_max_age: Duration,
    body_read: Duration,
    limits: ServeLimits,
) -> Host {
    let memory = MemoryAuthority::new();
    let authority = Arc::new(Switchable {
        inner: memory.clone(),
        down: AtomicBool::new(false),
        probes: AtomicUsize::new(0),
    });
    let store = Arc::new(Observed {
        inner: MemoryStore::new(Arc::new(memory)),
        reads: AtomicUsize::new(0),
        read: Notify::new(),
    });
    let status = Arc::new(Status::new(
        CLUSTER.into(),
        HERE.into(),
        &["rollout".to_string(), "scheduler".to_string()],
    ));
    status.set_database(DatabaseState::Memory);
    let (stop, stopping) = watch::channel(false);
    let state = ApiState {
        cluster: CLUSTER.into(),
        holder: HERE.into(),
        status: status.clone(),
        authority: authority.clone(),
        store: store.clone(),
        access: Arc::new(access),
        stopping,
    };
    let app = build(
        state,
        ProbeSettings {
            timeout: READINESS_PROBE_TIMEOUT,
            max_age: probe_max_age,
        },
        body_read,
    );
    let (addr, server) = serve_on_loopback(app, limits).await;
    Host {
        addr,
        authority,
        store,
        status,
        stop,
        server,
    }
}

/// Serve `app` the way the service does, on a loopback port.
async fn serve_on_loopback(
    app: axum::Router,
    limits: ServeLimits,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve(listener, app, limits, None, std::future::pending()));
    (addr, server)
}

async fn host() -> Host {
    host_with(None, READINESS_PROBE_MAX_AGE).await
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// An error body: `{"error": ..., "code": ...}` and nothing else.
    #[track_caller]
    fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        let body = self.json();
        assert_eq!(body["code"], code, "{body}");
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
        assert_eq!(body.as_object().unwrap().len(), 2, "{body}");
    }
}

/// One HTTP/1.1 exchange on a fresh connection.
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "PUT" {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    // A server may answer (e.g. 413) before reading all of a large body and
    // close; a failed write then is part of the exchange, not an error.
    let _ = stream.write_all(body).await;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw).await;
    parse_reply(&raw)
}

fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(raw)));
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..line_end]).unwrap().trim(), 16)
                .unwrap();
        data = &data[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    call(addr, "GET", path, &[], b"").await
}

async fn put(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    call(addr, "PUT", path, headers, body.as_bytes()).await
}

fn is_rfc3339_utc(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| s.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(s).is_ok())
}

async fn grant(authority: &Switchable, name: &str, holder: &str) -> Fence {
    let request = AcquireRequest {
        key: LeaseKey::new(CLUSTER, name),
        holder: holder.into(),
        ttl: Duration::from_secs(30),
    };
    match authority.acquire(&request).await.unwrap() {
        Acquired::Granted(grant) => grant.fence,
        other => panic!("not granted: {other:?}"),
    }
}

#[tokio::test]
async fn healthz_answers_ok() {
    let h = host().await;
    let reply = get(h.addr, "/healthz").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "ok");
}

#[tokio::test]
async fn readyz_names_every_check_and_says_the_memory_backend_is_not_durable() {
    let h = host().await;
    let controller = |name: &str| h.status.controller(name).unwrap();
    controller("scheduler").set(ControllerState::Leading {
        epoch: 4,
        problem: None,
    });
    controller("rollout").set(ControllerState::Standby {
        holder: Some("replica-there".into()),
    });
    let reply = get(h.addr, "/readyz").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["ready"], true);
    assert_eq!(body["cluster"], CLUSTER);
    assert_eq!(body["holder"], HERE);
    assert_eq!(body["database"]["state"], "memory");
    assert_eq!(body["database"]["durable"], false);
    let warning = body["database"]["warning"].as_str().unwrap();
    assert!(
        warning.contains("SINGLE PROCESS") && warning.contains("NOT DURABLE"),
        "{warning}"
    );
    assert_eq!(
        body["controllers"]["scheduler"],
        json!({"state": "leading", "epoch": 4})
    );
    assert_eq!(
        body["controllers"]["rollout"],
        json!({"state": "standby", "holder": "replica-there"})
    );

    controller("rollout").set(ControllerState::Failing {
        reason: "component trapped".into(),
    });
    let body = get(h.addr, "/readyz").await.json();
    assert_eq!(
        body["controllers"]["rollout"],
        json!({"state": "failing", "reason": "component trapped"})
    );
}

#[tokio::test]
async fn readyz_is_unavailable_until_the_database_is_verified() {
    let h = host().await;
    h.status.set_database(DatabaseState::Unknown);
    let reply = get(h.addr, "/readyz").await;
    assert_eq!(reply.status, 503);
    let body = reply.json();
    assert_eq!(body["ready"], false);
    assert_eq!(body["database"]["state"], "unknown");
    assert_eq!(
        body["controllers"]["scheduler"],
        json!({"state": "starting"})
    );

    h.status.set_database(DatabaseState::Failing {
        reason: "database id differs".into(),
    });
    let reply = get(h.addr, "/readyz").await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.json()["database"]["reason"], "database id differs");
}

fn verified(identity: &DatabaseIdentity) -> DatabaseState {
    DatabaseState::Verified {
        database_id: identity.database_id.to_string(),
        system_identifier: identity.system_identifier.to_string(),
        endpoint: identity.endpoint.clone(),
    }
}

#[tokio::test]
async fn readyz_follows_database_reachability_without_a_restart() {
    let h = host_with(None, Duration::ZERO).await;
    let identity = h.authority.inner.identity().await.unwrap();
    h.status.set_database(verified(&identity));

    let reply = get(h.addr, "/readyz").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["database"]["state"], "verified");
    assert_eq!(
        reply.json()["database"]["database_id"],
        identity.database_id.to_string()
    );

    h.authority.down.store(true, Ordering::SeqCst);
    let reply = get(h.addr, "/readyz").await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["database"]["state"], "failing");
    assert!(
        body["database"]["reason"]
            .as_str()
            .unwrap()
            .contains("connection refused"),
        "{body}"
    );

    h.authority.down.store(false, Ordering::SeqCst);
    let reply = get(h.addr, "/readyz").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test]
async fn readyz_notices_a_replaced_database() {
    let h = host_with(None, Duration::ZERO).await;
    let mut identity = h.authority.inner.identity().await.unwrap();
    identity.database_id = uuid::Uuid::new_v4();
    h.status.set_database(verified(&identity));
    let reply = get(h.addr, "/readyz").await;
    assert_eq!(reply.status, 503);
    assert!(
        reply.json()["database"]["reason"]
            .as_str()
            .unwrap()
            .contains("was verified"),
        "{}",
        reply.text()
    );
}

#[tokio::test]
async fn readyz_reuses_a_recent_probe() {
    let h = host_with(None, Duration::from_secs(3600)).await;
    let identity = h.authority.inner.identity().await.unwrap();
    h.status.set_database(verified(&identity));
    for _ in 0..3 {
        assert_eq!(get(h.addr, "/readyz").await.status, 200);
    }
    assert_eq!(h.authority.probes.load(Ordering::SeqCst), 1);

    let h = host_with(None, Duration::ZERO).await;
    h.status.set_database(verified(&identity));
    for _ in 0..3 {
        get(h.addr, "/readyz").await;
    }
    assert_eq!(h.authority.probes.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn metrics_label_every_series_with_its_controller() {
    let h = host().await;
    let scheduler = h.status.controller("scheduler").unwrap();
    scheduler.set(ControllerState::Leading {
        epoch: 7,
        problem: None,
    });
    scheduler
        .metrics
        .acquisitions
        .fetch_add(2, Ordering::Relaxed);
    scheduler.metrics.lost("renew_deadline");
    scheduler.metrics.aborted("lease_lost");
    scheduler.metrics.aborted("lease_lost");
    scheduler
        .metrics
        .reconcile_seconds
        .observe(Duration::from_millis(3));
    scheduler
        .metrics
        .renew_seconds
        .observe(Duration::from_secs(60));
    scheduler.metrics.commits.ok.fetch_add(5, Ordering::Relaxed);
    scheduler
        .metrics
        .commits
        .fenced
        .fetch_add(1, Ordering::Relaxed);

    let reply = get(h.addr, "/metrics").await;
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = reply.text();
    for line in [
        "leasehold_leader{controller=\"scheduler\"} 1",
        "leasehold_leader{controller=\"rollout\"} 0",
        "leasehold_epoch{controller=\"scheduler\"} 7",
        "leasehold_epoch{controller=\"rollout\"} 0",
        "leasehold_acquisitions_total{controller=\"scheduler\"} 2",
        "leasehold_losses_total{controller=\"scheduler\",reason=\"renew_deadline\"} 1",
        "leasehold_losses_total{controller=\"scheduler\",reason=\"renew_refused\"} 0",
        "leasehold_aborts_total{controller=\"scheduler\",reason=\"lease_lost\"} 2",
        "leasehold_aborts_total{controller=\"rollout\",reason=\"trap\"} 0",
        "leasehold_reconcile_duration_seconds_bucket{controller=\"scheduler\",le=\"0.0025\"} 0",
        "leasehold_reconcile_duration_seconds_bucket{controller=\"scheduler\",le=\"0.005\"} 1",
        "leasehold_reconcile_duration_seconds_bucket{controller=\"scheduler\",le=\"+Inf\"} 1",
        "leasehold_reconcile_duration_seconds_count{controller=\"scheduler\"} 1",
        "leasehold_reconcile_duration_seconds_sum{controller=\"scheduler\"} 0.003",
        "leasehold_renew_duration_seconds_bucket{controller=\"scheduler\",le=\"10\"} 0",
        "leasehold_renew_duration_seconds_bucket{controller=\"scheduler\",le=\"+Inf\"} 1",
        "leasehold_commits_total{controller=\"scheduler\",result=\"ok\"} 5",
        "leasehold_commits_total{controller=\"scheduler\",result=\"fenced\"} 1",
        "leasehold_commits_total{controller=\"scheduler\",result=\"conflict\"} 0",
        "leasehold_commits_total{controller=\"scheduler\",result=\"failed\"} 0",
        "# TYPE leasehold_reconcile_duration_seconds histogram",
        "# TYPE leasehold_losses_total counter",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // The API's own series belong to the host, not to a controller.
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !super::metrics::is_host_series(l))
    {
        assert!(
            line.contains("{controller=\""),
            "unlabelled series {line:?}"
        );
    }
}

#[tokio::test]
async fn leases_show_who_holds_what_and_whether_it_is_here() {
    let h = host().await;
    assert_eq!(
        get(h.addr, "/v1/leases").await.json(),
        json!({"items": [], "next": null})
    );
    let mine = grant(&h.authority, "scheduler", HERE).await;
    grant(&h.authority, "rollout", "replica-there").await;
    // `held_here` comes from this replica's own supervisor, not the name.
    h.status
        .controller("scheduler")
        .unwrap()
        .set(ControllerState::Leading {
            epoch: 1,
            problem: None,
        });

    let reply = get(h.addr, "/v1/leases").await;
    assert_eq!(reply.status, 200);
    let page = reply.json();
    assert_eq!(page["next"], Value::Null, "{page}");
    let leases = page["items"].as_array().unwrap();
    assert_eq!(leases.len(), 2);
    assert_eq!(leases[0]["name"], "rollout");
    assert_eq!(leases[0]["holder"], "replica-there");
    assert_eq!(leases[0]["held_here"], false);
    assert_eq!(leases[1]["name"], "scheduler");
    assert_eq!(leases[1]["holder"], HERE);
    assert_eq!(leases[1]["epoch"], 1);
    assert_eq!(leases[1]["held_here"], true);
    assert_eq!(leases[1]["active"], true);
    assert!(is_rfc3339_utc(&leases[1]["acquired_at"]), "{}", leases[1]);
    assert!(is_rfc3339_utc(&leases[1]["expires_at"]), "{}", leases[1]);
    assert_eq!(leases[0]["shard"], Value::Null, "not run here as a shard");

    h.authority
        .release(&mine, EndReason::Released)
        .await
        .unwrap();
    let leases = get(h.addr, "/v1/leases").await.json()["items"].clone();
    assert_eq!(leases[1]["holder"], HERE);
    assert_eq!(leases[1]["held_here"], false);
    assert_eq!(leases[1]["active"], false);

    // A lease this replica runs as a shard says which.
    grant(&h.authority, "sched-1", HERE).await;
    h.status.set_shard(
        "sched-1",
        "sched",
        crate::shard::Shard { index: 1, count: 3 },
    );
    let leases = get(h.addr, "/v1/leases").await.json()["items"].clone();
    assert_eq!(leases[1]["name"], "sched-1");
    assert_eq!(
        leases[1]["shard"],
        json!({"controller": "sched", "index": 1, "count": 3})
    );
    assert_eq!(leases[2]["name"], "scheduler");
    assert_eq!(leases[2]["shard"], Value::Null);
}

#[tokio::test]
async fn leases_show_their_last_placement_move_in_the_list_and_alone() {
    use crate::authority::{CrashDetection, MoveReason};
    let doc = super::openapi::check::document();
    let h = host().await;
    let leases = &h.authority.inner;
    let request = |holder: &str| AcquireRequest {
        key: LeaseKey::new(CLUSTER, "scheduler"),
        holder: holder.into(),
        ttl: Duration::from_secs(30),
    };
    let placed = |holder: &'static str, moved| {
        let request = request(holder);
        async move {
            match leases
                .acquire_placed(&request, CrashDetection::Ttl, moved)
                .await
                .unwrap()
            {
                Acquired::Granted(grant) => grant,
                other => panic!("not granted: {other:?}"),
            }
        }
    };
    let first = placed("replica-there", None).await;
    let lease = get(h.addr, "/v1/leases/scheduler").await;
    assert_eq!(lease.status, 200, "{}", lease.text());
    assert_eq!(lease.json()["last_move"], Value::Null, "never moved");

    // Handed over by the holder above its share, taken by this replica.
    leases
        .release_placed(
            &first.fence,
            EndReason::Released,
            Some(MoveReason::OverShare),
        )
        .await
        .unwrap();
    let taken = placed(HERE, None).await;
    let at = super::rfc3339(taken.acquired_at);
    let page = get(h.addr, "/v1/leases").await.json();
    let schema =
        super::openapi::check::response_schema(&doc, "get", "/v1/leases", 200, "application/json");
    super::openapi::check::validate(&doc, &schema, &page).unwrap();
    assert_eq!(
        page["items"][0]["last_move"],
        json!({"reason": "over_share", "at": at, "from": "replica-there", "to": HERE})
    );
    let lease = get(h.addr, "/v1/leases/scheduler").await.json();
    let schema = super::openapi::check::response_schema(
        &doc,
        "get",
        "/v1/leases/{name}",
        200,
        "application/json",
    );
    super::openapi::check::validate(&doc, &schema, &lease).unwrap();
    assert_eq!(lease, page["items"][0]);

    // Taken back by a host beyond its share when it lapsed.
    leases
        .faults()
        .expire(&taken.fence.key)
        .expect("the lease exists");
    let back = placed("replica-there", Some(MoveReason::Lapsed)).await;
    let lease = get(h.addr, "/v1/leases/scheduler").await.json();
    assert_eq!(
        lease["last_move"],
        json!({
            "reason": "lapsed",
            "at": super::rfc3339(back.acquired_at),
            "from": HERE,
            "to": "replica-there"
        })
    );
    super::openapi::check::validate(&doc, &schema, &lease).unwrap();

    get(h.addr, "/v1/leases/never-granted")
        .await
        .assert_error(404, "not_found");
    get(h.addr, "/v1/leases/Bad_Name")
        .await
        .assert_error(400, "invalid_request");
}

#[tokio::test]
async fn history_lists_tenures_newest_first() {
    let h = host().await;
    let first = grant(&h.authority, "scheduler", HERE).await;
    h.authority
        .release(&first, EndReason::Released)
        .await
        .unwrap();
    grant(&h.authority, "scheduler", "replica-there").await;

    let reply = get(h.addr, "/v1/leases/scheduler/history").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let page = reply.json();
    assert_eq!(page["next"], Value::Null, "{page}");
    let tenures = page["items"].as_array().unwrap();
    assert_eq!(tenures.len(), 2);
    assert_eq!(tenures[0]["epoch"], 2);
    assert_eq!(tenures[0]["holder"], "replica-there");
    assert_eq!(tenures[0]["ended_at"], Value::Null);
    assert_eq!(tenures[0]["end_reason"], Value::Null);
    assert_eq!(tenures[1]["epoch"], 1);
    assert_eq!(tenures[1]["holder"], HERE);
    assert_eq!(tenures[1]["end_reason"], "released");
    assert!(is_rfc3339_utc(&tenures[1]["ended_at"]));
    assert!(is_rfc3339_utc(&tenures[1]["acquired_at"]));
    assert_eq!(tenures[1]["writes"], 0);
    assert_eq!(tenures[1]["last_write_at"], Value::Null);
    assert_eq!(tenures[1]["outbound_requests"], 0);
    assert_eq!(tenures[1]["last_outbound_at"], Value::Null);
    assert!(tenures[1]["endpoint"].is_string());
    let keys: Vec<&String> = tenures[1].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "acquired_at",
            "end_reason",
            "ended_at",
            "endpoint",
            "epoch",
            "holder",
            "last_outbound_at",
            "last_write_at",
            "outbound_requests",
            "writes"
        ]
    );

    let newest = get(h.addr, "/v1/leases/scheduler/history?limit=1")
        .await
        .json();
    assert_eq!(newest["items"].as_array().unwrap().len(), 1);
    assert_eq!(newest["items"][0]["epoch"], 2);
    assert_eq!(newest["next"], 2);

    assert_eq!(
        get(h.addr, "/v1/leases/never-granted/history").await.json(),
        json!({"items": [], "next": null})
    );
    get(h.addr, "/v1/leases/Bad_Name/history")
        .await
        .assert_error(400, "invalid_request");
    get(h.addr, "/v1/leases/scheduler/history?limit=0")
        .await
        .assert_error(400, "invalid_request");
}

#[tokio::test]
async fn objects_are_created_read_replaced_and_deleted_by_version() {
    let h = host().await;
    let path = "/v1/objects/nodes/n1";
    let created = put(h.addr, path, &[], r#"{"capacity": 2}"#).await;
    assert_eq!(created.status, 201, "{}", created.text());
    let object = created.json();
    assert_eq!(object["kind"], "nodes");
    assert_eq!(object["name"], "n1");
    // The value is embedded as JSON, not as a string of JSON.
    assert_eq!(object["value"], json!({"capacity": 2}));
    let v1 = object["version"].as_u64().unwrap();
    assert_eq!(created.header("etag"), Some(format!("\"{v1}\"").as_str()));

    let read = get(h.addr, path).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.json(), object);

    let replaced = put(h.addr, path, &[], r#"{"capacity": 3}"#).await;
    assert_eq!(replaced.status, 200, "{}", replaced.text());
    let v2 = replaced.json()["version"].as_u64().unwrap();
    assert!(v2 > v1);

    // A stale version is a conflict, and nothing is written.
    put(
        h.addr,
        path,
        &[("If-Match", &v1.to_string())],
        r#"{"capacity": 9}"#,
    )
    .await
    .assert_error(409, "conflict");
    assert_eq!(
        get(h.addr, path).await.json()["value"],
        json!({"capacity": 3})
    );

    // The current version, quoted as the ETag gives it, is accepted.
    let etag = format!("\"{v2}\"");
    let updated = put(h.addr, path, &[("If-Match", &etag)], r#"{"capacity": 4}"#).await;
    assert_eq!(updated.status, 200, "{}", updated.text());
    let v3 = updated.json()["version"].as_u64().unwrap();

    // Create-only preconditions on an existing object.
    put(h.addr, path, &[("If-None-Match", "*")], "{}")
        .await
        .assert_error(409, "conflict");
    put(h.addr, path, &[("If-Match", "0")], "{}")
        .await
        .assert_error(409, "conflict");
    // If-Match: * needs it to exist.
    put(
        h.addr,
        "/v1/objects/nodes/absent",
        &[("If-Match", "*")],
        "{}",
    )
    .await
    .assert_error(409, "conflict");
    let fresh = put(
        h.addr,
        "/v1/objects/nodes/n2",
        &[("If-None-Match", "*")],
        "[1,2]",
    )
    .await;
    assert_eq!(fresh.status, 201);
    assert_eq!(fresh.json()["value"], json!([1, 2]));

    call(
        h.addr,
        "DELETE",
        path,
        &[("If-Match", &v1.to_string())],
        b"",
    )
    .await
    .assert_error(409, "conflict");
    let deleted = call(
        h.addr,
        "DELETE",
        path,
        &[("If-Match", &v3.to_string())],
        b"",
    )
    .await;
    assert_eq!(deleted.status, 204, "{}", deleted.text());
    assert!(deleted.body.is_empty());
    get(h.addr, path).await.assert_error(404, "not_found");
    call(h.addr, "DELETE", path, &[], b"")
        .await
        .assert_error(404, "not_found");
    // Deleted, then created again: 201 once more.
    assert_eq!(put(h.addr, path, &[], "{}").await.status, 201);
}

#[tokio::test]
async fn bad_object_requests_get_json_errors() {
    let h = host().await;
    put(h.addr, "/v1/objects/nodes/n1", &[], "{not json")
        .await
        .assert_error(400, "invalid_request");
    put(h.addr, "/v1/objects/nodes/n1", &[], "")
        .await
        .assert_error(400, "invalid_request");
    put(h.addr, "/v1/objects/Nodes/n1", &[], "{}")
        .await
        .assert_error(400, "invalid_request");
    get(h.addr, "/v1/objects/nodes/bad_name")
        .await
        .assert_error(400, "invalid_request");
    put(
        h.addr,
        "/v1/objects/nodes/n1",
        &[("If-Match", "W/\"1\"")],
        "{}",
    )
    .await
    .assert_error(400, "invalid_request");

    // Over the request limit: refused by the server before the store.
    let huge = format!("\"{}\"", "x".repeat(crate::limits::HTTP_BODY_BYTES));
    put(h.addr, "/v1/objects/nodes/n1", &[], &huge)
        .await
        .assert_error(413, "too_large");
    // Within the request limit but over the value limit: refused by the
    // store with the same status.
    let big = format!("\"{}\"", "x".repeat(crate::limits::MAX_VALUE_BYTES));
    put(h.addr, "/v1/objects/nodes/n1", &[], &big)
        .await
        .assert_error(413, "too_large");
    get(h.addr, "/v1/objects/nodes/n1")
        .await
        .assert_error(404, "not_found");

    get(h.addr, "/v1/nothing-here")
        .await
        .assert_error(404, "not_found");
    call(h.addr, "POST", "/v1/objects/nodes/n1", &[], b"{}")
        .await
        .assert_error(405, "method_not_allowed");
}

#[tokio::test]
async fn objects_list_in_pages() {
    let h = host().await;
    for name in ["e", "a", "c", "b", "d"] {
        let body = format!("{{\"n\": \"{name}\"}}");
        assert_eq!(
            put(h.addr, &format!("/v1/objects/tasks/{name}"), &[], &body)
                .await
                .status,
            201
        );
    }
    put(h.addr, "/v1/objects/nodes/z", &[], "{}").await;

    let page = get(h.addr, "/v1/objects/tasks?limit=2").await.json();
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(page["items"][0]["value"], json!({"n": "a"}));
    assert_eq!(page["next"], "b");

    let mut seen = names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut next = page["next"].as_str().map(str::to_string);
    while let Some(after) = next {
        let page = get(h.addr, &format!("/v1/objects/tasks?limit=2&after={after}"))
            .await
            .json();
        for item in page["items"].as_array().unwrap() {
            seen.push(item["name"].as_str().unwrap().to_string());
        }
        next = page["next"].as_str().map(str::to_string);
    }
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);

    let all = get(h.addr, "/v1/objects/tasks").await.json();
    assert_eq!(all["items"].as_array().unwrap().len(), 5);
    assert_eq!(all["next"], Value::Null);
    assert_eq!(
        get(h.addr, "/v1/objects/empty").await.json(),
        json!({"items": [], "next": null})
    );

    get(h.addr, "/v1/objects/tasks?limit=0")
        .await
        .assert_error(400, "invalid_request");
    get(h.addr, "/v1/objects/tasks?limit=501")
        .await
        .assert_error(400, "invalid_request");
    get(h.addr, "/v1/objects/tasks?limit=x")
        .await
        .assert_error(400, "invalid_request");
    get(h.addr, "/v1/objects/tasks?after=Bad_Name")
        .await
        .assert_error(400, "invalid_request");
}

/// Percent-encode a query value: everything but the unreserved
/// characters.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The names of a list reply's items.
fn item_names(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn objects_list_by_labels_and_contained_json() {
    let doc = super::openapi::check::document();
    let h = host().await;
    let objects = [
        (
            "a",
            r#"{"status": "pending", "spec": {"cpu": 2}}"#,
            r#"{"app": "web"}"#,
        ),
        (
            "b",
            r#"{"status": "done", "spec": {"cpu": 2}}"#,
            r#"{"app": "web"}"#,
        ),
        (
            "c",
            r#"{"status": "pending", "tags": ["x", "y"]}"#,
            r#"{"app": "db"}"#,
        ),
        (
            "d",
            r#"{"status": "pending"}"#,
            r#"{"app": "web", "tier": "front"}"#,
        ),
        ("e", r#"["x", "y"]"#, r#"{}"#),
    ];
    for (name, value, labels) in objects {
        let body = format!(r#"{{"value": {value}, "labels": {labels}}}"#);
        let reply = put(
            h.addr,
            &format!("/v1/objects/tasks/{name}"),
            &[OBJECT_WRITE],
            &body,
        )
        .await;
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    put(
        h.addr,
        "/v1/objects/nodes/a",
        &[OBJECT_WRITE],
        r#"{"value": {"status": "pending"}, "labels": {"app": "web"}}"#,
    )
    .await;

    let list = |query: String| {
        let addr = h.addr;
        async move { get(addr, &format!("/v1/objects/tasks?{query}")).await }
    };
    let pending = encoded(r#"{"status":"pending"}"#);
    let cases: Vec<(String, &[&str])> = vec![
        ("label=app=web".into(), &["a", "b", "d"]),
        ("label=app%3Dweb".into(), &["a", "b", "d"]),
        ("label=app=web&label=tier=front".into(), &["d"]),
        ("label=app=".into(), &[]),
        (format!("contains={pending}"), &["a", "c", "d"]),
        (
            format!("contains={}", encoded(r#"{"spec": {"cpu": 2}}"#)),
            &["a", "b"],
        ),
        (
            format!("contains={}", encoded(r#"{"tags": ["y"]}"#)),
            &["c"],
        ),
        (format!("contains={}", encoded(r#""x""#)), &["e"]),
        (format!("label=app=web&contains={pending}"), &["a", "d"]),
        // Unknown parameters are ignored, as by every list.
        ("label=app=db&unknown=1".into(), &["c"]),
    ];
    for (query, expected) in cases {
        let reply = list(query.clone()).await;
        assert_eq!(reply.status, 200, "{query}: {}", reply.text());
        assert_documented(&doc, "GET", "/v1/objects/{kind}", &reply);
        let page = reply.json();
        assert_eq!(item_names(&page), expected, "{query}");
        assert_eq!(page["next"], Value::Null, "{query}");
    }

    // Paged like any list: `next` is the last name, passed as `after`
    // with the same selector.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let query = match &after {
            Some(after) => format!("label=app=web&contains={pending}&limit=1&after={after}"),
            None => format!("label=app=web&contains={pending}&limit=1"),
        };
        let page = list(query).await.json();
        let names = item_names(&page);
        assert!(names.len() <= 1);
        seen.extend(names);
        match page["next"].as_str() {
            Some(next) => {
                assert_eq!(Some(next), seen.last().map(String::as_str));
                after = Some(next.to_string());
            }
            None => break,
        }
    }
    assert_eq!(seen, ["a", "d"]);

    // Bad selectors are 400s that say what is wrong.
    let deep = format!("{}1{}", "[".repeat(17), "]".repeat(17));
    let refused: Vec<(String, &str)> = vec![
        ("label=app".into(), "KEY=VALUE"),
        ("label=app=web&label=app=db".into(), "more than once"),
        ("label=-app=web".into(), "label key"),
        ("label=app=no%20spaces".into(), "has value"),
        ("contains=pending".into(), "must be JSON"),
        (
            format!("contains={pending}&contains={pending}"),
            "more than once",
        ),
        (format!("contains={}", encoded(&deep)), "nested more than"),
        (
            format!("contains={}", encoded(&format!("\"{}\"", "x".repeat(5000)))),
            "bytes of compact JSON",
        ),
    ];
    for (query, says) in refused {
        let reply = list(query.clone()).await;
        reply.assert_error(400, "invalid_request");
        assert!(
            reply.text().contains(says),
            "{query}: {} lacks {says:?}",
            reply.text()
        );
    }
}

#[test]
fn the_document_states_the_selector_parameters_and_bounds() {
    use crate::limits::{
        MAX_SELECTOR_CONTAINS_BYTES, MAX_SELECTOR_CONTAINS_DEPTH, MAX_SELECTOR_LABELS,
    };
    let doc = super::openapi::check::document();
    let listed: Vec<&str> = doc["paths"]["/v1/objects/{kind}"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["$ref"].as_str())
        .collect();
    for wanted in [
        "#/components/parameters/Label",
        "#/components/parameters/Contains",
    ] {
        assert!(
            listed.contains(&wanted),
            "listObjects lacks {wanted}: {listed:?}"
        );
    }
    let parameters = &doc["components"]["parameters"];
    assert_eq!(parameters["Label"]["name"], "label");
    assert_eq!(parameters["Contains"]["name"], "contains");
    let label = parameters["Label"]["description"].as_str().unwrap();
    assert!(
        label.contains(&format!("at most {MAX_SELECTOR_LABELS}")),
        "{label}"
    );
    let contains = parameters["Contains"]["description"].as_str().unwrap();
    for figure in [
        format!("at most {MAX_SELECTOR_CONTAINS_BYTES} bytes"),
        format!("at most {MAX_SELECTOR_CONTAINS_DEPTH} arrays or objects deep"),
    ] {
        assert!(contains.contains(&figure), "{contains} lacks {figure:?}");
    }
}

#[tokio::test]
async fn with_a_token_configured_every_v1_request_needs_one() {
    let h = host_with(Some("s3cret-token"), READINESS_PROBE_MAX_AGE).await;
    let auth = [("Authorization", "Bearer s3cret-token")];
    let path = "/v1/objects/nodes/n1";
    let refused = put(h.addr, path, &[], "{}").await;
    refused.assert_error(401, "unauthorized");
    assert!(
        refused
            .header("www-authenticate")
            .unwrap()
            .starts_with("Bearer")
    );
    for wrong in [
        "Bearer wrong-token!",
        "Basic czNjcmV0LXRva2Vu",
        "s3cret-token",
        "Bearer",
        "Bearer s3cret-token-and-more",
    ] {
        put(h.addr, path, &[("Authorization", wrong)], "{}")
            .await
            .assert_error(401, "unauthorized");
        call(h.addr, "GET", path, &[("Authorization", wrong)], b"")
            .await
            .assert_error(401, "unauthorized");
    }
    // In the query string it is no token.
    get(h.addr, "/v1/objects/nodes/n1?token=s3cret-token")
        .await
        .assert_error(401, "unauthorized");
    // Reads need it too.
    for read in [
        path,
        "/v1/objects/nodes",
        "/v1/events",
        "/v1/changes",
        "/v1/leases",
        "/v1/leases/scheduler",
        "/v1/leases/scheduler/history",
    ] {
        let reply = get(h.addr, read).await;
        reply.assert_error(401, "unauthorized");
        assert!(reply.header("www-authenticate").is_some(), "{read}");
    }
    // The OpenAPI document and the probes need none.
    for open in ["/v1/openapi.json", "/healthz", "/readyz", "/metrics"] {
        assert_eq!(get(h.addr, open).await.status, 200, "{open}");
    }

    let ok = put(h.addr, path, &auth, "{}").await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    // A lower-case scheme is the same scheme (RFC 7235).
    let lower = call(
        h.addr,
        "GET",
        path,
        &[("Authorization", "bearer s3cret-token")],
        b"",
    )
    .await;
    assert_eq!(lower.status, 200, "{}", lower.text());
    let events = call(h.addr, "GET", "/v1/events", &auth, b"").await;
    assert_eq!(events.status, 200);
    // The write names the token it was made with.
    assert_eq!(
        events.json()["items"][0]["origin"],
        json!({"by": "api", "token": "default"})
    );

    call(h.addr, "DELETE", path, &[], b"")
        .await
        .assert_error(401, "unauthorized");
    assert_eq!(call(h.addr, "DELETE", path, &auth, b"").await.status, 204);
}

/// A host whose API takes tokens read from files: `(name, token, role,
/// kinds)`.
async fn host_with_tokens(
    tokens: &[(&str, &str, crate::config::TokenRole, Option<&[&str]>)],
) -> Host {
    let dir = std::env::temp_dir().join(format!("lh-api-tokens-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut http = crate::config::HttpConfig::default();
    for (name, token, role, kinds) in tokens {
        let file = dir.join(name);
        std::fs::write(&file, format!("{token}\n")).unwrap();
        http.tokens.push(crate::config::TokenConfig {
            name: name.to_string(),
            file,
            role: *role,
            kinds: kinds.map(|k| k.iter().map(|k| k.to_string()).collect()),
        });
    }
    let access = Access::load(&http).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    host_limited(
        access,
        READINESS_PROBE_MAX_AGE,
        crate::timeouts::HTTP_BODY_READ,
        ServeLimits::for_this_process().0,
    )
    .await
}

#[tokio::test]
async fn roles_and_kinds_decide_what_a_token_may_do() {
    use crate::config::TokenRole::{Read, Write};
    let h = host_with_tokens(&[
        ("admin", "admin-token-0123456789", Write, None),
        ("viewer", "viewer-token-0123456789", Read, None),
        (
            "tasks-team",
            "tasks-token-0123456789",
            Write,
            Some(&["tasks"]),
        ),
        (
            "tasks-reader",
            "tasks-read-0123456789",
            Read,
            Some(&["tasks"]),
        ),
    ])
    .await;
    let as_ = |token: &'static str| [("Authorization", format!("Bearer {token}"))];
    async fn with(
        h: &Host,
        method: &str,
        path: &str,
        auth: &[(&str, String)],
        body: &str,
    ) -> Reply {
        let headers: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
        call(h.addr, method, path, &headers, body.as_bytes()).await
    }
    let admin = as_("admin-token-0123456789");
    let viewer = as_("viewer-token-0123456789");
    let team = as_("tasks-token-0123456789");
    let reader = as_("tasks-read-0123456789");

    assert_eq!(
        with(&h, "PUT", "/v1/objects/nodes/n1", &admin, "{}")
            .await
            .status,
        201
    );
    assert_eq!(
        with(&h, "PUT", "/v1/objects/tasks/t1", &team, "{}")
            .await
            .status,
        201
    );

    // A read token reads everything and writes nothing.
    assert_eq!(
        with(&h, "GET", "/v1/objects/nodes/n1", &viewer, "")
            .await
            .status,
        200
    );
    let refused = with(&h, "PUT", "/v1/objects/nodes/n1", &viewer, "{}").await;
    refused.assert_error(403, "forbidden");
    assert!(
        refused.text().contains("viewer") && refused.text().contains("role write"),
        "{}",
        refused.text()
    );
    assert!(
        !refused.text().contains("viewer-token"),
        "{}",
        refused.text()
    );
    with(&h, "DELETE", "/v1/objects/nodes/n1", &viewer, "")
        .await
        .assert_error(403, "forbidden");
    with(&h, "PUT", "/v1/objects/tasks/t1/status", &reader, "{}")
        .await
        .assert_error(403, "forbidden");

    // A kind-limited token reaches its kinds only, by path and in streams.
    for (method, path, body) in [
        ("GET", "/v1/objects/nodes/n1", ""),
        ("GET", "/v1/objects/nodes", ""),
        ("PUT", "/v1/objects/nodes/n2", "{}"),
        ("DELETE", "/v1/objects/nodes/n1", ""),
        ("PUT", "/v1/objects/nodes/n1/status", "{}"),
        ("GET", "/v1/changes?kind=nodes", ""),
        ("GET", "/v1/changes?kind=tasks&kind=nodes", ""),
    ] {
        let reply = with(&h, method, path, &team, body).await;
        reply.assert_error(403, "forbidden");
        assert!(
            reply.text().contains("nodes"),
            "{method} {path}: {}",
            reply.text()
        );
    }
    assert_eq!(
        with(&h, "GET", "/v1/objects/tasks/t1", &reader, "")
            .await
            .status,
        200
    );
    assert_eq!(with(&h, "GET", "/v1/leases", &reader, "").await.status, 200);
    let kinds_of = |reply: Reply| -> Vec<String> {
        reply.json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["kind"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        kinds_of(with(&h, "GET", "/v1/changes", &reader, "").await),
        ["tasks"]
    );
    assert_eq!(
        kinds_of(with(&h, "GET", "/v1/changes?kind=tasks", &reader, "").await),
        ["tasks"]
    );
    assert_eq!(
        kinds_of(with(&h, "GET", "/v1/events", &reader, "").await),
        ["tasks"]
    );
    assert_eq!(
        kinds_of(with(&h, "GET", "/v1/events", &viewer, "").await),
        ["nodes", "tasks"]
    );
    // A page that passed over other kinds at its end says where to resume.
    assert_eq!(
        with(&h, "PUT", "/v1/objects/nodes/n3", &admin, "{}")
            .await
            .status,
        201
    );
    let page = with(&h, "GET", "/v1/events", &reader, "").await.json();
    assert_eq!(page["items"].as_array().unwrap().len(), 1, "{page}");
    let last_seq =
        with(&h, "GET", "/v1/events", &admin, "").await.json()["items"][2]["seq"].clone();
    assert_eq!(page["next"], last_seq, "{page}");
    let beyond = with(
        &h,
        "GET",
        &format!("/v1/events?after={last_seq}"),
        &reader,
        "",
    )
    .await
    .json();
    assert_eq!(beyond, json!({"items": [], "next": null}));

    // Each write names its token.
    let origins: Vec<Value> = with(&h, "GET", "/v1/events", &admin, "").await.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["origin"].clone())
        .collect();
    assert_eq!(
        origins,
        [
            json!({"by": "api", "token": "admin"}),
            json!({"by": "api", "token": "tasks-team"}),
            json!({"by": "api", "token": "admin"}),
        ]
    );
    let changes = with(&h, "GET", "/v1/changes", &admin, "").await.json();
    assert_eq!(
        changes["items"][1]["origin"],
        json!({"by": "api", "token": "tasks-team"})
    );
}

#[tokio::test]
async fn events_come_in_commit_order_after_a_cursor() {
    let h = host().await;
    put(h.addr, "/v1/objects/nodes/n1", &[], "{}").await;
    put(h.addr, "/v1/objects/nodes/n1", &[], "{\"a\": 1}").await;
    call(h.addr, "DELETE", "/v1/objects/nodes/n1", &[], b"").await;

    let reply = get(h.addr, "/v1/events?after=0").await;
    assert_eq!(reply.status, 200);
    let page = reply.json();
    assert_eq!(page["next"], Value::Null, "{page}");
    let events = page["items"].as_array().unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs.len(), 3);
    assert!(seqs.is_sorted() && seqs[0] > 0 && seqs[0] < seqs[1] && seqs[1] < seqs[2]);
    let reasons: Vec<&str> = events
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["Created", "Updated", "Deleted"]);
    assert_eq!(events[0]["kind"], "nodes");
    assert_eq!(events[0]["name"], "n1");
    assert_eq!(events[0]["origin"], json!({"by": "api"}));
    assert!(is_rfc3339_utc(&events[0]["at"]));

    let later = get(h.addr, &format!("/v1/events?after={}&limit=1", seqs[0]))
        .await
        .json();
    assert_eq!(later["items"].as_array().unwrap().len(), 1);
    assert_eq!(later["items"][0]["seq"], seqs[1]);
    assert_eq!(later["next"], seqs[1]);
    assert_eq!(
        get(h.addr, &format!("/v1/events?after={}", seqs[2]))
            .await
            .json(),
        json!({"items": [], "next": null})
    );

    get(h.addr, "/v1/events?after=-1")
        .await
        .assert_error(400, "invalid_request");
    get(h.addr, "/v1/events?limit=0")
        .await
        .assert_error(400, "invalid_request");
    get(h.addr, "/v1/events?wait=soon")
        .await
        .assert_error(400, "invalid_request");
}

/// A cursor behind what retention keeps is answered 410 `too_old` with
/// the oldest kept position, in the documented shape; from one below it the
/// log reads on.
#[tokio::test]
async fn events_behind_the_retention_floor_are_gone() {
    let h = host().await;
    for name in ["n1", "n2", "n3"] {
        put(h.addr, &format!("/v1/objects/nodes/{name}"), &[], "{}").await;
    }
    let page = get(h.addr, "/v1/events").await.json();
    let seqs: Vec<u64> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs.len(), 3);
    let policy = crate::store::retention::Policy {
        event_retention: Duration::ZERO,
        tenure_retention: 1,
        batch: 2,
    };
    let trimmed = h.store.inner.trim(CLUSTER, &policy).await.unwrap();
    assert_eq!(trimmed.events, 2);

    let doc = super::openapi::check::document();
    for path in [
        "/v1/events".to_string(),
        format!("/v1/events?after={}&wait=5s", seqs[0]),
    ] {
        let gone = get(h.addr, &path).await;
        assert_eq!(gone.status, 410, "{}", gone.text());
        let body = gone.json();
        assert_eq!(body["code"], "too_old", "{body}");
        assert_eq!(body["oldest_kept"], seqs[1] + 1, "{path}");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("re-list")),
            "{body}"
        );
        assert_documented(&doc, "GET", "/v1/events", &gone);
    }
    let rest = get(h.addr, &format!("/v1/events?after={}", seqs[1]))
        .await
        .json();
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest["items"][0]["seq"], seqs[2]);
}

#[tokio::test]
async fn a_long_poll_wakes_for_a_commit_after_it_found_nothing() {
    let h = host().await;
    put(h.addr, "/v1/objects/nodes/n1", &[], "{}").await;
    // From the store itself: a read through the API would notify `read`
    // before the poll is under way.
    let first = h.store.inner.events(CLUSTER, 0, 1).await.unwrap()[0].seq;
    let reads_before = h.store.reads.load(Ordering::SeqCst);
    let read = h.store.read.notified();
    let addr = h.addr;
    let poll =
        tokio::spawn(async move { get(addr, &format!("/v1/events?after={first}&wait=30s")).await });
    // Write only once the poll has read and found nothing, so the answer
    // can only come from the wake-up path.
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the long poll read the store within 10 s");
    put(h.addr, "/v1/objects/nodes/n2", &[], "{}").await;
    // Well inside the poll's own 30 s wait: an answer this late could only
    // be the wait running out, not the wake-up.
    let reply = tokio::time::timeout(Duration::from_secs(10), poll)
        .await
        .expect("the long poll answered within 10 s of the commit")
        .unwrap();
    assert_eq!(reply.status, 200);
    let page = reply.json();
    let events = &page["items"];
    assert_eq!(events.as_array().unwrap().len(), 1, "{page}");
    assert!(events[0]["seq"].as_u64().unwrap() > first, "{page}");
    assert_eq!(events[0]["name"], "n2");
    assert!(h.store.reads.load(Ordering::SeqCst) >= reads_before + 2);
}

#[tokio::test]
async fn a_held_long_poll_answers_at_once_when_the_server_stops() {
    let h = host().await;
    let read = h.store.read.notified();
    let poll = tokio::spawn(call(h.addr, "GET", "/v1/events?after=0&wait=30s", &[], b""));
    // Stop only once the poll has read and found nothing: it is held.
    read.await;
    h.stop.send(true).unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the held poll answered once the server began stopping")
        .unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), json!({"items": [], "next": null}));
}

#[tokio::test]
async fn a_long_poll_without_events_ends_empty_after_its_wait() {
    let h = host().await;
    let started = std::time::Instant::now();
    let reply = get(h.addr, "/v1/events?after=0&wait=50ms").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), json!({"items": [], "next": null}));
    assert!(started.elapsed() >= Duration::from_millis(50));
}

#[tokio::test]
async fn a_version_precondition_on_an_absent_object_is_a_conflict_not_a_404() {
    let h = host().await;
    let path = "/v1/objects/nodes/never";
    for header in ["7", "\"7\"", "*"] {
        put(h.addr, path, &[("If-Match", header)], "{}")
            .await
            .assert_error(409, "conflict");
        call(h.addr, "DELETE", path, &[("If-Match", header)], b"")
            .await
            .assert_error(409, "conflict");
    }
    // Nothing was created by the refused writes.
    get(h.addr, path).await.assert_error(404, "not_found");
    // Without a precondition, an absent object is still simply not found.
    call(h.addr, "DELETE", path, &[], b"")
        .await
        .assert_error(404, "not_found");
    // Deleted in between: the same answer as never created.
    let created = put(h.addr, path, &[], "{}").await;
    let version = created.json()["version"].as_u64().unwrap().to_string();
    assert_eq!(call(h.addr, "DELETE", path, &[], b"").await.status, 204);
    put(h.addr, path, &[("If-Match", &version)], "{}")
        .await
        .assert_error(409, "conflict");
    call(h.addr, "DELETE", path, &[("If-Match", &version)], b"")
        .await
        .assert_error(409, "conflict");
}

#[tokio::test]
async fn two_authorization_headers_are_refused_whatever_they_say() {
    let h = host_with(Some("s3cret-token"), READINESS_PROBE_MAX_AGE).await;
    let path = "/v1/objects/nodes/n1";
    for pair in [
        ["Bearer s3cret-token", "Bearer wrong-token!"],
        ["Bearer wrong-token!", "Bearer s3cret-token"],
        ["Bearer s3cret-token", "Bearer s3cret-token"],
    ] {
        put(
            h.addr,
            path,
            &[("Authorization", pair[0]), ("Authorization", pair[1])],
            "{}",
        )
        .await
        .assert_error(400, "invalid_request");
        call(
            h.addr,
            "GET",
            path,
            &[("Authorization", pair[0]), ("Authorization", pair[1])],
            b"",
        )
        .await
        .assert_error(400, "invalid_request");
    }
    // None of them wrote anything.
    call(
        h.addr,
        "GET",
        path,
        &[("Authorization", "Bearer s3cret-token")],
        b"",
    )
    .await
    .assert_error(404, "not_found");
}

/// How many of `n` concurrent `PUT`s with `headers` answered each status.
async fn racing_puts(
    addr: SocketAddr,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    n: usize,
) -> std::collections::BTreeMap<u16, usize> {
    let start = Arc::new(tokio::sync::Barrier::new(n));
    let writers: Vec<_> = (0..n)
        .map(|i| {
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                put(addr, path, headers, &format!("{{\"writer\": {i}}}"))
                    .await
                    .status
            })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::new();
    for writer in writers {
        *statuses.entry(writer.await.unwrap()).or_insert(0) += 1;
    }
    statuses
}

/// The API over `store` (and a memory authority), for comparing backends.
async fn api_over(store: Arc<dyn Store>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let status = Arc::new(Status::new(CLUSTER.into(), HERE.into(), &[]));
    let (_stop, stopping) = watch::channel(false);
    let state = ApiState {
        cluster: CLUSTER.into(),
        holder: HERE.into(),
        status,
        authority: Arc::new(MemoryAuthority::new()),
        store,
        access: Arc::new(Access::open()),
        stopping,
    };
    serve_on_loopback(router(state), ServeLimits::for_this_process().0).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn if_match_answers_alike_on_both_backends_also_under_contention() {
    const WRITERS: usize = 50;
    const PATH: &str = "/v1/objects/nodes/contended";
    let database = crate::testing::TestDatabase::create().await;
    let postgres: Arc<dyn Store> = Arc::new(crate::store::postgres::PostgresStore::new(
        database.database(8),
    ));
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new(Arc::new(MemoryAuthority::new())));
    let mut outcomes = Vec::new();
    for (backend, store) in [("memory", memory), ("postgres", postgres)] {
        let (addr, server) = api_over(store).await;
        // A version or existence precondition on an absent object fails.
        for header in ["7", "*"] {
            put(addr, PATH, &[("If-Match", header)], "{}")
                .await
                .assert_error(409, "conflict");
            call(addr, "DELETE", PATH, &[("If-Match", header)], b"")
                .await
                .assert_error(409, "conflict");
        }
        // Absent: every `If-Match: *` write fails its precondition.
        let absent = racing_puts(addr, PATH, &[("If-Match", "*")], WRITERS).await;
        assert_eq!(absent, [(409, WRITERS)].into(), "{backend}: {absent:?}");
        assert_eq!(put(addr, PATH, &[], "{}").await.status, 201);
        // Present: "must exist" holds for every writer, so all succeed.
        let present = racing_puts(addr, PATH, &[("If-Match", "*")], WRITERS).await;
        // Every write landed: the version moved once per writer.
        let version = get(addr, PATH).await.json()["version"].as_u64().unwrap();
        server.abort();
        outcomes.push((backend, absent, present, version));
    }
    let (_, _, memory_present, memory_version) = &outcomes[0];
    let (_, _, postgres_present, postgres_version) = &outcomes[1];
    assert_eq!(memory_present, &[(200, WRITERS)].into());
    assert_eq!(postgres_present, memory_present, "{outcomes:?}");
    assert_eq!(memory_version, postgres_version, "{outcomes:?}");
}

/// Limits short enough for a test to wait them out.
fn short_limits(max_connections: usize) -> ServeLimits {
    ServeLimits {
        max_connections,
        header_read: Duration::from_millis(300),
        keep_alive_idle: Duration::from_millis(600),
    }
}

/// Read from `stream` until the server closes it; what it sent, or a panic
/// if it is still open after `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration, what: &str) -> Vec<u8> {
    let mut raw = Vec::new();
    match tokio::time::timeout(limit, stream.read_to_end(&mut raw)).await {
        Ok(_) => raw,
        Err(_) => panic!("{what}: the server kept the connection open for {limit:?}"),
    }
}

#[tokio::test]
async fn a_header_that_never_ends_is_cut_off() {
    let limits = short_limits(16);
    let h = host_limited(
        Access::open(),
        READINESS_PROBE_MAX_AGE,
        Duration::from_secs(5),
        limits,
    )
    .await;
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: te")
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    closed_within(&mut stream, Duration::from_secs(5), "half a header").await;
    // Closed by the header deadline, not by the (longer) idle one.
    assert!(
        started.elapsed() < limits.keep_alive_idle,
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_idle_time() {
    let h = host_limited(
        Access::open(),
        READINESS_PROBE_MAX_AGE,
        Duration::from_secs(5),
        short_limits(16),
    )
    .await;
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    // One request on a keep-alive connection, then silence.
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let raw = closed_within(&mut stream, Duration::from_secs(5), "an idle keep-alive").await;
    assert!(
        raw.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

#[tokio::test]
async fn a_body_that_never_ends_is_answered_408_and_closed() {
    let body_read = Duration::from_millis(300);
    let h = host_limited(
        Access::open(),
        READINESS_PROBE_MAX_AGE,
        body_read,
        short_limits(16),
    )
    .await;
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    stream
        .write_all(
            b"PUT /v1/objects/nodes/n1 HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n{\"half\":",
        )
        .await
        .unwrap();
    let raw = closed_within(&mut stream, Duration::from_secs(5), "half a body").await;
    let reply = parse_reply(&raw);
    reply.assert_error(408, "request_timeout");
    assert_eq!(reply.header("connection"), Some("close"));
    get(h.addr, "/v1/objects/nodes/n1")
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn past_the_cap_idle_connections_make_room_for_new_ones() {
    const CAP: usize = 8;
    let h = host_limited(
        Access::open(),
        READINESS_PROBE_MAX_AGE,
        Duration::from_secs(5),
        ServeLimits {
            max_connections: CAP,
            header_read: Duration::from_secs(60),
            keep_alive_idle: Duration::from_secs(60),
        },
    )
    .await;
    // Twice the cap of idle sockets, half of them with half a header.
    let mut idle = Vec::new();
    for i in 0..2 * CAP {
        let mut stream = TcpStream::connect(h.addr).await.unwrap();
        if i % 2 == 0 {
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\n")
                .await
                .unwrap();
        }
        idle.push(stream);
    }
    // Every request still gets through, at once.
    for _ in 0..3 {
        let reply = tokio::time::timeout(Duration::from_secs(2), get(h.addr, "/healthz"))
            .await
            .expect("/healthz answers while idle sockets fill the cap");
        assert_eq!(reply.status, 200);
    }
    // The oldest idle sockets were the ones let go.
    let mut first = idle.remove(0);
    closed_within(&mut first, Duration::from_secs(2), "the oldest idle socket").await;
}

#[tokio::test]
async fn past_the_cap_with_every_connection_busy_a_newcomer_is_refused_at_once() {
    const CAP: usize = 2;
    let h = host_limited(
        Access::open(),
        READINESS_PROBE_MAX_AGE,
        Duration::from_secs(5),
        ServeLimits {
            max_connections: CAP,
            header_read: Duration::from_secs(60),
            keep_alive_idle: Duration::from_secs(60),
        },
    )
    .await;
    // Two long polls keep both connections busy; the store says when each
    // has looked at the events (so its request is in flight).
    let mut polls = Vec::new();
    for _ in 0..CAP {
        let reads = h.store.reads.load(Ordering::SeqCst);
        let addr = h.addr;
        polls.push(tokio::spawn(async move {
            get(addr, "/v1/events?wait=30s").await
        }));
        while h.store.reads.load(Ordering::SeqCst) == reads {
            tokio::time::timeout(Duration::from_secs(5), h.store.read.notified())
                .await
                .expect("the long poll reads the events");
        }
    }
    let mut stream = TcpStream::connect(h.addr).await.unwrap();
    let raw = closed_within(
        &mut stream,
        Duration::from_secs(2),
        "a connection over the cap",
    )
    .await;
    let reply = parse_reply(&raw);
    reply.assert_error(503, "too_many_connections");
    // The busy ones were not let go: they still answer, once the server
    // stops.
    let _ = h.stop.send(true);
    for poll in polls {
        let reply = tokio::time::timeout(Duration::from_secs(5), poll)
            .await
            .expect("the held poll answers when the server stops")
            .unwrap();
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
}

#[tokio::test]
async fn stopping_closes_connections_without_a_request_in_flight_at_once() {
    let limits = ServeLimits {
        max_connections: 8,
        header_read: Duration::from_secs(60),
        keep_alive_idle: Duration::from_secs(60),
    };
    let state = ApiState {
        cluster: CLUSTER.into(),
        holder: HERE.into(),
        status: Arc::new(Status::new(CLUSTER.into(), HERE.into(), &[])),
        authority: Arc::new(MemoryAuthority::new()),
        store: Arc::new(MemoryStore::new(Arc::new(MemoryAuthority::new()))),
        access: Arc::new(Access::open()),
        stopping: watch::channel(false).1,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, router(state), limits, None, async move {
        let _ = stopped.await;
    }));
    // One silent, one with half a header, one after a keep-alive request.
    let silent = TcpStream::connect(addr).await.unwrap();
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: sl")
        .await
        .unwrap();
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 12];
    kept.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server stopped without waiting out idle connections")
        .unwrap();
    drop(silent);
}

// The list envelope and paging of every list.

/// Follow `next` from `first` (a path without `after`) to the end; the
/// items of every page in order, and how many pages it took.
async fn read_all(addr: SocketAddr, first: &str) -> (Vec<Value>, usize) {
    let joiner = if first.contains('?') { '&' } else { '?' };
    let mut items = Vec::new();
    let mut path = first.to_string();
    let mut pages = 0;
    loop {
        let reply = get(addr, &path).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        let page = reply.json();
        assert_eq!(
            page.as_object().unwrap().len(),
            2,
            "{path}: only items and next: {page}"
        );
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        pages += 1;
        assert!(pages < 100, "{path}: the pages never end");
        match &page["next"] {
            Value::Null => return (items, pages),
            Value::String(name) => path = format!("{first}{joiner}after={name}"),
            Value::Number(n) => path = format!("{first}{joiner}after={n}"),
            other => panic!("{path}: next is {other}"),
        }
    }
}

#[tokio::test]
async fn leases_list_in_pages_by_name() {
    let h = host().await;
    for name in ["e", "a", "c", "b", "d"] {
        grant(&h.authority, name, "replica-there").await;
    }
    let first = get(h.addr, "/v1/leases?limit=2").await.json();
    assert_eq!(first["items"][0]["name"], "a");
    assert_eq!(first["items"][1]["name"], "b");
    assert_eq!(first["next"], "b");
    let (all, pages) = read_all(h.addr, "/v1/leases?limit=2").await;
    let names: Vec<&str> = all.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    assert_eq!(pages, 3);
    // A full last page has no next: nothing more was there.
    let last = get(h.addr, "/v1/leases?after=c&limit=2").await.json();
    assert_eq!(last["items"].as_array().unwrap().len(), 2);
    assert_eq!(last["next"], Value::Null, "{last}");
    // The default page and the bounds.
    let default = get(h.addr, "/v1/leases").await.json();
    assert_eq!(default["items"].as_array().unwrap().len(), 5);
    for bad in [
        "limit=0",
        "limit=501",
        "limit=x",
        "after=Bad_Name",
        "after=",
    ] {
        get(h.addr, &format!("/v1/leases?{bad}"))
            .await
            .assert_error(400, "invalid_request");
    }
}

#[tokio::test]
async fn history_lists_in_pages_by_epoch_newest_first() {
    let h = host().await;
    for _ in 0..5 {
        let fence = grant(&h.authority, "scheduler", HERE).await;
        h.authority
            .release(&fence, EndReason::Released)
            .await
            .unwrap();
    }
    let first = get(h.addr, "/v1/leases/scheduler/history?limit=2")
        .await
        .json();
    assert_eq!(first["items"][0]["epoch"], 5);
    assert_eq!(first["items"][1]["epoch"], 4);
    assert_eq!(first["next"], 4);
    // `after` follows the list's order: tenures below that epoch.
    let second = get(h.addr, "/v1/leases/scheduler/history?after=4&limit=2")
        .await
        .json();
    let epochs: Vec<u64> = second["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["epoch"].as_u64().unwrap())
        .collect();
    assert_eq!(epochs, [3, 2]);
    assert_eq!(second["next"], 2);
    let (all, pages) = read_all(h.addr, "/v1/leases/scheduler/history?limit=2").await;
    let epochs: Vec<u64> = all.iter().map(|t| t["epoch"].as_u64().unwrap()).collect();
    assert_eq!(epochs, [5, 4, 3, 2, 1]);
    assert_eq!(pages, 3);
    assert_eq!(
        get(h.addr, "/v1/leases/scheduler/history?after=1")
            .await
            .json(),
        json!({"items": [], "next": null})
    );
    for bad in ["after=-1", "after=x", "limit=501", "limit=0"] {
        get(h.addr, &format!("/v1/leases/scheduler/history?{bad}"))
            .await
            .assert_error(400, "invalid_request");
    }
}

#[tokio::test]
async fn events_list_in_pages_and_next_is_null_only_at_the_end() {
    let h = host().await;
    let key = ObjectKey {
        kind: "nodes".into(),
        name: "n1".into(),
    };
    // One more event than the largest page: its `next` must be known even
    // though the store's page cannot hold one more.
    let total = crate::limits::MAX_PAGE_SIZE + 1;
    for i in 0..total {
        h.store
            .put(CLUSTER, &key, &format!("{{\"i\": {i}}}"), None)
            .await
            .unwrap();
    }
    let largest = crate::limits::MAX_PAGE_SIZE;
    let full = get(h.addr, &format!("/v1/events?limit={largest}"))
        .await
        .json();
    let items = full["items"].as_array().unwrap();
    assert_eq!(items.len(), largest);
    let last = items[largest - 1]["seq"].as_u64().unwrap();
    assert_eq!(full["next"], last, "more exist");
    let rest = get(h.addr, &format!("/v1/events?after={last}"))
        .await
        .json();
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next"], Value::Null, "{rest}");
    // Exactly the largest page to the end of the log: no next.
    let first = items[0]["seq"].as_u64().unwrap();
    let exact = get(h.addr, &format!("/v1/events?after={first}&limit={largest}"))
        .await
        .json();
    assert_eq!(exact["items"].as_array().unwrap().len(), largest);
    assert_eq!(exact["next"], Value::Null);
    // The default page, then every page to the end, in order.
    let default = get(h.addr, "/v1/events").await.json();
    let page = crate::limits::DEFAULT_PAGE_SIZE;
    assert_eq!(default["items"].as_array().unwrap().len(), page);
    assert_eq!(default["next"], default["items"][page - 1]["seq"]);
    let (all, pages) = read_all(h.addr, "/v1/events?limit=200").await;
    let seqs: Vec<u64> = all.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs.len(), total);
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in commit order");
    assert_eq!(seqs[0], first);
    assert_eq!(pages, total.div_ceil(200));
    get(h.addr, "/v1/events?limit=501")
        .await
        .assert_error(400, "invalid_request");
}

// The OpenAPI document: the routes it lists, the shapes it gives.

const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "patch", "head", "options", "trace",
];

fn documented_routes(doc: &Value) -> std::collections::BTreeSet<(String, String)> {
    let mut routes = std::collections::BTreeSet::new();
    for (template, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            if HTTP_METHODS.contains(&method.as_str()) {
                routes.insert((method.to_uppercase(), template.clone()));
            }
        }
    }
    routes
}

fn memory_state() -> ApiState {
    let authority = Arc::new(MemoryAuthority::new());
    ApiState {
        cluster: CLUSTER.into(),
        holder: HERE.into(),
        status: Arc::new(Status::new(CLUSTER.into(), HERE.into(), &[])),
        authority: authority.clone(),
        store: Arc::new(MemoryStore::new(authority)),
        access: Arc::new(Access::open()),
        stopping: watch::channel(false).1,
    }
}

#[tokio::test]
async fn the_openapi_document_lists_exactly_the_routes_the_router_serves() {
    let doc = super::openapi::check::document();
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "{}",
        doc["openapi"]
    );
    let documented = documented_routes(&doc);
    let served: std::collections::BTreeSet<(String, String)> = served_routes(memory_state())
        .into_iter()
        .map(|(method, path)| (method.to_string(), path.to_string()))
        .collect();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "served but not in docs/openapi.json: {undocumented:?}"
    );
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        unserved.is_empty(),
        "in docs/openapi.json but not served: {unserved:?}"
    );

    // And the router answers each of them with its handler: neither the
    // unknown-path fallback nor 405.
    let h = host().await;
    for (method, template) in &served {
        let path = template.replace("{kind}", "nodes").replace("{name}", "n1");
        let body: &[u8] = if method == "PUT" { b"{}" } else { b"" };
        let reply = call(h.addr, method, &path, &[], body).await;
        assert_ne!(reply.status, 405, "{method} {path}: {}", reply.text());
        assert!(
            !reply.text().contains("no endpoint at"),
            "{method} {path} fell through to the fallback: {}",
            reply.text()
        );
    }
}

#[tokio::test]
async fn the_host_serves_the_document_the_repository_keeps() {
    let h = host().await;
    let reply = get(h.addr, super::openapi::PATH).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.body, super::openapi::DOCUMENT.as_bytes());
    assert_eq!(
        reply.body,
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json"))
            .expect("docs/openapi.json")
    );
}

#[test]
fn the_document_states_the_bounds_the_code_enforces() {
    use crate::limits::{
        DEFAULT_PAGE_SIZE, HTTP_BODY_BYTES, HTTP_MAX_EVENT_REQUESTS, HTTP_MAX_IN_FLIGHT,
        HTTP_MAX_QUEUED, HTTP_OVERLOADED_RETRY_AFTER, HTTP_QUEUE_WAIT, MAX_PAGE_SIZE,
        MAX_VALUE_BYTES,
    };
    let doc = super::openapi::check::document();
    let limit = &doc["components"]["parameters"]["Limit"]["schema"];
    assert_eq!(limit["minimum"], 1);
    assert_eq!(limit["maximum"], MAX_PAGE_SIZE);
    assert_eq!(limit["default"], DEFAULT_PAGE_SIZE);
    assert_eq!(
        doc["components"]["headers"]["RetryAfter"]["schema"]["const"],
        HTTP_OVERLOADED_RETRY_AFTER.as_secs()
    );
    let wait = doc["components"]["parameters"]["Wait"]["description"]
        .as_str()
        .unwrap();
    let longest = humantime::format_duration(crate::timeouts::EVENTS_LONG_POLL_MAX).to_string();
    assert!(wait.contains(&longest), "{wait} lacks {longest}");
    let changes_wait = doc["components"]["parameters"]["ChangesWait"]["description"]
        .as_str()
        .unwrap();
    assert!(
        changes_wait.contains(&longest),
        "{changes_wait} lacks {longest}"
    );
    let kinds = &doc["components"]["parameters"]["ChangeKind"];
    assert_eq!(kinds["schema"]["maxItems"], crate::limits::MAX_CHANGE_KINDS);
    let most = format!("at most {}", crate::limits::MAX_CHANGE_KINDS);
    assert!(kinds["description"].as_str().unwrap().contains(&most));
    let text = doc["info"]["description"].as_str().unwrap();
    for figure in [
        format!("limit` is 1 to {MAX_PAGE_SIZE} (default {DEFAULT_PAGE_SIZE})"),
        format!("at most {HTTP_BODY_BYTES} bytes"),
        format!("at most {MAX_VALUE_BYTES} bytes"),
        format!("At most {HTTP_MAX_IN_FLIGHT} `/v1` requests"),
        format!(
            "{HTTP_MAX_QUEUED} more wait up to {} ms",
            HTTP_QUEUE_WAIT.as_millis()
        ),
        format!("budget of {HTTP_MAX_EVENT_REQUESTS} at once"),
        format!(
            "within {} of the end of the header",
            humantime::format_duration(crate::timeouts::HTTP_BODY_READ)
        ),
    ] {
        assert!(text.contains(&figure), "the description lacks {figure:?}");
    }
}

/// Check `reply` against what the document gives for `method` on
/// `template` with the reply's status.
#[track_caller]
fn assert_documented(doc: &Value, method: &str, template: &str, reply: &Reply) {
    let schema = super::openapi::check::response_schema(
        doc,
        &method.to_lowercase(),
        template,
        reply.status,
        "application/json",
    );
    let value = reply.json();
    if let Err(why) = super::openapi::check::validate(doc, &schema, &value) {
        panic!(
            "{method} {template} answered {} off the document: {why}",
            reply.status
        );
    }
}

#[tokio::test]
async fn real_responses_have_the_documented_shapes() {
    let doc = super::openapi::check::document();
    let h = host_with(Some("s3cret-token"), READINESS_PROBE_MAX_AGE).await;
    let auth = [("Authorization", "Bearer s3cret-token")];
    let one = "/v1/objects/{kind}/{name}";

    // Objects: created, replaced, read, listed; and the errors.
    let created = put(h.addr, "/v1/objects/nodes/n1", &auth, r#"{"capacity": 2}"#).await;
    assert_eq!(created.status, 201);
    assert_documented(&doc, "PUT", one, &created);
    let replaced = put(h.addr, "/v1/objects/nodes/n1", &auth, "[1, 2]").await;
    assert_eq!(replaced.status, 200);
    assert_documented(&doc, "PUT", one, &replaced);
    put(h.addr, "/v1/objects/nodes/n2", &auth, "null").await;
    let read = call(h.addr, "GET", "/v1/objects/nodes/n1", &auth, b"").await;
    assert_documented(&doc, "GET", one, &read);
    let listed = call(h.addr, "GET", "/v1/objects/nodes?limit=1", &auth, b"").await;
    assert!(listed.json()["next"].is_string());
    assert_documented(&doc, "GET", "/v1/objects/{kind}", &listed);
    let last = call(h.addr, "GET", "/v1/objects/nodes?after=n1", &auth, b"").await;
    assert!(last.json()["next"].is_null());
    assert_documented(&doc, "GET", "/v1/objects/{kind}", &last);
    for (method, path, headers, body, status) in [
        ("GET", "/v1/objects/nodes/absent", &auth[..], "", 404),
        ("GET", "/v1/objects/nodes/Bad_Name", &auth[..], "", 400),
        ("GET", "/v1/objects/nodes/n1", &[][..], "", 401),
        ("PUT", "/v1/objects/nodes/n1", &[][..], "{}", 401),
        ("PUT", "/v1/objects/nodes/n1", &auth[..], "{oops", 400),
        ("DELETE", "/v1/objects/nodes/n1", &[][..], "", 401),
    ] {
        let reply = call(h.addr, method, path, headers, body.as_bytes()).await;
        assert_eq!(reply.status, status, "{method} {path}: {}", reply.text());
        assert_documented(&doc, method, one, &reply);
    }
    let conflict = call(
        h.addr,
        "PUT",
        "/v1/objects/nodes/n1",
        &[auth[0], ("If-Match", "1")],
        b"{}",
    )
    .await;
    assert_eq!(conflict.status, 409);
    assert_documented(&doc, "PUT", one, &conflict);

    // Events: api origins and guest origins.
    let fence = grant(&h.authority, "scheduler", HERE).await;
    h.store
        .commit_fenced(
            &fence,
            &[],
            &[NewEvent {
                key: ObjectKey {
                    kind: "nodes".into(),
                    name: "n1".into(),
                },
                reason: "Checked".into(),
                message: "by the guest".into(),
            }],
        )
        .await
        .unwrap();
    let events = call(h.addr, "GET", "/v1/events?limit=2", &auth, b"").await;
    assert!(events.json()["next"].is_number());
    assert_documented(&doc, "GET", "/v1/events", &events);
    let events = call(h.addr, "GET", "/v1/events?after=2", &auth, b"").await;
    let origins: Vec<Value> = events.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["origin"]["by"].clone())
        .collect();
    assert!(origins.contains(&json!("guest")), "{origins:?}");
    assert_documented(&doc, "GET", "/v1/events", &events);
    let bad = call(h.addr, "GET", "/v1/events?after=x", &auth, b"").await;
    assert_documented(&doc, "GET", "/v1/events", &bad);

    // Leases and history, with a tenure ended and one running.
    h.authority
        .release(&fence, EndReason::Released)
        .await
        .unwrap();
    grant(&h.authority, "scheduler", HERE).await;
    grant(&h.authority, "rollout", "replica-there").await;
    let leases = call(h.addr, "GET", "/v1/leases?limit=1", &auth, b"").await;
    assert!(leases.json()["next"].is_string());
    assert_documented(&doc, "GET", "/v1/leases", &leases);
    let leases = call(h.addr, "GET", "/v1/leases?after=rollout", &auth, b"").await;
    assert_documented(&doc, "GET", "/v1/leases", &leases);
    let history = call(
        h.addr,
        "GET",
        "/v1/leases/scheduler/history?limit=1",
        &auth,
        b"",
    )
    .await;
    assert!(history.json()["next"].is_number());
    assert_documented(&doc, "GET", "/v1/leases/{name}/history", &history);
    let history = call(
        h.addr,
        "GET",
        "/v1/leases/scheduler/history?after=2",
        &auth,
        b"",
    )
    .await;
    assert_eq!(history.json()["items"][0]["end_reason"], "released");
    assert_documented(&doc, "GET", "/v1/leases/{name}/history", &history);

    // Readiness, ready and not.
    h.status
        .controller("scheduler")
        .unwrap()
        .set(ControllerState::Leading {
            epoch: 2,
            problem: Some("restarting".into()),
        });
    h.status
        .controller("rollout")
        .unwrap()
        .set(ControllerState::Standby {
            holder: Some("replica-there".into()),
        });
    let ready = get(h.addr, "/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert_documented(&doc, "GET", "/readyz", &ready);
    h.status
        .controller("rollout")
        .unwrap()
        .set(ControllerState::Failing {
            reason: "cannot compile".into(),
        });
    let unready = get(h.addr, "/readyz").await;
    assert_eq!(unready.status, 503, "{}", unready.text());
    assert_documented(&doc, "GET", "/readyz", &unready);
}

const OBJECT_WRITE: (&str, &str) = ("Content-Type", "application/vnd.leasehold.object+json");

#[tokio::test]
async fn objects_carry_metadata_and_a_bare_put_keeps_it() {
    let doc = super::openapi::check::document();
    let h = host().await;
    let one = "/v1/objects/{kind}/{name}";
    let owner = put(h.addr, "/v1/objects/nodes/n1", &[], r#"{"capacity": 2}"#).await;
    assert_eq!(owner.status, 201);
    let fresh = owner.json();
    assert_eq!(fresh["generation"], 1);
    assert_eq!(fresh["labels"], json!({}));
    assert_eq!(fresh["owner"], Value::Null);
    assert_eq!(fresh["finalizers"], json!([]));
    assert_eq!(fresh["deleting_since"], Value::Null);
    assert_eq!(fresh["status"], Value::Null);
    assert_documented(&doc, "PUT", one, &owner);

    let body = r#"{"value": {"want": 1}, "labels": {"app": "web"},
                   "owner": {"kind": "nodes", "name": "n1"}, "finalizers": ["example.com/drain"]}"#;
    let created = put(h.addr, "/v1/objects/tasks/t1", &[OBJECT_WRITE], body).await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert_documented(&doc, "PUT", one, &created);
    let made = created.json();
    assert_eq!(made["value"], json!({"want": 1}));
    assert_eq!(made["labels"], json!({"app": "web"}));
    assert_eq!(made["owner"], json!({"kind": "nodes", "name": "n1"}));
    assert_eq!(made["finalizers"], json!(["example.com/drain"]));

    // A bare value, as before this change: the metadata stays.
    let bare = put(h.addr, "/v1/objects/tasks/t1", &[], r#"{"want": 2}"#).await;
    assert_eq!(bare.status, 200);
    let kept = bare.json();
    assert_eq!(kept["value"], json!({"want": 2}));
    assert_eq!(kept["labels"], json!({"app": "web"}));
    assert_eq!(kept["finalizers"], json!(["example.com/drain"]));
    assert_eq!(kept["generation"], 2);
    let read = get(h.addr, "/v1/objects/tasks/t1").await;
    assert_eq!(read.json(), kept);
    // A JSON body that merely looks like the envelope is a value when sent
    // as a plain value.
    let lookalike = put(
        h.addr,
        "/v1/objects/tasks/t2",
        &[],
        r#"{"value": 1, "labels": {}}"#,
    )
    .await;
    assert_eq!(lookalike.json()["value"], json!({"value": 1, "labels": {}}));
    assert_eq!(lookalike.json()["labels"], json!({}));

    for (body, what) in [
        (r#"{"labels": {}}"#, "value"),
        (r#"{"value": 1, "extra": true}"#, "extra"),
        (r#"{"value": 1, "labels": {"bad key": "x"}}"#, "bad key"),
        (r#"{"value": 1, "finalizers": ["a", "a"]}"#, "twice"),
        (
            r#"{"value": 1, "owner": {"kind": "Nodes", "name": "n1"}}"#,
            "owner kind",
        ),
    ] {
        let reply = put(h.addr, "/v1/objects/tasks/t3", &[OBJECT_WRITE], body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text());
        assert!(reply.text().contains(what), "{body}: {}", reply.text());
        assert_documented(&doc, "PUT", one, &reply);
    }
    let orphan = r#"{"value": 1, "owner": {"kind": "nodes", "name": "absent"}}"#;
    let reply = put(h.addr, "/v1/objects/tasks/t3", &[OBJECT_WRITE], orphan).await;
    assert_eq!(reply.status, 409, "{}", reply.text());
    assert_eq!(get(h.addr, "/v1/objects/tasks/t3").await.status, 404);
}

#[tokio::test]
async fn deletes_with_finalizers_answer_202_until_the_last_is_removed() {
    let doc = super::openapi::check::document();
    let h = host().await;
    let one = "/v1/objects/{kind}/{name}";
    put(h.addr, "/v1/objects/nodes/n1", &[], "{}").await;
    let body =
        r#"{"value": 1, "owner": {"kind": "nodes", "name": "n1"}, "finalizers": ["a", "b"]}"#;
    assert_eq!(
        put(h.addr, "/v1/objects/tasks/held", &[OBJECT_WRITE], body)
            .await
            .status,
        201
    );
    let free = r#"{"value": 2, "owner": {"kind": "nodes", "name": "n1"}}"#;
    assert_eq!(
        put(h.addr, "/v1/objects/tasks/free", &[OBJECT_WRITE], free)
            .await
            .status,
        201
    );

    // Deleting the owner removes it and what it owns, and marks the rest.
    let removed = call(h.addr, "DELETE", "/v1/objects/nodes/n1", &[], b"").await;
    assert_eq!(removed.status, 204, "{}", removed.text());
    assert_eq!(get(h.addr, "/v1/objects/tasks/free").await.status, 404);
    let marked = get(h.addr, "/v1/objects/tasks/held").await;
    assert_eq!(marked.status, 200);
    assert!(
        marked.json()["deleting_since"].is_string(),
        "{}",
        marked.text()
    );
    assert_eq!(marked.json()["value"], 1);

    let again = call(h.addr, "DELETE", "/v1/objects/tasks/held", &[], b"").await;
    assert_eq!(again.status, 202, "{}", again.text());
    assert_documented(&doc, "DELETE", one, &again);
    assert_eq!(again.json(), marked.json());

    let late = r#"{"value": 1, "finalizers": ["a", "b", "c"]}"#;
    assert_eq!(
        put(h.addr, "/v1/objects/tasks/held", &[OBJECT_WRITE], late)
            .await
            .status,
        400
    );
    let one_left = r#"{"value": 1, "finalizers": ["b"]}"#;
    let kept = put(h.addr, "/v1/objects/tasks/held", &[OBJECT_WRITE], one_left).await;
    assert_eq!(kept.status, 200, "{}", kept.text());
    assert_eq!(
        kept.json()["deleting_since"],
        marked.json()["deleting_since"]
    );
    let last = put(
        h.addr,
        "/v1/objects/tasks/held",
        &[OBJECT_WRITE],
        r#"{"value": 1}"#,
    )
    .await;
    assert_eq!(last.status, 204, "{}", last.text());
    assert_eq!(get(h.addr, "/v1/objects/tasks/held").await.status, 404);
}

#[tokio::test]
async fn status_writes_keep_the_value_and_the_generation() {
    let doc = super::openapi::check::document();
    let h = host_with(Some("s3cret-token"), READINESS_PROBE_MAX_AGE).await;
    let auth = [("Authorization", "Bearer s3cret-token")];
    let path = "/v1/objects/{kind}/{name}/status";
    put(h.addr, "/v1/objects/tasks/t1", &auth, r#"{"want": 1}"#).await;
    let written = put(
        h.addr,
        "/v1/objects/tasks/t1/status?generation=1",
        &auth,
        r#"{"have": 1}"#,
    )
    .await;
    assert_eq!(written.status, 200, "{}", written.text());
    assert_documented(&doc, "PUT", path, &written);
    let object = written.json();
    assert_eq!(object["status"], json!({"have": 1}));
    assert_eq!(object["value"], json!({"want": 1}));
    assert_eq!(object["generation"], 1);
    assert_eq!(
        written.header("etag"),
        Some(format!("\"{}\"", object["version"]).as_str())
    );

    // The spec moves on: a status from generation 1 is refused, without
    // a generation it is written.
    let spec = put(h.addr, "/v1/objects/tasks/t1", &auth, r#"{"want": 2}"#).await;
    assert_eq!(
        (
            spec.json()["generation"].clone(),
            spec.json()["status"].clone()
        ),
        (json!(2), json!({"have": 1}))
    );
    let stale = put(
        h.addr,
        "/v1/objects/tasks/t1/status?generation=1",
        &auth,
        "{}",
    )
    .await;
    assert_eq!(stale.status, 409, "{}", stale.text());
    assert_documented(&doc, "PUT", path, &stale);
    let cleared = put(h.addr, "/v1/objects/tasks/t1/status", &auth, "null").await;
    assert_eq!(cleared.status, 200);
    assert_eq!(cleared.json()["status"], Value::Null);
    assert_eq!(cleared.json()["generation"], 2);

    for (target, headers, body, status) in [
        ("/v1/objects/tasks/t1/status", &[][..], "{}", 401),
        ("/v1/objects/tasks/none/status", &auth[..], "{}", 404),
        ("/v1/objects/tasks/t1/status", &auth[..], "{oops", 400),
        ("/v1/objects/tasks/t1/status", &auth[..], "", 400),
        (
            "/v1/objects/tasks/t1/status?generation=0",
            &auth[..],
            "{}",
            400,
        ),
        (
            "/v1/objects/tasks/t1/status?generation=x",
            &auth[..],
            "{}",
            400,
        ),
    ] {
        let reply = put(h.addr, target, headers, body).await;
        assert_eq!(reply.status, status, "{target} {body:?}: {}", reply.text());
        assert_documented(&doc, "PUT", path, &reply);
    }
}

/// A guest's commit of `ops` under `fence`, without any event.
async fn guest_commit(h: &Host, fence: &Fence, ops: &[Op]) -> Committed {
    h.store.commit_fenced(fence, ops, &[]).await.unwrap()
}

fn changes_of(page: &Value) -> Vec<(String, String, String, String)> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["name"].as_str().unwrap().to_string(),
                c["change"].as_str().unwrap().to_string(),
                c["origin"]["by"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every committed object change is in `/v1/changes`, in commit order,
/// whoever wrote it and whether or not an event came with it; a kind
/// filter, paging and bad parameters behave as documented.
#[tokio::test]
async fn object_changes_list_every_write_whoever_made_it_in_commit_order() {
    let doc = super::openapi::check::document();
    let h = host().await;
    let t1 = ObjectKey {
        kind: "tasks".into(),
        name: "t1".into(),
    };
    put(h.addr, "/v1/objects/nodes/n1", &[], "{}").await;
    let fence = grant(&h.authority, "scheduler", HERE).await;
    let made = guest_commit(
        &h,
        &fence,
        &[Op::Create {
            key: t1.clone(),
            value: "{\"status\":\"pending\"}".into(),
        }],
    )
    .await;
    guest_commit(
        &h,
        &fence,
        &[Op::Update {
            key: t1.clone(),
            expected_version: made.revision,
            value: "{\"status\":\"assigned\"}".into(),
        }],
    )
    .await;
    put(h.addr, "/v1/objects/nodes/n1", &[], "{\"a\": 1}").await;
    call(h.addr, "DELETE", "/v1/objects/nodes/n1", &[], b"").await;

    let all = get(h.addr, "/v1/changes").await;
    assert_eq!(all.status, 200, "{}", all.text());
    assert_documented(&doc, "GET", "/v1/changes", &all);
    let page = all.json();
    let expected = [
        ("nodes", "n1", "created", "api"),
        ("tasks", "t1", "created", "guest"),
        ("tasks", "t1", "updated", "guest"),
        ("nodes", "n1", "updated", "api"),
        ("nodes", "n1", "deleted", "api"),
    ]
    .map(|(k, n, c, o)| (k.to_string(), n.to_string(), c.to_string(), o.to_string()));
    assert_eq!(changes_of(&page), expected, "{page}");
    let items = page["items"].as_array().unwrap();
    let positions: Vec<u64> = items
        .iter()
        .map(|c| c["position"].as_u64().unwrap())
        .collect();
    assert!(positions.is_sorted() && positions.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(items[1]["version"], made.revision);
    assert_eq!(items[1]["origin"]["lease"], "scheduler");
    assert_eq!(
        items[4]["version"], items[3]["version"],
        "a delete shows the version it had"
    );
    // The guest's commits appended no event: only the API's writes are in
    // the event log.
    let events = get(h.addr, "/v1/events").await.json();
    assert_eq!(events["items"].as_array().unwrap().len(), 3, "{events}");

    // Only some kinds; a repeated kind counts once.
    let tasks = get(h.addr, "/v1/changes?kind=tasks&kind=tasks")
        .await
        .json();
    assert_eq!(changes_of(&tasks), expected[1..3], "{tasks}");
    let both = get(h.addr, "/v1/changes?kind=tasks&kind=nodes")
        .await
        .json();
    assert_eq!(changes_of(&both), expected, "{both}");

    // Pages of one, followed through `next`, read the same changes.
    let (paged, pages) = read_all(h.addr, "/v1/changes?limit=1").await;
    let paged = changes_of(&json!({ "items": paged }));
    assert_eq!(paged, expected);
    assert!(pages >= expected.len(), "{pages} pages");
    // After the last change, the reader is told where to go on from (the
    // read passed later positions: the events), then nothing.
    let last = positions[4];
    let after_last = get(h.addr, &format!("/v1/changes?after={last}"))
        .await
        .json();
    assert_eq!(after_last["items"], json!([]));
    if let Some(next) = after_last["next"].as_u64() {
        assert!(next > last);
        assert_eq!(
            get(h.addr, &format!("/v1/changes?after={next}"))
                .await
                .json(),
            json!({"items": [], "next": null})
        );
    }
    // A kind filter passes the other kinds' changes: `next` goes past them.
    let after_tasks = get(
        h.addr,
        &format!("/v1/changes?kind=tasks&after={}", positions[2]),
    )
    .await
    .json();
    assert_eq!(after_tasks["items"], json!([]));
    assert!(
        after_tasks["next"].as_u64().is_some_and(|n| n >= last),
        "{after_tasks}"
    );

    for bad in [
        "/v1/changes?after=-1",
        "/v1/changes?limit=0",
        "/v1/changes?wait=soon",
        "/v1/changes?kind=Not_A_Kind",
        "/v1/changes?after=1&after=2",
    ] {
        let reply = get(h.addr, bad).await;
        reply.assert_error(400, "invalid_request");
        assert_documented(&doc, "GET", "/v1/changes", &reply);
    }
    let many: String = (0..33).map(|i| format!("&kind=k{i}")).collect();
    get(h.addr, &format!("/v1/changes?after=0{many}"))
        .await
        .assert_error(400, "invalid_request");
}

/// A held poll for one kind is not answered by another kind's change: it
/// reads on past it and answers the first change of its kind.
#[tokio::test]
async fn a_changes_long_poll_answers_the_first_change_of_its_kind() {
    let h = host().await;
    put(h.addr, "/v1/objects/nodes/n0", &[], "{}").await;
    let addr = h.addr;
    let read = h.store.read.notified();
    let poll = tokio::spawn(async move { get(addr, "/v1/changes?kind=tasks&wait=30s").await });
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the long poll read the store within 10 s");
    // Another kind: the poll wakes, reads past it and keeps waiting.
    let read_again = h.store.read.notified();
    put(h.addr, "/v1/objects/nodes/n1", &[], "{}").await;
    tokio::time::timeout(Duration::from_secs(10), read_again)
        .await
        .expect("the poll read again after the node's commit");
    assert!(
        !poll.is_finished(),
        "a node's change answered a poll for tasks"
    );
    put(h.addr, "/v1/objects/tasks/t1", &[], "{}").await;
    let reply = tokio::time::timeout(Duration::from_secs(10), poll)
        .await
        .expect("the poll answered within 10 s of the task's commit")
        .unwrap();
    assert_eq!(reply.status, 200);
    let page = reply.json();
    assert_eq!(
        changes_of(&page),
        [("tasks", "t1", "created", "api")].map(|(k, n, c, o)| (
            k.to_string(),
            n.to_string(),
            c.to_string(),
            o.to_string()
        )),
        "{page}"
    );
}

/// Behind the retention floor of the change stream: 410 `too_old` with the
/// oldest kept position, as for events.
#[tokio::test]
async fn changes_behind_the_retention_floor_are_gone() {
    let doc = super::openapi::check::document();
    let h = host().await;
    for name in ["n1", "n2", "n3"] {
        put(h.addr, &format!("/v1/objects/nodes/{name}"), &[], "{}").await;
    }
    let policy = crate::store::retention::Policy {
        event_retention: Duration::ZERO,
        tenure_retention: 1,
        batch: 2,
    };
    let trimmed = h.store.inner.trim(CLUSTER, &policy).await.unwrap();
    assert_eq!(trimmed.changes, 2);
    let gone = get(h.addr, "/v1/changes").await;
    assert_eq!(gone.status, 410, "{}", gone.text());
    assert_eq!(gone.json()["code"], "too_old");
    assert!(gone.json()["oldest_kept"].as_u64().is_some());
    assert_documented(&doc, "GET", "/v1/changes", &gone);
    let oldest = gone.json()["oldest_kept"].as_u64().unwrap();
    let rest = get(h.addr, &format!("/v1/changes?after={}", oldest - 1))
        .await
        .json();
    assert_eq!(rest["items"].as_array().unwrap().len(), 1, "{rest}");
    assert_eq!(rest["items"][0]["name"], "n3");
}
