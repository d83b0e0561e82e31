//! The store contract, written once over `&dyn Store` and run against every
//! backend: preconditions, atomicity, fencing (stale epoch, expiry,
//! release), attribution, the commit order (also under concurrent
//! committers: every change and event seen once, per object in commit
//! order), the change stream of every object write, cursor resume, limits,
//! listing, isolation, lost updates and the change feed's wake-ups.
//!
//! Each backend supplies a [`Leases`] fixture (see [`super::fixtures`]):
//! the lease operations the suite needs (grant, take over, expire, release,
//! count writes), done the way that backend's authority does them. Ordering comes from awaiting
//! results and watch channels; the only timeouts bound a failure.

use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::fence::{Fence, FenceCause};
use crate::limits::{
    DEFAULT_PAGE_SIZE, MAX_EVENT_MESSAGE_BYTES, MAX_EVENT_REASON_BYTES, MAX_EVENTS_PER_COMMIT,
    MAX_OPS_PER_COMMIT, MAX_PAGE_SIZE, MAX_SELECTOR_CONTAINS_BYTES, MAX_SELECTOR_CONTAINS_DEPTH,
    MAX_SELECTOR_LABELS, MAX_VALUE_BYTES,
};

use super::{
    ApiWrite, Change, ChangeKind, Event, Metadata, NewEvent, ObjectKey, Op, Origin, Relations,
    Selector, Store, StoreError, Written,
};

/// Upper bound on any wait in the suite: a failure bound, never a way to
/// order anything.
pub(super) const WAIT: Duration = Duration::from_secs(30);

/// Lease operations the suite needs, as each backend's authority does them.
#[async_trait]
pub(super) trait Leases: Send + Sync {
    /// Grant a lease that was never granted (epoch 1).
    async fn grant(&self, cluster: &str, lease: &str, holder: &str) -> Fence;
    /// Another holder is granted the lease at the next epoch.
    async fn take_over(&self, fence: &Fence, holder: &str) -> Fence;
    /// The grant expires by the backend's clock; nobody takes over.
    async fn expire(&self, fence: &Fence);
    /// The holder releases the lease.
    async fn release(&self, fence: &Fence);
    /// Fenced commits counted against the fence's tenure.
    async fn writes(&self, fence: &Fence) -> u64;
}

/// A store, its lease fixture, and whatever must live as long as they do.
pub(super) struct Backend {
    pub store: Arc<dyn Store>,
    pub leases: Arc<dyn Leases>,
    pub _keep: Box<dyn Any + Send + Sync>,
}

/// Instantiate every case of the suite for one backend: `$make` is an async
/// fn returning a [`Backend`].
macro_rules! conformance_suite {
    ($make:path) => {
        $crate::store::conformance::conformance_suite!(@cases $make;
            preconditions_are_checked,
            versions_grow_and_are_never_reused,
            api_writes_are_versioned_and_logged,
            failing_op_leaves_no_partial_write_and_no_event,
            stale_epoch_is_rejected,
            expired_lease_is_rejected_even_if_nobody_took_over,
            released_lease_is_rejected,
            guest_writes_are_attributed_and_counted,
            events_follow_commit_order,
            concurrent_commits_are_seen_once_in_order,
            every_object_write_is_in_the_change_stream,
            change_pages_resume_without_loss_by_kind,
            cursor_resume_loses_and_repeats_nothing,
            size_limits_are_enforced,
            invalid_requests_are_rejected,
            lists_page_in_name_order,
            page_sizes_are_capped,
            clusters_are_isolated,
            conditional_updates_lose_no_update,
            racing_creates_have_exactly_one_winner,
            racing_unconditional_puts_all_succeed,
            watch_wakes_on_commit,
            values_are_stored_normalized,
            counts_stop_at_their_limit,
            metadata_is_stored_beside_the_value,
            finalizers_hold_a_delete_until_the_last_is_removed,
            deleting_an_owner_collects_what_it_owns,
            an_owner_of_more_than_one_commit_may_collect_stays_until_fewer,
            owners_must_exist_and_not_be_deleting,
            status_writes_keep_the_generation_and_skip_spec_conflicts,
            checks_gate_a_commit_without_writing,
            selectors_match_labels,
            selectors_match_contained_json,
            selectors_combine_and_page_in_name_order,
            invalid_selectors_are_refused,
            trimming_goes_in_batches_and_keeps_the_recent,
            readers_behind_the_floor_are_told_too_old,
            changes_carry_owner_and_labels,
            commits_hand_back_what_they_wrote,
            the_conformance_table_holds,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let backend = $make().await;
                $crate::store::conformance::$case(&backend).await;
            }
        )*
    };
}
pub(crate) use conformance_suite;

/// The runner of the conformance table every store and fake runs
/// (`tests/conformance/store/`).
#[path = "conformance_table.rs"]
mod table;

/// Every case of the conformance table holds on this backend.
pub(super) async fn the_conformance_table_holds(b: &Backend) {
    table::run_all(b).await;
}

// ---------------------------------------------------------------- helpers

const CLUSTER: &str = "c1";

pub(super) fn key(kind: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind: kind.into(),
        name: name.into(),
    }
}

pub(super) fn create(k: &ObjectKey, value: &str) -> Op {
    Op::Create {
        key: k.clone(),
        value: value.into(),
    }
}

pub(super) fn update(k: &ObjectKey, expected_version: u64, value: &str) -> Op {
    Op::Update {
        key: k.clone(),
        expected_version,
        value: value.into(),
    }
}

pub(super) fn delete(k: &ObjectKey, expected_version: u64) -> Op {
    Op::Delete {
        key: k.clone(),
        expected_version,
    }
}

pub(super) fn event(k: &ObjectKey, reason: &str) -> NewEvent {
    NewEvent {
        key: k.clone(),
        reason: reason.into(),
        message: format!("{reason} {k}"),
    }
}

/// Every event of `cluster`, read page by page.
pub(super) async fn all_events(store: &dyn Store, cluster: &str) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    loop {
        let after = out.last().map_or(0, |e| e.seq);
        let page = store.events(cluster, after, MAX_PAGE_SIZE).await.unwrap();
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

async fn version(store: &dyn Store, k: &ObjectKey) -> Option<u64> {
    store.get(CLUSTER, k).await.unwrap().map(|o| o.version)
}

fn assert_conflict(result: Result<impl std::fmt::Debug, StoreError>, on: &ObjectKey) {
    match result {
        Err(StoreError::Conflict { key, .. }) if &key == on => {}
        other => panic!("expected a conflict on {on}, got {other:?}"),
    }
}

fn assert_not_found(result: Result<impl std::fmt::Debug, StoreError>, on: &ObjectKey) {
    match result {
        Err(StoreError::NotFound { key }) if &key == on => {}
        other => panic!("expected {on} not found, got {other:?}"),
    }
}

fn assert_fenced(result: Result<impl std::fmt::Debug, StoreError>, stale: &Fence) {
    match result {
        Err(StoreError::Fenced { fence, .. }) if &fence == stale => {}
        other => panic!("expected {stale} to be fenced, got {other:?}"),
    }
}

fn assert_too_large(result: Result<impl std::fmt::Debug, StoreError>) {
    assert!(
        matches!(result, Err(StoreError::TooLarge(_))),
        "expected too large, got {result:?}"
    );
}

fn assert_invalid(result: Result<impl std::fmt::Debug, StoreError>) {
    assert!(
        matches!(result, Err(StoreError::Invalid(_))),
        "expected invalid, got {result:?}"
    );
}

/// Seqs strictly increase (gaps allowed), and each event's seq is above its
/// commit's revision (a commit's first number).
fn assert_in_order(events: &[Event]) {
    for (i, pair) in events.windows(2).enumerate() {
        assert!(
            pair[1].seq > pair[0].seq,
            "out of order after event {i}: {pair:?}"
        );
    }
    for e in events {
        assert!(e.seq > e.revision, "event before its revision: {e:?}");
    }
}

/// The whole change stream of `cluster`, of every kind, read in small pages.
pub(super) async fn all_changes(store: &dyn Store, cluster: &str) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    let mut after = 0;
    loop {
        let page = store.changes(cluster, &[], after, 3).await.unwrap();
        assert!(
            page.through >= after,
            "a page went back: {after} -> {page:?}"
        );
        if page.changes.is_empty() {
            return out;
        }
        for c in &page.changes {
            assert!(
                c.position > after && c.position <= page.through,
                "{c:?} outside ({after}, {}]",
                page.through
            );
        }
        after = page.through;
        out.extend(page.changes);
    }
}

// ---------------------------------------------------------------- cases

pub(super) async fn preconditions_are_checked(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let a = key("tasks", "a");
    let c = store
        .commit_fenced(&fence, &[create(&a, "1")], &[])
        .await
        .unwrap();
    assert_eq!(version(store, &a).await, Some(c.revision));

    assert_conflict(
        store.commit_fenced(&fence, &[create(&a, "2")], &[]).await,
        &a,
    );
    assert_conflict(
        store
            .commit_fenced(&fence, &[update(&a, c.revision + 1, "2")], &[])
            .await,
        &a,
    );
    assert_conflict(
        store
            .commit_fenced(&fence, &[delete(&a, c.revision + 1)], &[])
            .await,
        &a,
    );
    let missing = key("tasks", "missing");
    assert_not_found(
        store
            .commit_fenced(&fence, &[update(&missing, 1, "2")], &[])
            .await,
        &missing,
    );
    assert_not_found(
        store
            .commit_fenced(&fence, &[delete(&missing, 1)], &[])
            .await,
        &missing,
    );
    // Nothing above wrote.
    let object = store.get(CLUSTER, &a).await.unwrap().unwrap();
    assert_eq!((object.version, object.value.as_str()), (c.revision, "1"));

    let u = store
        .commit_fenced(&fence, &[update(&a, c.revision, "2")], &[])
        .await
        .unwrap();
    assert!(u.revision > c.revision);
    let object = store.get(CLUSTER, &a).await.unwrap().unwrap();
    assert_eq!((object.version, object.value.as_str()), (u.revision, "2"));

    store
        .commit_fenced(&fence, &[delete(&a, u.revision)], &[])
        .await
        .unwrap();
    assert_eq!(store.get(CLUSTER, &a).await.unwrap(), None);
    assert_not_found(
        store
            .commit_fenced(&fence, &[delete(&a, u.revision)], &[])
            .await,
        &a,
    );
}

pub(super) async fn versions_grow_and_are_never_reused(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let a = key("tasks", "a");
    let other = key("tasks", "other");
    let mut seen = BTreeSet::new();
    let first = store
        .commit_fenced(&fence, &[create(&a, "1")], &[])
        .await
        .unwrap();
    seen.insert(first.revision);
    // A commit that does not touch `a` still takes a revision.
    let unrelated = store.put(CLUSTER, &other, "0", None).await.unwrap();
    assert!(unrelated.version > first.revision);
    store
        .delete(CLUSTER, &a, Some(first.revision))
        .await
        .unwrap();
    // Re-created: a version it never had, above every earlier revision.
    let again = store
        .commit_fenced(&fence, &[create(&a, "1")], &[])
        .await
        .unwrap();
    assert!(again.revision > unrelated.version);
    assert!(seen.insert(again.revision));
    let put = store
        .put(CLUSTER, &a, "3", Some(again.revision))
        .await
        .unwrap();
    assert!(put.version > again.revision);
    // An older version no longer matches, even though it once did.
    assert_conflict(store.put(CLUSTER, &a, "4", Some(first.revision)).await, &a);
}

