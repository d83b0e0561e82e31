//! The example scheduler: assigns each pending task to a node with free
//! capacity.
//!
//! # Objects
//!
//! - `nodes/NAME`: `{"capacity": N, ...}`. When the scheduler assigns a task
//!   to a node it also writes `"assigned": K` (the node's task count after
//!   the assignment) into the node, keeping every other field.
//! - `tasks/NAME`: `{"status": "pending", ...}`. The scheduler changes it to
//!   `{"status": "assigned", "node": NODE, ...}`, keeping every other field.
//!   Any other status (say `"done"`) is left alone and frees its slot.
//!
//! # Guarantees, and what makes them hold
//!
//! One assignment is one commit: the task's update conditional on the
//! version it was read at while pending, the node's update conditional on
//! the version it was read at, and an `Assigned` event. All of it lands or
//! none of it, and only while this tenure's lease is current.
//!
//! - **A task is never assigned twice**: a second assignment would have to
//!   update the task at a version at which it was still pending, but the
//!   first assignment replaced that version. Whoever comes second
//!   conflicts, re-reads, and finds the task assigned.
//! - **A node is never over capacity**: usage is counted from a listing of
//!   the tasks made *after* the node was read. Every assignment to a node
//!   changes the node's version, so an assignment committed after our read
//!   of the node makes our commit conflict, and one committed before it is
//!   in our listing. (Tasks marked assigned by someone who bypasses the
//!   scheduler, without touching the node, are outside this guarantee.)
//! - **A deposed scheduler writes nothing**: its commit is fenced; it stops
//!   and returns the fenced error.
//! - **A lost reply is harmless**: after an `unavailable` commit the
//!   scheduler does not retry blindly; the host requeues with backoff and
//!   the next reconcile re-reads, finding the task assigned if the commit
//!   did land.
//!
//! Malformed objects (a node without a numeric capacity, a task whose
//! status is not a string) are skipped with a warning, never fatal: they
//! cannot hold capacity, so skipping them cannot overfill a node.

use std::time::Duration;

use leasehold_guest::{
    Api, Context, Controller, Description, Error, Kind, Object, Outcome, Retry, StoreError,
    Transaction, retry_on_conflict,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The kind of the nodes tasks are assigned to.
pub const NODES: &str = "nodes";
/// The kind of the tasks.
pub const TASKS: &str = "tasks";
/// A task waiting for a node.
pub const PENDING: &str = "pending";
/// A task placed on a node.
pub const ASSIGNED: &str = "assigned";
/// The reason of the event recorded with each assignment.
pub const ASSIGNED_REASON: &str = "Assigned";

/// How often every node and task is looked at again without a change: the
/// safety net for a missed change.
pub const RESYNC_PERIOD: Duration = Duration::from_secs(60);
/// Re-reads after a conflict inside one reconcile before giving up and
/// letting the error policy requeue.
pub const MAX_CONFLICT_RETRIES: u32 = 5;
/// The requeue delay after [`MAX_CONFLICT_RETRIES`] conflicts: short, since
/// a conflict means someone else is making progress, but not zero, so two
/// writers do not spin against each other.
pub const CONFLICT_RETRY_AFTER: Duration = Duration::from_millis(200);
/// Assignments one reconcile makes at most, so a reconcile stays well
/// inside the host's deadline however many tasks are pending. More work
/// requeues at once.
pub const MAX_ASSIGNMENTS_PER_RECONCILE: usize = 64;
/// Most nodes the scheduler reads in one reconcile.
pub const MAX_NODES: usize = 1_000;
/// Most tasks the scheduler reads in one reconcile; beyond it, reconciles
/// fail (and are retried with backoff) instead of running out of memory.
pub const MAX_TASKS: usize = 20_000;

/// A node's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// How many tasks may be assigned to it.
    pub capacity: u64,
    /// Its task count after the scheduler's last assignment to it. Writing
    /// it changes the node's version, which is what makes concurrent
    /// assignments to one node conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned: Option<u64>,
    /// Every other field, kept as is.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A task's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// `pending`, `assigned`, or anything else (which the scheduler leaves
    /// alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The node it is assigned to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Every other field, kept as is.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Kind for Node {
    const KIND: &'static str = NODES;
}

