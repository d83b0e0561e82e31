//! A host's claim on its holder name: what it is, as the rest of the host
//! sees it. Two live hosts must never run as one holder: leases, tenure
//! records and `held_here` all name the holder, so two processes sharing a
//! name would be indistinguishable in the record and each would mistake
//! the other's leases for its own. A backend that spans processes
//! (PostgreSQL) claims the name for the life of the process; the memory
//! backend is one process and needs no claim.
//!
//! The claim's session is also the host's **liveness session**: the lock
//! dies with it, so its absence is the database's verdict that the host is
//! gone (crash detection `session`). A host whose claim session ended
//! therefore ends every tenure at once, as at the renew deadline, before
//! it claims again on a new session: no tenure continues under a session
//! other than the one it was granted under ([`ClaimSession::generation`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::timeouts::LIVENESS_BUDGET;

/// Where this host's claim on its holder name stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimState {
    /// Not claimed yet (connecting, or asking for the first time).
    Pending,
    /// This process runs as the holder; no other live host does.
    Claimed,
    /// Another live host runs as this holder; the reason says who and what
    /// to do.
    Taken {
        /// Who holds the name, and what to do.
        reason: String,
    },
    /// The claim session does not reach the database this host verified
    /// (PostgreSQL: `[database] session_url` names another database, a
    /// standby, a copy or a server left behind by a failover): a lock
    /// there proves nothing where leases are granted, so this host leads
    /// nothing. The reason names both endpoints.
    WrongDatabase {
        /// What differs, naming both endpoints (redacted).
        reason: String,
    },
    /// The claim could not be made or kept (the database did not answer, or
    /// the claim's session ended); retried.
    Unreachable {
        /// What failed.
        reason: String,
    },
}

impl ClaimState {
    /// Whether this host may acquire leases as its holder.
    pub fn claimed(&self) -> bool {
        matches!(self, ClaimState::Claimed)
    }
}

/// The session a claim is held on (while it is held).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimSession {
    /// Counts the sessions this process claimed the name on, from 1: each
    /// new session (after a loss) has a new number, so a tenure can tell
    /// the session it was granted under from a later one.
    pub generation: u64,
    /// The session's server process id (`pg_backend_pid()`).
    pub pid: i32,
    /// When the session started, as the server reports it to itself.
    pub backend_start: Option<DateTime<Utc>>,
    /// The advisory lock key the session holds.
    pub key: i64,
}

/// A claim as its subscribers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimView {
    /// Where the claim stands.
    pub state: ClaimState,
    /// The session holding it: `Some` exactly while `state` is `Claimed`.
    pub session: Option<ClaimSession>,
}

impl ClaimView {
    /// Not claimed yet.
    pub fn pending() -> Self {
        Self {
            state: ClaimState::Pending,
            session: None,
        }
    }
}

/// What a host registers about itself with its claim (PostgreSQL: the
/// `leasehold_hosts` row), for operators and the lease listing.
#[derive(Debug, Clone)]
pub struct HostInfo {
    /// When this process started.
    pub started_at: DateTime<Utc>,
    /// The host's version.
    pub version: String,
    /// The controllers it runs now; a change (a config reload) is
    /// registered again.
    pub controllers: watch::Receiver<Vec<String>>,
}

impl HostInfo {
    /// This process, running the controllers `controllers` shows.
    pub fn this_process(controllers: watch::Receiver<Vec<String>>) -> Self {
        Self {
            started_at: process_started_at(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            controllers,
        }
    }
}

/// When this process started (first asked; the host asks at start-up).
pub fn process_started_at() -> DateTime<Utc> {
    static STARTED: std::sync::OnceLock<DateTime<Utc>> = std::sync::OnceLock::new();
    *STARTED.get_or_init(Utc::now)
}

/// A running claim: dropping it gives the name up (its session closes).
#[derive(Debug)]
pub struct HolderClaim {
    view: watch::Receiver<ClaimView>,
    task: tokio::task::JoinHandle<()>,
}

impl HolderClaim {
    /// A claim kept by `task`, which publishes on the sender of `view`.
    pub fn new(view: watch::Receiver<ClaimView>, task: tokio::task::JoinHandle<()>) -> Self {
        Self { view, task }
    }

