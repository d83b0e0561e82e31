"""The Python scheduler against the SDK's fake host: no Wasm build, no host."""

from collections import Counter

import pytest

from leasehold import Level, Reply
from leasehold.fake import At, Fault, FakeHost
from leasehold.transaction import Update
from scheduler import (
    ASSIGNED_REASON,
    CONFLICT_RETRY_AFTER_MS,
    MAX_ASSIGNMENTS_PER_RECONCILE,
    MAX_CONFLICT_RETRIES,
    NODES,
    RESYNC_PERIOD_MS,
    TASKS,
    Scheduler,
)


@pytest.fixture
def host():
    return FakeHost()


def node(host, name, capacity):
    return host.seed(NODES, name, {"capacity": capacity})


def pending(host, name):
    return host.seed(TASKS, name, {"status": "pending"})


def task(host, name):
    return host.object(TASKS, name).value


def usage(host):
    return dict(Counter(t.value["node"] for t in host.objects(TASKS) if t.value.get("status") == "assigned"))


def assert_within_capacity(host):
    for name, used in usage(host).items():
        capacity = host.object(NODES, name).value["capacity"]
        assert used <= capacity, f"{name} has {used} tasks for {capacity} slots"


def pending_names(host):
    return [t.name for t in host.objects(TASKS) if t.value.get("status") == "pending"]


def test_describes_nodes_and_tasks_with_a_resync():
    d = Scheduler().describe()
    assert d.watches == [NODES, TASKS] and d.resync_ms == RESYNC_PERIOD_MS


def test_assigns_a_pending_task_with_its_node_and_event_in_one_commit(host):
    host.seed(NODES, "n1", {"capacity": 2, "zone": "a"})
    host.seed(TASKS, "t1", {"status": "pending", "image": "busybox"})
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("done")
    assert task(host, "t1") == {"status": "assigned", "node": "n1", "image": "busybox"}
    assert host.object(NODES, "n1").value == {"capacity": 2, "zone": "a", "assigned": 1}
    commits = host.commits()
    assert len(commits) == 1, "one atomic commit"
    assert [str(op.key) for op in commits[0].ops] == ["tasks/t1", "nodes/n1"]
    assert all(isinstance(op, Update) for op in commits[0].ops), "both writes are conditional"
    events = host.events_with_reason(ASSIGNED_REASON)
    assert len(events) == 1 and str(events[0].key) == "tasks/t1"
    assert events[0].revision == commits[0].revision
    assert "node n1" in events[0].message and "epoch 1" in events[0].message


def test_never_assigns_over_capacity(host):
    node(host, "n1", 1)
    node(host, "n2", 2)
    node(host, "n3", 0)
    for name in ["t1", "t2", "t3", "t4", "t5"]:
        pending(host, name)
    for key, reply in host.resync(Scheduler()):
        assert reply == Reply("done"), key
    assert_within_capacity(host)
    assert usage(host) == {"n1": 1, "n2": 2}
    assert pending_names(host) == ["t4", "t5"]
    assert len(host.events_with_reason(ASSIGNED_REASON)) == 3
    # A full cluster stays as it is.
    commits = len(host.commits())
    host.resync(Scheduler())
    assert len(host.commits()) == commits
    # Room on a node is used as soon as the node changes.
    host.seed(NODES, "n3", {"capacity": 1})
    assert host.reconcile(Scheduler(), NODES, "n3") == Reply("done")
    assert pending_names(host) == ["t5"]
    assert_within_capacity(host)


def test_spreads_tasks_to_the_node_with_most_free_slots(host):
    node(host, "a", 1)
    node(host, "b", 3)
    for t in ["t1", "t2", "t3"]:
        pending(host, t)
    assert host.reconcile(Scheduler(), NODES, "a") == Reply("done")
    assert [task(host, t)["node"] for t in ["t1", "t2", "t3"]] == ["b", "b", "a"]


def test_a_finished_task_frees_its_slot(host):
    node(host, "n1", 1)
    pending(host, "t1")
    pending(host, "t2")
    host.resync(Scheduler())
    assert pending_names(host) == ["t2"]
    host.seed(TASKS, "t1", {"status": "done", "node": "n1"})
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("done")
    assert task(host, "t2")["node"] == "n1"
    assert_within_capacity(host)


def test_a_conflict_is_re_read_and_retried(host):
    node(host, "n1", 1)
    pending(host, "t1")
    host.before_commit(1, lambda h: h.seed(TASKS, "t1", {"status": "pending", "priority": 7}))
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("done")
    assert host.pending_faults == 0
    assert host.calls().commit == 2, "one conflict, one retry"
    assert len(host.commits()) == 1
    assert task(host, "t1") == {"status": "assigned", "node": "n1", "priority": 7}


def rival_takes_n1(h):
    h.seed(TASKS, "t2", {"status": "assigned", "node": "n1"})
    h.seed(NODES, "n1", {"capacity": 1, "assigned": 1})


def one_slot_two_tasks():
    h = FakeHost()
    node(h, "n1", 1)
    pending(h, "t1")
    pending(h, "t2")
    return h


def test_racing_for_the_last_slot_conflicts_instead_of_overfilling():
    host = one_slot_two_tasks()
    host.before_commit(1, rival_takes_n1)
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("done")
    assert host.pending_faults == 0
    assert task(host, "t1")["status"] == "pending"
    assert usage(host) == {"n1": 1}
    assert host.commits() == []


