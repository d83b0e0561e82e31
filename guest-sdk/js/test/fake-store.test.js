// The fake must hold controllers to the host's rules: were it laxer, a
// controller could pass its tests and fail against the host. The store's
// rules are the conformance table's (conformance.test.js runs it); these
// tests hold what only the fake has: lowered limits, the call's payload,
// faults, hooks and records.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Api, Conflict, Fenced, Invalid, NotFound, ObjectKey, Transaction, Unavailable, info, warn } from '../src/index.js';
import { At, Fault, FakeHost, Limits } from '../src/fake.js';
import { install } from '../src/host.js';
import { Create } from '../src/transaction.js';

const things = () => new Api('things');

test('values must be JSON within the size limit', () => {
  const host = new FakeHost(new Limits({ maxValueBytes: 10 }));
  assert.throws(() => host.commit([new Create(new ObjectKey('things', 'a'), '{nope')], []), /not JSON/);
  assert.throws(() => new Transaction().create('things', 'a', 'x'.repeat(20)).commit(), /the limit is 10/);
  // The raw text is bounded too, before it is normalized.
  assert.throws(() => host.commit([new Create(new ObjectKey('things', 'a'), '[1,  2, 3 ]')], []), /11 bytes/);
  new Transaction().create('things', 'a', [1, 2, 3]).commit();
  assert.throws(() => host.commit([new Create(new ObjectKey('things', 'b'), 'NaN')], []), /not JSON/);
});

test('commits are bounded in ops, events and payload', () => {
  const host = new FakeHost(new Limits({ maxOpsPerCommit: 2, maxEventsPerCommit: 1, maxCallPayloadBytes: 100 }));
  const tx = new Transaction();
  for (let n = 0; n < 3; n++) tx.create('things', `t${n}`, 1);
  assert.throws(() => tx.commit(), /3 operations; the limit is 2/);
  assert.throws(() => new Transaction().event('things', 'a', 'One', '').event('things', 'b', 'Two', '').commit(), /2 events; the limit is 1/);
  assert.throws(() => new Transaction().create('things', 'a', 'x'.repeat(200)).commit(), /payload of/);
  assert.throws(() => new Transaction().commit(), /at least one/);
  assert.throws(() => new Transaction().create('things', 'a', 1).checkAbsent('things', 'a').commit(), /more than one operation/);
  assert.deepEqual(host.commits(), []);
});

test('call faults count every sort of call', () => {
  const host = new FakeHost();
  host.fail(At.call(3), Fault.UNAVAILABLE);
  things().get('a');
  things().list();
  assert.throws(() => new Transaction().create('things', 'a', 1).commit(), Unavailable);
  new Transaction().create('things', 'a', 1).commit();
  assert.equal(host.calls().total, 4);
  assert.equal(host.pendingFaults, 0);
});

test('commit faults skip reads', () => {
  const host = new FakeHost();
  host.fail(At.commit(1), Fault.CONFLICT);
  things().get('a');
  things().list();
  assert.throws(() => new Transaction().create('things', 'a', 1).commit(), Conflict);
  assert.equal(things().get('a'), null);
});

test('a fenced fault ends the tenure for good', () => {
  const host = new FakeHost();
  host.fail(At.call(2), Fault.FENCED);
  things().get('a');
  assert.throws(() => things().get('a'), (e) => e instanceof Fenced && e.isFenced && /epoch 1/.test(e.message));
  assert.throws(() => new Transaction().create('things', 'a', 1).commit(), Fenced);
  assert.ok(host.isRevoked);
  assert.deepEqual(host.commits(), []);
  assert.equal(host.newTenure().epoch, 2);
  new Transaction().create('things', 'a', 1).commit();
  assert.equal(host.commits()[0].epoch, 2);
});

test('a revoked lease fences every write', () => {
  const host = new FakeHost();
  host.revoke();
  assert.throws(() => new Transaction().create('things', 'a', 1).commit(), Fenced);
  assert.equal(host.object('things', 'a'), null);
});

test('an unavailable backend fails every call until it is back', () => {
  const host = new FakeHost();
  host.setUnavailable(true);
  assert.throws(() => things().get('a'), Unavailable);
  assert.throws(() => new Transaction().create('things', 'a', 1).commit(), Unavailable);
  host.setUnavailable(false);
  new Transaction().create('things', 'a', 1).commit();
  assert.equal(host.commits().length, 1);
});

test('a lost reply still lands', () => {
  const host = new FakeHost();
  host.failNextCommit(Fault.LOST_REPLY);
  assert.throws(
    () => new Transaction().create('things', 'a', 1).event('things', 'a', 'Made', '').commit(),
    (e) => e instanceof Unavailable && /may have been applied/.test(e.message),
  );
  assert.equal(things().get('a').value, 1);
  assert.equal(host.commits().length, 1);
  assert.equal(host.events().length, 1);
});

test('writes aimed before a commit land before the commit is checked', () => {
  const host = new FakeHost();
  host.seed('things', 'a', 1);
  const a = things().get('a');
  host.beforeCommit(1, (h) => h.seed('things', 'a', 5));
  assert.throws(() => new Transaction().update(a, 2).commit(), Conflict);
  assert.equal(things().get('a').value, 5);
});

test('commit-only faults cannot be aimed at reads', () => {
  const host = new FakeHost();
  for (const fault of [Fault.CONFLICT, Fault.LOST_REPLY, Fault.QUOTA_CREATES]) {
    assert.throws(() => host.fail(At.call(1), fault), /commits only/);
  }
  assert.throws(() => host.fail(At.commit(0), Fault.CONFLICT), /count from 1/);
});

test('store calls without a host say what to do', () => {
  const host = new FakeHost();
  install(null);
  try {
    assert.throws(() => things().get('a'), /FakeHost/);
  } finally {
    host.install();
  }
});

test('long log lines are truncated on a character boundary', () => {
  const host = new FakeHost(new Limits({ logLineBytes: 5 }));
  info('abcdé'); // é is two bytes: cut before it
  assert.equal(host.logs()[0].message, 'abcd');
});

test('records carry the epoch of their tenure', () => {
  const host = new FakeHost();
  new Transaction().create('things', 'a', 1).event('things', 'a', 'Made', '').commit();
  info('one');
  host.newTenure();
  new Transaction().create('things', 'b', 1).event('things', 'b', 'Made', '').commit();
  warn('two');
  assert.deepEqual(host.commits().map((c) => c.epoch), [1, 2]);
  assert.deepEqual(host.events().map((e) => e.epoch), [1, 2]);
  assert.deepEqual(host.logs().map((l) => [l.level, l.epoch]), [['info', 1], ['warn', 2]]);
});