impl Kind for Task {
    const KIND: &'static str = TASKS;
}

impl Task {
    fn has_status(&self, status: &str) -> bool {
        self.status.as_deref() == Some(status)
    }
}

/// The scheduler controller.
#[derive(Debug, Default)]
pub struct Scheduler;

leasehold_guest::export_controller!(Scheduler);

impl Controller for Scheduler {
    fn describe(&self) -> Description {
        Description::watching([NODES, TASKS]).resync_every(RESYNC_PERIOD)
    }

    fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error> {
        match kind {
            TASKS => {
                // Read untyped: a malformed task is skipped, not fatal.
                let task = ctx.api::<Value>(Task::KIND).get(name)?;
                match task.as_ref().map(|t| t.decode::<Task>()) {
                    Some(Ok(task)) if task.value.has_status(PENDING) => schedule(ctx, Some(name)),
                    // Our own assignment coming back through the watch:
                    // nothing was freed, nothing to place.
                    Some(Ok(task)) if task.value.has_status(ASSIGNED) => Ok(Outcome::Done),
                    // Deleted, finished or malformed: it may have freed a
                    // slot for a pending task.
                    _ => schedule(ctx, None),
                }
            }
            // A new node or a capacity change may make room.
            NODES => schedule(ctx, None),
            other => {
                leasehold_guest::warn!("asked to reconcile {other}/{name}, a kind not watched");
                Ok(Outcome::Done)
            }
        }
    }

    fn error_policy(&self, _: &Context, _: &str, _: &str, error: &Error) -> Retry {
        match error.store_error() {
            // Retries inside the reconcile ran out: others are busy with
            // the same objects. Look again soon.
            Some(StoreError::Conflict(_) | StoreError::NotFound(_)) => {
                Retry::After(CONFLICT_RETRY_AFTER)
            }
            // Unavailable (outcome unknown, re-read next time), too many
            // objects, anything else: the host's exponential backoff.
            _ => Retry::Backoff,
        }
    }
}

/// One node as the scheduler sees it: the object read, and how many tasks
/// are assigned to it.
#[derive(Debug)]
struct Slot {
    node: Object<Node>,
    used: u64,
}

impl Slot {
    fn free(&self) -> u64 {
        self.node.value.capacity.saturating_sub(self.used)
    }
}

/// What one reconcile knows: every node (read first) and, from a listing
/// made after that, the usage of each and the pending tasks.
#[derive(Debug)]
struct Cluster {
    slots: Vec<Slot>,
    /// Pending tasks in name order.
    pending: Vec<Object<Task>>,
}

impl Cluster {
    /// Read the nodes, then the tasks. The order matters: see the crate
    /// documentation on capacity.
    fn read() -> Result<Self, Error> {
        let mut slots: Vec<Slot> = Api::<Value>::new(Node::KIND)
            .list_all(MAX_NODES)?
            .iter()
            .filter_map(decode_or_warn::<Node>)
            .map(|node| Slot { node, used: 0 })
            .collect();
        let mut pending = Vec::new();
        for object in Api::<Value>::new(Task::KIND).list_all(MAX_TASKS)? {
            let Some(task) = decode_or_warn::<Task>(&object) else {
                continue;
            };
            if task.value.has_status(PENDING) {
                pending.push(task);
            } else if task.value.has_status(ASSIGNED)
                && let Some(node) = task.value.node.as_deref()
                && let Some(slot) = slots.iter_mut().find(|s| s.node.name == node)
            {
                slot.used += 1;
            }
        }
        Ok(Self { slots, pending })
    }

