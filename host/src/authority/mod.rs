//! The lease authority: acquire, renew, release, observe and the tenure
//! history, with strictly increasing fencing epochs (L1–L6 in ARCHITECTURE.md).
//!
//! Owns: lease rows, tenure records, database identity checks, the
//! release notifications standbys wait on, and the fence check every
//! fenced write runs inside its own transaction.
//!
//! Must never: know about Wasm, objects or events; compare host wall
//! clocks (expiry is the backend's clock: the database's, or the memory
//! backend's monotonic clock); keep a lease alive through a session-scoped
//! lock on a pooled connection.

pub mod claim;
pub mod fence_check;
pub mod hosts;
pub mod memory;
pub mod postgres;
pub mod sharding;
pub mod sqlite;
pub mod timeline_floor;
mod wakes;

#[cfg(test)]
mod conformance;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use thiserror::Error;

use crate::fence::{Epoch, Fence, FenceCause, LeaseKey};
use crate::names::{NameError, check_holder, check_label};
pub use sharding::{RecordedSharding, ShardingConflict, ShardingRefusal, ShardingRule};

/// Timing of one lease: how long a grant lasts and when the holder gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// Grant lifetime without renewal, judged by the backend's clock.
    pub ttl: Duration,
    /// How often the holder renews.
    pub renew_interval: Duration,
    /// The holder treats the lease as lost at last successful renew *sent*
    /// plus this (L3). Must be below `ttl`.
    pub renew_deadline: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self {
            ttl: crate::timeouts::LEASE_TTL,
            renew_interval: crate::timeouts::RENEW_INTERVAL,
            renew_deadline: crate::timeouts::RENEW_DEADLINE,
        }
    }
}

impl LeaseTiming {
    /// Check `0 < renew_interval < renew_deadline < ttl`.
    pub fn validate(&self) -> Result<(), String> {
        if self.ttl.is_zero() {
            return Err("lease_ttl must be greater than zero".into());
        }
        if self.renew_interval.is_zero() {
            return Err("renew_interval must be greater than zero".into());
        }
        if !(self.renew_interval < self.renew_deadline && self.renew_deadline < self.ttl) {
            return Err(format!(
                "lease timing must satisfy renew_interval < renew_deadline < lease_ttl, got {} < {} < {}",
                humantime::format_duration(self.renew_interval),
                humantime::format_duration(self.renew_deadline),
                humantime::format_duration(self.ttl),
            ));
        }
        Ok(())
    }

    /// When a holder must treat its lease as lost (L3): the moment the last
    /// renewal (or the acquire) that succeeded was *sent*, plus
    /// `renew_deadline`. Measured on the holder's monotonic clock: it only
    /// ever shortens the tenure, so it never needs the backend's clock.
    pub fn lost_at(&self, last_success_sent: tokio::time::Instant) -> tokio::time::Instant {
        last_success_sent + self.renew_deadline
    }
}

/// Why a tenure ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The holder released it in order (shutdown, controller removed).
    Released,
    /// It expired without renewal and was found expired at the next grant.
    Expired,
    /// The holder detected it lost the lease (renew refused or deadline
    /// passed) and gave it up.
    Lost,
    /// A new grant was made while this tenure's row was still unended
    /// (e.g. the holder crashed and nobody recorded an end).
    Superseded,
}

impl EndReason {
    /// The name stored in the history and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Released => "released",
            EndReason::Expired => "expired",
            EndReason::Lost => "lost",
            EndReason::Superseded => "superseded",
        }
    }
}

/// How a tenure may be taken over when its holder dies without releasing
/// it: configured per controller (`crash_detection`), recorded with each
/// grant, and judged by the backend at the next grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashDetection {
    /// Also when the holder's liveness session is gone (PostgreSQL: no
    /// session with the pid the grant recorded holds the holder's claim
    /// lock any more), judged by the database inside the grant: a standby
    /// leads within a fraction of a second of a crash. The ttl still
    /// covers what the server cannot see (a partition that leaves the
    /// holder's session open). The default.
    #[default]
    Session,
    /// Only once the grant was released or expired (the ttl after its
    /// last renewal).
    Ttl,
}

