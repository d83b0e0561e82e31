//! The embedded lease backend: leases and tenures in the data directory's
//! SQLite database ([`crate::embedded`]), shared by every host process on
//! the directory, with the PostgreSQL backend's semantics (L1–L8).
//!
//! - **L1**: a grant is one write transaction that reads the lease row and
//!   writes epoch + 1; write transactions are serialized across processes
//!   and committed with `synchronous = FULL`, so epochs only grow and
//!   survive restarts and power loss. Lease rows are never deleted.
//! - **L2**: a grant succeeds only if the row is absent, released or
//!   expired (by the machine's monotonic clock and its boot, see
//!   [`crate::embedded::clock`]), or, for a grant made under crash
//!   detection `session`, if its holder's liveness lock is free or held by
//!   a later claim of the name (a new process, so the one granted is dead).
//! - **L4**: the fence check ([`check_fence_and_count`]) runs inside the
//!   write's own transaction, which no grant or release can interleave.
//! - **L6**: every tenure is a row; a write's count is in the write's
//!   transaction. Each grant and each release by its holder records the
//!   last position committed before it (`granted_mark`, `released_mark`),
//!   so writes can be placed among grants by commit order from outside.
//! - **L7/L8**: a host claims its holder name with an exclusive `flock` on
//!   `hosts/<holder>.lock` for its whole life ([`claim`]); the kernel frees
//!   it when the process dies, however it dies.
//!
//! Must never: await inside a transaction (every transaction runs whole on
//! a blocking thread), or grant while another process's live claim holds
//! the lease under `session` detection.

pub mod claim;
mod hosts;
mod sharding;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::watch;

use super::fence_check::{RowView, judge};
use super::wakes::ReleaseWakes;
use super::{
    AcquireRequest, Acquired, Authority, AuthorityError, CrashDetection, DatabaseIdentity,
    EndReason, Grant, HolderSession, LeaseRecord, MoveReason, PlacementMove, RecordedSharding,
    Renewed, ShardingRule, TenureRecord, validate_fence, validate_key, validate_request,
    validate_ttl,
};
use crate::embedded::clock::{self, Now, boot_id, duration_micros};
use crate::embedded::{EmbeddedDb, EmbeddedError, describe, locks};
use crate::fence::{Epoch, Fence, FenceCause, LeaseKey};
use crate::limits::MAX_HISTORY;
use crate::names::check_label;
use crate::timeouts::EMBEDDED_TAKEOVER_SCAN;

/// The lease authority of one data directory. Cheap to clone.
#[derive(Clone)]
pub struct SqliteAuthority {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SqliteAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteAuthority")
            .field("endpoint", &self.shared.db.endpoint())
            .finish_non_exhaustive()
    }
}

struct Shared {
    db: EmbeddedDb,
    /// Per-lease takeover wakes (the per-cluster release wakes come from
    /// the database's poll).
    wakes: ReleaseWakes,
    /// The holder names this process claims now, by `(cluster, holder)`:
    /// the incarnation and pid a `session` grant records.
    claims: Mutex<HashMap<(String, String), claim::Claimed>>,
    /// Whether the takeover scan runs.
    scanning: Mutex<bool>,
}

/// The lease row as a grant, renewal or the fence check reads it.
struct LeaseRow {
    holder: String,
    epoch: u64,
    released: bool,
    expires_at: i64,
    expires_mono: i64,
    boot: String,
    crash_detection: String,
    incarnation: Option<String>,
    handover_reason: Option<String>,
    move_reason: Option<String>,
    settled: Option<i64>,
}

impl LeaseRow {
    fn live(&self, now: &Now) -> bool {
        !self.released && expires_after(&self.boot, self.expires_mono, now)
    }
}

/// Whether a deadline on the monotonic clock of boot `boot` is still ahead
/// of `now`: never, for a deadline of an earlier boot.
fn expires_after(boot: &str, expires_mono: i64, now: &Now) -> bool {
    boot == boot_id() && expires_mono > now.mono
}

const LEASE_COLUMNS: &str = "holder, epoch, released, expires_at, expires_mono, boot, \
     crash_detection, incarnation, handover_reason, move_reason, settled";

