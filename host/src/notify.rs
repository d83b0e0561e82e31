//! Service-manager integration: the `sd_notify` protocol, written by hand,
//! and the heartbeat its watchdog messages depend on.
//!
//! A service manager that starts `leasehold run` with `NOTIFY_SOCKET` set
//! (systemd's `Type=notify`) is told, one datagram per message:
//!
//! - `READY=1` once every configured controller has settled, leading or
//!   standing by (none configured: at once);
//! - `RELOADING=1` (with `MONOTONIC_USEC`) when SIGHUP starts a reload, and
//!   `READY=1` again once it was applied or refused and the controllers
//!   settled;
//! - `STOPPING=1` when shutdown starts;
//! - `WATCHDOG=1` every half `WATCHDOG_USEC` while every loop of the host
//!   registered with the [`Heartbeat`] (the renewer, each tenure) has beaten
//!   within [`STALL_AFTER`]; a stalled loop stops the pings, so the manager
//!   restarts a host that is wedged, not merely slow to answer HTTP.
//!
//! Without `NOTIFY_SOCKET` every call is a no-op. A message that cannot be
//! sent is logged once and dropped: the manager's own timeouts cover it.
//! The protocol is one `key=value` line per variable in a Unix datagram to
//! the socket path (`@name` is an abstract-namespace socket).
//!
//! Must never: block the caller (the socket is non-blocking) or stop the
//! host because the manager went away.

use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The environment variable naming the manager's socket.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// The environment variable giving the watchdog period in microseconds.
pub const WATCHDOG_USEC_ENV: &str = "WATCHDOG_USEC";

/// How often a registered loop beats at least while it is healthy.
pub const BEAT_EVERY: Duration = Duration::from_secs(1);

/// A loop quiet for longer than this counts as stalled: three missed
/// beats, so one slow turn (a renewal round trip, a busy core) is not a
/// stall.
pub const STALL_AFTER: Duration = Duration::from_secs(3);

/// The smallest watchdog period honoured; a shorter `WATCHDOG_USEC` is
/// raised to it (pings more often than this only cost CPU).
pub const WATCHDOG_MIN: Duration = Duration::from_millis(200);

/// Why the notification socket could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// `NOTIFY_SOCKET` is neither an absolute path nor `@name`.
    #[error(
        "NOTIFY_SOCKET={0:?} is not an absolute socket path or an abstract name (@name); \
         service-manager notifications are off"
    )]
    BadAddress(String),
    /// `WATCHDOG_USEC` is not a positive number of microseconds.
    #[error("WATCHDOG_USEC={0:?} is not a positive number of microseconds; watchdog pings are off")]
    BadWatchdog(String),
    /// The socket could not be opened.
    #[error("cannot open a datagram socket for service-manager notifications: {0}")]
    Socket(std::io::Error),
}

/// Where notifications go: the manager's socket, or nowhere.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    inner: Option<Arc<Target>>,
}

#[derive(Debug)]
struct Target {
    socket: UnixDatagram,
    address: Address,
    /// Logged the first failure already.
    warned: AtomicBool,
}

#[derive(Debug)]
enum Address {
    Path(std::path::PathBuf),
    Abstract(Vec<u8>),
}

impl Notifier {
    /// A notifier that sends nothing.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// From `NOTIFY_SOCKET` as the process received it: disabled when it is
    /// unset or empty.
    pub fn from_env() -> Result<Self, NotifyError> {
        match std::env::var_os(NOTIFY_SOCKET_ENV) {
            None => Ok(Self::disabled()),
            Some(value) => Self::to(&value.to_string_lossy()),
        }
    }

    /// A notifier sending to `socket` (a path, or `@name` for the abstract
    /// namespace); an empty `socket` disables it.
    pub fn to(socket: &str) -> Result<Self, NotifyError> {
        if socket.is_empty() {
            return Ok(Self::disabled());
        }
        let address = if let Some(name) = socket.strip_prefix('@') {
            Address::Abstract(name.as_bytes().to_vec())
        } else if socket.starts_with('/') {
            Address::Path(socket.into())
        } else {
            return Err(NotifyError::BadAddress(socket.to_string()));
        };
        let socket = UnixDatagram::unbound().map_err(NotifyError::Socket)?;
        socket.set_nonblocking(true).map_err(NotifyError::Socket)?;
        Ok(Self {
            inner: Some(Arc::new(Target {
                socket,
                address,
                warned: AtomicBool::new(false),
            })),
        })
    }