pub(super) async fn api_writes_are_versioned_and_logged(b: &Backend) {
    let store = &*b.store;
    let a = key("nodes", "n1");
    let created = store
        .put(CLUSTER, &a, "{\"capacity\": 2}", None)
        .await
        .unwrap();
    assert_eq!(created.value, "{\"capacity\":2}");
    assert_eq!(store.get(CLUSTER, &a).await.unwrap(), Some(created.clone()));
    let replaced = store
        .put(CLUSTER, &a, "{\"capacity\":3}", None)
        .await
        .unwrap();
    assert!(replaced.version > created.version);
    assert_conflict(store.put(CLUSTER, &a, "1", Some(0)).await, &a);
    assert_conflict(store.put(CLUSTER, &a, "1", Some(created.version)).await, &a);
    let b2 = key("nodes", "n2");
    assert_not_found(store.put(CLUSTER, &b2, "1", Some(5)).await, &b2);
    let b2_created = store.put(CLUSTER, &b2, "1", Some(0)).await.unwrap();
    let conditional = store
        .put(CLUSTER, &a, "4", Some(replaced.version))
        .await
        .unwrap();
    assert_conflict(store.delete(CLUSTER, &a, Some(replaced.version)).await, &a);
    store
        .delete(CLUSTER, &a, Some(conditional.version))
        .await
        .unwrap();
    assert_not_found(store.delete(CLUSTER, &a, None).await, &a);
    store.delete(CLUSTER, &b2, None).await.unwrap();
    assert_eq!(store.get(CLUSTER, &b2).await.unwrap(), None);

    let events = all_events(store, CLUSTER).await;
    let summary: Vec<(&str, &str, u64)> = events
        .iter()
        .map(|e| (e.name.as_str(), e.reason.as_str(), e.revision))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("n1", "Created", created.version),
            ("n1", "Updated", replaced.version),
            ("n2", "Created", b2_created.version),
            ("n1", "Updated", conditional.version),
            ("n1", "Deleted", events[4].revision),
            ("n2", "Deleted", events[5].revision),
        ]
    );
    assert!(conditional.version < events[4].revision && events[4].revision < events[5].revision);
    assert!(
        events
            .iter()
            .all(|e| e.origin == Origin::Api { token: None } && e.kind == "nodes")
    );
    assert!(
        events[1]
            .message
            .contains(&format!("version {}", created.version))
    );
    assert_in_order(&events);
}

pub(super) async fn failing_op_leaves_no_partial_write_and_no_event(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let (x, y, z) = (key("tasks", "x"), key("tasks", "y"), key("tasks", "z"));
    let base = store
        .commit_fenced(
            &fence,
            &[create(&x, "1"), create(&y, "1")],
            &[event(&x, "Made")],
        )
        .await
        .unwrap();
    let before = all_events(store, CLUSTER).await;

    // Create z, update x, then a stale update of y: all or nothing.
    let failing = [
        create(&z, "1"),
        update(&x, base.revision, "2"),
        update(&y, base.revision + 7, "2"),
    ];
    assert_conflict(
        store
            .commit_fenced(&fence, &failing, &[event(&z, "Made")])
            .await,
        &y,
    );
    assert_not_found(
        store
            .commit_fenced(
                &fence,
                &[create(&z, "1"), delete(&key("tasks", "nope"), 1)],
                &[event(&z, "Made")],
            )
            .await,
        &key("tasks", "nope"),
    );
    assert_eq!(store.get(CLUSTER, &z).await.unwrap(), None);
    assert_eq!(version(store, &x).await, Some(base.revision));
    assert_eq!(store.get(CLUSTER, &x).await.unwrap().unwrap().value, "1");
    assert_eq!(all_events(store, CLUSTER).await, before);

    // The log continues after the failures, with nothing of theirs.
    let next = store
        .commit_fenced(&fence, &[create(&z, "1")], &[event(&z, "Made")])
        .await
        .unwrap();
    assert!(next.event_seqs[0] > before.last().unwrap().seq);
    let after = all_events(store, CLUSTER).await;
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(after.len(), before.len() + 1);
    assert_in_order(&after);
}

pub(super) async fn stale_epoch_is_rejected(b: &Backend) {
    let store = &*b.store;
    let old = b.leases.grant(CLUSTER, "ctl", "host-a").await;
    let t = key("tasks", "t");
    let made = store
        .commit_fenced(&old, &[create(&t, "1")], &[])
        .await
        .unwrap();
    let new = b.leases.take_over(&old, "host-b").await;
    assert_eq!(new.epoch.0, old.epoch.0 + 1);
    let before = all_events(store, CLUSTER).await;

    assert_fenced(
        store
            .commit_fenced(
                &old,
                &[update(&t, made.revision, "2")],
                &[event(&t, "Stale")],
            )
            .await,
        &old,
    );
    // The right epoch with the wrong holder is no fence either.
    let mut impostor = new.clone();
    impostor.holder = "host-a".into();
    assert_fenced(
        store
            .commit_fenced(&impostor, &[update(&t, made.revision, "2")], &[])
            .await,
        &impostor,
    );
    let mut never = old.clone();
    never.key.name = "never-granted".into();
    assert_fenced(
        store.commit_fenced(&never, &[create(&t, "9")], &[]).await,
        &never,
    );

    assert_eq!(store.get(CLUSTER, &t).await.unwrap().unwrap().value, "1");
    assert_eq!(all_events(store, CLUSTER).await, before);
    store
        .commit_fenced(&new, &[update(&t, made.revision, "2")], &[])
        .await
        .unwrap();
}

pub(super) async fn expired_lease_is_rejected_even_if_nobody_took_over(b: &Backend) {
    let store = &*b.store;
    let fence = b.leases.grant(CLUSTER, "ctl", "host-a").await;
    let t = key("tasks", "t");
    store
        .commit_fenced(&fence, &[create(&t, "1")], &[])
        .await
        .unwrap();
    b.leases.expire(&fence).await;
    match store
        .commit_fenced(
            &fence,
            &[create(&key("tasks", "u"), "1")],
            &[event(&t, "Late")],
        )
        .await
    {
        Err(StoreError::Fenced {
            fence: f,
            cause,
            reason,
        }) => {
            assert_eq!(f, fence);
            assert_eq!(cause, FenceCause::Expired);
            assert!(reason.contains("expired"), "{reason}");
        }
        other => panic!("an expired lease wrote: {other:?}"),
    }
    assert_eq!(store.get(CLUSTER, &key("tasks", "u")).await.unwrap(), None);
    assert!(all_events(store, CLUSTER).await.is_empty());
}

pub(super) async fn released_lease_is_rejected(b: &Backend) {
    let store = &*b.store;
    let fence = b.leases.grant(CLUSTER, "ctl", "host-a").await;
    b.leases.release(&fence).await;
    assert_fenced(
        store
            .commit_fenced(&fence, &[create(&key("tasks", "t"), "1")], &[])
            .await,
        &fence,
    );
    assert_eq!(store.get(CLUSTER, &key("tasks", "t")).await.unwrap(), None);
}

pub(super) async fn guest_writes_are_attributed_and_counted(b: &Backend) {
    let store = &*b.store;
    let fence = b.leases.grant(CLUSTER, "ctl", "host-a").await;
    let t = key("tasks", "t");
    let c1 = store
        .commit_fenced(&fence, &[create(&t, "1")], &[event(&t, "Created")])
        .await
        .unwrap();
    store
        .commit_fenced(
            &fence,
            &[update(&t, c1.revision, "2")],
            &[event(&t, "Bumped")],
        )
        .await
        .unwrap();
    // Neither a failed commit nor an API write counts against the tenure.
    assert_conflict(
        store.commit_fenced(&fence, &[create(&t, "3")], &[]).await,
        &t,
    );
    store
        .put(CLUSTER, &key("nodes", "n"), "1", None)
        .await
        .unwrap();
    assert_eq!(b.leases.writes(&fence).await, 2);

    let events = all_events(store, CLUSTER).await;
    let guest = Origin::Guest {
        lease: "ctl".into(),
        epoch: fence.epoch,
        holder: "host-a".into(),
    };
    assert_eq!(events[0].origin, guest);
    assert_eq!(events[1].origin, guest);
    assert_eq!(events[2].origin, Origin::Api { token: None });
    assert_eq!(
        (events[0].kind.as_str(), events[0].name.as_str()),
        ("tasks", "t")
    );
    assert_eq!(events[1].message, "Bumped tasks/t");
}

pub(super) async fn events_follow_commit_order(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let mut expected = Vec::new();
    for i in 0..10u64 {
        let k = key("tasks", &format!("t{i}"));
        let events: Vec<NewEvent> = (0..i % 3).map(|_| event(&k, "Step")).collect();
        let c = store
            .commit_fenced(&fence, &[create(&k, "1")], &events)
            .await
            .unwrap();
        assert_eq!(c.event_seqs.len(), events.len());
        expected.extend(c.event_seqs.iter().map(|&s| (s, c.revision)));
    }
    // A commit of events only.
    let only = key("tasks", "t0");
    let c = store
        .commit_fenced(&fence, &[], &[event(&only, "Noted"), event(&only, "Noted")])
        .await
        .unwrap();
    expected.extend(c.event_seqs.iter().map(|&s| (s, c.revision)));
    let events = all_events(store, CLUSTER).await;
    assert_in_order(&events);
    let seen: Vec<(u64, u64)> = events.iter().map(|e| (e.seq, e.revision)).collect();
    assert_eq!(seen, expected);
}

pub(super) async fn concurrent_commits_are_seen_once_in_order(b: &Backend) {
    const WRITERS: usize = 4;
    const COMMITS: usize = 25;
    const PER_COMMIT: usize = 2;
    let total_events = WRITERS * COMMITS * PER_COMMIT;
    let total_changes = WRITERS * COMMITS;
    let fence = b.leases.grant(CLUSTER, "ctl", "host-a").await;
    let mut feed = b.store.watch(CLUSTER);

    // The reader follows the feed while the writers commit, each stream
    // from its own cursor, and checks every page continues strictly after
    // where the last one ended.
    let store = Arc::clone(&b.store);
    let reader = tokio::spawn(async move {
        let (mut events, mut changes): (Vec<Event>, Vec<Change>) = (Vec::new(), Vec::new());
        let (mut event_cursor, mut change_cursor) = (0, 0);
        while events.len() < total_events || changes.len() < total_changes {
            feed.borrow_and_update();
            loop {
                let page = store
                    .events(CLUSTER, event_cursor, MAX_PAGE_SIZE)
                    .await
                    .unwrap();
                let Some(last) = page.last() else { break };
                let mut previous = event_cursor;
                for e in &page {
                    assert!(
                        e.seq > previous,
                        "events out of order or repeated: {e:?} after {previous}"
                    );
                    previous = e.seq;
                }
                event_cursor = last.seq;
                events.extend(page);
            }
            loop {
                let page = store
                    .changes(CLUSTER, &[], change_cursor, MAX_PAGE_SIZE)
                    .await
                    .unwrap();
                let mut previous = change_cursor;
                for c in &page.changes {
                    assert!(
                        c.position > previous,
                        "changes out of order or repeated: {c:?} after {previous}"
                    );
                    previous = c.position;
                }
                change_cursor = page.through;
                if page.changes.is_empty() {
                    break;
                }
                changes.extend(page.changes);
            }
            if events.len() < total_events || changes.len() < total_changes {
                tokio::time::timeout(WAIT, feed.changed())
                    .await
                    .expect("the feed woke the reader")
                    .expect("the store is alive");
            }
        }
        (events, changes)
    });
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, fence) = (Arc::clone(&b.store), fence.clone());
            tokio::spawn(async move {
                let k = key("tasks", &format!("w{w}"));
                let mut commits = Vec::new();
                let mut version = None;
                for _ in 0..COMMITS {
                    let op = match version {
                        None => create(&k, "0"),
                        Some(v) => update(&k, v, "1"),
                    };
                    let events: Vec<_> = (0..PER_COMMIT).map(|_| event(&k, "Step")).collect();
                    let c = store.commit_fenced(&fence, &[op], &events).await.unwrap();
                    version = Some(c.revision);
                    commits.push((k.clone(), c));
                }
                commits
            })
        })
        .collect();
    let mut commits = Vec::new();
    for writer in writers {
        commits.extend(writer.await.unwrap());
    }
    let (events, changes) = tokio::time::timeout(WAIT, reader)
        .await
        .expect("reader finished")
        .unwrap();
    // Exactly once: as many as committed, none twice, each the one told.
    assert_eq!(events.len(), total_events);
    assert_eq!(changes.len(), total_changes);
    let by_seq: HashMap<u64, &Event> = events.iter().map(|e| (e.seq, e)).collect();
    assert_eq!(by_seq.len(), total_events, "an event was seen twice");
    let mut revisions = BTreeSet::new();
    for (k, c) in &commits {
        assert!(
            revisions.insert(c.revision),
            "revision {} reused",
            c.revision
        );
        assert_eq!(c.event_seqs.len(), PER_COMMIT);
        assert!(c.event_seqs[0] < c.event_seqs[1]);
        for s in &c.event_seqs {
            assert_eq!(by_seq[s].revision, c.revision);
            assert_eq!(by_seq[s].name, k.name);
        }
        let told: Vec<&Change> = changes
            .iter()
            .filter(|ch| ch.revision == c.revision)
            .collect();
        assert_eq!(
            told.len(),
            1,
            "changes of revision {}: {told:?}",
            c.revision
        );
        assert_eq!((&told[0].name, told[0].version), (&k.name, c.revision));
    }
    // Per object, the order read is the commit order: versions increase,
    // a create first.
    for w in 0..WRITERS {
        let name = format!("w{w}");
        let mine: Vec<&Change> = changes.iter().filter(|c| c.name == name).collect();
        assert_eq!(mine[0].change, ChangeKind::Created);
        assert!(mine[1..].iter().all(|c| c.change == ChangeKind::Updated));
        assert!(
            mine.windows(2).all(|p| p[0].version < p[1].version),
            "{mine:?}"
        );
        let theirs: Vec<u64> = commits
            .iter()
            .filter(|(k, _)| k.name == name)
            .map(|(_, c)| c.revision)
            .collect();
        assert_eq!(mine.iter().map(|c| c.version).collect::<Vec<_>>(), theirs);
    }
}

