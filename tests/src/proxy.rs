//! A TCP fault proxy between a host and PostgreSQL, controlled by the test:
//! pass traffic, black-hole it (a partition: connections stay open but
//! nothing flows), reset every connection, or add latency.
//!
//! The proxy reads the PostgreSQL wire protocol in the host-to-server
//! direction just enough to frame messages, which lets a test
//!
//! - strike at one exact point of a transaction: [`FaultProxy::arm`] fires
//!   on the next `COMMIT` a host sends (lose the reply, lose the commit, or
//!   partition with the commit in flight), and reports that it struck on a
//!   channel, so the test orders itself on it instead of sleeping;
//!   [`FaultProxy::arm_carrying`] fires only on the `COMMIT` of a
//!   transaction that sent given bytes (a value only the guest writes), so
//!   a test can aim at a guest's commit among the host's others;
//!   [`FaultProxy::cut_host`] then closes the host's end of a held
//!   `COMMIT`'s connection while the server's end still waits for it;
//! - point new sessions at another database on the same server
//!   ([`FaultProxy::redirect_database`]), as if the host's connection
//!   string now reached a different database;
//! - name the sessions that go through it ([`FaultProxy::upstream_ports`]:
//!   `pg_stat_activity.client_port`), so a test can terminate exactly one
//!   host's backends;
//! - partition silently ([`Mode::SilentPartition`]): nothing flows, and
//!   each connection's server end is closed only once nothing passed on it
//!   for the server's own keepalive detection time, as a server finds a
//!   host that vanished; [`FaultProxy::partition_at`] starts one at the
//!   first message a host sends that carries given bytes (a statement's
//!   text).
//!
//! The server-to-host direction is forwarded as opaque bytes.
//!
//! To read the protocol the proxy must see it in the clear: it answers a
//! host's request for TLS (or GSSAPI encryption) itself with `N`, as a
//! proxy that speaks no TLS would, so hosts with the default `sslmode`
//! (`prefer`) talk plaintext through it, and a host that requires TLS is
//! refused.
//!
//! [`FaultProxy::start_opaque`] starts the same proxy for a protocol it
//! does not parse (HTTP/1.1 between a host and an external service): the
//! client-to-server direction is relayed chunk by chunk, and an armed
//! strike fires at the first chunk of a connection that carries given bytes
//! (`PUT /buckets/`), so a test can lose the reply to exactly one request
//! after the server acted on it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything.
    Pass,
    /// Accept and hold connections, forward nothing (a partition). Bytes
    /// already read are delivered when the mode returns to `Pass`; a host
    /// closing its end is not passed on either (in a partition, its FIN
    /// would not arrive).
    Blackhole,
    /// Close every open connection and refuse new ones.
    Reset,
    /// A silent partition: as [`Mode::Blackhole`] for both directions, and
    /// each connection's server end is closed once nothing has passed on it
    /// (either way) for this long, as the server's keepalive probes drop a
    /// host that vanished without closing its socket; the host's end stays
    /// open and hears nothing. New connections are held like the open ones.
    SilentPartition(Duration),
    /// Forward with this delay per chunk.
    Latency(Duration),
}

/// What an armed proxy does to the first `COMMIT` a host sends through it
/// (see [`FaultProxy::arm`]).
///
/// On an opaque proxy ([`FaultProxy::start_opaque`]) "the `COMMIT`" is the
/// chunk that carries the armed bytes: `LoseReply` delivers it and loses
/// every reply on its connection (an HTTP request the server acts on whose
/// response never arrives), `LoseCommit` drops it and everything after it,
/// `Hold` holds it until [`FaultProxy::release`], and `Partition`
/// black-holes the proxy with it in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtCommit {
    /// Deliver the `COMMIT`, then drop every reply on that connection: the
    /// server commits, the host never learns the outcome. When the host's
    /// end closes, the server's end is closed after the commit.
    LoseReply,
    /// Drop the `COMMIT` and everything after it on that connection: the
    /// server never sees it, the transaction stays open (with its locks)
    /// until the host's end closes, then the server rolls it back.
    LoseCommit,
    /// Switch the whole proxy to [`Mode::Blackhole`] with the `COMMIT` held
    /// in flight: a partition that strikes mid-commit. The `COMMIT` is
    /// delivered if the partition heals while the server still waits for
    /// it.
    Partition,
    /// Hold the `COMMIT` (and anything after it on that connection) until
    /// [`FaultProxy::release`]: what the server sees of a host paused
    /// between its last statement and its `COMMIT`. Other connections
    /// pass.
    Hold,
}

