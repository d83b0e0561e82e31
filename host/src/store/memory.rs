//! The in-memory state backend (`url = "memory:"`, and the tests):
//! everything in this process's memory.
//!
//! For single-process development and tests only: two replicas each with a
//! memory store serve different state (docs/design.md, point 7), and nothing
//! survives a restart. Semantics are the PostgreSQL backend's: the same
//! validation and precondition rules ([`super::validate`], [`super::plan`]),
//! one revision per commit and one position per object change and per
//! event, all from one series shared by every cluster of the store (so a
//! cluster's numbers have gaps, as in PostgreSQL). A commit is applied
//! whole under the store's lock, so the high-water mark is always the last
//! number given out: readers see every commit at once or not at all.
//!
//! Fenced commits run inside the memory authority's lock
//! ([`FenceLock::while_fenced`]), which is what the tenure row a fenced
//! commit locks is to PostgreSQL: no grant can interleave between the fence check and the
//! write. Lock order is always authority, then store; the store never
//! calls the authority while holding its own lock.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::authority::fence_check::FenceLock;
use crate::fence::Fence;

use super::plan::{Batch, Current, Plan, Planned};
use super::validate::{
    check_change_request, check_cluster, check_key, check_list_request, page_limit,
};
use super::{
    ApiWrite, Change, ChangeKind, ChangePage, Committed, Event, NewEvent, Object, ObjectKey, Op,
    Origin, Page, Relations, Selector, Store, StoreError, Written,
};

/// State of every cluster, in memory.
pub struct MemoryStore {
    fences: Arc<dyn FenceLock>,
    clusters: Mutex<Clusters>,
    /// The time commits are stamped with: the machine's wall clock, unless
    /// a simulation gave its virtual one ([`MemoryStore::with_clock`]).
    clock: Option<StoreClock>,
}

/// A clock a memory store stamps its commits with (change and event times,
/// deletion marks) instead of the machine's: a simulation's virtual clock,
/// so that what a guest reads does not depend on when it ran.
pub type StoreClock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// Every cluster's state, and the store's one series of numbers.
#[derive(Default)]
struct Clusters {
    /// The last number given out (revision or position); 0 before the
    /// first commit.
    last: u64,
    by_name: HashMap<String, ClusterState>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

struct ClusterState {
    /// Ordered by (kind, name), byte-wise: the order PostgreSQL's `C`
    /// collation gives the same names.
    objects: BTreeMap<ObjectKey, Stored>,
    /// In position order.
    changes: Vec<Change>,
    /// In `seq` order.
    events: Vec<Event>,
    /// Every change up to this position may have been trimmed (see
    /// [`super::retention`]); everything above is kept.
    changes_floor: u64,
    /// The same for events.
    events_floor: u64,
    /// The last change or event position, for watchers.
    feed: watch::Sender<u64>,
}

struct Stored {
    current: Current,
    written_by: Origin,
}

impl ClusterState {
    fn new() -> Self {
        Self {
            objects: BTreeMap::new(),
            changes: Vec::new(),
            events: Vec::new(),
            changes_floor: 0,
            events_floor: 0,
            feed: watch::channel(0).0,
        }
    }
}

impl MemoryStore {
    /// A store whose fenced commits are checked by `fences` (the memory
    /// authority). Logs a warning: this state lives and dies with the
    /// process.
    pub fn new(fences: Arc<dyn FenceLock>) -> Self {
        tracing::warn!(
            "state is kept in this process's memory: it is lost on exit and not shared with other replicas; remove url = \"memory:\" for the durable embedded backend, or set a PostgreSQL URL"
        );
        Self {
            fences,
            clusters: Mutex::new(Clusters::default()),
            clock: None,
        }
    }

    /// The same store stamping its commits with `clock` rather than the
    /// machine's wall clock (`leasehold sim`). Retention still compares
    /// against that clock.
    pub fn with_clock(self, clock: StoreClock) -> Self {
        Self {
            clock: Some(clock),
            ..self
        }
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.as_ref().map_or_else(Utc::now, |clock| clock())
    }

    /// Who last wrote an object (a lease, epoch and holder, or the API).
    pub fn written_by(&self, cluster: &str, key: &ObjectKey) -> Result<Option<Origin>, StoreError> {
        check_cluster(cluster)?;
        check_key(key)?;
        Ok(self
            .lock()
            .by_name
            .get(cluster)
            .and_then(|c| c.objects.get(key))
            .map(|o| o.written_by.clone()))
    }

