//! The scheduler's behaviour against the SDK's fake host: no Wasm build,
//! no host, no database.
// The fake host exists on native targets only; these tests are what
// `cargo test` runs there.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;

use leasehold_guest::{
    At, Controller, FakeHost, Fault, MAX_EVENTS_PER_COMMIT, MAX_OPS_PER_COMMIT, Op, Reason, Reply,
    Shard,
};
use scheduler::{
    ASSIGNED_REASON, CONFLICT_RETRY_AFTER, MAX_ASSIGNMENTS_PER_RECONCILE, MAX_CONFLICT_RETRIES,
    NODE_LABEL, NODES, RELEASED_REASON, SLOT_FINALIZER, Scheduler, TASKS,
};
use serde_json::{Value, json};

fn node(host: &FakeHost, name: &str, capacity: u64) -> u64 {
    host.seed(NODES, name, &json!({ "capacity": capacity }))
}

fn pending(host: &FakeHost, name: &str) -> u64 {
    host.seed(TASKS, name, &json!({ "status": "pending" }))
}

fn task(host: &FakeHost, name: &str) -> Value {
    host.object::<Value>(TASKS, name)
        .expect("task exists")
        .value
}

/// Tasks per node, counted from the tasks themselves.
fn usage(host: &FakeHost) -> BTreeMap<String, u64> {
    let mut usage = BTreeMap::new();
    for task in host.objects::<Value>(TASKS) {
        if task.value["status"] == "assigned" {
            let node = task.value["node"]
                .as_str()
                .expect("assigned tasks name a node");
            *usage.entry(node.to_string()).or_default() += 1;
        }
    }
    usage
}

fn assert_within_capacity(host: &FakeHost) {
    for (name, used) in usage(host) {
        let node = host.object::<Value>(NODES, &name).expect("node exists");
        let capacity = node.value["capacity"].as_u64().unwrap();
        assert!(
            used <= capacity,
            "{name} has {used} tasks for {capacity} slots"
        );
    }
}

fn pending_names(host: &FakeHost) -> Vec<String> {
    host.objects::<Value>(TASKS)
        .into_iter()
        .filter(|t| t.value["status"] == "pending")
        .map(|t| t.name)
        .collect()
}

fn failed_with(reply: &Reply) -> (&str, Option<std::time::Duration>) {
    match reply {
        Reply::Failed {
            message,
            retry_after,
        } => (message, *retry_after),
        other => panic!("expected a failed reconcile, got {other:?}"),
    }
}

#[test]
fn describes_nodes_and_tasks_with_a_resync() {
    let description = Scheduler::new().describe();
    assert_eq!(description.watches, [TASKS, NODES]);
    assert_eq!(
        description.every_shard,
        [NODES],
        "every shard sees every node"
    );
    assert_eq!(description.shard_label, None, "tasks shard by name");
    assert_eq!(description.resync, Some(scheduler::RESYNC_PERIOD));
}

/// Run as shard 0 of 2, the scheduler places only the pending tasks of
/// its shard; shard 1's next tenure places the rest. Node slots are
/// shared: both count on the node's `assigned`.
#[test]
fn a_shard_places_only_its_own_tasks() {
    let host = FakeHost::new();
    node(&host, "n1", 100);
    let names: Vec<String> = (0..20).map(|i| format!("t-{i}")).collect();
    for name in &names {
        pending(&host, name);
    }
    // In the store's (name) order, as `pending_names` lists them.
    let ours = |index| {
        let mut ours: Vec<String> = names
            .iter()
            .filter(|n| Shard::of_key(TASKS, n, 2) == index)
            .cloned()
            .collect();
        ours.sort();
        ours
    };
    assert!(
        !ours(0).is_empty() && !ours(1).is_empty(),
        "both shards have tasks"
    );

    host.set_shard(Shard { index: 0, count: 2 });
    assert_eq!(
        host.reconcile(&Scheduler::new(), TASKS, &ours(0)[0]),
        Reply::Done
    );
    assert_eq!(pending_names(&host), ours(1), "shard 1's tasks are left");

    host.new_tenure();
    host.set_shard(Shard { index: 1, count: 2 });
    assert_eq!(
        host.reconcile(&Scheduler::new(), TASKS, &ours(1)[0]),
        Reply::Done
    );
    assert!(pending_names(&host).is_empty());
    let n1 = host.object::<Value>(NODES, "n1").unwrap().value;
    assert_eq!(n1["assigned"], 20, "one count across both shards");
    assert_within_capacity(&host);
}

