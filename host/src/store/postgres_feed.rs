//! The PostgreSQL change feed: the high-water mark readers stop at, and one
//! `watch` channel per watched cluster holding the cluster's last change or
//! event position below that mark, kept current by a dedicated `LISTEN
//! leasehold_feed` session, with polling as the fallback.
//!
//! # The high-water mark
//!
//! Positions come from the sequence `leasehold_positions`, taken freely by
//! concurrent commits, so position n+1 can commit (and be visible) while n
//! is still in flight. A reader that went past n then would skip it for
//! good. [`high_water`] is the highest position H such that every position
//! up to H is final — committed and visible to any later statement, or
//! never to be used — and readers read `position <= H` only. How it is
//! known, without any lock held across `COMMIT`:
//!
//! - Writer: before it takes any position, each commit takes a shared
//!   advisory transaction lock (the *floor*) whose key is the sequence's
//!   `last_value` read by the same statement (`FLOOR_SQL` in
//!   [`super::postgres`]); every position it takes later is above that
//!   floor. The lock ends with the transaction, after PostgreSQL made the
//!   commit visible (a transaction leaves the running set before it
//!   releases its locks).
//! - Reader, in one statement and in this order: read the sequence's
//!   `last_value` as `head`, then the lowest floor held in `pg_locks`;
//!   H = min(head, lowest floor). The rows are read by a *later* statement.
//!
//! Why no committed position p <= H is missing from the later read: let W
//! be the commit that took p, with floor f < p. W read f, then took its
//! floor lock, then took p, in that order. Since p <= head, W took p before
//! the reader read `head`, so W held its floor lock before the reader read
//! `pg_locks`. If W still held it then, H <= f < p: p is not read, which is
//! fine. If not, W had ended (committed or rolled back) before the reader
//! read `pg_locks`, so before the later statement's snapshot: if W
//! committed, p is visible to the read. And a commit that took its floor
//! lock after the reader read `pg_locks` took its positions after `head`
//! was read, so above `head` >= H. Hence each position up to H is final,
//! readers that resume after their last position (or after a page's
//! `through`, which is at most H) neither skip nor repeat, and a commit
//! held open only holds the mark back (never past its floor), it is never
//! skipped. The sequence has `CACHE 1` (migration 7): with a per-session
//! cache, `last_value` would not mean "handed out".
//!
//! # Wake-ups
//!
//! After its `COMMIT`, a commit made through this process wakes the
//! listener here (which recomputes the mark and the watched clusters'
//! positions) and hands its cluster to the notifier, which sends `NOTIFY
//! leasehold_feed, '<cluster>'` in a transaction of its own, several
//! clusters at once, with `synchronous_commit` off, at most one every
//! [`crate::timeouts::FEED_NOTIFY_INTERVAL`] (an idle process's first
//! commit is notified at once).
//! Not inside the commit: PostgreSQL serializes every notifying
//! transaction's commit on one database-wide lock, the hot row in another
//! form. Notifications are wake-ups, not data: on one, the listener reads
//! the mark and the clusters' positions. A notification lost (sent while
//! the session is down, or never sent because the process died right after
//! `COMMIT`) is made up for by polling: after every (re)connect and every
//! [`crate::timeouts::FEED_POLL`] the listener re-reads all watched
//! clusters, and while the mark is below the head (a commit in flight) it
//! re-reads after [`crate::timeouts::FEED_SETTLE`], doubling up to the
//! poll interval; while it cannot connect it keeps polling through the pool
//! and reconnects with bounded, jittered backoff.
//!
//! Must never: pool the LISTEN session (a listening session handed to
//! someone else would keep receiving and queueing notifications), run
//! without a watcher (the session is started by the first `watch`), or
//! publish a position above the high-water mark.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use tokio::sync::{Notify, watch};
use tokio_postgres::AsyncMessage;

use crate::db::{Database, bounded};
use crate::timeouts::{BACKOFF_MAX, BACKOFF_MIN};

/// The channel every commit notifies.
pub(crate) const CHANNEL: &str = "leasehold_feed";

/// `application_name` of the LISTEN session, so operators (and tests) can
/// tell it apart in `pg_stat_activity`.
pub(crate) const APPLICATION_NAME: &str = "leasehold-feed";

/// The high-water mark's inputs, in this order: the sequence's head first
/// (the outer row), then the lowest position floor held (a correlated
/// subquery, run for the outer row once it was read). Floors are decoded
/// as [`super::postgres`]'s `FLOOR_SQL` encodes them (modulo 2^47), in
/// this database only: each is the highest number at most the head with
/// the lock's 47 bits.
pub(crate) const HIGH_WATER_SQL: &str = "
SELECT h.head,
       (SELECT min(h.head - ((h.head - (((l.classid::int8 & 65535) << 31) | l.objid::int8))
                             & 140737488355327))
          FROM pg_locks l
         WHERE l.locktype = 'advisory' AND l.objsubid = 2
           AND (l.classid::int8 >> 16) = $1::int8
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND h.head IS NOT NULL) AS floor
  FROM (SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END AS head
          FROM leasehold_positions OFFSET 0) AS h";