    /// The map is only mutated after every check of a commit has passed
    /// (see [`Self::apply`]), so a panic elsewhere cannot leave a half-made
    /// commit behind a poisoned lock: recovering the guard is safe.
    fn lock(&self) -> MutexGuard<'_, Clusters> {
        self.clusters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolve and apply one batch atomically under the store lock; the
    /// plan and the commit's time come back for the caller's answer.
    fn apply(&self, batch: &Batch) -> Result<(Committed, Plan, DateTime<Utc>), StoreError> {
        let mut clusters = self.lock();
        let Clusters { last, by_name } = &mut *clusters;
        let state = by_name
            .entry(batch.cluster.clone())
            .or_insert_with(ClusterState::new);
        let mut plan = batch.resolve(|key| state.objects.get(key).map(|o| &o.current))?;
        // Garbage collection: the owned objects of every object whose
        // deletion the plan requested, in key order, transitively.
        loop {
            let owners = plan.owners_to_collect();
            if owners.is_empty() {
                break;
            }
            let owned: Vec<(ObjectKey, Current)> = state
                .objects
                .iter()
                .filter(|(_, o)| {
                    o.current
                        .meta
                        .owner
                        .as_ref()
                        .is_some_and(|owner| owners.contains(owner))
                })
                .map(|(k, o)| (k.clone(), o.current.clone()))
                .collect();
            plan.collect(batch, owned)?;
        }
        // Nothing below can fail: the commit is all or nothing.
        let mut next = || {
            *last += 1;
            *last
        };
        let revision = next();
        let at = self.now();
        let traceparent = crate::telemetry::write_context();
        for write in &plan.writes {
            let (key, change, version, (relations, previous)) = match write {
                Planned::Create { key, row } | Planned::Update { key, row } => {
                    debug_assert!(
                        state
                            .objects
                            .get(key)
                            .is_none_or(|o| o.current.version < revision),
                        "object versions strictly increase"
                    );
                    let previous = state.objects.insert(
                        key.clone(),
                        Stored {
                            current: Current {
                                version: revision,
                                generation: row.generation,
                                value: row.value.clone(),
                                status: row.status.clone(),
                                meta: row.meta.clone(),
                                deleting_since: row.deleting.at(at),
                            },
                            written_by: batch.origin.clone(),
                        },
                    );
                    let relations =
                        Relations::change(previous.as_ref().map(|o| &o.current.meta), &row.meta);
                    let change = match previous {
                        Some(_) => ChangeKind::Updated,
                        None => ChangeKind::Created,
                    };
                    (key, change, revision, relations)
                }
                Planned::Delete { key, .. } => {
                    let (deleted, relations) = state.objects.remove(key).map_or_else(
                        || (0, Relations::default()),
                        |o| (o.current.version, Relations::of(&o.current.meta)),
                    );
                    (key, ChangeKind::Deleted, deleted, (relations, None))
                }
            };
            state.changes.push(Change {
                position: next(),
                revision,
                at,
                kind: key.kind.clone(),
                name: key.name.clone(),
                change,
                version,
                origin: batch.origin.clone(),
                traceparent: traceparent.clone(),
                relations,
                previous,
            });
        }
        let mut event_seqs = Vec::with_capacity(plan.events.len());
        for event in &plan.events {
            let seq = next();
            state.events.push(Event {
                seq,
                revision,
                at,
                kind: event.key.kind.clone(),
                name: event.key.name.clone(),
                reason: event.reason.clone(),
                message: event.message.clone(),
                origin: batch.origin.clone(),
            });
            event_seqs.push(seq);
        }
        debug_assert!(
            event_seqs.windows(2).all(|w| w[1] > w[0]),
            "a commit's sequence numbers increase in input order"
        );
        state.feed.send_replace(*last);
        Ok((
            Committed {
                revision,
                event_seqs,
                written: plan.written(revision, at),
            },
            plan,
            at,
        ))
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, cluster: &str, key: &ObjectKey) -> Result<Option<Object>, StoreError> {
        check_cluster(cluster)?;
        check_key(key)?;
        Ok(self
            .lock()
            .by_name
            .get(cluster)
            .and_then(|c| c.objects.get(key))
            .map(|o| o.current.object(key)))
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
        let clusters = self.lock();
        let Some(state) = clusters.by_name.get(cluster) else {
            return Ok(Page {
                objects: Vec::new(),
                next: None,
            });
        };
        let start = ObjectKey {
            kind: kind.to_string(),
            name: after.unwrap_or_default().to_string(),
        };
        let lower = match after {
            Some(_) => Bound::Excluded(start),
            None => Bound::Included(start),
        };
        // One more than asked tells whether another page exists. The
        // kind's objects are scanned in name order (the memory backend's
        // index is the map's order) until that many match.
        let mut objects = Vec::new();
        for (k, o) in state
            .objects
            .range((lower, Bound::Unbounded))
            .take_while(|(k, _)| k.kind == kind)
        {
            if objects.len() > limit {
                break;
            }
            if selects(selector, &o.current)? {
                objects.push(o.current.object(k));
            }
        }
        let next = if objects.len() > limit {
            objects.truncate(limit);
            objects.last().map(|o: &Object| o.name.clone())
        } else {
            None
        };
        Ok(Page { objects, next })
    }

