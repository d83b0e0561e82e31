//! The JavaScript example scheduler (`controllers/scheduler-js`, built with
//! componentize-js by `cargo xtask guests` into `scheduler-js.wasm`) as a
//! component in the host runtime on the memory backends: it loads under
//! the host's default guest limits, assigns tasks within capacity in
//! fenced commits, its failures reach the host as the WIT's
//! `reconcile-error` (a store conflict as `failed` with the controller's
//! retry delay), a write after the lease is lost is fenced and written by
//! nobody, a successor leads at the next epoch, and a revoked tenure is
//! aborted before it writes.
//!
//! The component is compiled once per test process (and cached on disk by
//! the harness's engine), so the tests share that cost.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use leasehold_host::fence::Epoch;
use leasehold_host::runtime::{GuestError, Reconciled};
use leasehold_host::store::{Event, Origin};
use leasehold_tests::harness::{CommitFault, ComponentHarness};
use serde_json::json;

const COMPONENT: &str = "scheduler-js";
const NODES: &str = "nodes";
const TASKS: &str = "tasks";
const ASSIGNED: &str = "Assigned";
/// The scheduler's retry delay after a reconcile's conflicts
/// (`CONFLICT_RETRY_AFTER_MS` in `controllers/scheduler-js/scheduler.js`).
const CONFLICT_RETRY_AFTER: Duration = Duration::from_millis(200);
/// Commits one reconcile attempts before its conflicts reach the host
/// (`MAX_CONFLICT_RETRIES + 1`).
const CONFLICT_ATTEMPTS: u64 = 6;

async fn load() -> ComponentHarness {
    let started = Instant::now();
    let h = ComponentHarness::load(COMPONENT).await;
    // Shown with --nocapture: the first load in a process compiles (or
    // reads the compilation cache), later ones only instantiate.
    eprintln!("{COMPONENT}: loaded in {:?}", started.elapsed());
    h
}

fn epochs(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .map(|e| match &e.origin {
            Origin::Guest { epoch, .. } => epoch.0,
            Origin::Api => panic!("written by a user, not a guest"),
        })
        .collect()
}

/// Tasks per node, counted from the tasks themselves.
async fn usage(h: &ComponentHarness) -> BTreeMap<String, u64> {
    let mut usage = BTreeMap::new();
    for (_, task) in h.values(TASKS).await {
        if task["status"] == "assigned" {
            let node = task["node"].as_str().expect("assigned tasks name a node");
            *usage.entry(node.to_string()).or_default() += 1;
        }
    }
    usage
}

async fn pending_names(h: &ComponentHarness) -> Vec<String> {
    h.values(TASKS)
        .await
        .into_iter()
        .filter(|(_, t)| t["status"] == "pending")
        .map(|(name, _)| name)
        .collect()
}

#[tokio::test]
async fn the_js_scheduler_assigns_tasks_within_capacity_in_fenced_commits() {
    let mut h = load().await;
    let description = h.describe().await;
    assert_eq!(description.watches, [NODES, TASKS]);
    assert_eq!(description.resync_period, Some(Duration::from_secs(60)));

    h.seed(NODES, "n1", &json!({ "capacity": 1, "zone": "a" }))
        .await;
    h.seed(NODES, "n2", &json!({ "capacity": 2 })).await;
    for name in ["t1", "t2", "t3", "t4"] {
        h.seed(TASKS, name, &json!({ "status": "pending", "image": name }))
            .await;
    }

    for (key, reply) in h.resync().await {
        assert_eq!(reply, Reconciled::Done, "{key:?}");
    }

    assert_eq!(
        usage(&h).await,
        BTreeMap::from([("n1".to_string(), 1), ("n2".to_string(), 2)]),
        "every slot used, none twice"
    );
    assert_eq!(pending_names(&h).await, ["t4"]);
    assert_eq!(
        h.value(TASKS, "t1").await,
        json!({ "status": "assigned", "node": "n2", "image": "t1" }),
        "the task's other fields are kept"
    );
    assert_eq!(
        h.value(NODES, "n1").await,
        json!({ "capacity": 1, "zone": "a", "assigned": 1 })
    );
    // One event per assignment, each in the commit that assigned it, all
    // stamped with this tenure.
    let events = h.events_with_reason(ASSIGNED).await;
    let mut assigned: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assigned.sort_unstable();
    assert_eq!(assigned, ["t1", "t2", "t3"]);
    for event in &events {
        let task = h.object(TASKS, &event.name).await.unwrap();
        assert_eq!(event.revision, task.version, "{}", event.name);
    }
    assert_eq!(epochs(&events), [1, 1, 1]);
    assert_eq!(h.counters().ok.load(Ordering::SeqCst), 3);
    assert_eq!(h.history().await[0].writes, 3);
}

