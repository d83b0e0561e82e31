// The SDK's own behaviour: replies, error policy, retries, keys, settings, clock, kinds.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  Api,
  Conflict,
  Context,
  Controller,
  DecodeError,
  Description,
  Failed,
  Fenced,
  IdempotencyKey,
  Invalid,
  Kind,
  Metadata,
  NotFound,
  ObjectKey,
  Outcome,
  QuotaExceeded,
  Reason,
  Reply,
  Retry,
  SettingsError,
  Transaction,
  Unavailable,
  info,
  now,
  retryOnConflict,
  settings,
  strongest,
  untilMs,
} from '../src/index.js';
import { Fault, FakeHost } from '../src/fake.js';

/** Throws or returns what it is told; remembers the reasons it saw. */
class Scripted extends Controller {
  constructor(result = null, policy = null) {
    super();
    this.result = result;
    this.policy = policy;
    this.reasons = [];
  }

  describe() {
    return Description.watching(['things']).resyncEvery(1000);
  }

  reconcile(ctx) {
    this.reasons.push(ctx.reason);
    if (this.result instanceof Error) throw this.result;
    return this.result;
  }

  errorPolicy(ctx, kind, name, error) {
    return this.policy ?? super.errorPolicy(ctx, kind, name, error);
  }
}

test('fenced errors reach the host as fenced whatever the policy', () => {
  const host = new FakeHost();
  const reply = host.reconcile(new Scripted(new Fenced('gone'), Retry.after(5)), 'things', 'a');
  assert.deepEqual(reply, Reply.fenced());
  assert.ok(reply.isFenced);
});

test("other errors reach the host with the policy's delay", () => {
  const host = new FakeHost();
  let reply = host.reconcile(new Scripted(new Conflict(new ObjectKey('things', 'a')), Retry.after(250)), 'things', 'a');
  assert.ok(reply.isFailed);
  assert.equal(reply.delayMs, 250);
  assert.match(reply.message, /conflict on things\/a/);
  reply = host.reconcile(new Scripted(new Failed('boom', 40)), 'things', 'a');
  assert.deepEqual(reply, new Reply('failed', 40, 'boom'));
  reply = host.reconcile(new Scripted(new TypeError('bad')), 'things', 'a');
  assert.deepEqual(reply, new Reply('failed', null, 'TypeError: bad'));
  reply = host.reconcile(new Scripted('not an outcome'), 'things', 'a');
  assert.ok(reply.isFailed);
  assert.match(reply.message, /not an Outcome/);
  // A thrown non-Error is a failure too, never a crash of the guest.
  const thrower = new Scripted();
  thrower.reconcile = () => {
    throw 'a string';
  };
  reply = host.reconcile(thrower, 'things', 'a');
  assert.deepEqual(reply, new Reply('failed', null, 'thrown: a string'));
});

test('outcomes reach the host unchanged', () => {
  const host = new FakeHost();
  assert.deepEqual(host.reconcile(new Scripted(Outcome.done()), 'things', 'a'), Reply.done());
  assert.deepEqual(host.reconcile(new Scripted(Outcome.requeueAfter(1500)), 'things', 'a'), Reply.requeue(1500));
  const wake = new Date(host.now().getTime() + 3000);
  assert.deepEqual(host.reconcile(new Scripted(Outcome.wakeAt(wake)), 'things', 'a'), Reply.requeue(3000));
  const past = new Date(host.now().getTime() - 3000);
  assert.deepEqual(Outcome.wakeAt(past), Outcome.requeueAfter(0));
});

test('each way of driving a controller tells its reason', () => {
  const host = new FakeHost();
  const c = new Scripted(Outcome.done());
  host.seed('things', 'a', 1);
  host.seed('things', 'b', 1);
  host.seed('other', 'c', 1);
  host.reconcile(c, 'things', 'a');
  host.reconcile(c, 'things', 'a', Reason.RETRY);
  const replies = host.resync(c);
  assert.deepEqual(replies.map(([k]) => k.name), ['a', 'b']);
  assert.deepEqual(c.reasons, [Reason.CHANGE, Reason.RETRY, Reason.RESYNC, Reason.RESYNC]);
  assert.equal(strongest(Reason.RESYNC, Reason.CHANGE), Reason.CHANGE);
  assert.equal(strongest(Reason.RETRY, Reason.REQUEUE), Reason.RETRY);
  assert.equal(strongest(Reason.RELATED, Reason.RETRY), Reason.RELATED);
  assert.equal(strongest(Reason.RELATED, Reason.CHANGE), Reason.CHANGE);
});

test('description and retry shapes', () => {
  const d = Description.watching(['nodes', 'tasks']).resyncEvery(30_000);
  assert.deepEqual(d.watches, ['nodes', 'tasks']);
  assert.equal(d.resyncMs, 30_000);
  assert.equal(Retry.backoff().afterMs, null);
  assert.equal(Retry.after(-5).afterMs, 0);
});

function scriptedAttempts(errors) {
  const made = [];
  const attempt = () => {
    made.push(1);
    if (errors.length > 0) throw errors.shift();
    return made.length;
  };
  return { attempt, made };
}

