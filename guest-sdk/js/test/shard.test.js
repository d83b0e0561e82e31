// Shards: the rule that puts every object in one shard, the tenure's shard
// from the host, the description's shard label and every-shard kinds, and
// the fake host running one shard as the host does.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';

import {
  Context,
  Controller,
  Description,
  Invalid,
  Metadata,
  Outcome,
  Reason,
  Reply,
  Shard,
  StoredObject,
  Transaction,
  fnv1a64,
  limits,
  shard,
} from '../src/index.js';
import { FakeHost } from '../src/fake.js';

const TENANT = 'example.com/tenant';

test("FNV-1a 64 matches the specification's vectors", () => {
  assert.equal(fnv1a64(''), 0xcbf29ce484222325n);
  assert.equal(fnv1a64('a'), 0xaf63dc4c8601ec8cn);
  assert.equal(fnv1a64('foobar'), 0x85944171f73967e8n);
  // A string is hashed as its UTF-8 bytes.
  assert.equal(fnv1a64(new TextEncoder().encode('foobar')), fnv1a64('foobar'));
  assert.equal(fnv1a64('é'), fnv1a64(new Uint8Array([0xc3, 0xa9])));
  assert.notEqual(fnv1a64('é'), fnv1a64(new Uint8Array([0xe9])));
});

test('objects fall into their documented shards', () => {
  // The vectors the host's own tests hold (host/src/shard.rs).
  assert.equal(fnv1a64('tasks/t-1'), 0xd1073a09e6f464b0n);
  assert.equal(Shard.ofKey('tasks', 't-1', 4), 0);
  assert.equal(Shard.ofKey('tasks', 't-2', 4), 1);
  assert.equal(Shard.ofKey('nodes', 'n-1', 4), 1);
  assert.equal(Shard.ofKey('tasks', 't-1', 1), 0);
  assert.ok(new Shard(1, 4).ownsKey('tasks', 't-2'));
  assert.ok(!new Shard(0, 4).ownsKey('tasks', 't-2'));
  assert.equal(String(new Shard(1, 4)), 'shard 1 of 4');
});

test('every object belongs to exactly one shard', () => {
  for (const count of [1, 2, 3, 4, 9, limits.MAX_SHARDS]) {
    const shards = Array.from({ length: count }, (_, i) => new Shard(i, count));
    const perShard = new Array(count).fill(0);
    for (let i = 0; i < 2000; i += 1) {
      const owners = shards.filter((s) => s.ownsKey('tasks', `t-${i}`));
      assert.equal(owners.length, 1, `t-${i} among ${count}`);
      perShard[owners[0].index] += 1;
    }
    assert.ok(perShard.every((n) => n > 0), `${count}: ${perShard}`);
  }
});

test("a labelled object goes by its label's value, any other by its key", () => {
  assert.equal(Shard.ofLabel('tenant-a', 4), Number(fnv1a64('tenant-a') % 4n));
  assert.equal(Shard.ofLabel('tenant-a', 4), 3);
  assert.equal(Shard.ofLabel('tenant-c', 4), 1);
  const labelled = new StoredObject('tasks', 't-1', 1, {}, new Metadata({ labels: { [TENANT]: 'tenant-c' } }));
  // By its key t-1 is shard 0's; by its label, shard 1's.
  assert.ok(new Shard(1, 4).owns(labelled, TENANT));
  assert.ok(!new Shard(0, 4).owns(labelled, TENANT));
  // Without a declared label, or without the label on the object, the key decides.
  assert.ok(new Shard(0, 4).owns(labelled));
  assert.ok(new Shard(0, 4).owns(labelled, 'example.com/other'));
  assert.ok(new Shard(1, 4).owns(new StoredObject('tasks', 't-2', 1, {}), TENANT));
  // An empty value is a value the object carries.
  const empty = new StoredObject('tasks', 't-2', 1, {}, new Metadata({ labels: { [TENANT]: '' } }));
  assert.ok(new Shard(Number(fnv1a64('') % 4n), 4).owns(empty, TENANT));
});

test('a shard outside its bounds is refused', () => {
  const cases = [
    [0, 0, 'a controller runs as 1 to 64 shards, not 0'],
    [0, 65, 'a controller runs as 1 to 64 shards, not 65'],
    [4, 4, 'shard index 4 is not one of the 4 shards (0 to 3)'],
    [-1, 4, 'shard index -1 is not one of the 4 shards (0 to 3)'],
    [0.5, 4, 'shard index 0.5 is not one of the 4 shards (0 to 3)'],
    [0, 2.5, 'a controller runs as 1 to 64 shards, not 2.5'],
  ];
  for (const [index, count, says] of cases) {
    assert.throws(() => new Shard(index, count), { name: 'RangeError', message: says });
  }
  for (const count of [0, limits.MAX_SHARDS + 1]) {
    assert.throws(() => Shard.ofKey('tasks', 't-1', count), /1 to 64 shards/);
    assert.throws(() => Shard.ofLabel('tenant-a', count), /1 to 64 shards/);
  }
});

