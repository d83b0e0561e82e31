//! A tenure's settled position in the change stream, and how a worker
//! finds it.
//!
//! A worker reads the store's change stream from a cursor and queues the
//! key of every change it reads (and the keys a related change maps to).
//! Its *settled position* is the highest position at or before which every
//! change it read has been reconciled: the cursor, lowered below the oldest
//! change whose key still waits in the queue, runs now, or waits for a
//! retry. The tenure records it with its renewals and its release
//! ([`crate::authority::Authority::renew_settled`],
//! [`crate::authority::Authority::release_settled`]), and the lease's next
//! grant hands it to the successor ([`crate::authority::Grant::settled`]),
//! whose worker reads the stream from there. A lease's first tenure
//! records the head its feed shows before its guest starts, so even a first
//! tenure that dies before its first renewal leaves its successor a place
//! to start from. So a change committed after the last reconcile of one
//! tenure wakes the next, even a deletion, whose object the successor's
//! resync can no longer list. A guest restarted inside a tenure starts from
//! the same position. Delivery across a handover is at least once: the
//! successor may reconcile again what its predecessor reconciled after its
//! last record.
//!
//! A full queue holds the feed back rather than drop what it read (see
//! the worker). What this cannot give back: changes retention trimmed
//! before the successor read them (the worker is told, logs it and
//! resyncs), and keys a queue full of timers dropped (logged; a resync
//! follows; a dropped key holds nothing back, so the position never stalls
//! behind it).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::store::ObjectKey;

/// A tenure's settled position, shared by its worker (which moves it), its
/// renewals and its release (which record it). Starts at what the grant
/// answered, or, for a lease's first tenure, at the head it recorded
/// before its guest started.
#[derive(Debug, Default)]
pub struct Settled {
    /// The position + 1; 0 means none.
    position: AtomicU64,
    /// Whether the position is one a worker reconciled up to (an earlier
    /// tenure's, or an earlier guest's of this tenure), rather than a
    /// first tenure's starting head.
    inherited: AtomicBool,
}

impl Settled {
    /// A position holder starting at `initial` (`None`: none known), which
    /// an earlier worker reconciled up to if `inherited`.
    pub fn new(initial: Option<u64>, inherited: bool) -> Self {
        Self {
            position: AtomicU64::new(initial.map_or(0, |p| p.saturating_add(1))),
            inherited: AtomicBool::new(inherited),
        }
    }

    /// Where a starting worker reads the change stream from, and whether
    /// an earlier worker reconciled up to there (else it is a lease's
    /// first start). Every later worker of the tenure inherits.
    pub fn start(&self) -> (Option<u64>, bool) {
        let inherited = self.inherited.swap(true, Ordering::AcqRel);
        (self.get(), inherited)
    }

    /// The position, if one is known.
    pub fn get(&self) -> Option<u64> {
        self.position.load(Ordering::Acquire).checked_sub(1)
    }

    /// Record `position`.
    pub fn set(&self, position: u64) {
        self.position
            .store(position.saturating_add(1), Ordering::Release);
    }
}

/// The changes a worker read and has not reconciled yet: per queued key,
/// the position of the oldest change that queued it since it last ran.
#[derive(Debug, Default)]
pub(crate) struct Unsettled {
    by_key: HashMap<ObjectKey, u64>,
    /// How many keys each position holds back.
    positions: BTreeMap<u64, usize>,
}

impl Unsettled {
    /// `key` was queued by the change at `position`: it holds the settled
    /// position below it until the key is reconciled (an older hold on the
    /// key stays: that change is not reconciled either).
    pub fn hold(&mut self, key: &ObjectKey, position: u64) {
        if self.by_key.contains_key(key) {
            return;
        }
        self.by_key.insert(key.clone(), position);
        *self.positions.entry(position).or_default() += 1;
    }

    /// `key` was reconciled (it read every change the worker had read of
    /// it), or left the queue without being reconciled (dropped: the
    /// worker resyncs instead).
    pub fn release(&mut self, key: &ObjectKey) {
        let Some(position) = self.by_key.remove(key) else {
            return;
        };
        if let Some(count) = self.positions.get_mut(&position) {
            *count -= 1;
            if *count == 0 {
                self.positions.remove(&position);
            }
        }
    }

    /// The settled position of a worker that read through `cursor`.
    pub fn settled(&self, cursor: u64) -> u64 {
        match self.positions.keys().next() {
            Some(oldest) => cursor.min(oldest.saturating_sub(1)),
            None => cursor,
        }
    }

    /// Keys holding the position back.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            kind: "tasks".into(),
            name: name.into(),
        }
    }

    #[test]
    fn the_oldest_unreconciled_change_bounds_the_settled_position() {
        let mut u = Unsettled::default();
        assert_eq!(u.settled(10), 10, "nothing waits: the cursor");
        u.hold(&key("a"), 4);
        u.hold(&key("b"), 7);
        u.hold(&key("a"), 9);
        assert_eq!(u.settled(10), 3, "a's change at 4 is not reconciled");
        u.release(&key("a"));
        assert_eq!(u.settled(10), 6, "b's change at 7 still waits");
        u.release(&key("b"));
        assert_eq!(u.settled(10), 10);
        assert_eq!(u.len(), 0);
        u.release(&key("b"));
        assert_eq!(u.settled(12), 12, "releasing twice changes nothing");
    }

    #[test]
    fn keys_held_at_one_position_release_it_together() {
        let mut u = Unsettled::default();
        u.hold(&key("a"), 5);
        u.hold(&key("b"), 5);
        u.release(&key("a"));
        assert_eq!(u.settled(8), 4);
        u.release(&key("b"));
        assert_eq!(u.settled(8), 8);
    }

    #[test]
    fn a_settled_position_round_trips_and_starts_unknown() {
        assert_eq!(Settled::default().get(), None);
        assert_eq!(Settled::new(Some(0), true).get(), Some(0));
        let s = Settled::new(None, false);
        s.set(42);
        assert_eq!(s.get(), Some(42));
        // A first tenure's first worker starts fresh; its restarts inherit.
        let first = Settled::new(Some(7), false);
        assert_eq!(first.start(), (Some(7), false));
        assert_eq!(first.start(), (Some(7), true));
    }
}