fn lease_row(tx: &Transaction<'_>, key: &LeaseKey) -> rusqlite::Result<Option<LeaseRow>> {
    tx.prepare_cached(&format!(
        "SELECT {LEASE_COLUMNS} FROM leasehold_leases WHERE cluster = ?1 AND name = ?2"
    ))?
    .query_row(params![key.cluster, key.name], |r| {
        Ok(LeaseRow {
            holder: r.get(0)?,
            epoch: r.get::<_, i64>(1)? as u64,
            released: r.get(2)?,
            expires_at: r.get(3)?,
            expires_mono: r.get(4)?,
            boot: r.get(5)?,
            crash_detection: r.get(6)?,
            incarnation: r.get(7)?,
            handover_reason: r.get(8)?,
            move_reason: r.get(9)?,
            settled: r.get(10)?,
        })
    })
    .optional()
}

/// The last position committed (revision, change position or event seq):
/// the embedded form of a snapshot, recorded by grants and releases.
pub(crate) fn last_position(tx: &Transaction<'_>) -> rusqlite::Result<i64> {
    tx.prepare_cached("SELECT last FROM leasehold_positions WHERE only = 1")?
        .query_row([], |r| r.get(0))
}

/// Whether the holder of a `session` grant that recorded `incarnation` is
/// gone: its liveness lock is free, or the name's live claim is a later
/// one (only a new process claims the name again, and only once the one
/// granted let go of the lock, by dying).
fn holder_gone(
    tx: &Transaction<'_>,
    db: &EmbeddedDb,
    cluster: &str,
    holder: &str,
    incarnation: Option<&str>,
) -> rusqlite::Result<bool> {
    let Some(incarnation) = incarnation else {
        return Ok(false);
    };
    match locks::holder_locked(db.data(), holder) {
        Ok(false) => return Ok(true),
        Ok(true) => {}
        // Cannot tell: alive, so only expiry frees the lease.
        Err(_) => return Ok(false),
    }
    let claimed: Option<Option<String>> = tx
        .prepare_cached(
            "SELECT incarnation FROM leasehold_hosts WHERE cluster = ?1 AND holder = ?2",
        )?
        .query_row(params![cluster, holder], |r| r.get(0))
        .optional()?;
    Ok(matches!(claimed, Some(Some(now)) if now != incarnation))
}

impl SqliteAuthority {
    /// The authority of `db`'s data directory.
    pub fn new(db: EmbeddedDb) -> Self {
        Self {
            shared: Arc::new(Shared {
                db,
                wakes: ReleaseWakes::new(),
                claims: Mutex::new(HashMap::new()),
                scanning: Mutex::new(false),
            }),
        }
    }

    /// The database this authority keeps its leases in.
    pub fn db(&self) -> &EmbeddedDb {
        &self.shared.db
    }

    fn endpoint(&self) -> String {
        self.shared.db.endpoint().to_string()
    }

    fn unavailable(&self, what: &str, reason: String) -> AuthorityError {
        AuthorityError::Unavailable {
            endpoint: self.endpoint(),
            reason: format!("{what}: {reason}"),
        }
    }