    /// Whether messages go anywhere.
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Send `message` (newline-separated `KEY=value` lines). Failures are
    /// logged once and otherwise ignored.
    pub fn send(&self, message: &str) {
        let Some(target) = &self.inner else {
            return;
        };
        let sent = match &target.address {
            Address::Path(path) => target.socket.send_to(message.as_bytes(), path),
            Address::Abstract(name) => abstract_address(name)
                .and_then(|addr| target.socket.send_to_addr(message.as_bytes(), &addr)),
        };
        if let Err(e) = sent
            && !target.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(error = %e, "cannot notify the service manager; it may time the host out");
        }
    }

    /// `READY=1`, with a status line.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// `RELOADING=1` with the monotonic time systemd asks of it.
    pub fn reloading(&self) {
        self.send(&format!(
            "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the config",
            monotonic_usec()
        ));
    }

    /// `STOPPING=1`.
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=releasing leases and stopping");
    }

    /// `WATCHDOG=1`.
    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }
}

#[cfg(target_os = "linux")]
fn abstract_address(name: &[u8]) -> std::io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name)
}

#[cfg(not(target_os = "linux"))]
fn abstract_address(_name: &[u8]) -> std::io::Result<std::os::unix::net::SocketAddr> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract socket names exist on Linux only",
    ))
}

