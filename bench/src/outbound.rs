//! Fenced outbound HTTP (issue 15): what a guest's request through the
//! host's `wasi:http/outgoing-handler` costs next to the same request made
//! natively, how fast a request is refused once the tenure's lease is lost,
//! and how fast a guest blocked in an outbound call is aborted.
//!
//! All three use the `caller` fixture (`reconcile("calls", NAME)` sends the
//! request object `calls/NAME` describes, `repeat` times, through the SDK's
//! `leasehold_guest::http`; with `"record": false` it writes nothing back)
//! on the memory backends, and local servers on the loopback interface. The
//! runtime is multi-threaded with 2 workers, as the host runs; the servers
//! share it with the guest and the native client alike.
//!
//! 1. **Guest call vs native call.** The request is a `POST` of
//!    [`BODY_BYTES`] bytes to a minimal hyper HTTP/1.1 server answering 200
//!    with a short body: once a server that keeps the connection open after
//!    answering (hyper's default, as most servers do; the client then
//!    closes it), held to the goal, and once a server that closes each
//!    connection after its answer (`connection: close`), reported beside
//!    it because the two sides do not gain alike from it. Both sides open
//!    a new TCP connection per request:
//!    the host's wasi-http client does (`default_send_request` connects,
//!    runs `hyper::client::conn::http1::handshake`, sends one request), so
//!    the native side does the same — a fresh `TcpStream`, an HTTP/1.1
//!    handshake and a spawned connection driver per request, the three
//!    fence headers the host stamps, then the whole response body read —
//!    and neither side reuses connections. A pooled native client would be
//!    faster, but would measure connection reuse, not the host's path.
//!    The guest figure is per call: one reconcile sending [`CALLS`]
//!    requests one after the other, its time divided by [`CALLS`], so the
//!    reconcile's own work (entering the guest, reading its object) is
//!    spread over the calls rather than charged to one; that share is
//!    printed (the same reconcile sending no request). The native figure
//!    is [`CALLS`] requests timed together, divided the same way. A third
//!    side, the native side again, is the A/A control; the three take turns
//!    round by round (rotating which goes first), grouped into repeats, each
//!    repeat giving its own ratio of medians; the goal is held to the
//!    median ratio.
//! 2. **Refusal after loss.** The tenure's renew deadline is set to the
//!    present (`Revocation::set_valid_until(now)`: the lease no longer
//!    counts as held, but the guest is not aborted, as between the deadline
//!    passing and the owner's timer revoking) and a reconcile that reads its
//!    object and sends one request is timed from that instant until it
//!    returns; the request is refused before anything leaves the host and
//!    the guest stops with `fenced`. The hook that refuses is not public, so
//!    the figure is the whole reconcile: an upper bound of the refusal. The
//!    same reconcile without the request, interleaved run by run, is the
//!    baseline. Between runs the deadline is moved back into the future.
//! 3. **Abort while blocked in a call.** A raw TCP server reads the request
//!    and never answers; once the whole request (head and body) has reached
//!    it, the benchmark revokes and stops the clock when the task owning the
//!    instance has seen the reconcile return and dropped the instance (Store
//!    included), as [`crate::abort`] times the blocked commit. The
//!    reconcile returns `Aborted`, or, in the odd run where the guest had
//!    not yet entered its wait for the response (it sends the body, then
//!    blocks), `fenced` of its own: the request's cancellation reached it
//!    within the poll that spanned the revoke. Either way the guest has
//!    stopped; the part counts both. The server also notes when it reads
//!    the end of the connection, which says whether (and how soon) the
//!    host dropped the connection of the abandoned request.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use leasehold_host::fence::Fence;
use leasehold_host::outbound::{AllowList, Outcome, headers};
use leasehold_host::runtime::{
    CommitCounters, CompiledController, GuestError, GuestInstance, GuestLimits, Reconciled,
    Revocation,
};
use leasehold_host::store::Store;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::Scale;
use crate::report::{Comparison, Report, Samples, duration, median, ratios};
use crate::support::{self, BENCH_LEASE_TTL, MemoryBackends, key};

const PART: &str = "outbound";
const CLUSTER: &str = "bench";
const CONTROLLER: &str = "caller";

