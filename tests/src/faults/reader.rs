//! Readers of the change stream and the event log, for the checker's feed
//! rule ([`super::checker::Rule::Feed`]): each follows one cluster from
//! position 0 while the hosts write, and records every entry it was given,
//! in the order given.
//!
//! [`FeedReader`] reads the way Leasehold's own readers do (the store's
//! [`Store::changes`] and [`Store::events`], bounded by the high-water
//! mark). [`NaiveReader`] is the broken reader the rule exists to catch:
//! it reads every committed row after its cursor, straight from the
//! tables, so a commit that was still in flight below a position it went
//! past is skipped for good.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_host::db::Database;
use leasehold_host::store::{Origin, PostgresStore, Store, StoreError};
use tokio::sync::watch;

/// Which stream an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    /// Object changes (`leasehold_changes`).
    Changes,
    /// Events (`leasehold_events`).
    Events,
}

/// One entry a reader was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The stream.
    pub stream: Stream,
    /// Its position (a change's position, an event's seq).
    pub position: u64,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The object's version the change recorded (events: the commit's
    /// revision).
    pub version: u64,
}

/// What one reader was given, and how far it read.
#[derive(Debug, Clone, Default)]
pub struct FeedRecord {
    /// Who read (named in violations).
    pub reader: String,
    /// Every entry, in the order given.
    pub delivered: Vec<Delivery>,
    /// Per stream, the position it read through: every committed entry at
    /// or below it must have been given exactly once, but for the ranges
    /// in [`trimmed`](Self::trimmed).
    pub through: [u64; 2],
    /// Ranges `(stream, after, oldest_kept)` the store answered "too old"
    /// for: retention had trimmed the positions `after + 1 ..
    /// oldest_kept` before this reader read them, and the reader went on
    /// from `oldest_kept - 1`. The feed rule owes it nothing there.
    pub trimmed: Vec<(Stream, u64, u64)>,
    /// The checker's own copy of what the reader was given, whole: what
    /// retention may trim from the database later.
    pub copy: FeedCopy,
}

/// Everything a reader was given, as the store gave it: the checker's copy
/// of the change stream and the event log, which outlives retention.
#[derive(Debug, Clone, Default)]
pub struct FeedCopy {
    /// Changes, in the order given.
    pub changes: Vec<CopiedChange>,
    /// Events, in the order given.
    pub events: Vec<CopiedEvent>,
}

/// One change, as the reader was given it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopiedChange {
    /// Its position.
    pub position: u64,
    /// When its write ran (database clock), microseconds since the Unix
    /// epoch.
    pub at_micros: i64,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// `created`, `updated` or `deleted`.
    pub change: String,
    /// The version it recorded.
    pub version: u64,
}

/// One event, as the reader was given it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopiedEvent {
    /// Its seq.
    pub seq: u64,
    /// The commit's revision.
    pub revision: u64,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// The lease, epoch and holder of a guest's event.
    pub stamp: Option<(String, u64, String)>,
}

/// How long a reader waits for a wake-up before it reads anyway.
const READ_EVERY: Duration = Duration::from_millis(50);
/// Page size of each read.
const PAGE: usize = 64;

/// Follows a cluster's change stream and event log through the store.
pub struct FeedReader {
    record: Arc<Mutex<FeedRecord>>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    store: Arc<PostgresStore>,
    cluster: String,
}

impl FeedReader {
    /// Start reading `cluster` of the database at `url` from position 0.
    pub fn start(url: &str, cluster: &str, name: &str) -> Self {
        let db = Database::new(url, 2).expect("the reader's database url");
        let store = Arc::new(PostgresStore::new(db));
        let record = Arc::new(Mutex::new(FeedRecord {
            reader: name.to_string(),
            ..FeedRecord::default()
        }));
        let stop = watch::channel(false).0;
        let task = tokio::spawn(follow(
            Arc::clone(&store),
            cluster.to_string(),
            Arc::clone(&record),
            stop.subscribe(),
        ));
        Self {
            record,
            stop,
            task,
            store,
            cluster: cluster.to_string(),
        }
    }