/// What the proxy understands of the bytes it relays host to server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// PostgreSQL's wire protocol, framed into messages: strikes fire at a
    /// `COMMIT` ([`FaultProxy::start`]).
    Postgres,
    /// Bytes the proxy does not parse (HTTP/1.1 to an external service):
    /// a strike fires at the first chunk the client sends that completes
    /// the armed bytes, and "the `COMMIT`" of [`AtCommit`] means that
    /// chunk ([`FaultProxy::start_opaque`]).
    Opaque,
}

/// Longest `carrying` an opaque proxy looks for: it keeps this many bytes
/// of a connection's previous chunks to find bytes split across two reads.
pub const MAX_OPAQUE_CARRYING: usize = 1024;

/// State shared by the listener, every relay and the test.
struct Shared {
    upstream: std::net::SocketAddr,
    protocol: Protocol,
    mode: watch::Sender<Mode>,
    armed: Mutex<Option<Trigger>>,
    database: Mutex<Option<String>>,
    ports: Mutex<BTreeSet<u16>>,
    /// Bumped by [`FaultProxy::release`].
    released: watch::Sender<u64>,
    /// Bumped by [`FaultProxy::cut_host`].
    cut: watch::Sender<u64>,
    /// Armed by [`FaultProxy::partition_at`].
    partition_at: Mutex<Option<PartitionTrigger>>,
}

/// A silent partition armed to start at a host's message carrying bytes.
struct PartitionTrigger {
    carrying: Vec<u8>,
    server_drops_after: Duration,
    struck: oneshot::Sender<()>,
}

/// An armed strike: what to do, at which `COMMIT`, and whom to tell.
struct Trigger {
    at: AtCommit,
    /// Strike only at the `COMMIT` of a transaction that sent these bytes.
    carrying: Option<Vec<u8>>,
    struck: oneshot::Sender<()>,
}

impl Shared {
    /// Take the armed trigger, if any: exactly one connection strikes.
    fn take_trigger(&self) -> Option<Trigger> {
        self.armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Take the armed trigger if it strikes at a `COMMIT` of a transaction
    /// that did (`carried`) or did not send the trigger's bytes.
    fn take_trigger_for(&self, carried: bool) -> Option<Trigger> {
        let mut armed = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
        match &*armed {
            Some(t) if t.carrying.is_none() || carried => armed.take(),
            _ => None,
        }
    }

    /// Whether a silent partition is armed to start at a message carrying
    /// bytes that `message` carries.
    fn partition_carried_by(&self, message: &[u8]) -> bool {
        let armed = self
            .partition_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        armed.as_ref().is_some_and(|t| {
            message
                .windows(t.carrying.len())
                .any(|w| w == t.carrying.as_slice())
        })
    }

    /// Start the silent partition armed for `message`, if it still is:
    /// switch the proxy to it and report the strike.
    fn partition_at(&self, message: &[u8]) {
        if !self.partition_carried_by(message) {
            return;
        }
        let trigger = self
            .partition_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(trigger) = trigger {
            self.mode
                .send_replace(Mode::SilentPartition(trigger.server_drops_after));
            let _ = trigger.struck.send(());
        }
    }

    /// Whether `message` carries the armed trigger's bytes.
    fn carries(&self, message: &[u8]) -> bool {
        let armed = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
        match armed.as_ref().and_then(|t| t.carrying.as_deref()) {
            Some(needle) => message.windows(needle.len()).any(|w| w == needle),
            None => false,
        }
    }
}

/// A running proxy; dropping it stops it and closes every connection.
pub struct FaultProxy {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listen on a free loopback port and forward to `upstream`, a
    /// PostgreSQL server.
    pub async fn start(upstream: std::net::SocketAddr) -> Self {
        Self::start_with(upstream, Protocol::Postgres).await
    }

    /// Listen on a free loopback port and forward to `upstream` without
    /// parsing what passes ([`Protocol::Opaque`]): for HTTP between a host
    /// and an external service. Modes work as for PostgreSQL; an armed
    /// strike fires at the first chunk a client sends that carries the
    /// armed bytes (see [`AtCommit`] for what each strike does to it);
    /// [`FaultProxy::cut_host`] and [`FaultProxy::redirect_database`] do
    /// nothing here.
    pub async fn start_opaque(upstream: std::net::SocketAddr) -> Self {
        Self::start_with(upstream, Protocol::Opaque).await
    }

