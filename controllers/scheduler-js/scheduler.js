/**
 * The example scheduler in JavaScript: assigns each pending task to a node
 * with free capacity. The same controller as `controllers/scheduler`
 * (Rust) and `controllers/scheduler-py` (Python), with the same guarantees.
 *
 * Objects:
 *
 * - `nodes/NAME`: `{"capacity": N, ...}`. Assigning a task to a node also
 *   writes `"assigned": K` (the node's task count after the assignment)
 *   into the node, keeping every other field.
 * - `tasks/NAME`: `{"status": "pending", ...}` becomes
 *   `{"status": "assigned", "node": NODE, ...}`, keeping every other field.
 *   Any other status (say `"done"`) is left alone and frees its slot.
 *
 * Guarantees, and what makes them hold. One assignment is one commit: the
 * task's update conditional on the version read while pending, the node's
 * update conditional on the version read, and an `Assigned` event; all of
 * it lands or none of it, and only while this tenure's lease is current.
 *
 * - A task is never assigned twice: a second assignment would update the
 *   task at a version at which it was still pending, which the first
 *   replaced; whoever comes second conflicts, re-reads, finds it assigned.
 * - A node is never over capacity: usage is counted from a listing of the
 *   tasks made after the node was read, and every assignment changes the
 *   node's version, so one committed after our read of the node makes our
 *   commit conflict, and one committed before it is in our listing.
 * - A deposed scheduler writes nothing: its commit is fenced; it stops.
 * - A lost reply is harmless: after `Unavailable` there is no blind retry;
 *   the host requeues and the next reconcile re-reads.
 *
 * Malformed objects are skipped with a warning, never fatal.
 *
 * @module
 */

import {
  Api,
  Conflict,
  Context,
  Controller,
  DecodeError,
  Description,
  Kind,
  NotFound,
  Outcome,
  Retry,
  StoredObject,
  Transaction,
  info,
  retryOnConflict,
  warn,
} from '../../guest-sdk/js/src/index.js';

export const NODES = 'nodes';
export const TASKS = 'tasks';
export const PENDING = 'pending';
export const ASSIGNED = 'assigned';
/** The reason of the event recorded with each assignment. */
export const ASSIGNED_REASON = 'Assigned';
/** Every node and task is looked at again this often without a change. */
export const RESYNC_PERIOD_MS = 60_000;
/** Re-reads after a conflict inside one reconcile before the error policy requeues. */
export const MAX_CONFLICT_RETRIES = 5;
/** The requeue delay after that many conflicts. */
export const CONFLICT_RETRY_AFTER_MS = 200;
/** Assignments one reconcile makes at most; more work requeues at once. */
export const MAX_ASSIGNMENTS_PER_RECONCILE = 64;
/** Most nodes read in one reconcile. */
export const MAX_NODES = 1_000;
/** Most tasks read in one reconcile. */
export const MAX_TASKS = 20_000;

/**
 * @param {unknown} value
 * @param {string} what
 * @returns {number}
 */
function count(value, what) {
  if (!Number.isSafeInteger(value) || /** @type {number} */ (value) < 0) throw new TypeError(`${what} is not a count`);
  return /** @type {number} */ (value);
}

/**
 * @param {unknown} value
 * @param {string} what
 * @returns {Record<string, any>}
 */
function jsonObject(value, what) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new TypeError(`${what} is a JSON object`);
  }
  return /** @type {Record<string, any>} */ (value);
}

/** A node's value: its capacity, its assignment count, every other field kept. */
export class Node extends Kind {
  static KIND = NODES;

  /**
   * @param {number} capacity
   * @param {number | null} [assigned]
   * @param {Record<string, any>} [rest]
   */
  constructor(capacity, assigned = null, rest = {}) {
    super();
    this.capacity = capacity;
    this.assigned = assigned;
    this.rest = rest;
  }

  /** @param {any} value @returns {Node} */
  static fromValue(value) {
    const { capacity, assigned, ...rest } = jsonObject(value, 'a node');
    return new Node(count(capacity, 'capacity'), assigned == null ? null : count(assigned, 'assigned'), rest);
  }

  /** @returns {Record<string, any>} */
  toValue() {
    const out = { ...this.rest, capacity: this.capacity };
    if (this.assigned !== null) out.assigned = this.assigned;
    return out;
  }
}

/** A task's value: its status and node, every other field kept. */
export class Task extends Kind {
  static KIND = TASKS;

  /**
   * @param {string | null} [status]
   * @param {string | null} [node]
   * @param {Record<string, any>} [rest]
   */
  constructor(status = null, node = null, rest = {}) {
    super();
    this.status = status;
    this.node = node;
    this.rest = rest;
  }

  /** @param {any} value @returns {Task} */
  static fromValue(value) {
    const { status, node, ...rest } = jsonObject(value, 'a task');
    if (status != null && typeof status !== 'string') throw new TypeError('status is not a string');
    if (node != null && typeof node !== 'string') throw new TypeError('node is not a string');
    return new Task(status ?? null, node ?? null, rest);
  }

  /** @returns {Record<string, any>} */
  toValue() {
    const out = { ...this.rest };
    if (this.status !== null) out.status = this.status;
    if (this.node !== null) out.node = this.node;
    return out;
  }
}

/**
 * @template {typeof Kind} K
 * @param {StoredObject} obj
 * @param {K} kindType
 * @returns {StoredObject<InstanceType<K>> | null}
 */
