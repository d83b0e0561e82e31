//! The embedded state backend: objects, the change stream and the event
//! log in the data directory's SQLite database ([`crate::embedded`]),
//! beside the leases, shared by every host process on the directory.
//!
//! The rules are the other backends' ([`super::validate`], [`super::plan`]);
//! this module only reads the current state of the objects a batch names
//! (and what a deleted owner owns), hands it to the plan, and writes what
//! the plan decided.
//!
//! # One commit, one transaction
//!
//! Every write (a guest's fenced commit, a user's put, status write or
//! delete) is one `BEGIN IMMEDIATE` transaction run whole on a blocking
//! thread:
//!
//! 1. the fence check and the tenure's write count, for a guest
//!    ([`crate::authority::sqlite::check_fence_and_count`]): the lease row
//!    must show the fence current by the shared clock and the tenure must
//!    be open. No grant or release of any lease runs until this
//!    transaction ends, so a write that passes commits before the next
//!    grant (L4);
//! 2. read the objects the batch names, resolve the plan, and read what
//!    each deleted owner owns, level by level (garbage collection);
//! 3. take the revision, then one position per change and per event, from
//!    `leasehold_positions`, and write the objects, the changes and the
//!    events; record the cluster's last position in `leasehold_feeds`;
//! 4. `COMMIT` (`synchronous = FULL`: on disk before it returns).
//!
//! After `COMMIT`, this process's watchers are woken at once; other
//! processes' see `leasehold_feeds` move at their next poll
//! ([`crate::timeouts::EMBEDDED_FEED_POLL`]).
//!
//! # Commit order and readers
//!
//! SQLite runs one write transaction at a time across every process, and
//! each takes its numbers from the counter inside it: numbers follow
//! commit order, and the counter's value in any snapshot is a high-water
//! mark below which every position is final. A reader reads its rows and
//! the retention floor in one snapshot, so it never skips or repeats, and
//! a cursor below the floor is told [`StoreError::TooOld`].
//!
//! Must never: await inside a transaction; take a number outside one.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::watch;

use crate::authority::AuthorityError;
use crate::authority::sqlite::check_fence_and_count;
use crate::embedded::clock::{self, Now};
use crate::embedded::{EmbeddedDb, describe};
use crate::fence::{Epoch, Fence};
use crate::limits::MAX_COLLECTED_PER_COMMIT;

use super::plan::{Batch, Current, Plan, Planned, api_batch, written};
use super::validate::{
    check_change_request, check_cluster, check_key, check_list_request, page_limit,
};
use super::{
    ApiWrite, CHANGE_STREAM, Change, ChangeKind, ChangePage, Committed, EVENT_LOG, Event, Metadata,
    NewEvent, Object, ObjectKey, Op, Origin, Page, Relations, Selector, Store, StoreError, Written,
    check_floor, check_issued,
};

/// The store of one data directory. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    db: EmbeddedDb,
}

/// The columns of an object's state, in the order [`current_at`] reads
/// them.
const STATE_COLUMNS: &str = "version, value, generation, status, labels, owner_kind, owner_name, \
     finalizers, deleting_since";

fn failed(cluster: &str, what: &str) -> impl Fn(rusqlite::Error) -> StoreError {
    let context = format!("{what} in cluster {cluster}");
    move |e| StoreError::Unavailable(format!("{context}: {}", describe(&e)))
}