    async fn start_with(upstream: std::net::SocketAddr, protocol: Protocol) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            protocol,
            mode: watch::Sender::new(Mode::Pass),
            armed: Mutex::new(None),
            database: Mutex::new(None),
            ports: Mutex::new(BTreeSet::new()),
            released: watch::Sender::new(0),
            cut: watch::Sender::new(0),
            partition_at: Mutex::new(None),
        });
        let task_shared = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if *task_shared.mode.borrow() == Mode::Reset {
                    drop(client);
                    continue;
                }
                tokio::spawn(relay(client, task_shared.clone()));
            }
        });
        Self { addr, shared, task }
    }

    /// The address hosts should connect to.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the base URL of an opaque proxy in front
    /// of an HTTP service.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `url` (a PostgreSQL URL) rewritten to go through this proxy.
    pub fn url_for(&self, url: &str) -> String {
        let mut proxied = url::Url::parse(url).expect("database url");
        proxied.set_host(Some("127.0.0.1")).expect("host");
        proxied.set_port(Some(self.addr.port())).expect("port");
        proxied.to_string()
    }

    /// Change what the proxy does, for open and new connections.
    pub fn set(&self, mode: Mode) {
        self.shared.mode.send_replace(mode);
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.shared.mode.borrow()
    }

    /// Strike at the next `COMMIT` any connection sends (one connection,
    /// once). The receiver resolves when it struck. Arming again replaces
    /// a trigger that has not struck.
    pub fn arm(&self, at: AtCommit) -> oneshot::Receiver<()> {
        self.arm_with(at, None)
    }

    /// [`FaultProxy::arm`], striking only at the `COMMIT` of a transaction
    /// in which the host sent `carrying` (in any message since the
    /// connection's previous `COMMIT` or `ROLLBACK`; non-empty): a value
    /// only one writer writes picks out that writer's commits.
    ///
    /// On an opaque proxy it strikes at the first chunk a client sends that
    /// completes `carrying` (at most [`MAX_OPAQUE_CARRYING`] bytes).
    pub fn arm_carrying(&self, at: AtCommit, carrying: &[u8]) -> oneshot::Receiver<()> {
        assert!(!carrying.is_empty(), "arm_carrying needs bytes to look for");
        assert!(
            self.shared.protocol == Protocol::Postgres || carrying.len() <= MAX_OPAQUE_CARRYING,
            "an opaque proxy looks for at most {MAX_OPAQUE_CARRYING} bytes"
        );
        self.arm_with(at, Some(carrying.to_vec()))
    }

    fn arm_with(&self, at: AtCommit, carrying: Option<Vec<u8>>) -> oneshot::Receiver<()> {
        let (struck, rx) = oneshot::channel();
        *self
            .shared
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Trigger {
            at,
            carrying,
            struck,
        });
        rx
    }

    /// Let a `COMMIT` held by [`AtCommit::Hold`] go on to the server.
    pub fn release(&self) {
        self.shared.released.send_modify(|n| *n += 1);
    }

    /// Close the host's end of the connection whose `COMMIT` is held by
    /// [`AtCommit::Hold`], and keep the server's end open, the `COMMIT`
    /// still held until [`FaultProxy::release`] delivers it (or the server
    /// ends the transaction): a connection reset that only the host saw,
    /// with its `COMMIT` still on the way. The host learns at once that the
    /// outcome is unknown, so it can stop its guest and release its lease
    /// while the commit is still in flight; without this it would wait for
    /// the reply until its own statement bound, which is also the server's
    /// bound on the idle transaction.
    pub fn cut_host(&self) {
        self.shared.cut.send_modify(|n| *n += 1);
    }

    /// Start a [`Mode::SilentPartition`] (server ends closed
    /// `server_drops_after` after their last traffic) at the first message
    /// any host connection sends that carries `carrying` (non-empty; in any
    /// message, such as a statement's text in a `Parse`), that message
    /// held with everything else; once, and only on a PostgreSQL proxy.
    /// What the connections sent before it goes through. The receiver
    /// resolves when it struck.
    pub fn partition_at(
        &self,
        carrying: &[u8],
        server_drops_after: Duration,
    ) -> oneshot::Receiver<()> {
        assert!(!carrying.is_empty(), "partition_at needs bytes to look for");
        assert_eq!(
            self.shared.protocol,
            Protocol::Postgres,
            "partition_at frames PostgreSQL messages"
        );
        let (struck, rx) = oneshot::channel();
        *self
            .shared
            .partition_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(PartitionTrigger {
            carrying: carrying.to_vec(),
            server_drops_after,
            struck,
        });
        rx
    }

    /// Disarm a trigger that has not struck.
    pub fn disarm(&self) {
        self.shared.take_trigger();
    }

    /// Make new sessions ask the server for `database` instead of the one
    /// the host named (`None`: the host's own again). Open sessions keep
    /// their database; reset them to make the host reconnect.
    pub fn redirect_database(&self, database: Option<&str>) {
        *self
            .shared
            .database
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = database.map(str::to_string);
    }

    /// The local ports of the proxy's open server-side connections: what
    /// the server shows as `client_port` in `pg_stat_activity` for the
    /// sessions of the host behind this proxy.
    pub fn upstream_ports(&self) -> Vec<u16> {
        self.shared
            .ports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.shared.mode.send_replace(Mode::Reset);
    }
}

