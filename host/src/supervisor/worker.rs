//! The reconcile loop of one guest instance inside a tenure.
//!
//! Fed by the change stream (every committed create, update and delete of
//! the watched kinds, by the API or any guest, whether or not an event was
//! appended), a full resync at start and on the guest's period, requeues,
//! and retries of failed reconciles; one reconcile at a time. Each reconcile
//! is told which of those it is for (`ReconcileReason`; the queue merges
//! causes due together, see `queue.rs`), and its span and log lines carry
//! that reason.
//! Ends when told to stop taking work, when the guest reports `fenced`, or
//! when the guest fails and must be torn down.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::backoff::Backoff;
use super::queue::WorkQueue;
use super::sleep_until_some;
use crate::limits::MAX_PAGE_SIZE;
use crate::runtime::{GuestError, GuestInstance, ReconcileReason, Reconciled};
use crate::status::ControllerStatus;
use crate::store::{ObjectKey, Store, StoreError};
use crate::telemetry::{self, TraceParent};

use crate::timeouts::MAX_REQUEUE;

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
    watches: Vec<String>,
    queue: WorkQueue,
    failures: HashMap<ObjectKey, Backoff>,
    cursor: u64,
    feed: watch::Receiver<u64>,
    feed_retry_at: Option<Instant>,
    /// Whether the feed's sender is alive; when not, the worker polls.
    feed_open: bool,
    resync_due: bool,
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
    let mut feed = ctx.store.watch(&ctx.cluster);
    // The cursor is taken before the first resync, so every change after
    // it is seen either by the resync or by the feed.
    let cursor = *feed.borrow_and_update();
    tracing::info!(
        controller,
        epoch = guest.fence().epoch.0,
        ?watches,
        resync = ?description.resync_period,
        "guest ready"
    );
    let mut worker = Worker {
        queue: WorkQueue::new(ctx.max_queue),
        ctx,
        watches,
        failures: HashMap::new(),
        cursor,
        feed,
        feed_retry_at: None,
        feed_open: true,
        resync_due: true,
    };
    // The queue gauges read zero again once this guest is gone.
    let _gauges = QueueGaugesReset(worker.ctx.status.clone());
    let resync_period = description.resync_period;
    let mut next_resync = resync_period.map(|p| Instant::now() + p);
    loop {
        if *worker.ctx.stop.borrow() {
            return WorkerExit::Stopped;
        }
        if worker.feed.has_changed().unwrap_or(false) {
            worker.read_feed().await;
        }
        if worker.queue.take_overflow() {
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
                    // The store dropped its feed: stop listening (a closed
                    // watch is always ready) and fall back to polling.
                    worker.feed_open = false;
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

    /// Queue every watched object changed after the cursor.
    async fn read_feed(&mut self) {
        self.feed.borrow_and_update();
        if self.watches.is_empty() {
            // An empty kind list asks for every kind; watching none asks
            // for nothing.
            return;
        }
        loop {
            match self
                .ctx
                .store
                .changes(&self.ctx.cluster, &self.watches, self.cursor, MAX_PAGE_SIZE)
                .await
            {
                Ok(page) => {
                    self.feed_retry_at =
                        (!self.feed_open).then(|| Instant::now() + crate::timeouts::FEED_POLL);
                    let full = page.changes.len() >= MAX_PAGE_SIZE;
                    for change in page.changes {
                        self.queue.add_traced(
                            ObjectKey {
                                kind: change.kind,
                                name: change.name,
                            },
                            ReconcileReason::Change,
                            change.traceparent,
                        );
                    }
                    self.publish_queue();
                    // Read through here, whether or not anything matched.
                    self.cursor = self.cursor.max(page.through);
                    if !full {
                        return;
                    }
                }
                Err(StoreError::TooOld { oldest_kept, .. }) => {
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
                    self.resync_due = true;
                }
                Err(e) => {
                    tracing::warn!(controller = self.controller(), %e, "cannot read the change feed; retrying");
                    self.feed_retry_at = Some(Instant::now() + crate::timeouts::FEED_POLL);
                    return;
                }
            }
        }
    }

    /// Queue every object of every watched kind.
    async fn resync(&mut self) {
        for kind in self.watches.clone() {
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
                            self.queue.add(
                                ObjectKey {
                                    kind: object.kind,
                                    name: object.name,
                                },
                                ReconcileReason::Resync,
                            );
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
        match result {
            Ok(Reconciled::Done) => {
                self.failures.remove(&key);
            }
            Ok(Reconciled::RequeueAfter(delay)) => {
                self.failures.remove(&key);
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
                    crate::runtime::host::logging::escape(&message)
                );
                self.queue.add_at(key, now + delay, ReconcileReason::Retry);
            }
            Ok(Reconciled::Fenced) => return Some(WorkerExit::Fenced),
            Err(e) => return Some(WorkerExit::Guest(e)),
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

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
            },
            watches: vec!["tasks".into()],
            queue: WorkQueue::new(100),
            failures: HashMap::new(),
            cursor,
            feed,
            feed_retry_at: None,
            feed_open: true,
            resync_due: false,
        };
        worker.read_feed().await;
        assert!(worker.resync_due, "a trimmed cursor must ask for a resync");
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
}
