//! Fenced outbound HTTP through the runtime, against a local server that
//! records every arrival: deny by default, the allow-list, the fence on the
//! wire (never forgeable), refusal after loss, cancellation on abort, and
//! every bound as a typed error rather than a hang.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_host::fence::Fence;
use leasehold_host::outbound::{AllowList, HttpLimits, Outcome};
use leasehold_host::runtime::{
    CompiledController, EngineConfig, GuestError, GuestInstance, GuestLimits, Reconciled, Runtime,
};
use leasehold_host::store::{ObjectKey, Store};
use leasehold_tests::{MemoryBackends, TEST_WAIT, guest, until, within};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const CLUSTER: &str = "out";

/// Generous bound for "promptly": the goals are milliseconds, but a loaded
/// CI machine must not make the tests flaky.
const PROMPT: Duration = Duration::from_secs(2);

/// What the recording server does with a request once it has read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// 200 with a short body.
    Ok,
    /// Never answer; note when the client closes the connection.
    Hang,
    /// 200 with a chunked body that never ends.
    Endless,
}

#[derive(Debug, Clone)]
struct Arrival {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body_len: usize,
}

impl Arrival {
    fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// A local HTTP/1.1 server that records every request that reaches it.
struct Recorder {
    addr: std::net::SocketAddr,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    accepted: Arc<AtomicUsize>,
    /// Connections whose client closed them while the server held the reply.
    closed_while_held: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
    /// `http`, or `https` for [`Recorder::start_tls`].
    scheme: &'static str,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    /// A recorder that speaks TLS with `cert` (a certificate the test's CA
    /// issued for 127.0.0.1); its URLs are `https://`. Handshakes that
    /// fail are counted in `accepted` only: nothing of theirs arrives.
    async fn start_tls(cert: &leasehold_tests::pki::Issued) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let files = leasehold_host::tls::ServerFiles {
            cert: cert.cert.clone(),
            key: cert.key.clone(),
            client_ca: None,
        };
        let config = Arc::new(leasehold_host::tls::server_config(&files).expect("server tls"));
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed_while_held = Arc::new(AtomicUsize::new(0));
        let task = {
            let (arrivals, accepted, closed) = (
                arrivals.clone(),
                accepted.clone(),
                closed_while_held.clone(),
            );
            tokio::spawn(async move {
                let acceptor = tokio_rustls::TlsAcceptor::from(config);
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let (arrivals, closed, acceptor) =
                        (arrivals.clone(), closed.clone(), acceptor.clone());
                    tokio::spawn(async move {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            serve(stream, Reply::Ok, arrivals, closed).await;
                        }
                    });
                }
            })
        };
        Self {
            addr,
            arrivals,
            accepted,
            closed_while_held,
            task,
            scheme: "https",
        }
    }

    async fn start(reply: Reply) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed_while_held = Arc::new(AtomicUsize::new(0));
        let task = {
            let (arrivals, accepted, closed) = (
                arrivals.clone(),
                accepted.clone(),
                closed_while_held.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let (arrivals, closed) = (arrivals.clone(), closed.clone());
                    tokio::spawn(serve(stream, reply, arrivals, closed));
                }
            })
        };
        Self {
            addr,
            arrivals,
            accepted,
            closed_while_held,
            task,
            scheme: "http",
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    fn origin(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().expect("arrivals").clone()
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    reply: Reply,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    closed: Arc<AtomicUsize>,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body_len = buffer.len() - head_end;
    while body_len < length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body_len += n,
        }
    }
    arrivals.lock().expect("arrivals").push(Arrival {
        method,
        path,
        headers,
        body_len,
    });
    match reply {
        Reply::Ok => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await;
        }
        Reply::Hang => {
            // Hold the reply; a read of 0 bytes is the client's close.
            loop {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => {
                        closed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    Ok(_) => {}
                }
            }
        }
        Reply::Endless => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            let piece = format!("{:x}\r\n{}\r\n", 4096, "y".repeat(4096));
            while stream.write_all(piece.as_bytes()).await.is_ok() {}
        }
    }
}

fn runtime() -> Runtime {
    static RUNTIME: std::sync::OnceLock<Runtime> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            Runtime::new(&EngineConfig {
                max_guests: 16,
                memory_bytes: 64 << 20,
                pooling: true,
                cache_dir: None,
            })
            .expect("engine")
        })
        .clone()
}

