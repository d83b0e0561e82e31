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
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use leasehold_host::fence::Epoch;
use leasehold_host::runtime::{
    CompiledController, EngineConfig, GuestError, GuestLimits, Reconciled, Runtime,
};
use leasehold_host::store::{ObjectKey, Origin, Store as _};
use leasehold_tests::harness::{CommitFault, ComponentHarness};
use leasehold_tests::scheduler_component::{self, epochs, pending_names, usage};
use leasehold_tests::{HookedStore, MemoryBackends, TEST_WAIT, guest, guest_dir, within};
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

/// The hard-abort fixture: reconciling `cmd/spin` spins in pure
/// JavaScript, `cmd/block` commits a create of `marks/blocked`, `cmd/ok`
/// of `marks/ok`.
const MISBEHAVING: &str = "misbehaving-js";
/// The cluster of the hard-abort tests.
const ABORT_CLUSTER: &str = "js-abort";
/// Generous bound for "promptly": an abort takes an epoch tick or less,
/// but a loaded CI machine must not make the test flaky.
const PROMPT: Duration = Duration::from_secs(2);

/// The fixture, compiled once per test process on an engine of its own
/// (with the tests' on-disk compile cache).
fn misbehaving() -> &'static CompiledController {
    static COMPILED: OnceLock<CompiledController> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let started = Instant::now();
        let runtime = Runtime::new(&EngineConfig {
            max_guests: 4,
            memory_bytes: leasehold_host::limits::GUEST_MEMORY_BYTES,
            pooling: true,
            cache_dir: Some(guest_dir().join("../../leasehold-test-cache")),
        })
        .expect("build the Wasm engine");
        let compiled = runtime
            .load(
                MISBEHAVING,
                &guest(MISBEHAVING),
                GuestLimits::default(),
                Vec::new(),
            )
            .unwrap_or_else(|e| panic!("load {MISBEHAVING}: {e}"));
        eprintln!("{MISBEHAVING}: loaded in {:?}", started.elapsed());
        compiled
    })
}

fn mark(name: &str) -> ObjectKey {
    ObjectKey {
        kind: "marks".into(),
        name: name.into(),
    }
}

#[tokio::test]
async fn the_js_fixture_runs_and_commits_when_left_alone() {
    // The control for the two abort tests: the same fixture, the same
    // store wrapper, no revocation: its write lands.
    let backends = MemoryBackends::new();
    let (store, _hooks) = HookedStore::new(backends.store.clone());
    let compiled = misbehaving();
    let grant = backends.grant(ABORT_CLUSTER, MISBEHAVING, "host-a").await;
    let mut guest = compiled
        .instantiate(
            grant.fence.clone(),
            store.clone(),
            Default::default(),
            compiled.revocation(),
        )
        .await
        .expect("instantiate");
    assert_eq!(guest.describe().await.unwrap().watches, ["cmd"]);
    assert_eq!(
        guest.reconcile("cmd", "ok").await.unwrap(),
        Reconciled::Done
    );
    assert_eq!(store.commits_ok.load(Ordering::SeqCst), 1);
    assert_eq!(
        backends
            .store
            .written_by(ABORT_CLUSTER, &mark("ok"))
            .unwrap(),
        Some(Origin::Guest {
            lease: MISBEHAVING.into(),
            epoch: grant.fence.epoch,
            holder: "host-a".into(),
        })
    );
}

#[tokio::test]
async fn a_js_guest_spinning_in_its_reconcile_is_aborted_on_loss() {
    let backends = MemoryBackends::new();
    let (store, mut hooks) = HookedStore::new(backends.store.clone());
    let compiled = misbehaving();
    let grant = backends.grant(ABORT_CLUSTER, MISBEHAVING, "host-a").await;
    let revocation = compiled.revocation();
    let mut guest = compiled
        .instantiate(
            grant.fence,
            store.clone(),
            Default::default(),
            revocation.clone(),
        )
        .await
        .expect("instantiate");
    let call = tokio::spawn(async move { guest.reconcile("cmd", "spin").await });
    // The guest reads marks/spin right before its endless loop.
    assert_eq!(
        within(TEST_WAIT, "the guest reads marks/spin", hooks.gets.recv()).await,
        Some(mark("spin"))
    );
    let revoked = Instant::now();
    revocation.revoke();
    let result = tokio::time::timeout(PROMPT, call)
        .await
        .expect("the spinning JavaScript guest stopped promptly")
        .unwrap();
    eprintln!(
        "{MISBEHAVING}: spinning guest aborted in {:?}",
        revoked.elapsed()
    );
    match result {
        Err(GuestError::Aborted { controller, fence }) => {
            assert_eq!(controller, MISBEHAVING);
            assert!(fence.contains("host-a"), "{fence}");
        }
        other => panic!("expected an abort, got {other:?}"),
    }
    assert_eq!(store.commits_ok.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_js_guest_blocked_in_a_host_call_is_aborted_and_its_write_dropped() {
    let backends = MemoryBackends::new();
    let (store, mut hooks) = HookedStore::new(backends.store.clone());
    store.hold_commits.store(true, Ordering::SeqCst);
    let compiled = misbehaving();
    let grant = backends.grant(ABORT_CLUSTER, MISBEHAVING, "host-a").await;
    let revocation = compiled.revocation();
    let mut guest = compiled
        .instantiate(
            grant.fence,
            store.clone(),
            Default::default(),
            revocation.clone(),
        )
        .await
        .expect("instantiate");
    let call = tokio::spawn(async move { guest.reconcile("cmd", "block").await });
    within(
        TEST_WAIT,
        "the guest's commit reaches the store",
        hooks.commit_entered.recv(),
    )
    .await
    .expect("commit started");
    let revoked = Instant::now();
    revocation.revoke();
    let result = tokio::time::timeout(PROMPT, call)
        .await
        .expect("the blocked JavaScript guest stopped promptly")
        .unwrap();
    eprintln!(
        "{MISBEHAVING}: blocked guest aborted in {:?}",
        revoked.elapsed()
    );
    assert!(
        matches!(&result, Err(GuestError::Aborted { controller, .. }) if controller == MISBEHAVING),
        "{result:?}"
    );
    // The host call's future was dropped with the guest, not left running.
    within(
        TEST_WAIT,
        "the held commit is dropped",
        hooks.commit_dropped.recv(),
    )
    .await
    .expect("held commit dropped");
    // Nothing it had in flight lands, even once commits flow again.
    store.hold_commits.store(false, Ordering::SeqCst);
    assert_eq!(
        backends
            .store
            .get(ABORT_CLUSTER, &mark("blocked"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.commits_ok.load(Ordering::SeqCst), 0);
}
