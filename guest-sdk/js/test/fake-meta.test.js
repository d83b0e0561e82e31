// Metadata, finalizers, owners, statuses, checks and selectors in the fake.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Api, Conflict, Invalid, Metadata, NotFound, ObjectKey, Selector, Transaction } from '../src/index.js';
import { FakeHost } from '../src/fake.js';
import { Check, Replace } from '../src/transaction.js';

const tasks = () => new Api('tasks');

function read(kind, name) {
  const obj = new Api(kind).get(name);
  assert.notEqual(obj, null, `${kind}/${name} should exist`);
  return obj;
}

test('a delete of an object with finalizers marks it until the last is removed', () => {
  const host = new FakeHost();
  host.seedWith('tasks', 't', { a: 1 }, new Metadata({ finalizers: ['x.io/one', 'two'] }));
  const t = read('tasks', 't');
  new Transaction().delete(t).commit();
  let marked = read('tasks', 't');
  assert.ok(marked.isDeleting);
  assert.equal(marked.generation, t.generation + 1);
  assert.equal(marked.deletingSince.getTime(), host.now().getTime());
  // A second delete request leaves it as it is.
  const v = host.revision;
  new Transaction().delete(marked).commit();
  assert.equal(read('tasks', 't').version, marked.version);
  assert.ok(host.revision > v);
  marked = read('tasks', 't');
  // Finalizers can be removed, not added.
  assert.throws(() => new Transaction().addFinalizer(marked, 'three').commit(), /removed, not added/);
  // Values can still be written.
  new Transaction().update(marked, { a: 2 }).commit();
  marked = read('tasks', 't');
  new Transaction().removeFinalizer(marked, 'x.io/one').commit();
  marked = read('tasks', 't');
  assert.deepEqual(marked.finalizers, ['two']);
  assert.ok(marked.isDeleting);
  new Transaction().removeFinalizer(marked, 'two').commit();
  assert.equal(tasks().get('t'), null);
});

test("a user's delete marks too, and removing the last finalizer by replace removes it", () => {
  const host = new FakeHost();
  host.seedWith('tasks', 't', 1, new Metadata({ finalizers: ['f'] }));
  assert.ok(host.remove('tasks', 't'));
  const t = read('tasks', 't');
  assert.ok(t.isDeleting);
  new Transaction().replace(t, 2, new Metadata()).commit();
  assert.equal(tasks().get('t'), null);
  assert.equal(host.remove('tasks', 't'), false);
});

test('deleting an owner collects what it owns, transitively, in the same commit', () => {
  const host = new FakeHost();
  host.seed('jobs', 'j', 1);
  host.seedWith('tasks', 't1', 1, new Metadata().ownedBy('jobs', 'j'));
  host.seedWith('tasks', 't2', 1, new Metadata({ finalizers: ['keep'] }).ownedBy('jobs', 'j'));
  host.seedWith('pods', 'p1', 1, new Metadata().ownedBy('tasks', 't1'));
  host.seed('tasks', 'free', 1);
  new Transaction().delete(read('jobs', 'j')).commit();
  assert.equal(new Api('jobs').get('j'), null);
  assert.equal(tasks().get('t1'), null);
  assert.equal(new Api('pods').get('p1'), null);
  assert.ok(read('tasks', 't2').isDeleting);
  assert.notEqual(tasks().get('free'), null);
  assert.equal(host.commits().length, 1);
});

test('garbage collection is bounded per commit', () => {
  const host = new FakeHost();
  host.seed('jobs', 'j', 1);
  for (let n = 0; n < 1001; n++) host.seedWith('tasks', `t${n}`, 1, new Metadata().ownedBy('jobs', 'j'));
  assert.throws(() => new Transaction().delete(read('jobs', 'j')).commit(), /more than 1000/);
  assert.equal(host.objects('tasks').length, 1001);
});

test('a commit that deletes an owner cannot write or check what it owns', () => {
  const host = new FakeHost();
  host.seed('jobs', 'j', 1);
  host.seedWith('tasks', 't', 1, new Metadata().ownedBy('jobs', 'j'));
  const j = read('jobs', 'j');
  const t = read('tasks', 't');
  assert.throws(() => new Transaction().delete(j).update(t, 2).commit(), /also writes/);
  assert.throws(() => new Transaction().delete(j).check(t).commit(), /check or delete/);
  new Transaction().delete(j).delete(t).commit();
  assert.deepEqual(host.objects('tasks'), []);
});

