//! The reconcile loop of one guest instance inside a tenure.
//!
//! Fed by the change stream (every committed create, update and delete of
//! the watched kinds, by the API or any guest, whether or not an event was
//! appended), changes of related kinds mapped to the keys they concern
//! (`RelatedWatch`: the owner, or the object a label names, before and
//! after the change), a full resync at start and on the guest's period,
//! requeues, and retries of failed reconciles; one reconcile at a time. Each reconcile
//! is told which of those it is for (`ReconcileReason`; the queue merges
//! causes due together, see `queue.rs`), and its span and log lines carry
//! that reason.
//! Ends when told to stop taking work, when the guest reports `fenced`, or
//! when the guest fails and must be torn down.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::backoff::Backoff;
use super::queue::WorkQueue;
use super::settled::{Settled, Unsettled};
use super::sleep_until_some;
use crate::fence::Fence;
use crate::limits::MAX_PAGE_SIZE;
use crate::runtime::host::own_writes::OwnWrites;
use crate::runtime::{
    GuestError, GuestInstance, MAX_RELATED_WATCHES, ReconcileReason, Reconciled, RelatedMap,
    RelatedWatch,
};
use crate::shard::Sharding;
use crate::status::ControllerStatus;
use crate::store::{ObjectKey, Origin, Relations, Store, StoreError, TooOldCause};
use crate::telemetry::{self, TraceParent};

use crate::timeouts::{FEED_ECHO_PACE, MAX_REQUEUE};

/// What the worker needs besides the guest.
pub(crate) struct WorkerContext {
    pub cluster: String,
    pub store: Arc<dyn Store>,
    pub status: Arc<ControllerStatus>,
    pub max_queue: usize,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Becomes true when the worker must stop taking work (shutdown).
    pub stop: watch::Receiver<bool>,
    /// The tenure's settled position: where the worker starts reading the
    /// change stream, and where it records how far it reconciled (see
    /// [`super::settled`]).
    pub settled: Arc<Settled>,
    /// The shard this worker's controller unit runs as: it is woken for,
    /// and resyncs, only that shard's objects (and those of the kinds every
    /// shard watches). `None`: every object. Given by kind/name; the
    /// worker adds what the guest's `describe` says of sharding.
    pub shard: Option<Sharding>,
}

/// Why the worker ended.
#[derive(Debug)]
pub(crate) enum WorkerExit {
    /// Told to stop; the last reconcile finished.
    Stopped,
    /// The guest saw `fenced`: the lease is no longer current.
    Fenced,
    /// The guest failed and was torn down.
    Guest(GuestError),
}

struct Worker {
    ctx: WorkerContext,
    /// The tenure's fence: a change whose origin it is was written by this
    /// guest's own commit, and is queued as an echo (see `queue.rs`).
    fence: Option<Fence>,
    watches: Vec<String>,
    /// Related watches (checked), and every kind the feed is read for:
    /// the watched ones, then the related ones not watched.
    related: Vec<RelatedWatch>,
    kinds: Vec<String>,
    queue: WorkQueue,
    failures: HashMap<ObjectKey, Backoff>,
    cursor: u64,
    /// The changes read and not reconciled yet (see [`super::settled`]).
    unsettled: Unsettled,
    feed: watch::Receiver<u64>,
    feed_retry_at: Option<Instant>,
    /// Whether the feed's sender is alive; when not, the worker polls.
    feed_open: bool,
    /// The feed started anew ([`Worker::feed_ended`]): the next read goes
    /// up to the store's own mark, not to a published value, so the
    /// store judges the cursor against the history it has now.
    revalidate: bool,
    /// When the feed was last read (see [`Worker::feed_read_due`]).
    feed_read_at: Instant,
    /// The last read stopped before a change whose keys the full queue
    /// had no room for; the rest is read once a reconcile made room.
    feed_behind: bool,
    resync_due: bool,
    /// What the guest instance's own commits wrote: every change read from
    /// the feed is reported to it, so a read of an object whose newest
    /// change is this instance's commit is answered without the database.
    own_writes: Arc<OwnWrites>,
}

/// Run the guest until it must stop.
pub(crate) async fn run(mut guest: GuestInstance, ctx: WorkerContext) -> WorkerExit {
    let description = match guest.describe().await {
        Ok(d) => d,
        Err(e) => return WorkerExit::Guest(e),
    };
    let controller = ctx.status.name.clone();
    let mut watches = Vec::new();
    for kind in description.watches {
        match crate::names::check_label("watched kind", &kind) {
            Ok(()) => watches.push(kind),
            Err(e) => tracing::warn!(controller, %e, "ignoring a watched kind"),
        }
    }
    let mut related: Vec<RelatedWatch> = Vec::new();
    for watch in description.related {
        if let Err(e) = watch.check() {
            tracing::warn!(controller, error = %e, "ignoring a related watch");
        } else if related.len() >= MAX_RELATED_WATCHES {
            tracing::warn!(
                controller,
                %watch,
                "ignoring a related watch beyond the first {MAX_RELATED_WATCHES}"
            );
        } else if !related.contains(&watch) {
            related.push(watch);
        }
    }
    let mut ctx = ctx;
    if let Some(sharding) = &mut ctx.shard {
        sharding.label = description.shard_label.clone();
        sharding.every_shard = description.every_shard.clone();
    }
    let mut feed = ctx.store.watch(&ctx.cluster);
    // The cursor is taken before the first resync, so every change after
    // it is seen either by the resync or by the feed. It starts where the
    // tenure (or the lease's earlier tenures) settled, so the changes
    // committed since its last reconcile, deletions included, wake this
    // guest; where none settled (a lease's first guest), at the head.
    // (The feed may not have published the store's head yet, on a host
    // just started: a settled position past what it shows is still where
    // this lease's controller stopped, and the worker reads on from there.)
    let head = *feed.borrow_and_update();
    let (cursor, resumed) = match ctx.settled.start() {
        (Some(settled), inherited) => (settled, inherited),
        (None, _) => (head, false),
    };
    ctx.settled.set(cursor);
    tracing::info!(
        controller,
        epoch = guest.fence().epoch.0,
        // Whether the change stream is read from where the lease settled
        // (else from a head: a lease's first guest), and from where.
        resumed,
        from = cursor,
        shard = ctx.shard.as_ref().map(|s| s.shard.to_string()),
        shard_label = ctx.shard.as_ref().and_then(|s| s.label.as_deref()),
        every_shard = ?ctx.shard.as_ref().map_or(&[][..], |s| &s.every_shard[..]),
        head,
        ?watches,
        related = %related.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        resync = ?description.resync_period,
        "guest ready"
    );
    let mut worker = Worker {
        queue: WorkQueue::new(ctx.max_queue),
        ctx,
        fence: Some(guest.fence().clone()),
        kinds: feed_kinds(&watches, &related),
        watches,
        related,
        failures: HashMap::new(),
        cursor,
        unsettled: Unsettled::default(),
        feed,
        feed_retry_at: None,
        feed_open: true,
        revalidate: false,
        feed_read_at: Instant::now(),
        feed_behind: false,
        resync_due: true,
        own_writes: guest.own_writes(),
    };
    // The queue gauges read zero again once this guest is gone.
    let _gauges = QueueGaugesReset(worker.ctx.status.clone());
    // What was committed between the settled position and the head (the
    // feed marked it seen above) is read now, not at the next change, and
    // the first resync follows at once: a key both queue runs once.
    worker.read_feed().await;
    worker.resync().await;
    let resync_period = description.resync_period;
    let mut next_resync = resync_period.map(|p| Instant::now() + p);
    loop {
        if *worker.ctx.stop.borrow() {
            return WorkerExit::Stopped;
        }
        worker.catch_up().await;
        if worker.queue.take_overflow() {
            tracing::warn!(
                controller = worker.controller(),
                max_queue = worker.ctx.max_queue,
                "the work queue was full and dropped keys; resyncing"
            );
            worker.resync_due = true;
        }
        if worker.resync_due && worker.queue.is_empty() {
            worker.resync().await;
            continue;
        }
        worker.queue.promote(Instant::now());
        let next = worker.queue.pop_traced();
        worker.publish_queue();
        if let Some((key, reason, trace)) = next {
            if let Some(exit) = worker.reconcile(&mut guest, key, reason, trace).await {
                return exit;
            }
            continue;
        }
        let next_due = worker.queue.next_due();
        let feed_retry = worker.feed_retry_at;
        let resync_at = next_resync;
        tokio::select! {
            changed = worker.ctx.stop.changed() => {
                if changed.is_err() {
                    return WorkerExit::Stopped;
                }
            }
            changed = worker.feed.changed(), if worker.feed_open => {
                if changed.is_err() {
                    worker.feed_ended();
                }
                worker.read_feed().await;
            }
            _ = sleep_until_some(next_due) => {}
            _ = sleep_until_some(feed_retry) => worker.read_feed().await,
            _ = sleep_until_some(resync_at) => {
                worker.resync_due = true;
                next_resync = resync_period.map(|p| Instant::now() + p);
            }
        }
    }
}

