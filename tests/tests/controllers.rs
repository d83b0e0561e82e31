//! The example controllers as compiled components, in the host runtime on
//! the memory backends: the scenarios their native tests prove against the
//! SDK's fake host (happy path, conflict with retry, fenced stop,
//! unavailable store with requeue, limits, idempotent re-run by a
//! successor), here through the real boundary. And the guide's example
//! controller, built as its own crate, running in the host.
//!
//! Each fault strikes at a numbered commit ([`ComponentHarness`]), so the
//! order of events inside a reconcile is fixed without sleeping.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_host::fence::Epoch;
use leasehold_host::runtime::{GuestError, Reconciled};
use leasehold_host::store::{Event, Origin};
use leasehold_tests::harness::{CLUSTER, CommitFault, ComponentHarness, RivalWrite};
use serde_json::{Value, json};

/// More conflicts in a row than any controller here retries inside one
/// reconcile (their bounds are 5; the native tests pin the exact numbers).
const RELENTLESS_CONFLICTS: u64 = 20;

/// The epoch of a guest write; panics on a user's.
fn guest_epoch(origin: &Origin) -> u64 {
    match origin {
        Origin::Guest { epoch, .. } => epoch.0,
        Origin::Api { .. } => panic!("written by a user, not a guest"),
    }
}

fn epochs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| guest_epoch(&e.origin)).collect()
}

fn failed_with(reply: &Reconciled) -> (&str, Option<Duration>) {
    match reply {
        Reconciled::Failed {
            message,
            retry_after,
        } => (message, *retry_after),
        other => panic!("expected a failed reconcile, got {other:?}"),
    }
}

mod scheduler {
    use super::*;
    use leasehold_tests::scheduler_component::pending_names;

    const NODES: &str = "nodes";
    const TASKS: &str = "tasks";
    const ASSIGNED: &str = "Assigned";

    async fn load() -> ComponentHarness {
        ComponentHarness::load("scheduler").await
    }

    async fn node(h: &ComponentHarness, name: &str, capacity: u64) {
        h.seed(NODES, name, &json!({ "capacity": capacity })).await;
    }

    async fn pending(h: &ComponentHarness, name: &str) {
        h.seed(TASKS, name, &json!({ "status": "pending" })).await;
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

    async fn assert_within_capacity(h: &ComponentHarness) {
        for (name, used) in usage(h).await {
            let capacity = h.value(NODES, &name).await["capacity"].as_u64().unwrap();
            assert!(
                used <= capacity,
                "{name} has {used} tasks for {capacity} slots"
            );
        }
    }

    #[tokio::test]
    async fn describes_nodes_and_tasks_with_a_resync() {
        let mut h = load().await;
        let description = h.describe().await;
        assert_eq!(description.watches, [TASKS, NODES]);
        assert_eq!(
            description.every_shard,
            [NODES],
            "every shard sees every node"
        );
        assert_eq!(description.resync_period, Some(Duration::from_secs(60)));
    }

    #[tokio::test]
    async fn assigns_a_pending_task_with_its_node_and_event_in_one_fenced_commit() {
        let mut h = load().await;
        h.seed(NODES, "n1", &json!({ "capacity": 2, "zone": "a" }))
            .await;
        h.seed(
            TASKS,
            "t1",
            &json!({ "status": "pending", "image": "busybox" }),
        )
        .await;

        assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);

        assert_eq!(
            h.value(TASKS, "t1").await,
            json!({ "status": "assigned", "node": "n1", "image": "busybox" })
        );
        assert_eq!(
            h.value(NODES, "n1").await,
            json!({ "capacity": 2, "zone": "a", "assigned": 1 })
        );
        // One commit: task, node and event share its revision, and the
        // store recorded it as this tenure's write.
        let task = h.object(TASKS, "t1").await.unwrap();
        let node = h.object(NODES, "n1").await.unwrap();
        assert_eq!(task.version, node.version);
        let events = h.events_with_reason(ASSIGNED).await;
        assert_eq!(events.len(), 1);
        assert_eq!(
            (events[0].kind.as_str(), events[0].name.as_str()),
            (TASKS, "t1")
        );
        assert_eq!(events[0].revision, task.version);
        assert!(
            events[0].message.contains("node n1"),
            "{}",
            events[0].message
        );
        assert_eq!(
            events[0].origin,
            Origin::Guest {
                lease: "scheduler".into(),
                epoch: Epoch(1),
                holder: "replica-1".into(),
            }
        );
        assert_eq!(h.commit_attempts(), 1);
        assert_eq!(h.counters().ok.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(h.history().await[0].writes, 1);

        // Its own write coming back through the watch: nothing to do.
        assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);
        assert_eq!(h.commit_attempts(), 1);
    }

