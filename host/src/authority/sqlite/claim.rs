//! The embedded holder claim: an exclusive `flock` on
//! `data_dir/hosts/<holder>.lock`, held for the life of the process. A
//! second live process configured with the same holder name finds it
//! taken and leads nothing (L7); the kernel frees it the moment the
//! process dies, however it dies (SIGKILL included), so it is the host's
//! **liveness session** (L8, crash detection `session`): a `session` grant
//! records the claim's incarnation, and a standby takes the lease over as
//! soon as that lock is free ([`super::SqliteAuthority::dead_holder`]).
//!
//! Once the lock is taken, the claim registers the host in
//! `leasehold_hosts` under a new incarnation (pid, start time, version,
//! controllers) and only then is published as claimed: a grant can only
//! record an incarnation the registry shows, so a standby compares the two.
//!
//! A claim whose lock file is removed from under it (someone emptied
//! `hosts/`) is lost: other processes no longer see the lock, so this host
//! ends its tenures at once and claims again (a new generation).
//!
//! Must never: publish a claim before its lock is held and registered;
//! keep running as the holder after the lock's file stopped being the one
//! the name leads to.

use tokio::sync::watch;

use rusqlite::{OptionalExtension, params};

use super::SqliteAuthority;
use crate::authority::claim::{
    ClaimSession, ClaimState, ClaimView, HolderClaim, HostInfo, process_started_at,
};
use crate::embedded::clock::{self, Now, boot_id, duration_micros};
use crate::embedded::describe;
use crate::embedded::locks::{HeldLock, holder_lock_file};
use crate::timeouts::{HOLDER_CLAIM_CHECK, HOLDER_CLAIM_RETRY, HOST_ROW_RETENTION};

/// A claim held by this process, as a `session` grant records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// Names this claim of the holder name, new each time it is claimed.
    pub incarnation: String,
    /// This process.
    pub pid: i32,
}

/// Start claiming `holder` of `cluster` for `authority`'s process.
pub(super) fn start(
    authority: SqliteAuthority,
    cluster: &str,
    holder: &str,
    host: HostInfo,
) -> HolderClaim {
    let (tx, view) = watch::channel(ClaimView::pending());
    let claim = Claim {
        authority,
        cluster: cluster.to_string(),
        holder: holder.to_string(),
        host,
        view: tx,
    };
    HolderClaim::new(view, tokio::spawn(claim.run()))
}

struct Claim {
    authority: SqliteAuthority,
    cluster: String,
    holder: String,
    host: HostInfo,
    view: watch::Sender<ClaimView>,
}

/// Forgets this process's claim in the authority when the claim's task
/// ends, however it ends (aborted with its `HolderClaim`).
struct Registered {
    authority: SqliteAuthority,
    key: (String, String),
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.authority
            .shared
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.key);
    }
}

impl Claim {
    fn publish(&self, state: ClaimState) {
        self.view.send_replace(ClaimView {
            state,
            session: None,
        });
    }

    async fn run(mut self) {
        let mut generation = 0;
        loop {
            let lock = match self.take_lock().await {
                Ok(Some(lock)) => lock,
                Ok(None) => {
                    let reason = self.taken_reason().await;
                    if !matches!(self.view.borrow().state, ClaimState::Taken { .. }) {
                        tracing::error!(holder = self.holder, "REFUSING TO LEAD: {reason}");
                    }
                    self.publish(ClaimState::Taken { reason });
                    tokio::time::sleep(HOLDER_CLAIM_RETRY).await;
                    continue;
                }
                Err(reason) => {
                    self.publish(ClaimState::Unreachable { reason });
                    tokio::time::sleep(HOLDER_CLAIM_RETRY).await;
                    continue;
                }
            };
            generation += 1;
            let claimed = Claimed {
                incarnation: uuid::Uuid::new_v4().to_string(),
                pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
            };
            // Registered before it is published: a grant records only an
            // incarnation the registry shows.
            loop {
                let controllers = self.host.controllers.borrow_and_update().clone();
                match self.register(&claimed, &controllers).await {
                    Ok(()) => break,
                    Err(reason) => {
                        self.publish(ClaimState::Unreachable { reason });
                        tokio::time::sleep(HOLDER_CLAIM_RETRY).await;
                    }
                }
            }
            let key = (self.cluster.clone(), self.holder.clone());
            self.authority
                .shared
                .claims
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(key.clone(), claimed.clone());
            let forget = Registered {
                authority: self.authority.clone(),
                key,
            };
            self.view.send_replace(ClaimView {
                state: ClaimState::Claimed,
                session: Some(ClaimSession {
                    generation,
                    pid: claimed.pid,
                    backend_start: Some(process_started_at()),
                    key: 0,
                }),
            });
            tracing::info!(
                holder = self.holder,
                lock = %lock.name().display(),
                "claimed the holder name (its liveness lock in the data directory)"
            );
            let reason = self.keep(&lock, &claimed).await;
            drop(forget);
            drop(lock);
            tracing::error!(
                holder = self.holder,
                "the holder claim was lost: {reason}; claiming it again"
            );
            self.publish(ClaimState::Unreachable { reason });
        }
    }