/// Two shards share a node of 12 slots and 30 pending tasks, taking turns:
/// exactly 12 are placed, and the node is never over capacity.
#[test]
fn shards_share_a_nodes_capacity() {
    let host = FakeHost::new();
    node(&host, "n1", 12);
    for i in 0..30 {
        pending(&host, &format!("t-{i}"));
    }
    for turn in 0..4 {
        host.new_tenure();
        host.set_shard(Shard {
            index: turn % 2,
            count: 2,
        });
        let reply = host.reconcile_because(&Scheduler::new(), NODES, "n1", Reason::Resync);
        assert_eq!(reply, Reply::Done, "turn {turn}");
        assert_within_capacity(&host);
    }
    assert_eq!(usage(&host), BTreeMap::from([("n1".to_string(), 12)]));
    assert_eq!(pending_names(&host).len(), 18);
}

#[test]
fn assigns_a_pending_task_with_its_node_and_event_in_one_commit() {
    let host = FakeHost::new();
    host.seed(NODES, "n1", &json!({ "capacity": 2, "zone": "a" }));
    host.seed(
        TASKS,
        "t1",
        &json!({ "status": "pending", "image": "busybox" }),
    );

    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);

    assert_eq!(
        task(&host, "t1"),
        json!({ "status": "assigned", "node": "n1", "image": "busybox" })
    );
    let node = host.object::<Value>(NODES, "n1").unwrap().value;
    assert_eq!(node, json!({ "capacity": 2, "zone": "a", "assigned": 1 }));

    let commits = host.commits();
    assert_eq!(commits.len(), 1, "one atomic commit");
    let keys: Vec<String> = commits[0]
        .ops
        .iter()
        .map(|op| op.key().to_string())
        .collect();
    assert_eq!(keys, ["tasks/t1", "nodes/n1"]);
    assert!(
        matches!(commits[0].ops[0], Op::Replace { .. }),
        "the task's value and metadata in one conditional write"
    );
    assert!(
        matches!(commits[0].ops[1], Op::Update { .. }),
        "the node's count, conditionally"
    );
    let t1 = host.object::<Value>(TASKS, "t1").unwrap();
    assert_eq!(t1.finalizers(), [SLOT_FINALIZER], "t1 holds a slot");
    assert_eq!(t1.label(NODE_LABEL), Some("n1"));
    let events = host.events_with_reason(ASSIGNED_REASON);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].key.to_string(), "tasks/t1");
    assert_eq!(events[0].revision, commits[0].revision);
    assert!(
        events[0].message.contains("node n1"),
        "{}",
        events[0].message
    );
}

#[test]
fn never_assigns_over_capacity() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    node(&host, "n2", 2);
    node(&host, "n3", 0);
    for name in ["t1", "t2", "t3", "t4", "t5"] {
        pending(&host, name);
    }

    for (key, reply) in host.resync(&Scheduler::new()) {
        assert_eq!(reply, Reply::Done, "{key}");
    }

    assert_within_capacity(&host);
    assert_eq!(
        usage(&host),
        BTreeMap::from([("n1".to_string(), 1), ("n2".to_string(), 2)])
    );
    assert_eq!(pending_names(&host), ["t4", "t5"]);
    assert_eq!(host.events_with_reason(ASSIGNED_REASON).len(), 3);

    // A full cluster stays as it is.
    let commits = host.commits().len();
    host.resync(&Scheduler::new());
    assert_eq!(host.commits().len(), commits);

    // Room on a node is used as soon as the node changes.
    host.seed(NODES, "n3", &json!({ "capacity": 1 }));
    assert_eq!(host.reconcile(&Scheduler::new(), NODES, "n3"), Reply::Done);
    assert_eq!(pending_names(&host), ["t5"]);
    assert_within_capacity(&host);
}

#[test]
fn spreads_tasks_to_the_node_with_most_free_slots() {
    let host = FakeHost::new();
    node(&host, "a", 1);
    node(&host, "b", 3);
    pending(&host, "t1");
    pending(&host, "t2");
    pending(&host, "t3");
    assert_eq!(host.reconcile(&Scheduler::new(), NODES, "a"), Reply::Done);
    let placed: Vec<Value> = ["t1", "t2", "t3"]
        .iter()
        .map(|t| task(&host, t)["node"].clone())
        .collect();
    // b has 3 free, then 2 against a's 1; then they tie at 1 and a comes
    // first in name order.
    assert_eq!(placed, [json!("b"), json!("b"), json!("a")]);
}

