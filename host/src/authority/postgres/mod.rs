//! The production lease backend: lease rows in PostgreSQL, judged by the
//! database clock (L1–L7 in ARCHITECTURE.md).
//!
//! Ownership of a lease is the row `(cluster, name)` showing this holder
//! and epoch, not released and not expired by `clock_timestamp()`. No lock
//! of any kind outlives a statement or transaction: a holder that is
//! cancelled, crashes or loses its connection leaves nothing held but the
//! row, which expires (or was released). Row locks taken here are
//! transaction-scoped, so a connection handed back to the pool carries none
//! (docs/design.md, point 3).
//!
//! Identity (point 4): before its first grant, and again after any
//! connection failure, the authority reads the `leasehold_database` row,
//! `pg_is_in_recovery()` and the server's system identifier, and refuses to
//! acquire if they differ from the pinned [`ExpectedIdentity`] or from the
//! identity it verified first.
//!
//! Crash detection (migration 6): a grant made with
//! [`CrashDetection::Session`] records the pid and claim key of its
//! holder's liveness session (the holder claim's session,
//! [`holder_claim`]); the next grant may then also succeed while the row is
//! neither released nor expired if that session no longer holds the claim
//! lock, judged from `pg_locks` inside the grant's own statements
//! ([`holder_session_gone`]) and re-checked under the row lock. Standbys
//! learn of such leases from the listener's batched scan
//! ([`Authority::dead_holder`]).
//!
//! Must never: take a session-level lock on a pooled connection; print a
//! URL with its password; compare host clocks.

/// SQL condition on the lease row `l`: its grant asked for crash detection
/// `session` and no session with the pid it recorded holds its holder's
/// claim lock any more: the holder's liveness session is gone (it crashed,
/// or its session was terminated, and it has revoked its guests the moment
/// it noticed). A bigint advisory key shows in `pg_locks` split into
/// `classid` (high half) and `objid` (low half) with `objsubid` 1.
/// `pg_locks` is readable by every role. One definition for the acquire's
/// peek and lock, the grant's re-check and the standby scan.
macro_rules! holder_session_gone {
    () => {
        "(l.crash_detection = 'session' AND l.holder_pid IS NOT NULL
          AND l.holder_claim_key IS NOT NULL
          AND NOT EXISTS (
              SELECT 1 FROM pg_locks k
               WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
                 AND k.pid = l.holder_pid
                 AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND k.classid = ((l.holder_claim_key >> 32) & 4294967295)::oid
                 AND k.objid = (l.holder_claim_key & 4294967295)::oid))"
    };
}

/// SQL expression: the server's current WAL insertion timeline, as
/// `bigint`, from the name of the WAL segment being written (its first 8
/// hex digits). Only on a primary: `pg_walfile_name` fails in recovery.
macro_rules! wal_timeline {
    () => {
        "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8"
    };
}

/// SQL expression: the lowest epoch a grant on the current timeline may
/// carry, `leasehold_epoch_floor(timeline)` (migration 15):
/// `(base bucket + timeline − base timeline) · 2^32 + 1`, the base
/// recorded at the first migration and moved by adopting a copy. A
/// database never adopted has base timeline t₀ and bucket t₀ − 1, so the
/// floor is `(timeline − 1) · 2^32 + 1`: timeline 1 (a server never
/// failed over) gives 1, and epochs there are 1, 2, 3, ... as always. Each promotion moves the floor above
/// every epoch the former timeline can have issued (fewer than 2^32 per
/// lease), including grants the standby never received, and so does it
/// after an adoption moved every epoch up a bucket. See "Failover" in
/// ARCHITECTURE.md.
macro_rules! timeline_epoch_floor {
    () => {
        concat!("leasehold_epoch_floor(", wal_timeline!(), ")")
    };
}

mod errors;
pub mod holder_claim;
mod hosts;
mod listener;
mod sharding;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_postgres::error::SqlState;

use errors::Failure;
pub(crate) use errors::classify;
pub use listener::LISTENER_APPLICATION;
use listener::{Listener, RELEASE_CHANNEL};

use super::claim::{ClaimSession, ClaimView, HolderClaim, HostInfo, Liveness};
use super::fence_check::BOUND_IDLE_TRANSACTION;
use super::wakes::ReleaseWakes;
use super::{
    AcquireRequest, Acquired, Authority, AuthorityError, CrashDetection, DatabaseIdentity,
    EndReason, ExpectedIdentity, Grant, HolderSession, LeaseRecord, MoveReason, PlacementMove,
    RecordedSharding, Renewed, ShardingRule, TenureRecord, validate_fence, validate_key,
    validate_request, validate_ttl,
};
use crate::db::{self, Database};
use crate::fence::{Epoch, Fence, LeaseKey};
use crate::limits::{MAX_CONTROLLERS, MAX_HISTORY};
use crate::names::check_label;
use crate::session::Unusable;
use crate::timeouts::{DATABASE_STATEMENT, GRANT_LOCK_TIMEOUT};

/// The identity of the database a session reaches, with what its
/// `leasehold_database` row records about where it was created (read
/// through `to_jsonb`, so a schema older than migration 11 is reported as
/// too old rather than as a missing column). The timeline is the WAL
/// insertion timeline, which a promotion raises at once (the checkpoint's
/// `timeline_id` only follows at the next checkpoint); a server in
/// recovery has none to give.
const IDENTITY: &str = concat!(
    "
    SELECT d.id,
           pg_is_in_recovery(),
           (SELECT system_identifier FROM pg_control_system()),
           (SELECT max(version) FROM leasehold_migrations),
           current_setting('transaction_read_only')::boolean,
           (SELECT oid FROM pg_database WHERE datname = current_database())::int8,
           current_database()::text,
           (to_jsonb(d) ->> 'system_identifier')::int8,
           (to_jsonb(d) ->> 'database_oid')::int8,
           to_jsonb(d) ->> 'database_name',
           CASE WHEN pg_is_in_recovery() THEN NULL ELSE ",
    wal_timeline!(),
    " END,
           (to_jsonb(d) ->> 'highest_timeline')::int8
      FROM leasehold_database d"
);

/// Raises the database's record of the highest timeline a host verified
/// it on (migration 20) to the current one; never lowers it.
const RECORD_TIMELINE: &str = concat!(
    "UPDATE leasehold_database SET highest_timeline = ",
    wal_timeline!(),
    " WHERE NOT pg_is_in_recovery() AND highest_timeline < ",
    wal_timeline!()
);

/// Locks the row for the rest of the acquire (or release) transaction,
/// then the tenure row of the epoch it shows (`FOR NO KEY UPDATE`): grants
/// of one lease serialize on the lease row, and a grant or release waits
/// here for in-flight fenced writes, which hold their open tenure's row
/// from their fence check to their end (L4; see
/// [`crate::authority::fence_check`]). Both locks are taken in this
/// statement, before the statement that ends the tenure and records its
/// snapshot, so every fenced write of the tenure that commits is visible
/// in that snapshot. Renewals (a plain `UPDATE` of non-key columns of the
/// lease row, `FOR NO KEY UPDATE`) never wait for those writes, which do
/// not touch the lease row, but do conflict with this lock: so an acquire
/// takes it only once [`PEEK_LEASE`] showed the lease grantable, never on
/// a lease that is held (a standby paused with the lock would starve the
/// holder's renewals). The sixth column: the holder's liveness session is
/// gone ([`holder_session_gone`]), for a row neither released nor
/// expired; the last, whether the tenure row was there to lock.
pub(crate) const LOCK_LEASE: &str = concat!(
    "
    WITH lease AS MATERIALIZED (
        SELECT holder, epoch, released, expires_at, expires_at <= clock_timestamp() AS expired,
               NOT released AND expires_at > clock_timestamp() AND ",
    holder_session_gone!(),
    " AS gone
          FROM leasehold_leases l
         WHERE cluster = $1 AND name = $2
           FOR UPDATE
    ), tenure AS MATERIALIZED (
        SELECT 1
          FROM leasehold_tenures t, lease
         WHERE t.cluster = $1 AND t.lease = $2 AND t.epoch = lease.epoch
           FOR NO KEY UPDATE OF t
    )
    SELECT holder, epoch, released, expires_at, expired, gone,
           EXISTS (SELECT 1 FROM tenure) AS tenure_locked
      FROM lease"
);