    async fn take_lock(&self) -> Result<Option<HeldLock>, String> {
        let db = self.authority.db().clone();
        let handle = db.clone();
        let name = holder_lock_file(&self.holder);
        let shown = name.display().to_string();
        db.read(move |_| HeldLock::take(handle.data(), name, true))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("the liveness lock {shown} cannot be taken: {e}"))
    }

    /// Hold the claim until its lock file stops being the one its name
    /// leads to; register again whenever the controllers change. Returns
    /// why the claim was lost.
    async fn keep(&mut self, lock: &HeldLock, claimed: &Claimed) -> String {
        loop {
            tokio::select! {
                () = tokio::time::sleep(HOLDER_CLAIM_CHECK) => {
                    match lock.still_named(self.authority.db().data()) {
                        Ok(true) => {}
                        Ok(false) => {
                            return format!(
                                "its liveness lock file {} was removed or replaced, so other \
                                 processes no longer see this host as live",
                                lock.name().display()
                            );
                        }
                        Err(e) => tracing::warn!(error = %e, "checking the liveness lock failed"),
                    }
                }
                changed = self.host.controllers.changed() => {
                    if changed.is_err() {
                        // Nobody will report controllers again: keep the
                        // claim as it is.
                        std::future::pending::<()>().await;
                    }
                    let controllers = self.host.controllers.borrow_and_update().clone();
                    if let Err(reason) = self.register(claimed, &controllers).await {
                        tracing::warn!(reason, "registering this host's controllers failed");
                    }
                }
            }
        }
    }

    /// Record this host (its incarnation, pid, start, version and
    /// controllers) in the registry, and forget hosts gone for good.
    async fn register(&self, claimed: &Claimed, controllers: &[String]) -> Result<(), String> {
        let (cluster, holder) = (self.cluster.clone(), self.holder.clone());
        let claimed = claimed.clone();
        let controllers = serde_json::to_string(controllers).unwrap_or_else(|_| "[]".into());
        let started = clock::micros(self.host.started_at);
        let version = self.host.version.clone();
        let db = self.authority.db().clone();
        let handle = db.clone();
        let gone = handle
            .write(move |c| -> rusqlite::Result<Vec<String>> {
                let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let now = Now::read();
                tx.prepare_cached(
                    "INSERT INTO leasehold_hosts
                            (cluster, holder, incarnation, pid, started_at, version, controllers,
                             heartbeat_mono, heartbeat_boot, registered_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL, ?8)
                     ON CONFLICT (cluster, holder) DO UPDATE SET
                            incarnation = excluded.incarnation, pid = excluded.pid,
                            started_at = excluded.started_at, version = excluded.version,
                            controllers = excluded.controllers,
                            registered_at = excluded.registered_at",
                )?
                .execute(params![
                    cluster,
                    holder,
                    claimed.incarnation,
                    i64::from(claimed.pid),
                    started,
                    version,
                    controllers,
                    now.utc
                ])?;
                // Hosts gone for good: registered long ago, no live lease
                // in their name, and (checked below, under their lock) no
                // live process.
                let retention = duration_micros(HOST_ROW_RETENTION);
                let mut old = tx.prepare_cached(
                    "SELECT h.holder FROM leasehold_hosts h
                      WHERE h.cluster = ?1 AND h.holder <> ?2 AND h.registered_at < ?3
                        AND (h.heartbeat_boot IS NULL OR h.heartbeat_boot <> ?4
                             OR h.heartbeat_mono < ?5)
                        AND NOT EXISTS (
                            SELECT 1 FROM leasehold_leases l
                             WHERE l.cluster = h.cluster AND l.holder = h.holder
                               AND l.released = 0 AND l.boot = ?4 AND l.expires_mono > ?6)",
                )?;
                let candidates = old
                    .query_map(
                        params![
                            cluster,
                            holder,
                            now.utc - retention,
                            boot_id(),
                            now.mono - retention,
                            now.mono
                        ],
                        |r| r.get::<_, String>(0),
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                drop(old);
                let mut forgotten = Vec::new();
                for gone in candidates {
                    // Under its lock, so nobody claims the name meanwhile.
                    if let Ok(Some(lock)) = HeldLock::take(db.data(), holder_lock_file(&gone), true)
                    {
                        tx.prepare_cached(
                            "DELETE FROM leasehold_hosts WHERE cluster = ?1 AND holder = ?2",
                        )?
                        .execute(params![cluster, gone])?;
                        let _ = db.data().dir().remove_file(lock.name());
                        forgotten.push(gone);
                    }
                }
                tx.commit()?;
                Ok(forgotten)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("registering this host: {}", describe(&e)))?;
        if !gone.is_empty() {
            tracing::info!(hosts = ?gone, "forgot hosts gone for good");
        }
        Ok(())
    }

    /// Who holds the name, from the registry, and what to do.
    async fn taken_reason(&self) -> String {
        let (cluster, holder) = (self.cluster.clone(), self.holder.clone());
        let found = self
            .authority
            .db()
            .read(move |c| {
                c.query_row(
                    "SELECT pid, started_at FROM leasehold_hosts WHERE cluster = ?1 AND holder = ?2",
                    params![cluster, holder],
                    |r| Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?)),
                )
                .optional()
            })
            .await;
        let who = match found {
            Ok(Ok(Some((Some(pid), started)))) => format!(
                " (process {pid}{})",
                started.map_or(String::new(), |s| format!(", started {}", clock::time(s)))
            ),
            _ => String::new(),
        };
        format!(
            "a live host already runs as holder {} on this data directory{who}; give each \
             replica its own holder (holder in the config, or LEASEHOLD_HOLDER)",
            self.holder
        )
    }
}
