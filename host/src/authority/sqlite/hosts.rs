//! The host registry on the embedded backend: PostgreSQL's semantics on
//! the shared clock. A host is live while its heartbeat is younger than
//! `live_within` (on the monotonic clock of this boot) and it has not
//! deregistered, and, once it claimed its holder name, only while its
//! liveness lock is held: a host killed outright stops counting at once.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::params;

use super::SqliteAuthority;
use crate::authority::AuthorityError;
use crate::authority::hosts::{HostRegistry, PeerHost, RegistryView};
use crate::embedded::clock::{boot_id, duration_micros};
use crate::embedded::{describe, locks};
use crate::names::{check_holder, check_label};

#[async_trait]
impl HostRegistry for SqliteAuthority {
    async fn heartbeat(
        &self,
        cluster: &str,
        holder: &str,
        controllers: &[String],
        live_within: Duration,
    ) -> Result<RegistryView, AuthorityError> {
        check_label("cluster", cluster)?;
        check_holder(holder)?;
        let (cluster, holder) = (cluster.to_string(), holder.to_string());
        let runs = controllers.to_vec();
        let listed = serde_json::to_string(controllers).unwrap_or_else(|_| "[]".into());
        let within = duration_micros(live_within);
        let db = self.db().clone();
        let endpoint = self.endpoint();
        self.transact("a placement heartbeat", move |tx, now| {
            let failed = |e: rusqlite::Error| AuthorityError::Unavailable {
                endpoint: endpoint.clone(),
                reason: format!("a placement heartbeat of {holder}: {}", describe(&e)),
            };
            tx.prepare_cached(
                "INSERT INTO leasehold_hosts
                        (cluster, holder, controllers, heartbeat_mono, heartbeat_boot,
                         registered_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (cluster, holder) DO UPDATE SET
                        controllers = excluded.controllers,
                        heartbeat_mono = excluded.heartbeat_mono,
                        heartbeat_boot = excluded.heartbeat_boot",
            )
            .and_then(|mut s| {
                s.execute(params![
                    cluster,
                    holder,
                    listed,
                    now.mono,
                    boot_id(),
                    now.utc
                ])
            })
            .map_err(failed)?;
            let mut statement = tx
                .prepare_cached(
                    "SELECT h.holder, h.controllers, h.incarnation,
                            (SELECT count(*) FROM leasehold_leases l
                              WHERE l.cluster = h.cluster AND l.holder = h.holder
                                AND l.released = 0 AND l.boot = ?3 AND l.expires_mono > ?4)
                       FROM leasehold_hosts h
                      WHERE h.cluster = ?1 AND h.holder <> ?2
                        AND h.heartbeat_boot = ?3 AND h.heartbeat_mono > ?4 - ?5
                      ORDER BY h.holder",
                )
                .map_err(failed)?;
            let candidates = statement
                .query_map(params![cluster, holder, boot_id(), now.mono, within], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })
                .map_err(failed)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(failed)?;
            let mut peers = Vec::new();
            for (peer, listed, incarnation, held) in candidates {
                // A host that claimed its name is live only while its
                // liveness lock is held.
                if incarnation.is_some() && !locks::holder_locked(db.data(), &peer).unwrap_or(true)
                {
                    continue;
                }
                peers.push(PeerHost {
                    holder: peer,
                    controllers: serde_json::from_str(&listed).unwrap_or_default(),
                    held: usize::try_from(held).unwrap_or(0),
                });
            }
            let mut statement = tx
                .prepare_cached(
                    "SELECT name, boot, expires_mono FROM leasehold_leases
                      WHERE cluster = ?1 AND released = 0 ORDER BY name",
                )
                .map_err(failed)?;
            let lapsed = statement
                .query_map(params![cluster], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .map_err(failed)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(failed)?
                .into_iter()
                .filter(|(name, boot, expires)| {
                    runs.contains(name) && !super::expires_after(boot, *expires, now)
                })
                .map(|(name, ..)| name)
                .collect();
            Ok(RegistryView { peers, lapsed })
        })
        .await
    }

    async fn deregister(&self, cluster: &str, holder: &str) -> Result<(), AuthorityError> {
        check_label("cluster", cluster)?;
        check_holder(holder)?;
        let (cluster, holder) = (cluster.to_string(), holder.to_string());
        let endpoint = self.endpoint();
        self.transact("deregistering", move |tx, _| {
            tx.prepare_cached(
                "UPDATE leasehold_hosts SET heartbeat_mono = NULL
                  WHERE cluster = ?1 AND holder = ?2",
            )
            .and_then(|mut s| s.execute(params![cluster, holder]))
            .map(drop)
            .map_err(|e| AuthorityError::Unavailable {
                endpoint: endpoint.clone(),
                reason: format!("deregistering {holder}: {}", describe(&e)),
            })
        })
        .await
    }
}