pub(super) async fn every_object_write_is_in_the_change_stream(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let guest = Origin::Guest {
        lease: "ctl".into(),
        epoch: fence.epoch,
        holder: "host-a".into(),
    };
    let (t, n) = (key("tasks", "t"), key("nodes", "n"));
    let mut feed = store.watch(CLUSTER);
    feed.borrow_and_update();
    // A guest commit without any event is a change, and wakes watchers.
    let made = store
        .commit_fenced(&fence, &[create(&t, "1")], &[])
        .await
        .unwrap();
    tokio::time::timeout(WAIT, feed.wait_for(|&p| p > made.revision))
        .await
        .expect("a commit without events woke the watcher")
        .unwrap();
    let placed = store.put(CLUSTER, &n, "{}", None).await.unwrap();
    let replaced = store.put(CLUSTER, &n, "{\"a\":1}", None).await.unwrap();
    let both = store
        .commit_fenced(
            &fence,
            &[update(&t, made.revision, "2"), delete(&n, replaced.version)],
            &[event(&t, "Moved")],
        )
        .await
        .unwrap();
    store
        .delete(CLUSTER, &t, Some(both.revision))
        .await
        .unwrap();
    let again = store.put(CLUSTER, &t, "3", Some(0)).await.unwrap();
    // A failed commit is no change.
    assert_conflict(store.put(CLUSTER, &t, "4", Some(made.revision)).await, &t);

    let changes = all_changes(store, CLUSTER).await;
    let seen: Vec<(&str, &str, ChangeKind, u64, &Origin)> = changes
        .iter()
        .map(|c| {
            (
                c.kind.as_str(),
                c.name.as_str(),
                c.change,
                c.version,
                &c.origin,
            )
        })
        .collect();
    use ChangeKind::{Created, Deleted, Updated};
    assert_eq!(
        seen,
        vec![
            ("tasks", "t", Created, made.revision, &guest),
            (
                "nodes",
                "n",
                Created,
                placed.version,
                &Origin::Api { token: None }
            ),
            (
                "nodes",
                "n",
                Updated,
                replaced.version,
                &Origin::Api { token: None }
            ),
            ("tasks", "t", Updated, both.revision, &guest),
            ("nodes", "n", Deleted, replaced.version, &guest),
            (
                "tasks",
                "t",
                Deleted,
                both.revision,
                &Origin::Api { token: None }
            ),
            (
                "tasks",
                "t",
                Created,
                again.version,
                &Origin::Api { token: None }
            ),
        ]
    );
    // Each change carries its commit's revision, and comes after it.
    assert_eq!(changes[3].revision, both.revision);
    assert_eq!(changes[4].revision, both.revision);
    assert!(changes.iter().all(|c| c.position > c.revision));
    assert!(changes.windows(2).all(|p| p[0].position < p[1].position));
    // Versions of `t` strictly increase across delete and re-create.
    assert!(made.revision < both.revision && both.revision < again.version);
    // Events stay what they were: the API's own and the guest's.
    let reasons: Vec<String> = all_events(store, CLUSTER)
        .await
        .into_iter()
        .map(|e| e.reason)
        .collect();
    assert_eq!(
        reasons,
        ["Created", "Updated", "Moved", "Deleted", "Created"]
    );
    // Nothing is after the last change, and bad input is refused.
    let last = changes.last().unwrap().position;
    let rest = store.changes(CLUSTER, &[], last, 10).await.unwrap();
    assert!(rest.changes.is_empty() && rest.through >= last);
    assert_invalid(store.changes(CLUSTER, &["Not_A_Kind".into()], 0, 10).await);
    assert_invalid(store.changes("Bad_Cluster", &[], 0, 10).await);
    // A cursor beyond the last position handed out was never issued: told
    // so (re-list), never answered with an empty page it would wait on.
    assert_not_issued(store.changes(CLUSTER, &[], u64::MAX, 10).await, last);
    assert_not_issued(
        store.changes(CLUSTER, &[], last + 1_000_000, 10).await,
        last,
    );
}

/// `result` is [`StoreError::TooOld`] for a cursor the store never issued,
/// resuming after a position from `last` (final, the last one committed)
/// up to below the cursor.
fn assert_not_issued<T: std::fmt::Debug>(result: Result<T, StoreError>, last: u64) {
    match result {
        Err(StoreError::TooOld {
            cause: crate::store::TooOldCause::NotIssued,
            oldest_kept,
            after,
            ..
        }) => {
            let resume = oldest_kept - 1;
            assert!(
                last <= resume && resume < after,
                "resume after {resume}: not between {last} and the cursor {after}"
            );
        }
        other => panic!("expected TooOld (not issued), got {other:?}"),
    }
}

pub(super) async fn change_pages_resume_without_loss_by_kind(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    for i in 0..7 {
        let (t, n) = (
            key("tasks", &format!("t{i}")),
            key("nodes", &format!("n{i}")),
        );
        store
            .commit_fenced(&fence, &[create(&t, "1")], &[])
            .await
            .unwrap();
        if i % 2 == 0 {
            store.put(CLUSTER, &n, "1", None).await.unwrap();
        }
    }
    let everything = all_changes(store, CLUSTER).await;
    assert_eq!(everything.len(), 7 + 4);
    // Only `nodes`, two at a time: resuming after each page's `through`.
    let kinds = vec!["nodes".to_string()];
    let mut after = 0;
    let mut nodes = Vec::new();
    loop {
        let page = store.changes(CLUSTER, &kinds, after, 2).await.unwrap();
        assert!(page.through >= after);
        assert!(
            page.changes
                .iter()
                .all(|c| c.kind == "nodes" && c.position > after && c.position <= page.through)
        );
        after = page.through;
        if page.changes.is_empty() {
            break;
        }
        nodes.extend(page.changes);
    }
    let want: Vec<Change> = everything
        .iter()
        .filter(|c| c.kind == "nodes")
        .cloned()
        .collect();
    assert_eq!(nodes, want);
    // A kind with no change: one read reaches the end of the stream, so a
    // watcher of it never rescans what it read once.
    let none = store
        .changes(CLUSTER, &["buckets".to_string()], 0, 2)
        .await
        .unwrap();
    assert!(none.changes.is_empty());
    assert!(none.through >= everything.last().unwrap().position);
}

pub(super) async fn cursor_resume_loses_and_repeats_nothing(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let k = key("tasks", "t");
    let emit = |n: usize| (0..n).map(|_| event(&k, "Tick")).collect::<Vec<_>>();
    store
        .commit_fenced(&fence, &[create(&k, "1")], &emit(3))
        .await
        .unwrap();
    store.commit_fenced(&fence, &[], &emit(2)).await.unwrap();

    let first = store.events(CLUSTER, 0, 3).await.unwrap();
    let everything_so_far = all_events(store, CLUSTER).await;
    assert_eq!(first[..], everything_so_far[..3]);
    let cursor = first.last().unwrap().seq;
    // More commits land while the reader is away.
    store.commit_fenced(&fence, &[], &emit(4)).await.unwrap();
    let mut resumed = Vec::new();
    let mut after = cursor;
    loop {
        let page = store.events(CLUSTER, after, 2).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.seq;
        resumed.extend(page);
    }
    assert_eq!(resumed.len(), 6);
    let mut joined = first;
    joined.extend(resumed);
    let all = all_events(store, CLUSTER).await;
    assert_eq!(joined, all);
    assert_in_order(&all);
    let last = all.last().unwrap().seq;
    assert!(store.events(CLUSTER, last, 10).await.unwrap().is_empty());
    assert_not_issued(store.events(CLUSTER, u64::MAX, 10).await, last);
    assert_not_issued(store.events(CLUSTER, last + 1_000_000, 10).await, last);
}

pub(super) async fn size_limits_are_enforced(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let k = key("blobs", "big");
    let at_limit = format!("\"{}\"", "x".repeat(MAX_VALUE_BYTES - 2));
    let over = format!("\"{}\"", "x".repeat(MAX_VALUE_BYTES - 1));
    assert_too_large(store.put(CLUSTER, &k, &over, None).await);
    assert_too_large(store.commit_fenced(&fence, &[create(&k, &over)], &[]).await);
    assert_eq!(store.get(CLUSTER, &k).await.unwrap(), None);
    let stored = store.put(CLUSTER, &k, &at_limit, None).await.unwrap();
    assert_eq!(
        store.get(CLUSTER, &k).await.unwrap().unwrap().value.len(),
        MAX_VALUE_BYTES
    );
    assert_too_large(
        store
            .commit_fenced(&fence, &[update(&k, stored.version, &over)], &[])
            .await,
    );

    let many: Vec<Op> = (0..=MAX_OPS_PER_COMMIT)
        .map(|i| create(&key("tasks", &format!("t{i}")), "1"))
        .collect();
    assert_too_large(store.commit_fenced(&fence, &many, &[]).await);
    store
        .commit_fenced(&fence, &many[..MAX_OPS_PER_COMMIT], &[])
        .await
        .unwrap();
    let t = key("tasks", "t0");
    let events: Vec<NewEvent> = (0..=MAX_EVENTS_PER_COMMIT)
        .map(|_| event(&t, "E"))
        .collect();
    assert_too_large(store.commit_fenced(&fence, &[], &events).await);
    store
        .commit_fenced(&fence, &[], &events[..MAX_EVENTS_PER_COMMIT])
        .await
        .unwrap();

    let mut long = event(&t, "E");
    long.reason = format!("R{}", "r".repeat(MAX_EVENT_REASON_BYTES));
    assert_too_large(store.commit_fenced(&fence, &[], &[long]).await);
    let mut long = event(&t, "E");
    long.message = "m".repeat(MAX_EVENT_MESSAGE_BYTES + 1);
    assert_too_large(store.commit_fenced(&fence, &[], &[long.clone()]).await);
    long.message.pop();
    store.commit_fenced(&fence, &[], &[long]).await.unwrap();
    // Only the three accepted commits' events exist.
    let logged = all_events(store, CLUSTER).await;
    assert_eq!(logged.len(), 1 + MAX_EVENTS_PER_COMMIT + 1);
    assert_in_order(&logged);
}