#[test]
fn a_finished_task_frees_its_slot() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    pending(&host, "t2");
    host.resync(&Scheduler::new());
    assert_eq!(pending_names(&host), ["t2"]);

    host.seed(TASKS, "t1", &json!({ "status": "done", "node": "n1" }));
    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
    assert_eq!(task(&host, "t2")["node"], "n1");
    assert_within_capacity(&host);

    // t1 gave up its slot: no finalizer, no label, a Released event, in
    // the same commit as the node's lower count.
    let t1 = host.object::<Value>(TASKS, "t1").unwrap();
    assert!(t1.finalizers().is_empty());
    assert_eq!(t1.label(NODE_LABEL), None);
    assert_eq!(t1.value, json!({ "status": "done", "node": "n1" }));
    let released = host.events_with_reason(RELEASED_REASON);
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].key.to_string(), "tasks/t1");
    let commits = host.commits();
    let release = commits
        .iter()
        .find(|c| c.revision == released[0].revision)
        .unwrap();
    let keys: Vec<String> = release.ops.iter().map(|op| op.key().to_string()).collect();
    assert_eq!(keys, ["tasks/t1", "nodes/n1"]);
    // Then t2 took it: the node counts one again.
    assert_eq!(node_count(&host, "n1"), Some(1));

    // Reconciling t1 again frees nothing more.
    let commits = host.commits().len();
    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
    assert_eq!(host.commits().len(), commits);
}

#[test]
fn a_conflict_is_re_read_and_retried() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    // A user edits the task between our read and our commit.
    host.before_commit(1, |host| {
        host.seed(TASKS, "t1", &json!({ "status": "pending", "priority": 7 }));
    });

    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);

    assert_eq!(host.pending_faults(), 0, "the concurrent write happened");
    assert_eq!(host.calls().commit, 2, "one conflict, one retry");
    assert_eq!(host.commits().len(), 1);
    assert_eq!(
        task(&host, "t1"),
        json!({ "status": "assigned", "node": "n1", "priority": 7 }),
        "the retry is based on the re-read value"
    );
}

#[test]
fn racing_for_the_last_slot_conflicts_instead_of_overfilling() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    pending(&host, "t2");
    // Another assignment takes n1's only slot after we read n1 and the
    // tasks, but before we commit. It did its job properly: it bumped the
    // node.
    host.before_commit(1, |host| {
        host.seed(TASKS, "t2", &json!({ "status": "assigned", "node": "n1" }));
        host.seed(NODES, "n1", &json!({ "capacity": 1, "assigned": 1 }));
    });

    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);

    assert_eq!(host.pending_faults(), 0);
    assert_eq!(
        task(&host, "t1")["status"],
        "pending",
        "no room left for t1"
    );
    assert_eq!(usage(&host), BTreeMap::from([("n1".to_string(), 1)]));
    assert!(host.commits().is_empty());
}

/// A rival assignment of t2 to n1 that plays by the rules: it bumps the
/// node, as the scheduler does.
fn rival_takes_n1(host: &FakeHost) {
    host.seed(TASKS, "t2", &json!({ "status": "assigned", "node": "n1" }));
    host.seed(NODES, "n1", &json!({ "capacity": 1, "assigned": 1 }));
}

fn one_slot_two_tasks() -> FakeHost {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    pending(&host, "t2");
    host
}

#[test]
fn a_rival_assignment_landing_between_any_two_calls_never_overfills() {
    // How many store calls placing t1 takes, up to and including its
    // commit, when nothing gets in the way.
    let calls = {
        let host = one_slot_two_tasks();
        assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
        assert_eq!(host.calls().commit, 1);
        host.calls().total()
    };
    assert!(
        calls >= 3,
        "reads the task, the nodes and the tasks, then commits"
    );

    for n in 1..=calls {
        let host = one_slot_two_tasks();
        host.before(At::Call(n), rival_takes_n1);

        assert_eq!(
            host.reconcile(&Scheduler::new(), TASKS, "t1"),
            Reply::Done,
            "rival before call {n}"
        );

        assert_eq!(host.pending_faults(), 0);
        assert_eq!(
            usage(&host),
            BTreeMap::from([("n1".to_string(), 1)]),
            "rival before call {n}"
        );
        assert_eq!(
            task(&host, "t1")["status"],
            "pending",
            "rival before call {n}"
        );
    }
}

#[test]
fn a_task_assigned_meanwhile_is_not_assigned_again() {
    let host = FakeHost::new();
    node(&host, "n1", 5);
    node(&host, "n2", 5);
    pending(&host, "t1");
    host.before_commit(1, |host| {
        host.seed(TASKS, "t1", &json!({ "status": "assigned", "node": "n2" }));
    });

    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);

    assert_eq!(task(&host, "t1")["node"], "n2");
    assert!(host.events_with_reason(ASSIGNED_REASON).is_empty());
    assert!(host.commits().is_empty());
}