def test_a_rival_assignment_landing_between_any_two_calls_never_overfills():
    h = one_slot_two_tasks()
    assert h.reconcile(Scheduler(), TASKS, "t1") == Reply("done")
    calls = h.calls().total
    assert calls >= 3, "reads the task, the nodes and the tasks, then commits"
    for n in range(1, calls + 1):
        host = one_slot_two_tasks()
        host.before(At.call(n), rival_takes_n1)
        assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("done"), f"rival before call {n}"
        assert host.pending_faults == 0
        assert usage(host) == {"n1": 1}, f"rival before call {n}"
        assert task(host, "t1")["status"] == "pending", f"rival before call {n}"


def test_a_task_assigned_meanwhile_is_not_assigned_again(host):
    node(host, "n1", 5)
    node(host, "n2", 5)
    pending(host, "t1")
    host.before_commit(1, lambda h: h.seed(TASKS, "t1", {"status": "assigned", "node": "n2"}))
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("done")
    assert task(host, "t1")["node"] == "n2"
    assert host.events_with_reason(ASSIGNED_REASON) == []
    assert host.commits() == []


def test_conflict_retries_are_bounded_then_requeued_soon(host):
    node(host, "n1", 1)
    pending(host, "t1")
    attempts = MAX_CONFLICT_RETRIES + 1
    for n in range(1, attempts + 1):
        host.fail(At.commit(n), Fault.CONFLICT)
    reply = host.reconcile(Scheduler(), TASKS, "t1")
    assert reply.is_failed and "conflict" in reply.message
    assert reply.delay_ms == CONFLICT_RETRY_AFTER_MS
    assert host.calls().commit == attempts and host.pending_faults == 0
    assert host.commits() == []
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("done")
    assert task(host, "t1")["status"] == "assigned"


def test_a_fenced_commit_stops_without_retrying(host):
    node(host, "n1", 1)
    pending(host, "t1")
    host.fail_next_commit(Fault.FENCED)
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("fenced")
    assert host.calls().commit == 1, "no retry after fenced"
    assert host.commits() == []
    assert task(host, "t1")["status"] == "pending"
    assert host.reconcile(Scheduler(), NODES, "n1") == Reply("fenced")


def test_a_revoked_lease_stops_before_any_write(host):
    node(host, "n1", 1)
    pending(host, "t1")
    host.revoke()
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("fenced")
    assert host.calls().commit == 0


def test_an_unavailable_store_fails_for_backoff_and_recovers(host):
    node(host, "n1", 1)
    pending(host, "t1")
    host.set_unavailable(True)
    reply = host.reconcile(Scheduler(), TASKS, "t1")
    assert reply.is_failed and "unavailable" in reply.message
    assert reply.delay_ms is None, "the host's exponential backoff decides"
    host.set_unavailable(False)
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("done")
    assert task(host, "t1")["status"] == "assigned"


def test_an_unavailable_commit_is_not_retried_blindly(host):
    node(host, "n1", 1)
    pending(host, "t1")
    host.fail_next_commit(Fault.UNAVAILABLE)
    reply = host.reconcile(Scheduler(), TASKS, "t1")
    assert reply.is_failed and reply.delay_ms is None
    assert host.calls().commit == 1, "the outcome is unknown: no retry without a re-read"
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("done")
    assert len(host.events_with_reason(ASSIGNED_REASON)) == 1


def test_a_successor_re_running_after_a_lost_reply_does_not_assign_twice(host):
    node(host, "n1", 2)
    pending(host, "t1")
    host.fail_next_commit(Fault.LOST_REPLY)
    assert host.reconcile(Scheduler(), TASKS, "t1").is_failed
    host.new_tenure()
    successor = Scheduler()
    assert host.reconcile(successor, TASKS, "t1") == Reply("done")
    host.resync(successor)
    assert len(host.commits()) == 1, "the assignment landed once"
    assert len(host.events_with_reason(ASSIGNED_REASON)) == 1
    assert host.commits()[0].epoch == 1
    assert host.object(NODES, "n1").value["assigned"] == 1
    assert usage(host) == {"n1": 1}


def test_malformed_objects_are_skipped_with_a_warning(host):
    host.seed(NODES, "broken", {"capacity": "lots"})
    node(host, "n1", 1)
    host.seed(TASKS, "junk", 5)
    pending(host, "t1")
    assert host.reconcile(Scheduler(), TASKS, "t1") == Reply("done")
    assert task(host, "t1")["node"] == "n1"
    warnings = [l.message for l in host.logs() if l.level is Level.WARN]
    assert any("nodes/broken" in w for w in warnings), warnings
    assert any("tasks/junk" in w for w in warnings), warnings


def test_a_deleted_task_needs_no_write(host):
    node(host, "n1", 1)
    assert host.reconcile(Scheduler(), TASKS, "gone") == Reply("done")
    assert host.commits() == []


def test_assignments_per_reconcile_are_bounded(host):
    total = MAX_ASSIGNMENTS_PER_RECONCILE + 6
    node(host, "n1", total)
    for i in range(total):
        pending(host, f"t{i:03}")
    assert host.reconcile(Scheduler(), NODES, "n1") == Reply("requeue", 0)
    assert len(host.commits()) == MAX_ASSIGNMENTS_PER_RECONCILE
    assert host.reconcile(Scheduler(), NODES, "n1") == Reply("done")
    assert pending_names(host) == []
    assert_within_capacity(host)


def test_many_tasks_settle_through_the_change_stream_within_capacity(host):
    for n in range(4):
        node(host, f"n{n}", n + 1)
    for t in range(15):
        pending(host, f"t{t:02}")
    host.run_changes(Scheduler())
    assert_within_capacity(host)
    assert sum(usage(host).values()) == 10
    assert len(pending_names(host)) == 5
    # Each task assigned at most once: one Assigned event per assigned task.
    names = [e.key.name for e in host.events_with_reason(ASSIGNED_REASON)]
    assert len(names) == len(set(names)) == 10