/// The `caller` component, compiled once per test binary; each test runs
/// it as a controller of its own (own limits, own tallies).
fn caller(name: &str, allow: &[String], http: HttpLimits) -> CompiledController {
    static COMPILED: std::sync::OnceLock<CompiledController> = std::sync::OnceLock::new();
    let compiled = COMPILED.get_or_init(|| {
        runtime()
            .load(
                "caller",
                &guest("caller"),
                GuestLimits::default(),
                Vec::new(),
            )
            .expect("load caller")
    });
    let limits = GuestLimits {
        http_allow: Arc::new(AllowList::parse(allow).expect("allow list")),
        http,
        ..GuestLimits::default()
    };
    compiled.as_controller(name, limits)
}

struct Setup {
    backends: MemoryBackends,
    compiled: CompiledController,
    fence: Fence,
}

impl Setup {
    async fn new(lease: &str, allow: &[String], http: HttpLimits) -> Self {
        let backends = MemoryBackends::new();
        let compiled = caller(lease, allow, http);
        let fence = backends.grant(CLUSTER, lease, "host-a").await.fence;
        Self {
            backends,
            compiled,
            fence,
        }
    }

    async fn guest(&self) -> GuestInstance {
        self.compiled
            .instantiate(
                self.fence.clone(),
                self.backends.store.clone(),
                Default::default(),
                self.compiled.revocation(),
            )
            .await
            .expect("instantiate")
    }

    async fn call(&self, name: &str, call: Value) {
        self.backends
            .store
            .put(CLUSTER, &key("calls", name), &call.to_string(), None)
            .await
            .expect("seed call");
    }

    async fn result(&self, name: &str) -> Value {
        let object = self
            .backends
            .store
            .get(CLUSTER, &key("results", name))
            .await
            .expect("read result")
            .unwrap_or_else(|| panic!("no result for call {name}"));
        serde_json::from_str(&object.value).expect("result json")
    }

    fn count(&self, outcome: Outcome) -> u64 {
        self.compiled.outbound().get(outcome)
    }
}

fn key(kind: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind: kind.into(),
        name: name.into(),
    }
}

fn error_of(result: &Value) -> String {
    result["error"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn without_http_allow_a_guest_reaches_nothing() {
    let server = Recorder::start(Reply::Ok).await;
    let setup = Setup::new("no-allow", &[], HttpLimits::default()).await;
    let mut guest = setup.guest().await;
    setup.call("c", json!({"url": server.url("/x")})).await;
    assert_eq!(
        guest.reconcile("calls", "c").await.expect("reconcile"),
        Reconciled::Done
    );
    let result = setup.result("c").await;
    assert!(error_of(&result).starts_with("Denied"), "{result}");
    // Refused before any connection is opened: nothing ever reached it.
    assert_eq!(server.accepted(), 0);
    assert_eq!(setup.count(Outcome::Denied), 1);
    assert_eq!(setup.count(Outcome::Sent), 0);
}

#[tokio::test]
async fn http_allow_admits_only_what_it_lists() {
    let server = Recorder::start(Reply::Ok).await;
    let other = Recorder::start(Reply::Ok).await;
    let allow = vec![format!("{}/allowed/", server.origin())];
    let setup = Setup::new("allow", &allow, HttpLimits::default()).await;
    let mut guest = setup.guest().await;
    for (name, url) in [
        ("in", server.url("/allowed/x?y=1")),
        ("path", server.url("/other")),
        ("escape", server.url("/allowed/../admin")),
        ("port", other.url("/allowed/x")),
        (
            "https",
            server.url("/allowed/x").replace("http://", "https://"),
        ),
    ] {
        setup.call(name, json!({"url": url})).await;
        assert_eq!(
            guest.reconcile("calls", name).await.expect("reconcile"),
            Reconciled::Done
        );
    }
    let admitted = setup.result("in").await;
    assert_eq!(admitted["status"], 200, "{admitted}");
    for name in ["path", "escape", "port", "https"] {
        let result = setup.result(name).await;
        assert!(error_of(&result).starts_with("Denied"), "{name}: {result}");
    }
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 1, "{arrivals:?}");
    assert_eq!(arrivals[0].path, "/allowed/x?y=1");
    assert_eq!(other.accepted(), 0);
    assert_eq!(setup.count(Outcome::Denied), 4);
    assert_eq!(setup.count(Outcome::Sent), 1);
}

#[tokio::test]
async fn every_request_carries_the_true_fence_and_the_guest_cannot_forge_it() {
    let server = Recorder::start(Reply::Ok).await;
    let setup = Setup::new("fence", &[server.origin()], HttpLimits::default()).await;
    let mut guest = setup.guest().await;
    setup
        .call(
            "forged",
            json!({
                "url": server.url("/hooks"),
                "headers": [
                    ["Leasehold-Epoch", "999999"],
                    ["leasehold-lease", "other/lease"],
                    ["LEASEHOLD-HOLDER", "mallory"],
                    ["x-own", "kept"],
                ],
            }),
        )
        .await;
    guest.reconcile("calls", "forged").await.expect("reconcile");
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 1);
    let arrival = &arrivals[0];
    assert_eq!(arrival.method, "POST");
    let fence = &setup.fence;
    assert_eq!(
        arrival.header("leasehold-lease"),
        [format!("{CLUSTER}/fence")]
    );
    assert_eq!(
        arrival.header("leasehold-epoch"),
        [fence.epoch.0.to_string()]
    );
    assert_eq!(arrival.header("leasehold-holder"), [fence.holder.as_str()]);
    assert_eq!(arrival.header("x-own"), ["kept"]);
}