    fn embedded(&self, what: &str) -> impl Fn(EmbeddedError) -> AuthorityError + '_ {
        let what = what.to_string();
        move |e| self.unavailable(&what, e.to_string())
    }

    /// The claim this process holds on `holder` of `cluster`, if any.
    fn claimed(&self, cluster: &str, holder: &str) -> Option<claim::Claimed> {
        self.shared
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(cluster.to_string(), holder.to_string()))
            .cloned()
    }

    /// Run one write transaction `f` on a blocking thread.
    async fn transact<T: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce(&Transaction<'_>, &Now) -> Result<T, AuthorityError> + Send + 'static,
    ) -> Result<T, AuthorityError> {
        let endpoint = self.endpoint();
        let label = what.to_string();
        self.shared
            .db
            .write(move |c| {
                let failed = |e: rusqlite::Error| AuthorityError::Unavailable {
                    endpoint: endpoint.clone(),
                    reason: format!("{label}: {}", describe(&e)),
                };
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(failed)?;
                // Read after the write lock is held: the clock then dates
                // the transaction, not the wait for it.
                let now = Now::read();
                let value = f(&tx, &now)?;
                tx.commit().map_err(failed)?;
                Ok(value)
            })
            .await
            .map_err(self.embedded(what))?
    }

    /// Run one read `f` on a blocking thread, in one snapshot.
    async fn snapshot<T: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce(&Transaction<'_>, &Now) -> Result<T, AuthorityError> + Send + 'static,
    ) -> Result<T, AuthorityError> {
        let endpoint = self.endpoint();
        let label = what.to_string();
        self.shared
            .db
            .read(move |c| {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Deferred)
                    .map_err(|e| AuthorityError::Unavailable {
                        endpoint: endpoint.clone(),
                        reason: format!("{label}: {}", describe(&e)),
                    })?;
                let now = Now::read();
                f(&tx, &now)
            })
            .await
            .map_err(self.embedded(what))?
    }

    /// Start the scan for dead holders of the leases standbys wait on, if
    /// it is not running: every [`EMBEDDED_TAKEOVER_SCAN`] while any lease
    /// is waited on.
    fn ensure_scan(&self) {
        let mut scanning = self
            .shared
            .scanning
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *scanning {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        *scanning = true;
        let weak = Arc::downgrade(&self.shared);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(EMBEDDED_TAKEOVER_SCAN).await;
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                let authority = SqliteAuthority { shared };
                let waited = authority.shared.wakes.waited_leases();
                if waited.is_empty() {
                    *authority
                        .shared
                        .scanning
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = false;
                    return;
                }
                match authority.dead_holders(waited).await {
                    Ok(dead) => {
                        for key in dead {
                            authority.shared.wakes.wake_lease(&key);
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "looking for dead lease holders failed"),
                }
            }
        });
    }

    /// Which of `keys` are held under a `session` grant whose holder is
    /// gone.
    async fn dead_holders(&self, keys: Vec<LeaseKey>) -> Result<Vec<LeaseKey>, AuthorityError> {
        let db = self.shared.db.clone();
        self.snapshot("looking for dead holders", move |tx, now| {
            let mut dead = Vec::new();
            for key in keys {
                let row = lease_row(tx, &key).map_err(|e| AuthorityError::Unavailable {
                    endpoint: db.endpoint().to_string(),
                    reason: describe(&e),
                })?;
                let Some(row) = row else { continue };
                if row.live(now)
                    && row.crash_detection == CrashDetection::Session.as_str()
                    && holder_gone(
                        tx,
                        &db,
                        &key.cluster,
                        &row.holder,
                        row.incarnation.as_deref(),
                    )
                    .unwrap_or(false)
                {
                    dead.push(key);
                }
            }
            Ok(dead)
        })
        .await
    }

    /// Time `micros` as UTC.
    fn at(micros: i64) -> DateTime<Utc> {
        clock::time(micros)
    }
}

