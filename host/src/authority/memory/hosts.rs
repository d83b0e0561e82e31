//! The host registry in the memory backend: the same semantics as
//! PostgreSQL's (a heartbeat younger than `live_within`, no
//! deregistration since), on this backend's monotonic clock. One process
//! has no liveness sessions: a holder is live while it beats.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::MemoryAuthority;
use crate::authority::AuthorityError;
use crate::authority::hosts::{HostRegistry, PeerHost};
use crate::names::{check_holder, check_label};

/// Every host that beat, by `(cluster, holder)`.
#[derive(Default)]
pub(super) struct Registry {
    rows: BTreeMap<(String, String), Row>,
}

struct Row {
    controllers: Vec<String>,
    /// `None`: deregistered.
    heartbeat: Option<Instant>,
}

#[async_trait]
impl HostRegistry for MemoryAuthority {
    async fn heartbeat(
        &self,
        cluster: &str,
        holder: &str,
        controllers: &[String],
        live_within: Duration,
    ) -> Result<Vec<PeerHost>, AuthorityError> {
        check_label("cluster", cluster)?;
        check_holder(holder)?;
        let now = self.shared.clock.now();
        let mut state = self.state();
        state.hosts.rows.insert(
            (cluster.to_string(), holder.to_string()),
            Row {
                controllers: controllers.to_vec(),
                heartbeat: Some(now),
            },
        );
        let state = &*state;
        Ok(state
            .hosts
            .rows
            .iter()
            .filter(|((c, h), row)| {
                c == cluster
                    && h != holder
                    && row
                        .heartbeat
                        .is_some_and(|at| now.saturating_duration_since(at) < live_within)
            })
            .map(|((_, h), row)| PeerHost {
                holder: h.clone(),
                controllers: row.controllers.clone(),
                held: state
                    .leases
                    .iter()
                    .filter(|(key, lease)| {
                        key.cluster == cluster && lease.holder == *h && lease.live(now)
                    })
                    .count(),
            })
            .collect())
    }

    async fn deregister(&self, cluster: &str, holder: &str) -> Result<(), AuthorityError> {
        check_label("cluster", cluster)?;
        check_holder(holder)?;
        if let Some(row) = self
            .state()
            .hosts
            .rows
            .get_mut(&(cluster.to_string(), holder.to_string()))
        {
            row.heartbeat = None;
        }
        Ok(())
    }
}