    #[tokio::test]
    async fn a_conflicting_user_write_is_re_read_and_retried() {
        let mut h = load().await;
        node(&h, "n1", 1).await;
        pending(&h, "t1").await;
        // A user edits the task between the scheduler's read and its commit.
        h.before_commit(
            1,
            [RivalWrite::put(
                TASKS,
                "t1",
                json!({ "status": "pending", "priority": 7 }),
            )],
        );

        assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);

        assert_eq!(h.pending_faults(), 0, "the rival write landed");
        assert_eq!(h.commit_attempts(), 2, "one conflict, one retry");
        assert_eq!(
            h.counters()
                .conflict
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        assert_eq!(
            h.value(TASKS, "t1").await,
            json!({ "status": "assigned", "node": "n1", "priority": 7 }),
            "the retry is based on the re-read value"
        );
        assert_eq!(h.events_with_reason(ASSIGNED).await.len(), 1);
    }

    #[tokio::test]
    async fn a_rival_taking_the_last_slot_makes_it_conflict_instead_of_overfilling() {
        let mut h = load().await;
        node(&h, "n1", 1).await;
        pending(&h, "t1").await;
        pending(&h, "t2").await;
        // Another assignment, made by the rules (it bumps the node), lands
        // after the scheduler read n1 and the tasks, before its commit.
        h.before_commit(
            1,
            [
                RivalWrite::put(TASKS, "t2", json!({ "status": "assigned", "node": "n1" })),
                RivalWrite::put(NODES, "n1", json!({ "capacity": 1, "assigned": 1 })),
            ],
        );

        assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);