/// The acquire's bound on waiting for [`LOCK_LEASE`] (its `lock_timeout`,
/// [`GRANT_LOCK_TIMEOUT`]).
static BOUND_GRANT_LOCK_WAIT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SET LOCAL lock_timeout = {}",
        GRANT_LOCK_TIMEOUT.as_millis().max(1)
    )
});

/// The acquire's first statement: the idle bound of every lease
/// transaction, and `synchronous_commit = on` whatever the database or
/// role sets: a grant that a crash could undo (or that a synchronous
/// standby has not confirmed, where one is configured) could be issued
/// again at the same epoch.
static BOUND_GRANT_TRANSACTION: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{}; SET LOCAL synchronous_commit = on",
        *BOUND_IDLE_TRANSACTION
    )
});

/// [`LOCK_LEASE`] without the lock: what an acquire reads first. A held
/// lease whose holder's session is alive is answered from it, without
/// locking anything.
const PEEK_LEASE: &str = concat!(
    "
    SELECT holder, epoch, released, expires_at, expires_at <= clock_timestamp() AS expired,
           NOT released AND expires_at > clock_timestamp() AND ",
    holder_session_gone!(),
    " AS gone
      FROM leasehold_leases l
     WHERE cluster = $1 AND name = $2"
);

/// First grant of a lease: epoch 1 on timeline 1, else the timeline's
/// floor (`timeline_epoch_floor`: a grant the standby never received may
/// have given epoch 1 already). `DO NOTHING` on a concurrent first
/// grant, which then wins. $6–$8: the grant's crash detection and its
/// holder's liveness session (pid and claim key; NULL under `ttl`). $9:
/// why placement asked for the lease beyond its host's share (NULL: it did
/// not), recorded as the lease's last move, from no holder (migration 17).
/// Answers the epoch, the grant's times and the move it recorded (NULL:
/// none).
const GRANT_FIRST: &str = concat!(
    "
    WITH clock AS (SELECT clock_timestamp() AS t),
    granted AS (
        INSERT INTO leasehold_leases (cluster, name, holder, epoch, acquired_at, renewed_at, expires_at,
                                      crash_detection, holder_pid, holder_claim_key,
                                      last_move_reason, last_move_at, last_move_to)
        SELECT $1, $2, $3, ",
    timeline_epoch_floor!(),
    ", t, t, t + $4::bigint * interval '1 microsecond', $6, $7, $8,
               $9::text, CASE WHEN $9::text IS NULL THEN NULL ELSE t END,
               CASE WHEN $9::text IS NULL THEN NULL ELSE $3 END
          FROM clock
        ON CONFLICT (cluster, name) DO NOTHING
        RETURNING epoch, acquired_at, expires_at, last_move_reason, settled
    ),
    opened AS (
        INSERT INTO leasehold_tenures (cluster, lease, epoch, holder, endpoint, acquired_at, granted_snapshot)
        SELECT $1, $2, epoch, $3, $5, acquired_at, pg_current_snapshot() FROM granted
    )
    SELECT epoch, acquired_at, expires_at, last_move_reason, settled FROM granted"
);

/// Next grant, on the row locked by [`LOCK_LEASE`]: previous epoch + 1
/// (L1), or the current timeline's floor when that is higher (the first
/// grant after a failover; `timeline_epoch_floor`), only if released or
/// expired by the database clock, or its holder's liveness session is gone
/// under a `session` grant (L2; judged again here, under the lock). Every still-open earlier tenure is ended:
/// `expired` at its expiry if the row had expired ($6, $7), else
/// `superseded` now (a released tenure was ended by its release; a tenure
/// whose holder's session is gone is superseded). The new tenure records
/// this statement's snapshot, taken after [`LOCK_LEASE`] returned, so every
/// fenced write of an earlier epoch that committed is visible in it (the
/// fault suite's checker orders writes by it; migration 4). $8–$10: as
/// $6–$8 of [`GRANT_FIRST`]. $11: as $9 of [`GRANT_FIRST`].
///
/// The lease's last move (migration 17) is recorded here, in the grant's
/// own statement, when the new holder differs from the previous one: the
/// reason an orderly release left (`handover_reason`, [`RELEASE`]), else
/// $11; from the previous holder, to the new one, at the grant's time.
/// Otherwise the last move stays as it was. Every grant clears
/// `handover_reason`: a handover is completed, or undone, by the grant
/// that follows it. Answers as [`GRANT_FIRST`] does: the move is the one
/// this statement recorded (at its own time, to this holder), else NULL.
const GRANT_NEXT: &str = concat!(
    "
    WITH clock AS (SELECT clock_timestamp() AS t),
    granted AS (
        UPDATE leasehold_leases l
           SET holder = $3, epoch = greatest(l.epoch + 1, ",
    timeline_epoch_floor!(),
    "), acquired_at = clock.t, renewed_at = clock.t,
               expires_at = clock.t + $4::bigint * interval '1 microsecond', released = false,
               crash_detection = $8, holder_pid = $9, holder_claim_key = $10,
               handover_reason = NULL,
               (last_move_reason, last_move_at, last_move_from, last_move_to) = (
                   SELECT coalesce(m.reason, l.last_move_reason),
                          CASE WHEN m.reason IS NULL THEN l.last_move_at ELSE clock.t END,
                          CASE WHEN m.reason IS NULL THEN l.last_move_from ELSE l.holder END,
                          CASE WHEN m.reason IS NULL THEN l.last_move_to ELSE $3 END
                     FROM (SELECT CASE WHEN l.holder <> $3
                                       THEN coalesce(l.handover_reason, $11::text) END AS reason) m)
          FROM clock
         WHERE l.cluster = $1 AND l.name = $2
           AND (l.released OR l.expires_at <= clock.t OR ",
    holder_session_gone!(),
    ")
        RETURNING l.epoch, l.acquired_at, l.expires_at,
                  CASE WHEN l.last_move_at = clock.t AND l.last_move_to = $3
                       THEN l.last_move_reason END AS moved,
                  l.settled
    ),
    ended AS (
        UPDATE leasehold_tenures t
           SET ended_at = CASE WHEN $6::boolean
                               THEN greatest(t.acquired_at, least($7::timestamptz, clock.t))
                               ELSE clock.t END,
               end_reason = CASE WHEN $6::boolean THEN 'expired' ELSE 'superseded' END
          FROM granted g, clock
         WHERE t.cluster = $1 AND t.lease = $2 AND t.epoch < g.epoch AND t.ended_at IS NULL
    ),
    opened AS (
        INSERT INTO leasehold_tenures (cluster, lease, epoch, holder, endpoint, acquired_at, granted_snapshot)
        SELECT $1, $2, epoch, $3, $5, acquired_at, pg_current_snapshot() FROM granted
    )
    SELECT epoch, acquired_at, expires_at, moved, settled FROM granted"
);

/// Who holds a lease, read after losing a first-grant race.
const CURRENT: &str = "
    SELECT holder, epoch, expires_at FROM leasehold_leases WHERE cluster = $1 AND name = $2";

/// Every fence in one statement: one round trip whatever the number of
/// leases. `clock_timestamp()` (not `now()`) so a renewal that waited on a
/// row lock is judged at the moment it runs. $6: each fence's settled
/// position (NULL keeps the one recorded; migration 18), written only with
/// the renewal itself, so only by the current tenure.
const RENEW: &str = "
    UPDATE leasehold_leases l
       SET renewed_at = clock_timestamp(),
           expires_at = clock_timestamp() + $5::bigint * interval '1 microsecond',
           settled = coalesce(f.settled, l.settled)
      FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $6::bigint[])
           AS f(cluster, name, epoch, holder, settled)
     WHERE l.cluster = f.cluster AND l.name = f.name AND l.epoch = f.epoch AND l.holder = f.holder
       AND NOT l.released AND l.expires_at > clock_timestamp()
    RETURNING l.cluster, l.name, l.epoch, l.holder, l.expires_at";

/// Release in one statement, run after [`LOCK_LEASE`] in the same
/// transaction: mark the row released only while this fence is current (a
/// stale holder never releases its successor), end this tenure if still
/// open, recording this statement's snapshot (taken after the lock, so
/// every committed fenced write of the tenure is visible in it), and NOTIFY
/// only if the row was released. The notification is delivered at commit,
/// after the row is acquirable. $7: the placement reason of a handover
/// (`over_share`; NULL for any other release), kept on the row only if this
/// release marks it released, for the next grant to record as the lease's
/// last move ([`GRANT_NEXT`]; migration 17). $8: the tenure's final
/// settled position (NULL keeps the one recorded; migration 18), written
/// under the same condition.
const RELEASE: &str = "
    WITH released AS (
        UPDATE leasehold_leases
           SET released = true, handover_reason = $7::text, settled = coalesce($8::bigint, settled)
         WHERE cluster = $1 AND name = $2 AND epoch = $3 AND holder = $4 AND NOT released
        RETURNING cluster
    ),
    ended AS (
        UPDATE leasehold_tenures
           SET ended_at = clock_timestamp(), end_reason = $5, released_snapshot = pg_current_snapshot()
         WHERE cluster = $1 AND lease = $2 AND epoch = $3 AND holder = $4 AND ended_at IS NULL
        RETURNING epoch
    ),
    notified AS (SELECT pg_notify($6, cluster) FROM released)
    SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM ended), (SELECT count(*) FROM notified)";

