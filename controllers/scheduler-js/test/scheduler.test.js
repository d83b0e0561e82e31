// The JavaScript scheduler against the SDK's fake host: no Wasm build, no host.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Reply, Update } from '../../../guest-sdk/js/src/index.js';
import { At, Fault, FakeHost } from '../../../guest-sdk/js/src/fake.js';
import {
  ASSIGNED_REASON,
  CONFLICT_RETRY_AFTER_MS,
  MAX_ASSIGNMENTS_PER_RECONCILE,
  MAX_CONFLICT_RETRIES,
  NODES,
  RESYNC_PERIOD_MS,
  Scheduler,
  TASKS,
} from '../scheduler.js';

const node = (host, name, capacity) => host.seed(NODES, name, { capacity });
const pending = (host, name) => host.seed(TASKS, name, { status: 'pending' });
const task = (host, name) => host.object(TASKS, name).value;

function usage(host) {
  const used = {};
  for (const t of host.objects(TASKS)) {
    if (t.value?.status === 'assigned') used[t.value.node] = (used[t.value.node] ?? 0) + 1;
  }
  return used;
}

function assertWithinCapacity(host) {
  for (const [name, used] of Object.entries(usage(host))) {
    const capacity = host.object(NODES, name).value.capacity;
    assert.ok(used <= capacity, `${name} has ${used} tasks for ${capacity} slots`);
  }
}

const pendingNames = (host) => host.objects(TASKS).filter((t) => t.value?.status === 'pending').map((t) => t.name);

test('describes nodes and tasks with a resync', () => {
  const d = new Scheduler().describe();
  assert.deepEqual(d.watches, [NODES, TASKS]);
  assert.equal(d.resyncMs, RESYNC_PERIOD_MS);
});

test('assigns a pending task with its node and event in one commit', () => {
  const host = new FakeHost();
  host.seed(NODES, 'n1', { capacity: 2, zone: 'a' });
  host.seed(TASKS, 't1', { status: 'pending', image: 'busybox' });
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.done());
  assert.deepEqual(task(host, 't1'), { status: 'assigned', node: 'n1', image: 'busybox' });
  assert.deepEqual(host.object(NODES, 'n1').value, { capacity: 2, zone: 'a', assigned: 1 });
  const commits = host.commits();
  assert.equal(commits.length, 1, 'one atomic commit');
  assert.deepEqual(commits[0].ops.map((op) => String(op.key)), ['tasks/t1', 'nodes/n1']);
  assert.ok(commits[0].ops.every((op) => op instanceof Update), 'both writes are conditional');
  const events = host.eventsWithReason(ASSIGNED_REASON);
  assert.equal(events.length, 1);
  assert.equal(String(events[0].key), 'tasks/t1');
  assert.equal(events[0].revision, commits[0].revision);
  assert.match(events[0].message, /node n1/);
  assert.match(events[0].message, /epoch 1/);
});

test('never assigns over capacity', () => {
  const host = new FakeHost();
  node(host, 'n1', 1);
  node(host, 'n2', 2);
  node(host, 'n3', 0);
  for (const name of ['t1', 't2', 't3', 't4', 't5']) pending(host, name);
  for (const [key, reply] of host.resync(new Scheduler())) assert.deepEqual(reply, Reply.done(), String(key));
  assertWithinCapacity(host);
  assert.deepEqual(usage(host), { n1: 1, n2: 2 });
  assert.deepEqual(pendingNames(host), ['t4', 't5']);
  assert.equal(host.eventsWithReason(ASSIGNED_REASON).length, 3);
  // A full cluster stays as it is.
  const commits = host.commits().length;
  host.resync(new Scheduler());
  assert.equal(host.commits().length, commits);
  // Room on a node is used as soon as the node changes.
  host.seed(NODES, 'n3', { capacity: 1 });
  assert.deepEqual(host.reconcile(new Scheduler(), NODES, 'n3'), Reply.done());
  assert.deepEqual(pendingNames(host), ['t5']);
  assertWithinCapacity(host);
});

test('spreads tasks to the node with the most free slots', () => {
  const host = new FakeHost();
  node(host, 'a', 1);
  node(host, 'b', 3);
  for (const t of ['t1', 't2', 't3']) pending(host, t);
  assert.deepEqual(host.reconcile(new Scheduler(), NODES, 'a'), Reply.done());
  assert.deepEqual(['t1', 't2', 't3'].map((t) => task(host, t).node), ['b', 'b', 'a']);
});