#[test]
fn conflict_retries_are_bounded_then_requeued_soon() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    let attempts = u64::from(MAX_CONFLICT_RETRIES) + 1;
    for n in 1..=attempts {
        host.fail(At::Commit(n), Fault::Conflict);
    }

    let reply = host.reconcile(&Scheduler::new(), TASKS, "t1");

    let (message, retry_after) = failed_with(&reply);
    assert!(message.contains("conflict"), "{message}");
    assert_eq!(retry_after, Some(CONFLICT_RETRY_AFTER));
    assert_eq!(host.calls().commit, attempts);
    assert_eq!(host.pending_faults(), 0);
    assert!(host.commits().is_empty());

    // The requeued reconcile, with the contention over, succeeds.
    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
    assert_eq!(task(&host, "t1")["status"], "assigned");
}

#[test]
fn a_fenced_commit_stops_without_retrying() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    host.fail_next_commit(Fault::Fenced);

    assert_eq!(
        host.reconcile(&Scheduler::new(), TASKS, "t1"),
        Reply::Fenced
    );

    assert_eq!(host.calls().commit, 1, "no retry after fenced");
    assert!(host.commits().is_empty());
    assert_eq!(task(&host, "t1")["status"], "pending");
    // The tenure is over for good: so is every later reconcile.
    assert_eq!(
        host.reconcile(&Scheduler::new(), NODES, "n1"),
        Reply::Fenced
    );
}

#[test]
fn a_revoked_lease_stops_before_any_write() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    host.revoke();

    assert_eq!(
        host.reconcile(&Scheduler::new(), TASKS, "t1"),
        Reply::Fenced
    );
    assert_eq!(host.calls().commit, 0);
}

#[test]
fn an_unavailable_store_fails_for_backoff_and_recovers() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    host.set_unavailable(true);

    let reply = host.reconcile(&Scheduler::new(), TASKS, "t1");
    let (message, retry_after) = failed_with(&reply);
    assert!(message.contains("unavailable"), "{message}");
    assert_eq!(retry_after, None, "the host's exponential backoff decides");

    host.set_unavailable(false);
    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
    assert_eq!(task(&host, "t1")["status"], "assigned");
}

#[test]
fn an_unavailable_commit_is_not_retried_blindly() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    host.fail_next_commit(Fault::Unavailable);

    let reply = host.reconcile(&Scheduler::new(), TASKS, "t1");
    assert_eq!(failed_with(&reply).1, None);
    assert_eq!(
        host.calls().commit,
        1,
        "the outcome is unknown: no retry without a re-read"
    );

    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
    assert_eq!(host.events_with_reason(ASSIGNED_REASON).len(), 1);
}

#[test]
fn a_successor_re_running_after_a_lost_reply_does_not_assign_twice() {
    let host = FakeHost::new();
    node(&host, "n1", 2);
    pending(&host, "t1");
    // The commit lands, then the guest never hears back (the connection
    // dropped, or the guest was torn down before replying).
    host.fail_next_commit(Fault::LostReply);
    let reply = host.reconcile(&Scheduler::new(), TASKS, "t1");
    assert!(matches!(reply, Reply::Failed { .. }), "{reply:?}");

    // A successor: a new tenure and a fresh controller, re-running the
    // same reconcile (and a resync, as at the start of a tenure).
    host.new_tenure();
    let successor = Scheduler::new();
    assert_eq!(host.reconcile(&successor, TASKS, "t1"), Reply::Done);
    host.resync(&successor);

    assert_eq!(host.commits().len(), 1, "the assignment landed once");
    assert_eq!(host.events_with_reason(ASSIGNED_REASON).len(), 1);
    assert_eq!(host.commits()[0].epoch, 1);
    let node = host.object::<Value>(NODES, "n1").unwrap().value;
    assert_eq!(node["assigned"], 1, "the node's count was not bumped twice");
    assert_eq!(usage(&host), BTreeMap::from([("n1".to_string(), 1)]));
}

#[test]
fn malformed_objects_are_skipped_with_a_warning() {
    let host = FakeHost::new();
    host.seed(NODES, "broken", &json!({ "capacity": "lots" }));
    node(&host, "n1", 1);
    host.seed(TASKS, "junk", &json!(5));
    pending(&host, "t1");

    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
    // The pending selector never reads the junk task; its own reconcile
    // does.
    assert_eq!(
        host.reconcile(&Scheduler::new(), TASKS, "junk"),
        Reply::Done
    );

    assert_eq!(task(&host, "t1")["node"], "n1");
    let warnings: Vec<String> = host
        .logs()
        .into_iter()
        .filter(|l| l.level == leasehold_guest::Level::Warn)
        .map(|l| l.message)
        .collect();
    assert!(
        warnings.iter().any(|w| w.contains("nodes/broken")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("tasks/junk")),
        "{warnings:?}"
    );
}

#[test]
fn a_deleted_task_needs_no_write() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    assert_eq!(
        host.reconcile(&Scheduler::new(), TASKS, "gone"),
        Reply::Done
    );
    assert!(host.commits().is_empty());
}

