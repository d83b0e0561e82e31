//! The fence: who may write, under which lease, at which epoch.
//!
//! A [`Fence`] is handed out by the authority when a lease is granted and is
//! carried by every write a guest makes. It is plain data: checking it is the
//! job of the authority (inside the write's own transaction), never of the
//! holder of the value.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A lease's fencing token. Strictly increases with each grant of one
/// `(cluster, name)`; never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A lease's address: leases of different clusters never contend, even in
/// one database.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LeaseKey {
    /// The cluster (from config) the lease belongs to.
    pub cluster: String,
    /// The lease name; for a controller, the controller's name.
    pub name: String,
}

impl LeaseKey {
    /// Build a key from its parts.
    pub fn new(cluster: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.cluster, self.name)
    }
}

/// The proof of one tenure: the lease, the epoch it was granted at and the
/// replica holding it. Every guest write carries one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fence {
    /// Which lease.
    pub key: LeaseKey,
    /// The epoch of this tenure.
    pub epoch: Epoch,
    /// The replica that holds the lease.
    pub holder: String,
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lease {} epoch {} holder {}",
            self.key, self.epoch, self.holder
        )
    }
}

/// Why a fenced write was refused: the typed cause behind every
/// "fenced" error, for metrics and for callers that act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FenceCause {
    /// The lease has no row: it was never granted.
    NeverGranted,
    /// Another epoch (or another holder) is current: the lease was granted
    /// again.
    Superseded,
    /// The tenure ended by orderly release.
    Released,
    /// The tenure outlived its expiry by the database clock.
    Expired,
}

impl FenceCause {
    /// Every cause, in a fixed order (metrics expose each from the first
    /// scrape).
    pub const ALL: [FenceCause; 4] = [
        FenceCause::NeverGranted,
        FenceCause::Superseded,
        FenceCause::Released,
        FenceCause::Expired,
    ];

    /// The cause as a metric label and in JSON: `never_granted`,
    /// `superseded`, `released`, `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            FenceCause::NeverGranted => "never_granted",
            FenceCause::Superseded => "superseded",
            FenceCause::Released => "released",
            FenceCause::Expired => "expired",
        }
    }
}

impl fmt::Display for FenceCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
