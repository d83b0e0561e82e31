//! The example scheduler: assigns pending tasks to nodes with free
//! capacity, many per commit, and frees a node's slot when its task
//! finishes or is deleted.
//!
//! # Objects
//!
//! - `nodes/NAME`: `{"capacity": N, ...}`. The scheduler keeps `"assigned":
//!   K` in the node's value, K being how many tasks hold a slot on it, and
//!   keeps every other field. A user's write that leaves `assigned` out
//!   (say `{"capacity": 4}` to resize the node) is fine: the scheduler then
//!   counts the node's slots from the tasks' labels (below) before it next
//!   writes the node.
//! - `tasks/NAME`: `{"status": "pending", ...}`. The scheduler changes it to
//!   `{"status": "assigned", "node": NODE, ...}`, keeping every other field,
//!   and gives the task the finalizer [`SLOT_FINALIZER`] and the label
//!   [`NODE_LABEL`]` = NODE`: the task holds a slot on NODE.
//!
//! # Freeing a slot
//!
//! A task that holds a slot (has [`SLOT_FINALIZER`]) frees it when it
//! finishes (any status other than `pending` and `assigned`, say `"done"`)
//! or is deleted (the finalizer turns the delete into a mark, so the
//! scheduler still sees the task and the node it held). The scheduler then
//! lowers the node's `assigned` and removes the finalizer (and, for a
//! finished task, the label) in one commit, with a `Released` event; a
//! deleted task disappears with that commit. A task holding a slot is
//! reconciled through [`leasehold_guest::finalizer`]: apply frees the slot
//! of a finished task, cleanup that of a deleted one. A task set back to `pending` while it holds a slot is placed
//! again, and its old slot is freed in the same commit.
//!
//! # Reading little
//!
//! The scheduler never lists every task: it reads the pending ones through
//! a selector (`contains {"status": "pending"}`, served by the store's
//! index), page by page, and only when there are some does it read the
//! nodes, keeping those with room. A node's usage is its `assigned`, not a
//! count of tasks.
//!
//! A change that can only have made room (a node's change, a freed slot)
//! schedules only while tasks are left waiting for room: every other
//! pending task has its own change queued, whose reconcile places it (see
//! [`Scheduler`]). A task's change that leaves nothing to place is answered
//! from one read of the task.
//!
//! # Batches
//!
//! A scheduling pass, whatever key it was called for, places pending tasks
//! until none is left, no node has room, or [`MAX_ASSIGNMENTS_PER_RECONCILE`]
//! were placed (then it is requeued at once). The assignments go out in as
//! few commits as the host's limits allow: one commit holds up to
//! [`MAX_OPS_PER_COMMIT`] operations (one per task, one per node it
//! touches) and [`MAX_EVENTS_PER_COMMIT`] events (one per task).
//!
//! # Guarantees, and what makes them hold
//!
//! Every commit is atomic and fenced: each task's write is conditional on
//! the version it was read at, each node's write on the version it was read
//! at (or last written at by this reconcile), and each task's event comes
//! with it. All of it lands or none of it, and only while this tenure's
//! lease is current.
//!
//! - **A task is never assigned twice**: an assignment replaces the task's
//!   pending version, so a second one, based on that version, conflicts,
//!   re-reads, and no longer finds the task pending.
//! - **A node is never over capacity**: every change to a node's slots
//!   (an assignment, a release) writes the node's `assigned` conditionally
//!   on the node's version, in the same commit as the tasks' writes, so two
//!   writers never both build on one count: the second conflicts and
//!   re-reads. When `assigned` is missing, the count comes from a listing
//!   of the tasks labelled with the node, made after the node was read: an
//!   assignment committed before that listing is in it, one committed
//!   after the node's read changed the node's version and makes our commit
//!   conflict. (Tasks marked assigned by someone who bypasses the scheduler
//!   without touching the node are outside this guarantee.)
//! - **A slot is freed once**: the release removes the finalizer,
//!   conditionally on the task's version, so a second release of the same
//!   task conflicts and finds no finalizer.
//! - **A deposed scheduler writes nothing**: its commit is fenced; it stops
//!   and returns the fenced error.
//! - **A lost reply is harmless**: after an `unavailable` commit the
//!   scheduler does not retry blindly; the host requeues with backoff and
//!   the next reconcile re-reads, finding the tasks assigned if the commit
//!   did land.
//!
//! # Sharded
//!
//! Run with `shards = N`, each shard places only its own tasks (by the
//! host's rule: FNV-1a of `tasks/NAME`), and every shard watches every
//! node ([`Description::watch_on_every_shard`]): the nodes are shared.
//! Every shard lists the pending tasks and skips the other shards' ones
//! (the selector cannot tell shards apart), so each reads what one
//! unsharded scheduler would. The guarantees above hold across shards as
//! they hold across tenures: two shards racing for a node's last slot both
//! write the node conditionally on the version they read, so one of them
//! conflicts, re-reads, and finds the node full.
//!
//! Malformed objects (a node without a numeric capacity, a task whose
//! status is not a string) are skipped with a warning, never fatal: they
//! cannot hold capacity, so skipping them cannot overfill a node. A
//! malformed task that holds a slot frees it.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold_guest::{
    Api, Context, Controller, Description, Error, Kind, MAX_CALL_PAYLOAD_BYTES,
    MAX_EVENTS_PER_COMMIT, MAX_OPS_PER_COMMIT, MAX_PAGE_SIZE, Object, Outcome, Reason, Retry,
    Selector, StoreError, Transaction, finalizer, retry_on_conflict,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

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
/// The reason of the event recorded when a task frees its slot.
pub const RELEASED_REASON: &str = "Released";
/// The finalizer of a task that holds a slot on a node: it keeps a deleted
/// task readable until the scheduler has freed the slot.
pub const SLOT_FINALIZER: &str = "scheduler/slot";
/// The label naming the node a task holds a slot on.
pub const NODE_LABEL: &str = "scheduler/node";

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
pub const MAX_ASSIGNMENTS_PER_RECONCILE: usize = 1_000;
/// Pending tasks read per page.
pub const PENDING_PAGE: u32 = MAX_PAGE_SIZE;
/// Most nodes the scheduler reads in one reconcile.
pub const MAX_NODES: usize = 1_000;
/// Most tasks a count of one node's slots reads (when the node has no
/// `assigned`); beyond it the reconcile fails and is retried with backoff.
pub const MAX_TASKS_PER_NODE: usize = 100_000;
/// Bytes of values and messages one commit carries at most: half the
/// host call's bound, leaving room for keys, metadata and framing.
pub const MAX_COMMIT_BYTES: usize = MAX_CALL_PAYLOAD_BYTES / 2;