/// Forgets a relay's upstream port when the relay ends.
struct PortGuard(Arc<Shared>, u16);

impl Drop for PortGuard {
    fn drop(&mut self) {
        self.0
            .ports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.1);
    }
}

async fn relay(mut client: TcpStream, shared: Arc<Shared>) {
    // The start of the startup message, read while refusing encryption.
    let first = match shared.protocol {
        Protocol::Postgres => match refuse_encryption(&mut client, &shared).await {
            Some(first) => first,
            None => return,
        },
        Protocol::Opaque => Vec::new(),
    };
    let Ok(server) = TcpStream::connect(shared.upstream).await else {
        return;
    };
    let _port = server.local_addr().ok().map(|a| {
        shared
            .ports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(a.port());
        PortGuard(shared.clone(), a.port())
    });
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // A second handle on the host's socket: when a silent partition ends
    // the server's end, the relay's halves go but the host's socket stays
    // open (a vanished peer sends no FIN) until the partition is over.
    let Some((client, host_end)) = client
        .into_std()
        .and_then(|std| Ok((std.try_clone()?, std)))
        .ok()
        .and_then(|(std, keep)| Some((TcpStream::from_std(std).ok()?, keep)))
    else {
        return;
    };
    let activity = Arc::new(Activity::new());
    let dropped = ACTIVITY
        .scope(
            activity.clone(),
            forward(client, server, shared.clone(), first, activity),
        )
        .await;
    if dropped {
        let mut mode = shared.mode.subscribe();
        let _ = mode
            .wait_for(|m| !matches!(m, Mode::SilentPartition(_)))
            .await;
    }
    drop(host_end);
}

/// When bytes last passed on one connection, either way.
struct Activity(Mutex<tokio::time::Instant>);

impl Activity {
    fn new() -> Self {
        Self(Mutex::new(tokio::time::Instant::now()))
    }

    fn touch(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = tokio::time::Instant::now();
    }