/// An object's state from the columns of [`STATE_COLUMNS`] starting at
/// `first`.
fn current_at(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Current> {
    let labels: String = row.get(first + 4)?;
    let finalizers: String = row.get(first + 7)?;
    let owner = match (
        row.get::<_, Option<String>>(first + 5)?,
        row.get::<_, Option<String>>(first + 6)?,
    ) {
        (Some(kind), Some(name)) => Some(ObjectKey { kind, name }),
        _ => None,
    };
    let corrupt = |what: &str, e: serde_json::Error| {
        rusqlite::Error::FromSqlConversionFailure(
            first,
            rusqlite::types::Type::Text,
            format!("stored {what} are not valid ({e})").into(),
        )
    };
    Ok(Current {
        version: row.get::<_, i64>(first)? as u64,
        value: row.get(first + 1)?,
        generation: row.get::<_, i64>(first + 2)? as u64,
        status: row.get(first + 3)?,
        meta: Metadata {
            labels: serde_json::from_str(&labels).map_err(|e| corrupt("labels", e))?,
            owner,
            finalizers: serde_json::from_str(&finalizers).map_err(|e| corrupt("finalizers", e))?,
        },
        deleting_since: row.get::<_, Option<i64>>(first + 8)?.map(clock::time),
    })
}

/// The attribution columns of `origin`: lease, epoch, holder, token.
fn origin_columns(origin: &Origin) -> (Option<&str>, Option<i64>, Option<&str>, Option<&str>) {
    match origin {
        Origin::Guest {
            lease,
            epoch,
            holder,
        } => (Some(lease), Some(epoch.0 as i64), Some(holder), None),
        Origin::Api { token } => (None, None, None, token.as_deref()),
    }
}

/// A write's author from its attribution columns starting at `first`.
fn origin_at(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Origin> {
    Ok(
        match (
            row.get::<_, Option<String>>(first)?,
            row.get::<_, Option<i64>>(first + 1)?,
            row.get::<_, Option<String>>(first + 2)?,
        ) {
            (Some(lease), Some(epoch), Some(holder)) => Origin::Guest {
                lease,
                epoch: Epoch(epoch as u64),
                holder,
            },
            _ => Origin::Api {
                token: row.get(first + 3)?,
            },
        },
    )
}

fn json(value: &impl serde::Serialize) -> String {
    // Maps and lists of strings always serialize.
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

/// Why a commit did not happen.
enum Failed {
    Store(StoreError),
    Fence(AuthorityError),
}

impl From<StoreError> for Failed {
    fn from(error: StoreError) -> Self {
        Failed::Store(error)
    }
}

impl SqliteStore {
    /// The store of `db`'s data directory.
    pub fn new(db: EmbeddedDb) -> Self {
        Self { db }
    }

    /// The database.
    pub fn db(&self) -> &EmbeddedDb {
        &self.db
    }

    /// Who last wrote an object (a lease, epoch and holder, or the API).
    pub async fn written_by(
        &self,
        cluster: &str,
        key: &ObjectKey,
    ) -> Result<Option<Origin>, StoreError> {
        check_cluster(cluster)?;
        check_key(key)?;
        let (cluster, key) = (cluster.to_string(), key.clone());
        self.db
            .read(move |c| {
                c.query_row(
                    "SELECT lease, epoch, holder, token FROM leasehold_objects
                      WHERE cluster = ?1 AND kind = ?2 AND name = ?3",
                    params![cluster, key.kind, key.name],
                    |r| origin_at(r, 0),
                )
                .optional()
                .map_err(failed(&cluster, "reading who wrote an object"))
            })
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?
    }

    /// Run `batch` as one transaction, checked against `fence` if given;
    /// the plan and the commit's time come back for an API write's answer.
    async fn commit(
        &self,
        batch: Batch,
        fence: Option<Fence>,
    ) -> Result<(Committed, Plan, DateTime<Utc>, Batch), StoreError> {
        // Task-local, so read here, before the blocking thread.
        let traceparent = crate::telemetry::write_context().map(|t| t.as_str().to_string());
        let endpoint = self.db.endpoint().to_string();
        let outcome = self
            .db
            .write(move |c| {
                let result = transact(c, &batch, fence.as_ref(), traceparent.as_deref());
                (result, batch)
            })
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        match outcome {
            (Ok((committed, plan, at, last)), batch) => {
                self.db.committed(&batch.cluster, last);
                Ok((committed, plan, at, batch))
            }
            (Err(Failed::Store(e)), _) => Err(e),
            (Err(Failed::Fence(AuthorityError::Unavailable { reason, .. })), _) => {
                Err(StoreError::Unavailable(format!("{endpoint}: {reason}")))
            }
            (Err(Failed::Fence(e)), _) => Err(e.into()),
        }
    }

    /// Run `f` in one read snapshot.
    async fn snapshot<T: Send + 'static>(
        &self,
        cluster: &str,
        what: &'static str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let cluster = cluster.to_string();
        self.db
            .read(move |c| {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Deferred)
                    .map_err(failed(&cluster, what))?;
                f(&tx)
            })
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?
    }
}

/// One commit: the transaction described in the module comment. Returns
/// what it committed and the last position it took.
fn transact(
    connection: &mut rusqlite::Connection,
    batch: &Batch,
    fence: Option<&Fence>,
    traceparent: Option<&str>,
) -> Result<(Committed, Plan, DateTime<Utc>, u64), Failed> {
    let cluster = batch.cluster.as_str();
    let sql = |what: &'static str| failed(cluster, what);
    let tx = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql("beginning a commit"))?;
    let now = Now::read();
    if let Some(fence) = fence {
        check_fence_and_count(&tx, fence, &now).map_err(Failed::Fence)?;
    }
    let mut current: HashMap<ObjectKey, Current> = HashMap::new();
    {
        let mut read = tx
            .prepare_cached(&format!(
                "SELECT {STATE_COLUMNS} FROM leasehold_objects
                  WHERE cluster = ?1 AND kind = ?2 AND name = ?3"
            ))
            .map_err(sql("reading objects"))?;
        for key in batch.keys() {
            if let Some(state) = read
                .query_row(params![cluster, key.kind, key.name], |r| current_at(r, 0))
                .optional()
                .map_err(sql("reading objects"))?
            {
                current.insert(key.clone(), state);
            }
        }
    }
    let mut plan = batch.resolve(|k| current.get(k))?;
    // Garbage collection: what the deleted objects own, transitively.
    loop {
        let owners = plan.owners_to_collect();
        if owners.is_empty() {
            break;
        }
        let mut found = Vec::new();
        let mut owned = tx
            .prepare_cached(&format!(
                "SELECT kind, name, {STATE_COLUMNS} FROM leasehold_objects
                  WHERE cluster = ?1 AND owner_kind = ?2 AND owner_name = ?3
                  ORDER BY kind, name LIMIT ?4"
            ))
            .map_err(sql("reading owned objects"))?;
        let bound = MAX_COLLECTED_PER_COMMIT as i64 + 1;
        for owner in &owners {
            let rows = owned
                .query_map(params![cluster, owner.kind, owner.name, bound], |r| {
                    Ok((
                        ObjectKey {
                            kind: r.get(0)?,
                            name: r.get(1)?,
                        },
                        current_at(r, 2)?,
                    ))
                })
                .map_err(sql("reading owned objects"))?;
            for row in rows {
                found.push(row.map_err(sql("reading owned objects"))?);
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        current.extend(found.iter().cloned());
        plan.collect(batch, found)?;
    }
    let last = tx
        .query_row(
            "SELECT last FROM leasehold_positions WHERE only = 1",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map_err(sql("taking a revision"))? as u64;
    let mut next = last;
    let mut take = || {
        next += 1;
        next
    };
    let revision = take();
    // Microseconds, as stored: what a later read gives back.
    let at = clock::time(now.utc);
    let (lease, epoch, holder, token) = origin_columns(&batch.origin);
    {
        let mut upsert = tx
            .prepare_cached(
                "INSERT INTO leasehold_objects
                        (cluster, kind, name, version, value, generation, status, labels,
                         owner_kind, owner_name, finalizers, deleting_since,
                         lease, epoch, holder, token)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
                 ON CONFLICT (cluster, kind, name) DO UPDATE SET
                        version = excluded.version, value = excluded.value,
                        generation = excluded.generation, status = excluded.status,
                        labels = excluded.labels, owner_kind = excluded.owner_kind,
                        owner_name = excluded.owner_name, finalizers = excluded.finalizers,
                        deleting_since = excluded.deleting_since, lease = excluded.lease,
                        epoch = excluded.epoch, holder = excluded.holder, token = excluded.token",
            )
            .map_err(sql("writing objects"))?;
        let mut remove = tx
            .prepare_cached(
                "DELETE FROM leasehold_objects WHERE cluster = ?1 AND kind = ?2 AND name = ?3",
            )
            .map_err(sql("deleting objects"))?;
        let mut change = tx
            .prepare_cached(
                "INSERT INTO leasehold_changes
                        (cluster, position, revision, at, kind, name, change, version,
                         lease, epoch, holder, token, traceparent, owner_kind, owner_name,
                         labels, previous, previous_owner_kind, previous_owner_name,
                         previous_labels)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                         ?16, ?17, ?18, ?19, ?20)",
            )
            .map_err(sql("recording changes"))?;
        for write in &plan.writes {
            let (key, kind, version, (relations, previous)) = match write {
                Planned::Create { key, row } | Planned::Update { key, row } => {
                    let before = current.get(key);
                    upsert
                        .execute(params![
                            cluster,
                            key.kind,
                            key.name,
                            revision as i64,
                            row.value,
                            row.generation as i64,
                            row.status,
                            json(&row.meta.labels),
                            row.meta.owner.as_ref().map(|o| o.kind.as_str()),
                            row.meta.owner.as_ref().map(|o| o.name.as_str()),
                            json(&row.meta.finalizers),
                            row.deleting.at(at).map(clock::micros),
                            lease,
                            epoch,
                            holder,
                            token,
                        ])
                        .map_err(sql("writing objects"))?;
                    let kind = if before.is_some() {
                        ChangeKind::Updated
                    } else {
                        ChangeKind::Created
                    };
                    (
                        key,
                        kind,
                        revision,
                        Relations::change(before.map(|c| &c.meta), &row.meta),
                    )
                }
                Planned::Delete { key, version } => {
                    remove
                        .execute(params![cluster, key.kind, key.name])
                        .map_err(sql("deleting objects"))?;
                    let relations = current
                        .get(key)
                        .map(|c| Relations::of(&c.meta))
                        .unwrap_or_default();
                    (key, ChangeKind::Deleted, *version, (relations, None))
                }
            };
            change
                .execute(params![
                    cluster,
                    take() as i64,
                    revision as i64,
                    now.utc,
                    key.kind,
                    key.name,
                    kind.as_str(),
                    version as i64,
                    lease,
                    epoch,
                    holder,
                    token,
                    traceparent,
                    relations.owner.as_ref().map(|o| o.kind.as_str()),
                    relations.owner.as_ref().map(|o| o.name.as_str()),
                    json(&relations.labels),
                    previous.is_some(),
                    previous
                        .as_ref()
                        .and_then(|p| p.owner.as_ref())
                        .map(|o| o.kind.as_str()),
                    previous
                        .as_ref()
                        .and_then(|p| p.owner.as_ref())
                        .map(|o| o.name.as_str()),
                    previous.as_ref().map(|p| json(&p.labels)),
                ])
                .map_err(sql("recording changes"))?;
        }
    }
    let mut event_seqs = Vec::with_capacity(plan.events.len());
    {
        let mut append = tx
            .prepare_cached(
                "INSERT INTO leasehold_events
                        (cluster, seq, revision, at, kind, name, reason, message,
                         lease, epoch, holder, token)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )
            .map_err(sql("appending events"))?;
        for event in &plan.events {
            let seq = take();
            append
                .execute(params![
                    cluster,
                    seq as i64,
                    revision as i64,
                    now.utc,
                    event.key.kind,
                    event.key.name,
                    event.reason,
                    event.message,
                    lease,
                    epoch,
                    holder,
                    token,
                ])
                .map_err(sql("appending events"))?;
            event_seqs.push(seq);
        }
    }
    let last = next;
    tx.prepare_cached("UPDATE leasehold_positions SET last = ?1 WHERE only = 1")
        .and_then(|mut s| s.execute(params![last as i64]))
        .map_err(sql("taking positions"))?;
    tx.prepare_cached(
        "INSERT INTO leasehold_feeds (cluster, last) VALUES (?1, ?2)
         ON CONFLICT (cluster) DO UPDATE SET last = excluded.last",
    )
    .and_then(|mut s| s.execute(params![cluster, last as i64]))
    .map_err(sql("recording the feed"))?;
    tx.commit().map_err(|e| {
        Failed::Store(StoreError::Unavailable(format!(
            "committing to cluster {cluster}: {}; nothing was written",
            describe(&e)
        )))
    })?;
    Ok((
        Committed {
            revision,
            event_seqs,
            written: plan.written(revision, at),
        },
        plan,
        at,
        last,
    ))
}

/// Whether `selector` selects an object in state `current`: its labels,
/// then its value's containment (PostgreSQL's `@>`, as the memory store
/// judges it).
fn selects(selector: &Selector, current: &Current) -> Result<bool, StoreError> {
    if !selector
        .labels
        .iter()
        .all(|(name, value)| current.meta.labels.get(name) == Some(value))
    {
        return Ok(false);
    }
    let Some(contains) = &selector.contains else {
        return Ok(true);
    };
    let value: serde_json::Value = serde_json::from_str(&current.value).map_err(|e| {
        StoreError::Unavailable(format!(
            "a stored value is not JSON ({e}); the store is corrupt"
        ))
    })?;
    Ok(super::memory::json_contains(&value, contains))
}

/// A change from the columns `CHANGES_COLUMNS` reads.
fn change_at(row: &rusqlite::Row<'_>) -> rusqlite::Result<Change> {
    let owner = |kind: Option<String>, name: Option<String>| match (kind, name) {
        (Some(kind), Some(name)) => Some(ObjectKey { kind, name }),
        _ => None,
    };
    let labels = |text: String| {
        serde_json::from_str(&text).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(
                0,
                rusqlite::types::Type::Text,
                format!("stored change labels are not valid ({e})").into(),
            )
        })
    };
    let change: String = row.get(5)?;
    let previous = if row.get::<_, bool>(15)? {
        Some(Relations {
            owner: owner(row.get(16)?, row.get(17)?),
            labels: labels(row.get::<_, Option<String>>(18)?.unwrap_or_default())?,
        })
    } else {
        None
    };
    Ok(Change {
        position: row.get::<_, i64>(0)? as u64,
        revision: row.get::<_, i64>(1)? as u64,
        at: clock::time(row.get(2)?),
        kind: row.get(3)?,
        name: row.get(4)?,
        change: ChangeKind::parse(&change).unwrap_or(ChangeKind::Updated),
        version: row.get::<_, i64>(6)? as u64,
        origin: origin_at(row, 7)?,
        traceparent: row
            .get::<_, Option<String>>(11)?
            .and_then(|t| crate::telemetry::TraceParent::parse(&t)),
        relations: Relations {
            owner: owner(row.get(12)?, row.get(13)?),
            labels: labels(row.get(14)?)?,
        },
        previous,
    })
}

