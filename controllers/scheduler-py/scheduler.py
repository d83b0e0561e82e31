"""The example scheduler in Python: assigns each pending task to a node with
free capacity. The same controller as `controllers/scheduler` (Rust), with
the same guarantees.

Objects:

- `nodes/NAME`: `{"capacity": N, ...}`. Assigning a task to a node also
  writes `"assigned": K` (the node's task count after the assignment)
  into the node, keeping every other field.
- `tasks/NAME`: `{"status": "pending", ...}` becomes
  `{"status": "assigned", "node": NODE, ...}`, keeping every other field.
  Any other status (say `"done"`) is left alone and frees its slot.

Guarantees, and what makes them hold. One assignment is one commit: the
task's update conditional on the version read while pending, the node's
update conditional on the version read, and an `Assigned` event; all of
it lands or none of it, and only while this tenure's lease is current.

- A task is never assigned twice: a second assignment would update the
  task at a version at which it was still pending, which the first
  replaced; whoever comes second conflicts, re-reads, finds it assigned.
- A node is never over capacity: usage is counted from a listing of the
  tasks made after the node was read, and every assignment changes the
  node's version, so one committed after our read of the node makes our
  commit conflict, and one committed before it is in our listing.
- A deposed scheduler writes nothing: its commit is fenced; it stops.
- A lost reply is harmless: after `Unavailable` there is no blind retry;
  the host requeues and the next reconcile re-reads.

Malformed objects are skipped with a warning, never fatal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import leasehold
from leasehold import (
    Api,
    Conflict,
    Context,
    Controller,
    DecodeError,
    Description,
    Kind,
    NotFound,
    Object,
    Outcome,
    Retry,
    Transaction,
    retry_on_conflict,
)

NODES = "nodes"
TASKS = "tasks"
PENDING = "pending"
ASSIGNED = "assigned"
#: The reason of the event recorded with each assignment.
ASSIGNED_REASON = "Assigned"
#: Every node and task is looked at again this often without a change.
RESYNC_PERIOD_MS = 60_000
#: Re-reads after a conflict inside one reconcile before the error policy requeues.
MAX_CONFLICT_RETRIES = 5
#: The requeue delay after that many conflicts.
CONFLICT_RETRY_AFTER_MS = 200
#: Assignments one reconcile makes at most; more work requeues at once.
MAX_ASSIGNMENTS_PER_RECONCILE = 64
#: Most nodes read in one reconcile.
MAX_NODES = 1_000
#: Most tasks read in one reconcile.
MAX_TASKS = 20_000


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} is not a count")
    return value


@dataclass
class Node(Kind):
    """A node's value: its capacity, its assignment count, every other field kept."""

    KIND = NODES
    capacity: int
    assigned: Optional[int] = None
    rest: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_value(cls, value: Any) -> "Node":
        if not isinstance(value, dict):
            raise TypeError("a node is a JSON object")
        rest = {k: v for k, v in value.items() if k not in ("capacity", "assigned")}
        assigned = value.get("assigned")
        return cls(
            _count(value.get("capacity"), "capacity"),
            None if assigned is None else _count(assigned, "assigned"),
            rest,
        )

    def to_value(self) -> Any:
        out = dict(self.rest)
        out["capacity"] = self.capacity
        if self.assigned is not None:
            out["assigned"] = self.assigned
        return out


@dataclass
class Task(Kind):
    """A task's value: its status and node, every other field kept."""

    KIND = TASKS
    status: Optional[str] = None
    node: Optional[str] = None
    rest: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_value(cls, value: Any) -> "Task":
        if not isinstance(value, dict):
            raise TypeError("a task is a JSON object")
        status, node = value.get("status"), value.get("node")
        if status is not None and not isinstance(status, str):
            raise TypeError("status is not a string")
        if node is not None and not isinstance(node, str):
            raise TypeError("node is not a string")
        rest = {k: v for k, v in value.items() if k not in ("status", "node")}
        return cls(status, node, rest)

    def to_value(self) -> Any:
        out = dict(self.rest)
        if self.status is not None:
            out["status"] = self.status
        if self.node is not None:
            out["node"] = self.node
        return out


def _decode_or_warn(obj: Object, kind_type: type) -> Optional[Object]:
    try:
        return obj.decode(kind_type)
    except DecodeError as e:
        leasehold.warn(f"skipping {obj.key}: {e}")
        return None