#[tokio::test]
async fn past_the_renew_deadline_nothing_is_sent_even_before_the_revocation() {
    let server = Recorder::start(Reply::Ok).await;
    let setup = Setup::new("late", &[server.origin()], HttpLimits::default()).await;
    let revocation = setup.compiled.revocation();
    let mut guest = setup
        .compiled
        .instantiate(
            setup.fence.clone(),
            setup.backends.store.clone(),
            Default::default(),
            revocation.clone(),
        )
        .await
        .expect("instantiate");
    // The deadline passed, but the owner's timer has not fired (a paused
    // process, a busy executor): the clock alone refuses.
    revocation.set_valid_until(Instant::now() - Duration::from_millis(1));
    assert!(!revocation.is_revoked());
    setup.call("c", json!({"url": server.url("/x")})).await;
    let reconciled = guest.reconcile("calls", "c").await.expect("reconcile");
    assert_eq!(reconciled, Reconciled::Fenced);
    assert_eq!(server.accepted(), 0);
    assert_eq!(setup.count(Outcome::RefusedAfterLoss), 1);
}

#[tokio::test]
async fn aborting_a_guest_blocked_in_a_call_drops_the_connection_without_waiting() {
    let server = Recorder::start(Reply::Hang).await;
    let setup = Setup::new("abort", &[server.origin()], HttpLimits::default()).await;
    let mut guest = setup.guest().await;
    let revocation = guest.revocation();
    setup.call("c", json!({"url": server.url("/slow")})).await;
    let call = tokio::spawn(async move {
        let result = guest.reconcile("calls", "c").await;
        // Keep the instance (its store and resource table) alive: the
        // connection must close because of the revocation, not because the
        // store was dropped.
        (result, guest)
    });
    until(TEST_WAIT, "the request to reach the server", || {
        !server.arrivals().is_empty()
    })
    .await;
    let revoked_at = Instant::now();
    revocation.revoke();
    let (result, guest) = within(PROMPT, "the aborted reconcile", call)
        .await
        .expect("join");
    assert!(
        matches!(result, Err(GuestError::Aborted { .. })),
        "{result:?}"
    );
    let aborted_in = revoked_at.elapsed();
    until(PROMPT, "the server to see the connection closed", || {
        server.closed_while_held.load(Ordering::SeqCst) == 1
    })
    .await;
    drop(guest);
    assert!(aborted_in < PROMPT, "abort took {aborted_in:?}");
    assert_eq!(setup.count(Outcome::Cancelled), 1);
}