/// Requests per reconcile (guest) or per timed block (native) in the
/// guest-vs-native comparison; within the host's per-reconcile bound.
const CALLS: u32 = 20;
/// The request body: a small effect, as a webhook or an API call carries.
const BODY_BYTES: usize = 64;
/// The server's answer.
const REPLY: &[u8] = b"{\"ok\":true}";
/// Repeats (each one ratio) and rounds of every side per repeat.
const REPEATS: usize = 11;
const QUICK_REPEATS: usize = 3;
const ROUNDS: usize = 24;
/// A multiple of the three sides, so each takes every turn equally often.
const QUICK_ROUNDS: usize = 3;
/// Refused reconciles (and as many baselines), after a warm-up.
const REFUSALS: usize = 2000;
const QUICK_REFUSALS: usize = 100;
/// Aborts of a blocked guest, after a warm-up.
const ABORTS: usize = 1000;
const QUICK_ABORTS: usize = 50;
const WARMUP: usize = 20;
/// Longest wait for a request to reach a server: only a broken host path
/// takes it.
const ARRIVAL_WAIT: Duration = Duration::from_secs(5);
/// Longest wait, after an abort, for the holding server to see the
/// connection closed; after [`CLOSE_MISSES`] runs without, the part stops
/// waiting (and says so) rather than spend the bound on every run.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
const CLOSE_MISSES: usize = 3;

const GOAL_RATIO: f64 = 1.2;
/// The goal is judged only when the A/A control's median lies this close
/// to 1.00.
const NOISE: f64 = 0.05;
const GOAL_REFUSAL: Duration = Duration::from_millis(1);
const GOAL_ABORT: Duration = Duration::from_millis(1);

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let answering = AnsweringServer::start(true).await?;
    let closing = AnsweringServer::start(false).await?;
    let holding = HoldingServer::start().await?;
    let allow = AllowList::parse(&[answering.origin(), closing.origin(), holding.origin()])
        .map_err(|e| anyhow!("http_allow for the benchmark servers: {e}"))?;
    let runtime = support::runtime(true)?;
    let limits = GuestLimits {
        http_allow: Arc::new(allow),
        ..GuestLimits::default()
    };
    let compiled = runtime
        .load(CONTROLLER, &support::guest("caller")?, limits, Vec::new())
        .map_err(|e| anyhow!("{e}"))?;
    let backends = MemoryBackends::new();
    let fence = support::grant(backends.authority.as_ref(), CLUSTER, CONTROLLER).await?;
    let store: Arc<dyn Store> = backends.store.clone();
    let call = |url: &str, repeat: u32| {
        serde_json::json!({
            "url": url,
            "method": "POST",
            "body_bytes": BODY_BYTES,
            "repeat": repeat,
            "record": false,
        })
        .to_string()
    };
    for (name, value) in [
        ("block", call(&answering.url(), CALLS)),
        ("block-closing", call(&closing.url(), CALLS)),
        ("none", call(&answering.url(), 0)),
        ("one", call(&answering.url(), 1)),
        ("held", call(&holding.url(), 1)),
    ] {
        store
            .put(CLUSTER, &key("calls", name), &value, None)
            .await
            .map_err(|e| anyhow!("putting calls/{name}: {e}"))?;
    }
    let setup = Setup {
        compiled,
        store,
        fence,
    };
    guest_vs_native(scale, report, &setup, &answering, "block").await?;
    guest_vs_native(scale, report, &setup, &closing, "block-closing").await?;
    refusal(scale, report, &setup, &answering).await?;
    abort_blocked(scale, report, &setup, holding).await
}

/// What every measurement instantiates the guest from.
struct Setup {
    compiled: CompiledController,
    store: Arc<dyn Store>,
    fence: Fence,
}

impl Setup {
    async fn instance(&self, revocation: Revocation) -> Result<GuestInstance> {
        self.compiled
            .instantiate(
                self.fence.clone(),
                self.store.clone(),
                Arc::new(CommitCounters::default()),
                revocation,
            )
            .await
            .map_err(|e| anyhow!("{e}"))
    }

    fn sent(&self) -> u64 {
        self.compiled.outbound().get(Outcome::Sent)
    }
}

/// The sides of the guest-vs-native comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Guest,
    Native,
    /// The native side again: the A/A control.
    Control,
}

const SIDES: [Side; 3] = [Side::Guest, Side::Native, Side::Control];