test("MAX_SHARDS is the host's", async () => {
  const source = await readFile(new URL('../../../host/src/shard.rs', import.meta.url), 'utf8');
  const found = source.match(/pub const MAX_SHARDS: u32 = (\d+);/);
  assert.ok(found, 'host/src/shard.rs no longer declares MAX_SHARDS');
  assert.equal(limits.MAX_SHARDS, Number(found[1]));
});

test('the fake host runs shard 0 of 1 until told otherwise', () => {
  const host = new FakeHost();
  assert.deepEqual(host.shard(), new Shard(0, 1));
  assert.ok(shard().equals(new Shard(0, 1)) && shard().equals(Shard.WHOLE));
  assert.ok(host.setShard(2, 4).equals(new Shard(2, 4)));
  assert.ok(shard().equals(new Shard(2, 4)));
  // Asked of the host each time, never kept: by `shard()` and by a context.
  const ctx = new Context();
  assert.ok(ctx.shard.equals(new Shard(2, 4)));
  host.setShard(3, 4);
  assert.ok(shard().equals(new Shard(3, 4)) && ctx.shard.equals(new Shard(3, 4)));
  // A new tenure keeps the shard.
  host.newTenure();
  assert.ok(shard().equals(new Shard(3, 4)));
  assert.ok(!shard().equals(new Shard(3, 5)) && !shard().equals(null));
});

test('the fake host refuses a shard outside its bounds', () => {
  const host = new FakeHost();
  host.setShard(1, 2);
  const cases = [
    [0, 0, 'FakeHost.setShard(0, 0): a controller runs as 1 to 64 shards, not 0'],
    [0, 65, 'FakeHost.setShard(0, 65): a controller runs as 1 to 64 shards, not 65'],
    [4, 4, 'FakeHost.setShard(4, 4): shard index 4 is not one of the 4 shards (0 to 3)'],
    [-1, 4, 'FakeHost.setShard(-1, 4): shard index -1 is not one of the 4 shards (0 to 3)'],
  ];
  for (const [index, count, says] of cases) {
    assert.throws(() => host.setShard(index, count), { name: 'RangeError', message: says });
    assert.ok(host.shard().equals(new Shard(1, 2)), 'a refused shard changes nothing');
  }
});

test('the description declares the shard label and every-shard kinds', () => {
  const base = Description.watching(['tasks']);
  assert.equal(base.shardLabel, null);
  assert.deepEqual(base.everyShard, []);
  const d = base.shardByLabel(TENANT).watchOnEveryShard('nodes').resyncEvery(5).owns('pods');
  assert.equal(d.shardLabel, TENANT);
  assert.deepEqual(d.everyShard, ['nodes']);
  assert.equal(d.resyncMs, 5);
  // An every-shard kind is watched too.
  assert.deepEqual(d.watches, ['tasks', 'nodes']);
  assert.equal(d.related.length, 1);
  // Builders copy: the base is unchanged, and a kind is listed once.
  assert.equal(base.shardLabel, null);
  assert.deepEqual([base.everyShard, base.watches], [[], ['tasks']]);
  const twice = d.watchOnEveryShard('nodes').watchOnEveryShard('tasks');
  assert.deepEqual([twice.watches, twice.everyShard], [['tasks', 'nodes'], ['nodes', 'tasks']]);
  assert.deepEqual(new Description(['a'], null, [], 'k', ['a']).everyShard, ['a']);
});

/** Records what it is asked to reconcile; describes what it is given. */
class Recorder extends Controller {
  constructor(description) {
    super();
    this.description = description;
    this.seen = [];
  }

  describe() {
    return this.description;
  }

  reconcile(ctx, kind, name) {
    this.seen.push([`${kind}/${name}`, ctx.reason]);
    return Outcome.done();
  }
}

/** By key among 4 shards: t-1..t-8 are 0,1,2,3,0,1,2,3; n-1 1, n-2 0, n-3 3. */
function seedTasksAndNodes(host) {
  for (let i = 1; i <= 8; i += 1) host.seed('tasks', `t-${i}`, i);
  for (let i = 1; i <= 3; i += 1) host.seed('nodes', `n-${i}`, i);
}

const keysSeen = (c) => c.seen.map(([k]) => k);

test('a sharded fake resyncs only its own objects and the every-shard kinds', () => {
  const host = new FakeHost();
  seedTasksAndNodes(host);
  host.setShard(1, 4);
  let c = new Recorder(Description.watching(['nodes', 'tasks']));
  host.resync(c);
  assert.deepEqual(keysSeen(c), ['nodes/n-1', 'tasks/t-2', 'tasks/t-6']);
  c = new Recorder(Description.watching(['tasks']).watchOnEveryShard('nodes'));
  host.resync(c);
  assert.deepEqual(keysSeen(c), ['tasks/t-2', 'tasks/t-6', 'nodes/n-1', 'nodes/n-2', 'nodes/n-3']);
  // Unsharded, it reconciles everything.
  host.setShard(0, 1);
  c = new Recorder(Description.watching(['nodes', 'tasks']));
  host.resync(c);
  assert.equal(c.seen.length, 11);
});