test('an owner must exist, unmarked, when a write names it', () => {
  const host = new FakeHost();
  assert.throws(
    () => new Transaction().createWith('tasks', 't', 1, new Metadata().ownedBy('jobs', 'j')).commit(),
    (e) => e instanceof Conflict && e.key.equals(new ObjectKey('tasks', 't')),
  );
  // Created by the same commit: fine.
  new Transaction().create('jobs', 'j', 1).createWith('tasks', 't', 1, new Metadata().ownedBy('jobs', 'j')).commit();
  host.seedWith('jobs', 'k', 1, new Metadata({ finalizers: ['f'] }));
  host.remove('jobs', 'k');
  assert.throws(() => new Transaction().createWith('tasks', 'u', 1, new Metadata().ownedBy('jobs', 'k')).commit(), Conflict);
  assert.throws(
    () => new Transaction().delete(read('jobs', 'j')).createWith('tasks', 'v', 1, new Metadata().ownedBy('jobs', 'j')).commit(),
    /makes it the owner/,
  );
});

test("metadata breaking the host's rules is invalid", () => {
  new FakeHost();
  const many = (n, f) => Object.fromEntries(Array.from({ length: n }, (_, i) => [f(i), '']));
  const bad = [
    new Metadata({ labels: many(33, (i) => `l${i}`) }),
    new Metadata({ labels: { '-a': 'v' } }),
    new Metadata({ labels: { a: '-v' } }),
    new Metadata({ labels: { a: 'v'.repeat(64) } }),
    new Metadata({ labels: { ['k'.repeat(129)]: 'v' } }),
    new Metadata({ finalizers: Array.from({ length: 17 }, (_, i) => `f${i}`) }),
    new Metadata({ finalizers: ['f', 'f'] }),
    new Metadata({ finalizers: ['bad finalizer'] }),
    new Metadata().ownedBy('Jobs', 'j'),
    new Metadata().ownedBy('tasks', 't'),
  ];
  for (const meta of bad) assert.throws(() => new Transaction().createWith('tasks', 't', 1, meta).commit(), Invalid);
  new Transaction()
    .createWith('tasks', 't', 1, new Metadata({ labels: { 'example.com/team': 'a_b.c', empty: '' }, finalizers: ['x/y'] }))
    .commit();
  assert.deepEqual(Object.entries(read('tasks', 't').labels), [['empty', ''], ['example.com/team', 'a_b.c']]);
});

test('status writes keep the generation and do not conflict with spec writes', () => {
  new FakeHost();
  const host = new FakeHost();
  host.seed('tasks', 't', { spec: 1 });
  const t = read('tasks', 't');
  new Transaction().updateStatus(t, { seen: 1 }).commit();
  const after = read('tasks', 't');
  assert.deepEqual(after.status, { seen: 1 });
  assert.equal(after.generation, t.generation);
  assert.ok(after.version > t.version);
  assert.deepEqual(after.value, { spec: 1 });
  // A spec write based on the earlier read now conflicts (version moved)...
  assert.throws(() => new Transaction().update(t, { spec: 2 }).commit(), Conflict);
  new Transaction().update(after, { spec: 2 }).commit();
  // ...and a status at the old generation conflicts too.
  assert.throws(() => new Transaction().updateStatus(t, { seen: 2 }).commit(), Conflict);
  new Transaction().writeStatus('tasks', 't', null, { seen: 2 }).commit();
  new Transaction().clearStatus(read('tasks', 't')).commit();
  assert.equal(read('tasks', 't').status, null);
  assert.throws(() => new Transaction().writeStatus('tasks', 'none', null, 1).commit(), NotFound);
});

test('the generation grows only when value or metadata change', () => {
  const host = new FakeHost();
  host.seed('tasks', 't', 1);
  const t = read('tasks', 't');
  new Transaction().update(t, 1).commit();
  const same = read('tasks', 't');
  assert.equal(same.generation, 1);
  assert.ok(same.version > t.version);
  new Transaction().setMetadata(same, new Metadata({ labels: { a: 'b' } })).commit();
  assert.equal(read('tasks', 't').generation, 2);
  assert.throws(
    () => host.commit([new Replace(new ObjectKey('tasks', 't'), read('tasks', 't').version, null, null)], []),
    /value, metadata or both/,
  );
});