/// The fence check and the tenure's write count, inside the caller's
/// write transaction (L4, L6): the lease row must show the fence's holder
/// and epoch, not released, not expired by the shared clock, and the
/// count must find the tenure open. A grant or release cannot run until
/// this transaction ends, so a write that passes here commits before any
/// later grant. The refusal's words are [`judge`]'s, as on every backend.
pub(crate) fn check_fence_and_count(
    tx: &Transaction<'_>,
    fence: &Fence,
    now: &Now,
) -> Result<(), AuthorityError> {
    let caller = |e: rusqlite::Error| AuthorityError::Unavailable {
        endpoint: "the write's transaction".to_string(),
        reason: format!("fence check of {fence}: {}", describe(&e)),
    };
    if cfg!(feature = "unsafe-disable-fence") {
        // Test-only build: the write goes in unchecked, counted against
        // whatever tenure has its epoch.
        tx.prepare_cached(
            "UPDATE leasehold_tenures SET writes = writes + 1, last_write_at = ?4
              WHERE cluster = ?1 AND lease = ?2 AND epoch = ?3",
        )
        .and_then(|mut s| {
            s.execute(params![
                fence.key.cluster,
                fence.key.name,
                fence.epoch.0 as i64,
                now.utc
            ])
        })
        .map_err(caller)?;
        return Ok(());
    }
    let row = lease_row(tx, &fence.key).map_err(caller)?;
    judge(
        fence,
        row.as_ref().map(|row| RowView {
            holder: &row.holder,
            epoch: row.epoch,
            released: row.released,
            live: expires_after(&row.boot, row.expires_mono, now),
        }),
    )?;
    let counted = tx
        .prepare_cached(
            "UPDATE leasehold_tenures SET writes = writes + 1, last_write_at = ?5
              WHERE cluster = ?1 AND lease = ?2 AND epoch = ?3 AND holder = ?4
                AND ended_at IS NULL",
        )
        .and_then(|mut s| {
            s.execute(params![
                fence.key.cluster,
                fence.key.name,
                fence.epoch.0 as i64,
                fence.holder,
                now.utc
            ])
        })
        .map_err(caller)?;
    if counted == 1 {
        return Ok(());
    }
    // The lease row shows the fence current, yet its tenure is not open:
    // its holder ended it (a release, or the record of a loss), or the
    // record is missing, which the authority never leaves.
    let open: Option<bool> = tx
        .prepare_cached(
            "SELECT ended_at IS NULL FROM leasehold_tenures
              WHERE cluster = ?1 AND lease = ?2 AND epoch = ?3 AND holder = ?4",
        )
        .and_then(|mut s| {
            s.query_row(
                params![
                    fence.key.cluster,
                    fence.key.name,
                    fence.epoch.0 as i64,
                    fence.holder
                ],
                |r| r.get(0),
            )
            .optional()
        })
        .map_err(caller)?;
    match open {
        Some(false) => Err(AuthorityError::Fenced {
            fence: fence.clone(),
            cause: FenceCause::Released,
            reason: "the tenure has ended".to_string(),
        }),
        _ => Err(AuthorityError::Unavailable {
            endpoint: "the write's transaction".to_string(),
            reason: format!("the tenure record of {fence} is missing; refusing to write uncounted"),
        }),
    }
}