#[tokio::test]
async fn a_receiver_that_never_answers_is_a_timeout_and_other_controllers_go_on() {
    let hanging = Recorder::start(Reply::Hang).await;
    let healthy = Recorder::start(Reply::Ok).await;
    let limits = HttpLimits {
        first_byte_timeout: Duration::from_millis(300),
        ..HttpLimits::default()
    };
    let stuck = Setup::new("stuck", &[hanging.origin()], limits).await;
    let fine = Setup::new("fine", &[healthy.origin()], HttpLimits::default()).await;
    let mut stuck_guest = stuck.guest().await;
    let mut fine_guest = fine.guest().await;
    stuck.call("c", json!({"url": hanging.url("/never")})).await;
    fine.call("c", json!({"url": healthy.url("/ok")})).await;
    let started = Instant::now();
    let (stuck_result, fine_result) = tokio::join!(
        stuck_guest.reconcile("calls", "c"),
        fine_guest.reconcile("calls", "c")
    );
    assert_eq!(stuck_result.expect("stuck reconcile"), Reconciled::Done);
    assert_eq!(fine_result.expect("fine reconcile"), Reconciled::Done);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let result = stuck.result("c").await;
    assert!(error_of(&result).starts_with("Timeout"), "{result}");
    assert_eq!(fine.result("c").await["status"], 200);
    assert_eq!(stuck.count(Outcome::TimedOut), 1);
}

#[tokio::test]
async fn an_endless_body_is_cut_at_the_bound() {
    let server = Recorder::start(Reply::Endless).await;
    let limits = HttpLimits {
        response_body_bytes: 64 * 1024,
        ..HttpLimits::default()
    };
    let setup = Setup::new("endless", &[server.origin()], limits).await;
    let mut guest = setup.guest().await;
    setup.call("c", json!({"url": server.url("/stream")})).await;
    let reconciled = within(TEST_WAIT, "the endless body", guest.reconcile("calls", "c"))
        .await
        .expect("reconcile");
    assert_eq!(reconciled, Reconciled::Done);
    let result = setup.result("c").await;
    assert!(error_of(&result).starts_with("BodyTooLarge"), "{result}");
}

#[tokio::test]
async fn an_oversized_request_body_is_refused() {
    let server = Recorder::start(Reply::Ok).await;
    let limits = HttpLimits {
        request_body_bytes: 1024,
        ..HttpLimits::default()
    };
    let setup = Setup::new("big", &[server.origin()], limits).await;
    let mut guest = setup.guest().await;
    setup
        .call(
            "c",
            json!({"url": server.url("/up"), "body_bytes": 64 * 1024}),
        )
        .await;
    guest.reconcile("calls", "c").await.expect("reconcile");
    let result = setup.result("c").await;
    assert!(error_of(&result).starts_with("BodyTooLarge"), "{result}");
    // Whatever part of the body left before the bound, the server never
    // received a whole request.
    assert!(
        server.arrivals().iter().all(|a| a.body_len < 64 * 1024),
        "{:?}",
        server.arrivals()
    );
}

#[tokio::test]
async fn requests_per_reconcile_are_bounded_and_the_budget_is_per_call() {
    let server = Recorder::start(Reply::Ok).await;
    let limits = HttpLimits {
        requests_per_reconcile: 5,
        ..HttpLimits::default()
    };
    let setup = Setup::new("loop", &[server.origin()], limits).await;
    let mut guest = setup.guest().await;
    setup
        .call("c", json!({"url": server.url("/n"), "repeat": 8}))
        .await;
    guest.reconcile("calls", "c").await.expect("reconcile");
    let result = setup.result("c").await;
    assert_eq!(result["ok"], 5, "{result}");
    assert!(error_of(&result).starts_with("Limit"), "{result}");
    // The next reconcile has a fresh budget.
    guest.reconcile("calls", "c").await.expect("reconcile");
    assert_eq!(setup.result("c").await["ok"], 5);
    assert_eq!(server.arrivals().len(), 10);
    assert_eq!(setup.count(Outcome::Limited), 2);
}

/// The caller compiled as its own controller with `limits` (its `http_ca`
/// is read when it is compiled, as a host does for a configured one).
fn caller_compiled(limits: GuestLimits) -> CompiledController {
    runtime()
        .load("caller", &guest("caller"), limits, Vec::new())
        .expect("load caller")
}

