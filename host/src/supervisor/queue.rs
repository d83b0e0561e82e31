//! The per-controller work queue: deduplicated `(kind, name)` keys, ready
//! now or after a delay, bounded in size, each with the reason it will be
//! reconciled for.
//!
//! One entry per key, and its reason is always true when the key runs:
//! causes that are due together (a change that arrives while a resync has
//! the key ready, two timers for the same instant) merge into the
//! strongest of them ([`ReconcileReason::strongest`]: change, then
//! related, then retry, then requeue, then resync). Several related
//! changes, or a change of the object and of an object related to it,
//! queue the key once. A timer (a requeue, or a failure's retry)
//! that is not due when the key runs, because something else made it run
//! sooner, is consumed by that run and is not its reason.
//!
//! Overflow never loses work: when the queue is full, further keys are
//! dropped and the queue asks for a full resync, which re-reads every
//! watched object once the queue has drained.
//!
//! # Echoes wait behind other work, for a bounded time
//!
//! A controller's own commits come back to it through the change stream:
//! every object it wrote is a change of a watched kind, and the guest is
//! promised a reconcile after each. Those reconciles find the object as the
//! controller left it, so they are the least urgent work there is, yet in a
//! plain FIFO they stand in front of every change that arrived after them:
//! a scheduler that placed 50 tasks in one commit would answer 50 echoes
//! before it saw the next task created. So ready keys are in two lanes. A
//! key is an *echo* while it was queued only by changes of itself and the
//! newest of them was written by this tenure: known when its change is read
//! from the feed ([`WorkQueue::add_echo`]), or already when the tenure's
//! commit that wrote it landed, for a key queued by an earlier change
//! ([`WorkQueue::written_here`]: a task created by a user and placed by
//! the scheduler's batch before its own reconcile came up); everything
//! else is *prompt*. Prompt keys run first; an echo runs when no
//! prompt key is ready, or once it has waited [`ECHO_DEFER`] in its lane,
//! so a stream of prompt work delays an echo by that much at most and never
//! starves it. Nothing is dropped: an echo still gets its reconcile, after
//! its change, as every change does. Any other cause (a change by someone
//! else, a related change, a timer, a resync) makes the key prompt again.

use std::collections::{BTreeSet, HashMap, VecDeque};

use tokio::time::Instant;

use crate::runtime::ReconcileReason;
use crate::store::ObjectKey;
use crate::telemetry::TraceParent;
use crate::timeouts::ECHO_DEFER;

/// Where a queued key is, and why it is queued.
#[derive(Debug, Clone)]
struct Entry {
    /// `None` = ready, `Some((t, seq))` = delayed until t.
    at: Option<(Instant, u64)>,
    reason: ReconcileReason,
    /// When it last became ready (for the oldest-wait gauge).
    ready_since: Instant,
    /// The trace contexts of the changes that queued it, first one first
    /// (at most [`MAX_TRACES`]).
    trace: Vec<TraceParent>,
    /// Which ready lane holds it (meaningless while delayed).
    lane: Lane,
    /// Its place in that lane: the lane's slot for the key carrying
    /// another ticket is stale (left behind by a move) and skipped.
    ticket: u64,
    /// When it entered its lane: an echo runs at the latest
    /// [`ECHO_DEFER`] after that.
    lane_since: Instant,
    /// Whether only changes of the key itself queued it since it last
    /// ran: only such a key can become an echo.
    changes_only: bool,
}

/// The two lanes of ready keys (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Prompt,
    Echo,
}

/// How many trace contexts one queued key keeps: the first is the
/// reconcile's parent, the others its links; more are dropped.
pub const MAX_TRACES: usize = 8;

