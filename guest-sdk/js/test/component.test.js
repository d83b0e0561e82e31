// The WIT adapter (src/component.js) natively, against stubbed WIT
// imports: every store error becomes its error class, every op and event
// reaches the wire as itself, reads convert objects and pages, and the
// exported reconciler answers the host in WIT terms (results, errors
// thrown with their payload, u64s as bigints).

import assert from 'node:assert/strict';
import { register } from 'node:module';
import { beforeEach, test } from 'node:test';

register('../support/wit-stub-loader.mjs', import.meta.url);

const { WitHost, exportController } = await import('../src/component.js');
const sdk = await import('../src/index.js');
const { Conflict, Controller, Description, Fenced, Invalid, Metadata, NotFound, ObjectKey, Outcome, QuotaExceeded } = sdk;
const { Retry, Selector, Transaction, Unavailable, Failed } = sdk;

const STORE = 'leasehold:controller/store@0.4.0';
const TENURE = 'leasehold:controller/tenure@0.4.0';

/** What componentize-js throws from an import that returned `err(value)`. */
function witErr(value) {
  const e = new Error('component error');
  e.payload = value;
  return e;
}

beforeEach(() => {
  globalThis.witStubs = {};
  globalThis.witCalls = [];
});

const wireObject = (name, version) => ({
  kind: 'tasks',
  name,
  version: BigInt(version),
  value: '{"a":1}',
  metadata: { labels: [['team', 'x']], owner: { kind: 'jobs', name: 'j' }, finalizers: ['f'] },
  status: undefined,
  generation: 2n,
  deletingSince: 1767225600000n,
});

test('every store error becomes its error class', () => {
  const host = new WitHost();
  const key = { kind: 'tasks', name: 't' };
  const cases = [
    [{ tag: 'fenced', val: 'lease gone' }, (e) => e instanceof Fenced && e.why === 'lease gone'],
    [{ tag: 'conflict', val: key }, (e) => e instanceof Conflict && e.key.equals(new ObjectKey('tasks', 't'))],
    [{ tag: 'not-found', val: key }, (e) => e instanceof NotFound && String(e.key) === 'tasks/t'],
    [{ tag: 'invalid', val: 'bad name' }, (e) => e instanceof Invalid && e.why === 'bad name'],
    [
      { tag: 'invalid', val: 'quota exceeded: controller=c quota=max_creates_per_second limit=5 retry_after_ms=7: no' },
      (e) => e instanceof QuotaExceeded && e.retryAfterMs === 7,
    ],
    [{ tag: 'unavailable', val: 'down' }, (e) => e instanceof Unavailable && e.why === 'down'],
    [{ tag: 'something-new', val: 'x' }, (e) => e instanceof Unavailable && /unknown store error/.test(e.message)],
  ];
  for (const [err, check] of cases) {
    globalThis.witStubs[STORE] = {
      get: () => {
        throw witErr(err);
      },
    };
    assert.throws(() => host.get('tasks', 't'), check, err.tag);
  }
});

test('every op and event reaches the wire as itself', () => {
  let sent;
  globalThis.witStubs[STORE] = {
    commit: (ops, events) => {
      sent = { ops, events };
      return { revision: 9n, eventSeqs: new BigUint64Array([4n]) };
    },
  };
  const obj = new sdk.StoredObject('tasks', 'u', 3, 1, new Metadata(), null, 2, null);
  const meta = new Metadata({ labels: { team: 'x' }, finalizers: ['f'] }).ownedBy('jobs', 'j');
  const host = new WitHost();
  const done = host.commit(
    new Transaction()
      .create('tasks', 'a', { b: 1 })
      .updateIfVersion('tasks', 'b', 5, 2)
      .deleteIfVersion('tasks', 'c', 6)
      .createWith('tasks', 'd', 3, meta)
      .replace(obj, 4, meta)
      .writeStatus('tasks', 'e', 7, { ok: true })
      .checkAbsent('tasks', 'f').ops,
    new Transaction().event('tasks', 'a', 'Made', 'hello').events,
  );
  assert.deepEqual(done, new sdk.Committed(9, [4]));
  const wireMeta = { labels: [['team', 'x']], owner: { kind: 'jobs', name: 'j' }, finalizers: ['f'] };
  assert.deepEqual(sent.ops, [
    { tag: 'create', val: { kind: 'tasks', name: 'a', value: '{"b":1}' } },
    { tag: 'update', val: { kind: 'tasks', name: 'b', expectedVersion: 5n, value: '2' } },
    { tag: 'delete', val: { kind: 'tasks', name: 'c', expectedVersion: 6n } },
    { tag: 'create-with', val: { kind: 'tasks', name: 'd', value: '3', metadata: wireMeta } },
    { tag: 'replace', val: { kind: 'tasks', name: 'u', expectedVersion: 3n, value: '4', metadata: wireMeta } },
    { tag: 'status', val: { kind: 'tasks', name: 'e', expectedGeneration: 7n, status: '{"ok":true}' } },
    { tag: 'check', val: { kind: 'tasks', name: 'f', expectedVersion: 0n } },
  ]);
  assert.deepEqual(sent.events, [{ kind: 'tasks', name: 'a', reason: 'Made', message: 'hello' }]);
  // Parts left out are absent (undefined) on the wire, not null.
  host.commit(new Transaction().setMetadata(obj, new Metadata()).clearStatus(obj).ops, []);
  assert.deepEqual(sent.ops, [
    { tag: 'replace', val: { kind: 'tasks', name: 'u', expectedVersion: 3n, value: undefined, metadata: { labels: [], owner: undefined, finalizers: [] } } },
    { tag: 'status', val: { kind: 'tasks', name: 'u', expectedGeneration: 2n, status: undefined } },
  ]);
});