pub(super) async fn invalid_requests_are_rejected(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let good = key("tasks", "t");
    for bad in [
        key("Tasks", "t"),
        key("tasks", "t_1"),
        key("", "t"),
        key("tasks", &"n".repeat(64)),
    ] {
        assert_invalid(store.put(CLUSTER, &bad, "1", None).await);
        assert_invalid(store.commit_fenced(&fence, &[create(&bad, "1")], &[]).await);
        assert_invalid(store.commit_fenced(&fence, &[], &[event(&bad, "E")]).await);
        assert_invalid(store.get(CLUSTER, &bad).await);
    }
    assert_invalid(store.put("Bad Cluster", &good, "1", None).await);
    assert_invalid(store.put(CLUSTER, &good, "{not json", None).await);
    assert_invalid(store.commit_fenced(&fence, &[create(&good, "")], &[]).await);
    assert_invalid(store.commit_fenced(&fence, &[], &[]).await);
    assert_invalid(
        store
            .commit_fenced(&fence, &[create(&good, "1"), delete(&good, 1)], &[])
            .await,
    );
    assert_invalid(
        store
            .commit_fenced(&fence, &[], &[event(&good, "lowercase")])
            .await,
    );
    let mut nul = event(&good, "E");
    nul.message = "a\0b".into();
    assert_invalid(store.commit_fenced(&fence, &[], &[nul]).await);
    assert_invalid(store.list(CLUSTER, "Tasks", None, 10).await);
    assert_invalid(store.list(CLUSTER, "tasks", Some("Not a name"), 10).await);
    assert_eq!(store.get(CLUSTER, &good).await.unwrap(), None);
    assert!(all_events(store, CLUSTER).await.is_empty());
}

pub(super) async fn lists_page_in_name_order(b: &Backend) {
    let store = &*b.store;
    // Names whose byte order differs from common locale orders ('-' sorts
    // before digits, digits before letters).
    let names = ["b", "a-b", "z-9", "a0", "9", "ab", "a", "0", "a-a"];
    for name in names {
        store
            .put(CLUSTER, &key("tasks", name), "1", None)
            .await
            .unwrap();
    }
    store
        .put(CLUSTER, &key("nodes", "a-b"), "1", None)
        .await
        .unwrap();
    store
        .put(CLUSTER, &key("tasksx", "a"), "1", None)
        .await
        .unwrap();
    let mut expected: Vec<&str> = names.to_vec();
    expected.sort();
    let mut listed = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .list(CLUSTER, "tasks", after.as_deref(), 4)
            .await
            .unwrap();
        assert!(page.objects.len() <= 4);
        assert!(page.objects.iter().all(|o| o.kind == "tasks"));
        listed.extend(page.objects.iter().map(|o| o.name.clone()));
        match page.next {
            Some(next) => {
                assert_eq!(Some(&next), listed.last());
                after = Some(next);
            }
            None => break,
        }
    }
    assert_eq!(listed, expected);
    let tail = store.list(CLUSTER, "tasks", Some("a0"), 100).await.unwrap();
    assert_eq!(
        tail.objects
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>(),
        vec!["ab", "b", "z-9"]
    );
    assert_eq!(tail.next, None);
    let empty = store.list(CLUSTER, "none", None, 10).await.unwrap();
    assert!(empty.objects.is_empty() && empty.next.is_none());
}

/// The write quotas' count: one kind of one cluster only, bounded by its
/// limit, exact below it.
pub(super) async fn counts_stop_at_their_limit(b: &Backend) {
    let store = &*b.store;
    for i in 0..7 {
        store
            .put(CLUSTER, &key("tasks", &format!("t{i}")), "1", None)
            .await
            .unwrap();
    }
    store
        .put(CLUSTER, &key("tasksx", "a"), "1", None)
        .await
        .unwrap();
    store
        .put(CLUSTER, &key("nodes", "a"), "1", None)
        .await
        .unwrap();
    assert_eq!(store.count(CLUSTER, "tasks", 100).await.unwrap(), 7);
    assert_eq!(store.count(CLUSTER, "tasks", 7).await.unwrap(), 7);
    assert_eq!(store.count(CLUSTER, "tasks", 3).await.unwrap(), 3);
    assert_eq!(store.count(CLUSTER, "none", 10).await.unwrap(), 0);
    assert_eq!(store.count("other", "tasks", 10).await.unwrap(), 0);
    store
        .delete(CLUSTER, &key("tasks", "t0"), None)
        .await
        .unwrap();
    assert_eq!(store.count(CLUSTER, "tasks", 100).await.unwrap(), 6);
    assert!(matches!(
        store.count(CLUSTER, "Bad_Kind", 10).await,
        Err(StoreError::Invalid(_))
    ));
}

pub(super) async fn page_sizes_are_capped(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let count = MAX_PAGE_SIZE + 3;
    let keys: Vec<ObjectKey> = (0..count)
        .map(|i| key("tasks", &format!("t{i:04}")))
        .collect();
    for chunk in keys.chunks(MAX_OPS_PER_COMMIT) {
        let ops: Vec<Op> = chunk.iter().map(|k| create(k, "1")).collect();
        let events: Vec<NewEvent> = chunk.iter().map(|k| event(k, "Made")).collect();
        store.commit_fenced(&fence, &ops, &events).await.unwrap();
    }
    let page = store
        .list(CLUSTER, "tasks", None, usize::MAX)
        .await
        .unwrap();
    assert_eq!(page.objects.len(), MAX_PAGE_SIZE);
    let rest = store
        .list(CLUSTER, "tasks", page.next.as_deref(), usize::MAX)
        .await
        .unwrap();
    assert_eq!(rest.objects.len(), 3);
    assert_eq!(rest.next, None);
    let default = store.list(CLUSTER, "tasks", None, 0).await.unwrap();
    assert_eq!(default.objects.len(), DEFAULT_PAGE_SIZE);
    assert_eq!(
        store.events(CLUSTER, 0, usize::MAX).await.unwrap().len(),
        MAX_PAGE_SIZE
    );
    assert_eq!(
        store.events(CLUSTER, 0, 0).await.unwrap().len(),
        DEFAULT_PAGE_SIZE
    );
}

pub(super) async fn clusters_are_isolated(b: &Backend) {
    let store = &*b.store;
    let one = b.leases.grant("one", "ctl", "host-a").await;
    let two = b.leases.grant("two", "ctl", "host-b").await;
    let t = key("tasks", "t");
    let c1 = store
        .commit_fenced(&one, &[create(&t, "1")], &[event(&t, "A")])
        .await
        .unwrap();
    let c2 = store
        .commit_fenced(&two, &[create(&t, "2")], &[event(&t, "B")])
        .await
        .unwrap();
    // The clusters share one series of numbers, and each log holds only
    // its own.
    assert!(c1.revision < c1.event_seqs[0] && c1.event_seqs[0] < c2.revision);
    assert!(c2.revision < c2.event_seqs[0]);
    assert_eq!(all_events(store, "two").await[0].seq, c2.event_seqs[0]);
    assert_eq!(all_changes(store, "one").await.len(), 1);
    assert_eq!(store.get("one", &t).await.unwrap().unwrap().value, "1");
    assert_eq!(store.get("two", &t).await.unwrap().unwrap().value, "2");
    // A fence of one cluster cannot write the other's lease-named state.
    let mut crossed = one.clone();
    crossed.key.cluster = "two".into();
    assert_fenced(
        store
            .commit_fenced(&crossed, &[update(&t, 1, "3")], &[])
            .await,
        &crossed,
    );
    assert_eq!(all_events(store, "one").await[0].reason, "A");
    assert_eq!(all_events(store, "two").await.len(), 1);
    assert!(all_events(store, "three").await.is_empty());
}

pub(super) async fn conditional_updates_lose_no_update(b: &Backend) {
    const WRITERS: usize = 6;
    const INCREMENTS: usize = 12;
    const COUNTERS: usize = 3;
    // Conflicts are expected; this only bounds a livelock.
    const ATTEMPTS: usize = 100 * WRITERS * INCREMENTS;
    let fence = b.leases.grant(CLUSTER, "ctl", "host-a").await;
    let counters: Vec<ObjectKey> = (0..COUNTERS)
        .map(|i| key("counters", &format!("c{i}")))
        .collect();
    for c in &counters {
        b.store.put(CLUSTER, c, "{\"n\":0}", Some(0)).await.unwrap();
    }
    let start = all_events(&*b.store, CLUSTER).await.len();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, fence, counters) = (Arc::clone(&b.store), fence.clone(), counters.clone());
            tokio::spawn(async move {
                // (revision, via the fenced path?) of every success.
                let mut successes = Vec::new();
                let mut attempts = 0;
                while successes.len() < INCREMENTS {
                    attempts += 1;
                    assert!(attempts < ATTEMPTS, "writer {w} made no progress");
                    let c = &counters[(w + successes.len()) % COUNTERS];
                    let current = store.get(CLUSTER, c).await.unwrap().unwrap();
                    let n: serde_json::Value = serde_json::from_str(&current.value).unwrap();
                    let next = format!("{{\"n\":{}}}", n["n"].as_u64().unwrap() + 1);
                    // Half the writers go through the fenced path, half
                    // through the API's If-Match.
                    let fenced = w % 2 == 0;
                    let result = if fenced {
                        store
                            .commit_fenced(
                                &fence,
                                &[update(c, current.version, &next)],
                                &[event(c, "Incremented")],
                            )
                            .await
                            .map(|done| done.revision)
                    } else {
                        store
                            .put(CLUSTER, c, &next, Some(current.version))
                            .await
                            .map(|o| o.version)
                    };
                    match result {
                        Ok(revision) => successes.push((revision, fenced)),
                        Err(StoreError::Conflict { .. }) => {}
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                }
                successes
            })
        })
        .collect();
    let mut successes = Vec::new();
    for task in tasks {
        successes.extend(task.await.unwrap());
    }
    let mut total = 0;
    for c in &counters {
        let value = b.store.get(CLUSTER, c).await.unwrap().unwrap().value;
        let n: serde_json::Value = serde_json::from_str(&value).unwrap();
        total += n["n"].as_u64().unwrap() as usize;
    }
    assert_eq!(total, WRITERS * INCREMENTS, "an update was lost");
    assert_eq!(successes.len(), total);
    let events = all_events(&*b.store, CLUSTER).await;
    assert_in_order(&events);
    let logged: HashMap<u64, &Event> = events[start..].iter().map(|e| (e.revision, e)).collect();
    assert_eq!(logged.len(), successes.len(), "one event per success");
    for (revision, fenced) in successes {
        let e = logged[&revision];
        let reason = if fenced { "Incremented" } else { "Updated" };
        assert_eq!(e.reason, reason, "event of revision {revision}");
    }
}

