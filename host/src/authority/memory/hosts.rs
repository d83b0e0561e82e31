//! The host registry in the memory backend: the same semantics as
//! PostgreSQL's (a heartbeat younger than `live_within`, no
//! deregistration since; the caller's leases neither released nor live
//! are lapsed), on this backend's monotonic clock. One process has no
//! liveness sessions: a holder is live while it beats.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::MemoryAuthority;
use crate::authority::AuthorityError;
use crate::authority::hosts::{HostRegistry, PeerHost, RegistryView};
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
    ) -> Result<RegistryView, AuthorityError> {
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
        let peers = state
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
            .collect();
        let lapsed = state
            .leases
            .iter()
            .filter(|(key, lease)| {
                key.cluster == cluster
                    && controllers.contains(&key.name)
                    && !lease.released
                    && !lease.live(now)
            })
            .map(|(key, _)| key.name.clone())
            .collect();
        Ok(RegistryView { peers, lapsed })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::{AcquireRequest, Authority};
    use crate::fence::LeaseKey;

    const TTL: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn live_hosts_are_those_that_beat_within_the_ttl_and_did_not_deregister() {
        let authority = MemoryAuthority::new();
        let runs = vec!["a".to_string(), "b".to_string()];
        assert!(
            authority
                .heartbeat("east", "h1", &runs, TTL)
                .await
                .unwrap()
                .peers
                .is_empty()
        );
        authority.heartbeat("west", "h3", &runs, TTL).await.unwrap();
        let request = AcquireRequest {
            key: LeaseKey::new("east", "a"),
            holder: "h1".into(),
            ttl: TTL,
        };
        authority.acquire(&request).await.unwrap();
        // h2 sees h1 (not itself, not another cluster's host), holding one.
        let peers = authority
            .heartbeat("east", "h2", &runs, TTL)
            .await
            .unwrap()
            .peers;
        assert_eq!(
            peers,
            [PeerHost {
                holder: "h1".into(),
                controllers: runs.clone(),
                held: 1,
            }]
        );
        // A heartbeat older than the ttl no longer counts.
        tokio::time::advance(TTL).await;
        authority.heartbeat("east", "h1", &runs, TTL).await.unwrap();
        let peers = authority
            .heartbeat("east", "h1", &runs, TTL)
            .await
            .unwrap()
            .peers;
        assert!(peers.is_empty(), "h2 beat a ttl ago: {peers:?}");
        // Its lease expired with it: h1 now holds none.
        let peers = authority
            .heartbeat("east", "h2", &runs, TTL)
            .await
            .unwrap()
            .peers;
        assert_eq!(peers.len(), 1);
        assert_eq!(peers[0].held, 0);
        // Deregistered: gone at once, back at its next beat.
        authority.deregister("east", "h1").await.unwrap();
        assert!(
            authority
                .heartbeat("east", "h2", &runs, TTL)
                .await
                .unwrap()
                .peers
                .is_empty()
        );
        authority.heartbeat("east", "h1", &runs, TTL).await.unwrap();
        assert_eq!(
            authority
                .heartbeat("east", "h2", &runs, TTL)
                .await
                .unwrap()
                .peers
                .len(),
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_neither_released_nor_renewed_is_lapsed_however_live_its_holder_looks() {
        let authority = MemoryAuthority::new();
        let runs = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let acquire = |name: &str| {
            let request = AcquireRequest {
                key: LeaseKey::new("east", name),
                holder: "h1".into(),
                ttl: TTL,
            };
            let authority = authority.clone();
            async move {
                match authority.acquire(&request).await.unwrap() {
                    crate::authority::Acquired::Granted(grant) => grant.fence,
                    other => panic!("{other:?}"),
                }
            }
        };
        acquire("a").await;
        let b = acquire("b").await;
        assert!(
            authority
                .heartbeat("east", "h2", &runs, TTL)
                .await
                .unwrap()
                .lapsed
                .is_empty(),
            "both leases are live"
        );
        // h1 releases b and stops renewing a, but keeps beating: it looks
        // live, holding nothing, and a lapsed.
        authority
            .release(&b, crate::authority::EndReason::Released)
            .await
            .unwrap();
        tokio::time::advance(TTL).await;
        authority.heartbeat("east", "h1", &runs, TTL).await.unwrap();
        let view = authority.heartbeat("east", "h2", &runs, TTL).await.unwrap();
        assert_eq!(view.peers.len(), 1, "h1 beat just now");
        assert_eq!(view.peers[0].held, 0);
        assert_eq!(
            view.lapsed,
            ["a"],
            "released b is free, not lapsed; c never held here"
        );
        // Only the caller's own controllers are listed.
        let view = authority
            .heartbeat("east", "h2", &["b".to_string()], TTL)
            .await
            .unwrap();
        assert!(view.lapsed.is_empty(), "{view:?}");
        // Nor another cluster's.
        let west = authority.heartbeat("west", "h4", &runs, TTL).await.unwrap();
        assert!(west.lapsed.is_empty(), "{west:?}");
        // Taken again: no longer lapsed.
        acquire("a").await;
        let view = authority.heartbeat("east", "h2", &runs, TTL).await.unwrap();
        assert!(view.lapsed.is_empty(), "{view:?}");
    }
}
