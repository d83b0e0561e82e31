// What the fake adds around the store's rules of metadata, finalizers and
// statuses (its clock, users' deletes, the SDK's helpers); the rules
// themselves are the conformance table's (conformance.test.js).

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

test('finalizer helpers write nothing when there is nothing to change', () => {
  const host = new FakeHost();
  host.seedWith('tasks', 't', 1, new Metadata({ finalizers: ['f'] }));
  const t = read('tasks', 't');
  assert.deepEqual(new Transaction().addFinalizer(t, 'f').ops, [new Check(t.key, t.version)]);
  assert.deepEqual(new Transaction().removeFinalizer(t, 'g').ops, [new Check(t.key, t.version)]);
});

const selected = (selector) => tasks().listAllSelected(selector, 100).map((o) => o.name);