/// A node's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// How many tasks may be assigned to it.
    pub capacity: u64,
    /// How many tasks hold a slot on it. Written with every assignment and
    /// release, which changes the node's version: that is what makes
    /// concurrent changes to one node's slots conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned: Option<u64>,
    /// Every other field, kept as is.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A task's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// `pending`, `assigned`, or anything else (which frees the task's
    /// slot, if it holds one).
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

/// The selector of pending tasks.
pub fn pending_tasks() -> Selector {
    Selector::new().contains(json!({ "status": PENDING }))
}

/// The node whose slot `task` holds, if it holds one.
fn held_slot<T>(task: &Object<T>) -> Option<&str> {
    task.has_finalizer(SLOT_FINALIZER)
        .then(|| task.label(NODE_LABEL).unwrap_or_default())
}

/// The scheduler controller.
///
/// It remembers one thing between reconciles of its instance (one tenure,
/// or less: a guest restarted after a trap is a new instance, and the host
/// resyncs it): whether pending tasks may be waiting for room. A change
/// of a node, or a freed slot, only makes room; it needs a scheduling pass
/// only when the last pass left tasks pending for want of room. Every
/// other pending task has its own change queued, whose reconcile places
/// it. The scheduler's own assignments change each node they fill, so
/// without this every batch would be followed by one scheduling pass per
/// node it touched.
#[derive(Debug)]
pub struct Scheduler {
    waiting_for_room: AtomicBool,
}

