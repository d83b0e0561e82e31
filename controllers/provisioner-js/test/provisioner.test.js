// The JavaScript provisioner against the SDK's fake host, whose outbound
// HTTP is answered by a small fenced receiver written here (the real one
// is leasehold-receiver, in receiver/).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Api, EventType, Metadata, Reply, getCondition } from '../vendor/leasehold/index.js';
import { At, Fault, FakeHost, HttpFault, HttpReply } from '../vendor/leasehold/fake.js';
import {
  BUCKETS,
  CONFLICT_RETRY_AFTER_MS,
  DELETE_REFUSED_RETRY_AFTER_MS,
  DEPROVISIONED,
  FINALIZER,
  PROVISIONED,
  PROVISION_FAILED,
  Phase,
  Provisioner,
  READY,
  RESYNC_PERIOD_MS,
  bucketUrl,
  clip,
  MAX_MESSAGE_BYTES,
} from '../provisioner.js';

const ENDPOINT = 'http://cloud.test:9000';
const URL = 'http://cloud.test:9000/buckets/photos';

/**
 * A fenced receiver in miniature: the highest epoch accepted per lease
 * (409 "stale epoch" below it), answers stored by idempotency key, and
 * the effects applied.
 */
class Cloud {
  constructor() {
    /** @type {Map<string, number>} */ this.highest = new Map();
    /** @type {Map<string, HttpReply>} */ this.answers = new Map();
    /** (method, epoch, key) of each effect applied, in order. @type {Array<[string, number, string]>} */
    this.applied = [];
    this.generation = 0;
  }

  answer(request) {
    const lease = request.header('leasehold-lease') ?? '';
    const epoch = Number(request.header('leasehold-epoch'));
    const highest = this.highest.get(lease) ?? 0;
    if (epoch < highest) return HttpReply.json(409, { error: 'stale epoch', highest });
    const key = request.header('idempotency-key');
    if (key === null) return HttpReply.json(400, { error: 'idempotency-key is missing' });
    this.highest.set(lease, epoch);
    const stored = this.answers.get(key);
    if (stored !== undefined) return stored.header('idempotency-replayed', 'true');
    this.generation += 1;
    const reply =
      request.method === 'PUT'
        ? HttpReply.json(201, { name: 'photos', spec: request.bodyJson(), generation: this.generation, applied_epoch: epoch })
        : HttpReply.json(200, { deleted: true, generation: this.generation });
    this.applied.push([request.method, epoch, key]);
    this.answers.set(key, reply);
    return reply;
  }

  count(method) {
    return this.applied.filter(([m]) => m === method).length;
  }
}

/** A fake host whose http_allow lists the cloud, answered by a fresh Cloud. */
function hostWithCloud() {
  const host = new FakeHost();
  host.allowHttp([`${ENDPOINT}/buckets/`]);
  const cloud = new Cloud();
  host.respondWith(`${ENDPOINT}/buckets/*`, (request) => cloud.answer(request));
  return { host, cloud };
}

const spec = (sizeGb) => ({ size_gb: sizeGb, region: 'eu' });

function seed(host, sizeGb) {
  return host.seed(BUCKETS, 'photos', { spec: spec(sizeGb), endpoint: ENDPOINT, owner: 'team-a' });
}

const photos = (host) => host.object(BUCKETS, 'photos');
const reconcile = (host) => host.reconcile(new Provisioner(), BUCKETS, 'photos');
// The incarnation is the version the finalizer's commit gave a new object:
// 3 (the seed took revision 1 and its change 2: one series, with gaps).
const putKey = (generation, incarnation = 3) => `buckets/photos@${generation}/put-${incarnation}`;
const keys = (host) => host.httpRequests().map((r) => r.header('idempotency-key'));

test('describes buckets with a resync', () => {
  const d = new Provisioner().describe();
  assert.deepEqual(d.watches, [BUCKETS]);
  assert.equal(d.resyncMs, RESYNC_PERIOD_MS);
});