    /// Stop following, then read on until everything handed out when this
    /// was called is final and read (bounded by `limit`; a commit held open
    /// that long fails the wait), and return the record.
    pub async fn finish(self, limit: Duration) -> FeedRecord {
        self.stop.send_replace(true);
        let _ = self.task.await;
        let (head, _) = self.store.high_water().await.expect("the reader's mark");
        crate::within(
            limit,
            "the feed reader to read everything handed out",
            async {
                loop {
                    read_once(&*self.store, &self.cluster, &self.record).await;
                    if lock(&self.record).through[0] >= head {
                        // The mark has passed `head` (the changes were read
                        // through it): one more read of the events, bounded by
                        // a mark at least as high, gives every event up to it.
                        read_once(&*self.store, &self.cluster, &self.record).await;
                        let mut record = lock(&self.record);
                        record.through[1] = record.through[1].max(head);
                        return;
                    }
                    tokio::time::sleep(READ_EVERY).await;
                }
            },
        )
        .await;
        lock(&self.record).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn follow(
    store: Arc<PostgresStore>,
    cluster: String,
    record: Arc<Mutex<FeedRecord>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut feed = store.watch(&cluster);
    loop {
        feed.borrow_and_update();
        read_once(&*store, &cluster, &record).await;
        tokio::select! {
            _ = stop.changed() => return,
            _ = feed.changed() => {}
            _ = tokio::time::sleep(READ_EVERY) => {}
        }
    }
}

/// Read both streams after the record's cursors, as far as the store
/// gives. Errors (a database restarted by a fault) are retried later.
async fn read_once(store: &dyn Store, cluster: &str, record: &Mutex<FeedRecord>) {
    loop {
        let after = lock(record).through[0];
        let page = match store.changes(cluster, &[], after, PAGE).await {
            Ok(page) => page,
            Err(StoreError::TooOld { oldest_kept, .. }) => {
                trimmed_past(record, Stream::Changes, after, oldest_kept);
                continue;
            }
            Err(_) => break,
        };
        let mut record = lock(record);
        let empty = page.changes.is_empty();
        for c in page.changes {
            record.copy.changes.push(CopiedChange {
                position: c.position,
                at_micros: c.at.timestamp_micros(),
                kind: c.kind.clone(),
                name: c.name.clone(),
                change: c.change.as_str().to_string(),
                version: c.version,
            });
            record.delivered.push(Delivery {
                stream: Stream::Changes,
                position: c.position,
                kind: c.kind,
                name: c.name,
                version: c.version,
            });
        }
        record.through[0] = record.through[0].max(page.through);
        if empty {
            break;
        }
    }
    loop {
        let after = lock(record).through[1];
        // The events' own cursor is the last seq given; read the mark
        // before the page, so "through" never claims more than was final.
        let events = match store.events(cluster, after, PAGE).await {
            Ok(events) => events,
            Err(StoreError::TooOld { oldest_kept, .. }) => {
                trimmed_past(record, Stream::Events, after, oldest_kept);
                continue;
            }
            Err(_) => break,
        };
        let mut record = lock(record);
        let Some(last) = events.last().map(|e| e.seq) else {
            break;
        };
        for e in events {
            record.copy.events.push(CopiedEvent {
                seq: e.seq,
                revision: e.revision,
                kind: e.kind.clone(),
                name: e.name.clone(),
                reason: e.reason,
                message: e.message,
                stamp: match e.origin {
                    Origin::Api { .. } => None,
                    Origin::Guest {
                        lease,
                        epoch,
                        holder,
                    } => Some((lease, epoch.0, holder)),
                },
            });
            record.delivered.push(Delivery {
                stream: Stream::Events,
                position: e.seq,
                kind: e.kind,
                name: e.name,
                version: e.revision,
            });
        }
        record.through[1] = record.through[1].max(last);
    }
}

/// Retention trimmed `stream` past the reader's cursor `after`: record the
/// gap and go on from where the stream is whole again.
fn trimmed_past(record: &Mutex<FeedRecord>, stream: Stream, after: u64, oldest_kept: u64) {
    let mut record = lock(record);
    let i = match stream {
        Stream::Changes => 0,
        Stream::Events => 1,
    };
    record.trimmed.push((stream, after, oldest_kept));
    record.through[i] = record.through[i].max(oldest_kept.saturating_sub(1));
}

/// The broken reader: every committed row after its cursor, with no
/// high-water mark. Reads when told to ([`NaiveReader::read`]).
pub struct NaiveReader {
    client: tokio_postgres::Client,
    cluster: String,
    record: FeedRecord,
}

impl NaiveReader {
    /// A reader of `cluster` at `url`, from position 0.
    pub async fn connect(url: &str, cluster: &str) -> Self {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("the naive reader connects");
        tokio::spawn(connection);
        Self {
            client,
            cluster: cluster.to_string(),
            record: FeedRecord {
                reader: "naive reader".into(),
                ..FeedRecord::default()
            },
        }
    }

    /// Read every committed change after the cursor.
    pub async fn read(&mut self) {
        let after = i64::try_from(self.record.through[0]).unwrap_or(i64::MAX);
        let rows = self
            .client
            .query(
                "SELECT position, kind, name, version FROM leasehold_changes
                  WHERE cluster = $1 AND position > $2 ORDER BY position",
                &[&self.cluster, &after],
            )
            .await
            .expect("the naive reader reads");
        for r in rows {
            let position = r.get::<_, i64>(0) as u64;
            self.record.delivered.push(Delivery {
                stream: Stream::Changes,
                position,
                kind: r.get(1),
                name: r.get(2),
                version: r.get::<_, i64>(3) as u64,
            });
            self.record.through[0] = position;
        }
    }

    /// What it was given; it claims to have read its changes through its
    /// cursor, and no events.
    pub fn record(&self) -> FeedRecord {
        self.record.clone()
    }
}