        assert_eq!(h.pending_faults(), 0);
        assert_eq!(h.commit_attempts(), 1, "the re-read finds no room");
        assert_eq!(pending_names(&h).await, ["t1"]);
        assert_eq!(usage(&h).await, BTreeMap::from([("n1".to_string(), 1)]));
        assert!(h.events_with_reason(ASSIGNED).await.is_empty());
    }

    #[tokio::test]
    async fn conflict_retries_are_bounded_then_requeued_soon() {
        let mut h = load().await;
        node(&h, "n1", 1).await;
        pending(&h, "t1").await;
        for n in 1..=RELENTLESS_CONFLICTS {
            h.fail_commit(n, CommitFault::Conflict);
        }

        let reply = h.reconcile(TASKS, "t1").await;

        let (message, retry_after) = failed_with(&reply);
        assert!(message.contains("conflict"), "{message}");
        assert!(retry_after.is_some(), "a short requeue, not the backoff");
        let attempts = h.commit_attempts();
        assert!(
            (2..RELENTLESS_CONFLICTS).contains(&attempts),
            "retried, but boundedly: {attempts} attempts"
        );
        assert_eq!(
            h.counters()
                .conflict
                .load(std::sync::atomic::Ordering::SeqCst),
            attempts,
            "every attempt met a real conflict"
        );
        assert_eq!(pending_names(&h).await, ["t1"]);

        // The requeued reconcile, with the contention over, succeeds.
        h.store().clear_faults();
        assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);
        assert_eq!(h.value(TASKS, "t1").await["node"], "n1");
    }

    #[tokio::test]
    async fn a_fenced_commit_stops_it_and_only_a_successor_assigns() {
        let mut h = load().await;
        node(&h, "n1", 1).await;
        pending(&h, "t1").await;
        h.fail_commit(1, CommitFault::Fenced);

        assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Fenced);

        assert_eq!(h.commit_attempts(), 1, "no retry after fenced");
        assert_eq!(
            h.counters()
                .fenced
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        assert_eq!(pending_names(&h).await, ["t1"]);
        assert!(h.events_with_reason(ASSIGNED).await.is_empty());
        // The deposed tenure stays deposed: every later attempt is fenced
        // by the store, not by the guest's memory.
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
    async fn a_revoked_tenure_is_aborted_before_any_write() {
        let mut h = load().await;
        node(&h, "n1", 1).await;
        pending(&h, "t1").await;
        h.revoke();

        let result = h.try_reconcile(TASKS, "t1").await;

        assert!(
            matches!(result, Err(GuestError::Aborted { .. })),
            "{result:?}"
        );
        assert_eq!(h.commit_attempts(), 0);
        assert_eq!(pending_names(&h).await, ["t1"]);
    }

    #[tokio::test]
    async fn an_unavailable_store_fails_for_backoff_and_recovers() {
        let mut h = load().await;
        node(&h, "n1", 1).await;
        pending(&h, "t1").await;
        h.set_unavailable(true);

        let reply = h.reconcile(TASKS, "t1").await;

        let (message, retry_after) = failed_with(&reply);
        assert!(message.contains("unavailable"), "{message}");
        assert_eq!(retry_after, None, "the host's exponential backoff decides");
        assert_eq!(pending_names(&h).await, ["t1"]);

        h.set_unavailable(false);
        assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);
        assert_eq!(h.value(TASKS, "t1").await["status"], "assigned");
    }

    #[tokio::test]
    async fn an_unavailable_commit_is_not_retried_blindly() {
        let mut h = load().await;
        node(&h, "n1", 1).await;
        pending(&h, "t1").await;
        h.fail_commit(1, CommitFault::Unavailable);

        let reply = h.reconcile(TASKS, "t1").await;

        assert_eq!(failed_with(&reply).1, None);
        assert_eq!(
            h.commit_attempts(),
            1,
            "the outcome is unknown: no retry without a re-read"
        );
        assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);
        assert_eq!(h.events_with_reason(ASSIGNED).await.len(), 1);
    }

    #[tokio::test]
    async fn never_assigns_over_capacity() {
        let mut h = load().await;
        node(&h, "n1", 1).await;
        node(&h, "n2", 2).await;
        node(&h, "n3", 0).await;
        for name in ["t1", "t2", "t3", "t4", "t5"] {
            pending(&h, name).await;
        }

        for (key, reply) in h.resync().await {
            assert_eq!(reply, Reconciled::Done, "{key}");
        }

        assert_within_capacity(&h).await;
        assert_eq!(
            usage(&h).await,
            BTreeMap::from([("n1".to_string(), 1), ("n2".to_string(), 2)])
        );
        assert_eq!(pending_names(&h).await, ["t4", "t5"]);
        assert_eq!(h.events_with_reason(ASSIGNED).await.len(), 3);

        // A full cluster stays as it is.
        let attempts = h.commit_attempts();
        h.resync().await;
        assert_eq!(h.commit_attempts(), attempts);

        // Room on a node is used as soon as the node changes.
        node(&h, "n3", 1).await;
        assert_eq!(h.reconcile(NODES, "n3").await, Reconciled::Done);
        assert_eq!(pending_names(&h).await, ["t5"]);
        assert_within_capacity(&h).await;
    }

    /// Slots come back through the real boundary as in the fake host: a
    /// task that finishes, and one a user deletes (held by the scheduler's
    /// finalizer until its slot is freed), each lower their node's count
    /// and leave the finalizer, and a task waiting for room is placed.
    #[tokio::test]
    async fn finished_and_deleted_tasks_free_their_slots_for_waiting_ones() {
        const SLOT: &str = "scheduler/slot";
        let mut h = load().await;
        node(&h, "n1", 1).await;
        pending(&h, "t1").await;
        h.resync().await;
        let t1 = h.object(TASKS, "t1").await.unwrap();
        assert_eq!(h.value(TASKS, "t1").await["node"], "n1");
        assert!(t1.meta.finalizers.iter().any(|f| f == SLOT), "{t1:?}");
        assert_eq!(h.value(NODES, "n1").await["assigned"], 1);

        // No room: t2 waits.
        pending(&h, "t2").await;
        assert_eq!(h.reconcile(TASKS, "t2").await, Reconciled::Done);
        assert_eq!(pending_names(&h).await, ["t2"]);

        // t1 finishes: its slot goes to t2.
        h.seed(TASKS, "t1", &json!({ "status": "done", "node": "n1" }))
            .await;
        assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);
        let t1 = h.object(TASKS, "t1").await.unwrap();
        assert!(!t1.meta.finalizers.iter().any(|f| f == SLOT), "{t1:?}");
        assert_eq!(h.value(TASKS, "t2").await["node"], "n1");
        assert_eq!(h.value(NODES, "n1").await["assigned"], 1);
        assert_within_capacity(&h).await;

        // t2 is deleted: marked while it holds the slot, then freed and gone.
        h.remove(TASKS, "t2").await;
        let marked = h.object(TASKS, "t2").await.expect("the finalizer holds it");
        assert!(marked.deleting_since.is_some());
        assert_eq!(h.reconcile(TASKS, "t2").await, Reconciled::Done);
        assert_eq!(h.object(TASKS, "t2").await, None);
        assert_eq!(h.value(NODES, "n1").await["assigned"], 0);
        let released: Vec<String> = h
            .events_with_reason("Released")
            .await
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(released, ["t1", "t2"]);
    }

    #[tokio::test]
    async fn assignments_per_reconcile_are_bounded() {
        let mut h = load().await;
        // More than the scheduler places in one reconcile (1000, in
        // commits of up to 127 tasks).
        let total = 1100;
        node(&h, "n1", total).await;
        for i in 0..total {
            pending(&h, &format!("t{i:04}")).await;
        }

        assert_eq!(
            h.reconcile(NODES, "n1").await,
            Reconciled::RequeueAfter(Duration::ZERO),
            "more work: requeued at once"
        );
        let placed = total - pending_names(&h).await.len() as u64;
        assert!(placed > 0 && placed < total, "{placed} placed");
        assert!(
            h.commit_attempts() < placed / 100,
            "{} commits for {placed} tasks",
            h.commit_attempts()
        );

        // Each requeued reconcile makes progress, so this ends; bounded in
        // case it does not.
        for reconciles in 2.. {
            if h.reconcile(NODES, "n1").await == Reconciled::Done {
                break;
            }
            assert!(reconciles < total, "not done after {reconciles} reconciles");
        }
        assert!(pending_names(&h).await.is_empty());
        assert_eq!(h.value(NODES, "n1").await["assigned"], total);
        assert_within_capacity(&h).await;
    }

    #[tokio::test]
    async fn a_successor_re_running_after_a_lost_reply_does_not_assign_twice() {
        let mut h = load().await;
        node(&h, "n1", 2).await;
        pending(&h, "t1").await;
        // The commit lands, then the guest never hears back.
        h.fail_commit(1, CommitFault::LostReply);
        let reply = h.reconcile(TASKS, "t1").await;
        assert_eq!(failed_with(&reply).1, None, "{reply:?}");
        assert_eq!(h.value(TASKS, "t1").await["node"], "n1", "it did land");

        // A successor: a new tenure and a fresh instance, re-running the
        // same reconcile, then a resync as at the start of a tenure.
        assert_eq!(h.new_tenure().await.epoch, Epoch(2));
        assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);
        for (key, reply) in h.resync().await {
            assert_eq!(reply, Reconciled::Done, "{key}");
        }

        assert_eq!(h.commit_attempts(), 1, "the successor wrote nothing");
        assert_eq!(epochs(&h.events_with_reason(ASSIGNED).await), [1]);
        assert_eq!(
            h.value(NODES, "n1").await["assigned"],
            1,
            "the node's count was not bumped twice"
        );
        assert_eq!(usage(&h).await, BTreeMap::from([("n1".to_string(), 1)]));
        let writes: Vec<u64> = h.history().await.iter().map(|t| t.writes).collect();
        assert_eq!(writes, [1, 0]);
    }
}