/// Each watched cluster's last change or event position up to the mark,
/// or its retention floors when above (retention may have trimmed every
/// row: the position never goes back, and a worker starting from it is
/// never behind the floor; see [`super::retention`]); and on every row the
/// history they were read in: the server's WAL timeline (NULL in
/// recovery) and the position floor of that timeline (migration 19), which
/// a failover or an adoption moves.
const LATEST_SQL: &str = "
SELECT c.cluster,
       coalesce(greatest(
           (SELECT max(position) FROM leasehold_changes
             WHERE cluster = c.cluster AND position <= $2::int8),
           (SELECT max(seq) FROM leasehold_events
             WHERE cluster = c.cluster AND seq <= $2::int8),
           (SELECT greatest(events_floor, changes_floor) FROM leasehold_retention
             WHERE cluster = c.cluster)), 0),
       t.timeline, leasehold_position_floor(t.timeline)
  FROM unnest($1::text[]) AS c(cluster),
       (SELECT leasehold_timeline() AS timeline OFFSET 0) AS t";

/// The notifier's statement: its own transaction, committed without
/// waiting for the flush (a lost wake-up is made up for by polling).
const NOTIFY_SQL: &str = "
SELECT set_config('synchronous_commit', 'off', true), pg_notify($2::text, c.cluster)
  FROM unnest($1::text[]) AS c(cluster)";

/// Where the stream stands: what has been handed out, and how far it is
/// final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    /// Every position up to here has been handed out.
    pub head: u64,
    /// Every position up to here is final (the high-water mark).
    pub high_water: u64,
}

impl Mark {
    /// Whether some position handed out may still commit.
    pub fn unsettled(&self) -> bool {
        self.high_water < self.head
    }
}

/// The history the feed's values were read in. A failover moves the
/// timeline, an adoption the position floor; a lossy failover may also
/// put the head below what was seen (the standby lacked the former
/// primary's last commits). The values published in one history mean
/// nothing in the next: positions the former primary gave may be gone, and
/// the new one's numbers start at its floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct History {
    /// The WAL timeline, when known (not in recovery).
    timeline: Option<i64>,
    /// Its position floor, when known.
    floor: Option<i64>,
    /// The head seen.
    head: u64,
}

impl History {
    /// What ends `self` when `next` was read after it: why, if it did.
    fn ended_by(&self, next: &History) -> Option<String> {
        match (self.timeline, next.timeline) {
            (Some(a), Some(b)) if a != b => {
                return Some(format!("the server moved from timeline {a} to {b}"));
            }
            _ => {}
        }
        match (self.floor, next.floor) {
            (Some(a), Some(b)) if a != b => {
                return Some(format!(
                    "the position floor moved from {a} to {b} (an adopted copy)"
                ));
            }
            _ => {}
        }
        (next.head < self.head).then(|| {
            format!(
                "positions went back from {} to {}: commits seen before are gone",
                self.head, next.head
            )
        })
    }

    /// `next`, keeping what `next` does not know (read in recovery).
    fn followed_by(&self, next: &History) -> History {
        History {
            timeline: next.timeline.or(self.timeline),
            floor: next.floor.or(self.floor),
            head: next.head,
        }
    }
}

/// The high-water mark, read in one statement (`statement` is
/// [`HIGH_WATER_SQL`] prepared on `client`; see the module documentation).
/// The rows it bounds must be read by a later statement.
pub(crate) async fn high_water(
    client: &tokio_postgres::Client,
    statement: &crate::db::Prepared,
) -> Result<Mark, tokio_postgres::Error> {
    let row = statement
        .query_one(client, &[&super::postgres::FLOOR_TAG])
        .await?;
    let head = row.get::<_, i64>(0).max(0) as u64;
    let floor = row.get::<_, Option<i64>>(1).map(|f| f.max(0) as u64);
    Ok(Mark {
        head,
        high_water: floor.map_or(head, |floor| floor.min(head)),
    })
}

/// Watchers and the listener's shared state.
pub(crate) struct Feed {
    db: Database,
    poll: Duration,
    /// Last position (change or event, up to the mark) per watched
    /// cluster.
    watchers: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// Clusters named by notifications or local commits (or newly watched)
    /// and not yet re-read. Bounded by the watched clusters: others are
    /// ignored.
    pending: Mutex<HashSet<String>>,
    wake: Notify,
    /// Clusters this process committed to and has not notified yet.
    /// Bounded by the clusters written to.
    to_notify: Mutex<HashSet<String>>,
    notify_wake: Notify,
    notifier: OnceLock<()>,
    /// The history the published values were read in (none before the
    /// first read).
    history: Mutex<Option<History>>,
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
            to_notify: Mutex::new(HashSet::new()),
            notify_wake: Notify::new(),
            notifier: OnceLock::new(),
            history: Mutex::new(None),
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