test('retryOnConflict retries failed preconditions and logs each', () => {
  const host = new FakeHost();
  const { attempt } = scriptedAttempts([new Conflict(new ObjectKey('t', 'a')), new NotFound(new ObjectKey('t', 'b'))]);
  assert.equal(retryOnConflict(3, attempt), 3);
  assert.deepEqual(
    host.logs().map((l) => l.message),
    [
      't/a changed since it was read; reading again (attempt 2 of 3)',
      't/b changed since it was read; reading again (attempt 3 of 3)',
    ],
  );
});

test('retryOnConflict gives up after its attempts with the conflict', () => {
  new FakeHost();
  const key = new ObjectKey('t', 'a');
  const { attempt, made } = scriptedAttempts([new Conflict(key), new Conflict(key), new Conflict(key)]);
  assert.throws(() => retryOnConflict(2, attempt), Conflict);
  assert.equal(made.length, 2);
});

test('retryOnConflict throws other errors at once', () => {
  new FakeHost();
  for (const error of [new Unavailable('down'), new Fenced('gone'), new Invalid('bad'), new TypeError('x')]) {
    const { attempt, made } = scriptedAttempts([error]);
    assert.throws(() => retryOnConflict(5, attempt), error.constructor);
    assert.equal(made.length, 1);
  }
});

test('idempotency keys are those of the Rust SDK', () => {
  const host = new FakeHost();
  assert.equal(host.fence().idempotencyKey('notify-t1'), 'test/controller/1/notify-t1');
  assert.equal(new Context().fence.epoch, 1);
  assert.equal(String(IdempotencyKey.forAction('orders', 'o-17', 42, 'charge card')), 'orders/o-17@42/charge%20card');
  assert.equal(IdempotencyKey.forAction('a', 'b/c', 1, 'd').value, 'a/b%2Fc@1/d');
  assert.notEqual(IdempotencyKey.forAction('a', 'b', 1, 'c/d').value, IdempotencyKey.forAction('a', 'b/c', 1, 'd').value);
  assert.equal(IdempotencyKey.forAction('k', 'n', 0, 'é~._-').value, 'k/n@0/%C3%A9~._-');
});

test('settings decode and never quote a value', () => {
  const host = new FakeHost();
  assert.deepEqual(settings(), {});
  host.setSettings({ region: 'eu', replicas: 3 });
  const region = (d) => {
    if (typeof d.region !== 'string') throw new TypeError(`region is ${d.region}`);
    return { region: d.region, replicas: d.replicas ?? 1 };
  };
  assert.deepEqual(settings(region), { region: 'eu', replicas: 3 });
  host.setSettings({ region: 7, token: 's3cret' });
  assert.throws(
    () => settings((d) => { throw new TypeError(`bad token ${d.token}`); }),
    (e) => e instanceof SettingsError && !e.message.includes('s3cret') && e.message.includes('TypeError'),
  );
  assert.throws(() => host.setSettings([1]), /JSON object/);
});

test("the clock is the host's", () => {
  const host = new FakeHost();
  assert.equal(now().toISOString(), '2026-01-01T00:00:00.000Z');
  host.advance(1500);
  assert.equal(now().toISOString(), '2026-01-01T00:00:01.500Z');
  assert.equal(untilMs(new Date(now().getTime() + 2000)), 2000);
});

test('an injected quota refusal is typed and writes nothing', () => {
  const host = new FakeHost();
  host.failNextCommit(Fault.QUOTA_CREATES);
  let caught;
  try {
    new Transaction().create('things', 'a', 1).commit();
  } catch (e) {
    caught = e;
  }
  assert.ok(caught instanceof QuotaExceeded);
  assert.deepEqual(
    [caught.controller, caught.quota, caught.limit, caught.retryAfterMs],
    ['controller', 'max_creates_per_second', 100, 10],
  );
  assert.equal(host.object('things', 'a'), null);
  // The default policy waits as long as the refusal asks.
  assert.equal(host.reconcile(new Scripted(caught), 'things', 'a').delayMs, 10);
  host.failNextCommit(Fault.QUOTA_OBJECTS);
  assert.throws(
    () => new Transaction().create('things', 'a', 1).commit(),
    (e) => e instanceof QuotaExceeded && e.kind === 'things' && e.retryAfterMs === null,
  );
  assert.equal(QuotaExceeded.parse('quota exceeded: nonsense'), null);
});

class Task extends Kind {
  static KIND = 'tasks';

  constructor(status, node = null) {
    super();
    this.status = status;
    this.node = node;
  }

  static fromValue(value) {
    if (typeof value?.status !== 'string') throw new TypeError('status is not a string');
    return new Task(value.status, value.node ?? null);
  }

  toValue() {
    return this.node === null ? { status: this.status } : { status: this.status, node: this.node };
  }
}