impl CrashDetection {
    /// Every mode, in the order the config lists them.
    pub const ALL: [CrashDetection; 2] = [CrashDetection::Session, CrashDetection::Ttl];

    /// The name in the config, the database and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            CrashDetection::Session => "session",
            CrashDetection::Ttl => "ttl",
        }
    }

    /// The mode named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.as_str() == name)
    }
}

/// Why lease placement moved a lease (`supervisor/placement.rs`): the
/// `reason` label of `leasehold_placement_moves_total`, and the reason a
/// lease's last move records ([`PlacementMove`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveReason {
    /// Its holder held more than its share + slack while another live host
    /// able to run the lease held less than its share: handed over by
    /// orderly release.
    OverShare,
    /// A host took it beyond its own share + slack because no other live
    /// host able to run it was below its own (a host died, or nobody else
    /// runs that controller).
    NoOtherHost,
    /// A host took it beyond its own share + slack because it lapsed: its
    /// holder stopped renewing without releasing it (cut off by a
    /// partition, stopped, or dead with its session still open), so any
    /// host takes it as it would without placement.
    Lapsed,
}

impl MoveReason {
    /// Every reason, in the order `/metrics` lists them.
    pub const ALL: [MoveReason; 3] = [
        MoveReason::OverShare,
        MoveReason::NoOtherHost,
        MoveReason::Lapsed,
    ];

    /// The name in metrics, the database and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveReason::OverShare => "over_share",
            MoveReason::NoOtherHost => "no_other_host",
            MoveReason::Lapsed => "lapsed",
        }
    }

    /// The reason named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == name)
    }
}

/// A lease's last placement move, as the grant that made it recorded it
/// (see ARCHITECTURE.md, "Placement").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacementMove {
    /// Why it moved.
    pub reason: MoveReason,
    /// When the grant that completed the move was made (backend clock).
    pub at: DateTime<Utc>,
    /// The holder it moved from; `None` when that grant was the lease's
    /// first.
    pub from: Option<String>,
    /// The holder it moved to.
    pub to: String,
}

/// The liveness session a lease's grant recorded, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HolderSession {
    /// The server process id of the holder's liveness session when the
    /// lease was granted.
    pub pid: i32,
    /// When that session started, from the holder's own registration
    /// (`None` if its host never registered, or registered another
    /// session since).
    pub backend_start: Option<DateTime<Utc>>,
}

/// A request for a lease.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    /// Which lease.
    pub key: LeaseKey,
    /// Who asks.
    pub holder: String,
    /// Grant lifetime.
    pub ttl: Duration,
}

/// A successful grant.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The fence of the new tenure.
    pub fence: Fence,
    /// When the backend's clock granted it.
    pub acquired_at: DateTime<Utc>,
    /// When it expires unless renewed.
    pub expires_at: DateTime<Utc>,
    /// The placement move this grant recorded as the lease's last move
    /// ([`Authority::acquire_placed`]), if it recorded one: `None` for a
    /// grant back to the same holder, or one no reason came with.
    pub moved: Option<MoveReason>,
    /// The lease's settled position, as its earlier tenures last recorded
    /// it ([`Authority::renew_settled`], [`Authority::release_settled`]):
    /// every change of the store's change stream at or before it was
    /// reconciled by the controller, so the new tenure's worker reads the
    /// stream from there and is woken by every change after it, deletions
    /// included. `None`: none recorded yet (the lease's first tenure, or
    /// no tenure's worker ran long enough to record one).
    pub settled: Option<u64>,
}

/// The answer to an acquire attempt.
#[derive(Debug, Clone)]
pub enum Acquired {
    /// The lease is ours.
    Granted(Grant),
    /// Someone else holds it until (at least) the given time.
    Held {
        /// The current holder.
        holder: String,
        /// The current epoch.
        epoch: Epoch,
        /// When the current grant expires unless renewed.
        expires_at: DateTime<Utc>,
    },
}

/// The answer to a renew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewed {
    /// Extended until the given time.
    Extended {
        /// New expiry (backend clock).
        expires_at: DateTime<Utc>,
    },
    /// The lease is no longer this fence's: another epoch, released, or
    /// already expired. The holder must abort its guest now.
    Lost,
}

