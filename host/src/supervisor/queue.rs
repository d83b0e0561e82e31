//! The per-controller work queue: deduplicated `(kind, name)` keys, ready
//! now or after a delay, bounded in size.
//!
//! Overflow never loses work: when the queue is full, further keys are
//! dropped and the queue asks for a full resync, which re-reads every
//! watched object once the queue has drained.

use std::collections::{BTreeSet, HashMap, VecDeque};

use tokio::time::Instant;

use crate::store::ObjectKey;

/// A bounded, deduplicated queue of keys to reconcile.
#[derive(Debug)]
pub struct WorkQueue {
    capacity: usize,
    ready: VecDeque<ObjectKey>,
    /// Keys waiting for a time, ordered by (time, insertion).
    delayed: BTreeSet<(Instant, u64, ObjectKey)>,
    /// Where each queued key is: `None` = ready, `Some(t)` = delayed until t.
    queued: HashMap<ObjectKey, Option<(Instant, u64)>>,
    sequence: u64,
    overflowed: bool,
}

impl WorkQueue {
    /// A queue holding at most `capacity` distinct keys.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            ready: VecDeque::new(),
            delayed: BTreeSet::new(),
            queued: HashMap::new(),
            sequence: 0,
            overflowed: false,
        }
    }

    /// Distinct keys queued.
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Queue `key` to run now. A key already ready stays where it is; a
    /// delayed key is moved forward.
    pub fn add(&mut self, key: ObjectKey) {
        match self.queued.get(&key) {
            Some(None) => {}
            Some(Some((at, seq))) => {
                self.delayed.remove(&(*at, *seq, key.clone()));
                self.queued.insert(key.clone(), None);
                self.ready.push_back(key);
            }
            None => {
                if self.is_full() {
                    return;
                }
                self.queued.insert(key.clone(), None);
                self.ready.push_back(key);
            }
        }
    }

    /// Queue `key` to run at `at`. A key already queued earlier keeps its
    /// earlier time.
    pub fn add_at(&mut self, key: ObjectKey, at: Instant) {
        match self.queued.get(&key) {
            Some(None) => {}
            Some(Some((current, _))) if *current <= at => {}
            Some(Some((current, seq))) => {
                self.delayed.remove(&(*current, *seq, key.clone()));
                self.insert_delayed(key, at);
            }
            None => {
                if self.is_full() {
                    return;
                }
                self.insert_delayed(key, at);
            }
        }
    }

    fn insert_delayed(&mut self, key: ObjectKey, at: Instant) {
        self.sequence += 1;
        self.delayed.insert((at, self.sequence, key.clone()));
        self.queued.insert(key, Some((at, self.sequence)));
    }

    fn is_full(&mut self) -> bool {
        if self.queued.len() >= self.capacity {
            self.overflowed = true;
            true
        } else {
            false
        }
    }

    /// Move keys whose time has come to the ready list.
    pub fn promote(&mut self, now: Instant) {
        while let Some(first) = self.delayed.first() {
            if first.0 > now {
                break;
            }
            let (_, _, key) = self.delayed.pop_first().expect("checked non-empty");
            self.queued.insert(key.clone(), None);
            self.ready.push_back(key);
        }
    }

    /// The next ready key, if any (call [`promote`](Self::promote) first).
    pub fn pop(&mut self) -> Option<ObjectKey> {
        let key = self.ready.pop_front()?;
        self.queued.remove(&key);
        Some(key)
    }

    /// When the earliest delayed key becomes ready.
    pub fn next_due(&self) -> Option<Instant> {
        self.delayed.first().map(|(at, _, _)| *at)
    }

    /// Whether keys were dropped since the last call (a full resync is
    /// due); clears the flag.
    pub fn take_overflow(&mut self) -> bool {
        std::mem::take(&mut self.overflowed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            kind: "tasks".into(),
            name: name.into(),
        }
    }

    #[test]
    fn keys_are_deduplicated_and_fifo() {
        let mut q = WorkQueue::new(10);
        q.add(key("a"));
        q.add(key("b"));
        q.add(key("a"));
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(), Some(key("a")));
        assert_eq!(q.pop(), Some(key("b")));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn delayed_keys_become_ready_at_their_time_and_earlier_wins() {
        let now = Instant::now();
        let mut q = WorkQueue::new(10);
        q.add_at(key("a"), now + Duration::from_secs(10));
        q.add_at(key("a"), now + Duration::from_secs(5));
        q.add_at(key("a"), now + Duration::from_secs(20));
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(5)));
        q.promote(now + Duration::from_secs(4));
        assert_eq!(q.pop(), None);
        q.promote(now + Duration::from_secs(5));
        assert_eq!(q.pop(), Some(key("a")));
        assert!(q.is_empty());
    }

    #[test]
    fn an_immediate_add_overrides_a_delay() {
        let now = Instant::now();
        let mut q = WorkQueue::new(10);
        q.add_at(key("a"), now + Duration::from_secs(60));
        q.add(key("a"));
        assert_eq!(q.next_due(), None);
        assert_eq!(q.pop(), Some(key("a")));
    }

    #[test]
    fn overflow_drops_keys_and_asks_for_resync() {
        let mut q = WorkQueue::new(2);
        q.add(key("a"));
        q.add(key("b"));
        assert!(!q.take_overflow());
        q.add(key("c"));
        assert_eq!(q.len(), 2);
        assert!(q.take_overflow());
        assert!(!q.take_overflow());
        // Re-adding an already-queued key is not an overflow.
        q.add(key("a"));
        assert!(!q.take_overflow());
    }
}