/// The kinds whose changes a worker reads: the watched ones, then the
/// related ones not watched, each once.
fn feed_kinds(watches: &[String], related: &[RelatedWatch]) -> Vec<String> {
    let mut kinds: Vec<String> = Vec::new();
    for kind in watches.iter().chain(related.iter().map(|r| &r.kind)) {
        if !kinds.contains(kind) {
            kinds.push(kind.clone());
        }
    }
    kinds
}

/// The keys a related watch maps an object's relations to, each once, in
/// the order given (the relations after a change, then before it): its
/// owner (of the watch's owner kind, if it names one), or
/// `target_kind/V` for its label `key = V` when `V` is an object name.
pub(crate) fn related_keys(watch: &RelatedWatch, relations: &[&Relations]) -> Vec<ObjectKey> {
    let mut keys: Vec<ObjectKey> = Vec::new();
    for relations in relations {
        let key = match &watch.map {
            RelatedMap::Owner { kind } => relations
                .owner
                .clone()
                .filter(|owner| kind.as_ref().is_none_or(|kind| *kind == owner.kind)),
            RelatedMap::Label { key, target_kind } => relations
                .labels
                .get(key)
                .filter(|value| crate::names::check_label("object name", value).is_ok())
                .map(|value| ObjectKey {
                    kind: target_kind.clone(),
                    name: value.clone(),
                }),
        };
        if let Some(key) = key
            && !keys.contains(&key)
        {
            keys.push(key);
        }
    }
    keys
}

/// Zeroes a controller's queue gauges when its worker ends, however it
/// ends.
struct QueueGaugesReset(Arc<ControllerStatus>);

impl Drop for QueueGaugesReset {
    fn drop(&mut self) {
        self.0.metrics.queue.publish(0, None);
    }
}

/// The span of one reconcile: everything logged while the guest runs (its
/// own log lines included) carries the controller, epoch, object and why it
/// is reconciled. At info, so the host's default log level shows it. When
/// traces are exported it also carries the lease, kind and name as trace
/// attributes (not log fields), and is the child of the first of `trace`,
/// the contexts of the changes that queued the key, linked to the others.
pub fn reconcile_span(
    controller: &str,
    epoch: u64,
    key: &ObjectKey,
    reason: ReconcileReason,
    trace: &[TraceParent],
) -> tracing::Span {
    let span = tracing::info_span!(
        "reconcile",
        controller,
        epoch,
        object = %key,
        reason = reason.as_str(),
    );
    if telemetry::active() {
        if let Some((first, others)) = trace.split_first() {
            first.adopt(&span);
            for other in others {
                other.link(&span);
            }
        }
        // The lease is named after its controller.
        telemetry::attribute(&span, "lease", controller.to_string());
        telemetry::attribute(&span, "kind", key.kind.clone());
        telemetry::attribute(&span, "name", key.name.clone());
    }
    span
}

/// The `outcome` trace attribute of a reconcile.
pub fn reconcile_outcome(result: &Result<Reconciled, GuestError>) -> &'static str {
    match result {
        Ok(Reconciled::Done) => "done",
        Ok(Reconciled::RequeueAfter(_)) => "requeue",
        Ok(Reconciled::Failed { .. }) => "failed",
        Ok(Reconciled::Fenced) => "fenced",
        Err(_) => "guest_error",
    }
}

impl Worker {
    fn controller(&self) -> &str {
        &self.ctx.status.name
    }

    /// Whether a change was written by this guest's tenure (its lease,
    /// epoch and holder): an echo of its own commit.
    fn written_here(&self, origin: &Origin) -> bool {
        match (origin, &self.fence) {
            (
                Origin::Guest {
                    lease,
                    epoch,
                    holder,
                },
                Some(fence),
            ) => *lease == fence.key.name && *epoch == fence.epoch && *holder == fence.holder,
            _ => false,
        }
    }

    /// Before the next reconcile: the feed, if it published anything new,
    /// is read when [`feed_read_due`](Self::feed_read_due). (Timers that
    /// came due are promoted after it, as before pacing: a timer whose key
    /// an own write then queues is consumed by that echo.)
    async fn catch_up(&mut self) {
        if self.feed_open && self.feed.has_changed().is_err() {
            self.feed_ended();
            self.read_feed().await;
            return;
        }
        let behind = self.feed_behind && (self.queue.has_room() || self.queue.ready_len() == 0);
        if (behind || self.feed.has_changed().unwrap_or(false))
            && self.feed_read_due(Instant::now())
        {
            self.read_feed().await;
        }
    }

    /// The feed's channel closed. Either the store dropped its feed (then
    /// this worker polls), or the feed started anew because the store's
    /// database is in another history (a failover, an adopted copy; see
    /// [`Store::watch`]): what it published before, and what this worker
    /// read, may belong to a history that is gone. Then: follow the new
    /// channel, read next up to the store's own mark (where a cursor the
    /// store never issued is [`StoreError::TooOld`] and moves back to where
    /// the store is whole), and re-list every watched kind, since changes
    /// read before may be gone.
    fn feed_ended(&mut self) {
        let mut feed = self.ctx.store.watch(&self.ctx.cluster);
        if feed.has_changed().is_err() {
            // The store dropped its feed: stop listening (a closed watch is
            // always ready) and fall back to polling.
            self.feed_open = false;
            return;
        }
        tracing::warn!(
            controller = self.controller(),
            cursor = self.cursor,
            "the store's change feed started anew (its database is in another history); \
             re-reading from the cursor and resyncing"
        );
        feed.borrow_and_update();
        self.feed = feed;
        self.revalidate = true;
        self.resync_due = true;
        // What was read of the earlier history may be gone.
        self.own_writes.clear();
    }