/// A lease as observed now.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseRecord {
    /// The lease name.
    pub name: String,
    /// The last holder.
    pub holder: String,
    /// The current (last granted) epoch.
    pub epoch: Epoch,
    /// When the current tenure was granted.
    pub acquired_at: DateTime<Utc>,
    /// When the current grant expires unless renewed.
    pub expires_at: DateTime<Utc>,
    /// Whether the lease was released.
    pub released: bool,
    /// Whether a tenure is running now: not released and not expired.
    pub active: bool,
    /// How the current tenure may be taken over if its holder dies
    /// (recorded by its grant; `ttl` for grants made before it was).
    pub crash_detection: CrashDetection,
    /// The liveness session the current grant was made under, when the
    /// backend knows one.
    pub holder_session: Option<HolderSession>,
    /// The last time placement moved this lease, and why; `None` if it
    /// never did.
    pub last_move: Option<PlacementMove>,
}

/// One tenure in the history (L6).
#[derive(Debug, Clone, Serialize)]
pub struct TenureRecord {
    /// The tenure's epoch.
    pub epoch: Epoch,
    /// Who held it.
    pub holder: String,
    /// The database endpoint the holder used, password redacted.
    pub endpoint: String,
    /// When it was granted.
    pub acquired_at: DateTime<Utc>,
    /// When it ended; `None` while running.
    pub ended_at: Option<DateTime<Utc>>,
    /// Why it ended; `None` while running.
    pub end_reason: Option<EndReason>,
    /// How many fenced commits it made.
    pub writes: u64,
    /// When its last fenced commit landed.
    pub last_write_at: Option<DateTime<Utc>>,
    /// How many outbound HTTP requests its guests sent (recorded when the
    /// tenure ends; 0 while it runs, or if its host died first).
    pub outbound_requests: u64,
    /// When the last of them left, by the sending host's clock.
    pub last_outbound_at: Option<DateTime<Utc>>,
}

/// What the database says it is. Checked before any acquisition (point 4 of
/// docs/design.md) and, on PostgreSQL, inside every renewal, release and
/// write transaction.
///
/// Which parts survive what (see "Running in production" in the README):
///
/// | | `database_id` | `system_identifier` | `database_oid` | `timeline` |
/// |---|---|---|---|---|
/// | failover to a streaming standby | kept | kept | kept | grows |
/// | `CREATE DATABASE … TEMPLATE` | copied | kept | new | kept |
/// | `pg_dump` and restore | copied | new, or kept on the same server | new (rarely the same) | other |
/// | physical backup restored elsewhere | copied | kept | kept | grows |
///
/// A copy made by `TEMPLATE` or restore is recognised by the row itself:
/// `leasehold_database` records the system identifier and oid of the
/// database it was created in (migration 11), and a database whose own
/// differ is a copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatabaseIdentity {
    /// The uuid created by the first migration.
    pub database_id: uuid::Uuid,
    /// `pg_control_system().system_identifier` (0 for the memory backend).
    pub system_identifier: u64,
    /// The database's oid in `pg_database` (0 for the memory backend): a
    /// template copy or a restore gets a new one.
    pub database_oid: u32,
    /// `current_database()` (empty for the memory backend); shown, never
    /// compared (renaming a database keeps it the same database).
    pub database_name: String,
    /// The server's WAL timeline, which every promotion of a standby
    /// raises; `None` while the server is in recovery (and for the memory
    /// backend).
    pub timeline: Option<u32>,
    /// `pg_is_in_recovery()`: a standby must never grant leases.
    pub in_recovery: bool,
    /// `transaction_read_only` in the session that answered: every write
    /// there fails (SQLSTATE 25006) until a session opened later says no.
    pub read_only: bool,
    /// The endpoint, password redacted.
    pub endpoint: String,
}