test('a finished task frees its slot', () => {
  const host = new FakeHost();
  node(host, 'n1', 1);
  pending(host, 't1');
  pending(host, 't2');
  host.resync(new Scheduler());
  assert.deepEqual(pendingNames(host), ['t2']);
  host.seed(TASKS, 't1', { status: 'done', node: 'n1' });
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.done());
  assert.equal(task(host, 't2').node, 'n1');
  assertWithinCapacity(host);
});

test('a conflict is re-read and retried', () => {
  const host = new FakeHost();
  node(host, 'n1', 1);
  pending(host, 't1');
  host.beforeCommit(1, (h) => h.seed(TASKS, 't1', { status: 'pending', priority: 7 }));
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.done());
  assert.equal(host.pendingFaults, 0);
  assert.equal(host.calls().commit, 2, 'one conflict, one retry');
  assert.equal(host.commits().length, 1);
  assert.deepEqual(task(host, 't1'), { status: 'assigned', node: 'n1', priority: 7 });
});

function rivalTakesN1(h) {
  h.seed(TASKS, 't2', { status: 'assigned', node: 'n1' });
  h.seed(NODES, 'n1', { capacity: 1, assigned: 1 });
}

function oneSlotTwoTasks() {
  const h = new FakeHost();
  node(h, 'n1', 1);
  pending(h, 't1');
  pending(h, 't2');
  return h;
}

test('racing for the last slot conflicts instead of overfilling', () => {
  const host = oneSlotTwoTasks();
  host.beforeCommit(1, rivalTakesN1);
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.done());
  assert.equal(host.pendingFaults, 0);
  assert.equal(task(host, 't1').status, 'pending');
  assert.deepEqual(usage(host), { n1: 1 });
  assert.deepEqual(host.commits(), []);
});

test('a rival assignment landing between any two calls never overfills', () => {
  const h = oneSlotTwoTasks();
  assert.deepEqual(h.reconcile(new Scheduler(), TASKS, 't1'), Reply.done());
  const calls = h.calls().total;
  assert.ok(calls >= 3, 'reads the task, the nodes and the tasks, then commits');
  for (let n = 1; n <= calls; n++) {
    const host = oneSlotTwoTasks();
    host.before(At.call(n), rivalTakesN1);
    assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.done(), `rival before call ${n}`);
    assert.equal(host.pendingFaults, 0);
    assert.deepEqual(usage(host), { n1: 1 }, `rival before call ${n}`);
    assert.equal(task(host, 't1').status, 'pending', `rival before call ${n}`);
  }
});

test('a task assigned meanwhile is not assigned again', () => {
  const host = new FakeHost();
  node(host, 'n1', 5);
  node(host, 'n2', 5);
  pending(host, 't1');
  host.beforeCommit(1, (h) => h.seed(TASKS, 't1', { status: 'assigned', node: 'n2' }));
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.done());
  assert.equal(task(host, 't1').node, 'n2');
  assert.deepEqual(host.eventsWithReason(ASSIGNED_REASON), []);
  assert.deepEqual(host.commits(), []);
});

test('conflict retries are bounded, then requeued soon', () => {
  const host = new FakeHost();
  node(host, 'n1', 1);
  pending(host, 't1');
  const attempts = MAX_CONFLICT_RETRIES + 1;
  for (let n = 1; n <= attempts; n++) host.fail(At.commit(n), Fault.CONFLICT);
  const reply = host.reconcile(new Scheduler(), TASKS, 't1');
  assert.ok(reply.isFailed);
  assert.match(reply.message, /conflict/);
  assert.equal(reply.delayMs, CONFLICT_RETRY_AFTER_MS);
  assert.equal(host.calls().commit, attempts);
  assert.equal(host.pendingFaults, 0);
  assert.deepEqual(host.commits(), []);
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.done());
  assert.equal(task(host, 't1').status, 'assigned');
});

test('a fenced commit stops without retrying', () => {
  const host = new FakeHost();
  node(host, 'n1', 1);
  pending(host, 't1');
  host.failNextCommit(Fault.FENCED);
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.fenced());
  assert.equal(host.calls().commit, 1, 'no retry after fenced');
  assert.deepEqual(host.commits(), []);
  assert.equal(task(host, 't1').status, 'pending');
  assert.deepEqual(host.reconcile(new Scheduler(), NODES, 'n1'), Reply.fenced());
});