/// One comparison against `server`; the guest reconciles `calls/object`.
/// The goal is held to the keep-alive server, the server that closes each
/// connection is reported beside it.
async fn guest_vs_native(
    scale: Scale,
    report: &mut Report,
    setup: &Setup,
    server: &AnsweringServer,
    object: &str,
) -> Result<()> {
    let label = if server.keep_alive {
        "keep-alive server"
    } else {
        "server closing each connection"
    };
    let repeats = scale.pick(REPEATS, QUICK_REPEATS);
    let rounds = scale.pick(ROUNDS, QUICK_ROUNDS);
    let mut guest = setup.instance(setup.compiled.revocation()).await?;
    let client = NativeClient::new(server, &setup.fence);
    // Per side: every round's per-call time, and each repeat's median.
    let mut pooled: [Samples; 3] = Default::default();
    let mut medians: [Vec<f64>; 3] = Default::default();
    // The same reconcile sending no request.
    let mut empty = Samples::default();
    // Repeat 0 is the warm-up, not counted.
    for repeat in 0..=repeats {
        let mut this: [Samples; 3] = Default::default();
        for r in 0..rounds {
            for i in 0..SIDES.len() {
                let side = SIDES[(repeat * rounds + r + i) % SIDES.len()];
                let per_call = match side {
                    Side::Guest => {
                        let served = server.served();
                        let sent = setup.sent();
                        let started = Instant::now();
                        let reply = guest
                            .reconcile("calls", object)
                            .await
                            .map_err(|e| anyhow!("{e}"))?;
                        let elapsed = started.elapsed();
                        ensure!(reply == Reconciled::Done, "guest reconcile: {reply:?}");
                        // With `record: false` the guest reports no error: a
                        // short count means a request failed.
                        ensure!(
                            server.served() - served == u64::from(CALLS)
                                && setup.sent() - sent == u64::from(CALLS),
                            "the guest's {CALLS} requests were not all answered \
                             (server answered {}, host sent {})",
                            server.served() - served,
                            setup.sent() - sent
                        );
                        let started = Instant::now();
                        let reply = guest
                            .reconcile("calls", "none")
                            .await
                            .map_err(|e| anyhow!("{e}"))?;
                        if repeat > 0 {
                            empty.push(started.elapsed());
                        }
                        ensure!(reply == Reconciled::Done, "guest reconcile: {reply:?}");
                        elapsed / CALLS
                    }
                    Side::Native | Side::Control => {
                        let started = Instant::now();
                        for _ in 0..CALLS {
                            client.call().await?;
                        }
                        started.elapsed() / CALLS
                    }
                };
                this[side as usize].push(per_call);
            }
        }
        if repeat == 0 {
            continue;
        }
        for side in SIDES {
            let samples = &mut this[side as usize];
            medians[side as usize].push(samples.p50().as_secs_f64());
            for value in samples.values() {
                pooled[side as usize].push(*value);
            }
        }
    }
    let [guest_medians, native_medians, control_medians] = &medians;
    let compared = Comparison::new(
        &ratios(guest_medians, native_medians),
        &ratios(control_medians, native_medians),
    )
    .ok_or_else(|| anyhow!("no repeat measured"))?;
    let [guest_all, native_all, _] = &mut pooled;
    report.info(
        PART,
        format!(
            "{label}: guest request through the host, per call (a reconcile of {CALLS} POSTs / {CALLS}; new connection each)"
        ),
        guest_all.summary(),
    );
    report.info(
        PART,
        format!(
            "{label}: native hyper request, per call ({CALLS} POSTs / {CALLS}; new connection each)"
        ),
        native_all.summary(),
    );
    // Paired like the ratios: each repeat's difference, then their median.
    let differences: Vec<f64> = guest_medians
        .iter()
        .zip(native_medians)
        .map(|(guest, native)| guest - native)
        .collect();
    let extra = median(&differences);
    let measure = format!(
        "{label}: guest / native per-call time, ratio of each repeat's medians ({repeats} interleaved repeats)"
    );
    let result = format!(
        "{}; guest {} by {} per call (median of each repeat's difference)",
        compared.ab.ratios(),
        if extra >= 0.0 { "slower" } else { "faster" },
        duration(Duration::from_secs_f64(extra.abs())),
    );
    if server.keep_alive {
        report.compared_goal(
            PART,
            measure,
            result,
            &format!("<= {GOAL_RATIO}x (median)"),
            compared.ab.median <= GOAL_RATIO,
            (&compared, NOISE),
        );
    } else {
        report.info(PART, measure, result);
    }
    report.info(
        PART,
        format!("{label}: A/A control, native again / native"),
        compared.control(),
    );
    if !server.keep_alive {
        return Ok(());
    }
    let empty_p50 = empty.p50();
    report.info(
        PART,
        "the guest figure's share of the reconcile itself (the same reconcile sending no request)",
        format!(
            "{}; {} per call",
            empty.summary(),
            duration(empty_p50 / CALLS)
        ),
    );
    Ok(())
}