#[test]
fn assignments_per_reconcile_are_bounded() {
    let host = FakeHost::new();
    let total = MAX_ASSIGNMENTS_PER_RECONCILE + 6;
    node(&host, "n1", total as u64);
    for i in 0..total {
        pending(&host, &format!("t{i:04}"));
    }

    assert_eq!(
        host.reconcile(&Scheduler::new(), NODES, "n1"),
        Reply::RequeueAfter(std::time::Duration::ZERO)
    );
    assert_eq!(pending_names(&host).len(), 6);
    assert_eq!(
        host.events_with_reason(ASSIGNED_REASON).len(),
        MAX_ASSIGNMENTS_PER_RECONCILE
    );
    assert_eq!(host.reconcile(&Scheduler::new(), NODES, "n1"), Reply::Done);
    assert!(pending_names(&host).is_empty());
    assert_within_capacity(&host);
    assert_eq!(node_count(&host, "n1"), Some(total as u64));
}

/// The node's own count of the slots held on it.
fn node_count(host: &FakeHost, name: &str) -> Option<u64> {
    host.object::<Value>(NODES, name).unwrap().value["assigned"].as_u64()
}

/// Every commit keeps to the host's limits.
fn assert_within_commit_limits(host: &FakeHost) {
    for commit in host.commits() {
        assert!(
            commit.ops.len() <= MAX_OPS_PER_COMMIT,
            "{} ops",
            commit.ops.len()
        );
        assert!(commit.events.len() <= MAX_EVENTS_PER_COMMIT);
    }
}

#[test]
fn many_pending_tasks_are_assigned_in_as_few_commits_as_the_limits_allow() {
    let host = FakeHost::new();
    for name in ["n1", "n2", "n3"] {
        node(&host, name, 100);
    }
    for i in 0..300 {
        pending(&host, &format!("t{i:03}"));
    }

    assert_eq!(
        host.reconcile(&Scheduler::new(), TASKS, "t000"),
        Reply::Done
    );

    assert!(pending_names(&host).is_empty());
    // Each commit: up to 125 tasks plus the 3 nodes they go to, 128 ops.
    let per_commit = MAX_OPS_PER_COMMIT - 3;
    assert_eq!(host.commits().len(), 300_usize.div_ceil(per_commit));
    assert_eq!(host.commits()[0].ops.len(), MAX_OPS_PER_COMMIT);
    assert_within_commit_limits(&host);
    // Every assignment has its event, in the commit that made it.
    let events = host.events_with_reason(ASSIGNED_REASON);
    assert_eq!(events.len(), 300);
    for event in &events {
        let task = host.object::<Value>(TASKS, &event.key.name).unwrap();
        assert_eq!(task.version, event.revision, "{}", event.key);
        assert!(
            event
                .message
                .contains(&format!("node {}", task.value["node"].as_str().unwrap())),
            "{}",
            event.message
        );
    }
    assert_eq!(
        usage(&host),
        BTreeMap::from([
            ("n1".to_string(), 100),
            ("n2".to_string(), 100),
            ("n3".to_string(), 100)
        ])
    );
    for name in ["n1", "n2", "n3"] {
        assert_eq!(node_count(&host, name), Some(100));
    }
    // Reconciles of the assigned tasks (their changes coming back) write
    // nothing.
    let commits = host.commits().len();
    host.resync(&Scheduler::new());
    assert_eq!(host.commits().len(), commits);
}

#[test]
fn batches_never_fill_a_node_past_capacity() {
    let host = FakeHost::new();
    node(&host, "a", 50);
    node(&host, "b", 30);
    node(&host, "c", 0);
    // b already holds 25 slots, by its own count.
    host.seed(NODES, "b", &json!({ "capacity": 30, "assigned": 25 }));
    for i in 0..200 {
        pending(&host, &format!("t{i:03}"));
    }

    assert_eq!(host.reconcile(&Scheduler::new(), NODES, "a"), Reply::Done);

    assert_eq!(
        usage(&host),
        BTreeMap::from([("a".to_string(), 50), ("b".to_string(), 5)])
    );
    assert_eq!(node_count(&host, "a"), Some(50));
    assert_eq!(node_count(&host, "b"), Some(30));
    assert_eq!(pending_names(&host).len(), 145);
    assert_eq!(host.commits().len(), 1, "55 tasks and 2 nodes: one commit");
    assert_within_commit_limits(&host);

    // Full: nothing more, whatever is reconciled.
    host.resync(&Scheduler::new());
    assert_eq!(host.commits().len(), 1);
}