mod rollout {
    use super::*;

    const SERVICES: &str = "services";
    const STEPPED: &str = "Stepped";
    const COMPLETE: &str = "RolloutComplete";
    const FAILED: &str = "RolloutFailed";
    /// `rollout::STEP_INTERVAL`: the requeue after a step short of the goal.
    const STEP_INTERVAL: Duration = Duration::from_secs(5);

    async fn load() -> ComponentHarness {
        ComponentHarness::load("rollout").await
    }

    fn spec(current: &str, desired: &str) -> Value {
        json!({
            "current": current,
            "desired": desired,
            "steps": ["v1", "v2", "v3"],
            "owner": "team-a",
        })
    }

    async fn service(h: &ComponentHarness, current: &str, desired: &str) {
        h.seed(SERVICES, "web", &spec(current, desired)).await;
    }

    async fn web(h: &ComponentHarness) -> Value {
        h.value(SERVICES, "web").await
    }

    async fn reconcile(h: &mut ComponentHarness) -> Reconciled {
        h.reconcile(SERVICES, "web").await
    }

    /// The `from -> to` of every `Stepped` event, in order.
    async fn steps_taken(h: &ComponentHarness) -> Vec<String> {
        h.events_with_reason(STEPPED)
            .await
            .into_iter()
            .map(|e| e.message.split(';').next().unwrap().to_string())
            .collect()
    }