/// Start `n` tasks at once (a barrier releases them together) and collect
/// their results.
async fn race<T: Send + 'static, F>(n: usize, task: impl Fn(usize) -> F) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
{
    let start = Arc::new(tokio::sync::Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (start, run) = (Arc::clone(&start), task(i));
            tokio::spawn(async move {
                start.wait().await;
                run.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(n);
    for handle in handles {
        results.push(handle.await.unwrap());
    }
    results
}

pub(super) async fn racing_creates_have_exactly_one_winner(b: &Backend) {
    const RACERS: usize = 8;
    let fence = b.leases.grant(CLUSTER, "ctl", "host-a").await;
    let t = key("tasks", "t");
    let results = race(RACERS, |i| {
        let (store, fence, t) = (Arc::clone(&b.store), fence.clone(), t.clone());
        async move {
            let value = i.to_string();
            store
                .commit_fenced(&fence, &[create(&t, &value)], &[event(&t, "Made")])
                .await
                .map(|c| (c.revision, value))
        }
    })
    .await;
    let mut winners = Vec::new();
    for result in results {
        match result {
            Ok(won) => winners.push(won),
            Err(StoreError::Conflict { key, .. }) if key == t => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let object = b.store.get(CLUSTER, &t).await.unwrap().unwrap();
    assert_eq!((object.version, object.value), winners.remove(0));
    assert_eq!(all_events(&*b.store, CLUSTER).await.len(), 1);
}

pub(super) async fn racing_unconditional_puts_all_succeed(b: &Backend) {
    const RACERS: usize = 16;
    let t = key("tasks", "t");
    // "Whatever is there": none may fail because another created it first.
    let results = race(RACERS, |i| {
        let (store, t) = (Arc::clone(&b.store), t.clone());
        async move { store.put(CLUSTER, &t, &i.to_string(), None).await }
    })
    .await;
    let mut versions: Vec<u64> = results.into_iter().map(|r| r.unwrap().version).collect();
    versions.sort();
    versions.dedup();
    assert_eq!(versions.len(), RACERS, "every put is its own commit");
    let object = b.store.get(CLUSTER, &t).await.unwrap().unwrap();
    assert_eq!(object.version, *versions.last().unwrap());
    let events = all_events(&*b.store, CLUSTER).await;
    let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons[0], "Created");
    assert!(reasons[1..].iter().all(|r| *r == "Updated"), "{reasons:?}");
    assert_eq!(reasons.len(), RACERS);
}

pub(super) async fn watch_wakes_on_commit(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let mut feed = store.watch(CLUSTER);
    feed.borrow_and_update();
    let t = key("tasks", "t");
    let c = store
        .commit_fenced(
            &fence,
            &[create(&t, "1")],
            &[event(&t, "A"), event(&t, "B")],
        )
        .await
        .unwrap();
    tokio::time::timeout(WAIT, feed.wait_for(|&seq| seq >= c.event_seqs[1]))
        .await
        .expect("the watcher woke")
        .unwrap();
    let put = store.put(CLUSTER, &t, "2", None).await.unwrap();
    let seq = all_events(store, CLUSTER).await.last().unwrap().seq;
    assert_eq!(
        all_events(store, CLUSTER).await.last().unwrap().revision,
        put.version
    );
    tokio::time::timeout(WAIT, feed.wait_for(|&s| s >= seq))
        .await
        .expect("the watcher woke")
        .unwrap();
    // A second watcher starts from the current position.
    let mut late = store.watch(CLUSTER);
    tokio::time::timeout(WAIT, late.wait_for(|&s| s >= seq))
        .await
        .expect("the late watcher caught up")
        .unwrap();
}

pub(super) async fn values_are_stored_normalized(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let k = key("tasks", "t");
    let given =
        "{ \"status\" : \"pending\",\n  \"tries\": [1, 2.5e0, true, null], \"e\": \"\\u00e9\" }";
    let canonical = serde_json::from_str::<serde_json::Value>(given)
        .unwrap()
        .to_string();
    assert!(!canonical.contains(' '));
    let c = store
        .commit_fenced(&fence, &[create(&k, given)], &[])
        .await
        .unwrap();
    assert_eq!(
        store.get(CLUSTER, &k).await.unwrap().unwrap().value,
        canonical
    );
    let put = store
        .put(CLUSTER, &k, given, Some(c.revision))
        .await
        .unwrap();
    assert_eq!(put.value, canonical);
    let listed = store.list(CLUSTER, "tasks", None, 10).await.unwrap();
    assert_eq!(listed.objects[0].value, canonical);
}

// ------------------------------------------------- metadata, finalizers, status

fn meta(labels: &[(&str, &str)], owner: Option<&ObjectKey>, finalizers: &[&str]) -> Metadata {
    Metadata {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        owner: owner.cloned(),
        finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
    }
}

fn create_with(k: &ObjectKey, value: &str, meta: Metadata) -> Op {
    Op::CreateWith {
        key: k.clone(),
        value: value.into(),
        meta,
    }
}

fn replace_meta(k: &ObjectKey, expected_version: u64, meta: Metadata) -> Op {
    Op::Replace {
        key: k.clone(),
        expected_version,
        value: None,
        meta: Some(meta),
    }
}

/// The changes after `after`, as (name, change, version).
async fn changes_after(store: &dyn Store, after: u64) -> Vec<(String, ChangeKind, u64)> {
    all_changes(store, CLUSTER)
        .await
        .into_iter()
        .filter(|c| c.position > after)
        .map(|c| (c.name, c.change, c.version))
        .collect()
}

async fn mark(store: &dyn Store) -> u64 {
    all_changes(store, CLUSTER)
        .await
        .last()
        .map_or(0, |c| c.position)
}

pub(super) async fn metadata_is_stored_beside_the_value(b: &Backend) {
    let store = &*b.store;
    let a = key("tasks", "a");
    let labels = meta(
        &[("app", "web"), ("example.com/tier", "")],
        None,
        &["example.com/keep"],
    );
    let put = |value: &str, meta: Option<Metadata>| ApiWrite::Put {
        key: a.clone(),
        value: value.into(),
        meta,
        expected_version: None,
    };
    let Written::Created(made) = store
        .write(CLUSTER, &put("{\"n\": 1}", Some(labels.clone())))
        .await
        .unwrap()
    else {
        panic!("a put of an absent object creates it");
    };
    assert_eq!((made.meta.clone(), made.generation), (labels.clone(), 1));
    assert_eq!((made.status.clone(), made.deleting_since), (None, None));
    assert_eq!(store.get(CLUSTER, &a).await.unwrap(), Some(made.clone()));
    let listed = store.list(CLUSTER, "tasks", None, 10).await.unwrap();
    assert_eq!(listed.objects, vec![made.clone()]);

    // A bare value keeps the metadata (the 0.1.0 contract: a value write
    // never strips another party's finalizer).
    let kept = store.put(CLUSTER, &a, "{\"n\": 2}", None).await.unwrap();
    assert_eq!((kept.meta.clone(), kept.generation), (labels.clone(), 2));
    assert_eq!(store.get(CLUSTER, &a).await.unwrap(), Some(kept.clone()));
    // A guest's update keeps it too.
    let fence = b.leases.grant(CLUSTER, "ctl", "host-a").await;
    let c = store
        .commit_fenced(&fence, &[update(&a, kept.version, "{\"n\": 3}")], &[])
        .await
        .unwrap();
    let got = store.get(CLUSTER, &a).await.unwrap().unwrap();
    assert_eq!(
        (got.version, got.meta, got.generation),
        (c.revision, labels, 3)
    );

    // Metadata alone changes the generation; rewriting the same does not.
    let other = meta(&[("app", "api")], None, &[]);
    store
        .commit_fenced(&fence, &[replace_meta(&a, c.revision, other.clone())], &[])
        .await
        .unwrap();
    let got = store.get(CLUSTER, &a).await.unwrap().unwrap();
    assert_eq!((got.meta.clone(), got.generation), (other.clone(), 4));
    store
        .commit_fenced(&fence, &[replace_meta(&a, got.version, other)], &[])
        .await
        .unwrap();
    assert_eq!(store.get(CLUSTER, &a).await.unwrap().unwrap().generation, 4);

    // Bad metadata is refused whichever way it comes, and nothing is written.
    let before = store.get(CLUSTER, &a).await.unwrap();
    assert_invalid(
        store
            .write(
                CLUSTER,
                &put("1", Some(meta(&[("bad key", "x")], None, &[]))),
            )
            .await,
    );
    assert_invalid(
        store
            .commit_fenced(
                &fence,
                &[create_with(
                    &key("tasks", "b"),
                    "1",
                    meta(&[], None, &["x", "x"]),
                )],
                &[],
            )
            .await,
    );
    let many: Vec<String> = (0..=crate::limits::MAX_FINALIZERS)
        .map(|i| format!("f{i}"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_too_large(
        store
            .write(CLUSTER, &put("1", Some(meta(&[], None, &many))))
            .await,
    );
    assert_eq!(store.get(CLUSTER, &a).await.unwrap(), before);
    assert_eq!(store.get(CLUSTER, &key("tasks", "b")).await.unwrap(), None);
}

pub(super) async fn finalizers_hold_a_delete_until_the_last_is_removed(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let a = key("tasks", "a");
    let held = meta(&[], None, &["example.com/cleanup", "example.com/audit"]);
    let c = store
        .commit_fenced(&fence, &[create_with(&a, "{\"n\": 1}", held.clone())], &[])
        .await
        .unwrap();
    let since = mark(store).await;

    // A delete marks it: still readable with its last value, watchers woken.
    let d = store
        .commit_fenced(&fence, &[delete(&a, c.revision)], &[])
        .await
        .unwrap();
    let marked = store
        .get(CLUSTER, &a)
        .await
        .unwrap()
        .expect("a finalizer holds it");
    assert_eq!(marked.version, d.revision);
    assert_eq!(marked.value, "{\"n\":1}");
    assert_eq!(marked.generation, 2);
    assert!(marked.deleting_since.is_some(), "{marked:?}");
    assert_eq!(
        changes_after(store, since).await,
        vec![("a".to_string(), ChangeKind::Updated, d.revision)]
    );

    // Deleting again changes nothing; through the API it answers the mark.
    let since = mark(store).await;
    store
        .commit_fenced(&fence, &[delete(&a, d.revision)], &[])
        .await
        .unwrap();
    let again = store
        .write(
            CLUSTER,
            &ApiWrite::Delete {
                key: a.clone(),
                expected_version: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(again, Written::Marked(marked.clone()));
    assert_eq!(store.get(CLUSTER, &a).await.unwrap(), Some(marked.clone()));
    assert_eq!(changes_after(store, since).await, vec![]);

    // While marked: the value can change, finalizers cannot be added.
    let u = store
        .commit_fenced(&fence, &[update(&a, d.revision, "{\"n\": 2}")], &[])
        .await
        .unwrap();
    let got = store.get(CLUSTER, &a).await.unwrap().unwrap();
    assert_eq!(got.deleting_since, marked.deleting_since);
    let added = meta(
        &[],
        None,
        &["example.com/cleanup", "example.com/audit", "late"],
    );
    assert_invalid(
        store
            .commit_fenced(&fence, &[replace_meta(&a, u.revision, added)], &[])
            .await,
    );

    // Removing one finalizer keeps it; removing the last removes it.
    let one = meta(&[], None, &["example.com/audit"]);
    let r = store
        .commit_fenced(&fence, &[replace_meta(&a, u.revision, one)], &[])
        .await
        .unwrap();
    assert!(store.get(CLUSTER, &a).await.unwrap().is_some());
    let since = mark(store).await;
    let gone = store
        .write(
            CLUSTER,
            &ApiWrite::Put {
                key: a.clone(),
                value: "{\"n\": 2}".into(),
                meta: Some(Metadata::default()),
                expected_version: Some(r.revision),
            },
        )
        .await
        .unwrap();
    assert_eq!(gone, Written::Removed);
    assert_eq!(store.get(CLUSTER, &a).await.unwrap(), None);
    assert_eq!(
        changes_after(store, since).await,
        vec![("a".to_string(), ChangeKind::Deleted, r.revision)]
    );

    // Without finalizers a delete removes at once, through the API too.
    let b2 = key("tasks", "b");
    store.put(CLUSTER, &b2, "1", None).await.unwrap();
    let removed = store
        .write(
            CLUSTER,
            &ApiWrite::Delete {
                key: b2.clone(),
                expected_version: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(removed, Written::Removed);
    assert_eq!(store.get(CLUSTER, &b2).await.unwrap(), None);
}

/// Garbage collection is bounded per commit: deleting an owner that owns
/// more than [`crate::limits::MAX_COLLECTED_PER_COMMIT`] objects is
/// refused as too large, with nothing written; once it owns no more than
/// that, the same delete collects them all in one commit.
pub(super) async fn an_owner_of_more_than_one_commit_may_collect_stays_until_fewer(b: &Backend) {
    use crate::limits::{MAX_COLLECTED_PER_COMMIT, MAX_OPS_PER_COMMIT};
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let owner = key("nodes", "big");
    let made = store
        .commit_fenced(&fence, &[create(&owner, "{}")], &[])
        .await
        .unwrap();
    let owned: Vec<ObjectKey> = (0..=MAX_COLLECTED_PER_COMMIT)
        .map(|i| key("tasks", &format!("t{i:04}")))
        .collect();
    for chunk in owned.chunks(MAX_OPS_PER_COMMIT) {
        let ops: Vec<Op> = chunk
            .iter()
            .map(|k| create_with(k, "0", meta(&[], Some(&owner), &[])))
            .collect();
        store.commit_fenced(&fence, &ops, &[]).await.unwrap();
    }
    let since = mark(store).await;
    let refused = store
        .commit_fenced(&fence, &[delete(&owner, made.revision)], &[])
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, StoreError::TooLarge(why) if why.contains("nodes/big")),
        "{refused:?}"
    );
    assert_eq!(
        store.get(CLUSTER, &owner).await.unwrap().map(|o| o.version),
        Some(made.revision),
        "the refused delete wrote nothing"
    );
    assert!(store.get(CLUSTER, &owned[0]).await.unwrap().is_some());
    assert_eq!(changes_after(store, since).await, vec![]);

    // One fewer: the owner and everything it owns go in one commit.
    let last = store
        .get(CLUSTER, &owned[MAX_COLLECTED_PER_COMMIT])
        .await
        .unwrap()
        .unwrap();
    store
        .commit_fenced(
            &fence,
            &[delete(&owned[MAX_COLLECTED_PER_COMMIT], last.version)],
            &[],
        )
        .await
        .unwrap();
    let since = mark(store).await;
    store
        .commit_fenced(&fence, &[delete(&owner, made.revision)], &[])
        .await
        .unwrap();
    assert_eq!(store.get(CLUSTER, &owner).await.unwrap(), None);
    for k in &owned {
        assert_eq!(store.get(CLUSTER, k).await.unwrap(), None, "{k} collected");
    }
    let seen = changes_after(store, since).await;
    assert_eq!(
        seen.len(),
        MAX_COLLECTED_PER_COMMIT + 1,
        "the owner and what it owned"
    );
    assert!(seen.iter().all(|(_, kind, _)| *kind == ChangeKind::Deleted));
}

pub(super) async fn deleting_an_owner_collects_what_it_owns(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let owner = key("nodes", "n1");
    let (free, held, grand, stranger) = (
        key("tasks", "free"),
        key("tasks", "held"),
        key("pods", "grand"),
        key("tasks", "stranger"),
    );
    let c = store
        .commit_fenced(
            &fence,
            &[
                create(&owner, "{}"),
                create_with(&free, "1", meta(&[], Some(&owner), &[])),
                create_with(&held, "2", meta(&[], Some(&owner), &["example.com/drain"])),
                create(&stranger, "3"),
            ],
            &[],
        )
        .await
        .unwrap();
    store
        .commit_fenced(
            &fence,
            &[create_with(&grand, "4", meta(&[], Some(&free), &[]))],
            &[],
        )
        .await
        .unwrap();
    let since = mark(store).await;
    let d = store
        .commit_fenced(&fence, &[delete(&owner, c.revision)], &[])
        .await
        .unwrap();
    assert_eq!(store.get(CLUSTER, &owner).await.unwrap(), None);
    assert_eq!(store.get(CLUSTER, &free).await.unwrap(), None);
    assert_eq!(
        store.get(CLUSTER, &grand).await.unwrap(),
        None,
        "collected transitively"
    );
    let kept = store
        .get(CLUSTER, &held)
        .await
        .unwrap()
        .expect("a finalizer holds it");
    assert_eq!(kept.version, d.revision);
    assert!(kept.deleting_since.is_some());
    assert!(store.get(CLUSTER, &stranger).await.unwrap().is_some());
    // One commit: every change carries its revision, in one stream.
    let mut seen = changes_after(store, since).await;
    seen.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        seen.iter()
            .map(|(n, k, _)| (n.as_str(), *k))
            .collect::<Vec<_>>(),
        vec![
            ("free", ChangeKind::Deleted),
            ("grand", ChangeKind::Deleted),
            ("held", ChangeKind::Updated),
            ("n1", ChangeKind::Deleted),
        ]
    );
    let revisions: BTreeSet<u64> = all_changes(store, CLUSTER)
        .await
        .into_iter()
        .filter(|c| c.position > since)
        .map(|c| c.revision)
        .collect();
    assert_eq!(revisions.into_iter().collect::<Vec<_>>(), vec![d.revision]);
}

pub(super) async fn owners_must_exist_and_not_be_deleting(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let (owner, child) = (key("nodes", "n1"), key("tasks", "t1"));
    assert_conflict(
        store
            .commit_fenced(
                &fence,
                &[create_with(&child, "1", meta(&[], Some(&owner), &[]))],
                &[],
            )
            .await,
        &child,
    );
    let c = store
        .commit_fenced(
            &fence,
            &[create_with(&owner, "{}", meta(&[], None, &["keep"]))],
            &[],
        )
        .await
        .unwrap();
    store
        .commit_fenced(&fence, &[delete(&owner, c.revision)], &[])
        .await
        .unwrap();
    assert_conflict(
        store
            .commit_fenced(
                &fence,
                &[create_with(&child, "1", meta(&[], Some(&owner), &[]))],
                &[],
            )
            .await,
        &child,
    );
    assert_eq!(store.get(CLUSTER, &child).await.unwrap(), None);
    // Deleting an owner while writing what it owns is refused whole.
    let other = key("nodes", "n2");
    let o = store
        .commit_fenced(&fence, &[create(&other, "{}")], &[])
        .await
        .unwrap();
    let k = store
        .commit_fenced(
            &fence,
            &[create_with(&child, "1", meta(&[], Some(&other), &[]))],
            &[],
        )
        .await
        .unwrap();
    assert_invalid(
        store
            .commit_fenced(
                &fence,
                &[delete(&other, o.revision), update(&child, k.revision, "2")],
                &[],
            )
            .await,
    );
    assert_eq!(version(store, &other).await, Some(o.revision));
    assert_eq!(version(store, &child).await, Some(k.revision));
}

pub(super) async fn status_writes_keep_the_generation_and_skip_spec_conflicts(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let a = key("tasks", "a");
    let status = |generation: Option<u64>, status: Option<&str>| Op::Status {
        key: a.clone(),
        expected_generation: generation,
        status: status.map(str::to_string),
    };
    let c = store
        .commit_fenced(&fence, &[create(&a, "{\"want\": 1}")], &[])
        .await
        .unwrap();
    let since = mark(store).await;
    let s = store
        .commit_fenced(&fence, &[status(Some(1), Some("{ \"have\": 1 }"))], &[])
        .await
        .unwrap();
    let got = store.get(CLUSTER, &a).await.unwrap().unwrap();
    assert_eq!(
        (
            got.version,
            got.generation,
            got.status.as_deref(),
            got.value.as_str()
        ),
        (s.revision, 1, Some("{\"have\":1}"), "{\"want\":1}")
    );
    assert_eq!(
        changes_after(store, since).await,
        vec![("a".to_string(), ChangeKind::Updated, s.revision)]
    );
    // The user's spec write at the version read before: a conflict (the
    // status write moved the version), so a spec write never silently
    // overwrites... but a user writing unconditionally keeps the status.
    assert_conflict(
        store
            .put(CLUSTER, &a, "{\"want\": 2}", Some(c.revision))
            .await,
        &a,
    );
    let u = store.put(CLUSTER, &a, "{\"want\": 2}", None).await.unwrap();
    assert_eq!(
        (u.generation, u.status.as_deref()),
        (2, Some("{\"have\":1}"))
    );
    // A status computed from generation 1 no longer applies; one from 2
    // does, whatever the version.
    assert_conflict(
        store
            .commit_fenced(&fence, &[status(Some(1), Some("{}"))], &[])
            .await,
        &a,
    );
    store
        .commit_fenced(&fence, &[status(Some(2), Some("{\"have\": 2}"))], &[])
        .await
        .unwrap();
    let written = store
        .write(
            CLUSTER,
            &ApiWrite::Status {
                key: a.clone(),
                status: None,
                expected_generation: None,
            },
        )
        .await
        .unwrap();
    let Written::Replaced(cleared) = written else {
        panic!("a status write replaces: {written:?}");
    };
    assert_eq!((cleared.generation, cleared.status), (2, None));
    assert_eq!(store.get(CLUSTER, &a).await.unwrap().unwrap().status, None);
    assert_not_found(
        store
            .write(
                CLUSTER,
                &ApiWrite::Status {
                    key: key("tasks", "none"),
                    status: None,
                    expected_generation: None,
                },
            )
            .await,
        &key("tasks", "none"),
    );
    assert_invalid(
        store
            .commit_fenced(&fence, &[status(None, Some("{"))], &[])
            .await,
    );
}

pub(super) async fn checks_gate_a_commit_without_writing(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let (quota, task, absent) = (key("quotas", "q"), key("tasks", "t"), key("tasks", "none"));
    let check = |k: &ObjectKey, v: u64| Op::Check {
        key: k.clone(),
        expected_version: v,
    };
    let q = store
        .commit_fenced(&fence, &[create(&quota, "{}")], &[])
        .await
        .unwrap();
    let since = mark(store).await;
    let c = store
        .commit_fenced(
            &fence,
            &[
                check(&quota, q.revision),
                check(&absent, 0),
                create(&task, "1"),
            ],
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        version(store, &quota).await,
        Some(q.revision),
        "a check writes nothing"
    );
    assert_eq!(
        changes_after(store, since).await,
        vec![("t".to_string(), ChangeKind::Created, c.revision)]
    );
    let before = all_events(store, CLUSTER).await.len();
    for failing in [
        check(&quota, q.revision + 1),
        check(&quota, 0),
        check(&absent, 5),
    ] {
        let on = match &failing {
            Op::Check { key, .. } => key.clone(),
            _ => unreachable!(),
        };
        assert_conflict(
            store
                .commit_fenced(
                    &fence,
                    &[update(&task, c.revision, "2"), failing],
                    &[event(&task, "Changed")],
                )
                .await,
            &on,
        );
    }
    assert_eq!(version(store, &task).await, Some(c.revision));
    assert_eq!(all_events(store, CLUSTER).await.len(), before);
}

// ---------------------------------------------------------------- selectors

/// A selector of these labels and this containment (JSON text).
fn selector(labels: &[(&str, &str)], contains: Option<&str>) -> Selector {
    Selector {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        contains: contains.map(|text| serde_json::from_str(text).unwrap()),
    }
}

/// Every name `selector` selects in `kind`, read page by page (`page`
/// at a time), checking each page's cursor on the way.
async fn selected(store: &dyn Store, kind: &str, selector: &Selector, page: usize) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let got = store
            .list_selected(CLUSTER, kind, selector, after.as_deref(), page)
            .await
            .unwrap();
        assert!(
            got.objects.len() <= page,
            "{selector:?}: a page over its limit"
        );
        assert!(got.objects.iter().all(|o| o.kind == kind));
        names.extend(got.objects.iter().map(|o| o.name.clone()));
        match got.next {
            Some(next) => {
                assert_eq!(
                    Some(&next),
                    names.last(),
                    "{selector:?}: next is the last name"
                );
                after = Some(next);
            }
            None => return names,
        }
    }
}

pub(super) async fn selectors_match_labels(b: &Backend) {
    let store = &*b.store;
    let objects: [(&str, &[(&str, &str)]); 6] = [
        ("a", &[("app", "web"), ("tier", "front")]),
        ("b", &[("app", "web")]),
        ("c", &[("app", "db"), ("tier", "front")]),
        ("d", &[]),
        ("e", &[("app", ""), ("example.com/zone", "eu-1")]),
        ("f", &[("tier", "front")]),
    ];
    for (name, labels) in objects {
        let write = ApiWrite::Put {
            key: key("tasks", name),
            value: "{}".into(),
            meta: Some(meta(labels, None, &[])),
            expected_version: None,
        };
        store.write(CLUSTER, &write).await.unwrap();
    }
    // The same labels on another kind are never listed with this one.
    let other = ApiWrite::Put {
        key: key("nodes", "a"),
        value: "{}".into(),
        meta: Some(meta(&[("app", "web")], None, &[])),
        expected_version: None,
    };
    store.write(CLUSTER, &other).await.unwrap();

    let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    // (labels of the selector, names it selects)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 7] = [
        (&[("app", "web")], &["a", "b"]),
        (&[("tier", "front")], &["a", "c", "f"]),
        (&[("app", "web"), ("tier", "front")], &["a"]),
        (&[("app", "db"), ("tier", "back")], &[]),
        // An empty value selects the label set to "", not an absent one.
        (&[("app", "")], &["e"]),
        (&[("example.com/zone", "eu-1")], &["e"]),
        (&[("missing", "x")], &[]),
    ];
    for (labels, expected) in cases {
        let sel = selector(labels, None);
        assert_eq!(
            selected(store, "tasks", &sel, 10).await,
            names(expected),
            "{labels:?}"
        );
    }
    // The empty selector is a plain list.
    let all = store
        .list_selected(CLUSTER, "tasks", &Selector::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(all, store.list(CLUSTER, "tasks", None, 10).await.unwrap());
    assert_eq!(all.objects.len(), 6);
    // A label written away is no longer selected.
    let b_key = key("tasks", "b");
    store.put(CLUSTER, &b_key, "{}", None).await.unwrap();
    let relabel = ApiWrite::Put {
        key: b_key,
        value: "{}".into(),
        meta: Some(meta(&[("app", "api")], None, &[])),
        expected_version: None,
    };
    store.write(CLUSTER, &relabel).await.unwrap();
    let sel = selector(&[("app", "web")], None);
    assert_eq!(selected(store, "tasks", &sel, 10).await, names(&["a"]));
}

pub(super) async fn selectors_match_contained_json(b: &Backend) {
    let store = &*b.store;
    let values = [
        (
            "a",
            r#"{"status": "pending", "spec": {"cpu": 2, "zone": "eu"}, "tags": ["x", "y"]}"#,
        ),
        ("b", r#"{"status": "running", "spec": {"cpu": 2}}"#),
        ("c", r#"["x", "y", 3, {"k": [1, 2]}]"#),
        ("d", r#""x""#),
        ("e", "1.0"),
        (
            "f",
            r#"{"status": "pending", "tags": [["nested"]], "n": null, "ok": true}"#,
        ),
        ("g", r#"{"status": {"phase": "pending"}}"#),
    ];
    for (name, value) in values {
        store
            .put(CLUSTER, &key("tasks", name), value, None)
            .await
            .unwrap();
    }
    store
        .put(
            CLUSTER,
            &key("nodes", "a"),
            r#"{"status": "pending"}"#,
            None,
        )
        .await
        .unwrap();
    let cases: &[(&str, &[&str])] = &[
        // Objects: each key given, recursively.
        (r#"{"status": "pending"}"#, &["a", "f"]),
        (r#"{"spec": {"cpu": 2}}"#, &["a", "b"]),
        (
            r#"{"spec": {"cpu": 2, "zone": "eu"}, "status": "pending"}"#,
            &["a"],
        ),
        (r#"{"spec": {"zone": "us"}}"#, &[]),
        (r#"{"status": {"phase": "pending"}}"#, &["g"]),
        (r#"{"status": {}}"#, &["g"]),
        (r#"{}"#, &["a", "b", "f", "g"]),
        // Numbers compare by value.
        (r#"{"spec": {"cpu": 2.0}}"#, &["a", "b"]),
        (r#"{"spec": {"cpu": 3}}"#, &[]),
        // Arrays: each element given is in the array, in any order, any
        // number of times.
        (r#"{"tags": ["y"]}"#, &["a"]),
        (r#"{"tags": ["y", "x", "x"]}"#, &["a"]),
        (r#"{"tags": ["z"]}"#, &[]),
        (r#"{"tags": []}"#, &["a", "f"]),
        (r#"{"tags": [["nested"]]}"#, &["f"]),
        (r#"{"tags": ["nested"]}"#, &[]),
        (r#"["x"]"#, &["c"]),
        (r#"[{"k": [2]}]"#, &["c"]),
        (r#"[]"#, &["c"]),
        // Scalars: equal ones; at the top level an array contains its
        // scalar elements, but a scalar never contains an array.
        (r#""x""#, &["c", "d"]),
        ("3", &["c"]),
        ("1", &["e"]),
        (r#"{"n": null, "ok": true}"#, &["f"]),
        (r#"{"ok": "true"}"#, &[]),
        // Never across types, below the top level.
        (r#"{"tags": "x"}"#, &[]),
        (r#"{"status": ["pending"]}"#, &[]),
        (r#"{"spec": 2}"#, &[]),
        (r#"{"status": "done"}"#, &[]),
    ];
    for (contains, expected) in cases {
        let sel = selector(&[], Some(contains));
        let want: Vec<String> = expected.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            selected(store, "tasks", &sel, 10).await,
            want,
            "contains {contains}"
        );
    }
    // A value written away from a match is no longer selected.
    store
        .put(CLUSTER, &key("tasks", "a"), r#"{"status": "done"}"#, None)
        .await
        .unwrap();
    let sel = selector(&[], Some(r#"{"status": "pending"}"#));
    assert_eq!(
        selected(store, "tasks", &sel, 10).await,
        vec!["f".to_string()]
    );
}

pub(super) async fn selectors_combine_and_page_in_name_order(b: &Backend) {
    let store = &*b.store;
    // 30 tasks: every third pending, every other labelled team=a; names
    // whose byte order is not their number's.
    let mut expected_both = Vec::new();
    let mut expected_pending = Vec::new();
    for i in 0..30 {
        let name = format!("t{i}");
        let pending = i % 3 == 0;
        let team = if i % 2 == 0 { "a" } else { "b" };
        let value = format!(
            r#"{{"status": "{}", "n": {i}}}"#,
            if pending { "pending" } else { "done" }
        );
        let write = ApiWrite::Put {
            key: key("tasks", &name),
            value,
            meta: Some(meta(&[("team", team)], None, &[])),
            expected_version: None,
        };
        store.write(CLUSTER, &write).await.unwrap();
        if pending {
            expected_pending.push(name.clone());
            if team == "a" {
                expected_both.push(name);
            }
        }
    }
    expected_both.sort();
    expected_pending.sort();
    let both = selector(&[("team", "a")], Some(r#"{"status": "pending"}"#));
    let pending = selector(&[], Some(r#"{"status": "pending"}"#));
    for page in [1, 2, 3, 4, 100] {
        assert_eq!(
            selected(store, "tasks", &both, page).await,
            expected_both,
            "page {page}"
        );
        assert_eq!(
            selected(store, "tasks", &pending, page).await,
            expected_pending,
            "page {page}"
        );
    }
    // A full page says there may be more, even when nothing more matches.
    let exact = store
        .list_selected(CLUSTER, "tasks", &both, None, expected_both.len())
        .await
        .unwrap();
    assert_eq!(exact.next, None, "exactly a page, nothing after it");
    let short = store
        .list_selected(CLUSTER, "tasks", &both, None, expected_both.len() - 1)
        .await
        .unwrap();
    assert_eq!(
        short.next.as_ref(),
        expected_both.get(expected_both.len() - 2)
    );
    // A cursor need not name a selected object (nor an existing one).
    let after = store
        .list_selected(CLUSTER, "tasks", &both, Some("t13"), 100)
        .await
        .unwrap();
    let names: Vec<String> = after.objects.iter().map(|o| o.name.clone()).collect();
    let want: Vec<String> = expected_both
        .iter()
        .filter(|n| n.as_str() > "t13")
        .cloned()
        .collect();
    assert_eq!(names, want);
    // Whole objects come back, as `get` reads them.
    for object in &after.objects {
        assert_eq!(
            store.get(CLUSTER, &object.key()).await.unwrap().as_ref(),
            Some(object)
        );
    }
    // A limit of 0 asks for the default page, larger ones are capped.
    let default = store
        .list_selected(CLUSTER, "tasks", &Selector::default(), None, 0)
        .await
        .unwrap();
    assert_eq!(default.objects.len(), 30.min(DEFAULT_PAGE_SIZE));
}

pub(super) async fn invalid_selectors_are_refused(b: &Backend) {
    let store = &*b.store;
    store
        .put(
            CLUSTER,
            &key("tasks", "a"),
            r#"{"status": "pending"}"#,
            None,
        )
        .await
        .unwrap();
    let nested = |depth: usize| {
        let mut value = serde_json::json!("x");
        for _ in 0..depth {
            value = serde_json::json!([value]);
        }
        value
    };
    let many: Vec<(String, String)> = (0..=MAX_SELECTOR_LABELS)
        .map(|i| (format!("k{i}"), "v".to_string()))
        .collect();
    let cases: Vec<(Selector, &str)> = vec![
        (
            Selector {
                labels: many.into_iter().collect(),
                contains: None,
            },
            "labels; the limit is",
        ),
        (selector(&[("-bad", "v")], None), "label key"),
        (selector(&[("", "v")], None), "label key"),
        (selector(&[("app", "no spaces")], None), "has value"),
        (selector(&[("app", &"v".repeat(64))], None), "has value"),
        (
            Selector {
                labels: Default::default(),
                contains: Some(nested(MAX_SELECTOR_CONTAINS_DEPTH + 1)),
            },
            "nested more than",
        ),
        (
            Selector {
                labels: Default::default(),
                contains: Some(serde_json::json!({ "k": "x".repeat(MAX_SELECTOR_CONTAINS_BYTES) })),
            },
            "bytes of compact JSON",
        ),
    ];
    for (sel, says) in cases {
        match store.list_selected(CLUSTER, "tasks", &sel, None, 10).await {
            Err(StoreError::Invalid(message)) => {
                assert!(message.contains(says), "{message:?} should say {says:?}");
                assert!(message.contains("tasks"), "{message:?} names the kind");
            }
            other => panic!("{sel:?} must be refused as invalid, got {other:?}"),
        }
    }
    // At the bounds exactly, a selector is served.
    let at_bounds = [
        Selector {
            labels: (0..MAX_SELECTOR_LABELS)
                .map(|i| (format!("k{i}"), "v".to_string()))
                .collect(),
            contains: None,
        },
        Selector {
            labels: Default::default(),
            contains: Some(nested(MAX_SELECTOR_CONTAINS_DEPTH)),
        },
        Selector {
            labels: Default::default(),
            // `{"k":"…"}`: 8 bytes around the string.
            contains: Some(serde_json::json!({ "k": "x".repeat(MAX_SELECTOR_CONTAINS_BYTES - 8) })),
        },
    ];
    for sel in at_bounds {
        let page = store
            .list_selected(CLUSTER, "tasks", &sel, None, 10)
            .await
            .unwrap();
        assert!(page.objects.is_empty());
    }
    // Bad kinds and cursors are refused with a selector as without.
    let sel = selector(&[("app", "web")], None);
    for (kind, after) in [("Tasks", None), ("tasks", Some("Bad_Name"))] {
        assert!(matches!(
            store.list_selected(CLUSTER, kind, &sel, after, 10).await,
            Err(StoreError::Invalid(_))
        ));
    }
}

// ---------------------------------------------------------------- retention

fn trim_everything_in(batch: usize) -> super::retention::Policy {
    super::retention::Policy {
        event_retention: Duration::ZERO,
        tenure_retention: 1,
        batch,
    }
}

async fn put_tasks(store: &dyn Store, cluster: &str, names: &[&str]) {
    for name in names {
        store
            .put(cluster, &key("tasks", name), "{}", None)
            .await
            .unwrap();
    }
}

pub(super) async fn trimming_goes_in_batches_and_keeps_the_recent(b: &Backend) {
    let store = &*b.store;
    put_tasks(store, CLUSTER, &["t1", "t2", "t3"]).await;
    put_tasks(store, "other", &["o1"]).await;
    let (events, changes) = (
        all_events(store, CLUSTER).await,
        all_changes(store, CLUSTER).await,
    );
    assert_eq!((events.len(), changes.len()), (3, 3));

    // Everything is younger than an hour: nothing goes.
    let keep = super::retention::Policy {
        event_retention: Duration::from_secs(3600),
        ..trim_everything_in(2)
    };
    let none = store.trim(CLUSTER, &keep).await.unwrap();
    assert_eq!((none.events, none.changes), (0, 0));
    assert_eq!(all_events(store, CLUSTER).await, events);

    // Past the retention: at most a batch a call, oldest first.
    let first = store.trim(CLUSTER, &trim_everything_in(2)).await.unwrap();
    assert_eq!((first.events, first.changes), (2, 2));
    let kept = store
        .events(CLUSTER, events[1].seq, MAX_PAGE_SIZE)
        .await
        .unwrap();
    assert_eq!(kept, events[2..]);
    let page = store
        .changes(CLUSTER, &[], changes[1].position, MAX_PAGE_SIZE)
        .await
        .unwrap();
    assert_eq!(page.changes, changes[2..]);
    let second = store.trim(CLUSTER, &trim_everything_in(2)).await.unwrap();
    assert_eq!((second.events, second.changes), (1, 1));
    let third = store.trim(CLUSTER, &trim_everything_in(2)).await.unwrap();
    assert_eq!((third.events, third.changes), (0, 0));
    // Read from the last position, the streams are whole (and empty).
    let last = events[2].seq.max(changes[2].position);
    assert!(store.events(CLUSTER, last, 10).await.unwrap().is_empty());
    // Another cluster is untouched.
    assert_eq!(all_events(store, "other").await.len(), 1);
    assert_eq!(all_changes(store, "other").await.len(), 1);
    // New writes follow the trimmed ones as usual.
    put_tasks(store, CLUSTER, &["t4"]).await;
    let after = store.events(CLUSTER, events[2].seq, 10).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].name, "t4");
}

pub(super) async fn readers_behind_the_floor_are_told_too_old(b: &Backend) {
    let store = &*b.store;
    put_tasks(store, CLUSTER, &["t1", "t2", "t3"]).await;
    let (events, changes) = (
        all_events(store, CLUSTER).await,
        all_changes(store, CLUSTER).await,
    );
    // Nothing trimmed yet: reading from the start is fine.
    assert_eq!(store.events(CLUSTER, 0, 10).await.unwrap().len(), 3);
    store.trim(CLUSTER, &trim_everything_in(2)).await.unwrap();

    for after in [0, events[0].seq, events[1].seq - 1] {
        match store.events(CLUSTER, after, 10).await {
            Err(StoreError::TooOld {
                cluster,
                after: asked,
                oldest_kept,
                ..
            }) => {
                assert_eq!((cluster.as_str(), asked), (CLUSTER, after));
                assert_eq!(oldest_kept, events[1].seq + 1);
            }
            other => panic!("events after {after}: expected TooOld, got {other:?}"),
        }
    }
    for kinds in [vec![], vec!["tasks".to_string()], vec!["nodes".to_string()]] {
        match store
            .changes(CLUSTER, &kinds, changes[0].position, 10)
            .await
        {
            Err(e @ StoreError::TooOld { oldest_kept, .. }) => {
                assert_eq!(oldest_kept, changes[1].position + 1);
                let text = e.to_string();
                assert!(
                    text.contains("change stream") && text.contains(CLUSTER),
                    "{text}"
                );
            }
            other => panic!("changes of {kinds:?}: expected TooOld, got {other:?}"),
        }
    }
    // From one below the oldest kept position, the rest is there.
    assert_eq!(
        store.events(CLUSTER, events[1].seq, 10).await.unwrap(),
        events[2..]
    );
    let page = store
        .changes(CLUSTER, &[], changes[1].position, 10)
        .await
        .unwrap();
    assert_eq!(page.changes, changes[2..]);
    // A cluster never trimmed has no floor.
    assert!(store.events("other", 0, 10).await.unwrap().is_empty());
}

/// Every change records the object's owner and labels after it (for a
/// delete, those it had), and, only when an update changed either, those
/// before it: what a watcher needs to map a change to the objects it
/// concerns without reading the object again. Garbage collection's
/// deletes carry theirs too.
pub(super) async fn changes_carry_owner_and_labels(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let (n1, n2) = (key("nodes", "n1"), key("nodes", "n2"));
    let (p, q) = (key("pods", "p"), key("pods", "q"));
    let relations = |owner: Option<&ObjectKey>, labels: &[(&str, &str)]| Relations {
        owner: owner.cloned(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let made = store
        .commit_fenced(
            &fence,
            &[
                create(&n1, "{}"),
                create(&n2, "{}"),
                create_with(
                    &p,
                    "1",
                    meta(&[("app", "a"), ("task", "t1")], Some(&n1), &[]),
                ),
            ],
            &[],
        )
        .await
        .unwrap();
    let since = mark(store).await;
    // A value-only update keeps both: nothing before is recorded.
    let valued = store
        .commit_fenced(&fence, &[update(&p, made.revision, "2")], &[])
        .await
        .unwrap();
    // The owner and a label move: both sides are recorded.
    let moved = store
        .commit_fenced(
            &fence,
            &[replace_meta(
                &p,
                valued.revision,
                meta(
                    &[("app", "a"), ("task", "t2")],
                    Some(&n2),
                    &["example.com/hold"],
                ),
            )],
            &[],
        )
        .await
        .unwrap();
    // Finalizers alone are no change of relations.
    store
        .commit_fenced(
            &fence,
            &[replace_meta(
                &p,
                moved.revision,
                meta(&[("app", "a"), ("task", "t2")], Some(&n2), &[]),
            )],
            &[],
        )
        .await
        .unwrap();
    // A status write and a user's value write keep them.
    let status = store
        .commit_fenced(
            &fence,
            &[Op::Status {
                key: p.clone(),
                expected_generation: None,
                status: Some("{}".into()),
            }],
            &[],
        )
        .await
        .unwrap();
    store
        .put(CLUSTER, &p, "3", Some(status.revision))
        .await
        .unwrap();
    // Labels dropped and the owner kept.
    store
        .write(
            CLUSTER,
            &ApiWrite::Put {
                key: p.clone(),
                value: "4".into(),
                meta: Some(meta(&[], Some(&n2), &[])),
                expected_version: None,
            },
        )
        .await
        .unwrap();
    store
        .commit_fenced(
            &fence,
            &[create_with(
                &q,
                "5",
                meta(&[("task", "t9")], Some(&n2), &[]),
            )],
            &[],
        )
        .await
        .unwrap();
    // Deleting n2 collects p and q: each delete records what it had.
    let n2_version = store.get(CLUSTER, &n2).await.unwrap().unwrap().version;
    store
        .commit_fenced(&fence, &[delete(&n2, n2_version)], &[])
        .await
        .unwrap();
    let seen: Vec<(String, ChangeKind, Relations, Option<Relations>)> = all_changes(store, CLUSTER)
        .await
        .into_iter()
        .filter(|c| c.position > since)
        .map(|c| {
            (
                format!("{}/{}", c.kind, c.name),
                c.change,
                c.relations,
                c.previous,
            )
        })
        .collect();
    use ChangeKind::{Created, Deleted, Updated};
    let both = [("app", "a"), ("task", "t2")];
    assert_eq!(
        seen,
        vec![
            (
                "pods/p".into(),
                Updated,
                relations(Some(&n1), &[("app", "a"), ("task", "t1")]),
                None
            ),
            (
                "pods/p".into(),
                Updated,
                relations(Some(&n2), &both),
                Some(relations(Some(&n1), &[("app", "a"), ("task", "t1")]))
            ),
            ("pods/p".into(), Updated, relations(Some(&n2), &both), None),
            ("pods/p".into(), Updated, relations(Some(&n2), &both), None),
            ("pods/p".into(), Updated, relations(Some(&n2), &both), None),
            (
                "pods/p".into(),
                Updated,
                relations(Some(&n2), &[]),
                Some(relations(Some(&n2), &both))
            ),
            (
                "pods/q".into(),
                Created,
                relations(Some(&n2), &[("task", "t9")]),
                None
            ),
            ("nodes/n2".into(), Deleted, relations(None, &[]), None),
            ("pods/p".into(), Deleted, relations(Some(&n2), &[]), None),
            (
                "pods/q".into(),
                Deleted,
                relations(Some(&n2), &[("task", "t9")]),
                None
            ),
        ]
    );
    // The create recorded what the object was made with.
    let first = all_changes(store, CLUSTER)
        .await
        .into_iter()
        .find(|c| c.kind == "pods" && c.change == Created)
        .unwrap();
    assert_eq!(
        (first.relations, first.previous),
        (relations(Some(&n1), &[("app", "a"), ("task", "t1")]), None)
    );
}

/// A fenced commit hands back every object it wrote exactly as a read
/// then finds it (normalized value, metadata, status, generation, deletion
/// mark), `None` for each it removed, garbage collection's included, and
/// nothing for an object it only checked: a guest's host calls answer
/// later reads from it (`runtime/host/own_writes.rs`).
pub(super) async fn commits_hand_back_what_they_wrote(b: &Backend) {
    let (store, fence) = (&*b.store, b.leases.grant(CLUSTER, "ctl", "host-a").await);
    let (owner, held, free, other) = (
        key("nodes", "n1"),
        key("tasks", "held"),
        key("tasks", "free"),
        key("tasks", "other"),
    );
    let agrees = |written: Vec<(ObjectKey, Option<super::Object>)>| async move {
        for (k, object) in &written {
            assert_eq!(&store.get(CLUSTER, k).await.unwrap(), object, "{k}");
        }
        written
            .into_iter()
            .map(|(k, object)| (k.to_string(), object.is_some()))
            .collect::<Vec<_>>()
    };
    let c = store
        .commit_fenced(
            &fence,
            &[
                create(&owner, "{ \"b\": 1,  \"a\": [1, 2] }"),
                create_with(&held, "1", meta(&[("app", "web")], Some(&owner), &["f/x"])),
                create_with(&free, "2", meta(&[], Some(&owner), &[])),
                create(&other, "3"),
            ],
            &[],
        )
        .await
        .unwrap();
    let all = [
        ("nodes/n1".to_string(), true),
        ("tasks/held".to_string(), true),
        ("tasks/free".to_string(), true),
        ("tasks/other".to_string(), true),
    ];
    assert_eq!(agrees(c.written).await, all);
    let s = store
        .commit_fenced(
            &fence,
            &[
                Op::Status {
                    key: held.clone(),
                    expected_generation: None,
                    status: Some("{\"ready\": true}".into()),
                },
                update(&other, c.revision, "4"),
                Op::Check {
                    key: free.clone(),
                    expected_version: c.revision,
                },
            ],
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        agrees(s.written).await,
        [
            ("tasks/held".to_string(), true),
            ("tasks/other".to_string(), true)
        ],
        "a checked object is not written"
    );
    // The owner goes; what it owns is removed, or marked if a finalizer
    // holds it.
    let d = store
        .commit_fenced(&fence, &[delete(&owner, c.revision)], &[])
        .await
        .unwrap();
    let mut collected = agrees(d.written).await;
    collected.sort();
    assert_eq!(
        collected,
        [
            ("nodes/n1".to_string(), false),
            ("tasks/free".to_string(), false),
            ("tasks/held".to_string(), true),
        ]
    );
    let marked = store.get(CLUSTER, &held).await.unwrap().unwrap();
    assert!(marked.deleting_since.is_some());
    let r = store
        .commit_fenced(
            &fence,
            &[replace_meta(&held, marked.version, meta(&[], None, &[]))],
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        agrees(r.written).await,
        [("tasks/held".to_string(), false)],
        "the last finalizer removed"
    );
}
