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

use chrono::{DateTime, Utc};
use tokio::sync::watch;

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