@dataclass
class _Slot:
    node: Object  # Object[Node]
    used: int = 0

    @property
    def free(self) -> int:
        return max(0, self.node.value.capacity - self.used)


class _Cluster:
    """Every node (read first) and, from a listing made after that, usage and pending tasks."""

    def __init__(self) -> None:
        self.slots: List[_Slot] = []
        for obj in Api(NODES).list_all(MAX_NODES):
            node = _decode_or_warn(obj, Node)
            if node is not None:
                self.slots.append(_Slot(node))
        by_name = {s.node.name: s for s in self.slots}
        self.pending: List[Object] = []
        for obj in Api(TASKS).list_all(MAX_TASKS):
            task = _decode_or_warn(obj, Task)
            if task is None:
                continue
            if task.value.status == PENDING:
                self.pending.append(task)
            elif task.value.status == ASSIGNED and task.value.node in by_name:
                by_name[task.value.node].used += 1

    def next_pending(self, only: Optional[str]) -> Optional[int]:
        if only is None:
            return 0 if self.pending else None
        for i, t in enumerate(self.pending):
            if t.name == only:
                return i
        return None

    def pick(self) -> Optional[int]:
        """The node with the most free slots; the first in name order among equals."""
        best: Optional[int] = None
        for i, slot in enumerate(self.slots):
            if slot.free > 0 and (best is None or slot.free > self.slots[best].free):
                best = i
        return best

    def assigned(self, task: int, slot: int, revision: int) -> None:
        del self.pending[task]
        s = self.slots[slot]
        s.used += 1
        s.node.version = revision
        s.node.value.assigned = s.used


def _assign(ctx: Context, task: Object, slot: _Slot) -> int:
    node = slot.node
    count = slot.used + 1
    assigned_task = Task(ASSIGNED, node.name, dict(task.value.rest))
    bumped = Node(node.value.capacity, count, dict(node.value.rest))
    message = (
        f"assigned to node {node.name} ({count} of {node.value.capacity} slots) "
        f"at epoch {ctx.fence.epoch}"
    )
    committed = (
        Transaction()
        .update_typed(task, assigned_task)
        .update_typed(node, bumped)
        .event(TASKS, task.name, ASSIGNED_REASON, message)
        .commit()
    )
    leasehold.info(f"assigned {task.key} to {node.key}")
    return committed.revision


def _schedule(ctx: Context, only: Optional[str]) -> Outcome:
    made = [0]

    def attempt() -> Outcome:
        cluster = _Cluster()
        while True:
            task = cluster.next_pending(only)
            if task is None:
                return Outcome.done()
            if made[0] == MAX_ASSIGNMENTS_PER_RECONCILE:
                return Outcome.requeue_after(0)
            slot = cluster.pick()
            if slot is None:
                leasehold.info(f"{len(cluster.pending)} pending task(s), no node has a free slot")
                return Outcome.done()
            revision = _assign(ctx, cluster.pending[task], cluster.slots[slot])
            cluster.assigned(task, slot, revision)
            made[0] += 1

    return retry_on_conflict(MAX_CONFLICT_RETRIES + 1, attempt)


class Scheduler(Controller):
    """The scheduler controller."""

    def describe(self) -> Description:
        return Description.watching([NODES, TASKS]).resync_every(RESYNC_PERIOD_MS)

    def reconcile(self, ctx: Context, kind: str, name: str) -> Outcome:
        if kind == TASKS:
            obj = ctx.api(TASKS).get(name)
            task = None
            if obj is not None:
                try:
                    task = obj.decode(Task)
                except DecodeError:
                    task = None
            if task is not None and task.value.status == PENDING:
                return _schedule(ctx, name)
            if task is not None and task.value.status == ASSIGNED:
                # Our own assignment coming back: nothing freed, nothing to place.
                return Outcome.done()
            # Deleted, finished or malformed: it may have freed a slot.
            return _schedule(ctx, None)
        if kind == NODES:
            return _schedule(ctx, None)
        leasehold.warn(f"asked to reconcile {kind}/{name}, a kind not watched")
        return Outcome.done()

    def error_policy(self, ctx: Context, kind: str, name: str, error: Exception) -> Retry:
        if isinstance(error, (Conflict, NotFound)):
            return Retry.after(CONFLICT_RETRY_AFTER_MS)
        return Retry.backoff()