test('reads convert objects, pages and selectors', () => {
  let selectorSent;
  globalThis.witStubs[STORE] = {
    get: (kind, name) => (name === 'none' ? undefined : wireObject(name, 5)),
    list: (kind, after, limit) => ({ objects: [wireObject('a', 1)], next: after === undefined && limit === 1 ? 'a' : undefined }),
    listSelected: (kind, selector, after, limit) => {
      selectorSent = { selector, after, limit };
      return { objects: [], next: undefined };
    },
  };
  const host = new WitHost();
  assert.equal(host.get('tasks', 'none'), null);
  const raw = host.get('tasks', 't');
  assert.equal(raw.version, 5);
  assert.equal(raw.generation, 2);
  assert.equal(raw.deletingSinceMs, 1767225600000);
  assert.equal(raw.status, null);
  assert.deepEqual(raw.metadata, new Metadata({ labels: { team: 'x' }, finalizers: ['f'] }).ownedBy('jobs', 'j'));
  assert.equal(host.list('tasks', null, 1).next, 'a');
  assert.equal(host.list('tasks', 'a', 1).next, null);
  host.listSelected('tasks', new Selector().label('team', 'x').containing({ n: 1 }), 'b', 7);
  assert.deepEqual(selectorSent, { selector: { labels: [['team', 'x']], contains: '{"n":1}' }, after: 'b', limit: 7 });
  host.listSelected('tasks', new Selector(), null, 7);
  assert.deepEqual(selectorSent.selector, { labels: [], contains: undefined });
  assert.equal(selectorSent.after, undefined);
  // A u64 beyond what a JavaScript number holds exactly is refused, never rounded.
  globalThis.witStubs[STORE].get = () => wireObject('big', 2 ** 53 + 1);
  assert.throws(() => host.get('tasks', 'big'), Unavailable);
});

class Scripted extends Controller {
  constructor(result) {
    super();
    this.result = result;
    this.seen = [];
  }

  describe() {
    return Description.watching(['tasks']).resyncEvery(1500).owns('pods', 'tasks').relatedByLabel('notes', 'example.com/task', 'tasks');
  }

  reconcile(ctx, kind, name) {
    this.seen.push([kind, name, ctx.reason, ctx.fence.epoch]);
    if (this.result instanceof Error) throw this.result;
    return this.result;
  }

  errorPolicy(ctx, kind, name, error) {
    return error instanceof Failed ? Retry.after(250) : Retry.backoff();
  }
}