    /// Whether to read the feed, which has published something new, before
    /// the next reconcile. Always, unless that reconcile is an echo's and
    /// the feed was read less than [`FEED_ECHO_PACE`] ago: a batch's echoes
    /// then run one after another without a read of the feed (a round trip)
    /// between every two of them, while anything new waits at most that
    /// pace (plus the reconcile running when it comes due) before it is
    /// read. Before a prompt key (whose own change may be followed in the
    /// feed by this tenure's write of it, making it an echo) and when
    /// nothing is ready the feed is read at once, as a pace would only
    /// delay new work.
    fn feed_read_due(&mut self, now: Instant) -> bool {
        !self.queue.next_is_echo() || now >= self.feed_read_at + FEED_ECHO_PACE
    }

    /// Show the queue's depth and oldest wait on `/metrics`. A timer that
    /// falls due while a reconcile runs counts as waiting from then.
    fn publish_queue(&self) {
        let oldest = match (self.queue.oldest_ready_since(), self.queue.next_due()) {
            (Some(ready), Some(due)) => Some(ready.min(due)),
            (ready, due) => ready.or(due),
        };
        self.ctx
            .status
            .metrics
            .queue
            .publish(self.queue.ready_len(), oldest.map(Instant::into_std));
    }

    /// Queue every watched object changed after the cursor, and every key
    /// a change of a related kind maps to (through what the change
    /// recorded: the object's relations after it and, if an update changed
    /// them, before it, so both the old and the new target wake).
    ///
    /// Woken by the feed, it reads up to the position the feed published
    /// (final already, so the store need not find the high-water mark
    /// again); polling, or retrying after a failed read, it reads up to
    /// the current mark.
    async fn read_feed(&mut self) {
        self.feed_read_at = Instant::now();
        let published = *self.feed.borrow_and_update();
        if self.kinds.is_empty() {
            // An empty kind list asks for every kind; watching none asks
            // for nothing.
            return;
        }
        let bound = (self.feed_open && self.feed_retry_at.is_none() && !self.revalidate)
            .then_some(published);
        if bound.is_some_and(|bound| bound <= self.cursor) {
            // Nothing published past what was read.
            return;
        }
        loop {
            let (cluster, kinds, cursor) = (&self.ctx.cluster, &self.kinds, self.cursor);
            let page = match bound {
                Some(through) => {
                    self.ctx
                        .store
                        .changes_through(cluster, kinds, cursor, through, MAX_PAGE_SIZE)
                        .await
                }
                None => {
                    self.ctx
                        .store
                        .changes(cluster, kinds, cursor, MAX_PAGE_SIZE)
                        .await
                }
            };
            match page {
                Ok(page) => {
                    self.revalidate = false;
                    self.feed_retry_at =
                        (!self.feed_open).then(|| Instant::now() + crate::timeouts::FEED_POLL);
                    let full = page.changes.len() >= MAX_PAGE_SIZE;
                    self.feed_behind = false;
                    for change in page.changes {
                        let key = ObjectKey {
                            kind: change.kind,
                            name: change.name,
                        };
                        let mut seen = vec![&change.relations];
                        seen.extend(change.previous.as_ref());
                        // Backpressure: a change is read only when the
                        // queue has room for every key it queues; else the
                        // read stops before it (the stream keeps it) and
                        // goes on once reconciles made room. Dropping its
                        // keys instead would lose a deletion for good.
                        // Only while some key is ready: a queue full of
                        // timers frees no room soon, so then it drops
                        // (an overflow: logged, and a resync follows).
                        // The related keys first, then the key itself
                        // when its kind is watched.
                        let mut mapped: Vec<ObjectKey> = Vec::new();
                        for watch in self.related.iter().filter(|w| w.kind == key.kind) {
                            mapped.extend(related_keys(watch, &seen));
                        }
                        let mut wakes: Vec<ObjectKey> = Vec::with_capacity(mapped.len() + 1);
                        for woken in mapped {
                            if self.owns_related(&woken).await {
                                wakes.push(woken);
                            }
                        }
                        let related = wakes.len();
                        // The object itself: this shard's after the change
                        // or before it (an object whose shard label moved
                        // wakes the shard it left too).
                        if self.watches.contains(&key.kind)
                            && seen
                                .iter()
                                .any(|relations| self.mine(&key, &relations.labels))
                        {
                            wakes.push(key.clone());
                        }
                        if self.queue.ready_len() > 0 && !self.queue.has_room_for(&wakes) {
                            self.cursor = self.cursor.max(change.position.saturating_sub(1));
                            self.feed_behind = true;
                            self.publish_queue();
                            self.publish_settled();
                            return;
                        }
                        self.own_writes.observe(&key, change.revision);
                        for woken in wakes.drain(..related) {
                            self.queue.add_traced(
                                woken.clone(),
                                ReconcileReason::Related,
                                change.traceparent.clone(),
                            );
                            self.hold(&woken, change.position);
                        }
                        if !wakes.is_empty() {
                            if self.written_here(&change.origin) {
                                self.queue.add_echo(key.clone(), change.traceparent);
                            } else {
                                self.queue.add_traced(
                                    key.clone(),
                                    ReconcileReason::Change,
                                    change.traceparent,
                                );
                            }
                            self.hold(&key, change.position);
                        }
                    }
                    self.publish_queue();
                    // Read through here, whether or not anything matched.
                    self.cursor = self.cursor.max(page.through);
                    self.publish_settled();
                    if !full {
                        return;
                    }
                }
                Err(StoreError::TooOld {
                    oldest_kept,
                    cause: TooOldCause::Trimmed,
                    ..
                }) => {
                    // Retention trimmed changes this worker had not read:
                    // what they said is in the objects themselves, so
                    // re-list every watched kind and follow the stream from
                    // where it is whole again.
                    tracing::warn!(
                        controller = self.controller(),
                        cursor = self.cursor,
                        oldest_kept,
                        "the change stream no longer keeps what followed this worker's cursor; resyncing"
                    );
                    self.cursor = self.cursor.max(oldest_kept.saturating_sub(1));
                    self.publish_settled();
                    self.resync_due = true;
                    // A trimmed change may have been newer than an own
                    // write the feed showed as newest.
                    self.own_writes.clear();
                }
                Err(StoreError::TooOld {
                    oldest_kept,
                    cause: TooOldCause::NotIssued,
                    ..
                }) => {
                    // The cursor came from a history the store no longer
                    // has (a failover that lost commits, an adopted copy):
                    // what this worker read up to it may be gone. Every
                    // position after `oldest_kept - 1` is of the store's
                    // history now: read on from there (back, never past
                    // the store's head) and re-list every watched kind.
                    tracing::warn!(
                        controller = self.controller(),
                        cursor = self.cursor,
                        resume = oldest_kept.saturating_sub(1),
                        "the change stream never issued this worker's cursor (its database lost \
                         what followed it in a failover, or is an adopted copy); reading on \
                         from where it is whole and resyncing"
                    );
                    self.cursor = oldest_kept.saturating_sub(1);
                    self.publish_settled();
                    self.resync_due = true;
                    self.own_writes.clear();
                }
                Err(e) => {
                    tracing::warn!(controller = self.controller(), %e, "cannot read the change feed; retrying");
                    self.feed_retry_at = Some(Instant::now() + crate::timeouts::FEED_POLL);
                    return;
                }
            }
        }
    }

    /// Whether the object `key` with `labels` is this worker's to
    /// reconcile: every object, unless its controller is sharded and the
    /// object belongs to another shard (and is not of a kind every shard
    /// watches).
    fn mine(&self, key: &ObjectKey, labels: &BTreeMap<String, String>) -> bool {
        self.ctx
            .shard
            .as_ref()
            .is_none_or(|sharding| sharding.watches(key, labels))
    }