    /// A commit made through this process (after its `COMMIT`): re-read
    /// the cluster now if anyone here watches it, and notify the other
    /// processes.
    pub(crate) fn committed(self: &Arc<Self>, cluster: &str) {
        if lock(&self.watchers).contains_key(cluster) {
            lock(&self.pending).insert(cluster.to_string());
            self.wake.notify_one();
        }
        lock(&self.to_notify).insert(cluster.to_string());
        self.notify_wake.notify_one();
        if self.notifier.set(()).is_ok() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(notify_forever(Arc::clone(self)));
                }
                Err(_) => tracing::warn!(
                    "change feed notifier of {} not started: no async runtime; other processes see this one's commits by polling",
                    self.db.endpoint()
                ),
            }
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

    /// Re-read the mark and `clusters`' last positions below it over
    /// `client` and publish them. `None` when there was nothing to read.
    async fn refresh(
        &self,
        client: &tokio_postgres::Client,
        statements: &Statements,
        clusters: &[String],
    ) -> Result<Option<Mark>, crate::db::DbError> {
        if clusters.is_empty() {
            return Ok(None);
        }
        let mark = bounded(&self.db, high_water(client, &statements.high_water)).await?;
        let bound = i64::try_from(mark.high_water).unwrap_or(i64::MAX);
        // A later statement than the mark's: every position up to it is
        // visible here.
        let rows = bounded(
            &self.db,
            statements.latest.query(client, &[&clusters, &bound]),
        )
        .await?;
        let seen = rows.first().map(|row| History {
            timeline: row.get(2),
            floor: row.get(3),
            head: mark.head,
        });
        if let Some(seen) = seen
            && let Some(why) = self.see(seen)
        {
            // Every watched cluster, read anew below this mark.
            let all: Vec<String> = lock(&self.watchers).keys().cloned().collect();
            let rows = bounded(&self.db, statements.latest.query(client, &[&all, &bound])).await?;
            tracing::warn!(
                database = %self.db.endpoint(),
                "the change feed's database is in another history ({why}): every watcher of \
                 it starts anew; workers re-read from their cursors and re-list"
            );
            self.restart(
                rows.iter()
                    .map(|row| (row.get(0), row.get::<_, i64>(1).max(0) as u64)),
            );
            return Ok(Some(mark));
        }
        let watchers = lock(&self.watchers);
        for row in rows {
            let cluster: &str = row.get(0);
            if let Some(sender) = watchers.get(cluster) {
                raise(sender, row.get::<_, i64>(1).max(0) as u64);
            }
        }
        Ok(Some(mark))
    }

    /// Record that the feed read `seen`; why the history it published in
    /// ended, if it did.
    fn see(&self, seen: History) -> Option<String> {
        let mut history = lock(&self.history);
        let why = history.as_ref().and_then(|before| before.ended_by(&seen));
        *history = Some(match &*history {
            Some(before) => before.followed_by(&seen),
            None => seen,
        });
        why
    }

    /// Start every watched cluster's channel anew at its value in the new
    /// history. The former channels' senders are dropped, so their
    /// receivers see them closed ([`super::Store::watch`]): the values they
    /// held belong to the history that ended, and lowering a value in
    /// place would look like no change at all to a watcher past it.
    fn restart<'a>(&self, values: impl Iterator<Item = (&'a str, u64)>) {
        let mut watchers = lock(&self.watchers);
        for (cluster, value) in values {
            if let Some(sender) = watchers.get_mut(cluster) {
                *sender = watch::channel(value).0;
            }
        }
    }

    /// Re-read every watched cluster through the pool (no LISTEN session).
    async fn refresh_pooled(&self) -> Option<Mark> {
        let result = async {
            let client = self.db.client().await?;
            let prepared = async {
                Ok::<_, tokio_postgres::Error>(Statements {
                    high_water: self.db.prepare(&client, HIGH_WATER_SQL).await?,
                    latest: self.db.prepare(&client, LATEST_SQL).await?,
                })
            };
            let statements = prepared.await.map_err(|e| self.db.unavailable(e))?;
            self.refresh(&client, &statements, &self.watched()).await
        }
        .await;
        match result {
            Ok(mark) => mark,
            Err(e) => {
                tracing::debug!("change feed poll failed: {e}");
                None
            }
        }
    }

    fn take_pending(&self) -> Vec<String> {
        lock(&self.pending).drain().collect()
    }
}

/// The feed's statements, prepared once per session.
struct Statements {
    high_water: crate::db::Prepared,
    latest: crate::db::Prepared,
}