    #[tokio::test]
    async fn describes_services_with_a_resync() {
        let mut h = load().await;
        let description = h.describe().await;
        assert_eq!(description.watches, [SERVICES]);
        assert_eq!(description.resync_period, Some(Duration::from_secs(300)));
    }

    #[tokio::test]
    async fn rolls_forward_one_step_per_reconcile_with_an_event_each() {
        let mut h = load().await;
        service(&h, "v1", "v3").await;

        assert_eq!(
            reconcile(&mut h).await,
            Reconciled::RequeueAfter(STEP_INTERVAL)
        );
        assert_eq!(web(&h).await["current"], "v2");
        assert_eq!(web(&h).await["phase"], "Progressing");

        assert_eq!(reconcile(&mut h).await, Reconciled::Done);
        assert_eq!(
            web(&h).await,
            json!({
                "current": "v3",
                "desired": "v3",
                "steps": ["v1", "v2", "v3"],
                "owner": "team-a",
                "phase": "Complete",
            })
        );
        assert_eq!(steps_taken(&h).await, ["v1 -> v2", "v2 -> v3"]);
        let complete = h.events_with_reason(COMPLETE).await;
        assert_eq!(complete.len(), 1);
        let stepped = h.events_with_reason(STEPPED).await;
        assert_eq!(
            complete[0].revision, stepped[1].revision,
            "the last step and its completion are one commit"
        );
        assert_eq!(epochs(&stepped), [1, 1]);

        // Done is done: nothing more is written.
        assert_eq!(reconcile(&mut h).await, Reconciled::Done);
        assert_eq!(h.commit_attempts(), 2);
    }

    #[tokio::test]
    async fn rolls_back_through_the_steps_in_reverse() {
        let mut h = load().await;
        service(&h, "v3", "v1").await;
        assert_eq!(
            reconcile(&mut h).await,
            Reconciled::RequeueAfter(STEP_INTERVAL)
        );
        assert_eq!(reconcile(&mut h).await, Reconciled::Done);
        assert_eq!(steps_taken(&h).await, ["v3 -> v2", "v2 -> v1"]);
        assert_eq!(web(&h).await["current"], "v1");
    }

