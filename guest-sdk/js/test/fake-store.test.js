// The fake must hold controllers to the host's rules: were it laxer, a
// controller could pass its tests and fail against the host.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Api, Conflict, Fenced, Invalid, NotFound, ObjectKey, Transaction, Unavailable, info, warn } from '../src/index.js';
import { At, Fault, FakeHost, Limits } from '../src/fake.js';
import { install } from '../src/host.js';
import { Create } from '../src/transaction.js';

const things = () => new Api('things');

test('names must be DNS labels everywhere', () => {
  const host = new FakeHost();
  for (const bad of ['', '-a', 'a-', 'A', 'a_b', 'a.b', 'x'.repeat(64)]) {
    assert.throws(() => new Api(bad).get('a'), Invalid);
    assert.throws(() => things().get(bad), Invalid);
    assert.throws(() => new Api(bad).list(), Invalid);
    assert.throws(() => new Transaction().create('things', bad, 1).commit(), Invalid);
    assert.throws(() => new Transaction().event(bad, 'a', 'Seen', '').commit(), Invalid);
  }
  for (const good of ['a', '0', 'node-1', 'x'.repeat(63)]) new Transaction().create('things', good, 1).commit();
  assert.equal(host.commits().length, 4);
});

test('values must be JSON within the size limit', () => {
  const host = new FakeHost(new Limits({ maxValueBytes: 10 }));
  assert.throws(() => host.commit([new Create(new ObjectKey('things', 'a'), '{nope')], []), /not JSON/);
  assert.throws(() => new Transaction().create('things', 'a', 'x'.repeat(20)).commit(), /the limit is 10/);
  // The raw text is bounded too, before it is normalized.
  assert.throws(() => host.commit([new Create(new ObjectKey('things', 'a'), '[1,  2, 3 ]')], []), /11 bytes/);
  new Transaction().create('things', 'a', [1, 2, 3]).commit();
  assert.throws(() => host.commit([new Create(new ObjectKey('things', 'b'), 'NaN')], []), /not JSON/);
});

test('values are stored as compact JSON with sorted keys', () => {
  const host = new FakeHost();
  host.commit([new Create(new ObjectKey('things', 'a'), '{ "b" : 1, "a" : [ 1 , 2 ] }')], []);
  assert.equal(host.commits()[0].ops[0].value, '{"a":[1,2],"b":1}');
  assert.deepEqual(things().get('a').value, { a: [1, 2], b: 1 });
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

test("event reasons and messages follow the host's rules", () => {
  new FakeHost();
  for (const bad of ['', 'lower', 'Two words', 'Dash-ed', 'R'.repeat(129)]) {
    assert.throws(() => new Transaction().event('things', 'a', bad, 'm').commit(), Invalid);
  }
  assert.throws(() => new Transaction().event('things', 'a', 'Seen', 'a\0b').commit(), /NUL/);
  assert.throws(() => new Transaction().event('things', 'a', 'Seen', 'm'.repeat(4097)).commit(), /4096/);
  assert.deepEqual(new Transaction().event('things', 'a', 'Seen2', 'ok').commit().eventSeqs, [2]);
});

test('a commit writes everything at one new revision', () => {
  const host = new FakeHost();
  const v = host.seed('things', 'a', 1);
  const a = things().get('a');
  const committed = new Transaction().update(a, 2).create('things', 'b', 3).event('things', 'a', 'Moved', '').commit();
  // The seed's change took the number after its revision.
  assert.equal(committed.revision, v + 2);
  assert.equal(host.revision, v + 2);
  assert.equal(things().get('a').version, committed.revision);
  assert.equal(things().get('b').version, committed.revision);
  assert.deepEqual(host.changes(v).map((c) => String(c.key)), ['things/a', 'things/b']);
});

test('a failed precondition writes nothing', () => {
  const host = new FakeHost();
  host.seed('things', 'a', 1);
  const a = things().get('a');
  host.seed('things', 'a', 2);
  assert.throws(
    () => new Transaction().create('things', 'b', 1).update(a, 3).commit(),
    (e) => e instanceof Conflict && e.key.equals(new ObjectKey('things', 'a')),
  );
  assert.equal(things().get('b'), null);
  assert.equal(things().get('a').value, 2);
  assert.throws(() => new Transaction().updateIfVersion('things', 'zz', 1, 1).commit(), NotFound);
  assert.throws(() => new Transaction().create('things', 'a', 1).commit(), Conflict);
  assert.deepEqual(host.commits(), []);
});

test('versions are never reused after delete and re-create', () => {
  const host = new FakeHost();
  host.seed('things', 'a', 1);
  const first = things().get('a');
  new Transaction().delete(first).commit();
  assert.equal(things().get('a'), null);
  new Transaction().create('things', 'a', 1).commit();
  assert.ok(things().get('a').version > first.version);
  const removal = host.changes(first.version)[0];
  assert.deepEqual([removal.revision, String(removal.key), removal.deleted], [first.version + 2, 'things/a', true]);
  assert.equal(removal.position, removal.revision + 1);
  assert.throws(() => new Transaction().delete(first).commit(), Conflict);
});

test("event sequence numbers come from the store's one series", () => {
  const host = new FakeHost();
  const one = new Transaction().event('things', 'a', 'A', '').event('things', 'b', 'B', '').commit();
  assert.throws(() => new Transaction().event('things', 'a', 'bad', '').commit(), Invalid);
  const two = new Transaction().event('things', 'c', 'C', '').commit();
  // Revision 1, events 2 and 3; the refused commit takes nothing; revision
  // 4, event 5: increasing, with gaps, as on the host.
  assert.deepEqual([one.revision, one.eventSeqs], [1, [2, 3]]);
  assert.deepEqual([two.revision, two.eventSeqs], [4, [5]]);
  assert.deepEqual(host.events().map((e) => e.seq), [2, 3, 5]);
  assert.deepEqual(host.eventsWithReason('B').map((e) => e.key.name), ['b']);
});

test('listing is paged in name order within one kind', () => {
  const host = new FakeHost();
  for (const name of ['c', 'a', 'b', 'd']) host.seed('things', name, name);
  host.seed('other', 'a0', 0);
  let page = things().list(null, 3);
  assert.deepEqual(page.objects.map((o) => o.name), ['a', 'b', 'c']);
  assert.equal(page.next, 'c');
  page = things().list(page.next, 3);
  assert.deepEqual(page.objects.map((o) => o.name), ['d']);
  assert.equal(page.next, null);
  assert.deepEqual(things().listAll(10).map((o) => o.name), ['a', 'b', 'c', 'd']);
  // 0 asks for the default page; more than the maximum is capped.
  for (let n = 0; n < 600; n++) host.seed('many', `m${String(n).padStart(4, '0')}`, n);
  assert.equal(new Api('many').list(null, 0).objects.length, 100);
  assert.equal(new Api('many').list(null, 10_000).objects.length, 500);
  assert.throws(() => new Api('many').listAll(599), /more than 599/);
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