/// A bounded, deduplicated queue of keys to reconcile.
#[derive(Debug)]
pub struct WorkQueue {
    capacity: usize,
    /// Ready keys that run first, in the order they became ready, each
    /// with the ticket of its entry (stale slots are skipped).
    ready: VecDeque<(u64, ObjectKey)>,
    /// Ready echoes, in the order they became echoes.
    echoes: VecDeque<(u64, ObjectKey)>,
    /// Keys in either lane (stale slots not counted).
    ready_count: usize,
    tickets: u64,
    /// Keys waiting for a time, ordered by (time, insertion).
    delayed: BTreeSet<(Instant, u64, ObjectKey)>,
    queued: HashMap<ObjectKey, Entry>,
    sequence: u64,
    overflowed: bool,
}

impl WorkQueue {
    /// A queue holding at most `capacity` distinct keys.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            ready: VecDeque::new(),
            echoes: VecDeque::new(),
            ready_count: 0,
            tickets: 0,
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

    /// Whether `key` is queued (ready or waiting for a time).
    pub fn contains(&self, key: &ObjectKey) -> bool {
        self.queued.contains_key(key)
    }

    /// Whether another key fits.
    pub fn has_room(&self) -> bool {
        self.queued.len() < self.capacity
    }

    /// Whether queueing every one of `keys` would drop none: those not
    /// queued yet (each counted once) fit in the room left.
    pub fn has_room_for(&self, keys: &[ObjectKey]) -> bool {
        let mut new: Vec<&ObjectKey> = Vec::new();
        for key in keys {
            if !self.queued.contains_key(key) && !new.contains(&key) {
                new.push(key);
            }
        }
        self.queued.len() + new.len() <= self.capacity
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Queue `key` to run now for `reason`. A key already ready stays where
    /// it is, with the strongest of the two reasons (an echo becomes
    /// prompt); a delayed key is moved forward and runs for `reason` (its
    /// timer is consumed).
    pub fn add(&mut self, key: ObjectKey, reason: ReconcileReason) {
        self.add_traced(key, reason, None);
    }

    /// [`add`](Self::add), remembering `trace`, the trace context of the
    /// change that queued the key: the reconcile joins the first such
    /// context and links the later ones (up to [`MAX_TRACES`] in all).
    pub fn add_traced(
        &mut self,
        key: ObjectKey,
        reason: ReconcileReason,
        trace: Option<TraceParent>,
    ) {
        self.add_ready(key, reason, trace, false);
    }

    /// Queue `key` for a change of itself that this tenure's own commit
    /// wrote: it runs for `change`, as an echo when nothing but changes of
    /// the key itself queued it (see the module documentation).
    pub fn add_echo(&mut self, key: ObjectKey, trace: Option<TraceParent>) {
        self.add_ready(key, ReconcileReason::Change, trace, true);
    }

    fn add_ready(
        &mut self,
        key: ObjectKey,
        reason: ReconcileReason,
        trace: Option<TraceParent>,
        echo: bool,
    ) {
        let now = Instant::now();
        let own_change = reason == ReconcileReason::Change;
        let Some(entry) = self.queued.get_mut(&key) else {
            if self.is_full() {
                return;
            }
            let lane = if echo { Lane::Echo } else { Lane::Prompt };
            self.queued.insert(
                key.clone(),
                Entry {
                    at: None,
                    reason,
                    ready_since: now,
                    trace: trace.into_iter().collect(),
                    lane,
                    ticket: 0,
                    lane_since: now,
                    changes_only: own_change,
                },
            );
            self.ready_count += 1;
            self.enter(key, lane, now);
            return;
        };
        if let Some(trace) = trace
            && entry.trace.len() < MAX_TRACES
            && !entry.trace.contains(&trace)
        {
            entry.trace.push(trace);
        }
        let lane = match entry.at.take() {
            None => {
                entry.reason = entry.reason.strongest(reason);
                entry.changes_only &= own_change;
                if echo && entry.changes_only {
                    Lane::Echo
                } else if echo {
                    entry.lane
                } else {
                    Lane::Prompt
                }
            }
            Some((at, seq)) => {
                // The timer is consumed: this cause alone is why it runs.
                entry.reason = reason;
                entry.ready_since = now;
                entry.changes_only = own_change;
                self.delayed.remove(&(at, seq, key.clone()));
                self.ready_count += 1;
                let lane = if echo { Lane::Echo } else { Lane::Prompt };
                self.enter(key, lane, now);
                return;
            }
        };
        if lane != entry.lane {
            self.enter(key, lane, now);
        }
    }

    /// Put a queued, ready `key` at the back of `lane`, leaving any slot it
    /// had as stale.
    fn enter(&mut self, key: ObjectKey, lane: Lane, now: Instant) {
        self.tickets += 1;
        let ticket = self.tickets;
        let entry = self.queued.get_mut(&key).expect("entered keys are queued");
        entry.lane = lane;
        entry.ticket = ticket;
        entry.lane_since = now;
        match lane {
            Lane::Prompt => self.ready.push_back((ticket, key)),
            Lane::Echo => self.echoes.push_back((ticket, key)),
        }
        self.compact();
    }

    /// Drop stale slots once they outnumber the keys a lane can hold, so
    /// the lanes stay bounded however often keys move between them.
    fn compact(&mut self) {
        let bound = 2 * self.capacity;
        let queued = &self.queued;
        let current = |(ticket, key): &(u64, ObjectKey)| {
            queued
                .get(key)
                .is_some_and(|e| e.at.is_none() && e.ticket == *ticket)
        };
        if self.ready.len() > bound {
            self.ready.retain(current);
        }
        if self.echoes.len() > bound {
            self.echoes.retain(current);
        }
    }

    /// Queue `key` to run at `at` for `reason`. The earlier time wins and
    /// the later timer is consumed by that run (for the same instant, the
    /// strongest reason). A key already ready is left as it is: it runs
    /// now, which consumes the timer.
    pub fn add_at(&mut self, key: ObjectKey, at: Instant, reason: ReconcileReason) {
        match self.queued.get_mut(&key) {
            Some(Entry { at: None, .. }) => {}
            Some(Entry {
                at: Some((current, _)),
                reason: queued,
                ..
            }) if *current <= at => {
                if *current == at {
                    *queued = queued.strongest(reason);
                }
            }
            Some(Entry {
                at: Some((current, seq)),
                ..
            }) => {
                let old = (*current, *seq, key.clone());
                self.delayed.remove(&old);
                self.insert_delayed(key, at, reason);
            }
            None => {
                if self.is_full() {
                    return;
                }
                self.insert_delayed(key, at, reason);
            }
        }
    }

    fn insert_delayed(&mut self, key: ObjectKey, at: Instant, reason: ReconcileReason) {
        self.sequence += 1;
        self.delayed.insert((at, self.sequence, key.clone()));
        let trace = self
            .queued
            .get(&key)
            .map(|e| e.trace.clone())
            .unwrap_or_default();
        self.queued.insert(
            key,
            Entry {
                at: Some((at, self.sequence)),
                reason,
                ready_since: at,
                trace,
                lane: Lane::Prompt,
                ticket: 0,
                lane_since: at,
                changes_only: false,
            },
        );
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
            if let Some(entry) = self.queued.get_mut(&key) {
                entry.at = None;
                entry.ready_since = now;
                self.ready_count += 1;
                self.enter(key, Lane::Prompt, now);
            }
        }
    }