    fn last(&self) -> tokio::time::Instant {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

tokio::task_local! {
    /// The connection a relay task forwards, for [`deliver`] to note its
    /// traffic.
    static ACTIVITY: Arc<Activity>;
}

/// Resolves once the proxy is in a [`Mode::SilentPartition`] and nothing
/// has passed on this connection for its time: the server would drop it.
async fn server_drops(mut mode: watch::Receiver<Mode>, activity: Arc<Activity>) {
    loop {
        let current = *mode.borrow_and_update();
        match current {
            Mode::SilentPartition(after) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(activity.last() + after) => {
                        if matches!(*mode.borrow(), Mode::SilentPartition(_))
                            && activity.last() + after <= tokio::time::Instant::now()
                        {
                            return;
                        }
                    }
                    changed = mode.changed() => {
                        if changed.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                }
            }
            _ => {
                if mode.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// Relay one connection until either direction ends (or is reset); `true`
/// when it ended because a silent partition dropped the server's end.
async fn forward(
    client: TcpStream,
    server: TcpStream,
    shared: Arc<Shared>,
    first: Vec<u8>,
    activity: Arc<Activity>,
) -> bool {
    let (client_read, client_write) = client.into_split();
    // Kept here, not in `backend`: when a silent partition drops the
    // server's end, the host's write half must go without the shutdown
    // (FIN) its drop would send, which would tell the host.
    let mut client_write = Some(client_write);
    let (server_read, server_write) = server.into_split();
    // Set when this connection's replies are to be lost (AtCommit::LoseReply).
    let (lose_replies_tx, lose_replies) = watch::channel(false);
    // Set when the host's end is cut (FaultProxy::cut_host). The sender
    // lives as long as the relay: `backend` reads a closed channel as cut.
    let (host_cut_tx, host_cut) = watch::channel(false);
    let down = backend(
        server_read,
        &mut client_write,
        shared.mode.subscribe(),
        lose_replies,
        host_cut,
    );
    let silently = server_drops(shared.mode.subscribe(), activity);
    // When either direction ends (or is reset), drop both halves.
    let dropped = match shared.protocol {
        Protocol::Postgres => {
            let up = frontend(
                client_read,
                server_write,
                shared.clone(),
                lose_replies_tx,
                host_cut_tx,
                first,
            );
            tokio::select! {
                _ = up => false,
                _ = down => false,
                _ = silently => true,
            }
        }
        Protocol::Opaque => {
            let up = frontend_opaque(client_read, server_write, shared.clone(), lose_replies_tx);
            let dropped = tokio::select! {
                _ = up => false,
                _ = down => false,
                _ = silently => true,
            };
            drop(host_cut_tx);
            dropped
        }
    };
    if dropped && let Some(write) = client_write.take() {
        write.forget();
    }
    dropped
}

/// Write `bytes` to `to` as the mode allows: at once, after a delay, or
/// once a black-hole ends. `false` when the connection must close (reset,
/// or the write failed).
async fn deliver(to: &mut OwnedWriteHalf, bytes: &[u8], mode: &mut watch::Receiver<Mode>) -> bool {
    if bytes.is_empty() {
        return true;
    }
    loop {
        let current = *mode.borrow_and_update();
        match current {
            Mode::Pass => break,
            Mode::Latency(d) => {
                tokio::time::sleep(d).await;
                break;
            }
            Mode::Reset => return false,
            Mode::Blackhole | Mode::SilentPartition(_) => {
                if mode.changed().await.is_err() {
                    return false;
                }
            }
        }
    }
    let written = to.write_all(bytes).await.is_ok();
    if written {
        let _ = ACTIVITY.try_with(|activity| activity.touch());
    }
    written
}

/// Read a chunk, or `None` when the connection must close (EOF, error, or
/// reset).
async fn read_chunk(
    from: &mut OwnedReadHalf,
    buf: &mut [u8],
    mode: &mut watch::Receiver<Mode>,
) -> Option<usize> {
    loop {
        tokio::select! {
            read = from.read(buf) => return match read {
                Ok(0) | Err(_) => None,
                Ok(n) => Some(n),
            },
            changed = mode.changed() => {
                if changed.is_err() || *mode.borrow() == Mode::Reset {
                    return None;
                }
            }
        }
    }
}

/// Server to host: opaque bytes. Once the host's end is cut, its write
/// half is dropped (with the frontend's read half, that closes the host's
/// socket) and the server's replies are read and dropped, so the server's
/// end stays open.
async fn backend(
    mut from: OwnedReadHalf,
    to: &mut Option<OwnedWriteHalf>,
    mut mode: watch::Receiver<Mode>,
    lose_replies: watch::Receiver<bool>,
    mut host_cut: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            n = read_chunk(&mut from, &mut buf, &mut mode) => n,
            _ = host_cut.wait_for(|cut| *cut), if to.is_some() => {
                *to = None;
                continue;
            }
        };
        let Some(n) = n else { return };
        let Some(to) = to.as_mut() else { continue };
        if *lose_replies.borrow() {
            continue;
        }
        if !deliver(to, &buf[..n], &mut mode).await {
            return;
        }
    }
}

/// Answer the host's requests for encryption (`SSLRequest`,
/// `GSSENCRequest`: 8 bytes each, after which the client waits for one
/// byte) with `N`, honouring the proxy's mode, until it sends another
/// message; returns that message's first 8 bytes, or `None` when the
/// connection is to end.
async fn refuse_encryption(client: &mut TcpStream, shared: &Shared) -> Option<Vec<u8>> {
    let mut mode = shared.mode.subscribe();
    loop {
        let mut head = [0u8; 8];
        tokio::select! {
            read = client.read_exact(&mut head) => read.ok()?,
            _ = mode.wait_for(|m| *m == Mode::Reset) => return None,
        };
        let code = be_u32(&head[4..8]);
        if code != SSL_REQUEST && code != GSSENC_REQUEST {
            return Some(head.to_vec());
        }
        // In a partition the answer waits for it to heal, as the server's
        // would.
        let now = *mode
            .wait_for(|m| !matches!(m, Mode::Blackhole | Mode::SilentPartition(_)))
            .await
            .ok()?;
        match now {
            Mode::Reset => return None,
            Mode::Latency(delay) => tokio::time::sleep(delay).await,
            Mode::Pass | Mode::Blackhole | Mode::SilentPartition(_) => {}
        }
        client.write_all(b"N").await.ok()?;
    }
}

/// Startup-phase request codes (the first message has no type byte).
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const PROTOCOL_3: u32 = 196_608;
/// Largest message the proxy frames; PostgreSQL's own limit is 1 GiB, a
/// test host never comes near this.
const MAX_MESSAGE: usize = 64 << 20;

/// Host to server: framed into messages, so a `COMMIT` can be recognised
/// and a startup message rewritten.
async fn frontend(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: Arc<Shared>,
    lose_replies: watch::Sender<bool>,
    host_cut: watch::Sender<bool>,
    first: Vec<u8>,
) {
    let mut mode = shared.mode.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    // The startup message's first bytes, read while encryption was refused.
    let mut pending: Vec<u8> = first;
    let mut startup = true;
    // After AtCommit::LoseCommit struck: read and drop everything.
    let mut swallowing = false;
    // This connection's open transaction sent the armed trigger's bytes.
    let mut carried = false;
    while let Some(n) = read_chunk(&mut from, &mut buf, &mut mode).await {
        if swallowing {
            continue;
        }
        pending.extend_from_slice(&buf[..n]);
        // Complete messages go out together, as the chunk they came in.
        let mut out: Vec<u8> = Vec::new();
        while let Some(len) = message_len(&pending, startup) {
            if len > MAX_MESSAGE {
                return;
            }
            if pending.len() < len {
                break;
            }
            let message: Vec<u8> = pending.drain(..len).collect();
            if startup {
                let code = be_u32(&message[4..8]);
                startup = code == SSL_REQUEST || code == GSSENC_REQUEST;
                if code == PROTOCOL_3 {
                    let database = shared
                        .database
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    out.extend(match database {
                        Some(database) => rewrite_database(&message, &database),
                        None => message,
                    });
                } else {
                    out.extend(message);
                }
                continue;
            }
            if shared.partition_carried_by(&message) {
                // What came before it went out before the partition.
                if !deliver(&mut to, &out, &mut mode).await {
                    return;
                }
                out.clear();
                shared.partition_at(&message);
            }
            if !is_commit(&message) {
                if is_rollback(&message) {
                    carried = false;
                } else if !carried {
                    carried = shared.carries(&message);
                }
                out.extend(message);
                continue;
            }
            let Some(Trigger { at, struck, .. }) = shared.take_trigger_for(carried) else {
                carried = false;
                out.extend(message);
                continue;
            };
            carried = false;
            match at {
                AtCommit::LoseReply => {
                    // The reply may come back as soon as the COMMIT is
                    // written: lose replies first.
                    lose_replies.send_replace(true);
                    out.extend(message);
                    let delivered = deliver(&mut to, &out, &mut mode).await;
                    out.clear();
                    let _ = struck.send(());
                    if !delivered {
                        return;
                    }
                }
                AtCommit::LoseCommit => {
                    if !deliver(&mut to, &out, &mut mode).await {
                        return;
                    }
                    out.clear();
                    pending.clear();
                    swallowing = true;
                    let _ = struck.send(());
                    break;
                }
                AtCommit::Hold => {
                    if !deliver(&mut to, &out, &mut mode).await {
                        return;
                    }
                    out.clear();
                    let mut released = shared.released.subscribe();
                    released.borrow_and_update();
                    let mut cut = shared.cut.subscribe();
                    cut.borrow_and_update();
                    let _ = struck.send(());
                    // Not reading from the host meanwhile: a paused host
                    // sends nothing either.
                    let host_cut_now = tokio::select! {
                        _ = released.changed() => false,
                        _ = cut.changed() => true,
                        _ = mode.wait_for(|m| *m == Mode::Reset) => return,
                    };
                    if host_cut_now {
                        // The host's socket closes once both halves are
                        // gone: this one here, the other in `backend`.
                        drop(from);
                        host_cut.send_replace(true);
                        return held_for_the_server(to, &message, released, mode).await;
                    }
                    out.extend(message);
                }
                AtCommit::Partition => {
                    if !deliver(&mut to, &out, &mut mode).await {
                        return;
                    }
                    out.clear();
                    shared.mode.send_replace(Mode::Blackhole);
                    let _ = struck.send(());
                    // Held here until the partition heals (or is reset).
                    out.extend(message);
                }
            }
        }
        if !deliver(&mut to, &out, &mut mode).await {
            return;
        }
    }
}

/// Client to server for a protocol the proxy does not parse: chunks are
/// forwarded as they come; the first chunk that completes the armed bytes
/// (looked for across chunk boundaries) is where an armed strike fires.
async fn frontend_opaque(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: Arc<Shared>,
    lose_replies: watch::Sender<bool>,
) {
    let mut mode = shared.mode.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    // The end of what this connection sent before the current chunk.
    let mut tail: Vec<u8> = Vec::new();
    while let Some(n) = read_chunk(&mut from, &mut buf, &mut mode).await {
        let chunk = &buf[..n];
        let mut window = std::mem::take(&mut tail);
        window.extend_from_slice(chunk);
        let carried = shared.carries(&window);
        tail = window[window.len().saturating_sub(MAX_OPAQUE_CARRYING)..].to_vec();
        let Some(Trigger { at, struck, .. }) = shared.take_trigger_for(carried) else {
            if !deliver(&mut to, chunk, &mut mode).await {
                return;
            }
            continue;
        };
        match at {
            AtCommit::LoseReply => {
                lose_replies.send_replace(true);
                let delivered = deliver(&mut to, chunk, &mut mode).await;
                let _ = struck.send(());
                if !delivered {
                    return;
                }
            }
            AtCommit::LoseCommit => {
                let _ = struck.send(());
                // The server never sees this chunk or anything after it;
                // the connection stays open until the client closes it.
                while read_chunk(&mut from, &mut buf, &mut mode).await.is_some() {}
                return;
            }
            AtCommit::Hold => {
                let mut released = shared.released.subscribe();
                released.borrow_and_update();
                let _ = struck.send(());
                tokio::select! {
                    _ = released.changed() => {}
                    _ = mode.wait_for(|m| *m == Mode::Reset) => return,
                }
                if !deliver(&mut to, chunk, &mut mode).await {
                    return;
                }
            }
            AtCommit::Partition => {
                shared.mode.send_replace(Mode::Blackhole);
                let _ = struck.send(());
                // Held by the black-hole until the partition heals.
                if !deliver(&mut to, chunk, &mut mode).await {
                    return;
                }
            }
        }
    }
}

/// The rest of a connection whose host end was cut with its `COMMIT`
/// held: deliver the `COMMIT` once released, then keep the server's end
/// open (its reply goes nowhere) until the server closes it or the proxy
/// resets, so the server runs the `COMMIT` as it would a late packet's.
async fn held_for_the_server(
    mut to: OwnedWriteHalf,
    commit: &[u8],
    mut released: watch::Receiver<u64>,
    mut mode: watch::Receiver<Mode>,
) {
    tokio::select! {
        _ = released.changed() => {}
        _ = mode.wait_for(|m| *m == Mode::Reset) => return,
    }
    if !deliver(&mut to, commit, &mut mode).await {
        return;
    }
    let _ = mode.wait_for(|m| *m == Mode::Reset).await;
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// The full length of the message at the start of `pending`, once its
/// header is in.
fn message_len(pending: &[u8], startup: bool) -> Option<usize> {
    if startup {
        (pending.len() >= 4).then(|| be_u32(&pending[..4]) as usize)
    } else {
        (pending.len() >= 5).then(|| 1 + be_u32(&pending[1..5]) as usize)
    }
}

/// A simple-protocol `COMMIT` (how the driver ends a transaction).
fn is_commit(message: &[u8]) -> bool {
    is_query(message, "commit")
}

/// A simple-protocol `ROLLBACK` (how the driver abandons one).
fn is_rollback(message: &[u8]) -> bool {
    is_query(message, "rollback")
}

/// A simple-protocol query whose whole text is `text` (any case).
fn is_query(message: &[u8], text: &str) -> bool {
    message.first() == Some(&b'Q')
        && message.len() > 5
        && String::from_utf8_lossy(&message[5..])
            .trim_matches(|c: char| c == '\0' || c.is_whitespace() || c == ';')
            .eq_ignore_ascii_case(text)
}

/// A protocol-3 startup message asking for `database` instead.
fn rewrite_database(message: &[u8], database: &str) -> Vec<u8> {
    let mut params: Vec<(String, String)> = Vec::new();
    let mut fields = message[8..]
        .split(|b| *b == 0)
        .map(|f| String::from_utf8_lossy(f).into_owned());
    while let (Some(key), Some(value)) = (fields.next(), fields.next()) {
        if key.is_empty() {
            break;
        }
        params.push((key, value));
    }
    match params.iter_mut().find(|(k, _)| k == "database") {
        Some((_, value)) => *value = database.to_string(),
        None => params.push(("database".into(), database.to_string())),
    }
    let mut body = PROTOCOL_3.to_be_bytes().to_vec();
    for (key, value) in params {
        body.extend(key.as_bytes());
        body.push(0);
        body.extend(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut out = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that reads one line per connection, reports it, answers
    /// `got <line>` and closes; returns its address and the lines it read
    /// (an empty one for a connection closed before a whole line).
    async fn line_server() -> (
        std::net::SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut line = Vec::new();
                    let mut byte = [0u8; 1];
                    while conn.read(&mut byte).await.unwrap_or(0) == 1 && byte[0] != b'\n' {
                        line.push(byte[0]);
                    }
                    let line = String::from_utf8_lossy(&line).into_owned();
                    let _ = tx.send(line.clone());
                    let _ = conn.write_all(format!("got {line}").as_bytes()).await;
                });
            }
        });
        (addr, rx)
    }

    /// Send `parts` on one connection through `proxy`, then read the
    /// answer to the end (the upstream closes after answering).
    async fn exchange(proxy: &FaultProxy, parts: &[&str]) -> String {
        let mut conn = TcpStream::connect(proxy.addr()).await.unwrap();
        conn.set_nodelay(true).unwrap();
        for part in parts {
            conn.write_all(part.as_bytes()).await.unwrap();
        }
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    }

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn an_opaque_proxy_loses_the_reply_to_the_one_request_carrying_the_bytes() {
        let (upstream, mut lines) = line_server().await;
        let proxy = FaultProxy::start_opaque(upstream).await;
        let mut struck = proxy.arm_carrying(AtCommit::LoseReply, b"PUT /buckets/");
        assert_eq!(
            exchange(&proxy, &["GET /buckets/a\n"]).await,
            "got GET /buckets/a"
        );
        assert!(
            struck.try_recv().is_err(),
            "struck at a request without the bytes"
        );
        // The bytes split across two writes still strike; the server acts
        // on the request, the client hears nothing.
        let lost = exchange(&proxy, &["PUT /buck", "ets/a\n"]).await;
        assert_eq!(lost, "", "the reply reached the client");
        tokio::time::timeout(WAIT, struck).await.unwrap().unwrap();
        let mut seen = Vec::new();
        while let Ok(line) = lines.try_recv() {
            seen.push(line);
        }
        assert_eq!(seen, ["GET /buckets/a", "PUT /buckets/a"]);
        // Once: the next request carrying the bytes is answered.
        assert_eq!(
            exchange(&proxy, &["PUT /buckets/b\n"]).await,
            "got PUT /buckets/b"
        );
    }

    #[tokio::test]
    async fn an_opaque_proxy_can_lose_the_request_itself() {
        let (upstream, mut lines) = line_server().await;
        let proxy = FaultProxy::start_opaque(upstream).await;
        let struck = proxy.arm_carrying(AtCommit::LoseCommit, b"DELETE ");
        let mut conn = TcpStream::connect(proxy.addr()).await.unwrap();
        conn.write_all(b"DELETE /buckets/a\n").await.unwrap();
        tokio::time::timeout(WAIT, struck).await.unwrap().unwrap();
        // The client gives up; the server saw nothing of the request.
        drop(conn);
        let line = tokio::time::timeout(WAIT, lines.recv()).await.unwrap();
        assert_eq!(line.as_deref(), Some(""));
        assert_eq!(
            exchange(&proxy, &["DELETE /buckets/b\n"]).await,
            "got DELETE /buckets/b"
        );
    }

    /// A silent partition closes the server's end once nothing passed on
    /// it for the given time, and keeps the client's end open, hearing
    /// nothing, until the partition is over.
    #[tokio::test]
    async fn a_silent_partition_drops_only_the_servers_end_after_its_time() {
        let (upstream, mut lines) = line_server().await;
        let proxy = FaultProxy::start_opaque(upstream).await;
        let mut conn = TcpStream::connect(proxy.addr()).await.unwrap();
        conn.write_all(b"half a line").await.unwrap();
        proxy.set(Mode::SilentPartition(Duration::from_millis(300)));
        // The server reads what reached it (all or none of the bytes, as
        // the partition came before or after them) up to the close.
        let seen = tokio::time::timeout(WAIT, lines.recv()).await.unwrap();
        assert!(
            matches!(seen.as_deref(), Some("" | "half a line")),
            "the server's end is closed: {seen:?}"
        );
        let mut byte = [0u8; 1];
        assert!(
            matches!(conn.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the client's end stays open and hears nothing"
        );
        proxy.set(Mode::Pass);
        let end = tokio::time::timeout(WAIT, conn.read(&mut byte))
            .await
            .unwrap();
        assert!(
            matches!(end, Ok(0) | Err(_)),
            "closed once the partition is over"
        );
    }

    #[test]
    fn a_commit_is_recognised_in_any_case() {
        let query = |text: &str| {
            let mut m = vec![b'Q'];
            m.extend(((text.len() + 5) as u32).to_be_bytes());
            m.extend(text.as_bytes());
            m.push(0);
            m
        };
        assert!(is_commit(&query("COMMIT")));
        assert!(is_commit(&query("commit;")));
        assert!(!is_commit(&query("COMMIT PREPARED 'x'")));
        assert!(!is_commit(&query("SELECT 1")));
    }

    #[test]
    fn the_startup_database_is_replaced_and_the_rest_kept() {
        let mut body = PROTOCOL_3.to_be_bytes().to_vec();
        for field in ["user", "postgres", "database", "a", "application_name", "x"] {
            body.extend(field.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut message = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        message.extend(body);
        let rewritten = rewrite_database(&message, "other_db");
        assert_eq!(be_u32(&rewritten[..4]) as usize, rewritten.len());
        let text = String::from_utf8_lossy(&rewritten[8..]).into_owned();
        assert_eq!(
            text,
            "user\0postgres\0database\0other_db\0application_name\0x\0\0"
        );
    }
}