/// Every lease of a cluster, with the liveness session its grant recorded
/// and, when its host registered that very session, the session's start.
const OBSERVE: &str = "
    SELECT l.name, l.holder, l.epoch, l.acquired_at, l.expires_at, l.released,
           NOT l.released AND l.expires_at > clock_timestamp() AS active,
           l.crash_detection, l.holder_pid, h.session_started_at,
           l.last_move_reason, l.last_move_at, l.last_move_from, l.last_move_to
      FROM leasehold_leases l
      LEFT JOIN leasehold_hosts h
        ON h.cluster = l.cluster AND h.holder = l.holder AND h.session_pid = l.holder_pid
     WHERE l.cluster = $1
     ORDER BY l.name
     LIMIT $2";

const HISTORY: &str = "
    SELECT epoch, holder, endpoint, acquired_at, ended_at, end_reason, writes, last_write_at,
           outbound_requests, last_outbound_at
      FROM leasehold_tenures
     WHERE cluster = $1 AND lease = $2 AND ($4::int8 IS NULL OR epoch < $4::int8)
     ORDER BY epoch DESC
     LIMIT $3";

/// A tenure's outbound statistics (migration 5). Not fenced and locking
/// only the tenure's own row, never the lease row: it waits for no grant
/// and no grant waits for it. `greatest` ignores NULL, so a recorded time
/// is never cleared, and neither value is ever lowered.
const RECORD_OUTBOUND: &str = "
    UPDATE leasehold_tenures
       SET outbound_requests = greatest(outbound_requests, $5),
           last_outbound_at = greatest(last_outbound_at, $6)
     WHERE cluster = $1 AND lease = $2 AND epoch = $3 AND holder = $4";

/// The schema version this host needs (and the newest it knows).
pub(crate) fn required_schema_version() -> i32 {
    db::known_migrations()
        .iter()
        .map(|(version, _)| *version)
        .max()
        .unwrap_or(0)
}

/// The notification self-test's statement
/// ([`PostgresAuthority::check_notifications`]): channel, payload.
const NOTIFY_PROBE: &str = "SELECT pg_notify($1, $2)";

/// The PostgreSQL lease backend. Cheap to clone: clones share the pool,
/// the verified identity and the release listener.
#[derive(Clone)]
pub struct PostgresAuthority {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PostgresAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresAuthority")
            .field("endpoint", &self.shared.db.endpoint())
            .finish_non_exhaustive()
    }
}

struct Shared {
    db: Database,
    expected: ExpectedIdentity,
    /// The identity verified against `expected`; cleared whenever the
    /// database was unreachable, so it is checked again on reconnect.
    verified: Mutex<Option<DatabaseIdentity>>,
    /// The first identity verified, kept for the life of the authority:
    /// after a reconnect, the database must be that one again, pinned or
    /// not. (Without it, an unpinned host whose connection string now
    /// reaches another Leasehold database would acquire there until the
    /// supervisors' periodic identity re-check caught up.)
    first: Mutex<Option<DatabaseIdentity>>,
    wakes: Arc<ReleaseWakes>,
    /// Started on the first `released` (or `dead_holder`) call; stopped
    /// when the last clone of the authority is dropped.
    listener: Mutex<Option<Listener>>,
    /// Where the dedicated sessions (the holder claim, which is the
    /// liveness session, and the release listener) connect; `None`: the
    /// pool's own configuration. Never a pooler's address: a session lock,
    /// a backend pid and LISTEN only mean something on the server's own
    /// session.
    session_target: Mutex<Option<(crate::db_tls::Target, String)>>,
    /// The holder claims this authority started, so a grant can record
    /// the liveness session of its holder.
    claims: Mutex<Vec<ClaimWatch>>,
}

/// A holder claim started by this authority, as its grants (and its
/// tenures, [`Authority::liveness`]) need it.
struct ClaimWatch {
    cluster: String,
    holder: String,
    view: watch::Receiver<ClaimView>,
    liveness: Liveness,
}