#[test]
fn a_deleted_task_frees_its_slot_before_it_goes() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    pending(&host, "t2");
    host.resync(&Scheduler::new());
    assert_eq!(pending_names(&host), ["t2"]);

    // The user deletes t1: the finalizer holds it, marked.
    host.remove(TASKS, "t1");
    assert!(host.object::<Value>(TASKS, "t1").unwrap().is_deleting());
    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);

    assert!(
        host.object::<Value>(TASKS, "t1").is_none(),
        "gone once freed"
    );
    assert_eq!(task(&host, "t2")["node"], "n1", "the freed slot is used");
    assert_eq!(node_count(&host, "n1"), Some(1));
    let released = host.events_with_reason(RELEASED_REASON);
    assert_eq!(released.len(), 1);
    assert!(
        released[0].message.contains("node n1"),
        "{}",
        released[0].message
    );
}

#[test]
fn a_deleted_task_frees_its_slot_in_the_commit_that_removes_its_finalizer() {
    let host = FakeHost::new();
    node(&host, "n1", 2);
    pending(&host, "t1");
    host.resync(&Scheduler::new());
    host.remove(TASKS, "t1");
    let marked = host.object::<Value>(TASKS, "t1").unwrap();
    let commits = host.commits().len();

    // The node changes under the release once: it is read again, and the
    // slot is still freed exactly once.
    host.before_commit(1, |host| {
        host.seed(NODES, "n1", &json!({ "capacity": 3, "assigned": 1 }));
    });
    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
    assert!(host.object::<Value>(TASKS, "t1").is_none());
    assert_eq!(node_count(&host, "n1"), Some(0));

    let released: Vec<_> = host.commits().into_iter().skip(commits).collect();
    assert_eq!(released.len(), 1, "one commit landed: {released:?}");
    let release = &released[0];
    assert_eq!(release.events.len(), 1);
    assert_eq!(release.events[0].reason, RELEASED_REASON);
    let task_op = release
        .ops
        .iter()
        .find(|op| op.key().kind == TASKS)
        .expect("the task's write");
    match task_op {
        Op::Replace {
            expected_version,
            meta: Some(meta),
            value: None,
            ..
        } => {
            assert_eq!(
                *expected_version, marked.version,
                "conditional on the version read"
            );
            assert!(meta.finalizers.is_empty());
        }
        other => panic!("expected the finalizer's removal, got {other:?}"),
    }
    assert!(release.ops.iter().any(|op| op.key().kind == NODES));
}

#[test]
fn a_deleted_task_held_by_another_finalizer_frees_its_slot_once() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    host.seed_with(
        TASKS,
        "t1",
        &json!({ "status": "pending" }),
        &leasehold_guest::Metadata::new().finalizer("example.com/other"),
    );
    pending(&host, "t2");
    host.resync(&Scheduler::new());
    assert_eq!(task(&host, "t1")["node"], "n1");

    host.remove(TASKS, "t1");
    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
    let t1 = host.object::<Value>(TASKS, "t1").unwrap();
    assert!(t1.is_deleting(), "the other finalizer still holds it");
    assert_eq!(t1.finalizers(), ["example.com/other"]);
    assert_eq!(task(&host, "t2")["node"], "n1", "its slot went to t2");

    // Without the scheduler's finalizer the task is no longer its concern.
    let commits = host.commits().len();
    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
    assert_eq!(host.commits().len(), commits);
    assert_eq!(host.events_with_reason(RELEASED_REASON).len(), 1);
    assert_eq!(node_count(&host, "n1"), Some(1));
}

#[test]
fn a_fenced_release_frees_nothing() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    pending(&host, "t1");
    host.resync(&Scheduler::new());
    host.remove(TASKS, "t1");
    host.fail_next_commit(Fault::Fenced);
    assert_eq!(
        host.reconcile(&Scheduler::new(), TASKS, "t1"),
        Reply::Fenced
    );
    let t1 = host.object::<Value>(TASKS, "t1").unwrap();
    assert!(t1.has_finalizer(SLOT_FINALIZER));
    assert_eq!(node_count(&host, "n1"), Some(1));
    assert!(host.events_with_reason(RELEASED_REASON).is_empty());
}

#[test]
fn a_deleted_pending_task_is_not_placed() {
    let host = FakeHost::new();
    node(&host, "n1", 1);
    // A pending task held by someone else's finalizer, marked for deletion.
    host.seed_with(
        TASKS,
        "t1",
        &json!({ "status": "pending" }),
        &leasehold_guest::Metadata::new().finalizer("example.com/other"),
    );
    host.remove(TASKS, "t1");

    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);

    assert!(host.commits().is_empty());
    assert_eq!(node_count(&host, "n1"), None);
}