async fn refusal(
    scale: Scale,
    report: &mut Report,
    setup: &Setup,
    server: &AnsweringServer,
) -> Result<()> {
    let runs = scale.pick(REFUSALS, QUICK_REFUSALS);
    let revocation = setup.compiled.revocation();
    let mut guest = setup.instance(revocation.clone()).await?;
    let refused_before = setup.compiled.outbound().get(Outcome::RefusedAfterLoss);
    let served_before = server.served();
    let mut refused = Samples::with_capacity(runs);
    let mut baseline = Samples::with_capacity(runs);
    for i in 0..WARMUP + runs {
        // Alternate which goes first, so drift hits both alike.
        for refuse in [i % 2 == 0, i % 2 != 0] {
            if refuse {
                let started = Instant::now();
                revocation.set_valid_until(started);
                let reply = guest
                    .reconcile("calls", "one")
                    .await
                    .map_err(|e| anyhow!("{e}"))?;
                let elapsed = started.elapsed();
                revocation.set_valid_until(Instant::now() + BENCH_LEASE_TTL);
                ensure!(
                    reply == Reconciled::Fenced,
                    "a request after the renew deadline was not refused as fenced: {reply:?}"
                );
                if i >= WARMUP {
                    refused.push(elapsed);
                }
            } else {
                let started = Instant::now();
                let reply = guest
                    .reconcile("calls", "none")
                    .await
                    .map_err(|e| anyhow!("{e}"))?;
                let elapsed = started.elapsed();
                ensure!(reply == Reconciled::Done, "baseline reconcile: {reply:?}");
                if i >= WARMUP {
                    baseline.push(elapsed);
                }
            }
        }
    }
    let total = (WARMUP + runs) as u64;
    let counted = setup.compiled.outbound().get(Outcome::RefusedAfterLoss) - refused_before;
    let reached = server.served() - served_before;
    ensure!(
        counted == total && reached == 0,
        "of {total} requests after the renew deadline the host refused {counted} and {reached} reached the server"
    );
    let p99 = refused.p99();
    let max = refused.max();
    report.goal(
        PART,
        "renew deadline passed -> the guest holds the refusal: one reconcile reading its object and sending one request, refused unsent (upper bound)",
        refused.summary(),
        "p99 <= 1 ms",
        p99 <= GOAL_REFUSAL,
    );
    report.info(PART, "refusal: worst run", duration(max));
    let difference = refused.p50().saturating_sub(baseline.p50());
    report.info(
        PART,
        "refusal: the same reconcile sending no request (baseline); p50 difference",
        format!("{}; {}", baseline.summary(), duration(difference)),
    );
    report.info(
        PART,
        "refusal: requests that left the host",
        format!("0 of {total} (the host counted {counted} refused_after_loss)"),
    );
    Ok(())
}