    /// The next task to place: `only`, if it is pending, or else the first
    /// pending task in name order.
    fn next_pending(&self, only: Option<&str>) -> Option<usize> {
        match only {
            Some(name) => self.pending.iter().position(|t| t.name == name),
            None => (!self.pending.is_empty()).then_some(0),
        }
    }

    /// The node with the most free slots; the first in name order among
    /// equals, so placement is deterministic.
    fn pick(&self) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (index, slot) in self.slots.iter().enumerate() {
            if slot.free() > 0 && best.is_none_or(|b| slot.free() > self.slots[b].free()) {
                best = Some(index);
            }
        }
        best
    }

    /// Account for an assignment that committed at `revision`, so the next
    /// one in this reconcile can build on it without re-reading: the node's
    /// version is now that revision. If anything else changed meanwhile,
    /// the next commit's preconditions catch it.
    fn assigned(&mut self, task: usize, slot: usize, revision: u64) {
        self.pending.remove(task);
        let slot = &mut self.slots[slot];
        slot.used += 1;
        slot.node.version = revision;
        slot.node.value.assigned = Some(slot.used);
    }
}

fn decode_or_warn<T: serde::de::DeserializeOwned>(object: &Object<Value>) -> Option<Object<T>> {
    match object.decode::<T>() {
        Ok(decoded) => Some(decoded),
        Err(error) => {
            leasehold_guest::warn!("skipping {}: {error}", object.key());
            None
        }
    }
}

/// Place pending tasks (only `only`, if given) until none is left, no node
/// has room, or the per-reconcile bound is reached.
///
/// A conflict (or a task or node gone) means the cluster changed since it
/// was read: [`retry_on_conflict`] reads it again, up to
/// [`MAX_CONFLICT_RETRIES`] times, and the assignments already committed
/// count toward the bound. Fenced stops (the host hears `fenced`);
/// unavailable has an unknown outcome, so there is no blind retry (the
/// requeue re-reads); conflicts past the bound and invalid writes go to
/// the error policy.
fn schedule(ctx: &Context, only: Option<&str>) -> Result<Outcome, Error> {
    let mut assignments = 0;
    retry_on_conflict(MAX_CONFLICT_RETRIES + 1, || {
        let mut cluster = Cluster::read()?;
        loop {
            let Some(task) = cluster.next_pending(only) else {
                return Ok(Outcome::Done);
            };
            if assignments == MAX_ASSIGNMENTS_PER_RECONCILE {
                return Ok(Outcome::RequeueAfter(Duration::ZERO));
            }
            let Some(slot) = cluster.pick() else {
                // Every pending task waits for the same thing: a node
                // change or a finished task, both of which trigger a
                // reconcile.
                leasehold_guest::info!(
                    "{} pending task(s), no node has a free slot",
                    cluster.pending.len()
                );
                return Ok(Outcome::Done);
            };
            let revision = assign(ctx, &cluster.pending[task], &cluster.slots[slot])?;
            cluster.assigned(task, slot, revision);
            assignments += 1;
        }
    })
}

/// Assign `task` to the slot's node in one commit; the commit's revision.
fn assign(ctx: &Context, task: &Object<Task>, slot: &Slot) -> Result<u64, StoreError> {
    let node = &slot.node;
    let count = slot.used + 1;
    let assigned_task = Task {
        status: Some(ASSIGNED.to_string()),
        node: Some(node.name.clone()),
        rest: task.value.rest.clone(),
    };
    let bumped_node = Node {
        assigned: Some(count),
        ..node.value.clone()
    };
    let message = format!(
        "assigned to node {} ({count} of {} slots) at epoch {}",
        node.name,
        node.value.capacity,
        ctx.fence().epoch
    );
    // Typed writes: the task's new value can only go to the task, the
    // node's only to the node.
    let committed = Transaction::new()
        .update_typed(task, &assigned_task)
        .update_typed(node, &bumped_node)
        .event(TASKS, task.name.as_str(), ASSIGNED_REASON, message)
        .commit()?;
    leasehold_guest::info!("assigned {} to {}", task.key(), node.key());
    Ok(committed.revision)
}
