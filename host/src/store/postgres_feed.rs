//! The PostgreSQL change feed: one `watch` channel per watched cluster
//! holding its last event seq, kept current by a dedicated `LISTEN
//! leasehold_feed` session, with polling as the fallback.
//!
//! Every commit with events queues `NOTIFY leasehold_feed, '<cluster>'`
//! inside its transaction, so the notification is delivered only if it
//! commits. Notifications are wake-ups, not data: on one, the listener
//! reads the cluster's `last_seq` from `leasehold_feed`. A notification
//! sent while the session is down is lost, so after every (re)connect and
//! every [`crate::timeouts::FEED_POLL`] the listener re-reads all watched
//! clusters; while it cannot connect it keeps polling through the pool and
//! reconnects with bounded, jittered backoff.
//!
//! Must never: pool the LISTEN session (a listening session handed to
//! someone else would keep receiving and queueing notifications), or run
//! without a watcher (the session is started by the first `watch`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use tokio::sync::{Notify, watch};
use tokio_postgres::{AsyncMessage, NoTls};

use crate::db::{Database, bounded};
use crate::timeouts::{BACKOFF_MAX, BACKOFF_MIN};

/// The channel every commit notifies.
pub(crate) const CHANNEL: &str = "leasehold_feed";

/// `application_name` of the LISTEN session, so operators (and tests) can
/// tell it apart in `pg_stat_activity`.
pub(crate) const APPLICATION_NAME: &str = "leasehold-feed";

const LAST_SEQ_SQL: &str =
    "SELECT cluster, last_seq FROM leasehold_feed WHERE cluster = ANY($1::text[])";

/// Watchers and the listener's shared state.
pub(crate) struct Feed {
    db: Database,
    poll: Duration,
    /// Last event seq per watched cluster.
    watchers: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// Clusters named by notifications (or newly watched) and not yet
    /// re-read. Bounded by the watched clusters: others are ignored.
    pending: Mutex<HashSet<String>>,
    wake: Notify,
    /// How many LISTEN sessions were established.
    sessions: watch::Sender<u64>,
    stopped: watch::Sender<bool>,
    started: OnceLock<()>,
}

impl Feed {
    pub(crate) fn new(db: Database, poll: Duration) -> Arc<Self> {
        Arc::new(Self {
            db,
            poll,
            watchers: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashSet::new()),
            wake: Notify::new(),
            sessions: watch::channel(0).0,
            stopped: watch::channel(false).0,
            started: OnceLock::new(),
        })
    }

    /// A receiver of `cluster`'s last event seq; starts the listener on
    /// first use.
    pub(crate) fn subscribe(self: &Arc<Self>, cluster: &str) -> watch::Receiver<u64> {
        let receiver = lock(&self.watchers)
            .entry(cluster.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        // Read its current value soon, not only at the next poll.
        lock(&self.pending).insert(cluster.to_string());
        self.wake.notify_one();
        self.start();
        receiver
    }

    /// A commit made through this process: wake its watchers at once.
    pub(crate) fn advance(&self, cluster: &str, last_seq: u64) {
        if let Some(sender) = lock(&self.watchers).get(cluster) {
            raise(sender, last_seq);
        }
    }

    pub(crate) fn sessions(&self) -> watch::Receiver<u64> {
        self.sessions.subscribe()
    }

    /// End the listener (its store is gone).
    pub(crate) fn stop(&self) {
        self.stopped.send_replace(true);
    }

    fn start(self: &Arc<Self>) {
        if self.started.set(()).is_err() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(listen_forever(Arc::clone(self)));
            }
            Err(_) => tracing::warn!(
                "change feed of {} not started: no async runtime; watchers only see this process's commits",
                self.db.endpoint()
            ),
        }
    }

    fn watched(&self) -> Vec<String> {
        let mut watchers = lock(&self.watchers);
        // Forget clusters nobody watches any more.
        watchers.retain(|_, sender| sender.receiver_count() > 0);
        watchers.keys().cloned().collect()
    }

    /// Re-read `clusters`' last seqs over `client` and publish them.
    async fn refresh(
        &self,
        client: &tokio_postgres::Client,
        clusters: &[String],
    ) -> Result<(), crate::db::DbError> {
        if clusters.is_empty() {
            return Ok(());
        }
        let rows = bounded(&self.db, client.query(LAST_SEQ_SQL, &[&clusters])).await?;
        let watchers = lock(&self.watchers);
        for row in rows {
            let cluster: &str = row.get(0);
            if let Some(sender) = watchers.get(cluster) {
                raise(sender, row.get::<_, i64>(1) as u64);
            }
        }
        Ok(())
    }

    /// Re-read every watched cluster through the pool (no LISTEN session).
    async fn refresh_pooled(&self) {
        let result = async {
            let client = self.db.client().await?;
            self.refresh(&client, &self.watched()).await
        }
        .await;
        if let Err(e) = result {
            tracing::debug!("change feed poll failed: {e}");
        }
    }

    fn take_pending(&self) -> Vec<String> {
        lock(&self.pending).drain().collect()
    }
}