    /// The next ready key and why it runs, if any (call
    /// [`promote`](Self::promote) first).
    pub fn pop(&mut self) -> Option<(ObjectKey, ReconcileReason)> {
        self.pop_traced().map(|(key, reason, _)| (key, reason))
    }

    /// [`pop`](Self::pop), with the trace contexts the key was queued with
    /// (first one first). A prompt key, unless the oldest echo has waited
    /// [`ECHO_DEFER`] (or no prompt key is ready).
    pub fn pop_traced(&mut self) -> Option<(ObjectKey, ReconcileReason, Vec<TraceParent>)> {
        let lane = self.next_lane();
        let (_, key) = match lane {
            Lane::Prompt => self.ready.pop_front(),
            Lane::Echo => self.echoes.pop_front(),
        }?;
        let entry = self.queued.remove(&key).expect("a ready key is queued");
        self.ready_count -= 1;
        Some((key, entry.reason, entry.trace))
    }

    /// Whether the key [`pop`](Self::pop) would return now is an echo
    /// (`false` when nothing is ready).
    pub fn next_is_echo(&mut self) -> bool {
        self.next_lane() == Lane::Echo && self.front(Lane::Echo).is_some()
    }

    /// The lane the next key comes from: prompt, unless the oldest echo has
    /// waited [`ECHO_DEFER`] or no prompt key is ready.
    fn next_lane(&mut self) -> Lane {
        let now = Instant::now();
        let echo_due = self
            .front(Lane::Echo)
            .is_some_and(|since| since + ECHO_DEFER <= now);
        if !echo_due && self.front(Lane::Prompt).is_some() {
            Lane::Prompt
        } else {
            Lane::Echo
        }
    }

