//! Release wake-ups, per cluster: what [`super::Authority::released`]
//! hands out. Both backends feed one of these: the memory backend on every
//! release, the PostgreSQL backend from its LISTEN session.
//!
//! A receiver's value counts wakes; candidates only care that it changed.
//! Wakes may be spurious (a reconnect wakes everyone, because notifications
//! sent while nobody listened are lost) or coalesced (several releases seen
//! as one change). Never a reason to trust a lease: candidates simply retry
//! acquiring.
//!
//! Besides the per-cluster release wakes, per-lease **takeover** wakes:
//! a standby waiting for a lease under crash detection `session`
//! subscribes to its lease ([`ReleaseWakes::subscribe_takeover`]); the
//! PostgreSQL listener asks the database, in one statement per interval,
//! which of the leases with a live subscriber are held by a holder whose
//! liveness session is gone, and wakes those ([`ReleaseWakes::wake_lease`]).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::watch;

use crate::fence::LeaseKey;
use crate::names::check_label;

/// The wake channels of every cluster someone waits on.
pub(crate) struct ReleaseWakes {
    senders: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// Per lease: woken when its holder's liveness session is found gone.
    takeover: Mutex<HashMap<LeaseKey, watch::Sender<u64>>>,
    /// Handed out for names that can never be released (invalid cluster
    /// names), so a bogus name cannot grow the map; it never changes.
    never: watch::Sender<u64>,
}

impl ReleaseWakes {
    pub(crate) fn new() -> Self {
        Self {
            senders: Mutex::new(HashMap::new()),
            takeover: Mutex::new(HashMap::new()),
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

    /// A receiver woken when lease `key`'s holder is found dead; while it
    /// (or a clone) lives, the lease is among [`ReleaseWakes::waited_leases`].
    pub(crate) fn subscribe_takeover(&self, key: &LeaseKey) -> watch::Receiver<u64> {
        if check_label("cluster", &key.cluster).is_err() || check_label("lease", &key.name).is_err()
        {
            return self.never.subscribe();
        }
        let mut takeover = self.takeover.lock().unwrap_or_else(PoisonError::into_inner);
        takeover
            .entry(key.clone())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    /// The leases someone waits on now, in key order; forgets those nobody
    /// waits on any more, so the set stays as small as the standbys.
    pub(crate) fn waited_leases(&self) -> Vec<LeaseKey> {
        let mut takeover = self.takeover.lock().unwrap_or_else(PoisonError::into_inner);
        takeover.retain(|_, sender| sender.receiver_count() > 0);
        let mut keys: Vec<LeaseKey> = takeover.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Wake the waiters of lease `key`, if any.
    pub(crate) fn wake_lease(&self, key: &LeaseKey) {
        let takeover = self.takeover.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = takeover.get(key) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_waited_on_while_a_receiver_lives_and_only_its_waiters_wake() {
        let wakes = ReleaseWakes::new();
        let a = LeaseKey::new("east", "a");
        let b = LeaseKey::new("east", "b");
        let mut on_a = wakes.subscribe_takeover(&a);
        let on_b = wakes.subscribe_takeover(&b);
        assert_eq!(wakes.waited_leases(), vec![a.clone(), b.clone()]);
        wakes.wake_lease(&a);
        assert!(on_a.has_changed().unwrap());
        assert!(!on_b.has_changed().unwrap());
        on_a.borrow_and_update();
        drop(on_b);
        assert_eq!(wakes.waited_leases(), vec![a.clone()]);
        // Nobody waits on b any more: a wake for it is a no-op.
        wakes.wake_lease(&b);
        assert!(!on_a.has_changed().unwrap());
        // A name that can never be a lease is never scanned for.
        let _never = wakes.subscribe_takeover(&LeaseKey::new("East!", "a"));
        assert_eq!(wakes.waited_leases(), vec![a]);
    }
}