#[test]
fn a_node_count_lost_to_a_user_write_is_recounted_from_the_tasks() {
    let host = FakeHost::new();
    node(&host, "n1", 2);
    pending(&host, "t1");
    pending(&host, "t2");
    host.resync(&Scheduler::new());
    assert_eq!(node_count(&host, "n1"), Some(2));

    // A user resizes the node with a bare value, dropping the count.
    host.seed(NODES, "n1", &json!({ "capacity": 3 }));
    pending(&host, "t3");
    pending(&host, "t4");
    assert_eq!(host.reconcile(&Scheduler::new(), NODES, "n1"), Reply::Done);

    assert_eq!(usage(&host), BTreeMap::from([("n1".to_string(), 3)]));
    assert_eq!(node_count(&host, "n1"), Some(3));
    assert_eq!(pending_names(&host), ["t4"]);
}

#[test]
fn a_task_pending_again_is_placed_anew_and_its_old_slot_freed_at_once() {
    let host = FakeHost::new();
    node(&host, "a", 1);
    pending(&host, "t1");
    host.resync(&Scheduler::new());
    assert_eq!(task(&host, "t1")["node"], "a");
    // A second node comes: a has 1 used of 1, b 0 of 5.
    node(&host, "b", 5);

    // A user sets t1 back to pending (its metadata stays).
    host.seed(TASKS, "t1", &json!({ "status": "pending" }));
    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);

    let t1 = host.object::<Value>(TASKS, "t1").unwrap();
    assert_eq!(
        t1.value["node"], "b",
        "b has the most room once a's slot is freed"
    );
    assert_eq!(t1.label(NODE_LABEL), Some("b"));
    assert_eq!(node_count(&host, "a"), Some(0), "a's slot freed");
    assert_eq!(node_count(&host, "b"), Some(1));
    let last = host.commits().pop().unwrap();
    let keys: Vec<String> = last.ops.iter().map(|op| op.key().to_string()).collect();
    assert_eq!(keys, ["tasks/t1", "nodes/a", "nodes/b"], "one commit");
}

#[test]
fn a_conflict_in_a_batch_re_reads_and_places_every_task_once() {
    let host = FakeHost::new();
    node(&host, "n1", 10);
    for i in 0..5 {
        pending(&host, &format!("t{i}"));
    }
    // Between the read and the first commit: a user edits t2, and another
    // assignment takes a slot on n1 by the rules (it bumps the count).
    host.before_commit(1, |host| {
        host.seed(TASKS, "t2", &json!({ "status": "pending", "priority": 7 }));
        host.seed(TASKS, "t4", &json!({ "status": "assigned", "node": "n1" }));
        host.seed(NODES, "n1", &json!({ "capacity": 10, "assigned": 1 }));
    });

    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t0"), Reply::Done);

    assert_eq!(host.pending_faults(), 0);
    assert_eq!(host.calls().commit, 2, "one conflict, one retry");
    assert_eq!(host.commits().len(), 1);
    assert_eq!(
        task(&host, "t2"),
        json!({ "status": "assigned", "node": "n1", "priority": 7 })
    );
    assert_eq!(
        host.events_with_reason(ASSIGNED_REASON).len(),
        4,
        "t4 was taken"
    );
    assert_eq!(node_count(&host, "n1"), Some(5));
    assert!(pending_names(&host).is_empty());
}

#[test]
fn a_lost_reply_on_a_batch_assigns_nothing_twice() {
    let host = FakeHost::new();
    node(&host, "n1", 200);
    for i in 0..150 {
        pending(&host, &format!("t{i:03}"));
    }
    // The second batch lands but its reply is lost.
    host.fail(At::Commit(2), Fault::LostReply);
    let reply = host.reconcile(&Scheduler::new(), TASKS, "t000");
    assert!(matches!(reply, Reply::Failed { .. }), "{reply:?}");

    host.new_tenure();
    host.resync(&Scheduler::new());

    assert!(pending_names(&host).is_empty());
    assert_eq!(host.events_with_reason(ASSIGNED_REASON).len(), 150);
    assert_eq!(node_count(&host, "n1"), Some(150));
    assert_eq!(usage(&host), BTreeMap::from([("n1".to_string(), 150)]));
}

#[test]
fn a_change_that_leaves_nothing_to_place_is_answered_without_scheduling() {
    let host = FakeHost::new();
    node(&host, "n1", 2);
    pending(&host, "t1");
    assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "t1"), Reply::Done);
    assert_eq!(task(&host, "t1")["node"], "n1");

    // A pending task nobody has reconciled yet (its own change is still
    // queued). The change of t1 that the assignment made leaves nothing
    // new to place: t1's reconcile reads t1 and stops.
    pending(&host, "t2");
    let commits = host.commits().len();
    assert_eq!(
        host.reconcile_because(&Scheduler::new(), TASKS, "t1", Reason::Change),
        Reply::Done
    );
    assert_eq!(pending_names(&host), ["t2"]);
    assert_eq!(host.commits().len(), commits);

    // Any other cause schedules (a batch bound's requeue, a retry, a
    // resync): t2 is placed from t1's reconcile.
    assert_eq!(
        host.reconcile_because(&Scheduler::new(), TASKS, "t1", Reason::Requeue),
        Reply::Done
    );
    assert!(pending_names(&host).is_empty());
    assert_within_capacity(&host);
}