    /// This tenure's commit has just written `key`: if it is ready and was
    /// queued only by changes of itself, its newest change is now this
    /// tenure's own, and it waits as an echo (from now, so for at most
    /// [`ECHO_DEFER`]); the echo, once read from the feed, merges into it.
    /// A key queued for any other cause, delayed, or not queued is left as
    /// it is.
    pub fn written_here(&mut self, key: &ObjectKey) {
        let Some(entry) = self.queued.get(key) else {
            return;
        };
        if entry.at.is_none() && entry.changes_only && entry.lane == Lane::Prompt {
            self.enter(key.clone(), Lane::Echo, Instant::now());
        }
    }

    /// When the first current key of `lane` entered it, after dropping the
    /// stale slots in front of it.
    fn front(&mut self, lane: Lane) -> Option<Instant> {
        let slots = match lane {
            Lane::Prompt => &mut self.ready,
            Lane::Echo => &mut self.echoes,
        };
        while let Some((ticket, key)) = slots.front() {
            match self.queued.get(key) {
                Some(e) if e.at.is_none() && e.ticket == *ticket && e.lane == lane => {
                    return Some(e.lane_since);
                }
                _ => {
                    slots.pop_front();
                }
            }
        }
        None
    }

    /// Keys ready to run now.
    pub fn ready_len(&self) -> usize {
        self.ready_count
    }