async fn abort_blocked(
    scale: Scale,
    report: &mut Report,
    setup: &Setup,
    mut server: HoldingServer,
) -> Result<()> {
    let runs = scale.pick(ABORTS, QUICK_ABORTS);
    let mut total = Samples::with_capacity(runs);
    // Revoke -> the reconcile returned; -> the instance dropped; -> the
    // revoking task saw the task end.
    let mut phases: [Samples; 3] = Default::default();
    let mut closed = Samples::with_capacity(runs);
    let mut close_misses = 0;
    let mut close_checked = 0;
    let mut outcomes = StopOutcomes::default();
    for i in 0..WARMUP + runs {
        let revocation = setup.compiled.revocation();
        let mut guest = setup.instance(revocation.clone()).await?;
        let task = tokio::spawn(async move {
            let result = guest.reconcile("calls", "held").await;
            let stopped = Instant::now();
            // The instance (and its Store) is gone before the task ends.
            drop(guest);
            (result, stopped, Instant::now())
        });
        let connection = tokio::time::timeout(ARRIVAL_WAIT, server.arrivals.recv())
            .await
            .map_err(|_| {
                anyhow!("the guest's request did not reach the holding server in {ARRIVAL_WAIT:?}")
            })?
            .ok_or_else(|| anyhow!("the holding server stopped"))?;
        let started = Instant::now();
        revocation.revoke();
        let (result, stopped, dropped) = task.await?;
        let joined = Instant::now();
        match result {
            Err(GuestError::Aborted { .. }) => outcomes.aborted += 1,
            Ok(Reconciled::Fenced) => outcomes.fenced += 1,
            other => bail!("the guest blocked in an outbound call was not stopped: {other:?}"),
        }
        if i >= WARMUP {
            total.push(joined - started);
            phases[0].push(stopped.saturating_duration_since(started));
            phases[1].push(dropped - stopped);
            phases[2].push(joined.saturating_duration_since(dropped));
        }
        if close_misses < CLOSE_MISSES {
            close_checked += 1;
            match server.closed(connection, CLOSE_WAIT).await {
                Some(at) => closed.push(at.saturating_duration_since(started)),
                None => close_misses += 1,
            }
        }
    }
    let p99 = total.p99();
    let max = total.max();
    report.goal(
        PART,
        "guest blocked in an outbound call (the server holds the reply): revoke -> Store dropped",
        total.summary(),
        "p99 <= 1 ms",
        p99 <= GOAL_ABORT,
    );
    report.info(PART, "blocked in a call: worst run", duration(max));
    let [stop, drop_, join] = &mut phases;
    report.info(
        PART,
        "blocked in a call: where the time goes (p50 / p99)",
        format!(
            "guest stopped {} / {}, Store dropped {} / {}, join seen {} / {}",
            duration(stop.p50()),
            duration(stop.p99()),
            duration(drop_.p50()),
            duration(drop_.p99()),
            duration(join.p50()),
            duration(join.p99()),
        ),
    );
    report.info(
        PART,
        "blocked in a call: how the reconcile ended (every run, warm-up included)",
        format!(
            "Aborted in {} of {}; returned fenced in {} (the guest had not yet blocked: the \
             cancelled request's error reached it in the poll that spanned the revoke)",
            outcomes.aborted,
            outcomes.aborted + outcomes.fenced,
            outcomes.fenced
        ),
    );
    let seen = closed.len();
    let result = if close_misses >= CLOSE_MISSES {
        format!(
            "**not closed** within {} in {close_misses} of {close_checked} runs (stopped checking); revoke -> EOF where seen: {}",
            duration(CLOSE_WAIT),
            closed.summary()
        )
    } else {
        format!(
            "closed in {seen} of {close_checked} runs (incl. warm-up); revoke -> server read EOF {}",
            closed.summary()
        )
    };
    report.info(
        PART,
        "blocked in a call: the server saw the connection closed",
        result,
    );
    Ok(())
}

/// How the reconciles of the abort runs ended.
#[derive(Default)]
struct StopOutcomes {
    /// The host aborted the guest (`GuestError::Aborted`).
    aborted: usize,
    /// The guest returned `fenced` itself before the host's abort took
    /// hold: it was still running when the revoke came, and its request's
    /// cancellation reached it first. It stopped all the same.
    fenced: usize,
}