/// Node changes (the scheduler's own assignments make one per node they
/// fill) and freed slots schedule only while tasks wait for room: every
/// other pending task has its own change queued, which places it.
#[test]
fn room_is_looked_for_only_while_tasks_wait_for_it() {
    let host = FakeHost::new();
    let scheduler = Scheduler::new();
    node(&host, "n1", 2);
    pending(&host, "t1");
    assert_eq!(host.reconcile(&scheduler, TASKS, "t1"), Reply::Done);
    assert_eq!(task(&host, "t1")["node"], "n1");

    // Nothing waits: the change t1's assignment made to n1 needs no pass,
    // even with room and a pending task whose own change is still queued.
    pending(&host, "t2");
    let commits = host.commits().len();
    assert_eq!(
        host.reconcile_because(&scheduler, NODES, "n1", Reason::Change),
        Reply::Done
    );
    assert_eq!(pending_names(&host), ["t2"]);
    assert_eq!(host.commits().len(), commits);
    assert_eq!(host.reconcile(&scheduler, TASKS, "t2"), Reply::Done);
    assert!(pending_names(&host).is_empty());

    // t3's own reconcile finds no room: t3 now waits for it, and the next
    // node change (a capacity raise) places it.
    pending(&host, "t3");
    assert_eq!(host.reconcile(&scheduler, TASKS, "t3"), Reply::Done);
    assert_eq!(pending_names(&host), ["t3"]);
    host.seed(NODES, "n1", &json!({ "capacity": 3, "assigned": 2 }));
    assert_eq!(
        host.reconcile_because(&scheduler, NODES, "n1", Reason::Change),
        Reply::Done
    );
    assert!(pending_names(&host).is_empty());
    assert_within_capacity(&host);

    // A slot freed while a task waits goes to it at once...
    pending(&host, "t4");
    assert_eq!(host.reconcile(&scheduler, TASKS, "t4"), Reply::Done);
    assert_eq!(pending_names(&host), ["t4"]);
    host.seed(TASKS, "t1", &json!({ "status": "done", "node": "n1" }));
    assert_eq!(host.reconcile(&scheduler, TASKS, "t1"), Reply::Done);
    assert_eq!(task(&host, "t4")["node"], "n1");

    // ... and one freed while nothing waits is only freed: t5's own change
    // places it.
    pending(&host, "t5");
    host.seed(TASKS, "t2", &json!({ "status": "done", "node": "n1" }));
    assert_eq!(host.reconcile(&scheduler, TASKS, "t2"), Reply::Done);
    assert_eq!(host.events_with_reason(RELEASED_REASON).len(), 2);
    assert_eq!(pending_names(&host), ["t5"]);
    assert_eq!(host.reconcile(&scheduler, TASKS, "t5"), Reply::Done);
    assert!(pending_names(&host).is_empty());
    assert_within_capacity(&host);

    // Any cause other than a change always schedules.
    pending(&host, "t6");
    host.seed(NODES, "n2", &json!({ "capacity": 1 }));
    assert_eq!(
        host.reconcile_because(&scheduler, NODES, "n2", Reason::Resync),
        Reply::Done
    );
    assert_eq!(task(&host, "t6")["node"], "n2");
    assert_within_capacity(&host);
}

/// The scheduler reads pending tasks through the selector, never the
/// finished ones: the store calls a scheduling pass makes do not grow with
/// the tasks that are not pending (without the selector, the pass pages
/// through the 1,200 finished ones: 122 lists instead of 2).
#[test]
fn a_scheduling_pass_reads_only_pending_tasks() {
    let lists = |finished: usize| {
        let host = FakeHost::new();
        host.seed(NODES, "n1", &json!({ "capacity": 10, "assigned": 0 }));
        for i in 0..finished {
            host.seed(TASKS, &format!("done-{i:04}"), &json!({ "status": "done" }));
        }
        pending(&host, "p1");
        pending(&host, "p2");
        let before = host.calls();
        assert_eq!(host.reconcile(&Scheduler::new(), TASKS, "p1"), Reply::Done);
        assert_eq!(pending_names(&host), Vec::<String>::new(), "both placed");
        let after = host.calls();
        (after.list - before.list, after.get - before.get)
    };
    assert_eq!(lists(0), lists(1_200));
}