    #[tokio::test]
    async fn a_conflicting_user_write_is_re_read_and_the_step_replanned() {
        let mut h = load().await;
        service(&h, "v1", "v3").await;
        // A user lowers the target while the first step is being committed.
        h.before_commit(1, [RivalWrite::put(SERVICES, "web", spec("v1", "v2"))]);

        assert_eq!(
            reconcile(&mut h).await,
            Reconciled::Done,
            "v2 is now the last step"
        );

        assert_eq!(h.pending_faults(), 0, "the rival write landed");
        assert_eq!(h.commit_attempts(), 2, "one conflict, one retry");
        assert_eq!(steps_taken(&h).await, ["v1 -> v2"]);
        assert_eq!(
            web(&h).await["desired"],
            "v2",
            "the retry kept the user's change"
        );
        assert_eq!(web(&h).await["phase"], "Complete");
    }

    #[tokio::test]
    async fn a_step_raced_by_the_same_step_lands_once() {
        let mut h = load().await;
        service(&h, "v1", "v3").await;
        // Someone else takes the very step first; ours was planned from
        // the version before it.
        let mut stepped = spec("v2", "v3");
        stepped["phase"] = json!("Progressing");
        h.before_commit(1, [RivalWrite::put(SERVICES, "web", stepped)]);

        assert_eq!(reconcile(&mut h).await, Reconciled::Done);

        assert_eq!(h.pending_faults(), 0);
        assert_eq!(
            steps_taken(&h).await,
            ["v2 -> v3"],
            "the raced step is not repeated; the loser moved on to the next"
        );
        assert_eq!(web(&h).await["current"], "v3");
    }

    #[tokio::test]
    async fn conflict_retries_are_bounded_then_requeued_soon() {
        let mut h = load().await;
        service(&h, "v1", "v3").await;
        for n in 1..=RELENTLESS_CONFLICTS {
            h.fail_commit(n, CommitFault::Conflict);
        }

        let reply = reconcile(&mut h).await;

        let (message, retry_after) = failed_with(&reply);
        assert!(message.contains("conflict"), "{message}");
        assert!(retry_after.is_some(), "a short requeue, not the backoff");
        let attempts = h.commit_attempts();
        assert!(
            (2..RELENTLESS_CONFLICTS).contains(&attempts),
            "retried, but boundedly: {attempts} attempts"
        );
        assert!(steps_taken(&h).await.is_empty());
        assert_eq!(web(&h).await["current"], "v1");

        h.store().clear_faults();
        assert_eq!(
            reconcile(&mut h).await,
            Reconciled::RequeueAfter(STEP_INTERVAL)
        );
        assert_eq!(steps_taken(&h).await, ["v1 -> v2"]);
    }

    #[tokio::test]
    async fn a_fenced_commit_stops_it_and_the_successor_takes_the_step_once() {
        let mut h = load().await;
        service(&h, "v1", "v3").await;
        h.fail_commit(1, CommitFault::Fenced);

        assert_eq!(reconcile(&mut h).await, Reconciled::Fenced);

        assert_eq!(h.commit_attempts(), 1, "no retry after fenced");
        assert!(steps_taken(&h).await.is_empty());
        assert_eq!(web(&h).await["current"], "v1");

        h.new_tenure().await;
        assert_eq!(
            reconcile(&mut h).await,
            Reconciled::RequeueAfter(STEP_INTERVAL)
        );
        assert_eq!(steps_taken(&h).await, ["v1 -> v2"]);
        assert_eq!(epochs(&h.events_with_reason(STEPPED).await), [3]);
    }

    #[tokio::test]
    async fn a_revoked_tenure_is_aborted_before_any_write() {
        let mut h = load().await;
        service(&h, "v1", "v3").await;
        h.revoke();
        let result = h.try_reconcile(SERVICES, "web").await;
        assert!(
            matches!(result, Err(GuestError::Aborted { .. })),
            "{result:?}"
        );
        assert_eq!(h.commit_attempts(), 0);
    }

