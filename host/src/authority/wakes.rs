//! Release wake-ups, per cluster: what [`super::Authority::released`]
//! hands out. Both backends feed one of these: the memory backend on every
//! release, the PostgreSQL backend from its LISTEN session.
//!
//! A receiver's value counts wakes; candidates only care that it changed.
//! Wakes may be spurious (a reconnect wakes everyone, because notifications
//! sent while nobody listened are lost) or coalesced (several releases seen
//! as one change). Never a reason to trust a lease: candidates simply retry
//! acquiring.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::watch;

use crate::names::check_label;

/// The wake channels of every cluster someone waits on.
pub(crate) struct ReleaseWakes {
    senders: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// Handed out for names that can never be released (invalid cluster
    /// names), so a bogus name cannot grow the map; it never changes.
    never: watch::Sender<u64>,
}

impl ReleaseWakes {
    pub(crate) fn new() -> Self {
        Self {
            senders: Mutex::new(HashMap::new()),
            never: watch::Sender::new(0),
        }
    }

    /// A receiver for `cluster`, marked as having seen the current value.
    pub(crate) fn subscribe(&self, cluster: &str) -> watch::Receiver<u64> {
        if check_label("cluster", cluster).is_err() {
            return self.never.subscribe();
        }
        let mut senders = self.senders.lock().unwrap_or_else(PoisonError::into_inner);
        senders
            .entry(cluster.to_string())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    /// Wake the waiters of `cluster`, if any.
    pub(crate) fn wake(&self, cluster: &str) {
        let senders = self.senders.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = senders.get(cluster) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wake every waiter (after a notification gap).
    pub(crate) fn wake_all(&self) {
        let senders = self.senders.lock().unwrap_or_else(PoisonError::into_inner);
        for sender in senders.values() {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}
