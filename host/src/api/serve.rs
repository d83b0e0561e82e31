//! Serving the API over TCP with the bounds `axum::serve` lacks, so slow,
//! idle or numerous clients cannot make the API unreachable.
//!
//! Owns: the accept loop, the per-connection read deadlines before a
//! request starts (headers, keep-alive idle), the connection cap and who is
//! let go when it is reached, backoff on accept errors, and the graceful
//! drain at shutdown. The body read deadline is the router's (see
//! [`super::read_body_within_deadline`]): it needs the request.
//!
//! The cap holds connections, not requests. When it is reached, a new
//! connection takes the place of the connection that has been idle the
//! longest (waiting for its first request or for its next one, including a
//! header that is still arriving); if every connection has a request in
//! flight, the new one is answered `503` at once and closed. So a flood of
//! idle sockets can delay nobody for longer than one accept, and the cap
//! keeps the process well away from its file-descriptor limit, where
//! `accept` itself would fail.
//!
//! Requests have their own bound ([`Limiter`], applied by the router): at
//! most so many served at once, a short bounded queue for a turn, and 503
//! `overloaded` with `Retry-After` beyond it, so a flood of requests on
//! few connections cannot hold every pooled database connection, the
//! host's memory and its CPU either.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, SemaphorePermit, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::limits::{
    HTTP_CONNECTIONS_FD_SHARE_PERCENT, HTTP_MAX_CONNECTIONS, HTTP_MAX_EVENT_REQUESTS,
    HTTP_MAX_IN_FLIGHT, HTTP_MAX_QUEUED, HTTP_QUEUE_WAIT,
};
use crate::timeouts::{
    HTTP_ACCEPT_BACKOFF_MAX, HTTP_ACCEPT_BACKOFF_MIN, HTTP_HEADER_READ, HTTP_KEEP_ALIVE_IDLE,
    HTTP_OVERLOAD_LOG_EVERY,
};

/// The answer to a connection over the cap when nobody can make room:
/// written in one non-blocking write to a fresh socket (whose send buffer
/// is empty), then the socket is closed.
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
connection: close\r\n\
retry-after: 1\r\n\
content-length: 105\r\n\
\r\n\
{\"error\":\"every connection is busy with a request; try again in a moment\",\"code\":\"too_many_connections\"}\n";

/// The bounds one server applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Longest time from a request's first byte to the end of its header.
    pub header_read: Duration,
    /// Longest a connection may stay open without a request in flight and
    /// without sending a byte (a fresh one, or between keep-alive requests).
    pub keep_alive_idle: Duration,
}

impl ServeLimits {
    /// The defaults, with the connection cap lowered to
    /// [`HTTP_CONNECTIONS_FD_SHARE_PERCENT`] of this process's
    /// file-descriptor limit, so the rest stays for database connections,
    /// guests and files. Also returns that limit (`None`: unknown or
    /// unlimited) for the start-up log.
    pub fn for_this_process() -> (Self, Option<u64>) {
        let fd_limit = open_files_limit();
        let limits = Self {
            max_connections: connection_cap(HTTP_MAX_CONNECTIONS, fd_limit),
            header_read: HTTP_HEADER_READ,
            keep_alive_idle: HTTP_KEEP_ALIVE_IDLE,
        };
        (limits, fd_limit)
    }
}

/// How many requests of one budget are served at once, and how many may
/// wait for a turn, for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Most requests served at once.
    pub in_flight: usize,
    /// Most requests waiting for a turn; beyond it a request is refused at
    /// once.
    pub queued: usize,
    /// Longest a request waits for a turn before it is refused.
    pub queue_wait: Duration,
}

impl RequestLimits {
    /// The API's requests ([`HTTP_MAX_IN_FLIGHT`], [`HTTP_MAX_QUEUED`],
    /// [`HTTP_QUEUE_WAIT`]).
    pub const REQUESTS: Self = Self {
        in_flight: HTTP_MAX_IN_FLIGHT,
        queued: HTTP_MAX_QUEUED,
        queue_wait: HTTP_QUEUE_WAIT,
    };