test('a new bucket gets the finalizer, is put once under the key of its generation, and is Ready', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);

  assert.deepEqual(reconcile(host), Reply.done());
  const bucket = photos(host);
  assert.deepEqual(bucket.finalizers, [FINALIZER]);
  assert.equal(bucket.generation, 2, 'adding the finalizer is a metadata change');
  const [put] = host.httpRequests();
  assert.deepEqual([put.method, put.url], ['PUT', URL]);
  assert.deepEqual(put.bodyJson(), spec(10));
  assert.equal(put.header('idempotency-key'), putKey(2));
  assert.equal(put.header('content-type'), 'application/json');
  assert.equal(put.header('content-length'), String(JSON.stringify(spec(10)).length));
  assert.equal(put.header('leasehold-epoch'), '1');
  assert.equal(put.timeoutMs, 10_000);

  const status = bucket.status;
  assert.equal(status.phase, Phase.READY);
  assert.deepEqual(status.applied_spec, spec(10));
  assert.equal(status.cloud_generation, 1);
  assert.equal(status.observed_generation, 2);
  assert.equal(status.incarnation, 3);
  const ready = getCondition(status, READY);
  assert.deepEqual([ready?.status, ready?.reason, ready?.observedGeneration], ['True', PROVISIONED, 2]);
  assert.deepEqual(bucket.value, { spec: spec(10), endpoint: ENDPOINT, owner: 'team-a' }, 'the value is the user’s');
  const events = host.eventsWithReason(PROVISIONED);
  assert.equal(events.length, 1);
  assert.equal(events[0].type, EventType.Normal);
  // Three commits: the finalizer, Pending, then Ready with its event.
  assert.deepEqual(
    host.commits().map((c) => c.events.length),
    [0, 0, 1],
  );

  // In sync: the echoes of its own commits, and a resync, cost no request.
  host.runChanges(new Provisioner());
  host.resync(new Provisioner());
  assert.equal(host.httpRequests().length, 1);
  assert.equal(cloud.applied.length, 1);
});

test('a lost reply is retried under the same key and applied once, though Pending changed the version', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  host.failNextHttp(HttpFault.REPLY_LOST);

  // The cloud applied it; the guest cannot know. It writes no outcome and
  // fails, for the host to retry with backoff.
  const failed = reconcile(host);
  assert.equal(failed.kind, 'failed');
  assert.ok(failed.message?.includes('connection-terminated'), failed.message);
  assert.equal(failed.delayMs, null, "the host's backoff");
  const pending = photos(host);
  assert.equal(pending.status.phase, Phase.PENDING, 'the decision is recorded, its outcome is not');
  assert.equal(getCondition(pending.status, READY)?.status, 'Unknown');
  assert.equal(cloud.applied.length, 1);

  // The retry reads a new version (the Pending status) but the same
  // generation: the same key, and the cloud replays its answer.
  const versionAtFirstTry = host.commits()[0].revision;
  assert.ok(pending.version > versionAtFirstTry);
  assert.deepEqual(reconcile(host), Reply.done());
  assert.deepEqual(keys(host), [putKey(2), putKey(2)]);
  assert.equal(cloud.applied.length, 1, 'applied exactly once');
  const status = photos(host).status;
  assert.equal(status.phase, Phase.READY);
  assert.equal(status.cloud_generation, 1);
  assert.ok(status.message.includes('replayed'), status.message);
});

test("a successor completes a predecessor's unanswered PUT under the same key", () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  host.failNextHttp(HttpFault.REPLY_TIMED_OUT);
  assert.equal(reconcile(host).kind, 'failed');

  // The leader dies; the next tenure starts from the store.
  host.newTenure();
  assert.deepEqual(reconcile(host), Reply.done());
  assert.deepEqual(
    host.httpRequests().map((r) => [r.epoch, r.header('idempotency-key')]),
    [
      [1, putKey(2)],
      [2, putKey(2)],
    ],
  );
  assert.deepEqual(cloud.applied, [['PUT', 1, putKey(2)]]);
  const ready = host.commits().at(-1);
  assert.equal(ready.epoch, 2, 'the tenure that learned the outcome records it');
  assert.equal(host.eventsWithReason(PROVISIONED).length, 1);
});

test('a changed spec is a new generation, a new key', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  reconcile(host);
  const bucket = photos(host);
  host.seedWith(BUCKETS, 'photos', { ...bucket.value, spec: spec(20) }, bucket.metadata);
  assert.equal(photos(host).generation, 3);

  assert.deepEqual(reconcile(host), Reply.done());
  assert.deepEqual(keys(host), [putKey(2), putKey(3)]);
  assert.deepEqual(host.httpRequests()[1].bodyJson(), spec(20));
  const status = photos(host).status;
  assert.deepEqual([status.applied_spec.size_gb, status.cloud_generation, status.observed_generation], [20, 2, 3]);
  assert.equal(cloud.applied.length, 2);
});