/// A minimal hyper HTTP/1.1 server answering every request with 200 and
/// [`REPLY`], after reading the request body; it counts the answers.
struct AnsweringServer {
    addr: SocketAddr,
    /// Whether it keeps a connection open after answering (hyper's
    /// default) or closes it.
    keep_alive: bool,
    served: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl AnsweringServer {
    async fn start(keep_alive: bool) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the answering server")?;
        let addr = listener.local_addr()?;
        let served = Arc::new(AtomicU64::new(0));
        let counter = served.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: hyper::Request<Incoming>| {
                        let counter = counter.clone();
                        async move {
                            // A failed body read still gets an answer; the
                            // count then tells the caller it went wrong.
                            if request.into_body().collect().await.is_ok() {
                                counter.fetch_add(1, Ordering::SeqCst);
                            }
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(
                                Bytes::from_static(REPLY),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(keep_alive)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            keep_alive,
            served,
            task,
        })
    }

    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn url(&self) -> String {
        format!("http://{}/effects", self.addr)
    }

    /// Requests answered so far.
    fn served(&self) -> u64 {
        self.served.load(Ordering::SeqCst)
    }
}

impl Drop for AnsweringServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The native side: the request the guest sends, made with hyper from
/// native code, one new connection per request (see the module comment).
struct NativeClient {
    /// `host:port`, resolved per connection as the host's client does.
    authority: String,
    path: &'static str,
    body: Bytes,
    fence: [(&'static str, String); 3],
}

impl NativeClient {
    fn new(server: &AnsweringServer, fence: &Fence) -> Self {
        Self {
            authority: server.addr.to_string(),
            path: "/effects",
            body: Bytes::from(vec![b'x'; BODY_BYTES]),
            fence: [
                (headers::LEASE, fence.key.to_string()),
                (headers::EPOCH, fence.epoch.0.to_string()),
                (headers::HOLDER, fence.holder.clone()),
            ],
        }
    }

    /// One request on a new connection, its whole response body read.
    async fn call(&self) -> Result<()> {
        let stream = TcpStream::connect(self.authority.as_str())
            .await
            .context("native client: connecting")?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("native client: handshake")?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut request = hyper::Request::post(self.path)
            .header(hyper::header::HOST, self.authority.as_str())
            .header(hyper::header::CONTENT_LENGTH, BODY_BYTES);
        for (name, value) in &self.fence {
            request = request.header(*name, value.as_str());
        }
        let request = request
            .body(Full::new(self.body.clone()))
            .context("native client: building the request")?;
        let response = sender
            .send_request(request)
            .await
            .context("native client: sending")?;
        ensure!(
            response.status() == hyper::StatusCode::OK,
            "native client: status {}",
            response.status()
        );
        let body = response
            .into_body()
            .collect()
            .await
            .context("native client: reading the body")?
            .to_bytes();
        ensure!(body.as_ref() == REPLY, "native client: unexpected body");
        Ok(())
    }
}

/// A raw TCP server that reads a request's head and never answers; it
/// reports each arrival (by connection number) and when it read the end
/// of that connection.
struct HoldingServer {
    addr: SocketAddr,
    arrivals: mpsc::UnboundedReceiver<u64>,
    closes: mpsc::UnboundedReceiver<(u64, Instant)>,
    /// Closes read while waiting for another connection's.
    early: HashMap<u64, Instant>,
    task: tokio::task::JoinHandle<()>,
}

impl HoldingServer {
    async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the holding server")?;
        let addr = listener.local_addr()?;
        let (arrivals_tx, arrivals) = mpsc::unbounded_channel();
        let (closes_tx, closes) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut number = 0u64;
            while let Ok((stream, _)) = listener.accept().await {
                number += 1;
                tokio::spawn(hold(stream, number, arrivals_tx.clone(), closes_tx.clone()));
            }
        });
        Ok(Self {
            addr,
            arrivals,
            closes,
            early: HashMap::new(),
            task,
        })
    }

    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn url(&self) -> String {
        format!("http://{}/held", self.addr)
    }

    /// When the server read the end of `connection`, waiting at most
    /// `limit`.
    async fn closed(&mut self, connection: u64, limit: Duration) -> Option<Instant> {
        if let Some(at) = self.early.remove(&connection) {
            return Some(at);
        }
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.closes.recv()).await {
                Ok(Some((n, at))) if n == connection => return Some(at),
                Ok(Some((n, at))) => {
                    self.early.insert(n, at);
                }
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

impl Drop for HoldingServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Read one whole request (its head, then as many body bytes as its
/// `content-length` says), report it, then read (and discard) until the
/// client closes the connection, and report when. The report waits for the
/// body because the guest sends its head first and writes the body after:
/// only once the body is in has the guest finished sending and gone on to
/// wait for the response.
async fn hold(
    mut stream: TcpStream,
    number: u64,
    arrivals: mpsc::UnboundedSender<u64>,
    closes: mpsc::UnboundedSender<(u64, Instant)>,
) {
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut reported = false;
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                let _ = closes.send((number, Instant::now()));
                return;
            }
            Ok(n) if !reported => {
                seen.extend_from_slice(&chunk[..n]);
                if whole_request(&seen) {
                    reported = true;
                    seen = Vec::new();
                    let _ = arrivals.send(number);
                }
            }
            Ok(_) => {}
        }
    }
}

/// Whether `bytes` hold a request's head and its whole body (by its
/// `content-length`; none means no body).
fn whole_request(bytes: &[u8]) -> bool {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&bytes[..end]);
    let length = head
        .split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    bytes.len() - (end + 4) >= length
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_whole_once_its_declared_body_is_in() {
        let head = b"POST /held HTTP/1.1\r\nhost: x\r\nContent-Length: 3\r\n\r\n";
        assert!(!whole_request(b"POST /held HTTP/1.1\r\nhost: x\r\n"));
        assert!(!whole_request(head));
        let mut body = head.to_vec();
        body.extend_from_slice(b"ab");
        assert!(!whole_request(&body));
        body.push(b'c');
        assert!(whole_request(&body));
        assert!(whole_request(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"));
    }
}
