//! A host's claim on its holder name: what it is, as the rest of the host
//! sees it. Two live hosts must never run as one holder: leases, tenure
//! records and `held_here` all name the holder, so two processes sharing a
//! name would be indistinguishable in the record and each would mistake
//! the other's leases for its own. A backend that spans processes
//! (PostgreSQL) claims the name for the life of the process; the memory
//! backend is one process and needs no claim.

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

/// A running claim: dropping it gives the name up (its session closes).
#[derive(Debug)]
pub struct HolderClaim {
    state: watch::Receiver<ClaimState>,
    task: tokio::task::JoinHandle<()>,
}

impl HolderClaim {
    /// A claim kept by `task`, which publishes on the sender of `state`.
    pub fn new(state: watch::Receiver<ClaimState>, task: tokio::task::JoinHandle<()>) -> Self {
        Self { state, task }
    }

    /// The claim's state; subscribers are woken on every change.
    pub fn state(&self) -> watch::Receiver<ClaimState> {
        self.state.clone()
    }
}

impl Drop for HolderClaim {
    fn drop(&mut self) {
        self.task.abort();
    }
}