test('typed reads name the object that does not decode', () => {
  const host = new FakeHost();
  host.seed('tasks', 'ok', { status: 'pending' });
  host.seed('tasks', 'bad', { state: 'pending' });
  const ok = new Context().typed(Task).get('ok');
  assert.ok(ok.value instanceof Task);
  assert.equal(ok.value.status, 'pending');
  assert.throws(() => new Context().typed(Task).get('bad'), (e) =>
    e instanceof DecodeError && /tasks\/bad does not have the expected shape/.test(e.message));
  const raw = new Api('tasks').get('bad');
  assert.throws(() => raw.decode(Task), DecodeError);
});

test("typed writes go to the type's kind only", () => {
  const host = new FakeHost();
  host.seed('nodes', 'n', { capacity: 1 });
  const node = new Api('nodes').get('n');
  assert.throws(() => new Transaction().updateTyped(node, new Task('pending')).commit(), /refusing to write it into nodes\/n/);
  assert.throws(() => new Transaction().create('nodes', 'm', new Task('pending')).commit(), /stored under kind tasks/);
  new Transaction().createTyped('t', new Task('pending')).commit();
  assert.deepEqual(host.object('tasks', 't').value, { status: 'pending' });
  assert.ok(host.commits()[0].ops[0].key.equals(new ObjectKey('tasks', 't')));
});

test('values that do not serialize are refused at commit', () => {
  const host = new FakeHost();
  assert.throws(() => new Transaction().create('things', 'a', 1n).commit(), (e) => e instanceof Invalid && /does not serialize/.test(e.message));
  assert.throws(() => new Transaction().create('things', 'a', Number.NaN).commit(), /does not serialize/);
  assert.throws(() => new Transaction().create('things', 'a', undefined).commit(), /does not serialize/);
  assert.deepEqual(host.commits(), []);
});

test('a transaction commits once', () => {
  new FakeHost();
  const tx = new Transaction().create('things', 'a', 1);
  tx.commit();
  assert.throws(() => tx.commit(), /commits once/);
});

test('runChanges follows the change stream', () => {
  const host = new FakeHost();
  class Echo extends Controller {
    describe() {
      return Description.watching(['things']);
    }

    reconcile(ctx, kind, name) {
      const obj = ctx.api(kind).get(name);
      if (obj !== null && obj.value < 3) new Transaction().update(obj, obj.value + 1).commit();
      return Outcome.done();
    }
  }
  host.seed('things', 'a', 0);
  host.seed('other', 'b', 0);
  host.runChanges(new Echo());
  assert.equal(host.object('things', 'a').value, 3);
});

test('related watches map changes to owners and labelled targets', () => {
  const host = new FakeHost();
  class Parent extends Controller {
    constructor() {
      super();
      this.seen = [];
    }

    describe() {
      return Description.watching(['jobs']).owns('pods', 'jobs').relatedByLabel('notes', 'example.com/job', 'jobs');
    }

    reconcile(ctx, kind, name) {
      this.seen.push([`${kind}/${name}`, ctx.reason]);
      return Outcome.done();
    }
  }
  const c = new Parent();
  host.seed('jobs', 'j1', 1);
  host.seed('jobs', 'j2', 1);
  let start = host.runChanges(c);
  assert.deepEqual(c.seen, [['jobs/j1', Reason.CHANGE], ['jobs/j2', Reason.CHANGE]]);
  c.seen = [];
  host.seedWith('pods', 'p', 1, new Metadata().ownedBy('jobs', 'j1'));
  host.seed('other', 'j2', 1);
  host.seedWith('pods', 'q', 1, new Metadata().ownedBy('other', 'j2'));
  host.seedWith('notes', 'n', 1, new Metadata({ labels: { 'example.com/job': 'j2' } }));
  host.seedWith('notes', 'bad', 1, new Metadata({ labels: { 'example.com/job': 'Not_A_Name' } }));
  start = host.runChanges(c, start);
  assert.deepEqual(c.seen, [['jobs/j1', Reason.RELATED], ['jobs/j2', Reason.RELATED]]);
  c.seen = [];
  // A label moved: both the object it left and the one it joined.
  host.seedWith('notes', 'n', 1, new Metadata({ labels: { 'example.com/job': 'j1' } }));
  host.runChanges(c, start);
  assert.deepEqual(c.seen, [['jobs/j1', Reason.RELATED], ['jobs/j2', Reason.RELATED]]);
  c.seen = [];
  // A resync reaches what related objects map to, each key once.
  host.resync(c);
  assert.deepEqual(c.seen, [['jobs/j1', Reason.RESYNC], ['jobs/j2', Reason.RESYNC]]);
  // Even for keys of a kind the controller does not watch itself.
  const onlyRelated = new Parent();
  onlyRelated.describe = () => Description.watching([]).owns('pods');
  host.resync(onlyRelated);
  assert.deepEqual(onlyRelated.seen, [['jobs/j1', Reason.RESYNC], ['other/j2', Reason.RESYNC]]);
});

test('log lines reach the host with their level', () => {
  const host = new FakeHost();
  info('hello');
  assert.deepEqual(host.logs(), [{ level: 'info', message: 'hello', epoch: 1 }]);
});