function decodeOrWarn(obj, kindType) {
  try {
    return obj.decode(kindType);
  } catch (e) {
    if (!(e instanceof DecodeError)) throw e;
    warn(`skipping ${obj.key}: ${e.message}`);
    return null;
  }
}

/** @typedef {{node: StoredObject<Node>, used: number}} Slot A node and how many of its slots are used. */

/** Every node (read first) and, from a listing made after that, usage and pending tasks. */
class Cluster {
  constructor() {
    /** @type {Array<Slot>} */
    this.slots = [];
    for (const obj of new Api(NODES).listAll(MAX_NODES)) {
      const node = decodeOrWarn(obj, Node);
      if (node !== null) this.slots.push({ node, used: 0 });
    }
    const byName = new Map(this.slots.map((s) => [s.node.name, s]));
    /** @type {StoredObject<Task>[]} */
    this.pending = [];
    for (const obj of new Api(TASKS).listAll(MAX_TASKS)) {
      const task = decodeOrWarn(obj, Task);
      if (task === null) continue;
      if (task.value.status === PENDING) this.pending.push(task);
      else if (task.value.status === ASSIGNED && byName.has(task.value.node ?? '')) {
        /** @type {{used: number}} */ (byName.get(task.value.node ?? '')).used += 1;
      }
    }
  }

  /** @param {Slot} slot */
  static free(slot) {
    return Math.max(0, slot.node.value.capacity - slot.used);
  }

  /**
   * The index of the next pending task to place: `only`, or the first.
   *
   * @param {string | null} only
   * @returns {number | null}
   */
  nextPending(only) {
    if (only === null) return this.pending.length > 0 ? 0 : null;
    const i = this.pending.findIndex((t) => t.name === only);
    return i < 0 ? null : i;
  }

  /**
   * The node with the most free slots; the first in name order among equals.
   *
   * @returns {number | null}
   */
  pick() {
    /** @type {number | null} */
    let best = null;
    this.slots.forEach((slot, i) => {
      if (Cluster.free(slot) > 0 && (best === null || Cluster.free(slot) > Cluster.free(this.slots[best]))) best = i;
    });
    return best;
  }

  /**
   * @param {number} task
   * @param {number} slot
   * @param {number} revision
   */
  assigned(task, slot, revision) {
    this.pending.splice(task, 1);
    const s = this.slots[slot];
    s.used += 1;
    s.node.version = revision;
    s.node.value.assigned = s.used;
  }
}

/**
 * One assignment: the task, the node and an event in one fenced commit; its revision.
 *
 * @param {Context} ctx
 * @param {StoredObject<Task>} task
 * @param {Slot} slot
 * @returns {number}
 */
function assign(ctx, task, slot) {
  const node = slot.node;
  const n = slot.used + 1;
  const assignedTask = new Task(ASSIGNED, node.name, { ...task.value.rest });
  const bumped = new Node(node.value.capacity, n, { ...node.value.rest });
  const message = `assigned to node ${node.name} (${n} of ${node.value.capacity} slots) at epoch ${ctx.fence.epoch}`;
  const committed = new Transaction()
    .updateTyped(task, assignedTask)
    .updateTyped(node, bumped)
    .event(TASKS, task.name, ASSIGNED_REASON, message)
    .commit();
  info(`assigned ${task.key} to ${node.key}`);
  return committed.revision;
}

/**
 * @param {Context} ctx
 * @param {string | null} only
 * @returns {Outcome}
 */
function schedule(ctx, only) {
  let made = 0;
  return retryOnConflict(MAX_CONFLICT_RETRIES + 1, () => {
    const cluster = new Cluster();
    for (;;) {
      const task = cluster.nextPending(only);
      if (task === null) return Outcome.done();
      if (made === MAX_ASSIGNMENTS_PER_RECONCILE) return Outcome.requeueAfter(0);
      const slot = cluster.pick();
      if (slot === null) {
        info(`${cluster.pending.length} pending task(s), no node has a free slot`);
        return Outcome.done();
      }
      const revision = assign(ctx, cluster.pending[task], cluster.slots[slot]);
      cluster.assigned(task, slot, revision);
      made += 1;
    }
  });
}

/** The scheduler controller. */
export class Scheduler extends Controller {
  /** @returns {Description} */
  describe() {
    return Description.watching([NODES, TASKS]).resyncEvery(RESYNC_PERIOD_MS);
  }

  /**
   * @param {Context} ctx
   * @param {string} kind
   * @param {string} name
   * @returns {Outcome}
   */
  reconcile(ctx, kind, name) {
    if (kind === TASKS) {
      const obj = ctx.api(TASKS).get(name);
      let task = null;
      if (obj !== null) {
        try {
          task = obj.decode(Task);
        } catch (e) {
          if (!(e instanceof DecodeError)) throw e;
        }
      }
      if (task !== null && task.value.status === PENDING) return schedule(ctx, name);
      // Our own assignment coming back: nothing freed, nothing to place.
      if (task !== null && task.value.status === ASSIGNED) return Outcome.done();
      // Deleted, finished or malformed: it may have freed a slot.
      return schedule(ctx, null);
    }
    if (kind === NODES) return schedule(ctx, null);
    warn(`asked to reconcile ${kind}/${name}, a kind not watched`);
    return Outcome.done();
  }

  /**
   * @param {Context} ctx
   * @param {string} kind
   * @param {string} name
   * @param {unknown} error
   * @returns {Retry}
   */
  errorPolicy(ctx, kind, name, error) {
    if (error instanceof Conflict || error instanceof NotFound) return Retry.after(CONFLICT_RETRY_AFTER_MS);
    return Retry.backoff();
  }
}