    /// `GET /v1/events` ([`HTTP_MAX_EVENT_REQUESTS`]), no queue: a slot
    /// held by a long poll frees up only when its wait ends.
    pub const EVENTS: Self = Self {
        in_flight: HTTP_MAX_EVENT_REQUESTS,
        queued: 0,
        queue_wait: Duration::ZERO,
    };
}

/// Why [`Limiter::admit`] turned a request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overloaded {
    /// Every slot was taken and the queue was full.
    QueueFull,
    /// It waited its whole [`RequestLimits::queue_wait`] for a slot.
    WaitedTooLong,
}

/// One budget of requests: at most [`RequestLimits::in_flight`] served at
/// once, at most [`RequestLimits::queued`] more waiting (first come, first
/// served) for at most [`RequestLimits::queue_wait`]; every other request
/// is refused at once, and counted.
#[derive(Debug)]
pub struct Limiter {
    name: &'static str,
    limits: RequestLimits,
    slots: Semaphore,
    waiting: AtomicUsize,
    refused: AtomicU64,
    log: Mutex<RefusalLog>,
}

/// Refusals since the last warning, and when that was.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    refused: u64,
}

impl Limiter {
    /// A budget called `name` (in logs and the `budget` label of
    /// `leasehold_http_overloaded_total`).
    pub fn new(name: &'static str, limits: RequestLimits) -> Self {
        Self {
            name,
            limits,
            slots: Semaphore::new(limits.in_flight.max(1)),
            waiting: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            log: Mutex::new(RefusalLog::default()),
        }
    }

    /// The budget's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its bounds.
    pub fn limits(&self) -> RequestLimits {
        self.limits
    }

    /// Requests refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Requests being served now.
    pub fn serving(&self) -> usize {
        self.limits
            .in_flight
            .max(1)
            .saturating_sub(self.slots.available_permits())
    }

    /// Requests waiting for a slot now.
    pub fn queued(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// A slot, held until the returned permit drops; or why not. A caller
    /// that gives up while queued (its client went away) leaves the queue.
    pub async fn admit(&self) -> Result<SemaphorePermit<'_>, Overloaded> {
        // The semaphore is fair: a free slot exists only while nobody is
        // queued, so this never jumps the queue.
        if let Ok(slot) = self.slots.try_acquire() {
            return Ok(slot);
        }
        let queued = Queued::join(&self.waiting);
        if queued.ahead >= self.limits.queued {
            return Err(self.refuse(Overloaded::QueueFull));
        }
        match tokio::time::timeout(self.limits.queue_wait, self.slots.acquire()).await {
            Ok(Ok(slot)) => Ok(slot),
            // Never closed; treated as waiting too long all the same.
            Ok(Err(_)) | Err(_) => Err(self.refuse(Overloaded::WaitedTooLong)),
        }
    }

    fn refuse(&self, why: Overloaded) -> Overloaded {
        self.refused.fetch_add(1, Ordering::Relaxed);
        // A flood must not also flood the log: one line per interval.
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.refused += 1;
        let now = Instant::now();
        if log
            .last
            .is_none_or(|last| now.duration_since(last) >= HTTP_OVERLOAD_LOG_EVERY)
        {
            tracing::warn!(
                budget = self.name,
                in_flight = self.limits.in_flight,
                queued = self.limits.queued,
                queue_wait = ?self.limits.queue_wait,
                refused = log.refused,
                last = ?why,
                "HTTP API overloaded since the last report: `refused` requests were answered 503 \
                 (overloaded, Retry-After) while `in_flight` were being served and `queued` \
                 waited for a turn"
            );
            log.last = Some(now);
            log.refused = 0;
        }
        why
    }
}

/// A place in a [`Limiter`]'s queue, left when dropped.
struct Queued<'a> {
    waiting: &'a AtomicUsize,
    /// How many were waiting before this one joined.
    ahead: usize,
}