    #[tokio::test]
    async fn an_unavailable_store_fails_for_backoff_and_recovers() {
        let mut h = load().await;
        service(&h, "v1", "v3").await;
        h.set_unavailable(true);

        let reply = reconcile(&mut h).await;

        let (message, retry_after) = failed_with(&reply);
        assert!(message.contains("unavailable"), "{message}");
        assert_eq!(retry_after, None, "the host's exponential backoff decides");
        assert_eq!(h.commit_attempts(), 0);

        h.set_unavailable(false);
        assert_eq!(
            reconcile(&mut h).await,
            Reconciled::RequeueAfter(STEP_INTERVAL)
        );
        assert_eq!(steps_taken(&h).await, ["v1 -> v2"]);
    }

    #[tokio::test]
    async fn an_unavailable_commit_is_not_retried_blindly() {
        let mut h = load().await;
        service(&h, "v1", "v3").await;
        h.fail_commit(1, CommitFault::Unavailable);

        assert_eq!(failed_with(&reconcile(&mut h).await).1, None);
        assert_eq!(h.commit_attempts(), 1);
        assert_eq!(
            reconcile(&mut h).await,
            Reconciled::RequeueAfter(STEP_INTERVAL)
        );
        assert_eq!(steps_taken(&h).await, ["v1 -> v2"]);
    }

    #[tokio::test]
    async fn a_service_over_the_step_limit_is_marked_failed_once() {
        let mut h = load().await;
        // One version more than a service may list (`rollout::MAX_STEPS`).
        let steps: Vec<String> = (0..=64).map(|i| format!("v{i}")).collect();
        h.seed(
            SERVICES,
            "web",
            &json!({ "current": "v0", "desired": "v1", "steps": steps }),
        )
        .await;

        assert_eq!(reconcile(&mut h).await, Reconciled::Done);

        let web_now = web(&h).await;
        assert_eq!(web_now["phase"], "Failed");
        assert!(
            web_now["message"].as_str().unwrap().contains("limit"),
            "{web_now}"
        );
        assert_eq!(web_now["current"], "v0", "no step was taken");
        assert_eq!(h.events_with_reason(FAILED).await.len(), 1);

        // Its own status write wakes the watch: that reconcile writes
        // nothing.
        assert_eq!(reconcile(&mut h).await, Reconciled::Done);
        assert_eq!(h.commit_attempts(), 1);
    }

    #[tokio::test]
    async fn a_successor_re_running_after_a_lost_reply_does_not_repeat_the_step() {
        let mut h = load().await;
        service(&h, "v1", "v3").await;
        // The first step lands, but the guest never hears back.
        h.fail_commit(1, CommitFault::LostReply);
        let reply = reconcile(&mut h).await;
        assert_eq!(failed_with(&reply).1, None, "{reply:?}");
        assert_eq!(web(&h).await["current"], "v2", "it did land");

        assert_eq!(h.new_tenure().await.epoch, Epoch(2));
        assert_eq!(
            reconcile(&mut h).await,
            Reconciled::Done,
            "it takes the next step, not the same one again"
        );

        assert_eq!(steps_taken(&h).await, ["v1 -> v2", "v2 -> v3"]);
        assert_eq!(epochs(&h.events_with_reason(STEPPED).await), [1, 2]);
        assert_eq!(reconcile(&mut h).await, Reconciled::Done);
        assert_eq!(h.commit_attempts(), 2);
        let writes: Vec<u64> = h.history().await.iter().map(|t| t.writes).collect();
        assert_eq!(writes, [1, 1]);
    }
}

/// The guide's example (`guest-sdk/README.md`, whose source is
/// `guest-sdk/examples/admission.rs`) built as the crate an author would
/// copy from the guide (`tests/fixtures/admission`), running in the host.
mod guide {
    use std::path::{Path, PathBuf};

    use super::*;