#[tokio::test]
async fn http_ca_lets_a_guest_reach_a_service_of_a_private_ca_with_the_fence() {
    let dir = leasehold_tests::TempDir::new();
    let ca = leasehold_tests::pki::Pki::new(dir.path(), "private");
    let server = Recorder::start_tls(&ca.server("service", &["127.0.0.1"])).await;
    let limits = |http_ca: Option<std::path::PathBuf>| GuestLimits {
        http_allow: Arc::new(AllowList::parse(&[server.origin()]).expect("allow list")),
        http_ca,
        ..GuestLimits::default()
    };

    // Trusting the private CA: the request arrives, fenced.
    let backends = MemoryBackends::new();
    let trusting = caller_compiled(limits(Some(ca.ca())));
    let fence = backends.grant(CLUSTER, "trusting", "host-a").await.fence;
    let mut guest = trusting
        .instantiate(
            fence.clone(),
            backends.store.clone(),
            Default::default(),
            trusting.revocation(),
        )
        .await
        .expect("instantiate");
    let call = json!({"url": server.url("/hooks/x"), "method": "PUT", "body_bytes": 5});
    backends
        .store
        .put(CLUSTER, &key("calls", "one"), &call.to_string(), None)
        .await
        .expect("seed call");
    guest.reconcile("calls", "one").await.expect("reconcile");
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 1, "{arrivals:?}");
    assert_eq!(arrivals[0].method, "PUT");
    assert_eq!(
        arrivals[0].header("leasehold-epoch"),
        [fence.epoch.0.to_string()]
    );
    assert_eq!(
        arrivals[0].header("leasehold-lease"),
        [format!("{CLUSTER}/trusting")]
    );
    assert_eq!(arrivals[0].body_len, 5);
    assert_eq!(trusting.outbound().get(Outcome::Sent), 1);

    // With the public roots only: the handshake fails before any request
    // byte, and the guest sees the TLS certificate error.
    let public = caller_compiled(limits(None));
    let fence = backends.grant(CLUSTER, "public", "host-a").await.fence;
    let mut guest = public
        .instantiate(
            fence,
            backends.store.clone(),
            Default::default(),
            public.revocation(),
        )
        .await
        .expect("instantiate");
    backends
        .store
        .put(CLUSTER, &key("calls", "two"), &call.to_string(), None)
        .await
        .expect("seed call");
    guest.reconcile("calls", "two").await.expect("reconcile");
    let object = backends
        .store
        .get(CLUSTER, &key("results", "two"))
        .await
        .expect("read result")
        .expect("a result");
    let result: Value = serde_json::from_str(&object.value).expect("result json");
    let error = error_of(&result);
    assert!(
        error.contains("TLS-certificate-error") || error.contains("TlsCertificateError"),
        "{result}"
    );
    assert_eq!(server.arrivals().len(), 1, "nothing more arrived");
    assert_eq!(public.outbound().get(Outcome::Error), 1);
}

#[tokio::test]
async fn an_unreadable_http_ca_refuses_the_controller_naming_the_file() {
    let refused = runtime().load(
        "caller",
        &guest("caller"),
        GuestLimits {
            http_ca: Some("/nonexistent/ca.pem".into()),
            ..GuestLimits::default()
        },
        Vec::new(),
    );
    let error = refused.err().expect("refused").to_string();
    assert!(error.contains("http_ca /nonexistent/ca.pem"), "{error}");
}

/// A server that keeps every request as the bytes that arrived (head,
/// body, a chunked body's trailers), answers 200, and closes.
struct RawRecorder {
    addr: std::net::SocketAddr,
    raw: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawRecorder {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let raw = Arc::new(Mutex::new(Vec::new()));
        let kept = raw.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let bytes = read_whole_request(&mut stream).await;
                    kept.lock()
                        .expect("raw")
                        .push(String::from_utf8_lossy(&bytes).into_owned());
                    let _ = stream
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                });
            }
        });
        Self { addr, raw, task }
    }

    fn requests(&self) -> Vec<String> {
        self.raw.lock().expect("raw").clone()
    }
}