    /// Whether a key a related watch mapped a change to is this worker's:
    /// as [`mine`](Self::mine), for the target object as stored now when
    /// its labels decide its shard (a shard label), which costs a read;
    /// a target that does not exist goes by its kind/name. If the read
    /// fails the key is queued: a shard reconciling an object of another
    /// is harmless (its writes to it must be conditional), losing a wake
    /// is not.
    async fn owns_related(&self, key: &ObjectKey) -> bool {
        let Some(sharding) = &self.ctx.shard else {
            return true;
        };
        if !sharding.needs_labels(key) {
            return sharding.watches(key, &BTreeMap::new());
        }
        match self.ctx.store.get(&self.ctx.cluster, key).await {
            Ok(Some(object)) => sharding.watches(key, &object.meta.labels),
            Ok(None) => sharding.watches(key, &BTreeMap::new()),
            Err(e) => {
                tracing::warn!(
                    controller = self.controller(),
                    %key,
                    %e,
                    "cannot read a related target's labels to tell its shard; queueing it"
                );
                true
            }
        }
    }

    /// `key`, queued by the change at `position`, holds the settled
    /// position below it until reconciled; unless the queue was full and
    /// dropped it (the worker resyncs instead).
    fn hold(&mut self, key: &ObjectKey, position: u64) {
        if self.queue.contains(key) {
            self.unsettled.hold(key, position);
        }
    }

    /// Record how far this worker reconciled, for the tenure's renewals.
    fn publish_settled(&self) {
        self.ctx.settled.set(self.unsettled.settled(self.cursor));
    }

    /// Queue every object of every watched kind, and every key the objects
    /// of the related kinds map to (what a related change would have
    /// queued, should a queue overflow have dropped it).
    async fn resync(&mut self) {
        for kind in self.kinds.clone() {
            let watched = self.watches.contains(&kind);
            let mut after: Option<String> = None;
            loop {
                let page = self
                    .ctx
                    .store
                    .list(&self.ctx.cluster, &kind, after.as_deref(), MAX_PAGE_SIZE)
                    .await;
                match page {
                    Ok(page) => {
                        for object in page.objects {
                            let relations = Relations::of(&object.meta);
                            let mut mapped = Vec::new();
                            for watch in self.related.iter().filter(|w| w.kind == kind) {
                                mapped.extend(related_keys(watch, &[&relations]));
                            }
                            for key in mapped {
                                if self.owns_related(&key).await {
                                    self.queue.add(key, ReconcileReason::Resync);
                                }
                            }
                            let key = ObjectKey {
                                kind: object.kind,
                                name: object.name,
                            };
                            if watched && self.mine(&key, &object.meta.labels) {
                                self.queue.add(key, ReconcileReason::Resync);
                            }
                        }
                        match page.next {
                            Some(next) => after = Some(next),
                            None => break,
                        }
                    }
                    Err(e) => {
                        tracing::warn!(controller = self.controller(), kind, %e, "resync failed; retrying");
                        // Keep the resync pending; the feed retry timer
                        // wakes the loop to try again.
                        self.feed_retry_at = Some(Instant::now() + crate::timeouts::FEED_POLL);
                        return;
                    }
                }
            }
        }
        self.resync_due = false;
    }