test('a spec reverted while its successor was unconfirmed is put again', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  reconcile(host);
  const change = (sizeGb) => {
    const b = photos(host);
    host.seedWith(BUCKETS, 'photos', { ...b.value, spec: spec(sizeGb) }, b.metadata);
  };
  // 20 reaches the cloud, but its answer is lost: the cloud holds 20.
  change(20);
  host.failNextHttp(HttpFault.REPLY_LOST);
  assert.equal(reconcile(host).kind, 'failed');
  // Back to 10, which the status says was applied: the cloud must still be told.
  change(10);
  assert.deepEqual(reconcile(host), Reply.done());
  assert.deepEqual(keys(host), [putKey(2), putKey(3), putKey(4)]);
  assert.deepEqual(host.httpRequests()[2].bodyJson(), spec(10));
  assert.deepEqual(cloud.applied.map(([, , key]) => key), [putKey(2), putKey(3), putKey(4)]);
});

test('deleting goes through the finalizer: the bucket is deleted at the cloud once, then the object goes', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  reconcile(host);
  // A user deletes the object: the finalizer holds it, marked.
  host.remove(BUCKETS, 'photos');
  const marked = photos(host);
  assert.ok(marked.isDeleting);
  const deleteKey = `buckets/photos@${marked.generation}/delete-3`;

  // The answer is lost once: the object stays; the retry replays it.
  host.failNextHttp(HttpFault.REPLY_LOST);
  assert.equal(reconcile(host).kind, 'failed');
  assert.ok(photos(host) !== null, 'held until the cloud confirms');
  assert.deepEqual(reconcile(host), Reply.done());

  const deletes = host.httpRequests().filter((r) => r.method === 'DELETE');
  assert.deepEqual(
    deletes.map((r) => [r.url, r.header('idempotency-key'), r.header('content-length')]),
    [
      [URL, deleteKey, null],
      [URL, deleteKey, null],
    ],
  );
  assert.equal(cloud.count('DELETE'), 1, 'deleted once');
  assert.equal(photos(host), null);
  const [event] = host.eventsWithReason(DEPROVISIONED);
  const last = host.commits().at(-1);
  assert.equal(event.revision, last.revision, 'the event goes with the finalizer');
  assert.ok(event.message.includes('confirmed'), event.message);
});

test('a bucket deleted and made again under the same name is a new incarnation: new keys, put again', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  reconcile(host);
  host.remove(BUCKETS, 'photos');
  reconcile(host);
  assert.equal(photos(host), null);
  // The same name, the same spec: its generations start at 1 again, but
  // the cloud deleted the bucket, so it must be put again, not replayed.
  seed(host, 10);
  assert.deepEqual(reconcile(host), Reply.done());
  const incarnation = photos(host).status.incarnation;
  assert.ok(incarnation > 2, `a new incarnation: ${incarnation}`);
  assert.equal(keys(host).at(-1), putKey(2, incarnation));
  assert.deepEqual(cloud.applied.map(([method]) => method), ['PUT', 'DELETE', 'PUT']);
  assert.ok(!photos(host).status.message.includes('replayed'));
});

test('a marked object whose spec is malformed is still deleted at the cloud', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  reconcile(host);
  const b = photos(host);
  host.seedWith(BUCKETS, 'photos', { ...b.value, spec: 'gone wrong' }, b.metadata);
  host.remove(BUCKETS, 'photos');
  assert.deepEqual(reconcile(host), Reply.done());
  assert.equal(photos(host), null);
  assert.equal(cloud.count('DELETE'), 1);
});

test('a bucket the cloud never had is still deleted there, which fences the cloud, and the object goes', () => {
  const host = new FakeHost();
  host.allowHttp([ENDPOINT]);
  host.respond(URL, HttpReply.json(404, { error: 'no bucket' }));
  host.seedWith(BUCKETS, 'photos', { spec: spec(1), endpoint: ENDPOINT }, new Metadata({ finalizers: [FINALIZER] }));
  host.remove(BUCKETS, 'photos');
  assert.deepEqual(reconcile(host), Reply.done());
  assert.equal(host.httpRequests().length, 1);
  assert.equal(photos(host), null);
  assert.ok(host.eventsWithReason(DEPROVISIONED)[0].message.includes('it was not there'));
});