impl PostgresAuthority {
    /// An authority over `db` that will refuse to acquire unless the
    /// database matches `expected` (an empty expectation still refuses a
    /// standby). Connects lazily; see [`PostgresAuthority::connect`].
    pub fn new(db: Database, expected: ExpectedIdentity) -> Self {
        Self {
            shared: Arc::new(Shared {
                db,
                expected,
                verified: Mutex::new(None),
                first: Mutex::new(None),
                wakes: Arc::new(ReleaseWakes::new()),
                listener: Mutex::new(None),
                session_target: Mutex::new(None),
                claims: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Open the dedicated sessions (the liveness session holding the
    /// holder claim, and the release listener) at `url` instead of the
    /// pool's URL (`[database] session_url`): for a pool reached through a
    /// transaction-pooling proxy, `url` must reach PostgreSQL itself. Call
    /// before the first claim or `released`.
    pub fn use_session_url(&self, url: &str) -> Result<(), AuthorityError> {
        let target = db::session_target(url).map_err(|reason| AuthorityError::Unavailable {
            endpoint: db::redact(url),
            reason: format!("session_url is not a usable PostgreSQL URL: {reason}"),
        })?;
        *self
            .shared
            .session_target
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((target, db::redact(url)));
        Ok(())
    }

    /// Where and how the dedicated sessions connect.
    fn session_target(&self) -> crate::db_tls::Target {
        self.shared
            .session_target
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(target, _)| target.clone())
            .unwrap_or_else(|| self.shared.db.session_target())
    }

    /// Where the dedicated sessions connect, redacted: `[database]
    /// session_url`, or else the pool's endpoint.
    pub fn session_endpoint(&self) -> String {
        self.shared
            .session_target
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, endpoint)| endpoint.clone())
            .unwrap_or_else(|| self.shared.db.session_endpoint().to_string())
    }

    /// What `leasehold check` says of the dedicated sessions: whether a
    /// session at `session_url` reaches the database this authority
    /// verified (see [`holder_claim::check_session`]); `None` when they
    /// connect where the pool does.
    pub async fn check_session_url(&self) -> Option<Result<String, String>> {
        let endpoint = self.session_endpoint();
        if endpoint == self.endpoint() {
            return None;
        }
        let verified = match self.verify().await {
            Ok(verified) => verified,
            Err(e) => return Some(Err(e.to_string())),
        };
        Some(
            holder_claim::check_session(
                &self.session_target(),
                &endpoint,
                self.endpoint(),
                &verified,
            )
            .await,
        )
    }

    /// The liveness session `holder` of `cluster` holds its claim on now,
    /// if this authority claimed that name and the claim is held.
    fn claim_session(&self, cluster: &str, holder: &str) -> Option<ClaimSession> {
        let mut claims = self
            .shared
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A claim whose task ended (its handle dropped) holds nothing.
        claims.retain(|claim| claim.view.has_changed().is_ok());
        claims
            .iter()
            .find(|claim| claim.cluster == cluster && claim.holder == holder)
            .and_then(|claim| claim.view.borrow().session.clone())
    }

    /// [`PostgresAuthority::new`], then verify the identity now, so a host
    /// pointed at the wrong database fails at start-up, naming what differed.
    pub async fn connect(db: Database, expected: ExpectedIdentity) -> Result<Self, AuthorityError> {
        let authority = Self::new(db, expected);
        authority.verify().await?;
        Ok(authority)
    }

    /// Read the identity and check it against the expectation and against
    /// the first identity this authority verified; remember it until the
    /// database is next found unreachable. Acquire calls this first;
    /// readiness checks may call it too.
    pub async fn verify(&self) -> Result<DatabaseIdentity, AuthorityError> {
        let remembered = self
            .shared
            .verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(identity) = remembered {
            return Ok(identity);
        }
        let identity = self.identity().await?;
        self.admit(&identity)?;
        self.record_timeline().await;
        *self
            .shared
            .verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(identity.clone());
        Ok(identity)
    }

    /// Raise the database's record of the highest timeline a host
    /// verified it on ([`RECORD_TIMELINE`]) to the current one, so a host
    /// that did not see the failover refuses the database if it is ever
    /// found on a lower one. Best effort: a failure is logged (the
    /// process's own record and the data directory's still hold).
    async fn record_timeline(&self) {
        let recorded = async {
            let client = self
                .shared
                .db
                .pool()
                .get()
                .await
                .map_err(|e| e.to_string())?;
            tokio::time::timeout(DATABASE_STATEMENT, client.execute(RECORD_TIMELINE, &[]))
                .await
                .map_err(|_| {
                    format!(
                        "no answer within {}",
                        humantime::format_duration(DATABASE_STATEMENT)
                    )
                })?
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(())
        };
        if let Err(e) = recorded.await {
            tracing::warn!(
                endpoint = %self.endpoint(),
                "could not record the database's timeline in leasehold_database: {e}"
            );
        }
    }

    /// Check `identity` against the expectation, against the first
    /// identity this authority admitted (which the first call records) and
    /// against the highest timeline this process saw
    /// ([`super::sight_timeline`]).
    fn admit(&self, identity: &DatabaseIdentity) -> Result<(), AuthorityError> {
        self.shared.expected.verify(identity)?;
        let mut first = self
            .shared
            .first
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(was) = first.as_ref() {
            let differences = was.differences(identity);
            if !differences.is_empty() {
                return Err(AuthorityError::WrongDatabase {
                    endpoint: identity.endpoint.clone(),
                    problems: format!(
                        "database identity changed since this host first verified it: {}",
                        differences.join("; ")
                    ),
                });
            }
        }
        if let Some(timeline) = identity.timeline
            && let Some(former) =
                super::sight_timeline(identity.system_identifier, identity.database_oid, timeline)
        {
            return Err(AuthorityError::WrongDatabase {
                endpoint: identity.endpoint.clone(),
                problems: former,
            });
        }
        if first.is_none() {
            *first = Some(identity.clone());
        }
        Ok(())
    }

    /// Judge the identity row read inside a lease transaction (acquire,
    /// renew, release) by [`IDENTITY`]. On a refusal, whatever was verified
    /// before is not what answers now: the pooled sessions are retired and
    /// the identity must be verified again.
    fn admit_in_transaction(
        &self,
        row: Option<&tokio_postgres::Row>,
    ) -> Result<(), AuthorityError> {
        let admitted = identity_of(row, self.endpoint()).and_then(|identity| self.admit(&identity));
        if admitted.is_err() {
            self.shared
                .db
                .sessions()
                .retire(&Unusable::wrong_database());
            *self
                .shared
                .verified
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = None;
        }
        admitted
    }

    /// The database and pool this authority uses.
    pub fn database(&self) -> &Database {
        &self.shared.db
    }

    /// The endpoint, password redacted.
    pub fn endpoint(&self) -> &str {
        self.shared.db.endpoint()
    }

    /// Counts the release-listener sessions established so far (0 until
    /// the first `released` call has connected). A readiness check can show
    /// it; tests wait on it before relying on a notification.
    pub fn listener_sessions(&self) -> watch::Receiver<u64> {
        self.start_listener()
            .unwrap_or_else(|| watch::Sender::new(0).subscribe())
    }

    /// The start-up self-test of notifications: send one `NOTIFY` through
    /// the pool and wait at most `within` for it to arrive on this
    /// authority's LISTEN session (at `[database] session_url`). A pooler
    /// or proxy in between that drops notifications would otherwise go
    /// unnoticed: standbys and change-feed watchers fall back to polling.
    /// `Ok` with how long the notification took, or `Err` saying what to
    /// fix. The verdict shows in `/metrics`
    /// (`leasehold_db_notifications_verified`).
    pub async fn check_notifications(&self, within: Duration) -> Result<Duration, String> {
        let verdict = self.notifications_arrive(within).await;
        self.shared.db.note_notifications(verdict.is_ok());
        verdict
    }

    async fn notifications_arrive(&self, within: Duration) -> Result<Duration, String> {
        let started = tokio::time::Instant::now();
        let deadline = started + within;
        let mut sessions = self.listener_sessions();
        let fail = |what: &str| {
            format!(
                "notification self-test: {what} within {}: standbys and change-feed watchers \
                 of this host fall back to polling (handovers and changes arrive late). \
                 LISTEN needs a session on PostgreSQL itself: with url behind a transaction \
                 pooler, set database.session_url to reach PostgreSQL directly, and check that \
                 no proxy between drops asynchronous messages",
                humantime::format_duration(within)
            )
        };
        if !matches!(
            tokio::time::timeout_at(deadline, sessions.wait_for(|n| *n > 0)).await,
            Ok(Ok(_))
        ) {
            return Err(fail("the LISTEN session was not established"));
        }
        let probe = format!(
            "notify-probe-{:x}-{:x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let mut woken = self.shared.wakes.subscribe(&probe);
        loop {
            woken.borrow_and_update();
            let listening = *sessions.borrow_and_update();
            self.run("sending the notification self-test", async {
                let client = self.shared.db.pool().get().await?;
                let statement = self.shared.db.prepare(&client, NOTIFY_PROBE).await?;
                statement
                    .execute(&client, &[&RELEASE_CHANNEL, &probe])
                    .await?;
                Ok(())
            })
            .await
            .map_err(|e| {
                fail(&format!(
                    "sending a notification through the pool failed ({e})"
                ))
            })?;
            match tokio::time::timeout_at(deadline, woken.changed()).await {
                // A new LISTEN session wakes every waiter: not proof.
                Ok(Ok(())) if *sessions.borrow() != listening => continue,
                Ok(Ok(())) => return Ok(started.elapsed()),
                _ => {
                    return Err(fail(&format!(
                        "a notification sent through {} did not arrive on the LISTEN session",
                        self.endpoint()
                    )));
                }
            }
        }
    }

    fn start_listener(&self) -> Option<watch::Receiver<u64>> {
        let mut listener = self
            .shared
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if listener.is_none() {
            // `released` is synchronous; without a runtime there is nothing
            // to run the session on, and waiters fall back to their backoff.
            let Ok(handle) = tokio::runtime::Handle::try_current() else {
                tracing::warn!(
                    endpoint = %self.endpoint(),
                    "no async runtime: release notifications are not listened for"
                );
                return None;
            };
            *listener = Some(Listener::start(
                &handle,
                self.session_target(),
                self.session_endpoint(),
                self.shared.wakes.clone(),
            ));
        }
        listener.as_ref().map(Listener::sessions)
    }

    /// Run one bounded database call, naming failures. An unreachable
    /// database also forgets the verified identity: whatever answers next
    /// must prove again that it is the right one.
    async fn run<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, AuthorityError> {
        let error = match tokio::time::timeout(DATABASE_STATEMENT, call).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(failure)) => {
                if let Failure::Pg(e) = &failure {
                    self.shared.db.sessions().observe(e);
                }
                failure.name(self.endpoint(), what)
            }
            Err(_) => AuthorityError::Unavailable {
                endpoint: self.endpoint().to_string(),
                reason: format!(
                    "{what}: no answer within {}; the outcome is unknown",
                    humantime::format_duration(DATABASE_STATEMENT)
                ),
            },
        };
        if matches!(error, AuthorityError::Unavailable { .. }) {
            *self
                .shared
                .verified
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = None;
        }
        Err(error)
    }
}

/// The identity shown by a row of [`IDENTITY`], or why the schema cannot
/// serve.
fn identity_of(
    row: Option<&tokio_postgres::Row>,
    endpoint: &str,
) -> Result<DatabaseIdentity, AuthorityError> {
    let Some(row) = row else {
        return Err(AuthorityError::Schema {
            endpoint: endpoint.to_string(),
            reason: "the leasehold_database row is missing".into(),
        });
    };
    let version: Option<i32> = row.get(3);
    let required = required_schema_version();
    if let Some(version) = version
        && version > required
    {
        return Err(AuthorityError::WrongDatabase {
            endpoint: endpoint.to_string(),
            problems: db::newer_schema(&[version], required),
        });
    }
    if version.unwrap_or(0) < required {
        return Err(AuthorityError::Schema {
            endpoint: endpoint.to_string(),
            reason: format!(
                "schema version {} is older than the {required} this host needs",
                version.unwrap_or(0)
            ),
        });
    }
    // The server's identifier is an unsigned 64-bit number shown through a
    // signed bigint; keep its bits. Oids are unsigned 32-bit.
    let system_identifier = row.get::<_, i64>(2) as u64;
    let database_oid = u32::try_from(row.get::<_, i64>(5)).unwrap_or_default();
    let database_name: String = row.get(6);
    let recorded_system: Option<i64> = row.get(7);
    let recorded_oid: Option<i64> = row.get(8);
    let recorded_name: Option<String> = row.get(9);
    if let (Some(recorded_system), Some(recorded_oid)) = (recorded_system, recorded_oid) {
        let recorded_system = recorded_system as u64;
        if recorded_system != system_identifier || recorded_oid != i64::from(database_oid) {
            return Err(AuthorityError::WrongDatabase {
                endpoint: endpoint.to_string(),
                problems: format!(
                    "database {database_name:?} (oid {database_oid}, system identifier \
                     {system_identifier}) is a copy: its leasehold_database row was created in \
                     database {:?} (oid {recorded_oid}, system identifier {recorded_system}). \
                     CREATE DATABASE ... TEMPLATE, pg_dump and restore, and major-version \
                     upgrades copy the row; a copy has its own epochs, which the original \
                     already issued, so no host leads or writes there",
                    recorded_name.unwrap_or_default()
                ),
            });
        }
    }
    let timeline = row
        .get::<_, Option<i64>>(10)
        .and_then(|t| u32::try_from(t).ok());
    // A timeline below the highest a host verified this database on
    // (migration 20): a former primary a failover left behind.
    if let (Some(timeline), Some(highest)) = (timeline, row.get::<_, Option<i64>>(11))
        && i64::from(timeline) < highest
    {
        return Err(AuthorityError::WrongDatabase {
            endpoint: endpoint.to_string(),
            problems: format!(
                "the server is on timeline {timeline} but hosts verified database \
                 {database_name:?} on timeline {highest} (leasehold_database.highest_timeline): \
                 it is a former primary that a failover left behind; rewind it (pg_rewind) and \
                 make it a standby of the new primary"
            ),
        });
    }
    Ok(DatabaseIdentity {
        database_id: row.get(0),
        in_recovery: row.get(1),
        system_identifier,
        database_oid,
        database_name,
        timeline,
        read_only: row.get(4),
        endpoint: endpoint.to_string(),
    })
}

/// A ttl as whole microseconds for `interval` arithmetic, rounded up so a
/// sub-microsecond ttl is not silently zero.
fn ttl_micros(key: &LeaseKey, ttl: Duration) -> Result<i64, AuthorityError> {
    i64::try_from(ttl.as_micros())
        .map(|micros| micros.max(1))
        .map_err(|_| AuthorityError::Invalid {
            key: key.clone(),
            reason: format!("ttl {} is too large", humantime::format_duration(ttl)),
        })
}

fn epoch_param(fence: &Fence) -> Result<i64, AuthorityError> {
    i64::try_from(fence.epoch.0).map_err(|_| AuthorityError::Invalid {
        key: fence.key.clone(),
        reason: format!("epoch {} is out of range", fence.epoch),
    })
}

/// Epochs in the table are `bigint CHECK (epoch > 0)`.
fn epoch_of(value: i64) -> Epoch {
    Epoch(u64::try_from(value).unwrap_or_default())
}

fn parse_reason(text: &str) -> Option<EndReason> {
    [
        EndReason::Released,
        EndReason::Expired,
        EndReason::Lost,
        EndReason::Superseded,
    ]
    .into_iter()
    .find(|reason| reason.as_str() == text)
}

#[async_trait]
impl Authority for PostgresAuthority {
    async fn identity(&self) -> Result<DatabaseIdentity, AuthorityError> {
        let endpoint = self.endpoint().to_string();
        self.run("reading the database identity", async {
            let client = self.shared.db.pool().get().await?;
            let statement = self.shared.db.prepare(&client, IDENTITY).await?;
            let row = statement.query_opt(&client, &[]).await?;
            let identity = identity_of(row.as_ref(), &endpoint)?;
            self.shared.db.sessions().note_read_only(identity.read_only);
            if let Some(timeline) = identity.timeline
                && let Some(former) = super::sight_timeline(
                    identity.system_identifier,
                    identity.database_oid,
                    timeline,
                )
            {
                return Err(AuthorityError::WrongDatabase {
                    endpoint,
                    problems: former,
                }
                .into());
            }
            Ok(identity)
        })
        .await
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquired, AuthorityError> {
        self.acquire_detected(request, CrashDetection::Ttl).await
    }

    async fn acquire_detected(
        &self,
        request: &AcquireRequest,
        detection: CrashDetection,
    ) -> Result<Acquired, AuthorityError> {
        self.acquire_placed(request, detection, None).await
    }

    async fn acquire_placed(
        &self,
        request: &AcquireRequest,
        detection: CrashDetection,
        moved: Option<MoveReason>,
    ) -> Result<Acquired, AuthorityError> {
        self.acquire_sharded(request, detection, moved, None).await
    }

    async fn acquire_sharded(
        &self,
        request: &AcquireRequest,
        detection: CrashDetection,
        moved: Option<MoveReason>,
        sharding: Option<&ShardingRule>,
    ) -> Result<Acquired, AuthorityError> {
        validate_request(request)?;
        let moved = moved.map(MoveReason::as_str);
        let micros = ttl_micros(&request.key, request.ttl)?;
        self.verify().await?;
        let key = &request.key;
        // A `session` grant records the liveness session of its holder;
        // without one (the name is not claimed here right now) it can only
        // be taken over by expiry, so it is granted as `ttl`.
        let session = match detection {
            CrashDetection::Session => self.claim_session(&key.cluster, &request.holder),
            CrashDetection::Ttl => None,
        };
        let recorded = match &session {
            Some(_) => CrashDetection::Session,
            None => CrashDetection::Ttl,
        }
        .as_str();
        let holder_pid = session.as_ref().map(|s| s.pid);
        let holder_claim_key = session.as_ref().map(|s| s.key);
        let what = format!("acquiring lease {key} for {}", request.holder);
        let endpoint = self.endpoint();
        self.run(&what, async {
            let mut client = self.shared.db.pool().get().await?;
            let tx = client.transaction().await?;
            let lock = self.shared.db.prepare(&tx, LOCK_LEASE).await?;
            let peek = self.shared.db.prepare(&tx, PEEK_LEASE).await?;
            let read_identity = self.shared.db.prepare(&tx, IDENTITY).await?;
            // One flight: bound the transaction's idle time, read the
            // identity of the database this very session reaches (a
            // reconnect since `verify` may have reached another one), and
            // read the lease without locking it.
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&key.cluster, &key.name];
            let (bounded, identity, peeked) = tokio::join!(
                biased;
                tx.batch_execute(&BOUND_GRANT_TRANSACTION),
                read_identity.query_opt(tx.client(), &[]),
                peek.query_opt(tx.client(), &params)
            );
            bounded?;
            if let Err(refused) = self.admit_in_transaction(identity?.as_ref()) {
                tx.rollback().await?;
                return Err(refused.into());
            }
            let peeked = peeked?;
            if let Some(rule) = sharding {
                // Judged whether the lease is held or may be granted, so a
                // standby with another sharding says why at once.
                let grantable = peeked.as_ref().is_none_or(|row| {
                    row.get::<_, bool>(2) || row.get::<_, bool>(4) || row.get::<_, bool>(5)
                });
                let epoch = peeked.as_ref().map(|row| epoch_of(row.get(1)));
                let judged = sharding::judge_or_record(
                    self,
                    &tx,
                    key,
                    epoch,
                    rule,
                    &request.holder,
                    grantable,
                )
                .await;
                if let Err(refused) = judged {
                    tx.rollback().await?;
                    return Err(refused);
                }
            }
            let current = match peeked {
                // Held: answered without locking the row (item: a probe
                // never blocks the holder's renewals).
                Some(row)
                    if !row.get::<_, bool>(2)
                        && !row.get::<_, bool>(4)
                        && !row.get::<_, bool>(5) =>
                {
                    tx.rollback().await?;
                    return Ok(Acquired::Held {
                        holder: row.get(0),
                        epoch: epoch_of(row.get(1)),
                        expires_at: row.get(3),
                    });
                }
                // Looks grantable: lock it, waiting for in-flight fenced
                // writes, and judge it again under the lock. The wait is
                // bounded (GRANT_LOCK_TIMEOUT): a write left open by a
                // partitioned holder keeps the row until the server ends
                // its transaction, and a grant must not hold one of the
                // authority's few connections that long. Past the bound
                // the lease is still held, by those writes; the standby
                // asks again at its next poll.
                Some(row) => {
                    tx.batch_execute(&BOUND_GRANT_LOCK_WAIT).await?;
                    let mut locked = lock.query_opt(tx.client(), &params).await;
                    // The lease row moved to an epoch whose tenure row this
                    // statement's snapshot predates (a grant committed
                    // while it waited for the lease row), and is grantable
                    // all the same: lock again, now that the lease row is
                    // ours and cannot move, so the tenure row is locked
                    // before GRANT_NEXT's snapshot. (Held: nothing follows.)
                    if let Ok(Some(again)) = &locked
                        && !again.get::<_, bool>(6)
                        && (again.get::<_, bool>(2)
                            || again.get::<_, bool>(4)
                            || again.get::<_, bool>(5))
                    {
                        locked = lock.query_opt(tx.client(), &params).await;
                    }
                    match locked {
                        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                            tx.rollback().await?;
                            return Ok(Acquired::Held {
                                holder: row.get(0),
                                epoch: epoch_of(row.get(1)),
                                expires_at: row.get(3),
                            });
                        }
                        locked => locked?,
                    }
                }
                None => None,
            };
            let granted = match current {
                Some(row) => {
                    let released: bool = row.get(2);
                    let expired: bool = row.get(4);
                    let gone: bool = row.get(5);
                    if !released && !expired && !gone {
                        tx.rollback().await?;
                        return Ok(Acquired::Held {
                            holder: row.get(0),
                            epoch: epoch_of(row.get(1)),
                            expires_at: row.get(3),
                        });
                    }
                    let previous_expiry: DateTime<Utc> = row.get(3);
                    let grant = self.shared.db.prepare(&tx, GRANT_NEXT).await?;
                    grant
                        .query_opt(
                            tx.client(),
                            &[
                                &key.cluster,
                                &key.name,
                                &request.holder,
                                &micros,
                                &endpoint,
                                &(expired && !released),
                                &previous_expiry,
                                &recorded,
                                &holder_pid,
                                &holder_claim_key,
                                &moved,
                            ],
                        )
                        .await?
                }
                None => {
                    let grant = self.shared.db.prepare(&tx, GRANT_FIRST).await?;
                    grant
                        .query_opt(
                            tx.client(),
                            &[
                                &key.cluster,
                                &key.name,
                                &request.holder,
                                &micros,
                                &endpoint,
                                &recorded,
                                &holder_pid,
                                &holder_claim_key,
                                &moved,
                            ],
                        )
                        .await?
                }
            };
            let Some(granted) = granted else {
                // Lost a race for the first grant (or, on a locked row, the
                // grant condition no longer held): someone else holds it.
                tx.rollback().await?;
                let current = self.shared.db.prepare(&client, CURRENT).await?;
                let row = current
                    .query_one(&client, &[&key.cluster, &key.name])
                    .await?;
                return Ok(Acquired::Held {
                    holder: row.get(0),
                    epoch: epoch_of(row.get(1)),
                    expires_at: row.get(2),
                });
            };
            tx.commit().await?;
            Ok(Acquired::Granted(Grant {
                fence: Fence {
                    key: key.clone(),
                    epoch: epoch_of(granted.get(0)),
                    holder: request.holder.clone(),
                },
                acquired_at: granted.get(1),
                expires_at: granted.get(2),
                moved: granted
                    .get::<_, Option<&str>>(3)
                    .and_then(MoveReason::parse),
                settled: granted
                    .get::<_, Option<i64>>(4)
                    .and_then(|p| u64::try_from(p).ok()),
            }))
        })
        .await
    }