#[tokio::test]
async fn a_js_guests_failure_reaches_the_host_with_its_retry_delay() {
    let mut h = load().await;
    h.seed(NODES, "n1", &json!({ "capacity": 1 })).await;
    h.seed(TASKS, "t1", &json!({ "status": "pending" })).await;
    // A rival write lands before each of the reconcile's commits.
    for n in 1..=CONFLICT_ATTEMPTS {
        h.fail_commit(n, CommitFault::Conflict);
    }

    let reply = h.reconcile(TASKS, "t1").await;

    match &reply {
        Reconciled::Failed {
            message,
            retry_after,
        } => {
            assert!(message.contains("conflict on tasks/t1"), "{message}");
            assert_eq!(*retry_after, Some(CONFLICT_RETRY_AFTER));
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(
        h.commit_attempts(),
        CONFLICT_ATTEMPTS,
        "re-read and retried"
    );
    assert!(h.events_with_reason(ASSIGNED).await.is_empty());
    // The next reconcile of the same instance re-reads and assigns.
    assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);
    assert_eq!(usage(&h).await, BTreeMap::from([("n1".to_string(), 1)]));
}

#[tokio::test]
async fn a_js_guests_write_after_loss_is_fenced_and_the_successor_leads() {
    let mut h = load().await;
    h.seed(NODES, "n1", &json!({ "capacity": 1 })).await;
    h.seed(TASKS, "t1", &json!({ "status": "pending" })).await;
    // Another replica takes the lease just before the guest's commit.
    h.fail_commit(1, CommitFault::Fenced);

    assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Fenced);

    assert_eq!(h.commit_attempts(), 1, "no retry after fenced");
    assert_eq!(h.counters().fenced.load(Ordering::SeqCst), 1);
    assert_eq!(pending_names(&h).await, ["t1"]);
    assert!(h.events_with_reason(ASSIGNED).await.is_empty());
    // Still deposed: the store fences it again, whatever the guest holds.
    assert_eq!(h.reconcile(NODES, "n1").await, Reconciled::Fenced);
    assert_eq!(h.history().await[0].writes, 0);

    let successor = h.new_tenure().await;
    assert_eq!(successor.epoch, Epoch(3), "after the rival's epoch 2");
    assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);
    assert_eq!(
        epochs(&h.events_with_reason(ASSIGNED).await),
        [3],
        "assigned once, by the successor"
    );
}

#[tokio::test]
async fn a_revoked_js_tenure_is_aborted_before_any_write() {
    let mut h = load().await;
    h.seed(NODES, "n1", &json!({ "capacity": 1 })).await;
    h.seed(TASKS, "t1", &json!({ "status": "pending" })).await;
    h.revoke();

    let result = h.try_reconcile(TASKS, "t1").await;

    assert!(
        matches!(result, Err(GuestError::Aborted { .. })),
        "{result:?}"
    );
    assert_eq!(h.commit_attempts(), 0);
    assert_eq!(pending_names(&h).await, ["t1"]);
}