test('a sharded fake places a labelled object by its label', () => {
  const host = new FakeHost();
  seedTasksAndNodes(host);
  // t-1 (shard 0 by key) joins tenant-c's shard 1; t-2 (1 by key) tenant-a's shard 3.
  host.seedWith('tasks', 't-1', 1, new Metadata({ labels: { [TENANT]: 'tenant-c' } }));
  host.seedWith('tasks', 't-2', 2, new Metadata({ labels: { [TENANT]: 'tenant-a' } }));
  host.setShard(1, 4);
  let c = new Recorder(Description.watching(['tasks']).shardByLabel(TENANT));
  host.resync(c);
  assert.deepEqual(keysSeen(c), ['tasks/t-1', 'tasks/t-6']);
  // Without the label declared, the keys decide.
  c = new Recorder(Description.watching(['tasks']));
  host.resync(c);
  assert.deepEqual(keysSeen(c), ['tasks/t-2', 'tasks/t-6']);
});

test('a sharded fake follows only the changes that wake its shard', () => {
  const host = new FakeHost();
  host.setShard(1, 4);
  const c = new Recorder(Description.watching(['tasks']).shardByLabel(TENANT).owns('pods', 'tasks'));
  let start = host.revision;
  seedTasksAndNodes(host);
  host.seedWith('tasks', 't-1', 1, new Metadata({ labels: { [TENANT]: 'tenant-c' } }));
  start = host.runChanges(c, start);
  assert.deepEqual(c.seen, [
    ['tasks/t-2', Reason.CHANGE],
    ['tasks/t-6', Reason.CHANGE],
    ['tasks/t-1', Reason.CHANGE],
  ]);
  c.seen = [];
  // A pod maps to its owner, reconciled by the shard that owns the owner
  // as stored: t-1 by its label (shard 1), t-3 by its key (shard 2).
  host.seedWith('pods', 'p-1', 1, new Metadata().ownedBy('tasks', 't-1'));
  host.seedWith('pods', 'p-3', 1, new Metadata().ownedBy('tasks', 't-3'));
  start = host.runChanges(c, start);
  assert.deepEqual(c.seen, [['tasks/t-1', Reason.RELATED]]);
  c.seen = [];
  // A deletion wakes the shard the object belonged to, by its last labels.
  host.remove('tasks', 't-1');
  host.runChanges(c, start);
  assert.deepEqual(c.seen, [['tasks/t-1', Reason.CHANGE]]);
  // Not shard 0, which owns t-1 by its key; but the deletion of p-1 (its
  // owner's deletion collected it) maps to t-1, which no longer exists and
  // so goes by its key (the WIT's rule for a related target): shard 0's.
  host.setShard(0, 4);
  c.seen = [];
  host.runChanges(c, start);
  assert.deepEqual(c.seen, [['tasks/t-1', Reason.RELATED]]);
});

test("a shard's blind status write to another shard's object is refused", () => {
  const host = new FakeHost();
  host.seed('tasks', 't-1', 1);
  host.seed('tasks', 't-2', 2);
  // Unsharded, any status write goes.
  new Transaction().writeStatus('tasks', 't-2', null, { ok: 1 }).commit();
  host.setShard(0, 4);
  const before = host.revision;
  assert.throws(
    () => new Transaction().writeStatus('tasks', 't-1', null, 1).writeStatus('tasks', 't-2', null, 2).commit(),
    (e) => e instanceof Invalid && e.message.includes('tasks/t-2 belongs to shard 1 of 4, not to this shard 0 of 4'),
  );
  assert.equal(host.revision, before, 'a refused commit writes nothing');
  // Its own object, or another's with an expected generation, goes.
  new Transaction().writeStatus('tasks', 't-1', null, 1).commit();
  new Transaction().updateStatus(host.object('tasks', 't-2'), 2).commit();
});

test('under a shard label every blind status write is refused', () => {
  const host = new FakeHost();
  host.seed('tasks', 't-1', 1);
  host.setShard(0, 4);
  class Blind extends Recorder {
    reconcile(ctx, kind, name) {
      new Transaction().writeStatus(kind, name, null, { seen: true }).commit();
      return Outcome.done();
    }
  }
  const reply = host.reconcile(new Blind(Description.watching(['tasks']).shardByLabel(TENANT)), 'tasks', 't-1');
  assert.ok(reply.isFailed && reply.message.includes('sharded by the label example.com/tenant'), reply.message);
  assert.equal(host.object('tasks', 't-1').status, null);
  // The same controller without a shard label writes its own object's status.
  assert.deepEqual(host.reconcile(new Blind(Description.watching(['tasks'])), 'tasks', 't-1'), Reply.done());
  assert.deepEqual(host.object('tasks', 't-1').status, { seen: true });
});