test('the exported reconciler answers the host in WIT terms', () => {
  globalThis.witStubs[TENURE] = { current: () => ({ cluster: 'c', lease: 'l', epoch: 7n, holder: 'h' }) };
  let controller = new Scripted(Outcome.done());
  const reconciler = exportController(() => controller);
  assert.deepEqual(reconciler.describe(), {
    watches: ['tasks'],
    resyncPeriodMs: 1500n,
    related: [
      { kind: 'pods', mapping: { tag: 'owner', val: 'tasks' } },
      { kind: 'notes', mapping: { tag: 'label', val: { key: 'example.com/task', targetKind: 'tasks' } } },
    ],
    // Undeclared, the shard label is absent and no kind is every shard's.
    shardLabel: undefined,
    everyShard: [],
    // Undeclared, the settings are unchecked.
    settingsSchema: undefined,
  });
  assert.deepEqual(reconciler.reconcile('tasks', 't', { tag: 'related' }), { tag: 'done' });
  assert.deepEqual(controller.seen, [['tasks', 't', 'related', 7]]);
  controller.result = Outcome.requeueAfter(1234);
  assert.deepEqual(reconciler.reconcile('tasks', 't', { tag: 'requeue' }), { tag: 'requeue-after', val: 1234n });
  // Errors are thrown with the WIT error as their payload.
  controller.result = new Fenced('gone');
  assert.throws(() => reconciler.reconcile('tasks', 't', { tag: 'change' }), (e) => {
    assert.deepEqual(e.payload, { tag: 'fenced' });
    return true;
  });
  controller.result = new Failed('boom');
  assert.throws(() => reconciler.reconcile('tasks', 't', { tag: 'retry' }), (e) => {
    assert.deepEqual(e.payload, { tag: 'failed', val: { message: 'boom', retryAfterMs: 250n } });
    return true;
  });
  controller.result = new TypeError('bad');
  assert.throws(() => reconciler.reconcile('tasks', 't', { tag: 'resync' }), (e) => {
    assert.deepEqual(e.payload, { tag: 'failed', val: { message: 'TypeError: bad', retryAfterMs: undefined } });
    return true;
  });
  // A reason this SDK does not know is reconciled as a change.
  controller.result = Outcome.done();
  reconciler.reconcile('tasks', 't', { tag: 'from-the-future' });
  assert.equal(controller.seen.at(-1)[2], 'change');
  // One controller per instance: the factory runs once.
  let made = 0;
  const counted = exportController(() => {
    made += 1;
    return (controller = new Scripted(Outcome.done()));
  });
  counted.describe();
  counted.reconcile('tasks', 't', { tag: 'change' });
  assert.equal(made, 1);
});

test('the description reaches the host with its shard label and every-shard kinds', () => {
  const controller = new Scripted(Outcome.done());
  controller.describe = () =>
    Description.watching(['nodes', 'tasks']).shardByLabel('example.com/tenant').watchOnEveryShard('nodes');
  assert.deepEqual(exportController(() => controller).describe(), {
    watches: ['nodes', 'tasks'],
    resyncPeriodMs: 0n,
    related: [],
    shardLabel: 'example.com/tenant',
    everyShard: ['nodes'],
    settingsSchema: undefined,
  });
});

test('the settings schema reaches the host as JSON text', () => {
  const controller = new Scripted(Outcome.done());
  const schema = {
    type: 'object',
    properties: { region: { type: 'string' } },
    required: ['region'],
    additionalProperties: false,
  };
  controller.describe = () => Description.watching(['buckets']).settingsSchemaOf(schema);
  const described = exportController(() => controller).describe();
  assert.deepEqual(JSON.parse(described.settingsSchema), schema);
  // Text is taken as it is.
  controller.describe = () => Description.watching(['buckets']).settingsSchemaOf('{"type": "object"}');
  assert.equal(exportController(() => controller).describe().settingsSchema, '{"type": "object"}');
});

test("the shard is the tenure's, asked each time", () => {
  const answers = [{ index: 2, count: 4 }, { index: 3, count: 4 }];
  globalThis.witStubs[TENURE] = { shard: () => answers.shift() };
  const host = new WitHost();
  const first = host.shard();
  assert.ok(first instanceof sdk.Shard && first.equals(new sdk.Shard(2, 4)));
  assert.ok(host.shard().equals(new sdk.Shard(3, 4)));
  assert.deepEqual(
    globalThis.witCalls.filter(([iface]) => iface === TENURE).map(([, fn]) => fn),
    ['shard', 'shard'],
  );
});

test("every reason of the world is known to the SDK", async () => {
  const { readFile } = await import('node:fs/promises');
  const wit = await readFile(new URL('../types/wit/interfaces/leasehold-controller-reconciler.d.ts', import.meta.url), 'utf8');
  const reasons = [...wit.matchAll(/interface ReconcileReason\w+ \{\s*tag: '([a-z-]+)'/g)].map((m) => m[1]);
  assert.deepEqual(reasons.sort(), Object.values(sdk.Reason).sort());
});