    /// The claim and its session; subscribers are woken on every change.
    pub fn view(&self) -> watch::Receiver<ClaimView> {
        self.view.clone()
    }
}

impl Drop for HolderClaim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long this host still counts as alive to the server, as its claim
/// session last proved it (PostgreSQL; crash detection `session`, L8): the
/// number of the current claim session ([`ClaimSession::generation`]) and
/// the send of the last statement that session answered plus
/// [`LIVENESS_BUDGET`]. Past that instant a standby may soon take this
/// host's `session` leases over (the server drops a silent host's session
/// [`crate::timeouts::LIVENESS_MARGIN`] later at the earliest), so a
/// tenure granted under that session refuses outbound requests from then
/// on (`supervisor::identity::SessionLapse`), and the claim reports the
/// session lost. Shared:
/// the claim's task writes it, tenures read it on every request.
#[derive(Clone)]
pub struct Liveness {
    inner: Arc<LivenessInner>,
}

struct LivenessInner {
    base: Instant,
    /// The claim session it describes; 0 before the first.
    generation: AtomicU64,
    /// Nanoseconds after `base` until which the host counts as alive; 0
    /// once lapsed or ended.
    until: AtomicU64,
}

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Liveness")
            .field("generation", &self.inner.generation.load(Ordering::SeqCst))
            .field("until", &self.until())
            .finish()
    }
}

impl Default for Liveness {
    fn default() -> Self {
        Self::new()
    }
}

impl Liveness {
    /// No session yet: lapsed.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(LivenessInner {
                base: Instant::now(),
                generation: AtomicU64::new(0),
                until: AtomicU64::new(0),
            }),
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.checked_duration_since(self.inner.base)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .max(1)
    }

    /// Claim session `generation` holds the name; its claim statement was
    /// sent at `sent`. Every tenure of an earlier session has lapsed from
    /// here on.
    pub fn begin(&self, generation: u64, sent: Instant) {
        // Lapsed first, so no reader sees the new number with the former
        // session's instant.
        self.inner.until.store(0, Ordering::SeqCst);
        self.inner.generation.store(generation, Ordering::SeqCst);
        let until = self.nanos(sent + LIVENESS_BUDGET);
        self.inner.until.store(until, Ordering::SeqCst);
    }

    /// Session `generation` answered a statement sent at `sent`.
    pub fn answered(&self, generation: u64, sent: Instant) {
        if self.inner.generation.load(Ordering::SeqCst) == generation {
            let until = self.nanos(sent + LIVENESS_BUDGET);
            self.inner.until.fetch_max(until, Ordering::SeqCst);
        }
    }

    /// Session `generation` is gone (or cannot be relied on): lapsed now.
    pub fn end(&self, generation: u64) {
        if self.inner.generation.load(Ordering::SeqCst) == generation {
            self.inner.until.store(0, Ordering::SeqCst);
        }
    }

    /// The current session's number (0: none yet).
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::SeqCst)
    }

    /// Until when the current session keeps this host alive (`None`:
    /// lapsed or ended).
    pub fn until(&self) -> Option<Instant> {
        match self.inner.until.load(Ordering::SeqCst) {
            0 => None,
            nanos => Some(self.inner.base + std::time::Duration::from_nanos(nanos)),
        }
    }

    /// Whether a tenure granted under session `generation` has lapsed as of
    /// `now`: a later session holds the name, or this one has not answered
    /// for the budget, or it ended.
    pub fn lapsed_at(&self, generation: u64, now: Instant) -> bool {
        let until = self.inner.until.load(Ordering::SeqCst);
        self.inner.generation.load(Ordering::SeqCst) != generation
            || until == 0
            || self.nanos(now) >= until
    }
}