impl Scheduler {
    /// A scheduler that knows nothing yet: it assumes tasks may be waiting
    /// for room, so its first node change or freed slot schedules.
    pub const fn new() -> Self {
        Self {
            waiting_for_room: AtomicBool::new(true),
        }
    }

    fn schedule(&self, ctx: &Context) -> Result<Outcome, Error> {
        let (outcome, waiting) = schedule(ctx, self.waiting_for_room.load(Ordering::Relaxed))?;
        if let Some(waiting) = waiting {
            self.waiting_for_room.store(waiting, Ordering::Relaxed);
        }
        Ok(outcome)
    }

    /// Schedule only if the last pass left tasks waiting for room, or the
    /// reconcile has a cause other than a change (a timer, a retry, a
    /// resync: always a full pass).
    fn schedule_if_waiting(&self, ctx: &Context) -> Result<Outcome, Error> {
        if ctx.reason() == Reason::Change && !self.waiting_for_room.load(Ordering::Relaxed) {
            return Ok(Outcome::Done);
        }
        self.schedule(ctx)
    }
}

impl Default for Scheduler {
    fn default() -> Self {
        Self::new()
    }
}

leasehold_guest::export_controller!(Scheduler);

impl Controller for Scheduler {
    fn describe(&self) -> Description {
        Description::watching([TASKS])
            .watch_on_every_shard(NODES)
            .resync_every(RESYNC_PERIOD)
    }

    fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error> {
        match kind {
            TASKS => match release_if_done(ctx, name)? {
                // A pending task: place it (and whatever else is pending).
                TaskSeen::Pending => self.schedule(ctx),
                // A freed slot is room: it matters to tasks left waiting.
                TaskSeen::Freed => self.schedule_if_waiting(ctx),
                // A change that leaves nothing new to place (the task is
                // assigned, finished without a slot, or gone: typically the
                // change this scheduler's own assignment made) is answered
                // from the one read above, without listing the pending
                // tasks. Every other cause (a timer, a retry, a resync)
                // schedules, so a batch bound's requeue and a failed
                // placement always go on.
                TaskSeen::Settled if ctx.reason() == Reason::Change => Ok(Outcome::Done),
                TaskSeen::Settled => self.schedule(ctx),
            },
            // A new node, a capacity change or a lowered count may make
            // room; the scheduler's own assignments change nodes too.
            NODES => self.schedule_if_waiting(ctx),
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

fn decode_or_warn<T: serde::de::DeserializeOwned>(object: &Object<Value>) -> Option<Object<T>> {
    match object.decode::<T>() {
        Ok(decoded) => Some(decoded),
        Err(error) => {
            leasehold_guest::warn!("skipping {}: {error}", object.key());
            None
        }
    }
}

/// How many tasks hold a slot on `node`: its `assigned`, or, without one,
/// a count of the tasks labelled with it (read after the node).
fn slots_used(node: &Object<Node>) -> Result<u64, Error> {
    if let Some(assigned) = node.value.assigned {
        return Ok(assigned);
    }
    let labelled = Api::<Value>::new(Task::KIND).list_all_selected(
        &Selector::new().label(NODE_LABEL, node.name.as_str()),
        MAX_TASKS_PER_NODE,
    )?;
    Ok(labelled
        .iter()
        .filter(|task| held_slot(task) == Some(node.name.as_str()))
        .count() as u64)
}

/// What [`release_if_done`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskSeen {
    /// The task is pending: there is something to place.
    Pending,
    /// It gave up its slot in this reconcile: a pending task may take it.
    Freed,
    /// Nothing for this task to place or free: assigned, finished without
    /// a slot, gone, or unreadable.
    Settled,
}

/// Free the slot of task `name` if it holds one and no longer needs it: it
/// is marked for deletion, or its status is neither pending nor assigned.
///
/// A task holding a slot is reconciled through [`finalizer`] under
/// [`SLOT_FINALIZER`]. The scheduler puts the finalizer on a task in the
/// commit that assigns it (it means "holds a slot"), so a task without it
/// is not the scheduler's to free and never reaches `finalizer`, whose
/// adding step therefore never runs here:
///
/// - the task lives (apply): still pending or assigned, nothing to do;
///   finished, one commit gives the slot up: the task loses the finalizer
///   and the label, the node's `assigned` goes down by one, and a
///   `Released` event records it;
/// - the task is marked for deletion (cleanup): the node's `assigned` goes
///   down and the `Released` event is recorded in the commit that removes
///   the finalizer, which removes the task (if that was its last
///   finalizer). One commit, conditional on the task's version: a slot is
///   freed once.
fn release_if_done(ctx: &Context, name: &str) -> Result<TaskSeen, Error> {
    retry_on_conflict(MAX_CONFLICT_RETRIES + 1, || {
        let Some(task) = ctx.api::<Value>(Task::KIND).get(name)? else {
            return Ok(TaskSeen::Settled);
        };
        let status = task
            .decode::<Task>()
            .ok()
            .and_then(|t| t.value.status)
            .unwrap_or_default();
        let pending = !task.is_deleting() && status == PENDING;
        let seen = if pending {
            TaskSeen::Pending
        } else {
            TaskSeen::Settled
        };
        let Some(node_name) = held_slot(&task).map(str::to_string) else {
            // Not ours to free (never assigned, or freed already). Decoded
            // for the warning a malformed task deserves.
            decode_or_warn::<Task>(&task);
            return Ok(seen);
        };
        let freed = Cell::new(false);
        finalizer(
            task,
            SLOT_FINALIZER,
            |task| {
                if status == PENDING || status == ASSIGNED {
                    // Still assigned, or pending again (placed anew, with
                    // its old slot freed in the same commit, by `schedule`).
                    return Ok(Outcome::Done);
                }
                // Finished: the slot, the finalizer and the label go.
                let mut meta = task.meta.clone();
                meta.finalizers.retain(|f| f != SLOT_FINALIZER);
                meta.labels.remove(NODE_LABEL);
                let tx = Transaction::new().set_metadata(task, &meta);
                free_slot(ctx, name, &node_name, tx)?.commit()?;
                freed.set(true);
                Ok(Outcome::Done)
            },
            |_| {
                // Deleted: the slot goes with the finalizer's removal.
                let tx = free_slot(ctx, name, &node_name, Transaction::new())?;
                freed.set(true);
                Ok(tx)
            },
        )?;
        if freed.get() {
            leasehold_guest::info!("released the slot of tasks/{name} on nodes/{node_name}");
            Ok(TaskSeen::Freed)
        } else {
            Ok(seen)
        }
    })
}

/// `tx` with task `name`'s slot on `node_name` given up: the node's
/// `assigned` lowered by one (conditional on the node's version), and the
/// `Released` event.
fn free_slot(
    ctx: &Context,
    name: &str,
    node_name: &str,
    mut tx: Transaction,
) -> Result<Transaction, Error> {
    let freed = match ctx
        .api::<Value>(Node::KIND)
        .get(node_name)?
        .as_ref()
        .and_then(decode_or_warn::<Node>)
    {
        Some(node) => {
            let used = slots_used(&node)?.saturating_sub(1);
            let capacity = node.value.capacity;
            let lowered = Node {
                assigned: Some(used),
                ..node.value.clone()
            };
            tx = tx.update_typed(&node, &lowered);
            format!("({used} of {capacity} slots in use)")
        }
        // The node is gone (or unreadable): nothing to lower.
        None => "(the node is gone)".to_string(),
    };
    let message = format!(
        "released its slot on node {node_name} {freed} at epoch {}",
        ctx.fence().epoch
    );
    Ok(tx.event(TASKS, name, RELEASED_REASON, message))
}

/// One node as the scheduler sees it: the object read (its version the
/// last one this reconcile knows of), and how many tasks hold a slot on it.
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

/// The nodes one reconcile places tasks on.
#[derive(Debug)]
struct Nodes {
    slots: Vec<Slot>,
}

impl Nodes {
    /// Every node, with its slots in use.
    fn read() -> Result<Self, Error> {
        let mut slots = Vec::new();
        for object in Api::<Value>::new(Node::KIND).list_all(MAX_NODES)? {
            if let Some(node) = decode_or_warn::<Node>(&object) {
                let used = slots_used(&node)?;
                slots.push(Slot { node, used });
            }
        }
        Ok(Self { slots })
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.slots.iter().position(|s| s.node.name == name)
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
}

/// One planned assignment.
#[derive(Debug)]
struct Planned {
    task: Object<Task>,
    node: usize,
    message: String,
}

/// Assignments collected for one commit, and what they touch.
#[derive(Debug, Default)]
struct Batch {
    planned: Vec<Planned>,
    /// Nodes whose `assigned` the commit writes.
    nodes: BTreeSet<usize>,
    bytes: usize,
}

impl Batch {
    /// Whether one more assignment, touching `nodes` and carrying about
    /// `bytes`, still fits in the commit.
    fn fits(&self, nodes: &[usize], bytes: usize) -> bool {
        let new_nodes = nodes.iter().filter(|n| !self.nodes.contains(n)).count();
        let ops = self.planned.len() + self.nodes.len() + 1 + new_nodes;
        ops <= MAX_OPS_PER_COMMIT
            && self.planned.len() < MAX_EVENTS_PER_COMMIT
            && (self.planned.is_empty() || self.bytes + bytes <= MAX_COMMIT_BYTES)
    }

    /// Commit the batch: each task assigned and holding its slot, each
    /// touched node with its new count, each assignment's event. Afterwards
    /// the touched nodes are known at the commit's revision.
    fn commit(&mut self, nodes: &mut Nodes) -> Result<usize, Error> {
        if self.planned.is_empty() {
            return Ok(0);
        }
        let mut tx = Transaction::new();
        for planned in &self.planned {
            let node = &nodes.slots[planned.node].node.name;
            let assigned = Task {
                status: Some(ASSIGNED.to_string()),
                node: Some(node.clone()),
                rest: planned.task.value.rest.clone(),
            };
            let mut meta = planned.task.meta.clone();
            meta.labels.insert(NODE_LABEL.to_string(), node.clone());
            if !meta.finalizers.iter().any(|f| f == SLOT_FINALIZER) {
                meta.finalizers.push(SLOT_FINALIZER.to_string());
            }
            tx = tx.replace(&planned.task, &assigned, &meta);
        }
        for &index in &self.nodes {
            let slot = &nodes.slots[index];
            let counted = Node {
                assigned: Some(slot.used),
                ..slot.node.value.clone()
            };
            tx = tx.update_typed(&slot.node, &counted);
        }
        for planned in &self.planned {
            tx = tx.event(
                TASKS,
                planned.task.name.as_str(),
                ASSIGNED_REASON,
                planned.message.as_str(),
            );
        }
        let committed = tx.commit()?;
        for &index in &self.nodes {
            let slot = &mut nodes.slots[index];
            slot.node.version = committed.revision;
            slot.node.value.assigned = Some(slot.used);
        }
        let placed = self.planned.len();
        leasehold_guest::info!(
            "assigned {placed} task(s) to {} node(s) at revision {}",
            self.nodes.len(),
            committed.revision
        );
        *self = Self::default();
        Ok(placed)
    }
}

/// Place pending tasks until none is left, no node has room, or the
/// per-reconcile bound is reached, in as few commits as the limits allow.
/// Besides the outcome, whether tasks are left waiting for room: `true`
/// when no node had room for one, `false` when every pending task was
/// placed, `None` when the bound cut the pass short (the requeue goes on).
/// With `room_first` (tasks were left waiting for room), the nodes are read
/// before the pending tasks, and no more pending tasks are listed per page
/// than there are free slots.
///
/// A conflict (or a task or node gone) means something changed since it
/// was read: [`retry_on_conflict`] reads again, up to
/// [`MAX_CONFLICT_RETRIES`] times, and the assignments already committed
/// count toward the bound. Fenced stops (the host hears `fenced`);
/// unavailable has an unknown outcome, so there is no blind retry (the
/// requeue re-reads); conflicts past the bound and invalid writes go to
/// the error policy.
fn schedule(ctx: &Context, room_first: bool) -> Result<(Outcome, Option<bool>), Error> {
    let mut placed = 0;
    let shard = ctx.shard();
    retry_on_conflict(MAX_CONFLICT_RETRIES + 1, || {
        let tasks = Api::<Value>::new(Task::KIND);
        let pending = pending_tasks();
        let mut nodes: Option<Nodes> = None;
        let mut page_size = PENDING_PAGE;
        if room_first {
            // Tasks were left waiting for room: most likely they still
            // outnumber it. Read the nodes first and list only as many
            // pending tasks as there are free slots (none, when there is
            // no room at all), not a whole page per freed slot.
            let read = Nodes::read()?;
            let free: u64 = read.slots.iter().map(Slot::free).sum();
            if free == 0 {
                leasehold_guest::info!("pending tasks wait: no node has a free slot");
                return Ok((Outcome::Done, Some(true)));
            }
            page_size = free.min(u64::from(PENDING_PAGE)) as u32;
            nodes = Some(read);
        }
        let mut after: Option<String> = None;
        let mut batch = Batch::default();
        loop {
            let page = tasks.list_selected(&pending, after.as_deref(), page_size)?;
            let mut bound_reached = false;
            for object in &page.objects {
                let Some(task) = decode_or_warn::<Task>(object) else {
                    continue;
                };
                // A task marked for deletion is not placed; if it holds a
                // slot, its own reconcile frees it.
                if task.is_deleting() || !task.value.has_status(PENDING) {
                    continue;
                }
                // Another shard's task is that shard's to place.
                if !shard.owns_key(TASKS, &task.name) {
                    continue;
                }
                if placed + batch.planned.len() >= MAX_ASSIGNMENTS_PER_RECONCILE {
                    bound_reached = true;
                    break;
                }
                // The nodes are read only when there is a task to place.
                if nodes.is_none() {
                    nodes = Some(Nodes::read()?);
                }
                let nodes = nodes.as_mut().expect("read above");
                // A task set back to pending while holding a slot gives it
                // up as it is placed again, in the same commit.
                let old = held_slot(&task).and_then(|n| nodes.find(n));
                if let Some(old) = old {
                    nodes.slots[old].used = nodes.slots[old].used.saturating_sub(1);
                }
                let Some(node) = nodes.pick() else {
                    if let Some(old) = old {
                        nodes.slots[old].used += 1;
                    }
                    placed += batch.commit(nodes)?;
                    // Every pending task waits for the same thing: a node
                    // change or a freed slot, both of which trigger a
                    // reconcile.
                    leasehold_guest::info!("pending tasks wait: no node has a free slot");
                    return Ok((Outcome::Done, Some(true)));
                };
                let mut touched = vec![node];
                touched.extend(old.filter(|&o| o != node));
                let bytes = object_bytes(&task) + object_bytes(&nodes.slots[node].node);
                if !batch.fits(&touched, bytes) {
                    placed += batch.commit(nodes)?;
                }
                let slot = &mut nodes.slots[node];
                slot.used += 1;
                let message = format!(
                    "assigned to node {} ({} of {} slots) at epoch {}",
                    slot.node.name,
                    slot.used,
                    slot.node.value.capacity,
                    ctx.fence().epoch
                );
                batch.bytes += bytes + message.len();
                batch.nodes.extend(touched);
                batch.planned.push(Planned {
                    task,
                    node,
                    message,
                });
            }
            let more = match page.next {
                Some(next) if !page.objects.is_empty() => Some(next),
                _ => None,
            };
            if bound_reached || more.is_none() {
                if let Some(nodes) = nodes.as_mut() {
                    placed += batch.commit(nodes)?;
                }
                return Ok(if bound_reached {
                    // More may be pending: the next reconcile goes on at
                    // once.
                    (Outcome::RequeueAfter(Duration::ZERO), None)
                } else {
                    (Outcome::Done, Some(false))
                });
            }
            // The batch carries over to the next page: the cursor is past
            // its tasks, whether or not they are committed yet.
            after = more;
        }
    })
}

/// About how many bytes `object`'s value takes in a commit.
fn object_bytes<T: Serialize>(object: &Object<T>) -> usize {
    serde_json::to_vec(&object.value).map_or(0, |v| v.len()) + object.name.len() + 64
}