/// Grant `request` under `detection` (with the claim `claimed`), if the
/// lease is grantable: the body of one grant's transaction.
#[allow(clippy::too_many_arguments)]
fn grant(
    tx: &Transaction<'_>,
    db: &EmbeddedDb,
    now: &Now,
    request: &AcquireRequest,
    claimed: Option<&claim::Claimed>,
    moved: Option<MoveReason>,
    expires_mono: i64,
    expires_at: i64,
) -> rusqlite::Result<Acquired> {
    let key = &request.key;
    let previous = lease_row(tx, key)?;
    if let Some(row) = &previous
        && row.live(now)
    {
        let gone = row.crash_detection == CrashDetection::Session.as_str()
            && holder_gone(
                tx,
                db,
                &key.cluster,
                &row.holder,
                row.incarnation.as_deref(),
            )?;
        if !gone {
            return Ok(Acquired::Held {
                holder: row.holder.clone(),
                epoch: Epoch(row.epoch),
                expires_at: SqliteAuthority::at(row.expires_at),
            });
        }
    }
    let epoch = previous.as_ref().map_or(0, |row| row.epoch) + 1;
    // The move this grant records, as PostgreSQL's GRANT_NEXT does: from a
    // different holder, the reason a handover left, else the taker's.
    let made: Option<(String, Option<String>)> = match &previous {
        Some(row) if row.holder != request.holder => row
            .handover_reason
            .clone()
            .or_else(|| moved.map(|m| m.as_str().to_string()))
            .map(|reason| (reason, Some(row.holder.clone()))),
        Some(_) => None,
        None => moved.map(|m| (m.as_str().to_string(), None)),
    };
    // Every open tenure ends now: `expired` at its expiry if it ran out,
    // else `superseded` (a holder whose liveness lock is gone).
    let (end_reason, ended_at) = match &previous {
        Some(row) if !row.released && !expires_after(&row.boot, row.expires_mono, now) => {
            (EndReason::Expired, row.expires_at.min(now.utc))
        }
        _ => (EndReason::Superseded, now.utc),
    };
    tx.prepare_cached(
        "UPDATE leasehold_tenures SET ended_at = max(?3, acquired_at), end_reason = ?4
          WHERE cluster = ?1 AND lease = ?2 AND ended_at IS NULL",
    )?
    .execute(params![
        key.cluster,
        key.name,
        ended_at,
        end_reason.as_str()
    ])?;
    let mark = last_position(tx)?;
    tx.prepare_cached(
        "INSERT INTO leasehold_tenures
                (cluster, lease, epoch, holder, endpoint, acquired_at, granted_mark)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        key.cluster,
        key.name,
        epoch as i64,
        request.holder,
        db.endpoint(),
        now.utc,
        mark
    ])?;
    let detection = match claimed {
        Some(_) => CrashDetection::Session,
        None => CrashDetection::Ttl,
    };
    tx.prepare_cached(
        "INSERT INTO leasehold_leases
                (cluster, name, holder, epoch, acquired_at, renewed_at, expires_at,
                 expires_mono, boot, released, crash_detection, incarnation, holder_pid,
                 handover_reason, move_reason, move_at, move_from, move_to, settled)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8, 0, ?9, ?10, ?11, NULL,
                 ?12, CASE WHEN ?12 IS NULL THEN NULL ELSE ?5 END, ?13,
                 CASE WHEN ?12 IS NULL THEN NULL ELSE ?3 END, NULL)
         ON CONFLICT (cluster, name) DO UPDATE SET
                holder = excluded.holder, epoch = excluded.epoch,
                acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at,
                expires_at = excluded.expires_at, expires_mono = excluded.expires_mono,
                boot = excluded.boot, released = 0,
                crash_detection = excluded.crash_detection,
                incarnation = excluded.incarnation, holder_pid = excluded.holder_pid,
                handover_reason = NULL,
                move_reason = coalesce(excluded.move_reason, move_reason),
                move_at = CASE WHEN excluded.move_reason IS NULL THEN move_at
                               ELSE excluded.move_at END,
                move_from = CASE WHEN excluded.move_reason IS NULL THEN move_from
                                 ELSE excluded.move_from END,
                move_to = CASE WHEN excluded.move_reason IS NULL THEN move_to
                               ELSE excluded.move_to END",
    )?
    .execute(params![
        key.cluster,
        key.name,
        request.holder,
        epoch as i64,
        now.utc,
        expires_at,
        expires_mono,
        boot_id(),
        detection.as_str(),
        claimed.map(|c| c.incarnation.clone()),
        claimed.map(|c| i64::from(c.pid)),
        made.as_ref().map(|(reason, _)| reason.clone()),
        made.as_ref().and_then(|(_, from)| from.clone()),
    ])?;
    let recorded = made.and_then(|(reason, _)| MoveReason::parse(&reason));
    let _ = previous.as_ref().map(|row| &row.move_reason);
    Ok(Acquired::Granted(Grant {
        fence: Fence {
            key: key.clone(),
            epoch: Epoch(epoch),
            holder: request.holder.clone(),
        },
        acquired_at: clock::time(now.utc),
        expires_at: clock::time(expires_at),
        moved: recorded,
        settled: previous
            .as_ref()
            .and_then(|row| row.settled)
            .map(|s| s as u64),
    }))
}