test('a revoked lease stops before any write', () => {
  const host = new FakeHost();
  node(host, 'n1', 1);
  pending(host, 't1');
  host.revoke();
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.fenced());
  assert.equal(host.calls().commit, 0);
});

test('an unavailable store fails for backoff and recovers', () => {
  const host = new FakeHost();
  node(host, 'n1', 1);
  pending(host, 't1');
  host.setUnavailable(true);
  const reply = host.reconcile(new Scheduler(), TASKS, 't1');
  assert.ok(reply.isFailed);
  assert.match(reply.message, /unavailable/);
  assert.equal(reply.delayMs, null, "the host's exponential backoff decides");
  host.setUnavailable(false);
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.done());
  assert.equal(task(host, 't1').status, 'assigned');
});

test('an unavailable commit is not retried blindly', () => {
  const host = new FakeHost();
  node(host, 'n1', 1);
  pending(host, 't1');
  host.failNextCommit(Fault.UNAVAILABLE);
  const reply = host.reconcile(new Scheduler(), TASKS, 't1');
  assert.ok(reply.isFailed);
  assert.equal(reply.delayMs, null);
  assert.equal(host.calls().commit, 1, 'the outcome is unknown: no retry without a re-read');
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.done());
  assert.equal(host.eventsWithReason(ASSIGNED_REASON).length, 1);
});

test('a successor re-running after a lost reply does not assign twice', () => {
  const host = new FakeHost();
  node(host, 'n1', 2);
  pending(host, 't1');
  host.failNextCommit(Fault.LOST_REPLY);
  assert.ok(host.reconcile(new Scheduler(), TASKS, 't1').isFailed);
  host.newTenure();
  const successor = new Scheduler();
  assert.deepEqual(host.reconcile(successor, TASKS, 't1'), Reply.done());
  host.resync(successor);
  assert.equal(host.commits().length, 1, 'the assignment landed once');
  assert.equal(host.eventsWithReason(ASSIGNED_REASON).length, 1);
  assert.equal(host.commits()[0].epoch, 1);
  assert.equal(host.object(NODES, 'n1').value.assigned, 1);
  assert.deepEqual(usage(host), { n1: 1 });
});

test('malformed objects are skipped with a warning', () => {
  const host = new FakeHost();
  host.seed(NODES, 'broken', { capacity: 'lots' });
  node(host, 'n1', 1);
  host.seed(TASKS, 'junk', 5);
  pending(host, 't1');
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 't1'), Reply.done());
  assert.equal(task(host, 't1').node, 'n1');
  const warnings = host.logs().filter((l) => l.level === 'warn').map((l) => l.message);
  assert.ok(warnings.some((w) => w.includes('nodes/broken')), String(warnings));
  assert.ok(warnings.some((w) => w.includes('tasks/junk')), String(warnings));
});

test('a deleted task needs no write', () => {
  const host = new FakeHost();
  node(host, 'n1', 1);
  assert.deepEqual(host.reconcile(new Scheduler(), TASKS, 'gone'), Reply.done());
  assert.deepEqual(host.commits(), []);
});

test('assignments per reconcile are bounded', () => {
  const host = new FakeHost();
  const total = MAX_ASSIGNMENTS_PER_RECONCILE + 6;
  node(host, 'n1', total);
  for (let i = 0; i < total; i++) pending(host, `t${String(i).padStart(3, '0')}`);
  assert.deepEqual(host.reconcile(new Scheduler(), NODES, 'n1'), Reply.requeue(0));
  assert.equal(host.commits().length, MAX_ASSIGNMENTS_PER_RECONCILE);
  assert.deepEqual(host.reconcile(new Scheduler(), NODES, 'n1'), Reply.done());
  assert.deepEqual(pendingNames(host), []);
  assertWithinCapacity(host);
});

test('many tasks settle through the change stream within capacity', () => {
  const host = new FakeHost();
  for (let n = 0; n < 4; n++) node(host, `n${n}`, n + 1);
  for (let t = 0; t < 15; t++) pending(host, `t${String(t).padStart(2, '0')}`);
  host.runChanges(new Scheduler());
  assertWithinCapacity(host);
  assert.equal(Object.values(usage(host)).reduce((a, b) => a + b, 0), 10);
  assert.equal(pendingNames(host).length, 5);
  // Each task assigned at most once: one Assigned event per assigned task.
  const names = host.eventsWithReason(ASSIGNED_REASON).map((e) => e.key.name);
  assert.equal(names.length, 10);
  assert.equal(new Set(names).size, 10);
});