test('a delete the cloud refuses keeps the object and looks again later', () => {
  const host = new FakeHost();
  host.allowHttp([ENDPOINT]);
  host.respond(URL, HttpReply.json(403, { error: 'bucket is locked' }));
  host.seedWith(BUCKETS, 'photos', { spec: spec(1), endpoint: ENDPOINT }, new Metadata({ finalizers: [FINALIZER] }));
  host.remove(BUCKETS, 'photos');
  const reply = reconcile(host);
  assert.equal(reply.kind, 'failed');
  assert.equal(reply.delayMs, DELETE_REFUSED_RETRY_AFTER_MS);
  assert.ok(reply.message?.includes('bucket is locked'));
  assert.deepEqual(photos(host).finalizers, [FINALIZER]);
});

test('a lost lease: a request refused by the host stops the guest, nothing is sent or recorded', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  host.failNextHttp(HttpFault.FENCED);
  assert.deepEqual(reconcile(host), Reply.fenced());
  assert.deepEqual(host.httpRequests(), []);
  assert.deepEqual(cloud.applied, []);
  assert.notEqual(photos(host).status?.phase, Phase.READY);
  assert.ok(host.isRevoked);
});

test('a lost lease at the status commit stops the guest, and the successor replays the answer', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  // Commits: the finalizer, Pending, then Ready: lose the lease at Ready.
  host.fail(At.commit(3), Fault.FENCED);
  assert.deepEqual(reconcile(host), Reply.fenced());
  assert.equal(cloud.applied.length, 1, 'applied at the cloud, not recorded');
  assert.equal(photos(host).status.phase, Phase.PENDING);
  host.newTenure();
  assert.deepEqual(reconcile(host), Reply.done());
  assert.equal(cloud.applied.length, 1);
  assert.equal(photos(host).status.phase, Phase.READY);
});

test('a stale epoch at the cloud stops the guest, for a PUT and for a DELETE', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  // A newer tenure of this lease already acted at the cloud.
  cloud.highest.set('test/controller', 5);
  assert.deepEqual(reconcile(host), Reply.fenced());
  assert.notEqual(photos(host).status.phase, Phase.READY);
  assert.deepEqual(cloud.applied, []);

  host.remove(BUCKETS, 'photos');
  assert.deepEqual(reconcile(host), Reply.fenced());
  assert.ok(photos(host) !== null, 'the object is kept');
});

test('a 409 that is not a stale epoch is retried', () => {
  const host = new FakeHost();
  host.allowHttp([ENDPOINT]);
  host.respond(URL, HttpReply.json(409, { error: 'bucket is being migrated' }));
  seed(host, 10);
  const reply = reconcile(host);
  assert.equal(reply.kind, 'failed');
  assert.ok(reply.message?.includes('409'), reply.message);
  assert.equal(photos(host).status.phase, Phase.PENDING);
});

test('a cloud not in http_allow is a failure, and nothing is sent', () => {
  const host = new FakeHost();
  seed(host, 10);
  const reply = reconcile(host);
  assert.equal(reply.kind, 'failed');
  assert.ok(reply.message?.includes('http_allow'), reply.message);
  assert.deepEqual(host.httpRequests(), []);
  assert.notEqual(photos(host).status.phase, Phase.READY);
});

test('server errors are retried and Retry-After is honoured', () => {
  const host = new FakeHost();
  host.allowHttp([ENDPOINT]);
  host.respondOnce(URL, HttpReply.text(503, 'maintenance'));
  host.respondOnce(URL, HttpReply.json(429, { error: 'slow down' }).header('Retry-After', '7'));
  seed(host, 10);
  const first = reconcile(host);
  assert.equal(first.kind, 'failed');
  assert.ok(first.message?.includes('503') && first.message.includes('maintenance'), first.message);
  assert.equal(first.delayMs, null);
  const second = reconcile(host);
  assert.deepEqual([second.kind, second.message, second.delayMs], ['failed', `${URL} answered 429: slow down; retrying`, 7000]);
  assert.deepEqual(keys(host), [putKey(2), putKey(2)], 'one decision, one key');
});