    async fn shardings(&self, cluster: &str) -> Result<Vec<RecordedSharding>, AuthorityError> {
        self.recorded_shardings(cluster).await
    }

    async fn reshard(
        &self,
        cluster: &str,
        controller: &str,
        next: Option<&ShardingRule>,
        by: &str,
    ) -> Result<Option<RecordedSharding>, AuthorityError> {
        self.change_sharding(cluster, controller, next, by).await
    }

    async fn renew(&self, fences: &[Fence], ttl: Duration) -> Result<Vec<Renewed>, AuthorityError> {
        self.renew_settled(fences, &[], ttl).await
    }

    async fn renew_settled(
        &self,
        fences: &[Fence],
        settled: &[Option<u64>],
        ttl: Duration,
    ) -> Result<Vec<Renewed>, AuthorityError> {
        let Some(first) = fences.first() else {
            return Ok(Vec::new());
        };
        for fence in fences {
            validate_fence(fence)?;
        }
        validate_ttl(&first.key, ttl)?;
        let micros = ttl_micros(&first.key, ttl)?;
        let clusters: Vec<&str> = fences.iter().map(|f| f.key.cluster.as_str()).collect();
        let names: Vec<&str> = fences.iter().map(|f| f.key.name.as_str()).collect();
        let epochs = fences
            .iter()
            .map(epoch_param)
            .collect::<Result<Vec<_>, _>>()?;
        let holders: Vec<&str> = fences.iter().map(|f| f.holder.as_str()).collect();
        let positions: Vec<Option<i64>> = (0..fences.len())
            .map(|i| {
                settled
                    .get(i)
                    .copied()
                    .flatten()
                    .and_then(|p| i64::try_from(p).ok())
            })
            .collect();
        let what = if fences.len() == 1 {
            format!("renewing {first}")
        } else {
            format!("renewing {} leases ({first}, ...)", fences.len())
        };
        // Both bounds: the wait for the row's lock, and the time the
        // transaction may then sit idle holding it. A renewal cut off
        // between its UPDATE and its COMMIT (a partition, a paused host)
        // would otherwise keep the row locked until the server notices the
        // connection is gone, and no successor could be granted the lease
        // even long after it expired.
        let bound = crate::timeouts::renew_lock_timeout(ttl).as_millis().max(1);
        let bound_lock_wait = format!(
            "SET LOCAL lock_timeout = {bound}; \
             SET LOCAL idle_in_transaction_session_timeout = {bound}"
        );
        let rows = self
            .run(&what, async {
                let mut client = self.shared.db.pool().get().await?;
                let tx = client.transaction().await?;
                let renew = self.shared.db.prepare(&tx, RENEW).await?;
                let read_identity = self.shared.db.prepare(&tx, IDENTITY).await?;
                // One flight: the lock wait and the idle time are bounded
                // before the UPDATE runs. A renewal waits on the lease row only behind a grant
                // or release (never behind fenced writes, which do not
                // touch it); past the bound it fails and the next
                // renewal, well inside the slack, tries again.
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
                    [&clusters, &names, &epochs, &holders, &micros, &positions];
                // The identity is read before the UPDATE runs and judged
                // before anything commits: renewing at a copy, a standby or
                // a former primary is refused, whatever the UPDATE found.
                let (bounded, identity, rows) = tokio::join!(
                    biased;
                    tx.batch_execute(&bound_lock_wait),
                    read_identity.query_opt(tx.client(), &[]),
                    renew.query(tx.client(), &params)
                );
                bounded?;
                if let Err(refused) = self.admit_in_transaction(identity?.as_ref()) {
                    tx.rollback().await?;
                    return Err(refused.into());
                }
                let rows = rows?;
                tx.commit().await?;
                Ok(rows)
            })
            .await?;
        // Matched by value, not position: the same fence given twice is
        // updated once but renewed for both.
        // A map, so renewing thousands of leases stays linear.
        let extended: std::collections::HashMap<Fence, DateTime<Utc>> = rows
            .iter()
            .map(|r| {
                let fence = Fence {
                    key: LeaseKey::new(r.get::<_, String>(0), r.get::<_, String>(1)),
                    epoch: epoch_of(r.get(2)),
                    holder: r.get(3),
                };
                (fence, r.get(4))
            })
            .collect();
        Ok(fences
            .iter()
            .map(|fence| {
                extended
                    .get(fence)
                    .map_or(Renewed::Lost, |expires_at| Renewed::Extended {
                        expires_at: *expires_at,
                    })
            })
            .collect())
    }