/// Read one request to its end: the head, then a body by its length, or
/// a chunked body through its last chunk and trailers.
async fn read_whole_request(stream: &mut TcpStream) -> Vec<u8> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let complete = |buffer: &[u8]| -> bool {
        let Some(head_end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
            return false;
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
        let body = &buffer[head_end + 4..];
        if head.contains("transfer-encoding: chunked") {
            // The last chunk (`0\r\n`), then trailer lines, then an empty line.
            let text = String::from_utf8_lossy(body);
            text.starts_with("0\r\n") && text.ends_with("\r\n\r\n")
                || text.contains("\r\n0\r\n") && text.ends_with("\r\n\r\n")
        } else {
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            body.len() >= length
        }
    };
    while !complete(&buffer) {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    buffer
}

/// A guest that forges the fence after the head (`Trailer:` announcing
/// the fence names, trailers under them) or under look-alike names
/// (`leasehold_epoch`, read as `Leasehold-Epoch` by WSGI and some
/// proxies) reaches no receiver with the forged values: look-alike headers
/// and trailers are dropped, and a request whose `Trailer` header
/// announces a fence name is refused before a byte leaves.
#[tokio::test]
async fn forged_fence_trailers_and_lookalike_headers_never_reach_the_receiver() {
    let server = RawRecorder::start().await;
    let origin = format!("http://{}", server.addr);
    let setup = Setup::new(
        "forger",
        std::slice::from_ref(&origin),
        HttpLimits::default(),
    )
    .await;
    let mut guest = setup.guest().await;

    // Look-alike names in the head and in trailers.
    setup
        .call(
            "lookalike",
            json!({
                "url": format!("{origin}/hooks"),
                "headers": [
                    ["leasehold_epoch", "999"],
                    ["LEASEHOLD_LEASE", "evil/lease"],
                    ["Trailer", "x-checksum"]
                ],
                "raw_trailers": [
                    ["leasehold-epoch", "998"],
                    ["Leasehold_Holder", "mallory"],
                    ["x-checksum", "kept"]
                ],
            }),
        )
        .await;
    guest
        .reconcile("calls", "lookalike")
        .await
        .expect("reconcile");
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let raw = &requests[0];
    for forged in ["999", "998", "evil/lease", "mallory"] {
        assert!(
            !raw.contains(forged),
            "{forged} reached the receiver:\n{raw}"
        );
    }
    let lowered = raw.to_ascii_lowercase();
    assert!(
        lowered.contains(&format!("leasehold-epoch: {}", setup.fence.epoch.0)),
        "{raw}"
    );
    assert!(
        lowered.contains("x-checksum: kept"),
        "other trailers pass: {raw}"
    );
    assert_eq!(lowered.matches("leasehold-epoch").count(), 1, "{raw}");

    // A Trailer header announcing a fence name: refused, nothing sent.
    setup
        .call(
            "announced",
            json!({
                "url": format!("{origin}/hooks"),
                "headers": [["Trailer", "x-sum, Leasehold_Epoch"]],
                "raw_trailers": [["leasehold-epoch", "997"]],
            }),
        )
        .await;
    guest
        .reconcile("calls", "announced")
        .await
        .expect("reconcile");
    assert!(
        error_of(&setup.result("announced").await).contains("Denied"),
        "{}",
        setup.result("announced").await
    );
    assert_eq!(server.requests().len(), 1, "nothing more arrived");
    assert_eq!(setup.count(Outcome::Denied), 1);
}

/// Paths that some server or proxy resolves to a parent directory, and a
/// port past 65535, are refused with nothing sent, whatever `http_allow`
/// admits.
#[tokio::test]
async fn traversal_paths_and_wrapping_ports_are_refused_with_nothing_sent() {
    let server = Recorder::start(Reply::Ok).await;
    let hooks = server.url("/hooks");
    let setup = Setup::new("paths", std::slice::from_ref(&hooks), HttpLimits::default()).await;
    let mut guest = setup.guest().await;
    let forms = [
        "/hooks/..;/admin",
        "/hooks/%252e%252e/admin",
        "/hooks/.%252e/admin",
        "/hooks/%c0%ae%c0%ae/admin",
        "/hooks/..%00/admin",
        "/hooks/%u002e%u002e/admin",
        "/hooks/.../admin",
    ];
    for (i, path) in forms.iter().enumerate() {
        let name = format!("p{i}");
        setup.call(&name, json!({"url": server.url(path)})).await;
        guest.reconcile("calls", &name).await.expect("reconcile");
        let error = error_of(&setup.result(&name).await);
        assert!(error.starts_with("Denied"), "{path}: {error}");
    }
    // 65616 is 80 modulo 65536: it must not pass as port 80.
    let wrapped = "http://127.0.0.1:65616/hooks/x";
    let setup_80 = Setup::new(
        "ports",
        &["http://127.0.0.1:80/hooks".to_string()],
        HttpLimits::default(),
    )
    .await;
    let mut guest_80 = setup_80.guest().await;
    // Raw: the SDK refuses such a URL itself; the host must too.
    setup_80
        .call("wrap", json!({"url": wrapped, "raw_trailers": []}))
        .await;
    guest_80
        .reconcile("calls", "wrap")
        .await
        .expect("reconcile");
    let error = error_of(&setup_80.result("wrap").await);
    assert!(error.contains("HttpRequestDenied"), "{error}");
    assert_eq!(server.accepted(), 0, "nothing reached the server");
    // A plain path under the prefix still goes.
    setup
        .call("fine", json!({"url": server.url("/hooks/x.y/z")}))
        .await;
    guest.reconcile("calls", "fine").await.expect("reconcile");
    assert_eq!(setup.result("fine").await["ok"], 1);
}

/// `Forwarded` and `X-Forwarded-*` (which a receiver may trust for who is
/// calling) are refused unless the operator lists them.
#[tokio::test]
async fn forwarding_headers_are_refused_unless_listed() {
    let server = Recorder::start(Reply::Ok).await;
    let setup = Setup::new("fwd", &[server.origin()], HttpLimits::default()).await;
    let mut guest = setup.guest().await;
    for (name, header) in [
        ("a", "Forwarded"),
        ("b", "X-Forwarded-For"),
        ("c", "x_real_ip"),
    ] {
        setup
            .call(
                name,
                json!({"url": server.url("/x"), "headers": [[header, "10.0.0.1"]]}),
            )
            .await;
        guest.reconcile("calls", name).await.expect("reconcile");
        assert!(
            error_of(&setup.result(name).await).starts_with("Denied"),
            "{header}"
        );
    }
    assert_eq!(server.accepted(), 0);

    // Listed by the operator: sent.
    let backends = MemoryBackends::new();
    let limits = GuestLimits {
        http_allow: Arc::new(AllowList::parse(&[server.origin()]).unwrap()),
        http_forwarded_headers: Arc::new(vec!["x-forwarded-for".to_string()]),
        ..GuestLimits::default()
    };
    let compiled =
        caller("fwd-listed", &[server.origin()], HttpLimits::default()).with_limits(limits);
    let fence = backends.grant(CLUSTER, "fwd-listed", "host-a").await.fence;
    let mut listed = compiled
        .instantiate(
            fence,
            backends.store.clone(),
            Default::default(),
            compiled.revocation(),
        )
        .await
        .expect("instantiate");
    backends
        .store
        .put(
            CLUSTER,
            &key("calls", "ok"),
            &json!({"url": server.url("/x"), "headers": [["X-Forwarded-For", "10.0.0.1"]]})
                .to_string(),
            None,
        )
        .await
        .unwrap();
    listed.reconcile("calls", "ok").await.expect("reconcile");
    assert_eq!(server.arrivals().len(), 1);
    assert_eq!(server.arrivals()[0].header("x-forwarded-for"), ["10.0.0.1"]);
}

/// A reply that drips a byte at a time, each within the between-bytes
/// bound, ends at the request's total bound: the guest sees a timeout,
/// the request counts as timed out, and the host does not send it again.
#[tokio::test]
async fn a_dripping_reply_ends_at_the_requests_total_bound() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    let (finished_tx, mut finished) = tokio::sync::mpsc::unbounded_channel::<()>();
    let server = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let finished = finished_tx.clone();
            tokio::spawn(async move {
                let _ = read_whole_request(&mut stream).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n")
                    .await;
                // One byte every 300 ms, under the 2 s between-bytes bound:
                // only the total bound stops it. The write fails once the
                // client let go.
                let mut ticker = tokio::time::interval(Duration::from_millis(300));
                for _ in 0..100 {
                    ticker.tick().await;
                    if stream.write_all(b"x").await.is_err() {
                        break;
                    }
                }
                let _ = finished.send(());
            });
        }
    });
    let limits = HttpLimits {
        between_bytes_timeout: Duration::from_secs(2),
        request_total: Duration::from_secs(2),
        ..HttpLimits::default()
    };
    let setup = Setup::new("drip", &[format!("http://{addr}")], limits).await;
    let mut guest = setup.guest().await;
    setup
        .call(
            "slow",
            json!({"url": format!("http://{addr}/drip"), "method": "GET"}),
        )
        .await;
    let started = Instant::now();
    guest.reconcile("calls", "slow").await.expect("reconcile");
    let took = started.elapsed();
    let error = error_of(&setup.result("slow").await);
    assert!(error.starts_with("Timeout"), "{error}");
    assert!(took < Duration::from_secs(6), "ended after {took:?}");
    assert!(took >= Duration::from_millis(1500), "ended after {took:?}");
    assert_eq!(setup.count(Outcome::TimedOut), 1);
    // The server saw its client go, and one request only.
    within(
        PROMPT * 5,
        "the server noticed the client left",
        finished.recv(),
    )
    .await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    server.abort();
}
