// finalizer(): the four cases of an object and a finalizer, each commit
// conditional on the version read, and the finalizer kept when cleanup
// fails.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Api, Conflict, Failed, Invalid, Metadata, Outcome, Replace, finalizer } from '../src/index.js';
import { FakeHost } from '../src/fake.js';

const F = 'example.com/bucket';

/** The steps, recording what they were called with. */
function steps({ apply, cleanup } = {}) {
  const calls = [];
  return {
    calls,
    apply: (obj) => {
      calls.push(['apply', obj]);
      return apply?.(obj);
    },
    cleanup: (obj, removal) => {
      calls.push(['cleanup', obj]);
      return cleanup?.(obj, removal);
    },
  };
}

const read = (name) => new Api('buckets').get(name);

test('a live object without the finalizer gets it, then apply sees the object as written', () => {
  const host = new FakeHost();
  host.seed('buckets', 'b', { size: 1 });
  const before = read('b');
  const s = steps({ apply: () => Outcome.requeueAfter(5) });
  assert.deepEqual(finalizer(before, F, s), Outcome.requeueAfter(5));
  const [commit] = host.commits();
  assert.equal(host.commits().length, 1);
  assert.ok(commit.ops[0] instanceof Replace);
  assert.equal(commit.ops[0].expectedVersion, before.version, 'conditional on the version read');
  const stored = read('b');
  assert.deepEqual(stored.finalizers, [F]);
  // What apply got is what the store now holds, without a read.
  const [[step, given]] = s.calls;
  assert.equal(step, 'apply');
  assert.deepEqual(
    [given.version, given.generation, [...given.finalizers], given.value, given.isDeleting],
    [stored.version, stored.generation, [...stored.finalizers], stored.value, false],
  );
  assert.equal(given.generation, before.generation + 1, 'the metadata change counts');
});

test('a live object with the finalizer is applied, nothing written', () => {
  const host = new FakeHost();
  host.seedWith('buckets', 'b', { size: 1 }, new Metadata({ finalizers: [F] }));
  const s = steps();
  assert.deepEqual(finalizer(read('b'), F, s), Outcome.done());
  assert.deepEqual(s.calls.map(([step]) => step), ['apply']);
  assert.deepEqual(host.commits(), []);
});

test('a marked object with the finalizer is cleaned up, then the finalizer goes with it', () => {
  const host = new FakeHost();
  host.seedWith('buckets', 'b', { size: 1 }, new Metadata({ finalizers: [F] }));
  host.remove('buckets', 'b');
  const marked = read('b');
  assert.ok(marked.isDeleting);
  const s = steps({ cleanup: (obj, removal) => void removal.event('buckets', obj.name, 'Released', 'gone') });
  assert.deepEqual(finalizer(marked, F, s), Outcome.done());
  assert.deepEqual(s.calls.map(([step]) => step), ['cleanup']);
  assert.equal(read('b'), null, 'its last finalizer gone, the object goes');
  const [commit] = host.commits();
  assert.equal(commit.ops[0].expectedVersion, marked.version);
  assert.deepEqual(host.eventsWithReason('Released').map((e) => e.revision), [commit.revision], 'in the same commit');
});

test('a cleanup that fails keeps the finalizer, and the next one finishes', () => {
  const host = new FakeHost();
  host.seedWith('buckets', 'b', { size: 1 }, new Metadata({ finalizers: [F, 'other.example/hold'] }));
  host.remove('buckets', 'b');
  const failing = steps({
    cleanup: () => {
      throw new Failed('the cloud is down', 1000);
    },
  });
  assert.throws(() => finalizer(read('b'), F, failing), Failed);
  assert.deepEqual(read('b').finalizers, [F, 'other.example/hold']);
  assert.deepEqual(host.commits(), []);
  finalizer(read('b'), F, steps());
  assert.deepEqual(read('b').finalizers, ['other.example/hold'], "another party's finalizer still holds it");
});

test("a marked object without our finalizer is left alone", () => {
  const host = new FakeHost();
  host.seedWith('buckets', 'b', { size: 1 }, new Metadata({ finalizers: ['other.example/hold'] }));
  host.remove('buckets', 'b');
  const s = steps();
  assert.deepEqual(finalizer(read('b'), F, s), Outcome.done());
  assert.deepEqual(s.calls, []);
  assert.deepEqual(host.commits(), []);
});

test('an object changed since it was read conflicts, and nothing is applied or removed', () => {
  const host = new FakeHost();
  host.seed('buckets', 'b', { size: 1 });
  const stale = read('b');
  host.seed('buckets', 'b', { size: 2 });
  const s = steps();
  assert.throws(() => finalizer(stale, F, s), Conflict);
  assert.deepEqual(s.calls, [], 'apply never saw a write that did not happen');

  host.seedWith('buckets', 'c', { size: 1 }, new Metadata({ finalizers: [F] }));
  host.remove('buckets', 'c');
  const marked = read('c');
  host.seedWith('buckets', 'c', { size: 3 }, new Metadata({ finalizers: [F] }));
  assert.throws(() => finalizer(marked, F, steps()), Conflict);
  assert.ok(read('c') !== null, 'the finalizer stays until a cleanup of what is current');
});

test('a cleanup that writes the object itself is refused before anything is sent', () => {
  const host = new FakeHost();
  host.seedWith('buckets', 'b', { size: 1 }, new Metadata({ finalizers: [F] }));
  host.remove('buckets', 'b');
  const marked = read('b');
  const s = steps({ cleanup: (obj, removal) => void removal.updateStatus(obj, { gone: true }) });
  assert.throws(() => finalizer(marked, F, s), (e) => e instanceof Invalid && e.message.includes('writes buckets/b itself'));
  assert.deepEqual(host.commits(), []);
  assert.deepEqual(read('b').finalizers, [F]);
});
