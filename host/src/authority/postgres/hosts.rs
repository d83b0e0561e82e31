//! The host registry on PostgreSQL (`leasehold_hosts`, migrations 6 and
//! 16): the heartbeat, the live hosts and the caller's lapsed leases in
//! one statement, the deregistration in another. The row itself is
//! written by the holder claim (`holder_claim.rs`) when the host claims
//! its name; a heartbeat
//! before that finds no row to beat, and the host is not yet live to the
//! others (it still sees them).

use std::time::Duration;

use async_trait::async_trait;

use super::PostgresAuthority;
use crate::authority::AuthorityError;
use crate::authority::hosts::{HostRegistry, PeerHost, RegistryView};
use crate::names::{check_holder, check_label};

/// Beat this host's heartbeat (and its controllers), and list the other
/// live hosts: heartbeat younger than $4 seconds and holder claim lock
/// held (the liveness session; the same `pg_locks` test as the prune of
/// `holder_claim.rs`), each with the leases it holds now; then the leases
/// of this host's controllers that lapsed (not released, expired by the
/// database clock: what a grant would take now, L2). Hosts first
/// (`lapsed` false), each part in name order. The beat runs whatever the
/// query reads of it (a data-modifying `WITH` always runs to completion).
const HEARTBEAT: &str = "
    WITH beat AS (
        UPDATE leasehold_hosts
           SET heartbeat_at = clock_timestamp(), controllers = $3
         WHERE cluster = $1 AND holder = $2
        RETURNING holder
    )
    SELECT false AS lapsed, h.holder AS name, h.controllers,
           (SELECT count(*) FROM leasehold_leases l
             WHERE l.cluster = h.cluster AND l.holder = h.holder
               AND NOT l.released AND l.expires_at > clock_timestamp()) AS held
      FROM leasehold_hosts h
     WHERE h.cluster = $1 AND h.holder <> $2
       AND h.heartbeat_at > clock_timestamp() - make_interval(secs => $4::float8)
       AND EXISTS (
           SELECT 1 FROM pg_locks k
            WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
              AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND k.classid = ((h.claim_key >> 32) & 4294967295)::oid
              AND k.objid = (h.claim_key & 4294967295)::oid)
    UNION ALL
    SELECT true, l.name, NULL::text[], 0::bigint
      FROM leasehold_leases l
     WHERE l.cluster = $1 AND l.name = ANY($3)
       AND NOT l.released AND l.expires_at <= clock_timestamp()
     ORDER BY 1, 2";

/// Orderly shutdown: this host is no longer live.
const DEREGISTER: &str = "
    UPDATE leasehold_hosts SET heartbeat_at = NULL WHERE cluster = $1 AND holder = $2";

#[async_trait]
impl HostRegistry for PostgresAuthority {
    async fn heartbeat(
        &self,
        cluster: &str,
        holder: &str,
        controllers: &[String],
        live_within: Duration,
    ) -> Result<RegistryView, AuthorityError> {
        check_label("cluster", cluster)?;
        check_holder(holder)?;
        let controllers = controllers.to_vec();
        let within = live_within.as_secs_f64();
        self.run(&format!("beating the heartbeat of host {holder}"), async {
            let client = self.shared.db.pool().get().await?;
            let statement = self.shared.db.prepare(&client, HEARTBEAT).await?;
            let rows = statement
                .query(&client, &[&cluster, &holder, &controllers, &within])
                .await?;
            let mut view = RegistryView::default();
            for row in &rows {
                if row.get::<_, bool>(0) {
                    view.lapsed.push(row.get(1));
                } else {
                    view.peers.push(PeerHost {
                        holder: row.get(1),
                        controllers: row.get(2),
                        held: usize::try_from(row.get::<_, i64>(3)).unwrap_or(0),
                    });
                }
            }
            Ok(view)
        })
        .await
    }

    async fn deregister(&self, cluster: &str, holder: &str) -> Result<(), AuthorityError> {
        check_label("cluster", cluster)?;
        check_holder(holder)?;
        self.run(&format!("deregistering host {holder}"), async {
            let client = self.shared.db.pool().get().await?;
            let statement = self.shared.db.prepare(&client, DEREGISTER).await?;
            statement.execute(&client, &[&cluster, &holder]).await?;
            Ok(())
        })
        .await
    }
}