#[async_trait]
impl Authority for SqliteAuthority {
    async fn identity(&self) -> Result<DatabaseIdentity, AuthorityError> {
        let endpoint = self.endpoint();
        let id = self
            .snapshot("reading the database identity", |tx, _| {
                tx.query_row("SELECT database_id FROM leasehold_database", [], |r| {
                    r.get::<_, String>(0)
                })
                .map_err(|e| AuthorityError::Unavailable {
                    endpoint: "embedded SQLite".to_string(),
                    reason: describe(&e),
                })
            })
            .await?;
        let database_id = uuid::Uuid::parse_str(&id).map_err(|e| AuthorityError::Schema {
            endpoint: endpoint.clone(),
            reason: format!("the database id {id:?} is not a uuid ({e})"),
        })?;
        Ok(DatabaseIdentity {
            database_id,
            system_identifier: 0,
            database_oid: 0,
            database_name: crate::embedded::dir::DATABASE_FILE.to_string(),
            timeline: None,
            in_recovery: false,
            read_only: false,
            endpoint,
        })
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquired, AuthorityError> {
        self.acquire_placed(request, CrashDetection::Ttl, None)
            .await
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
        let ttl = duration_micros(request.ttl);
        // A `session` grant records this process's claim on the holder
        // name; without one here it can only be taken over by expiry.
        let claimed = match detection {
            CrashDetection::Session => self.claimed(&request.key.cluster, &request.holder),
            CrashDetection::Ttl => None,
        };
        let db = self.shared.db.clone();
        let request = request.clone();
        let sharding = sharding.cloned();
        let what = format!("acquiring lease {} for {}", request.key, request.holder);
        let endpoint = self.endpoint();
        self.transact(&what.clone(), move |tx, now| {
            if let Some(rule) = &sharding {
                sharding::judge_or_record(tx, &request, rule, now)?;
            }
            let expires_mono = now.mono.saturating_add(ttl);
            let expires_at = now.utc.saturating_add(ttl);
            grant(
                tx,
                &db,
                now,
                &request,
                claimed.as_ref(),
                moved,
                expires_mono,
                expires_at,
            )
            .map_err(|e| AuthorityError::Unavailable {
                endpoint: endpoint.clone(),
                reason: format!("{what}: {}", describe(&e)),
            })
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
        let ttl = duration_micros(ttl);
        let fences = fences.to_vec();
        let settled = settled.to_vec();
        let endpoint = self.endpoint();
        let what = format!("renewing {} lease(s) of {}", fences.len(), first.holder);
        self.transact(&what.clone(), move |tx, now| {
            let failed = |e: rusqlite::Error| AuthorityError::Unavailable {
                endpoint: endpoint.clone(),
                reason: format!("{what}: {}", describe(&e)),
            };
            let mut statement = tx
                .prepare_cached(
                    "UPDATE leasehold_leases
                        SET expires_at = ?5, expires_mono = ?6, renewed_at = ?7,
                            settled = coalesce(?8, settled)
                      WHERE cluster = ?1 AND name = ?2 AND holder = ?3 AND epoch = ?4
                        AND released = 0 AND boot = ?9 AND expires_mono > ?10",
                )
                .map_err(failed)?;
            let expires_mono = now.mono.saturating_add(ttl);
            let expires_at = now.utc.saturating_add(ttl);
            let mut results = Vec::with_capacity(fences.len());
            for (i, fence) in fences.iter().enumerate() {
                let position = settled.get(i).copied().flatten().map(|p| p as i64);
                let changed = statement
                    .execute(params![
                        fence.key.cluster,
                        fence.key.name,
                        fence.holder,
                        fence.epoch.0 as i64,
                        expires_at,
                        expires_mono,
                        now.utc,
                        position,
                        boot_id(),
                        now.mono
                    ])
                    .map_err(failed)?;
                results.push(if changed == 1 {
                    Renewed::Extended {
                        expires_at: clock::time(expires_at),
                    }
                } else {
                    Renewed::Lost
                });
            }
            Ok(results)
        })
        .await
    }

    async fn release(&self, fence: &Fence, reason: EndReason) -> Result<(), AuthorityError> {
        self.release_settled(fence, reason, None, None).await
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
        let endpoint = self.endpoint();
        let what = format!("releasing {fence}");
        let owned = fence.clone();
        let releases = self
            .transact(&what.clone(), move |tx, now| {
                let fence = owned;
                let failed = |e: rusqlite::Error| AuthorityError::Unavailable {
                    endpoint: endpoint.clone(),
                    reason: format!("{what}: {}", describe(&e)),
                };
                // Released only while this fence is the current grant: a
                // stale holder never releases its successor.
                let released = tx
                    .prepare_cached(
                        "UPDATE leasehold_leases
                            SET released = 1, handover_reason = ?5,
                                settled = coalesce(?6, settled)
                          WHERE cluster = ?1 AND name = ?2 AND holder = ?3 AND epoch = ?4
                            AND released = 0",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            fence.key.cluster,
                            fence.key.name,
                            fence.holder,
                            fence.epoch.0 as i64,
                            moved.map(MoveReason::as_str),
                            settled.map(|p| p as i64),
                        ])
                    })
                    .map_err(failed)?
                    == 1;
                let mark = last_position(tx).map_err(failed)?;
                tx.prepare_cached(
                    "UPDATE leasehold_tenures
                        SET ended_at = max(?5, acquired_at), end_reason = ?6, released_mark = ?7
                      WHERE cluster = ?1 AND lease = ?2 AND epoch = ?3 AND holder = ?4
                        AND ended_at IS NULL",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        fence.key.cluster,
                        fence.key.name,
                        fence.epoch.0 as i64,
                        fence.holder,
                        now.utc,
                        reason.as_str(),
                        mark
                    ])
                })
                .map_err(failed)?;
                if !released {
                    return Ok(None);
                }
                let count: i64 = tx
                    .prepare_cached(
                        "INSERT INTO leasehold_feeds (cluster, releases) VALUES (?1, 1)
                         ON CONFLICT (cluster) DO UPDATE SET releases = releases + 1
                         RETURNING releases",
                    )
                    .and_then(|mut s| s.query_row(params![fence.key.cluster], |r| r.get(0)))
                    .map_err(failed)?;
                Ok(Some(count as u64))
            })
            .await?;
        if let Some(count) = releases {
            // Standbys of this process at once; others at their next poll.
            self.shared.db.released(&fence.key.cluster, count);
        }
        Ok(())
    }

    async fn observe(&self, cluster: &str) -> Result<Vec<LeaseRecord>, AuthorityError> {
        check_label("cluster", cluster)?;
        let cluster = cluster.to_string();
        let endpoint = self.endpoint();
        self.snapshot("reading the leases", move |tx, now| {
            let failed = |e: rusqlite::Error| AuthorityError::Unavailable {
                endpoint: endpoint.clone(),
                reason: format!("reading the leases of {cluster}: {}", describe(&e)),
            };
            let mut statement = tx
                .prepare_cached(
                    "SELECT l.name, l.holder, l.epoch, l.acquired_at, l.expires_at, l.released,
                            l.expires_mono, l.boot, l.crash_detection, l.holder_pid,
                            h.started_at, l.move_reason, l.move_at, l.move_from, l.move_to
                       FROM leasehold_leases l
                       LEFT JOIN leasehold_hosts h
                         ON h.cluster = l.cluster AND h.holder = l.holder
                        AND h.incarnation = l.incarnation
                      WHERE l.cluster = ?1
                      ORDER BY l.name",
                )
                .map_err(failed)?;
            let rows = statement
                .query_map(params![cluster], |r| {
                    let released: bool = r.get(5)?;
                    let boot: String = r.get(7)?;
                    let pid: Option<i64> = r.get(9)?;
                    let started: Option<i64> = r.get(10)?;
                    let reason: Option<String> = r.get(11)?;
                    Ok(LeaseRecord {
                        name: r.get(0)?,
                        holder: r.get(1)?,
                        epoch: Epoch(r.get::<_, i64>(2)? as u64),
                        acquired_at: clock::time(r.get(3)?),
                        expires_at: clock::time(r.get(4)?),
                        released,
                        active: !released && expires_after(&boot, r.get(6)?, now),
                        crash_detection: CrashDetection::parse(&r.get::<_, String>(8)?)
                            .unwrap_or(CrashDetection::Ttl),
                        holder_session: pid.map(|pid| HolderSession {
                            pid: i32::try_from(pid).unwrap_or(i32::MAX),
                            backend_start: started.map(clock::time),
                        }),
                        last_move: match reason.as_deref().and_then(MoveReason::parse) {
                            Some(reason) => Some(PlacementMove {
                                reason,
                                at: clock::time(r.get::<_, Option<i64>>(12)?.unwrap_or(0)),
                                from: r.get(13)?,
                                to: r.get::<_, Option<String>>(14)?.unwrap_or_default(),
                            }),
                            None => None,
                        },
                    })
                })
                .map_err(failed)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(failed)
        })
        .await
    }

    async fn history_before(
        &self,
        key: &LeaseKey,
        before: Option<Epoch>,
        limit: usize,
    ) -> Result<Vec<TenureRecord>, AuthorityError> {
        validate_key(key)?;
        let key = key.clone();
        let endpoint = self.endpoint();
        let limit = limit.min(MAX_HISTORY) as i64;
        let before = before.map_or(i64::MAX, |e| i64::try_from(e.0).unwrap_or(i64::MAX));
        self.snapshot("reading the tenure history", move |tx, _| {
            let failed = |e: rusqlite::Error| AuthorityError::Unavailable {
                endpoint: endpoint.clone(),
                reason: format!("reading the history of {key}: {}", describe(&e)),
            };
            let mut statement = tx
                .prepare_cached(
                    "SELECT epoch, holder, endpoint, acquired_at, ended_at, end_reason, writes,
                            last_write_at, outbound_requests, last_outbound_at
                       FROM leasehold_tenures
                      WHERE cluster = ?1 AND lease = ?2 AND epoch < ?3
                      ORDER BY epoch DESC
                      LIMIT ?4",
                )
                .map_err(failed)?;
            let rows = statement
                .query_map(params![key.cluster, key.name, before, limit], |r| {
                    let reason: Option<String> = r.get(5)?;
                    Ok(TenureRecord {
                        epoch: Epoch(r.get::<_, i64>(0)? as u64),
                        holder: r.get(1)?,
                        endpoint: r.get(2)?,
                        acquired_at: clock::time(r.get(3)?),
                        ended_at: r.get::<_, Option<i64>>(4)?.map(clock::time),
                        end_reason: reason.as_deref().and_then(end_reason),
                        writes: r.get::<_, i64>(6)? as u64,
                        last_write_at: r.get::<_, Option<i64>>(7)?.map(clock::time),
                        outbound_requests: r.get::<_, i64>(8)? as u64,
                        last_outbound_at: r.get::<_, Option<i64>>(9)?.map(clock::time),
                    })
                })
                .map_err(failed)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(failed)
        })
        .await
    }

    async fn record_outbound(
        &self,
        fence: &Fence,
        requests: u64,
        last_at: Option<DateTime<Utc>>,
    ) -> Result<(), AuthorityError> {
        validate_fence(fence)?;
        let fence = fence.clone();
        let endpoint = self.endpoint();
        self.transact("recording outbound requests", move |tx, _| {
            tx.prepare_cached(
                "UPDATE leasehold_tenures
                    SET outbound_requests = max(outbound_requests, ?5),
                        last_outbound_at = CASE
                            WHEN ?6 IS NULL THEN last_outbound_at
                            WHEN last_outbound_at IS NULL THEN ?6
                            ELSE max(last_outbound_at, ?6) END
                  WHERE cluster = ?1 AND lease = ?2 AND epoch = ?3 AND holder = ?4",
            )
            .and_then(|mut s| {
                s.execute(params![
                    fence.key.cluster,
                    fence.key.name,
                    fence.epoch.0 as i64,
                    fence.holder,
                    i64::try_from(requests).unwrap_or(i64::MAX),
                    last_at.map(clock::micros),
                ])
            })
            .map(drop)
            .map_err(|e| AuthorityError::Unavailable {
                endpoint: endpoint.clone(),
                reason: format!("recording outbound requests of {fence}: {}", describe(&e)),
            })
        })
        .await
    }

    fn released(&self, cluster: &str) -> watch::Receiver<u64> {
        self.shared.db.releases(cluster)
    }

    fn dead_holder(&self, key: &LeaseKey) -> Option<watch::Receiver<u64>> {
        let receiver = self.shared.wakes.subscribe_takeover(key);
        self.ensure_scan();
        Some(receiver)
    }

    fn claim_holder(
        &self,
        cluster: &str,
        holder: &str,
        host: super::claim::HostInfo,
    ) -> Option<super::claim::HolderClaim> {
        Some(claim::start(self.clone(), cluster, holder, host))
    }
}

/// An end reason as stored.
fn end_reason(text: &str) -> Option<EndReason> {
    [
        EndReason::Released,
        EndReason::Expired,
        EndReason::Lost,
        EndReason::Superseded,
    ]
    .into_iter()
    .find(|r| r.as_str() == text)
}