const CHANGES_COLUMNS: &str = "position, revision, at, kind, name, change, version, lease, epoch, \
     holder, token, traceparent, owner_kind, owner_name, labels, previous, previous_owner_kind, \
     previous_owner_name, previous_labels";

/// The retention floors of `cluster`: (events, changes).
fn floors(tx: &Transaction<'_>, cluster: &str) -> rusqlite::Result<(u64, u64)> {
    Ok(tx
        .prepare_cached(
            "SELECT events_floor, changes_floor FROM leasehold_retention WHERE cluster = ?1",
        )?
        .query_row(params![cluster], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })
        .optional()?
        .unwrap_or((0, 0)))
}

fn sql_position(position: u64) -> i64 {
    i64::try_from(position).unwrap_or(i64::MAX)
}

impl SqliteStore {
    /// Changes of `kinds` after `after` and at most `through`, one page.
    async fn changes_below(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        through: Option<u64>,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        let limit = page_limit(limit);
        let owned = cluster.to_string();
        let kinds = kinds.to_vec();
        self.snapshot(cluster, "reading the change stream", move |tx| {
            let cluster = owned.as_str();
            let sql = failed(cluster, "reading the change stream");
            let (_, floor) = floors(tx, cluster).map_err(&sql)?;
            check_floor(cluster, CHANGE_STREAM, after, floor)?;
            // Every commit is whole in this snapshot: the counter is the
            // mark.
            let mark = tx
                .query_row(
                    "SELECT last FROM leasehold_positions WHERE only = 1",
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .map_err(&sql)? as u64;
            check_issued(cluster, CHANGE_STREAM, after, mark, mark)?;
            let mark = through.map_or(mark, |t| t.min(mark));
            let filter = if kinds.is_empty() {
                String::new()
            } else {
                format!(
                    " AND kind IN ({})",
                    (0..kinds.len())
                        .map(|i| format!("?{}", i + 5))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let mut statement = tx
                .prepare_cached(&format!(
                    "SELECT {CHANGES_COLUMNS} FROM leasehold_changes
                      WHERE cluster = ?1 AND position > ?2 AND position <= ?3{filter}
                      ORDER BY position LIMIT ?4"
                ))
                .map_err(&sql)?;
            let mut values: Vec<&dyn rusqlite::ToSql> = Vec::new();
            let (after_sql, mark_sql, limit_sql) =
                (sql_position(after), sql_position(mark), limit as i64);
            values.push(&cluster);
            values.push(&after_sql);
            values.push(&mark_sql);
            values.push(&limit_sql);
            for kind in &kinds {
                values.push(kind);
            }
            let changes = statement
                .query_map(values.as_slice(), change_at)
                .map_err(&sql)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(&sql)?;
            let through = match changes.last() {
                Some(last) if changes.len() >= limit => last.position,
                _ => after.max(mark),
            };
            Ok(ChangePage { changes, through })
        })
        .await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, cluster: &str, key: &ObjectKey) -> Result<Option<Object>, StoreError> {
        check_cluster(cluster)?;
        check_key(key)?;
        let (owned, key) = (cluster.to_string(), key.clone());
        self.snapshot(cluster, "reading an object", move |tx| {
            tx.prepare_cached(&format!(
                "SELECT {STATE_COLUMNS} FROM leasehold_objects
                  WHERE cluster = ?1 AND kind = ?2 AND name = ?3"
            ))
            .and_then(|mut s| {
                s.query_row(params![owned, key.kind, key.name], |r| current_at(r, 0))
                    .optional()
            })
            .map(|found| found.map(|c| c.object(&key)))
            .map_err(failed(&owned, "reading an object"))
        })
        .await
    }

    async fn list(
        &self,
        cluster: &str,
        kind: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.list_selected(cluster, kind, &Selector::default(), after, limit)
            .await
    }

    async fn list_selected(
        &self,
        cluster: &str,
        kind: &str,
        selector: &Selector,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        check_list_request(cluster, kind, after, selector)?;
        let limit = page_limit(limit);
        let (owned, kind) = (cluster.to_string(), kind.to_string());
        let after = after.unwrap_or_default().to_string();
        let selector = selector.clone();
        self.snapshot(cluster, "listing objects", move |tx| {
            let sql = failed(&owned, "listing objects");
            // The kind in name order, until one more than asked matches
            // (it tells whether another page exists). An empty selector
            // matches every row, so that is one page's worth of rows.
            let mut statement = tx
                .prepare_cached(&format!(
                    "SELECT name, {STATE_COLUMNS} FROM leasehold_objects
                      WHERE cluster = ?1 AND kind = ?2 AND name > ?3
                      ORDER BY name"
                ))
                .map_err(&sql)?;
            let mut rows = statement.query(params![owned, kind, after]).map_err(&sql)?;
            let mut objects = Vec::new();
            while objects.len() <= limit {
                let Some(row) = rows.next().map_err(&sql)? else {
                    break;
                };
                let name: String = row.get(0).map_err(&sql)?;
                let state = current_at(row, 1).map_err(&sql)?;
                if selects(&selector, &state)? {
                    objects.push(state.object(&ObjectKey {
                        kind: kind.clone(),
                        name,
                    }));
                }
            }
            let next = if objects.len() > limit {
                objects.truncate(limit);
                objects.last().map(|o: &Object| o.name.clone())
            } else {
                None
            };
            Ok(Page { objects, next })
        })
        .await
    }

    async fn commit_fenced(
        &self,
        fence: &Fence,
        ops: &[Op],
        events: &[NewEvent],
    ) -> Result<Committed, StoreError> {
        let batch = Batch::fenced(fence, ops, events)?;
        self.commit(batch, Some(fence.clone()))
            .await
            .map(|(committed, ..)| committed)
    }

    async fn put(
        &self,
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        expected_version: Option<u64>,
    ) -> Result<Object, StoreError> {
        let batch = Batch::put(cluster, key, value, expected_version)?;
        let (committed, plan, at, _) = self.commit(batch, None).await?;
        plan.object(key, committed.revision, at).ok_or_else(|| {
            StoreError::Unavailable(format!(
                "the put of {key} in cluster {cluster} committed at revision {} removed the object",
                committed.revision
            ))
        })
    }

    async fn delete(
        &self,
        cluster: &str,
        key: &ObjectKey,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        let batch = Batch::delete(cluster, key, expected_version)?;
        self.commit(batch, None).await?;
        Ok(())
    }

    async fn write(&self, cluster: &str, write: &ApiWrite) -> Result<Written, StoreError> {
        let batch = api_batch(cluster, write)?;
        let (committed, plan, at, batch) = self.commit(batch, None).await?;
        written(&batch, plan, committed.revision, at)
    }

    async fn events(
        &self,
        cluster: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        check_cluster(cluster)?;
        let limit = page_limit(limit) as i64;
        let owned = cluster.to_string();
        self.snapshot(cluster, "reading events", move |tx| {
            let sql = failed(&owned, "reading events");
            let (floor, _) = floors(tx, &owned).map_err(&sql)?;
            check_floor(&owned, EVENT_LOG, after, floor)?;
            // Every commit is whole in this snapshot: the counter is the
            // mark.
            let head = tx
                .query_row(
                    "SELECT last FROM leasehold_positions WHERE only = 1",
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .map_err(&sql)? as u64;
            check_issued(&owned, EVENT_LOG, after, head, head)?;
            let mut statement = tx
                .prepare_cached(
                    "SELECT seq, revision, at, kind, name, reason, message,
                            lease, epoch, holder, token
                       FROM leasehold_events
                      WHERE cluster = ?1 AND seq > ?2
                      ORDER BY seq LIMIT ?3",
                )
                .map_err(&sql)?;
            statement
                .query_map(params![owned, sql_position(after), limit], |r| {
                    Ok(Event {
                        seq: r.get::<_, i64>(0)? as u64,
                        revision: r.get::<_, i64>(1)? as u64,
                        at: clock::time(r.get(2)?),
                        kind: r.get(3)?,
                        name: r.get(4)?,
                        reason: r.get(5)?,
                        message: r.get(6)?,
                        origin: origin_at(r, 7)?,
                    })
                })
                .map_err(&sql)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(&sql)
        })
        .await
    }

    async fn changes(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        check_change_request(cluster, kinds)?;
        self.changes_below(cluster, kinds, after, None, limit).await
    }

    async fn changes_through(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        through: u64,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        check_change_request(cluster, kinds)?;
        self.changes_below(cluster, kinds, after, Some(through), limit)
            .await
    }

    /// One batch in one write transaction: events and changes older than
    /// the retention (wall clock), from the floor up, stopping at the first
    /// one still kept, the floors raised with them; then tenures beyond the
    /// newest kept per lease, never a lease's live one. Every commit is
    /// whole in the transaction, so nothing is in flight.
    async fn trim(
        &self,
        cluster: &str,
        policy: &super::retention::Policy,
    ) -> Result<super::retention::Trimmed, StoreError> {
        check_cluster(cluster)?;
        let owned = cluster.to_string();
        let policy = *policy;
        self.db
            .write(move |c| {
                let cluster = owned.as_str();
                let sql = failed(cluster, "trimming");
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(&sql)?;
                let now = Now::read();
                let cutoff =
                    now.utc - crate::embedded::clock::duration_micros(policy.event_retention);
                let batch = policy.batch as i64;
                let (events_floor, changes_floor) = floors(&tx, cluster).map_err(&sql)?;
                let mut trimmed = super::retention::Trimmed::default();
                for (table, column, floor, floor_column) in [
                    ("leasehold_events", "seq", events_floor, "events_floor"),
                    (
                        "leasehold_changes",
                        "position",
                        changes_floor,
                        "changes_floor",
                    ),
                ] {
                    let old: Vec<(i64, bool)> = tx
                        .prepare_cached(&format!(
                            "SELECT {column}, at < ?3 FROM {table}
                              WHERE cluster = ?1 AND {column} > ?2
                              ORDER BY {column} LIMIT ?4"
                        ))
                        .and_then(|mut s| {
                            s.query_map(
                                params![cluster, sql_position(floor), cutoff, batch],
                                |r| Ok((r.get(0)?, r.get(1)?)),
                            )?
                            .collect()
                        })
                        .map_err(&sql)?;
                    let Some(new_floor) = old
                        .iter()
                        .take_while(|(_, old)| *old)
                        .map(|(position, _)| *position)
                        .last()
                    else {
                        continue;
                    };
                    tx.prepare_cached(&format!(
                        "INSERT INTO leasehold_retention (cluster, {floor_column}, trimmed_at)
                         VALUES (?1, ?2, ?3)
                         ON CONFLICT (cluster) DO UPDATE SET
                                {floor_column} = max({floor_column}, excluded.{floor_column}),
                                trimmed_at = excluded.trimmed_at"
                    ))
                    .and_then(|mut s| s.execute(params![cluster, new_floor, now.utc]))
                    .map_err(&sql)?;
                    let deleted = tx
                        .prepare_cached(&format!(
                            "DELETE FROM {table}
                              WHERE cluster = ?1 AND {column} > ?2 AND {column} <= ?3"
                        ))
                        .and_then(|mut s| {
                            s.execute(params![cluster, sql_position(floor), new_floor])
                        })
                        .map_err(&sql)? as u64;
                    if table == "leasehold_events" {
                        trimmed.events = deleted;
                    } else {
                        trimmed.changes = deleted;
                    }
                }
                let keep = i64::try_from(policy.tenure_retention.max(1)).unwrap_or(i64::MAX);
                trimmed.tenures = tx
                    .prepare_cached(
                        "DELETE FROM leasehold_tenures
                          WHERE (cluster, lease, epoch) IN (
                                SELECT r.cluster, r.lease, r.epoch
                                  FROM (SELECT cluster, lease, epoch,
                                               row_number() OVER (PARTITION BY lease
                                                                  ORDER BY epoch DESC) AS rank
                                          FROM leasehold_tenures WHERE cluster = ?1) AS r
                                 WHERE r.rank > ?2
                                   AND NOT EXISTS (SELECT 1 FROM leasehold_leases l
                                                    WHERE l.cluster = ?1 AND l.name = r.lease
                                                      AND l.epoch = r.epoch)
                                 ORDER BY r.lease, r.epoch
                                 LIMIT ?3)",
                    )
                    .and_then(|mut s| s.execute(params![cluster, keep, batch]))
                    .map_err(&sql)? as u64;
                tx.commit().map_err(&sql)?;
                Ok(trimmed)
            })
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?
    }

    fn watch(&self, cluster: &str) -> watch::Receiver<u64> {
        self.db.feed(cluster)
    }

    async fn count(&self, cluster: &str, kind: &str, limit: u64) -> Result<u64, StoreError> {
        check_cluster(cluster)?;
        crate::names::check_label("object kind", kind)?;
        let (owned, kind) = (cluster.to_string(), kind.to_string());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.snapshot(cluster, "counting objects", move |tx| {
            tx.prepare_cached(
                "SELECT count(*) FROM (SELECT 1 FROM leasehold_objects
                                        WHERE cluster = ?1 AND kind = ?2 LIMIT ?3)",
            )
            .and_then(|mut s| s.query_row(params![owned, kind, limit], |r| r.get::<_, i64>(0)))
            .map(|n| n as u64)
            .map_err(failed(&owned, "counting objects"))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    //! The store conformance suite on the embedded backend, with leases
    //! granted, taken over, expired and released by the embedded
    //! authority itself.

    use std::sync::Arc;

    use async_trait::async_trait;

    use super::SqliteStore;
    use crate::authority::sqlite::SqliteAuthority;
    use crate::authority::{AcquireRequest, Acquired, Authority, EndReason};
    use crate::embedded::{Access, EmbeddedDb};
    use crate::fence::{Epoch, Fence, LeaseKey};
    use crate::store::conformance::{Backend, Leases, conformance_suite};

    struct AuthorityLeases {
        authority: SqliteAuthority,
    }

    impl AuthorityLeases {
        async fn acquire(&self, key: &LeaseKey, holder: &str) -> Fence {
            let request = AcquireRequest {
                key: key.clone(),
                holder: holder.into(),
                ttl: crate::timeouts::LEASE_TTL,
            };
            match self.authority.acquire(&request).await.unwrap() {
                Acquired::Granted(grant) => grant.fence,
                held => panic!("{key} not granted: {held:?}"),
            }
        }
    }

    #[async_trait]
    impl Leases for AuthorityLeases {
        async fn grant(&self, cluster: &str, lease: &str, holder: &str) -> Fence {
            let fence = self.acquire(&LeaseKey::new(cluster, lease), holder).await;
            assert_eq!(fence.epoch, Epoch(1), "{} was already granted", fence.key);
            fence
        }

        async fn take_over(&self, fence: &Fence, holder: &str) -> Fence {
            crate::authority::sqlite::tests::expire(self.authority.db(), &fence.key).await;
            self.acquire(&fence.key, holder).await
        }

        async fn expire(&self, fence: &Fence) {
            crate::authority::sqlite::tests::expire(self.authority.db(), &fence.key).await;
        }

        async fn release(&self, fence: &Fence) {
            self.authority
                .release(fence, EndReason::Released)
                .await
                .unwrap();
        }

        async fn writes(&self, fence: &Fence) -> u64 {
            self.authority
                .history(&fence.key, crate::limits::MAX_HISTORY)
                .await
                .unwrap()
                .into_iter()
                .find(|t| t.epoch == fence.epoch)
                .map_or(0, |t| t.writes)
        }
    }

    /// Removes the data directory once the backend is dropped.
    struct Scratch(std::path::PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    async fn sqlite_backend() -> Backend {
        let base = crate::embedded::scratch_dir("store-conformance");
        let db = EmbeddedDb::open(&base, Access::Shared).await.unwrap();
        Backend {
            store: Arc::new(SqliteStore::new(db.clone())),
            leases: Arc::new(AuthorityLeases {
                authority: SqliteAuthority::new(db),
            }),
            _keep: Box::new(Scratch(base)),
        }
    }

    conformance_suite!(sqlite_backend);
}