    const JOBS: &str = "jobs";

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the tests crate lives in the workspace")
            .to_path_buf()
    }

    #[tokio::test]
    async fn the_guides_controller_runs_in_the_host() {
        let mut h = ComponentHarness::load("admission").await;
        let description = h.describe().await;
        assert_eq!(description.watches, [JOBS]);
        assert_eq!(description.resync_period, Some(Duration::from_secs(60)));
        h.seed(JOBS, "j1", &json!({ "state": "new" })).await;

        assert_eq!(h.reconcile(JOBS, "j1").await, Reconciled::Done);
        assert_eq!(h.reconcile(JOBS, "j1").await, Reconciled::Done);

        // The ticket is the fence's idempotency key, as the host gives it.
        assert_eq!(
            h.value(JOBS, "j1").await,
            json!({ "state": "admitted", "ticket": format!("{CLUSTER}/admission/1/j1") })
        );
        let admitted = h.events_with_reason("Admitted").await;
        assert_eq!(epochs(&admitted), [1]);
        assert_eq!(h.commit_attempts(), 1);
    }

    #[tokio::test]
    async fn the_guides_controller_stops_when_fenced_and_its_successor_admits_once() {
        let mut h = ComponentHarness::load("admission").await;
        h.seed(JOBS, "j1", &json!({ "state": "new" })).await;
        h.fail_commit(1, CommitFault::Fenced);
        assert_eq!(h.reconcile(JOBS, "j1").await, Reconciled::Fenced);
        assert_eq!(h.value(JOBS, "j1").await["state"], "new");

        h.new_tenure().await;
        h.fail_commit(1, CommitFault::LostReply);
        assert!(matches!(
            h.reconcile(JOBS, "j1").await,
            Reconciled::Failed { .. }
        ));
        h.new_tenure().await;
        assert_eq!(h.reconcile(JOBS, "j1").await, Reconciled::Done);

        assert_eq!(
            h.value(JOBS, "j1").await["ticket"],
            format!("{CLUSTER}/admission/3/j1"),
            "admitted by the tenure whose reply was lost"
        );
        assert_eq!(epochs(&h.events_with_reason("Admitted").await), [3]);
    }

    /// The lines of a manifest that matter: no comments, no blank lines,
    /// and the SDK dependency without its path (which depends on where
    /// the crate lives).
    fn manifest_lines(text: &str) -> Vec<String> {
        text.lines()
            .map(|line| line.split('#').next().unwrap().trim())
            .filter(|line| !line.is_empty())
            .map(|line| {
                if line.starts_with("leasehold-guest = { path = ")
                    && line.ends_with("guest-sdk\" }")
                {
                    "leasehold-guest = { path = <the SDK> }".to_string()
                } else {
                    line.to_string()
                }
            })
            .collect()
    }

    #[test]
    fn the_fixture_is_the_guides_crate_and_its_example_file() {
        let readme = std::fs::read_to_string(root().join("guest-sdk/README.md")).unwrap();
        let guide_manifest = readme
            .split("```toml\n")
            .nth(1)
            .and_then(|block| block.split("```").next())
            .expect("the guide shows the crate's Cargo.toml first");
        assert!(
            guide_manifest.contains("name = \"admission\""),
            "{guide_manifest}"
        );
        let fixture_dir = root().join("tests/fixtures/admission");
        let fixture_manifest = std::fs::read_to_string(fixture_dir.join("Cargo.toml")).unwrap();

        // Only the fixture's extras differ: where its source is (the
        // guide's own example file, not a copy), and that it is not
        // published.
        let source = "path = \"../../../guest-sdk/examples/admission.rs\"";
        let mut fixture = manifest_lines(&fixture_manifest);
        let extras = [source, "publish = false"];
        for extra in extras {
            let at = fixture.iter().position(|l| l == extra);
            fixture.remove(at.unwrap_or_else(|| panic!("the fixture's manifest lacks {extra}")));
        }
        assert_eq!(fixture, manifest_lines(guide_manifest));

        let example = root().join("guest-sdk/examples/admission.rs");
        assert_eq!(
            fixture_dir
                .join("../../../guest-sdk/examples/admission.rs")
                .canonicalize()
                .unwrap(),
            example.canonicalize().unwrap()
        );
        let example = std::fs::read_to_string(example).unwrap();
        assert!(
            readme.contains(&example),
            "the guide shows guest-sdk/examples/admission.rs verbatim"
        );
    }
}