/// A status text on one line (the protocol is line-based).
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// `CLOCK_MONOTONIC` in microseconds, as `MONOTONIC_USEC` wants it.
fn monotonic_usec() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` into the pointer given,
    // which points at a live, properly aligned value.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } == 0;
    if !ok {
        return 0;
    }
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(now.tv_nsec).unwrap_or(0) / 1_000
}

/// The watchdog period from `WATCHDOG_USEC` (`None` when unset), at least
/// [`WATCHDOG_MIN`].
pub fn watchdog_period_from_env() -> Result<Option<Duration>, NotifyError> {
    match std::env::var(WATCHDOG_USEC_ENV) {
        Err(_) => Ok(None),
        Ok(text) => watchdog_period(&text).map(Some),
    }
}

/// Parse a `WATCHDOG_USEC` value.
pub fn watchdog_period(text: &str) -> Result<Duration, NotifyError> {
    match text.trim().parse::<u64>() {
        Ok(usec) if usec > 0 => Ok(Duration::from_micros(usec).max(WATCHDOG_MIN)),
        _ => Err(NotifyError::BadWatchdog(text.to_string())),
    }
}

/// The host's loops that must keep turning, each with the instant it last
/// beat. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    inner: Arc<HeartbeatInner>,
}

#[derive(Debug, Default)]
struct HeartbeatInner {
    next_id: AtomicU64,
    loops: Mutex<BTreeMap<u64, (String, Instant)>>,
}

/// One registered loop; [`Pulse::beat`] on every turn. Dropping it
/// unregisters the loop (a tenure that ended is not a stalled one).
#[derive(Debug)]
pub struct Pulse {
    heartbeat: Heartbeat,
    id: u64,
}

impl Heartbeat {
    /// No loop registered yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn loops(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (String, Instant)>> {
        self.inner
            .loops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Register a loop called `name` (for the log when it stalls); it
    /// counts as having beaten now.
    pub fn register(&self, name: impl Into<String>) -> Pulse {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.loops().insert(id, (name.into(), Instant::now()));
        Pulse {
            heartbeat: self.clone(),
            id,
        }
    }

    /// The loops quiet for longer than `bound` at `now`, by name.
    pub fn stalled(&self, now: Instant, bound: Duration) -> Vec<String> {
        self.loops()
            .values()
            .filter(|(_, last)| now.saturating_duration_since(*last) > bound)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// How many loops are registered.
    pub fn registered(&self) -> usize {
        self.loops().len()
    }
}

impl Pulse {
    /// The loop turned.
    pub fn beat(&self) {
        if let Some(entry) = self.heartbeat.loops().get_mut(&self.id) {
            entry.1 = Instant::now();
        }
    }
}

impl Drop for Pulse {
    fn drop(&mut self) {
        self.heartbeat.loops().remove(&self.id);
    }
}

/// Ping `notifier`'s watchdog every half `period` while no loop of
/// `heartbeat` stalled ([`STALL_AFTER`]); runs until dropped. A stall is
/// logged (once per stall) and the pings stop until every loop beats again.
pub async fn watchdog(notifier: Notifier, heartbeat: Heartbeat, period: Duration) {
    let mut ticks = tokio::time::interval(period / 2);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_stalled = false;
    loop {
        ticks.tick().await;
        let stalled = heartbeat.stalled(Instant::now(), STALL_AFTER);
        if stalled.is_empty() {
            if was_stalled {
                tracing::info!("every loop of the host beats again; watchdog pings resume");
            }
            was_stalled = false;
            notifier.watchdog();
        } else if !was_stalled {
            was_stalled = true;
            tracing::error!(
                stalled = ?stalled,
                quiet_for_more_than = ?STALL_AFTER,
                "loops of the host stopped beating; withholding watchdog pings so the service \
                 manager restarts the host"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver() -> (tempdir::Dir, UnixDatagram, String) {
        let dir = tempdir::Dir::new();
        let path = dir.0.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (dir, socket, path.to_string_lossy().into_owned())
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                let path = std::env::temp_dir().join(format!(
                    "leasehold-notify-{}",
                    uuid::Uuid::new_v4().simple()
                ));
                std::fs::create_dir_all(&path).unwrap();
                Self(path)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn recv(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).expect("a datagram");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn messages_arrive_as_datagrams_on_the_socket() {
        let (_dir, socket, path) = receiver();
        let notifier = Notifier::to(&path).unwrap();
        assert!(notifier.enabled());
        notifier.ready("leading 1, standby 0\nsecond line");
        assert_eq!(
            recv(&socket),
            "READY=1\nSTATUS=leading 1, standby 0 second line"
        );
        notifier.reloading();
        let reloading = recv(&socket);
        assert!(
            reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
            "{reloading}"
        );
        let usec: u64 = reloading.lines().nth(1).unwrap()[15..].parse().unwrap();
        assert!(usec > 0);
        notifier.stopping();
        assert!(recv(&socket).starts_with("STOPPING=1\n"));
        notifier.watchdog();
        assert_eq!(recv(&socket), "WATCHDOG=1");
    }

    #[test]
    fn bad_settings_are_refused_by_name_and_absent_ones_disable() {
        assert!(!Notifier::to("").unwrap().enabled());
        let e = Notifier::to("relative/path").unwrap_err();
        assert!(e.to_string().contains("NOTIFY_SOCKET"), "{e}");
        assert!(Notifier::to("@leasehold-test-abstract").unwrap().enabled());
        assert_eq!(
            watchdog_period("30000000").unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(watchdog_period("10").unwrap(), WATCHDOG_MIN);
        for bad in ["", "0", "-5", "ten"] {
            let e = watchdog_period(bad).unwrap_err();
            assert!(e.to_string().contains("WATCHDOG_USEC"), "{e}");
        }
        // A manager that went away: the send fails quietly.
        let gone = Notifier::to("/nonexistent/leasehold/notify.sock").unwrap();
        gone.watchdog();
        gone.watchdog();
    }

    #[test]
    fn a_loop_quiet_past_the_bound_is_stalled_until_it_beats_or_ends() {
        let heartbeat = Heartbeat::new();
        let renewer = heartbeat.register("renewer");
        let tenure = heartbeat.register("tenure scheduler");
        let later = Instant::now() + STALL_AFTER * 2;
        let mut stalled = heartbeat.stalled(later, STALL_AFTER);
        stalled.sort();
        assert_eq!(stalled, ["renewer", "tenure scheduler"]);
        assert!(heartbeat.stalled(Instant::now(), STALL_AFTER).is_empty());
        drop(tenure);
        assert_eq!(heartbeat.registered(), 1);
        assert_eq!(heartbeat.stalled(later, STALL_AFTER), ["renewer"]);
        renewer.beat();
        assert!(
            heartbeat
                .stalled(Instant::now() + STALL_AFTER / 2, STALL_AFTER)
                .is_empty()
        );
    }

    /// Pings stop while a loop is stalled and resume when it beats.
    #[tokio::test(start_paused = true)]
    async fn the_watchdog_pings_only_while_every_loop_beats() {
        let (_dir, socket, path) = receiver();
        socket.set_nonblocking(true).unwrap();
        let notifier = Notifier::to(&path).unwrap();
        let heartbeat = Heartbeat::new();
        let pulse = heartbeat.register("renewer");
        let period = Duration::from_secs(2);
        let task = tokio::spawn(watchdog(notifier, heartbeat.clone(), period));
        let drain = || {
            let mut n = 0;
            let mut buf = [0u8; 64];
            while let Ok(len) = socket.recv(&mut buf) {
                assert_eq!(&buf[..len], b"WATCHDOG=1");
                n += 1;
            }
            n
        };
        // Beating every half second: a ping every second.
        for _ in 0..8 {
            pulse.beat();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(drain() >= 3, "pings while beating");
        // Paused tokio time does not move `Instant`, so a stall is staged
        // by registering a loop whose last beat lies in the past.
        let stalled = heartbeat.register("tenure");
        heartbeat
            .loops()
            .get_mut(&stalled.id)
            .expect("registered")
            .1 = Instant::now() - STALL_AFTER * 2;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        drain();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(drain(), 0, "no ping while a loop is stalled");
        stalled.beat();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(drain() >= 1, "pings resume");
        task.abort();
    }
}
