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
//! Hard abort (G3) of a JavaScript guest, with the `misbehaving-js`
//! fixture (`tests/fixtures/js/misbehaving-js`, the JavaScript SDK): a
//! guest spinning in pure JavaScript inside its reconcile is interrupted
//! by the epoch deadline, and one blocked in a host call has that call's
//! future dropped, promptly, and nothing it had in flight is written.
//!
//! Each component is compiled once per test process (and cached on disk),
//! so the tests share that cost.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use leasehold_host::fence::Epoch;
use leasehold_host::runtime::{GuestError, Reconciled};
use leasehold_tests::harness::{CommitFault, ComponentHarness};
use leasehold_tests::interpreter_abort::Fixture;
use leasehold_tests::scheduler_component::{self, epochs, pending_names, usage};
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
    scheduler_component::load(COMPONENT).await
}

#[tokio::test]
async fn the_js_scheduler_assigns_tasks_within_capacity_in_fenced_commits() {
    scheduler_component::assigns_tasks_within_capacity_in_fenced_commits(COMPONENT).await;
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

/// The hard-abort fixture (`tests/fixtures/js/misbehaving-js`): it spins
/// in pure JavaScript.
static FIXTURE: Fixture = Fixture::new("misbehaving-js", "js-abort", "JavaScript");

#[tokio::test]
async fn the_js_fixture_runs_and_commits_when_left_alone() {
    FIXTURE.runs_and_commits_when_left_alone().await;
}

#[tokio::test]
async fn a_js_guest_spinning_in_its_reconcile_is_aborted_on_loss() {
    FIXTURE.spinning_guest_is_aborted_on_loss().await;
}

#[tokio::test]
async fn a_js_guest_blocked_in_a_host_call_is_aborted_and_its_write_dropped() {
    FIXTURE
        .blocked_guest_is_aborted_and_its_write_dropped()
        .await;
}