    async fn commit_fenced(
        &self,
        fence: &Fence,
        ops: &[Op],
        events: &[NewEvent],
    ) -> Result<Committed, StoreError> {
        let batch = Batch::fenced(fence, ops, events)?;
        let mut outcome = None;
        self.fences.while_fenced(fence, &mut || {
            let result = self.apply(&batch).map(|(committed, _, _)| committed);
            let applied = result.is_ok();
            outcome = Some(result);
            applied
        })?;
        outcome.unwrap_or_else(|| {
            Err(StoreError::Unavailable(format!(
                "the memory authority accepted {fence} but did not run the write; nothing was written"
            )))
        })
    }

    async fn put(
        &self,
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        expected_version: Option<u64>,
    ) -> Result<Object, StoreError> {
        let batch = Batch::put(cluster, key, value, expected_version)?;
        let (committed, plan, at) = self.apply(&batch)?;
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
        self.apply(&Batch::delete(cluster, key, expected_version)?)?;
        Ok(())
    }

    async fn write(&self, cluster: &str, write: &ApiWrite) -> Result<Written, StoreError> {
        let batch = super::plan::api_batch(cluster, write)?;
        let (committed, plan, at) = self.apply(&batch)?;
        super::plan::written(&batch, plan, committed.revision, at)
    }

    async fn events(
        &self,
        cluster: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        check_cluster(cluster)?;
        let limit = page_limit(limit);
        let clusters = self.lock();
        // Every commit is whole under the lock: the mark is the last
        // number given out.
        super::check_issued(
            cluster,
            super::EVENT_LOG,
            after,
            clusters.last,
            clusters.last,
        )?;
        let Some(state) = clusters.by_name.get(cluster) else {
            return Ok(Vec::new());
        };
        super::check_floor(cluster, super::EVENT_LOG, after, state.events_floor)?;
        let start = state.events.partition_point(|e| e.seq <= after);
        Ok(state.events[start..].iter().take(limit).cloned().collect())
    }

    async fn changes(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        check_change_request(cluster, kinds)?;
        let limit = page_limit(limit);
        let clusters = self.lock();
        // Every commit is whole under the lock: the mark is the last
        // number given out.
        let mark = clusters.last;
        super::check_issued(cluster, super::CHANGE_STREAM, after, mark, mark)?;
        let Some(state) = clusters.by_name.get(cluster) else {
            return Ok(ChangePage {
                changes: Vec::new(),
                through: after.max(mark),
            });
        };
        super::check_floor(cluster, super::CHANGE_STREAM, after, state.changes_floor)?;
        let start = state.changes.partition_point(|c| c.position <= after);
        let changes: Vec<Change> = state.changes[start..]
            .iter()
            .filter(|c| kinds.is_empty() || kinds.contains(&c.kind))
            .take(limit)
            .cloned()
            .collect();
        let through = match changes.last() {
            Some(last) if changes.len() >= limit => last.position,
            _ => after.max(mark),
        };
        Ok(ChangePage { changes, through })
    }

    /// Events and changes older than the retention by this process's clock,
    /// at most `policy.batch` of each, from the oldest, stopping at the
    /// first one still kept; the floors rise under the same lock as the
    /// rows go. Tenures live in the memory authority, which bounds its own
    /// history: nothing to trim here.
    async fn trim(
        &self,
        cluster: &str,
        policy: &super::retention::Policy,
    ) -> Result<super::retention::Trimmed, StoreError> {
        check_cluster(cluster)?;
        let retention =
            chrono::Duration::from_std(policy.event_retention).unwrap_or(chrono::Duration::MAX);
        let cutoff = self
            .now()
            .checked_sub_signed(retention)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut clusters = self.lock();
        let Some(state) = clusters.by_name.get_mut(cluster) else {
            return Ok(super::retention::Trimmed::default());
        };
        // Every commit is whole under the lock: nothing is in flight.
        let events = state
            .events
            .iter()
            .take(policy.batch)
            .take_while(|e| e.at < cutoff)
            .count();
        if let Some(last) = state.events.drain(..events).next_back() {
            state.events_floor = state.events_floor.max(last.seq);
        }
        let changes = state
            .changes
            .iter()
            .take(policy.batch)
            .take_while(|c| c.at < cutoff)
            .count();
        if let Some(last) = state.changes.drain(..changes).next_back() {
            state.changes_floor = state.changes_floor.max(last.position);
        }
        Ok(super::retention::Trimmed {
            events: events as u64,
            changes: changes as u64,
            ..Default::default()
        })
    }