    async fn release(&self, fence: &Fence, reason: EndReason) -> Result<(), AuthorityError> {
        self.release_placed(fence, reason, None).await
    }

    async fn release_placed(
        &self,
        fence: &Fence,
        reason: EndReason,
        moved: Option<MoveReason>,
    ) -> Result<(), AuthorityError> {
        self.release_settled(fence, reason, moved, None).await
    }

    async fn release_settled(
        &self,
        fence: &Fence,
        reason: EndReason,
        moved: Option<MoveReason>,
        settled: Option<u64>,
    ) -> Result<(), AuthorityError> {
        validate_fence(fence)?;
        let settled: Option<i64> = settled.and_then(|p| i64::try_from(p).ok());
        let epoch = epoch_param(fence)?;
        let what = match moved {
            Some(moved) => format!(
                "releasing {fence} ({}, handed over: {})",
                reason.as_str(),
                moved.as_str()
            ),
            None => format!("releasing {fence} ({})", reason.as_str()),
        };
        let moved = moved.map(MoveReason::as_str);
        let (released, ended, _notified): (i64, i64, i64) = self
            .run(&what, async {
                let mut client = self.shared.db.pool().get().await?;
                let tx = client.transaction().await?;
                let lock = self.shared.db.prepare(&tx, LOCK_LEASE).await?;
                let release = self.shared.db.prepare(&tx, RELEASE).await?;
                let read_identity = self.shared.db.prepare(&tx, IDENTITY).await?;
                // One flight, in this order: bound the idle time, read the
                // identity (judged before anything commits), lock the row
                // (waiting for in-flight fenced writes), then release with
                // a snapshot taken after the lock.
                let key: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
                    [&fence.key.cluster, &fence.key.name];
                let reason = reason.as_str();
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
                    &fence.key.cluster,
                    &fence.key.name,
                    &epoch,
                    &fence.holder,
                    &reason,
                    &RELEASE_CHANNEL,
                    &moved,
                    &settled,
                ];
                let (bounded, identity, locked, row) = tokio::join!(
                    biased;
                    tx.batch_execute(&BOUND_IDLE_TRANSACTION),
                    read_identity.query_opt(tx.client(), &[]),
                    lock.query_opt(tx.client(), &key),
                    release.query_one(tx.client(), &params)
                );
                bounded?;
                if let Err(refused) = self.admit_in_transaction(identity?.as_ref()) {
                    tx.rollback().await?;
                    return Err(refused.into());
                }
                locked?;
                let row = row?;
                tx.commit().await?;
                Ok((row.get(0), row.get(1), row.get(2)))
            })
            .await?;
        tracing::debug!(
            fence = %fence,
            reason = reason.as_str(),
            handed_over = ?moved,
            released = released > 0,
            tenure_ended = ended > 0,
            "lease released"
        );
        Ok(())
    }

    async fn observe(&self, cluster: &str) -> Result<Vec<LeaseRecord>, AuthorityError> {
        check_label("cluster", cluster)?;
        let limit = i64::try_from(MAX_CONTROLLERS).unwrap_or(i64::MAX);
        let rows = self
            .run(&format!("listing the leases of cluster {cluster}"), async {
                let client = self.shared.db.pool().get().await?;
                let observe = self.shared.db.prepare(&client, OBSERVE).await?;
                Ok(observe.query(&client, &[&cluster, &limit]).await?)
            })
            .await?;
        Ok(rows
            .iter()
            .map(|row| LeaseRecord {
                name: row.get(0),
                holder: row.get(1),
                epoch: epoch_of(row.get(2)),
                acquired_at: row.get(3),
                expires_at: row.get(4),
                released: row.get(5),
                active: row.get(6),
                crash_detection: CrashDetection::parse(row.get(7)).unwrap_or(CrashDetection::Ttl),
                holder_session: row.get::<_, Option<i32>>(8).map(|pid| HolderSession {
                    pid,
                    backend_start: row.get(9),
                }),
                last_move: row
                    .get::<_, Option<&str>>(10)
                    .and_then(MoveReason::parse)
                    .zip(row.get::<_, Option<DateTime<Utc>>>(11))
                    .zip(row.get::<_, Option<String>>(13))
                    .map(|((reason, at), to)| PlacementMove {
                        reason,
                        at,
                        from: row.get(12),
                        to,
                    }),
            })
            .collect())
    }

    async fn history_before(
        &self,
        key: &LeaseKey,
        before: Option<Epoch>,
        limit: usize,
    ) -> Result<Vec<TenureRecord>, AuthorityError> {
        validate_key(key)?;
        let limit = i64::try_from(limit.min(MAX_HISTORY)).unwrap_or(0);
        // An epoch beyond i64 is above every recorded one: no bound.
        let before: Option<i64> = before.and_then(|e| i64::try_from(e.0).ok());
        let rows = self
            .run(&format!("reading the history of lease {key}"), async {
                let client = self.shared.db.pool().get().await?;
                let history = self.shared.db.prepare(&client, HISTORY).await?;
                Ok(history
                    .query(&client, &[&key.cluster, &key.name, &limit, &before])
                    .await?)
            })
            .await?;
        Ok(rows
            .iter()
            .map(|row| TenureRecord {
                epoch: epoch_of(row.get(0)),
                holder: row.get(1),
                // Redacted again on the way out: rows written before
                // redaction covered every password form keep what they
                // stored.
                endpoint: db::redact(row.get::<_, &str>(2)),
                acquired_at: row.get(3),
                ended_at: row.get(4),
                end_reason: row.get::<_, Option<&str>>(5).and_then(parse_reason),
                writes: u64::try_from(row.get::<_, i64>(6)).unwrap_or_default(),
                last_write_at: row.get(7),
                outbound_requests: u64::try_from(row.get::<_, i64>(8)).unwrap_or_default(),
                last_outbound_at: row.get(9),
            })
            .collect())
    }

    async fn record_outbound(
        &self,
        fence: &Fence,
        requests: u64,
        last_at: Option<DateTime<Utc>>,
    ) -> Result<(), AuthorityError> {
        validate_fence(fence)?;
        let epoch = epoch_param(fence)?;
        // A count beyond bigint cannot happen in practice; saturate
        // rather than fail a statistic.
        let requests = i64::try_from(requests).unwrap_or(i64::MAX);
        self.run(
            &format!("recording the outbound requests of {fence}"),
            async {
                let client = self.shared.db.pool().get().await?;
                let record = self.shared.db.prepare(&client, RECORD_OUTBOUND).await?;
                record
                    .execute(
                        &client,
                        &[
                            &fence.key.cluster,
                            &fence.key.name,
                            &epoch,
                            &fence.holder,
                            &requests,
                            &last_at,
                        ],
                    )
                    .await?;
                Ok(())
            },
        )
        .await
    }

    fn claim_holder(&self, cluster: &str, holder: &str, host: HostInfo) -> Option<HolderClaim> {
        // The claim session must reach the database this authority
        // verified, not another one or a standby `session_url` names; weak,
        // so the claim does not keep the authority alive.
        let shared = Arc::downgrade(&self.shared);
        let verified = holder_claim::Verified {
            endpoint: self.endpoint().to_string(),
            identity: Arc::new(move || {
                let shared = shared.upgrade();
                Box::pin(async move {
                    let shared = shared.ok_or_else(|| "the lease authority is gone".to_string())?;
                    PostgresAuthority { shared }
                        .verify()
                        .await
                        .map_err(|e| e.to_string())
                })
            }),
        };
        let (claim, liveness) = holder_claim::start(
            &self.session_target(),
            &self.session_endpoint(),
            cluster,
            holder,
            host,
            verified,
        );
        let mut claims = self
            .shared
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        claims.retain(|claim| claim.view.has_changed().is_ok());
        claims.push(ClaimWatch {
            cluster: cluster.to_string(),
            holder: holder.to_string(),
            view: claim.view(),
            liveness,
        });
        Some(claim)
    }

    fn liveness(&self, cluster: &str, holder: &str) -> Option<Liveness> {
        let mut claims = self
            .shared
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        claims.retain(|claim| claim.view.has_changed().is_ok());
        claims
            .iter()
            .find(|claim| claim.cluster == cluster && claim.holder == holder)
            .map(|claim| claim.liveness.clone())
    }

    fn released(&self, cluster: &str) -> watch::Receiver<u64> {
        // Subscribe before starting the listener: its first session wakes
        // every subscriber, covering releases sent before it listened.
        let receiver = self.shared.wakes.subscribe(cluster);
        self.start_listener();
        receiver
    }

    fn dead_holder(&self, key: &LeaseKey) -> Option<watch::Receiver<u64>> {
        // The listener's session scans for the leases subscribed here.
        let receiver = self.shared.wakes.subscribe_takeover(key);
        self.start_listener();
        Some(receiver)
    }
}