/// Move a watcher forward, never back (a slow poll must not undo a newer
/// NOTIFY-driven or local value).
fn raise(sender: &watch::Sender<u64>, seq: u64) {
    sender.send_if_modified(|current| {
        if seq > *current {
            *current = seq;
            true
        } else {
            false
        }
    });
}

/// The maps are never left half-updated, so a poisoned lock is safe to use.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The listener: connect, LISTEN, serve notifications and polls until the
/// session breaks, then back off (polling meanwhile) and reconnect.
async fn listen_forever(feed: Arc<Feed>) {
    let mut stopped = feed.stopped.subscribe();
    let mut backoff = BACKOFF_MIN;
    loop {
        if *stopped.borrow_and_update() {
            return;
        }
        let session = tokio::select! {
            _ = stopped.changed() => return,
            session = Session::open(&feed) => session,
        };
        match session {
            Ok(session) => {
                backoff = BACKOFF_MIN;
                tokio::select! {
                    _ = stopped.changed() => return,
                    reason = session.serve(&feed) => {
                        tracing::warn!("change feed session to {} ended: {reason}; reconnecting", feed.db.endpoint());
                    }
                }
            }
            Err(e) => {
                tracing::warn!(
                    "change feed cannot listen on {}: {e}; polling every {} and retrying within {}",
                    feed.db.endpoint(),
                    humantime::format_duration(feed.poll),
                    humantime::format_duration(backoff)
                );
            }
        }
        // Jitter keeps replicas that lost the database together from
        // reconnecting in lockstep.
        let nanos = u64::try_from(backoff.as_nanos()).unwrap_or(u64::MAX);
        let delay = Duration::from_nanos(rand::rng().random_range(nanos / 2..=nanos));
        let until = tokio::time::Instant::now() + delay;
        loop {
            feed.refresh_pooled().await;
            let now = tokio::time::Instant::now();
            if now >= until {
                break;
            }
            tokio::select! {
                _ = stopped.changed() => return,
                _ = tokio::time::sleep_until(until.min(now + feed.poll)) => {}
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One dedicated (unpooled) LISTEN session.
struct Session {
    client: tokio_postgres::Client,
    /// Ends when the connection does.
    driver: tokio::task::JoinHandle<String>,
}

impl Session {
    async fn open(feed: &Arc<Feed>) -> Result<Self, crate::db::DbError> {
        let mut config = feed.db.config().clone();
        config.application_name(APPLICATION_NAME);
        let (client, mut connection) = config
            .connect(NoTls)
            .await
            .map_err(|e| feed.db.unavailable(e))?;
        let notified = Arc::clone(feed);
        let driver = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) if n.channel() == CHANNEL => {
                        let cluster = n.payload();
                        if lock(&notified.watchers).contains_key(cluster) {
                            lock(&notified.pending).insert(cluster.to_string());
                            notified.wake.notify_one();
                        }
                    }
                    Ok(_) => {}
                    Err(e) => return crate::db::describe(&e),
                }
            }
            "the server closed the connection".to_string()
        });
        let session = Self { client, driver };
        bounded(
            &feed.db,
            session.client.batch_execute(&format!("LISTEN {CHANNEL}")),
        )
        .await?;
        Ok(session)
    }

    /// Serve until the session breaks; returns why.
    async fn serve(mut self, feed: &Feed) -> String {
        // Whatever was committed while nobody listened.
        if let Err(e) = feed.refresh(&self.client, &feed.watched()).await {
            return e.to_string();
        }
        // Counted once listening and caught up: from here on, every commit
        // reaches the watchers by notification.
        feed.sessions.send_modify(|n| *n += 1);
        let mut poll = tokio::time::interval(feed.poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.reset();
        loop {
            let clusters = tokio::select! {
                ended = &mut self.driver => {
                    return ended.unwrap_or_else(|e| format!("connection task failed: {e}"));
                }
                _ = feed.wake.notified() => feed.take_pending(),
                // The poll also proves the session still answers: a
                // silently dropped connection fails it and reconnects.
                _ = poll.tick() => feed.watched(),
            };
            if let Err(e) = feed.refresh(&self.client, &clusters).await {
                return e.to_string();
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Closing the client ends the connection; the driver then returns.
        self.driver.abort();
    }
}