impl DatabaseIdentity {
    /// Every way `now` is not the database `self` is (empty: the same
    /// one). Compares the uuid, the system identifier and the oid; the
    /// name, the timeline and the recovery state are not identity (a
    /// rename, a failover and a restart keep the database the same).
    pub fn differences(&self, now: &DatabaseIdentity) -> Vec<String> {
        let mut differences = Vec::new();
        if self.database_id != now.database_id {
            differences.push(format!(
                "database id is {} but was {}",
                now.database_id, self.database_id
            ));
        }
        if self.system_identifier != now.system_identifier {
            differences.push(format!(
                "system identifier is {} but was {}",
                now.system_identifier, self.system_identifier
            ));
        }
        if self.database_oid != now.database_oid {
            differences.push(format!(
                "database {:?} has oid {} but the verified database {:?} had oid {}",
                now.database_name, now.database_oid, self.database_name, self.database_oid
            ));
        }
        differences
    }
}

/// What a write must find: the identity verified when the host started
/// (its uuid, and, when known, the server's system identifier and the
/// database's oid). A store pinned to it refuses to write anywhere else
/// and through a server in recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedDatabase {
    /// `leasehold_database.id`.
    pub database_id: uuid::Uuid,
    /// The server's system identifier, when pinned.
    pub system_identifier: Option<u64>,
    /// The database's oid, when pinned.
    pub database_oid: Option<u32>,
    /// The newest schema version this host knows, when pinned: a database
    /// a newer host migrated further is refused (upgrade this host).
    pub schema_version: Option<i32>,
    /// The server's timeline when the identity was verified, if known.
    pub timeline: Option<u32>,
}

impl From<uuid::Uuid> for PinnedDatabase {
    fn from(database_id: uuid::Uuid) -> Self {
        Self {
            database_id,
            system_identifier: None,
            database_oid: None,
            schema_version: None,
            timeline: None,
        }
    }
}

impl From<&DatabaseIdentity> for PinnedDatabase {
    fn from(identity: &DatabaseIdentity) -> Self {
        Self {
            database_id: identity.database_id,
            system_identifier: Some(identity.system_identifier),
            database_oid: Some(identity.database_oid),
            schema_version: Some(postgres::required_schema_version()),
            timeline: identity.timeline,
        }
    }
}

impl PinnedDatabase {
    /// Why a write must not go to the database that answered `found`
    /// (`None`: it may), naming every difference.
    pub fn refusal(&self, found: &WriteTarget) -> Option<String> {
        let mut problems = Vec::new();
        if found.in_recovery {
            problems
                .push("the server is in recovery (a standby): writes need the primary".to_string());
        }
        if found.database_id != self.database_id {
            problems.push(format!(
                "database id is {} but {} was verified",
                found.database_id, self.database_id
            ));
        }
        if let Some(sys) = self.system_identifier
            && sys != found.system_identifier
        {
            problems.push(format!(
                "system identifier is {} but {sys} was verified",
                found.system_identifier
            ));
        }
        if let Some(oid) = self.database_oid
            && oid != found.database_oid
        {
            problems.push(format!(
                "database {:?} has oid {} but oid {oid} was verified",
                found.database_name, found.database_oid
            ));
        }
        if let (Some(known), Some(found)) = (self.schema_version, found.schema_version)
            && found > known
        {
            problems.push(crate::db::newer_schema(&[found], known));
        }
        (!problems.is_empty()).then(|| problems.join("; "))
    }
}

/// What a write transaction reads about the database it reached (one
/// statement in its first flight).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteTarget {
    /// `leasehold_database.id`.
    pub database_id: uuid::Uuid,
    /// The server's system identifier.
    pub system_identifier: u64,
    /// The database's oid.
    pub database_oid: u32,
    /// `current_database()`.
    pub database_name: String,
    /// `pg_is_in_recovery()`.
    pub in_recovery: bool,
    /// The newest schema migration applied.
    pub schema_version: Option<i32>,
    /// The server's WAL timeline (`None` in recovery).
    pub timeline: Option<u32>,
}

