//! The host registry as lease placement sees it: each host beats a
//! heartbeat (the backend's clock) and learns, in the same round trip, the
//! other live hosts of its cluster, the controllers each can run, how
//! many leases each holds now, and which of its own controllers' leases
//! lapsed (their holder stopped renewing without releasing).
//!
//! A host is live while its heartbeat is younger than the `live_within`
//! the caller gives (the lease ttl) and it has not deregistered; on
//! PostgreSQL also only while its holder claim lock is held (its liveness
//! session, `claim.rs`), so a host killed outright stops counting the
//! moment the server drops its session.
//!
//! Must never: decide anything about a grant. The registry only informs
//! placement; the lease protocol (L1–L8) does not read it.

use std::time::Duration;

use async_trait::async_trait;

use super::AuthorityError;

/// Another live host of the cluster, as the last heartbeat found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerHost {
    /// Its holder name.
    pub holder: String,
    /// The controllers (lease names) it can run.
    pub controllers: Vec<String>,
    /// How many leases of the cluster it holds now (not released, not
    /// expired by the backend's clock).
    pub held: usize,
}

/// What one heartbeat answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryView {
    /// Every *other* live host of the cluster, by holder name.
    pub peers: Vec<PeerHost>,
    /// The leases, among the controllers the caller runs, whose last
    /// tenure lapsed: neither released nor live by the backend's clock
    /// (their holder stopped renewing, whatever its registry row says: a
    /// holder cut off by a partition keeps its sessions, so it still looks
    /// live until its heartbeat ages out). In name order.
    pub lapsed: Vec<String>,
}

/// A backend that keeps the host registry.
#[async_trait]
pub trait HostRegistry: Send + Sync + 'static {
    /// Record that `holder` of `cluster` is live now and runs
    /// `controllers`, and answer every *other* live host of the cluster
    /// (heartbeat younger than `live_within`) and which leases of
    /// `controllers` lapsed, in one round trip.
    async fn heartbeat(
        &self,
        cluster: &str,
        holder: &str,
        controllers: &[String],
        live_within: Duration,
    ) -> Result<RegistryView, AuthorityError>;

    /// Stop counting `holder` as live (orderly shutdown); it counts again
    /// at its next heartbeat.
    async fn deregister(&self, cluster: &str, holder: &str) -> Result<(), AuthorityError>;
}