    /// Since when the longest-waiting ready key has been ready (each lane
    /// is in the order keys entered it; a key that moved to the other lane
    /// keeps the time it became ready).
    pub fn oldest_ready_since(&self) -> Option<Instant> {
        [&self.ready, &self.echoes]
            .into_iter()
            .flat_map(|slots| {
                slots.iter().find_map(|(ticket, key)| {
                    self.queued
                        .get(key)
                        .filter(|e| e.at.is_none() && e.ticket == *ticket)
                        .map(|e| e.ready_since)
                })
            })
            .min()
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
    use ReconcileReason::{Change, Related, Requeue, Resync, Retry};

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            kind: "tasks".into(),
            name: name.into(),
        }
    }

    #[test]
    fn keys_are_deduplicated_and_fifo() {
        let mut q = WorkQueue::new(10);
        q.add(key("a"), Change);
        q.add(key("b"), Change);
        q.add(key("a"), Change);
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(), Some((key("a"), Change)));
        assert_eq!(q.pop(), Some((key("b"), Change)));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn delayed_keys_become_ready_at_their_time_and_earlier_wins() {
        let now = Instant::now();
        let mut q = WorkQueue::new(10);
        q.add_at(key("a"), now + Duration::from_secs(10), Requeue);
        q.add_at(key("a"), now + Duration::from_secs(5), Requeue);
        q.add_at(key("a"), now + Duration::from_secs(20), Requeue);
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(5)));
        q.promote(now + Duration::from_secs(4));
        assert_eq!(q.pop(), None);
        q.promote(now + Duration::from_secs(5));
        assert_eq!(q.pop(), Some((key("a"), Requeue)));
        assert!(q.is_empty());
    }

    #[test]
    fn an_immediate_add_overrides_a_delay() {
        let now = Instant::now();
        let mut q = WorkQueue::new(10);
        q.add_at(key("a"), now + Duration::from_secs(60), Requeue);
        q.add(key("a"), Change);
        assert_eq!(q.next_due(), None);
        assert_eq!(q.pop(), Some((key("a"), Change)));
    }

    #[test]
    fn each_cause_is_its_own_reason() {
        let now = Instant::now();
        let mut q = WorkQueue::new(10);
        q.add(key("changed"), Change);
        q.add(key("resynced"), Resync);
        q.add_at(key("timer"), now, Requeue);
        q.add_at(key("failed"), now, Retry);
        q.add(key("owner"), Related);
        q.promote(now);
        let popped: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            popped,
            [
                (key("changed"), Change),
                (key("resynced"), Resync),
                (key("owner"), Related),
                (key("timer"), Requeue),
                (key("failed"), Retry),
            ]
        );
    }

    /// change > related > retry > requeue > resync, whichever arrives
    /// first, when the causes are due together.
    #[test]
    fn causes_due_together_take_the_strongest_reason() {
        let order = [Resync, Requeue, Retry, Related, Change];
        let now = Instant::now();
        for (i, first) in order.iter().copied().enumerate() {
            for (j, second) in order.iter().copied().enumerate() {
                let strongest = order[i.max(j)];
                let mut q = WorkQueue::new(10);
                q.add(key("a"), first);
                q.add(key("a"), second);
                assert_eq!(
                    q.pop(),
                    Some((key("a"), strongest)),
                    "{first} then {second}, both now"
                );
                let mut q = WorkQueue::new(10);
                q.add_at(key("a"), now + Duration::from_secs(1), first);
                q.add_at(key("a"), now + Duration::from_secs(1), second);
                q.promote(now + Duration::from_secs(1));
                assert_eq!(
                    q.pop(),
                    Some((key("a"), strongest)),
                    "{first} then {second}, both at the same time"
                );
            }
        }
    }

    /// A timer that is not due when the key runs is consumed, and the
    /// reason is the cause that made it run.
    #[test]
    fn a_timer_not_yet_due_is_consumed_not_the_reason() {
        let now = Instant::now();
        for timer in [Requeue, Retry] {
            // Brought forward by a resync: the timer did not fire.
            let mut q = WorkQueue::new(10);
            q.add_at(key("a"), now + Duration::from_secs(60), timer);
            q.add(key("a"), Resync);
            assert_eq!(q.next_due(), None);
            assert_eq!(q.pop(), Some((key("a"), Resync)), "{timer} then resync");
            // A later timer on a ready key: the key runs now.
            let mut q = WorkQueue::new(10);
            q.add(key("a"), Resync);
            q.add_at(key("a"), now + Duration::from_secs(60), timer);
            assert_eq!(q.next_due(), None);
            assert_eq!(q.pop(), Some((key("a"), Resync)), "resync then {timer}");
            assert!(q.is_empty());
        }
        // Two timers: the earlier one fires, the later one is consumed.
        let mut q = WorkQueue::new(10);
        q.add_at(key("a"), now + Duration::from_secs(5), Requeue);
        q.add_at(key("a"), now + Duration::from_secs(1), Retry);
        q.add_at(key("a"), now + Duration::from_secs(9), Requeue);
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(1)));
        q.promote(now + Duration::from_secs(1));
        assert_eq!(q.pop(), Some((key("a"), Retry)));
        assert!(q.is_empty());
    }

    #[test]
    fn overflow_drops_keys_and_asks_for_resync() {
        let mut q = WorkQueue::new(2);
        q.add(key("a"), Change);
        q.add(key("b"), Change);
        assert!(!q.take_overflow());
        q.add(key("c"), Change);
        assert_eq!(q.len(), 2);
        assert!(q.take_overflow());
        assert!(!q.take_overflow());
        // Re-adding an already-queued key is not an overflow.
        q.add(key("a"), Resync);
        assert!(!q.take_overflow());
    }

    fn trace(n: u8) -> TraceParent {
        TraceParent::parse(&format!(
            "00-4bf92f3577b34da6a3ce929d0e0e47{n:02x}-00f067aa0ba902b7-01"
        ))
        .expect("valid")
    }

    #[test]
    fn a_key_keeps_the_first_changes_trace_and_the_others_for_links() {
        let mut q = WorkQueue::new(10);
        q.add(key("a"), Resync);
        q.add_traced(key("a"), Change, Some(trace(1)));
        q.add_traced(key("a"), Change, None);
        q.add_traced(key("a"), Change, Some(trace(2)));
        q.add_traced(key("a"), Change, Some(trace(1)));
        assert_eq!(
            q.pop_traced(),
            Some((key("a"), Change, vec![trace(1), trace(2)]))
        );
        // Bounded: a key changed many times keeps the first MAX_TRACES.
        for n in 0..(MAX_TRACES as u8 + 5) {
            q.add_traced(key("b"), Change, Some(trace(n)));
        }
        let (_, _, traces) = q.pop_traced().unwrap();
        assert_eq!(traces, (0..MAX_TRACES as u8).map(trace).collect::<Vec<_>>());
        // A delayed key moved forward by a change keeps what it had.
        let now = Instant::now();
        q.add_traced(key("c"), Change, Some(trace(3)));
        q.pop();
        q.add_at(key("c"), now + Duration::from_secs(5), Requeue);
        q.add_traced(key("c"), Change, Some(trace(4)));
        assert_eq!(q.pop_traced(), Some((key("c"), Change, vec![trace(4)])));
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_ready_key_and_the_ready_count_are_known() {
        let mut q = WorkQueue::new(10);
        assert_eq!((q.ready_len(), q.oldest_ready_since()), (0, None));
        let first = Instant::now();
        q.add(key("a"), Change);
        tokio::time::advance(Duration::from_secs(3)).await;
        q.add(key("b"), Change);
        // Re-adding a ready key does not make it younger.
        q.add(key("a"), Change);
        q.add_at(key("c"), first + Duration::from_secs(10), Requeue);
        assert_eq!(q.ready_len(), 2, "a delayed key is not ready");
        assert_eq!(q.oldest_ready_since(), Some(first));
        assert_eq!(q.pop(), Some((key("a"), Change)));
        assert_eq!(q.oldest_ready_since(), Some(first + Duration::from_secs(3)));
        q.pop();
        assert_eq!((q.ready_len(), q.oldest_ready_since()), (0, None));
        // A timer that came due is ready from when it is promoted.
        tokio::time::advance(Duration::from_secs(8)).await;
        let promoted = Instant::now();
        q.promote(promoted);
        assert_eq!(q.ready_len(), 1);
        assert_eq!(q.oldest_ready_since(), Some(promoted));
    }

    // ------------------------------------------------------------- echoes

    /// An echo (a key queued by its own tenure's write) runs after every
    /// prompt key, whichever arrived first.
    #[tokio::test(start_paused = true)]
    async fn echoes_run_after_prompt_keys() {
        let mut q = WorkQueue::new(10);
        q.add_echo(key("e1"), None);
        q.add(key("p1"), Change);
        q.add_echo(key("e2"), None);
        q.add(key("p2"), Related);
        assert_eq!(q.ready_len(), 4);
        let popped: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            popped,
            [
                (key("p1"), Change),
                (key("p2"), Related),
                (key("e1"), Change),
                (key("e2"), Change),
            ]
        );
        assert_eq!(q.ready_len(), 0);
    }

    /// A key queued by someone else's change and then by its own write
    /// waits as an echo (its newest change is its own); one that any other
    /// cause queued stays prompt; and an echo that anything else queues
    /// again becomes prompt, at the back of the prompt keys.
    #[tokio::test(start_paused = true)]
    async fn the_newest_cause_decides_an_echo() {
        let now = Instant::now();
        let mut q = WorkQueue::new(10);
        q.add(key("created"), Change);
        q.add(key("related"), Related);
        q.add(key("other"), Change);
        q.add_echo(key("created"), None);
        q.add_echo(key("related"), None);
        q.add_echo(key("echo"), None);
        q.add(key("echo"), Change);
        // A timer brought forward by an echo: an echo too.
        q.add_at(key("timer"), now + Duration::from_secs(60), Requeue);
        q.add_echo(key("timer"), None);
        let popped: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            popped,
            [
                (key("related"), Change),
                (key("other"), Change),
                (key("echo"), Change),
                (key("created"), Change),
                (key("timer"), Change),
            ]
        );
        assert!(q.is_empty());
        assert_eq!(q.next_due(), None);
    }

    /// An echo waits behind prompt keys for [`ECHO_DEFER`] at most: a
    /// steady stream of prompt work does not starve it.
    #[tokio::test(start_paused = true)]
    async fn an_echo_waits_a_bounded_time() {
        let mut q = WorkQueue::new(10);
        q.add_echo(key("echo"), None);
        q.add(key("p0"), Change);
        tokio::time::advance(ECHO_DEFER / 2).await;
        q.add(key("p1"), Change);
        assert_eq!(q.pop(), Some((key("p0"), Change)));
        tokio::time::advance(ECHO_DEFER / 2).await;
        q.add(key("p2"), Change);
        assert_eq!(q.pop(), Some((key("echo"), Change)), "its time came");
        assert_eq!(q.pop(), Some((key("p1"), Change)));
        assert_eq!(q.pop(), Some((key("p2"), Change)));
        assert_eq!(q.pop(), None);
    }

    /// A key queued by someone else's change that this tenure's commit
    /// then wrote (a task placed by another task's batch) waits as an echo
    /// from that moment, for at most [`ECHO_DEFER`]; one queued for any
    /// other cause, or delayed, keeps its place. Whether the next key is an
    /// echo is known before it is taken.
    #[tokio::test(start_paused = true)]
    async fn a_key_written_here_waits_as_an_echo() {
        let now = Instant::now();
        let mut q = WorkQueue::new(10);
        q.add(key("placed"), Change);
        q.add(key("resynced"), Resync);
        q.add(key("new"), Change);
        q.add_at(key("timer"), now + Duration::from_secs(60), Requeue);
        for written in ["placed", "resynced", "timer", "absent"] {
            q.written_here(&key(written));
        }
        assert!(!q.next_is_echo());
        assert_eq!(q.pop(), Some((key("resynced"), Resync)));
        assert_eq!(q.pop(), Some((key("new"), Change)));
        assert!(q.next_is_echo());
        // Its echo, read later, merges into it.
        q.add_echo(key("placed"), None);
        assert_eq!(q.len(), 2);
        q.add(key("later"), Change);
        q.written_here(&key("placed"));
        tokio::time::advance(ECHO_DEFER).await;
        assert!(q.next_is_echo(), "its time came");
        assert_eq!(q.pop(), Some((key("placed"), Change)));
        assert!(!q.next_is_echo());
        assert_eq!(q.pop(), Some((key("later"), Change)));
        assert!(!q.next_is_echo(), "nothing ready");
        assert_eq!(q.pop(), None);
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(60)));
    }

    /// Keys moving between the lanes leave stale slots behind; they are
    /// skipped, counted nowhere, and compacted so the lanes stay bounded.
    #[tokio::test(start_paused = true)]
    async fn moves_between_lanes_keep_the_queue_bounded() {
        let mut q = WorkQueue::new(4);
        for _ in 0..100 {
            q.add(key("a"), Change);
            q.add_echo(key("a"), None);
        }
        assert_eq!(q.ready_len(), 1);
        assert!(q.ready.len() + q.echoes.len() <= 4 * 2 + 2, "{q:?}");
        assert_eq!(q.pop(), Some((key("a"), Change)));
        assert_eq!(q.pop(), None);
        assert!(!q.take_overflow());
    }
}