test('a check fails the whole commit unless the object is at its version', () => {
  const host = new FakeHost();
  host.seed('nodes', 'n', 1);
  const n = read('nodes', 'n');
  new Transaction().check(n).create('tasks', 'a', 1).commit();
  host.seed('nodes', 'n', 2);
  assert.throws(
    () => new Transaction().check(n).create('tasks', 'b', 1).commit(),
    (e) => e instanceof Conflict && e.key.equals(new ObjectKey('nodes', 'n')),
  );
  assert.equal(tasks().get('b'), null);
  new Transaction().checkAbsent('nodes', 'm').create('tasks', 'c', 1).commit();
  assert.throws(() => new Transaction().checkAbsent('nodes', 'n').create('tasks', 'd', 1).commit(), Conflict);
});

test('finalizer helpers write nothing when there is nothing to change', () => {
  const host = new FakeHost();
  host.seedWith('tasks', 't', 1, new Metadata({ finalizers: ['f'] }));
  const t = read('tasks', 't');
  assert.deepEqual(new Transaction().addFinalizer(t, 'f').ops, [new Check(t.key, t.version)]);
  assert.deepEqual(new Transaction().removeFinalizer(t, 'g').ops, [new Check(t.key, t.version)]);
});

const selected = (selector) => tasks().listAllSelected(selector, 100).map((o) => o.name);

test('a selector matches labels exactly', () => {
  const host = new FakeHost();
  host.seedWith('tasks', 'a', 1, new Metadata({ labels: { team: 'x', tier: '' } }));
  host.seedWith('tasks', 'b', 1, new Metadata({ labels: { team: 'y' } }));
  host.seed('tasks', 'c', 1);
  assert.deepEqual(selected(new Selector()), ['a', 'b', 'c']);
  assert.deepEqual(selected(new Selector().label('team', 'x')), ['a']);
  assert.deepEqual(selected(new Selector().label('tier', '')), ['a']);
  assert.deepEqual(selected(new Selector().label('team', 'y').label('tier', '')), []);
});

test("a selector contains JSON by the store's rules", () => {
  const host = new FakeHost();
  host.seed('tasks', 'a', { n: 1, tags: ['x', 'y'], o: { p: true } });
  host.seed('tasks', 'b', ['x', 2, { k: 'v' }]);
  host.seed('tasks', 'c', 'x');
  host.seed('tasks', 'd', { n: 1.0, s: null });
  assert.deepEqual(selected(new Selector().containing({ n: 1 })), ['a', 'd']);
  assert.deepEqual(selected(new Selector().containing({ tags: ['y'] })), ['a']);
  assert.deepEqual(selected(new Selector().containing({ o: {} })), ['a']);
  assert.deepEqual(selected(new Selector().containing({ n: '1' })), []);
  assert.deepEqual(selected(new Selector().containing('x')), ['b', 'c']); // a top-level array holds the scalar
  assert.deepEqual(selected(new Selector().containing([{ k: 'v' }])), ['b']);
  assert.deepEqual(selected(new Selector().containing({ s: null })), ['d']);
  assert.deepEqual(selected(new Selector().containing({ tags: 'x' })), []); // not below the top level
  assert.deepEqual(selected(new Selector().containing(true)), []);
});

test('selective lists page by name with the same selector', () => {
  const host = new FakeHost();
  for (let n = 0; n < 7; n++) host.seedWith('tasks', `t${n}`, n, new Metadata({ labels: { odd: String(n % 2) } }));
  let page = tasks().listSelected(new Selector().label('odd', '1'), null, 2);
  assert.deepEqual(page.objects.map((o) => o.name), ['t1', 't3']);
  assert.equal(page.next, 't3');
  page = tasks().listSelected(new Selector().label('odd', '1'), page.next, 2);
  assert.deepEqual(page.objects.map((o) => o.name), ['t5']);
  assert.equal(page.next, null);
});

test("selectors over the host's bounds are invalid", () => {
  new FakeHost();
  let deep = 1;
  for (let i = 0; i < 17; i++) deep = [deep];
  const many = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`l${i}`, '']));
  for (const bad of [
    new Selector(many),
    new Selector().label('-x', 'v'),
    new Selector().label('x', 'v v'),
    new Selector().containing(deep),
    new Selector().containing({ k: 'v'.repeat(5000) }),
  ]) {
    assert.throws(() => tasks().listSelected(bad), /selector for kind tasks/);
  }
});