/// Record that database `(system_identifier, database_oid)` was seen on
/// WAL `timeline`; returns why that server must be refused when this
/// process saw the database on a higher timeline before: it is a former
/// primary that a failover left behind (started again without being
/// rewound), and what it acknowledges is lost with the rewind. Shared by
/// the lease authority and the store of a process, so a host that renewed
/// on the new primary refuses to write to the old one, and the other way
/// round.
pub fn sight_timeline(system_identifier: u64, database_oid: u32, timeline: u32) -> Option<String> {
    static SEEN: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<(u64, u32), u32>>> =
        std::sync::LazyLock::new(Default::default);
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Seeded, the first time, by what this host recorded before it
    // restarted (timeline_floor), which a raise updates.
    let mut first = false;
    let highest = seen
        .entry((system_identifier, database_oid))
        .or_insert_with(|| {
            first = true;
            timeline_floor::recorded(system_identifier, database_oid).unwrap_or(timeline)
        });
    let before = *highest;
    *highest = before.max(timeline);
    if first || timeline > before {
        timeline_floor::record(system_identifier, database_oid, *highest);
    }
    (timeline < before).then(|| {
        format!(
            "the server is on timeline {timeline} but this host saw this database on timeline \
             {before}: it is a former primary that a failover left behind"
        )
    })
}

/// A store's [`PinnedDatabase`], judged with the timelines this process
/// saw ([`sight_timeline`]).
#[derive(Debug)]
pub struct WritePin {
    pinned: PinnedDatabase,
}

impl WritePin {
    /// Start from `pinned` (and record its timeline, if known).
    pub fn new(pinned: PinnedDatabase) -> Self {
        if let (Some(sys), Some(oid), Some(timeline)) = (
            pinned.system_identifier,
            pinned.database_oid,
            pinned.timeline,
        ) {
            sight_timeline(sys, oid, timeline);
        }
        Self { pinned }
    }

    /// Why a write must not go to the database that answered `found`
    /// ([`PinnedDatabase::refusal`], and a timeline below the highest this
    /// process saw); `None`: it may.
    pub fn refusal(&self, found: &WriteTarget) -> Option<String> {
        let mut problems: Vec<String> = self.pinned.refusal(found).into_iter().collect();
        if let Some(timeline) = found.timeline
            && let Some(former) =
                sight_timeline(found.system_identifier, found.database_oid, timeline)
        {
            problems.push(former);
        }
        (!problems.is_empty()).then(|| problems.join("; "))
    }
}

/// What the operator pinned: the host refuses to lead if the database
/// differs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpectedIdentity {
    /// Expected database uuid.
    pub database_id: Option<uuid::Uuid>,
    /// Expected server system identifier.
    pub system_identifier: Option<u64>,
}