    fn watch(&self, cluster: &str) -> watch::Receiver<u64> {
        self.lock()
            .by_name
            .entry(cluster.to_string())
            .or_insert_with(ClusterState::new)
            .feed
            .subscribe()
    }

    async fn count(&self, cluster: &str, kind: &str, limit: u64) -> Result<u64, StoreError> {
        check_cluster(cluster)?;
        crate::names::check_label("object kind", kind)?;
        let clusters = self.lock();
        let Some(state) = clusters.by_name.get(cluster) else {
            return Ok(0);
        };
        let start = ObjectKey {
            kind: kind.to_string(),
            name: String::new(),
        };
        let counted = state
            .objects
            .range(start..)
            .take_while(|(k, _)| k.kind == kind)
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .count();
        Ok(counted as u64)
    }
}

/// Whether `selector` selects an object in this state
/// ([`leasehold_model::validate::selects`]). A stored value is always
/// valid JSON; failing to read one back is reported, never taken for "no
/// match".
fn selects(selector: &Selector, current: &Current) -> Result<bool, StoreError> {
    leasehold_model::validate::selects(selector, &current.meta.labels, &current.value).map_err(
        |e| {
            StoreError::Unavailable(format!(
                "a stored value is not JSON ({e}); the store is corrupt"
            ))
        },
    )
}

/// PostgreSQL's `jsonb @> jsonb`: whether `value` contains `query` (see
/// [`Selector`]), by the model's one rule ([`leasehold_model::json::contains`]).
pub(crate) fn json_contains(value: &serde_json::Value, query: &serde_json::Value) -> bool {
    leasehold_model::json::contains(value, query)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::AuthorityError;
    use crate::fence::{Epoch, LeaseKey};
    use crate::store::conformance::{Leases, create, key};
    use crate::store::fixtures::TestLeases;

    #[tokio::test]
    async fn objects_remember_who_wrote_them() {
        let leases = Arc::new(TestLeases::default());
        let store = MemoryStore::new(leases.clone());
        let fence = leases.grant("c1", "ctl", "host-a").await;
        let (t, n) = (key("tasks", "t"), key("nodes", "n"));
        store
            .commit_fenced(&fence, &[create(&t, "1")], &[])
            .await
            .unwrap();
        store.put("c1", &n, "1", None).await.unwrap();
        let guest = Origin::Guest {
            lease: "ctl".into(),
            epoch: fence.epoch,
            holder: "host-a".into(),
        };
        assert_eq!(store.written_by("c1", &t).unwrap(), Some(guest));
        assert_eq!(
            store.written_by("c1", &n).unwrap(),
            Some(Origin::Api { token: None })
        );
        assert_eq!(store.written_by("c1", &key("tasks", "none")).unwrap(), None);
    }

    /// A store given a clock stamps its changes and events with it, never
    /// with the machine's (a simulation's reads must not depend on when it
    /// ran).
    #[tokio::test]
    async fn a_store_with_a_clock_stamps_its_commits_with_it() {
        let at = DateTime::<Utc>::from_timestamp(1_767_225_600, 0).unwrap();
        let store =
            MemoryStore::new(Arc::new(TestLeases::default())).with_clock(Arc::new(move || at));
        store
            .put("c1", &key("tasks", "t"), "1", None)
            .await
            .unwrap();
        let changes = store.changes("c1", &[], 0, 10).await.unwrap();
        assert_eq!(changes.changes[0].at, at);
        assert_eq!(store.events("c1", 0, 10).await.unwrap()[0].at, at);
    }

    /// A fence lock that accepts every fence but never runs the write.
    struct Skipping;

    impl FenceLock for Skipping {
        fn while_fenced(
            &self,
            _fence: &Fence,
            _write: &mut dyn FnMut() -> bool,
        ) -> Result<(), AuthorityError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_fence_lock_that_skips_the_write_is_not_reported_as_success() {
        let store = MemoryStore::new(Arc::new(Skipping));
        let fence = Fence {
            key: LeaseKey::new("c1", "ctl"),
            epoch: Epoch(1),
            holder: "host-a".into(),
        };
        let t = key("tasks", "t");
        let result = store.commit_fenced(&fence, &[create(&t, "1")], &[]).await;
        assert!(
            matches!(result, Err(StoreError::Unavailable(_))),
            "{result:?}"
        );
        assert_eq!(store.get("c1", &t).await.unwrap(), None);
    }
}