test('a refused spec is recorded with a warning and waits for a change', () => {
  const host = new FakeHost();
  host.allowHttp([ENDPOINT]);
  host.respondOnce(URL, HttpReply.json(400, { error: 'region eu is full' }));
  host.respond(URL, HttpReply.json(200, { name: 'photos', generation: 1 }));
  seed(host, 10);

  assert.deepEqual(reconcile(host), Reply.done());
  const status = photos(host).status;
  assert.equal(status.phase, Phase.FAILED);
  assert.deepEqual(status.rejected_spec, spec(10));
  assert.equal(status.applied_spec, undefined);
  assert.ok(status.message.includes('region eu is full'));
  const ready = getCondition(status, READY);
  assert.deepEqual([ready?.status, ready?.reason], ['False', PROVISION_FAILED]);
  const [warning] = host.eventsWithReason(PROVISION_FAILED);
  assert.equal(warning.type, EventType.Warning);
  assert.ok(warning.message.startsWith('Warning: the cloud refused'), warning.message);

  // Not retried while the spec is the one refused.
  assert.deepEqual(reconcile(host), Reply.done());
  assert.equal(host.httpRequests().length, 1);

  // A new spec is tried.
  const bucket = photos(host);
  host.seedWith(BUCKETS, 'photos', { ...bucket.value, spec: spec(5) }, bucket.metadata);
  assert.deepEqual(reconcile(host), Reply.done());
  assert.equal(host.httpRequests().length, 2);
  const now = photos(host).status;
  assert.deepEqual([now.phase, now.rejected_spec, getCondition(now, READY)?.status], [Phase.READY, undefined, 'True']);
});

test('a spec changed while the PUT is out requeues, and the next reconcile decides again under a new key', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  // The user changes the spec while the PUT is out (before the Ready commit).
  host.before(At.commit(3), (h) => {
    const b = h.object(BUCKETS, 'photos');
    h.seedWith(BUCKETS, 'photos', { ...b.value, spec: spec(30) }, b.metadata);
  });
  assert.deepEqual(reconcile(host), Reply.requeue(CONFLICT_RETRY_AFTER_MS));
  assert.notEqual(photos(host).status.phase, Phase.READY, 'nothing recorded from a stale read');

  assert.deepEqual(reconcile(host), Reply.done());
  assert.deepEqual(keys(host), [putKey(2), putKey(3)]);
  assert.equal(photos(host).status.applied_spec.size_gb, 30);
  assert.equal(cloud.applied.length, 2);
});

test('the change stream settles: its own writes do not call the cloud again', () => {
  const { host, cloud } = hostWithCloud();
  seed(host, 10);
  host.seed(BUCKETS, 'videos', { spec: spec(3), endpoint: ENDPOINT });
  host.runChanges(new Provisioner());
  assert.equal(cloud.count('PUT'), 2);
  assert.deepEqual(
    host.objects(BUCKETS).map((b) => [b.name, b.status.phase]),
    [
      ['photos', Phase.READY],
      ['videos', Phase.READY],
    ],
  );
  const seen = host.revision;
  host.remove(BUCKETS, 'videos');
  host.runChanges(new Provisioner(), seen);
  assert.equal(cloud.count('DELETE'), 1);
  assert.deepEqual(host.objects(BUCKETS).map((b) => b.name), ['photos']);
});

test('absent and malformed objects are left alone', () => {
  const { host } = hostWithCloud();
  assert.deepEqual(reconcile(host), Reply.done());
  host.seed(BUCKETS, 'photos', { spec: { size_gb: 'big' }, endpoint: ENDPOINT });
  assert.deepEqual(reconcile(host), Reply.done());
  host.seed(BUCKETS, 'photos', { spec: spec(1), endpoint: 'ftp://cloud.test' });
  assert.deepEqual(reconcile(host), Reply.done());
  host.seed(BUCKETS, 'photos', { spec: { ...spec(1), colour: 'red' }, endpoint: ENDPOINT });
  assert.deepEqual(reconcile(host), Reply.done());
  assert.deepEqual(host.httpRequests(), []);
  assert.deepEqual(host.commits(), []);
  const skipped = host.logs().filter((l) => l.message.startsWith('skipping buckets/photos'));
  assert.equal(skipped.length, 3);
  assert.ok(new Api(BUCKETS).get('photos')?.finalizers.length === 0, 'no finalizer on what it cannot act for');
});

test('bucket URLs and clipped messages', () => {
  assert.equal(bucketUrl('http://127.0.0.1:9000', 'a'), 'http://127.0.0.1:9000/buckets/a');
  assert.equal(bucketUrl('https://cloud.test/v1/', 'a'), 'https://cloud.test/v1/buckets/a');
  for (const bad of ['', 'http://', 'ftp://x', 'cloud.test', 'http://x?y=1', 'http://x y']) {
    assert.throws(() => bucketUrl(bad, 'a'), TypeError, bad);
  }
  const clipped = clip('é'.repeat(MAX_MESSAGE_BYTES));
  assert.ok(new TextEncoder().encode(clipped).length <= MAX_MESSAGE_BYTES);
  assert.ok(clipped.endsWith('...'));
  assert.equal(clip('short'), 'short');
});