impl<'a> Queued<'a> {
    fn join(waiting: &'a AtomicUsize) -> Self {
        let ahead = waiting.fetch_add(1, Ordering::SeqCst);
        Self { waiting, ahead }
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `configured`, lowered to the share of `fd_limit` connections may take;
/// at least one, so a tiny limit still serves someone.
pub fn connection_cap(configured: usize, fd_limit: Option<u64>) -> usize {
    let Some(limit) = fd_limit else {
        return configured.max(1);
    };
    let share = limit.saturating_mul(HTTP_CONNECTIONS_FD_SHARE_PERCENT) / 100;
    let share = usize::try_from(share).unwrap_or(usize::MAX);
    configured.min(share).max(1)
}

/// The soft `RLIMIT_NOFILE` of this process: the most file descriptors it
/// may have open. `None` when unlimited or unreadable.
pub fn open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a pointer to a live,
    // properly aligned value and keeps no reference to it.
    let status = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if status != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(limit.rlim_cur)
}

/// Serve `app` on `listener` within `limits` until `stop` resolves; then
/// stop accepting, close every connection without a request in flight at
/// once, let the others finish the request they are serving, and return
/// when all are closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    tls: Option<Arc<crate::tls::ServerTls>>,
    stop: impl Future<Output = ()>,
) {
    let registry = Arc::new(Registry::default());
    let (stopping_tx, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut overload = OverloadLog::default();
    let mut backoff = HTTP_ACCEPT_BACKOFF_MIN;
    tokio::pin!(stop);
    loop {
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => {
                backoff = HTTP_ACCEPT_BACKOFF_MIN;
                stream
            }
            // The peer gave up before we accepted: nothing wrong here.
            Err(e) if is_per_connection(&e) => continue,
            Err(e) => {
                // Out of file descriptors (EMFILE/ENFILE) or memory: retrying
                // at once would spin. Make room if anyone is idle, then wait.
                let evicted = registry.evict_longest_idle();
                if overload.due() {
                    tracing::warn!(
                        error = %e,
                        retry_in = ?backoff,
                        evicted_idle = evicted,
                        "HTTP accept failed; backing off"
                    );
                }
                tokio::select! {
                    () = &mut stop => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(HTTP_ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        let admission = registry.admit(limits.max_connections);
        let Some(conn) = admission.admitted else {
            overload.refused += 1;
            // Best effort: the client may already have closed. A TLS
            // client could not read a plain answer: it is only closed.
            if tls.is_none() {
                let _ = stream.try_write(REFUSED);
            }
            drop(stream);
            overload.report(limits.max_connections);
            continue;
        };
        if admission.evicted {
            overload.evicted += 1;
            overload.report(limits.max_connections);
        }
        // Small JSON answers: do not hold them back waiting for more.
        let _ = stream.set_nodelay(true);
        connections.spawn(serve_connection(
            stream,
            app.clone(),
            conn,
            registry.clone(),
            limits,
            stopping.clone(),
            tls.as_ref().map(|tls| tls.acceptor()),
        ));
    }
    drop(listener);
    let _ = stopping_tx.send(true);
    while connections.join_next().await.is_some() {}
}

/// Errors about one connection that failed between the handshake and the
/// accept; the listener itself is fine.
fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// Counts refusals and evictions, and logs them at most once per
/// [`HTTP_OVERLOAD_LOG_EVERY`]: a flood must not also flood the log.
#[derive(Default)]
struct OverloadLog {
    last: Option<Instant>,
    refused: u64,
    evicted: u64,
}

impl OverloadLog {
    fn due(&mut self) -> bool {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < HTTP_OVERLOAD_LOG_EVERY)
        {
            return false;
        }
        self.last = Some(now);
        true
    }

    fn report(&mut self, cap: usize) {
        if self.due() {
            tracing::warn!(
                cap,
                evicted_idle = self.evicted,
                refused = self.refused,
                "HTTP connection cap reached since the last report: `evicted_idle` idle \
                 connections were closed to make room for new ones, `refused` new ones were \
                 turned away while every connection was busy; if this is legitimate load, raise \
                 the file-descriptor limit (ulimit -n)"
            );
            self.refused = 0;
            self.evicted = 0;
        }
    }
}

/// Every open connection, so the accept loop can pick one to let go.
#[derive(Default)]
struct Registry {
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
}

/// What [`Registry::admit`] decided.
struct Admission {
    /// The new connection's entry, unless it was refused.
    admitted: Option<Arc<Conn>>,
    /// Whether an idle connection was closed to make room.
    evicted: bool,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        // Entries are inserted or removed whole: a panic elsewhere cannot
        // leave the map half-changed.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn admit(&self, cap: usize) -> Admission {
        let mut open = self.lock();
        let mut evicted = false;
        if open.len() >= cap {
            match Self::longest_idle(&open) {
                Some(id) => {
                    if let Some(victim) = open.remove(&id) {
                        victim.evict();
                    }
                    evicted = true;
                }
                None => {
                    return Admission {
                        admitted: None,
                        evicted: false,
                    };
                }
            }
        }
        let conn = Arc::new(Conn::new(self.next_id.fetch_add(1, Ordering::Relaxed)));
        open.insert(conn.id, conn.clone());
        Admission {
            admitted: Some(conn),
            evicted,
        }
    }

    /// Close the connection idle the longest; whether there was one.
    fn evict_longest_idle(&self) -> bool {
        let mut open = self.lock();
        let Some(id) = Self::longest_idle(&open) else {
            return false;
        };
        if let Some(victim) = open.remove(&id) {
            victim.evict();
        }
        true
    }

    fn longest_idle(open: &HashMap<u64, Arc<Conn>>) -> Option<u64> {
        open.values()
            .filter_map(|c| c.idle_since().map(|since| (since, c.id)))
            .min()
            .map(|(_, id)| id)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }
}

/// One connection's state as the watchdog and the accept loop see it.
struct Conn {
    id: u64,
    phase: Mutex<Phase>,
    /// Rung on every change that moves the connection's deadline, and on
    /// eviction.
    changed: Notify,
    evicted: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct Phase {
    /// Requests being served (more than one only while hyper pipelines).
    in_flight: usize,
    /// When the last request ended, or the connection opened.
    idle_since: Instant,
    /// When the first byte after `idle_since` arrived: a request header
    /// has started.
    header_started: Option<Instant>,
}

impl Conn {
    fn new(id: u64) -> Self {
        Self {
            id,
            phase: Mutex::new(Phase {
                in_flight: 0,
                idle_since: Instant::now(),
                header_started: None,
            }),
            changed: Notify::new(),
            evicted: AtomicBool::new(false),
        }
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        // Plain fields, each write whole: safe to recover.
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When it became idle, if no request is in flight.
    fn idle_since(&self) -> Option<Instant> {
        let phase = self.phase();
        (phase.in_flight == 0).then_some(phase.idle_since)
    }

    fn evict(&self) {
        self.evicted.store(true, Ordering::SeqCst);
        self.changed.notify_one();
    }

    fn received_bytes(&self) {
        let mut phase = self.phase();
        if phase.in_flight == 0 && phase.header_started.is_none() {
            phase.header_started = Some(Instant::now());
            drop(phase);
            self.changed.notify_one();
        }
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        let mut phase = self.phase();
        phase.in_flight += 1;
        phase.header_started = None;
        drop(phase);
        self.changed.notify_one();
        InFlight(self.clone())
    }

    /// When the connection must be closed unless something changes first;
    /// `None` while a request is in flight (the body deadline and the
    /// handlers' own bounds apply then).
    fn deadline(&self, limits: &ServeLimits) -> Option<Instant> {
        let phase = self.phase();
        if phase.in_flight > 0 {
            return None;
        }
        Some(match phase.header_started {
            Some(started) => started + limits.header_read,
            None => phase.idle_since + limits.keep_alive_idle,
        })
    }
}

/// A request being served; ends (and restarts the idle clock) when dropped,
/// whether the response was sent or the connection died under it.
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut phase = self.0.phase();
        phase.in_flight -= 1;
        if phase.in_flight == 0 {
            phase.idle_since = Instant::now();
            phase.header_started = None;
        }
        drop(phase);
        self.0.changed.notify_one();
    }
}

/// The socket, reporting the first byte of each request header to its
/// [`Conn`].
struct Watched {
    stream: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.received_bytes();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Why a connection ended early, for the debug log.
#[derive(Debug, Clone, Copy)]
enum Closed {
    HeaderTimeout,
    HandshakeTimeout,
    IdleTimeout,
    Evicted,
    Stopping,
}

async fn serve_connection(
    stream: TcpStream,
    app: Router,
    conn: Arc<Conn>,
    registry: Arc<Registry>,
    limits: ServeLimits,
    mut stopping: watch::Receiver<bool>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let watched = Watched {
        stream,
        conn: conn.clone(),
    };
    let closed = match tls {
        None => drive(TokioIo::new(watched), app, &conn, limits, stopping).await,
        // The handshake is bounded like a request header (its first bytes
        // start the same clock): a client that never finishes it holds a
        // connection no longer than a slow header would.
        Some(acceptor) => {
            let handshake = tokio::time::timeout(HTTP_HEADER_READ, acceptor.accept(watched));
            let accepted = tokio::select! {
                accepted = handshake => accepted,
                _ = stopping.wait_for(|s| *s) => {
                    registry.remove(conn.id);
                    return;
                }
            };
            match accepted {
                Ok(Ok(stream)) => drive(TokioIo::new(stream), app, &conn, limits, stopping).await,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => Some(Closed::HandshakeTimeout),
            }
        }
    };
    if let Some(reason) = closed {
        tracing::debug!(?reason, "HTTP connection closed");
    }
    registry.remove(conn.id);
}

/// Serve HTTP/1.1 on one connection (plain or TLS) until it ends, a
/// deadline passes, it is evicted or the server stops; returns why it was
/// closed early, if it was.
async fn drive<I>(
    io: I,
    app: Router,
    conn: &Arc<Conn>,
    limits: ServeLimits,
    mut stopping: watch::Receiver<bool>,
) -> Option<Closed>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let tower = TowerToHyperService::new(app);
    let tracker = conn.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let in_flight = tracker.request_started();
        let response = tower.call(request);
        async move {
            let response = response.await;
            drop(in_flight);
            response
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(connection);
    let mut draining = false;
    loop {
        if conn.evicted.load(Ordering::SeqCst) {
            break Some(Closed::Evicted);
        }
        let deadline = conn.deadline(&limits);
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                break None;
            }
            () = conn.changed.notified() => {}
            () = sleep_until(deadline) => {
                // Re-read: a request may have started since.
                let phase = *conn.phase();
                if phase.in_flight == 0 && conn.deadline(&limits).is_some_and(|d| d <= Instant::now()) {
                    break Some(if phase.header_started.is_some() {
                        Closed::HeaderTimeout
                    } else {
                        Closed::IdleTimeout
                    });
                }
            }
            _ = stopping.wait_for(|s| *s), if !draining => {
                // Nothing in flight: nothing to finish, and a silent socket
                // or half a header must not hold the shutdown until its
                // deadline.
                if conn.idle_since().is_some() {
                    break Some(Closed::Stopping);
                }
                draining = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Sleep until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(in_flight: usize, queued: usize, queue_wait: Duration) -> Limiter {
        Limiter::new(
            "test",
            RequestLimits {
                in_flight,
                queued,
                queue_wait,
            },
        )
    }

    /// Whether `future` is still pending after every other task ran.
    async fn pending<F: Future + Unpin>(future: &mut F) -> bool {
        tokio::task::yield_now().await;
        futures::poll!(future).is_pending()
    }

    #[tokio::test(start_paused = true)]
    async fn the_limiter_serves_so_many_at_once_and_queues_the_next_in_order() {
        let limiter = limiter(2, 2, Duration::from_secs(1));
        let first = limiter.admit().await.expect("a free slot");
        let _second = limiter.admit().await.expect("a free slot");
        // Both slots taken: the next two queue, in arrival order.
        let mut third = Box::pin(limiter.admit());
        let mut fourth = Box::pin(limiter.admit());
        assert!(pending(&mut third).await);
        assert!(pending(&mut fourth).await);
        // The queue is full: the fifth is refused at once, and counted.
        assert_eq!(limiter.admit().await.err(), Some(Overloaded::QueueFull));
        assert_eq!(limiter.refused(), 1);
        // A slot frees up: it goes to the first in the queue, not the second.
        drop(first);
        let third = third.await.expect("the first queued gets the slot");
        assert!(pending(&mut fourth).await);
        drop(third);
        let _fourth = fourth.await.expect("then the second");
        assert_eq!(limiter.refused(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_request_is_refused_after_its_wait_and_leaves_the_queue() {
        let wait = Duration::from_millis(500);
        let limiter = limiter(1, 1, wait);
        let _held = limiter.admit().await.expect("a free slot");
        let started = Instant::now();
        assert_eq!(limiter.admit().await.err(), Some(Overloaded::WaitedTooLong));
        assert_eq!(started.elapsed(), wait);
        assert_eq!(limiter.refused(), 1);
        // It left the queue: the next one may queue again (it would be
        // refused at once if the place were still taken).
        let mut next = Box::pin(limiter.admit());
        assert!(pending(&mut next).await);
        // A client that goes away while queued leaves its place too.
        drop(next);
        let mut again = Box::pin(limiter.admit());
        assert!(pending(&mut again).await);
        assert_eq!(limiter.refused(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_queue_a_request_past_the_slots_is_refused_at_once() {
        let limiter = Limiter::new("events", RequestLimits::EVENTS);
        let mut held = Vec::new();
        for _ in 0..RequestLimits::EVENTS.in_flight {
            held.push(limiter.admit().await.expect("a free slot"));
        }
        let started = Instant::now();
        assert_eq!(limiter.admit().await.err(), Some(Overloaded::QueueFull));
        assert_eq!(started.elapsed(), Duration::ZERO);
        held.pop();
        let _freed = limiter.admit().await.expect("a freed slot");
        assert_eq!(limiter.refused(), 1);
    }

    #[test]
    fn the_cap_leaves_most_file_descriptors_to_the_rest() {
        assert_eq!(connection_cap(1024, None), 1024);
        assert_eq!(connection_cap(1024, Some(1_048_576)), 1024);
        assert_eq!(
            connection_cap(1024, Some(1024)),
            1024 * HTTP_CONNECTIONS_FD_SHARE_PERCENT as usize / 100
        );
        assert!(connection_cap(1024, Some(1024)) < 1024);
        assert_eq!(connection_cap(1024, Some(1)), 1);
        assert_eq!(connection_cap(0, None), 1);
    }

    #[test]
    fn the_refusal_is_a_complete_response() {
        let text = std::str::from_utf8(REFUSED).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["code"], "too_many_connections");
    }

    #[test]
    fn the_longest_idle_connection_is_let_go_and_busy_ones_never() {
        let registry = Registry::default();
        let first = registry.admit(2).admitted.unwrap();
        let second = registry.admit(2).admitted.unwrap();
        let _busy = first.request_started();
        // `second` is the only idle one: it makes room.
        let third = registry.admit(2);
        assert!(third.evicted);
        assert!(second.evicted.load(Ordering::SeqCst));
        assert!(!first.evicted.load(Ordering::SeqCst));
        let third = third.admitted.unwrap();
        let _also_busy = third.request_started();
        // Everyone is busy: the newcomer is refused, nobody is let go.
        let fourth = registry.admit(2);
        assert!(fourth.admitted.is_none());
        assert!(!first.evicted.load(Ordering::SeqCst));
        assert!(!third.evicted.load(Ordering::SeqCst));
    }

    #[test]
    fn a_started_header_has_its_own_deadline() {
        let limits = ServeLimits {
            max_connections: 1,
            header_read: Duration::from_secs(1),
            keep_alive_idle: Duration::from_secs(60),
        };
        let conn = Arc::new(Conn::new(0));
        let idle = conn.deadline(&limits).unwrap();
        conn.received_bytes();
        let header = conn.deadline(&limits).unwrap();
        assert!(header < idle);
        let request = conn.request_started();
        assert_eq!(conn.deadline(&limits), None);
        drop(request);
        let idle_again = conn.deadline(&limits).unwrap();
        assert!(idle_again >= idle);
    }
}