impl ExpectedIdentity {
    /// Compare, and name every difference.
    pub fn verify(&self, actual: &DatabaseIdentity) -> Result<(), AuthorityError> {
        let mut problems = Vec::new();
        if actual.in_recovery {
            problems
                .push("the server is in recovery (a standby); leases need the primary".to_string());
        }
        if let Some(id) = self.database_id
            && id != actual.database_id
        {
            problems.push(format!(
                "database id is {} but {} is expected",
                actual.database_id, id
            ));
        }
        if let Some(sys) = self.system_identifier
            && sys != actual.system_identifier
        {
            problems.push(format!(
                "system identifier is {} but {} is expected",
                actual.system_identifier, sys
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(AuthorityError::WrongDatabase {
                endpoint: actual.endpoint.clone(),
                problems: problems.join("; "),
            })
        }
    }
}

/// Lease authority failures.
#[derive(Debug, Error)]
pub enum AuthorityError {
    /// A lease, cluster or holder name broke the syntax rules.
    #[error(transparent)]
    InvalidName(#[from] NameError),
    /// A request was malformed (e.g. a zero ttl).
    #[error("invalid lease request for {key}: {reason}")]
    Invalid {
        /// Which lease.
        key: LeaseKey,
        /// What was wrong.
        reason: String,
    },
    /// The fence is no longer current: another epoch was granted, the lease
    /// was released, or it expired.
    #[error("fenced: {fence} is no longer current ({reason})")]
    Fenced {
        /// The stale fence.
        fence: Fence,
        /// Why, typed.
        cause: FenceCause,
        /// What the authority saw instead.
        reason: String,
    },
    /// The database is not the one this host must lead against.
    #[error("refusing to lead against {endpoint}: {problems}")]
    WrongDatabase {
        /// Where we connected (password redacted).
        endpoint: String,
        /// Every difference found.
        problems: String,
    },
    /// The schema is missing or older than this host; run `leasehold migrate`.
    #[error("database schema at {endpoint} is not ready: {reason}; run `leasehold migrate`")]
    Schema {
        /// Where (password redacted).
        endpoint: String,
        /// What is missing.
        reason: String,
    },
    /// The controller's sharding recorded with its leases is not this
    /// host's (another shard count, shard label or every-shard kinds), or
    /// another controller's record runs one of its leases; or a change of
    /// the record was asked for while a lease of the controller is held
    /// (see [`sharding`]).
    #[error(transparent)]
    Sharding(Box<ShardingRefusal>),
    /// The backend could not be reached or failed.
    #[error("lease backend unavailable at {endpoint}: {reason}")]
    Unavailable {
        /// Where (password redacted).
        endpoint: String,
        /// The underlying failure (never with credentials).
        reason: String,
    },
}

/// Check a lease key: cluster and lease name are DNS labels.
pub fn validate_key(key: &LeaseKey) -> Result<(), AuthorityError> {
    check_label("cluster", &key.cluster)?;
    check_label("lease", &key.name)?;
    Ok(())
}

/// Check a fence's names before it is sent anywhere.
pub fn validate_fence(fence: &Fence) -> Result<(), AuthorityError> {
    validate_key(&fence.key)?;
    check_holder(&fence.holder)?;
    Ok(())
}

/// Check a grant lifetime: a zero ttl would grant a lease that is already
/// expired, which no caller can mean.
pub fn validate_ttl(key: &LeaseKey, ttl: Duration) -> Result<(), AuthorityError> {
    if ttl.is_zero() {
        return Err(AuthorityError::Invalid {
            key: key.clone(),
            reason: "the lease ttl must be greater than zero".into(),
        });
    }
    Ok(())
}

/// Check an acquire request: names and ttl.
pub fn validate_request(request: &AcquireRequest) -> Result<(), AuthorityError> {
    validate_key(&request.key)?;
    check_holder(&request.holder)?;
    validate_ttl(&request.key, request.ttl)
}

/// One lease backend. Implementations: PostgreSQL (production) and memory
/// (single process; tests and development).
#[async_trait]
pub trait Authority: Send + Sync + 'static {
    /// The identity of the backing database.
    async fn identity(&self) -> Result<DatabaseIdentity, AuthorityError>;

    /// Try to take the lease. Grants only if the row is absent, released or
    /// expired by the backend's clock, or its holder's liveness session is
    /// gone and its grant asked for [`CrashDetection::Session`] (L2); a
    /// grant's epoch is previous + 1 (L1) and opens a tenure record; a
    /// still-open previous tenure is ended as `expired` (or `superseded`).
    /// The new grant may only be taken over once released or expired
    /// ([`CrashDetection::Ttl`]); see [`Authority::acquire_detected`].
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquired, AuthorityError>;

    /// [`Authority::acquire`], with the grant recording `detection`: how
    /// the new tenure may be taken over if this host dies. A backend (or
    /// wrapper) without liveness sessions grants as [`CrashDetection::Ttl`]
    /// (the default here): slower takeover, never a wrong one.
    async fn acquire_detected(
        &self,
        request: &AcquireRequest,
        detection: CrashDetection,
    ) -> Result<Acquired, AuthorityError> {
        let _ = detection;
        self.acquire(request).await
    }

    /// [`Authority::acquire_detected`] for an acquire that lease placement
    /// allowed beyond this host's share, for `moved`
    /// ([`MoveReason::NoOtherHost`] or [`MoveReason::Lapsed`]; `None`: an
    /// ordinary acquire). The grant records the lease's last move in its
    /// own transaction ([`LeaseRecord::last_move`]): the reason an orderly
    /// release left on the row ([`Authority::release_placed`]), else
    /// `moved`, whenever the new holder differs from the previous one; a
    /// grant back to the same holder moves nothing. Every grant clears the
    /// reason a release left. The default (a wrapper that does not forward
    /// it) grants without recording anything: only the record is lost.
    async fn acquire_placed(
        &self,
        request: &AcquireRequest,
        detection: CrashDetection,
        moved: Option<MoveReason>,
    ) -> Result<Acquired, AuthorityError> {
        let _ = moved;
        self.acquire_detected(request, detection).await
    }

    /// [`Authority::acquire_placed`] of a lease that the controller
    /// `sharding.controller` runs under `sharding` (its shard count, shard
    /// label and every-shard kinds; [`sharding`]; `None`: not judged, as
    /// [`Authority::acquire_placed`]). Judged in the acquire's
    /// own transaction, whether the lease is then granted or found held:
    /// the first acquire of any of the controller's leases records the rule
    /// and the leases it runs, by [`sharding::by_holder`] of the request's
    /// holder; a rule that differs from the record is refused
    /// ([`AuthorityError::Sharding`], [`ShardingConflict::Differs`]), and
    /// so is a rule one of whose leases another controller's record runs
    /// ([`ShardingConflict::Collision`]). A grant keeps the record from
    /// changing until it commits ([`Authority::reshard`]). The default (a
    /// wrapper that does not forward it) acquires without the judgement:
    /// every backend of this crate overrides it.
    async fn acquire_sharded(
        &self,
        request: &AcquireRequest,
        detection: CrashDetection,
        moved: Option<MoveReason>,
        sharding: Option<&ShardingRule>,
    ) -> Result<Acquired, AuthorityError> {
        let _ = sharding;
        self.acquire_placed(request, detection, moved).await
    }

    /// The sharding recorded for each controller of `cluster`, by
    /// controller name. The default (a wrapper that does not forward it)
    /// knows none.
    async fn shardings(&self, cluster: &str) -> Result<Vec<RecordedSharding>, AuthorityError> {
        let _ = cluster;
        Ok(Vec::new())
    }

    /// Change the record of `controller`'s sharding to `next` (`None`:
    /// forget it, so that the next acquire records the acquiring host's),
    /// recorded by `by`; answers the record it replaced. Refused
    /// ([`ShardingConflict::Held`]) while any lease of the controller under
    /// the recorded rule or `next` is held (not released, not expired), and
    /// ([`ShardingConflict::Collision`]) when another controller's record
    /// runs one of `next`'s leases. Takes the record's lock before it looks
    /// at the leases, so it never lands between a grant's judgement and its
    /// commit. The default (a wrapper that does not forward it) refuses.
    async fn reshard(
        &self,
        cluster: &str,
        controller: &str,
        next: Option<&ShardingRule>,
        by: &str,
    ) -> Result<Option<RecordedSharding>, AuthorityError> {
        let _ = (next, by);
        Err(AuthorityError::Invalid {
            key: LeaseKey::new(cluster, controller),
            reason: "this lease backend does not record sharding".into(),
        })
    }

    /// Extend every given lease by `ttl` in one round trip, if holder and
    /// epoch still match and it has not expired. Results are in input order.
    async fn renew(&self, fences: &[Fence], ttl: Duration) -> Result<Vec<Renewed>, AuthorityError>;

    /// [`Authority::renew`], recording with each renewal that extends its
    /// lease the fence's settled position, `settled[i]` for `fences[i]`
    /// (`None` keeps the one recorded): fenced like the renewal itself, so
    /// a stale tenure never records one. The next grant of the lease
    /// answers the last one recorded ([`Grant::settled`]). The default (a
    /// wrapper that does not forward it) renews without recording: the
    /// successor then starts its worker at the stream's head, as a first
    /// tenure does.
    async fn renew_settled(
        &self,
        fences: &[Fence],
        settled: &[Option<u64>],
        ttl: Duration,
    ) -> Result<Vec<Renewed>, AuthorityError> {
        let _ = settled;
        self.renew(fences, ttl).await
    }

    /// End the tenure: mark the row released (if the fence is still
    /// current), record `reason` in the history, and wake standbys. Safe to
    /// call after loss: it then only records the end.
    async fn release(&self, fence: &Fence, reason: EndReason) -> Result<(), AuthorityError>;

    /// [`Authority::release`] of a tenure that lease placement handed over
    /// for `moved` ([`MoveReason::OverShare`]; `None`: an ordinary
    /// release). When the release marks the row released, it also records
    /// `moved` on the row in the same transaction, and the next grant to
    /// another holder records the move ([`Authority::acquire_placed`]). The
    /// default (a wrapper that does not forward it) releases without
    /// recording anything: only the record is lost.
    async fn release_placed(
        &self,
        fence: &Fence,
        reason: EndReason,
        moved: Option<MoveReason>,
    ) -> Result<(), AuthorityError> {
        let _ = moved;
        self.release(fence, reason).await
    }

    /// [`Authority::release_placed`], recording the tenure's final settled
    /// position (see [`Authority::renew_settled`]) when the release marks
    /// the row released (`None` keeps the one recorded). The default (a
    /// wrapper that does not forward it) releases without recording: the
    /// successor replays from the last renewal's position instead.
    async fn release_settled(
        &self,
        fence: &Fence,
        reason: EndReason,
        moved: Option<MoveReason>,
        settled: Option<u64>,
    ) -> Result<(), AuthorityError> {
        let _ = settled;
        self.release_placed(fence, reason, moved).await
    }

    /// Every lease of a cluster, as it is now.
    async fn observe(&self, cluster: &str) -> Result<Vec<LeaseRecord>, AuthorityError>;

    /// The tenures of one lease, newest first, at most `limit`.
    async fn history(
        &self,
        key: &LeaseKey,
        limit: usize,
    ) -> Result<Vec<TenureRecord>, AuthorityError> {
        self.history_before(key, None, limit).await
    }

    /// The tenures of one lease with an epoch below `before` (all of them
    /// when `None`), newest first, at most `limit`: the page that follows a
    /// page ending at epoch `before`.
    async fn history_before(
        &self,
        key: &LeaseKey,
        before: Option<Epoch>,
        limit: usize,
    ) -> Result<Vec<TenureRecord>, AuthorityError>;

    /// Record the outbound HTTP requests of the tenure `fence`: how many
    /// left the host and when the last did. Not fenced: it is a statistic
    /// of a tenure that may already have ended (it is written after the
    /// guest stopped), so it only needs the tenure's row. Each value only
    /// grows (`greatest`): a late or repeated call never lowers it. A
    /// tenure no longer in the history is left alone.
    async fn record_outbound(
        &self,
        fence: &Fence,
        requests: u64,
        last_at: Option<DateTime<Utc>>,
    ) -> Result<(), AuthorityError>;

    /// A receiver woken whenever a lease of `cluster` is released (NOTIFY
    /// for PostgreSQL). Wakes may be spurious or coalesced; candidates
    /// simply retry acquiring.
    fn released(&self, cluster: &str) -> tokio::sync::watch::Receiver<u64>;

    /// A receiver woken when the lease `key`, which this host waits for,
    /// is held under a [`CrashDetection::Session`] grant whose holder's
    /// liveness session is gone, so an acquire now would succeed. Looked
    /// for in one batched query per interval for all the leases with a
    /// live receiver (PostgreSQL: [`crate::timeouts::TAKEOVER_SCAN`]);
    /// dropping the receiver stops looking. Wakes may be spurious;
    /// candidates simply retry acquiring. `None`: the backend cannot tell
    /// (one process: a holder's session is the process itself).
    fn dead_holder(&self, key: &LeaseKey) -> Option<tokio::sync::watch::Receiver<u64>> {
        let _ = key;
        None
    }

    /// Claim `holder` of `cluster` among the live hosts for as long as the
    /// returned claim is kept (see [`claim`]), registering `host` with the
    /// claim's session. `None`: this backend serves one process, so no
    /// other host can run as the same holder.
    fn claim_holder(
        &self,
        cluster: &str,
        holder: &str,
        host: claim::HostInfo,
    ) -> Option<claim::HolderClaim> {
        let _ = (cluster, holder, host);
        None
    }

    /// How long this host still counts as alive to the server, as the
    /// liveness session of its claim on `holder` of `cluster` last proved
    /// it ([`claim::Liveness`]; PostgreSQL: the claim session's answers
    /// plus [`crate::timeouts::LIVENESS_BUDGET`]). A `session` tenure ends
    /// by it too: a standby may take a `session` lease over once the
    /// holder's session is gone, which the holder may never hear of.
    /// `None`: the backend's liveness cannot lapse unnoticed (one process,
    /// or a lock the kernel frees with the process).
    fn liveness(&self, cluster: &str, holder: &str) -> Option<claim::Liveness> {
        let _ = (cluster, holder);
        None
    }
}