    /// Reconcile one key for `reason`; `Some` ends the worker.
    async fn reconcile(
        &mut self,
        guest: &mut GuestInstance,
        key: ObjectKey,
        reason: ReconcileReason,
        trace: Vec<TraceParent>,
    ) -> Option<WorkerExit> {
        let started = Instant::now();
        let span = reconcile_span(
            self.controller(),
            guest.fence().epoch.0,
            &key,
            reason,
            &trace,
        );
        let result = guest
            .reconcile_because(&key.kind, &key.name, reason)
            .instrument(span.clone())
            .await;
        telemetry::attribute(&span, "outcome", reconcile_outcome(&result));
        drop(span);
        // Keys its commits wrote that wait in the queue for an earlier
        // change now have this tenure's write as their newest change.
        for written in self.own_writes.take_written() {
            self.queue.written_here(&written);
        }
        tracing::trace!(
            controller = self.controller(),
            object = %key,
            reason = reason.as_str(),
            elapsed = ?started.elapsed(),
            "reconciled"
        );
        self.ctx
            .status
            .metrics
            .reconcile_seconds
            .observe(started.elapsed());
        let now = Instant::now();
        let health = &self.ctx.status.metrics.health;
        match &result {
            Ok(Reconciled::Done | Reconciled::RequeueAfter(_)) => health.succeeded(),
            Ok(Reconciled::Failed { message, .. }) => health.failed(message, now),
            Err(e) => health.failed(&e.to_string(), now),
            Ok(Reconciled::Fenced) => {}
        }
        match result {
            Ok(Reconciled::Done) => {
                self.failures.remove(&key);
                self.unsettled.release(&key);
            }
            Ok(Reconciled::RequeueAfter(delay)) => {
                self.failures.remove(&key);
                self.unsettled.release(&key);
                self.queue
                    .add_at(key, now + delay.min(MAX_REQUEUE), ReconcileReason::Requeue);
            }
            Ok(Reconciled::Failed {
                message,
                retry_after,
            }) => {
                if self.failures.len() >= self.ctx.max_queue {
                    // Bounded: forgetting backoff state only shortens delays.
                    self.failures.clear();
                }
                let backoff = self
                    .failures
                    .entry(key.clone())
                    .or_insert_with(|| Backoff::new(self.ctx.backoff_min, self.ctx.backoff_max));
                let delay = retry_after
                    .map(|d| d.min(MAX_REQUEUE))
                    .unwrap_or_else(|| backoff.next_delay());
                tracing::warn!(
                    controller = self.controller(),
                    epoch = guest.fence().epoch.0,
                    object = %key,
                    reason = reason.as_str(),
                    retry_in = ?delay,
                    // The message is the guest's own text: escaped so it
                    // cannot forge a log line.
                    "reconcile failed: {}",
                    crate::text::escape(&message)
                );
                self.queue
                    .add_at(key.clone(), now + delay, ReconcileReason::Retry);
                // The retry holds what the key's changes held, unless a
                // full queue dropped it.
                if !self.queue.contains(&key) {
                    self.unsettled.release(&key);
                }
            }
            Ok(Reconciled::Fenced) => return Some(WorkerExit::Fenced),
            Err(e) => return Some(WorkerExit::Guest(e)),
        }
        self.publish_settled();
        None
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::shard::Shard;

    /// A log sink the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_logged_in_a_reconcile_carry_its_reason() {
        let captured = Captured::default();
        let sink = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        let key = ObjectKey {
            kind: "tasks".into(),
            name: "t1".into(),
        };
        tracing::subscriber::with_default(subscriber, || {
            for reason in [
                ReconcileReason::Change,
                ReconcileReason::Requeue,
                ReconcileReason::Resync,
                ReconcileReason::Retry,
            ] {
                let _entered = reconcile_span("sched", 7, &key, reason, &[]).entered();
                tracing::info!("a guest line");
            }
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        for (line, reason) in lines.iter().zip(["change", "requeue", "resync", "retry"]) {
            assert!(
                line.contains(&format!(
                    "reconcile{{controller=\"sched\" epoch=7 object=tasks/t1 reason=\"{reason}\"}}"
                )),
                "{line}"
            );
        }
    }

    /// A worker whose cursor fell behind what retention keeps is told so
    /// by the store, moves its cursor to where the stream is whole again
    /// and re-lists every watched kind, instead of reading on as if the
    /// trimmed changes had never been.
    #[tokio::test]
    async fn a_cursor_behind_the_trimmed_floor_resyncs() {
        let authority = crate::authority::memory::MemoryAuthority::new();
        let store = Arc::new(crate::store::MemoryStore::new(Arc::new(authority)));
        let (_stop_tx, stop) = watch::channel(false);
        let feed = store.watch("c1");
        let cursor = *feed.borrow();
        for name in ["t1", "t2", "t3"] {
            let task = ObjectKey {
                kind: "tasks".into(),
                name: name.into(),
            };
            store.put("c1", &task, "{}", None).await.unwrap();
        }
        let policy = crate::store::retention::Policy {
            event_retention: Duration::ZERO,
            tenure_retention: 1,
            batch: 2,
        };
        // Two of the three changes are trimmed: the worker, still at the
        // position before the first, has lost t1 and t2 from the stream.
        let trimmed = store.trim("c1", &policy).await.unwrap();
        assert_eq!(trimmed.changes, 2);
        let mut worker = Worker {
            ctx: WorkerContext {
                cluster: "c1".into(),
                store: store.clone(),
                status: Arc::new(ControllerStatus::new("sched")),
                max_queue: 100,
                backoff_min: Duration::from_millis(100),
                backoff_max: Duration::from_secs(1),
                stop,
                settled: Arc::default(),
                shard: None,
            },
            fence: None,
            watches: vec!["tasks".into()],
            related: Vec::new(),
            kinds: vec!["tasks".into()],
            queue: WorkQueue::new(100),
            failures: HashMap::new(),
            cursor,
            unsettled: Unsettled::default(),
            feed,
            feed_retry_at: None,
            feed_open: true,
            revalidate: false,
            feed_read_at: Instant::now(),
            feed_behind: false,
            resync_due: false,
            own_writes: Arc::default(),
        };
        // Something kept of an own write, confirmed by a change the
        // worker read: a trimmed stream may have held a newer change.
        let kept = key("tasks", "elsewhere");
        worker.own_writes.record(9, vec![(kept.clone(), None)]);
        worker.own_writes.observe(&kept, 9);
        assert!(worker.own_writes.answer(&kept).is_some());
        worker.read_feed().await;
        assert!(worker.resync_due, "a trimmed cursor must ask for a resync");
        assert_eq!(worker.own_writes.answer(&kept), None, "dropped");
        assert!(worker.cursor > cursor, "the cursor moves past the floor");
        // Only t3's change is still in the stream.
        let mut changed = Vec::new();
        while let Some((key, reason)) = worker.queue.pop() {
            assert_eq!(reason, ReconcileReason::Change);
            changed.push(key.name);
        }
        assert_eq!(changed, ["t3"]);
        worker.resync().await;
        assert!(!worker.resync_due);
        let mut listed = Vec::new();
        while let Some((key, reason)) = worker.queue.pop() {
            assert_eq!(reason, ReconcileReason::Resync);
            listed.push(key.name);
        }
        listed.sort();
        assert_eq!(listed, ["t1", "t2", "t3"]);
    }

    // ------------------------------------------------------ related watches

    use crate::store::{ApiWrite, MemoryStore, Metadata};

    fn key(kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// A worker of a memory store's cluster `c1` watching `watches` and
    /// `related`, its cursor at the store's current position.
    fn related_worker(
        store: &Arc<MemoryStore>,
        watches: &[&str],
        related: Vec<RelatedWatch>,
    ) -> (Worker, watch::Sender<bool>) {
        let (stop_tx, stop) = watch::channel(false);
        let feed = store.watch("c1");
        let cursor = *feed.borrow();
        let watches: Vec<String> = watches.iter().map(|w| w.to_string()).collect();
        let worker = Worker {
            ctx: WorkerContext {
                cluster: "c1".into(),
                store: store.clone(),
                status: Arc::new(ControllerStatus::new("owner")),
                max_queue: 100,
                backoff_min: Duration::from_millis(100),
                backoff_max: Duration::from_secs(1),
                stop,
                settled: Arc::default(),
                shard: None,
            },
            fence: None,
            kinds: feed_kinds(&watches, &related),
            watches,
            related,
            queue: WorkQueue::new(100),
            failures: HashMap::new(),
            cursor,
            unsettled: Unsettled::default(),
            feed,
            feed_retry_at: None,
            feed_open: true,
            revalidate: false,
            feed_read_at: Instant::now(),
            feed_behind: false,
            resync_due: false,
            own_writes: Arc::default(),
        };
        (worker, stop_tx)
    }

    /// Read the feed and take every queued key with its reason, in queue
    /// order.
    async fn woken(worker: &mut Worker) -> Vec<(String, ReconcileReason)> {
        worker.read_feed().await;
        let mut out = Vec::new();
        while let Some((key, reason)) = worker.queue.pop() {
            out.push((key.to_string(), reason));
        }
        out
    }

    async fn put(store: &MemoryStore, k: &ObjectKey, meta: Metadata) {
        store
            .write(
                "c1",
                &ApiWrite::Put {
                    key: k.clone(),
                    value: "{}".into(),
                    meta: Some(meta),
                    expected_version: None,
                },
            )
            .await
            .unwrap();
    }

    fn owned_by(owner: &ObjectKey) -> Metadata {
        Metadata {
            owner: Some(owner.clone()),
            ..Metadata::default()
        }
    }

    fn labelled(key: &str, value: &str) -> Metadata {
        Metadata {
            labels: [(key.to_string(), value.to_string())].into(),
            ..Metadata::default()
        }
    }

    fn memory_store() -> Arc<MemoryStore> {
        let authority = crate::authority::memory::MemoryAuthority::new();
        Arc::new(MemoryStore::new(Arc::new(authority)))
    }

    /// A shard's worker is woken for, and resyncs, only its own shard's
    /// objects: the watched kind's changes by the object's own key, a
    /// related change by the key it maps to (an owner in this shard wakes
    /// it, whichever shard the owned object is in). Across the two shards
    /// of a controller every key is queued exactly once.
    #[tokio::test]
    async fn a_shard_is_woken_for_and_resyncs_only_its_own_objects() {
        let store = memory_store();
        let owns = RelatedWatch {
            kind: "pods".into(),
            map: RelatedMap::Owner {
                kind: Some("tasks".into()),
            },
        };
        let mut shards = Vec::new();
        for shard in Shard::all(2) {
            let (mut worker, stop) = related_worker(&store, &["tasks"], vec![owns.clone()]);
            worker.ctx.shard = Some(Sharding::by_name(shard));
            shards.push((shard, worker, stop));
        }
        let tasks: Vec<ObjectKey> = (0..20).map(|i| key("tasks", &format!("t-{i}"))).collect();
        for task in &tasks {
            store.put("c1", task, "{}", None).await.unwrap();
        }
        // Each owner gets a pod named so that its shard is the other one
        // whenever such a name exists among the first few.
        let mut pods = Vec::new();
        for (i, task) in tasks.iter().enumerate() {
            let owner_shard = Shard::of(&task.kind, &task.name, 2);
            let pod = (0..50)
                .map(|j| key("pods", &format!("p-{i}-{j}")))
                .find(|p| Shard::of(&p.kind, &p.name, 2) != owner_shard)
                .expect("a pod name in the other shard");
            put(&store, &pod, owned_by(task)).await;
            pods.push(pod);
        }
        let mut seen_by_change: Vec<String> = Vec::new();
        let mut seen_by_resync: Vec<String> = Vec::new();
        for (shard, worker, _) in &mut shards {
            let woken = woken(worker).await;
            for (k, reason) in &woken {
                let task = tasks.iter().find(|t| t.to_string() == *k).expect("a task");
                assert!(shard.owns(task), "{shard} woken for {k} ({reason:?})");
            }
            // Each task is woken by its own change (its pod's related
            // change merges into that entry).
            assert!(woken.iter().all(|(_, r)| *r == ReconcileReason::Change));
            seen_by_change.extend(woken.into_iter().map(|(k, _)| k));

            worker.resync().await;
            while let Some((k, _)) = worker.queue.pop() {
                assert!(shard.owns(&k), "{shard} resynced {k}");
                seen_by_resync.push(k.to_string());
            }
        }
        for seen in [&mut seen_by_change, &mut seen_by_resync] {
            seen.sort();
            let mut all: Vec<String> = tasks.iter().map(ToString::to_string).collect();
            all.sort();
            assert_eq!(*seen, all, "every task once across the shards");
        }
        assert!(
            shards.iter().all(|(_, w, _)| w.queue.is_empty()),
            "nothing else queued"
        );

        // A pod's change alone wakes its owner's shard, not its own.
        for (pod, task) in pods.iter().zip(&tasks) {
            store.put("c1", pod, "{\"v\":2}", None).await.unwrap();
            for (shard, worker, _) in &mut shards {
                let expected: Vec<(String, ReconcileReason)> = if shard.owns(task) {
                    vec![(task.to_string(), ReconcileReason::Related)]
                } else {
                    Vec::new()
                };
                assert_eq!(woken(worker).await, expected, "{shard}, {pod}");
            }
        }
    }

    /// Under a shard label (0.3.0 `shard-label`) an object goes to the
    /// shard of its label's value, whatever its name; a relabelled object
    /// wakes the shard it left and the one it joined; an object without
    /// the label goes by kind/name; an every-shard kind wakes, and is
    /// resynced on, every shard; a related key goes to the shard of its
    /// target's labels as stored.
    #[tokio::test]
    async fn a_shard_label_and_every_shard_kinds_decide_the_wake_ups() {
        const TENANT: &str = "example.com/tenant";
        let store = memory_store();
        let owns = RelatedWatch {
            kind: "pods".into(),
            map: RelatedMap::Owner {
                kind: Some("tasks".into()),
            },
        };
        let mut shards = Vec::new();
        for shard in Shard::all(2) {
            let (mut worker, stop) =
                related_worker(&store, &["tasks", "nodes"], vec![owns.clone()]);
            worker.ctx.shard = Some(Sharding {
                shard,
                label: Some(TENANT.into()),
                every_shard: vec!["nodes".into()],
            });
            shards.push((shard, worker, stop));
        }
        // Two tenant values in different shards.
        let tenant_in = |index: u32| {
            (0..100)
                .map(|i| format!("tenant-{i}"))
                .find(|v| Shard::of_label(v, 2) == index)
                .expect("a tenant value in each shard")
        };
        let (zero, one) = (tenant_in(0), tenant_in(1));
        // Tasks named so that by name they would be in the other shard.
        let task_named_in = |index: u32, not: &str| {
            (0..100)
                .map(|i| key("tasks", &format!("{not}-{i}")))
                .find(|t| Shard::of(&t.kind, &t.name, 2) == index)
                .expect("a task name in each shard")
        };
        let a = task_named_in(1, "a");
        put(&store, &a, labelled(TENANT, &zero)).await;
        let plain = task_named_in(1, "plain");
        store.put("c1", &plain, "{}", None).await.unwrap();
        let node = key("nodes", "n-1");
        store.put("c1", &node, "{}", None).await.unwrap();
        let change = ReconcileReason::Change;
        let (s0, rest) = shards.split_at_mut(1);
        let (w0, w1) = (&mut s0[0].1, &mut rest[0].1);
        assert_eq!(
            woken(w0).await,
            [(a.to_string(), change), (node.to_string(), change)],
            "shard 0: a by its label, the node as every shard"
        );
        assert_eq!(
            woken(w1).await,
            [(plain.to_string(), change), (node.to_string(), change)],
            "shard 1: the unlabelled task by its name, the node as every shard"
        );

        // Relabelled into shard 1: both shards are woken.
        put(&store, &a, labelled(TENANT, &one)).await;
        assert_eq!(
            woken(w0).await,
            [(a.to_string(), change)],
            "the shard it left"
        );
        assert_eq!(
            woken(w1).await,
            [(a.to_string(), change)],
            "the shard it joined"
        );

        // A pod owned by `a` (now in shard 1 by its label) wakes shard 1
        // only, though the pod's name and `a`'s name say otherwise.
        let pod = key("pods", "p");
        put(&store, &pod, owned_by(&a)).await;
        assert!(woken(w0).await.is_empty());
        assert_eq!(woken(w1).await, [(a.to_string(), ReconcileReason::Related)]);

        // Resyncs: each shard lists its own tasks by label or name, and
        // every node.
        for (worker, expected) in [
            (w0, vec![node.to_string()]),
            (w1, {
                let mut keys = vec![a.to_string(), node.to_string(), plain.to_string()];
                keys.sort();
                keys
            }),
        ] {
            worker.resync().await;
            let mut resynced = Vec::new();
            while let Some((k, _)) = worker.queue.pop() {
                resynced.push(k.to_string());
            }
            resynced.sort();
            resynced.dedup();
            assert_eq!(resynced, expected);
        }
    }

    /// controller-runtime's `Owns`: a change of an owned object queues its
    /// owner as `related`, whether it was created, updated or deleted; an
    /// owner that moves wakes both the old and the new one; an owner of
    /// another kind than the watch names wakes nothing; and a key queued by
    /// both its own change and a related one runs once, as `change`.
    #[tokio::test]
    async fn owned_changes_queue_their_owner_as_related() {
        let store = memory_store();
        let (a, b, n) = (key("tasks", "a"), key("tasks", "b"), key("nodes", "n"));
        for k in [&a, &b, &n] {
            store.put("c1", k, "{}", None).await.unwrap();
        }
        let owns = RelatedWatch {
            kind: "pods".into(),
            map: RelatedMap::Owner {
                kind: Some("tasks".into()),
            },
        };
        let (mut worker, _stop) = related_worker(&store, &["tasks"], vec![owns]);
        let related = ReconcileReason::Related;
        let p = key("pods", "p");

        put(&store, &p, owned_by(&a)).await;
        assert_eq!(woken(&mut worker).await, [("tasks/a".into(), related)]);

        store.put("c1", &p, "{\"v\":2}", None).await.unwrap();
        assert_eq!(woken(&mut worker).await, [("tasks/a".into(), related)]);

        put(&store, &p, owned_by(&b)).await;
        assert_eq!(
            woken(&mut worker).await,
            [("tasks/b".into(), related), ("tasks/a".into(), related)],
            "a move wakes the new owner and the old"
        );

        store.delete("c1", &p, None).await.unwrap();
        assert_eq!(woken(&mut worker).await, [("tasks/b".into(), related)]);

        // Owned by a node: not an owner this watch maps to.
        put(&store, &key("pods", "q"), owned_by(&n)).await;
        assert_eq!(woken(&mut worker).await, []);

        // Two pods of one owner and the owner itself: one entry, `change`.
        put(&store, &key("pods", "r"), owned_by(&a)).await;
        put(&store, &key("pods", "s"), owned_by(&a)).await;
        store.put("c1", &a, "{\"v\":2}", None).await.unwrap();
        assert_eq!(
            woken(&mut worker).await,
            [("tasks/a".into(), ReconcileReason::Change)]
        );
    }

    /// `EnqueueRequestsFromMapFunc` through a label: a change of an object
    /// labelled `key = V` queues `target/V`; a label moving from V1 to V2
    /// wakes both; a delete wakes the one it named; a value that is no
    /// object name maps to nothing; one change can wake keys of several
    /// watches.
    #[tokio::test]
    async fn a_label_maps_a_change_to_the_object_it_names() {
        let store = memory_store();
        let by_label = RelatedWatch {
            kind: "pods".into(),
            map: RelatedMap::Label {
                key: "example.com/task".into(),
                target_kind: "tasks".into(),
            },
        };
        let by_owner = RelatedWatch {
            kind: "pods".into(),
            map: RelatedMap::Owner { kind: None },
        };
        let (mut worker, _stop) = related_worker(&store, &[], vec![by_label, by_owner]);
        let related = ReconcileReason::Related;
        let p = key("pods", "p");

        put(&store, &p, labelled("example.com/task", "v1")).await;
        assert_eq!(woken(&mut worker).await, [("tasks/v1".into(), related)]);

        put(&store, &p, labelled("example.com/task", "v2")).await;
        assert_eq!(
            woken(&mut worker).await,
            [("tasks/v2".into(), related), ("tasks/v1".into(), related)]
        );

        // Unrelated labels leave the mapping where it is.
        let mut both = labelled("example.com/task", "v2");
        both.labels.insert("team".into(), "db".into());
        put(&store, &p, both).await;
        assert_eq!(woken(&mut worker).await, [("tasks/v2".into(), related)]);

        store.delete("c1", &p, None).await.unwrap();
        assert_eq!(woken(&mut worker).await, [("tasks/v2".into(), related)]);

        put(
            &store,
            &key("pods", "q"),
            labelled("example.com/task", "Not_A.Name"),
        )
        .await;
        assert_eq!(woken(&mut worker).await, []);

        // Labelled and owned: each watch queues its key.
        store
            .put("c1", &key("nodes", "n"), "{}", None)
            .await
            .unwrap();
        let mut meta = labelled("example.com/task", "v3");
        meta.owner = Some(key("nodes", "n"));
        put(&store, &key("pods", "r"), meta).await;
        assert_eq!(
            woken(&mut worker).await,
            [("tasks/v3".into(), related), ("nodes/n".into(), related)]
        );
    }

    /// A resync queues what the related kinds' objects map to as well, so
    /// a related change dropped by an overflowing queue is not lost.
    #[tokio::test]
    async fn a_resync_maps_the_related_kinds_too() {
        let store = memory_store();
        store
            .put("c1", &key("tasks", "a"), "{}", None)
            .await
            .unwrap();
        put(&store, &key("pods", "p"), owned_by(&key("tasks", "a"))).await;
        put(&store, &key("pods", "q"), labelled("example.com/task", "b")).await;
        let watches = vec![
            RelatedWatch {
                kind: "pods".into(),
                map: RelatedMap::Owner { kind: None },
            },
            RelatedWatch {
                kind: "pods".into(),
                map: RelatedMap::Label {
                    key: "example.com/task".into(),
                    target_kind: "tasks".into(),
                },
            },
        ];
        let (mut worker, _stop) = related_worker(&store, &[], watches);
        worker.resync().await;
        let mut queued = Vec::new();
        while let Some((key, reason)) = worker.queue.pop() {
            queued.push((key.to_string(), reason));
        }
        assert_eq!(
            queued,
            [
                ("tasks/a".to_string(), ReconcileReason::Resync),
                ("tasks/b".to_string(), ReconcileReason::Resync)
            ]
        );
    }

    // ------------------------------------------------------------- echoes

    /// A grant of `lease` in cluster `c1`.
    async fn granted(
        authority: &crate::authority::memory::MemoryAuthority,
        lease: &str,
    ) -> crate::fence::Fence {
        use crate::authority::{AcquireRequest, Acquired, Authority};
        let request = AcquireRequest {
            key: crate::fence::LeaseKey::new("c1", lease),
            holder: "h1".into(),
            ttl: crate::timeouts::LEASE_TTL,
        };
        match authority.acquire(&request).await.unwrap() {
            Acquired::Granted(grant) => grant.fence,
            held => panic!("not granted: {held:?}"),
        }
    }

    /// While the next key is an echo, the feed is read at most once per
    /// [`FEED_ECHO_PACE`]: a change published meanwhile waits (at most that
    /// long) instead of costing a read between every two echoes. Before a
    /// prompt key it is read at once.
    #[tokio::test(start_paused = true)]
    async fn the_feed_is_read_at_a_pace_while_echoes_run() {
        use crate::store::Op;

        let authority = Arc::new(crate::authority::memory::MemoryAuthority::new());
        let store = Arc::new(MemoryStore::new(authority.clone()));
        let own = granted(&authority, "sched").await;
        let (mut worker, _stop) = related_worker(&store, &["tasks"], Vec::new());
        worker.fence = Some(own.clone());
        let batch: Vec<Op> = ["a", "b", "c"]
            .into_iter()
            .map(|name| Op::Create {
                key: key("tasks", name),
                value: "{}".into(),
            })
            .collect();
        store.commit_fenced(&own, &batch, &[]).await.unwrap();
        worker.catch_up().await;
        assert!(worker.queue.next_is_echo(), "the batch's echoes are queued");
        assert_eq!(worker.queue.len(), 3);

        // A user's change right after: not read before the next echo...
        store
            .put("c1", &key("tasks", "u1"), "{}", None)
            .await
            .unwrap();
        worker.catch_up().await;
        assert_eq!(worker.queue.len(), 3, "read only once the pace has passed");
        tokio::time::advance(FEED_ECHO_PACE / 2).await;
        worker.catch_up().await;
        assert_eq!(worker.queue.len(), 3);
        // ...but once the pace has passed.
        tokio::time::advance(FEED_ECHO_PACE / 2).await;
        worker.catch_up().await;
        assert_eq!(worker.queue.len(), 4);
        assert!(!worker.queue.next_is_echo(), "the user's change runs first");

        // With a prompt key next, a new change is read at once.
        store
            .put("c1", &key("tasks", "u2"), "{}", None)
            .await
            .unwrap();
        worker.catch_up().await;
        assert_eq!(worker.queue.len(), 5);
        let order: Vec<String> = std::iter::from_fn(|| worker.queue.pop())
            .map(|(k, _)| k.name)
            .collect();
        assert_eq!(order, ["u1", "u2", "a", "b", "c"]);
    }

    /// A key whose timer came due while its own write was in the feed runs
    /// as that write's echo (the timer is consumed by it), not at the back
    /// of the prompt keys: the feed is read before timers are promoted, so
    /// the scheduler's requeued batch (a pass that hit its bound) goes on
    /// within [`ECHO_DEFER`](crate::timeouts::ECHO_DEFER) however many
    /// keys wait.
    #[tokio::test(start_paused = true)]
    async fn a_timer_overtaken_by_an_own_write_runs_as_its_echo() {
        use crate::store::Op;

        let authority = Arc::new(crate::authority::memory::MemoryAuthority::new());
        let store = Arc::new(MemoryStore::new(authority.clone()));
        let own = granted(&authority, "sched").await;
        let (mut worker, _stop) = related_worker(&store, &["nodes", "tasks"], Vec::new());
        worker.fence = Some(own.clone());
        let node = key("nodes", "n");
        worker
            .queue
            .add(key("tasks", "waiting"), ReconcileReason::Resync);
        worker
            .queue
            .add_at(node.clone(), Instant::now(), ReconcileReason::Requeue);
        let ops = [Op::Create {
            key: node.clone(),
            value: "{}".into(),
        }];
        store.commit_fenced(&own, &ops, &[]).await.unwrap();
        worker.catch_up().await;
        worker.queue.promote(Instant::now());
        assert_eq!(
            worker.queue.pop(),
            Some((key("tasks", "waiting"), ReconcileReason::Resync))
        );
        assert!(worker.queue.next_is_echo(), "the timer's key is an echo");
        assert_eq!(worker.queue.pop(), Some((node, ReconcileReason::Change)));
    }

    /// What the feed shows of this instance's own commits confirms what the
    /// host keeps of them (so a guest's read of such an object needs no
    /// database), and a change by anyone else after them drops it.
    #[tokio::test]
    async fn the_feed_confirms_own_writes() {
        use crate::store::Op;

        let authority = Arc::new(crate::authority::memory::MemoryAuthority::new());
        let store = Arc::new(MemoryStore::new(authority.clone()));
        let own = granted(&authority, "sched").await;
        let (mut worker, _stop) = related_worker(&store, &["tasks"], Vec::new());
        worker.fence = Some(own.clone());
        let (a, b) = (key("tasks", "a"), key("tasks", "b"));
        let ops = [
            Op::Create {
                key: a.clone(),
                value: "1".into(),
            },
            Op::Create {
                key: b.clone(),
                value: "2".into(),
            },
        ];
        let committed = store.commit_fenced(&own, &ops, &[]).await.unwrap();
        worker
            .own_writes
            .record(committed.revision, committed.written);
        assert_eq!(
            worker.own_writes.answer(&a),
            None,
            "not read from the feed yet"
        );
        store.put("c1", &b, "3", None).await.unwrap();
        worker.read_feed().await;
        let answer = worker.own_writes.answer(&a).flatten().expect("confirmed");
        assert_eq!(
            (answer.value.as_str(), answer.version),
            ("1", committed.revision)
        );
        assert_eq!(worker.own_writes.answer(&b), None, "a user wrote it after");
    }

    /// A change this tenure's own commit wrote waits behind every other
    /// change read with it: a task the API created after the scheduler's
    /// batch is reconciled before that batch's echoes. A write of another
    /// tenure (another controller here) is no echo, and a key the API
    /// created and this guest then updated waits as an echo, its newest
    /// change being its own. Nothing is dropped: every key still runs.
    #[tokio::test]
    async fn own_commits_wait_behind_other_changes() {
        use crate::authority::{AcquireRequest, Acquired, Authority};
        use crate::fence::LeaseKey;
        use crate::store::Op;

        let authority = Arc::new(crate::authority::memory::MemoryAuthority::new());
        let store = Arc::new(MemoryStore::new(authority.clone()));
        let grant = |lease: &str| {
            let request = AcquireRequest {
                key: LeaseKey::new("c1", lease),
                holder: "h1".into(),
                ttl: crate::timeouts::LEASE_TTL,
            };
            let authority = authority.clone();
            async move {
                match authority.acquire(&request).await.unwrap() {
                    Acquired::Granted(grant) => grant.fence,
                    held => panic!("not granted: {held:?}"),
                }
            }
        };
        let own = grant("sched").await;
        let other = grant("other").await;
        let (mut worker, _stop) = related_worker(&store, &["tasks"], Vec::new());
        worker.fence = Some(own.clone());

        let a = key("tasks", "a");
        let created = store.put("c1", &a, "{}", None).await.unwrap();
        let ops = [
            Op::Update {
                key: a.clone(),
                expected_version: created.version,
                value: "{\"status\":\"assigned\"}".into(),
            },
            Op::Create {
                key: key("tasks", "b"),
                value: "{}".into(),
            },
        ];
        store.commit_fenced(&own, &ops, &[]).await.unwrap();
        let ops = [Op::Create {
            key: key("tasks", "c"),
            value: "{}".into(),
        }];
        store.commit_fenced(&other, &ops, &[]).await.unwrap();
        store
            .put("c1", &key("tasks", "d"), "{}", None)
            .await
            .unwrap();

        let change = ReconcileReason::Change;
        assert_eq!(
            woken(&mut worker).await,
            [
                ("tasks/c".into(), change),
                ("tasks/d".into(), change),
                ("tasks/a".into(), change),
                ("tasks/b".into(), change),
            ]
        );
    }

    // ------------------------------------------------------ settled position

    /// A full queue holds the feed back instead of dropping the keys of
    /// what it read: the read stops before the change that does not fit,
    /// the settled position stays below every change read and not yet
    /// reconciled, and a deletion read later still queues its key.
    #[tokio::test]
    async fn a_full_queue_holds_the_feed_back_and_the_settled_position_follows_reconciles() {
        let store = memory_store();
        let (mut worker, _stop) = related_worker(&store, &["tasks"], Vec::new());
        worker.queue = WorkQueue::new(2);
        for name in ["t1", "t2", "t3"] {
            store
                .put("c1", &key("tasks", name), "{}", None)
                .await
                .unwrap();
        }
        store.delete("c1", &key("tasks", "t1"), None).await.unwrap();
        let positions: Vec<u64> = store
            .changes("c1", &[], worker.cursor, 10)
            .await
            .unwrap()
            .changes
            .iter()
            .map(|c| c.position)
            .collect();
        assert_eq!(positions.len(), 4);
        worker.read_feed().await;
        assert!(!worker.queue.take_overflow(), "nothing dropped");
        assert!(worker.feed_behind);
        assert_eq!(worker.queue.len(), 2);
        let settled = worker.ctx.settled.get().expect("published");
        assert_eq!(
            settled,
            positions[0] - 1,
            "t1's creation is not reconciled yet"
        );
        assert_eq!(
            worker.cursor,
            positions[2] - 1,
            "read up to t3's creation, which did not fit"
        );

        // t1 reconciled: its hold goes, the feed reads on as far as there
        // is room (t3), and stops before t1's deletion.
        let (first, _) = worker.queue.pop().unwrap();
        assert_eq!(first.name, "t1");
        worker.unsettled.release(&first);
        worker.publish_settled();
        assert_eq!(
            worker.ctx.settled.get(),
            Some(positions[1] - 1),
            "below t2's change"
        );
        worker.catch_up().await;
        assert!(worker.feed_behind);
        let (second, _) = worker.queue.pop().unwrap();
        worker.unsettled.release(&second);
        worker.catch_up().await;
        assert!(!worker.feed_behind, "the deletion fit");
        let mut left = Vec::new();
        while let Some((key, reason)) = worker.queue.pop() {
            assert_eq!(reason, ReconcileReason::Change);
            worker.unsettled.release(&key);
            left.push(key.name);
        }
        assert_eq!(left, ["t3", "t1"], "t1's deletion wakes it again");
        worker.publish_settled();
        assert_eq!(worker.ctx.settled.get(), Some(worker.cursor));
        assert!(worker.cursor >= positions[3]);
        assert!(!worker.queue.take_overflow());
    }
}