impl Statements {
    /// Named, on the dedicated (never pooled) LISTEN session.
    async fn prepare(client: &tokio_postgres::Client) -> Result<Self, tokio_postgres::Error> {
        use crate::db::Prepared::Named;
        Ok(Self {
            high_water: Named(client.prepare(HIGH_WATER_SQL).await?),
            latest: Named(client.prepare(LATEST_SQL).await?),
        })
    }
}

/// How long to wait before re-reading while the mark is below the head:
/// [`crate::timeouts::FEED_SETTLE`], doubling while it stays unsettled
/// without moving, up to the poll interval.
#[derive(Debug)]
struct Settle {
    poll: Duration,
    delay: Option<Duration>,
    last: Option<Mark>,
}

impl Settle {
    fn new(poll: Duration) -> Self {
        Self {
            poll,
            delay: None,
            last: None,
        }
    }

    /// After a refresh that read `mark`: when to look again, if sooner
    /// than the poll.
    fn after(&mut self, mark: Option<Mark>) -> Option<Duration> {
        let Some(mark) = mark else {
            // Nothing watched: nothing to settle.
            self.delay = None;
            self.last = None;
            return None;
        };
        if !mark.unsettled() {
            self.delay = None;
        } else {
            let stuck = self
                .last
                .is_some_and(|last| last.high_water == mark.high_water);
            self.delay = Some(match self.delay {
                Some(delay) if stuck => (delay * 2).min(self.poll),
                _ => crate::timeouts::FEED_SETTLE.min(self.poll),
            });
        }
        self.last = Some(mark);
        self.delay
    }
}

/// The notifier: one `NOTIFY` transaction at a time, at most one every
/// [`crate::timeouts::FEED_NOTIFY_INTERVAL`], for every cluster committed
/// to since the last one, until the feed stops.
async fn notify_forever(feed: Arc<Feed>) {
    let mut stopped = feed.stopped.subscribe();
    loop {
        let clusters: Vec<String> = lock(&feed.to_notify).drain().collect();
        if clusters.is_empty() {
            tokio::select! {
                _ = stopped.changed() => return,
                _ = feed.notify_wake.notified() => continue,
            }
        }
        let sent = tokio::time::Instant::now();
        let result = async {
            let client = feed.db.client().await?;
            let statement = feed
                .db
                .prepare(&client, NOTIFY_SQL)
                .await
                .map_err(|e| feed.db.unavailable(e))?;
            bounded(&feed.db, statement.execute(&client, &[&clusters, &CHANNEL])).await
        }
        .await;
        if let Err(e) = result {
            // Watchers elsewhere catch up at their next poll.
            tracing::debug!("change feed notification failed: {e}");
        }
        // Rate, not order: what commits meanwhile is named by the next one.
        tokio::select! {
            _ = stopped.changed() => return,
            _ = tokio::time::sleep_until(sent + crate::timeouts::FEED_NOTIFY_INTERVAL) => {}
        }
        if *stopped.borrow() {
            return;
        }
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

/// Sleep until `at`, or forever when there is none.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
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
        let mut settle = Settle::new(feed.poll);
        loop {
            let mark = feed.refresh_pooled().await;
            feed.take_pending();
            let now = tokio::time::Instant::now();
            if now >= until {
                break;
            }
            let next = settle.after(mark).unwrap_or(feed.poll).min(feed.poll);
            tokio::select! {
                _ = stopped.changed() => return,
                // A local commit: read it now rather than at the next poll.
                _ = feed.wake.notified() => {}
                _ = tokio::time::sleep_until(until.min(now + next)) => {}
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
        // Never through a transaction pooler (`[database] session_url`).
        let mut target = feed.db.session_target();
        target.config.application_name(APPLICATION_NAME);
        let (client, mut connection) =
            target.connect().await.map_err(|e| feed.db.unavailable(e))?;
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
        let statements = match Statements::prepare(&self.client).await {
            Ok(statements) => statements,
            Err(e) => return crate::db::describe(&e),
        };
        let mut settle = Settle::new(feed.poll);
        // Whatever was committed while nobody listened.
        let mark = match feed
            .refresh(&self.client, &statements, &feed.watched())
            .await
        {
            Ok(mark) => mark,
            Err(e) => return e.to_string(),
        };
        let mut settle_at = settle
            .after(mark)
            .map(|delay| tokio::time::Instant::now() + delay);
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
                // A commit in flight held the mark back: look again soon.
                _ = sleep_until_some(settle_at) => feed.watched(),
            };
            match feed.refresh(&self.client, &statements, &clusters).await {
                Ok(mark) => {
                    settle_at = settle
                        .after(mark)
                        .map(|delay| tokio::time::Instant::now() + delay);
                }
                Err(e) => return e.to_string(),
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
