// Outbound HTTP: the request builder, the one classification of the
// host's error codes, idempotency keys equal to the Rust SDK's, and the
// fake host's rules (deny by default, fence headers, refusal after loss,
// bounds, faults on the wire, the scripted receiver).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Controller, Description, Failed, Outcome, Reply, Retry, Transaction, http, retryOnConflict } from '../src/index.js';
import { HttpFault, HttpReply, FakeHost, Limits } from '../src/fake.js';
import { Target, WireHttpError, checkHeader, codeFromHostText, codeText, shownUrl } from '../src/http-wire.js';

const { IdempotencyKey, Request, Response } = http;

test('idempotency keys are the Rust SDK’s, character for character', () => {
  // Computed by the Rust SDK's IdempotencyKey::for_action (its escaping:
  // unreserved ASCII as is, every other UTF-8 byte as upper-case %XX).
  const rust = [
    [['tasks', 't1', 7, 'notify'], 'tasks/t1@7/notify'],
    [['orders', 'o-17', 42, 'charge card'], 'orders/o-17@42/charge%20card'],
    [['a', 'b/c', 1, 'd'], 'a/b%2Fc@1/d'],
    [['buckets', 'photos', 2, 'put'], 'buckets/photos@2/put'],
    [['k', 'n@x', 18446744073709551615n, 'a b/ü%'], 'k/n%40x@18446744073709551615/a%20b%2F%C3%BC%25'],
    [
      ['Kind_1', 'name.with~tilde-and_under', Number.MAX_SAFE_INTEGER, '🚀 launch'],
      'Kind_1/name.with~tilde-and_under@9007199254740991/%F0%9F%9A%80%20launch',
    ],
    [['日本', '名前', 0, 'a+b=c&d?e#f'], '%E6%97%A5%E6%9C%AC/%E5%90%8D%E5%89%8D@0/a%2Bb%3Dc%26d%3Fe%23f'],
    [['', '', 1, ''], '/@1/'],
  ];
  for (const [[kind, name, n, action], want] of rust) {
    const key = IdempotencyKey.forAction(kind, name, n, action);
    assert.equal(String(key), want);
    assert.equal(checkHeader(http.IDEMPOTENCY_KEY_HEADER, key.value), null, 'a valid header value');
    assert.ok([...key.value].every((c) => c > ' ' && c <= '~'));
  }
  // Fields never run together.
  assert.notEqual(IdempotencyKey.forAction('a@1', 'b', 2, 'c').value, IdempotencyKey.forAction('a', '1@b', 2, 'c').value);
  for (const bad of [-1, 1.5, Number.NaN, 2 ** 53, 2n ** 64n, -1n, '3']) {
    assert.throws(() => IdempotencyKey.forAction('k', 'n', /** @type {any} */ (bad), 'a'), RangeError, String(bad));
  }
});

test('every error code is classified as the Rust SDK classifies it', () => {
  const at = 'POST http://svc.test/x';
  const url = 'http://svc.test/x';
  const size = { fieldName: 'x', fieldSize: 9 };
  const cases = [
    [{ tag: 'HTTP-request-denied' }, http.Denied],
    [{ tag: 'internal-error', val: `${http.FENCED_PREFIX}lease lost` }, http.Fenced],
    [{ tag: 'internal-error', val: `${http.LIMIT_PREFIX}65 requests` }, http.Limit],
    [{ tag: 'internal-error', val: 'leasehold-fenced without the space' }, http.Protocol],
    [{ tag: 'internal-error', val: 'boom' }, http.Protocol],
    [{ tag: 'internal-error', val: undefined }, http.Protocol],
    [{ tag: 'HTTP-request-body-size', val: 5n }, http.BodyTooLarge],
    [{ tag: 'HTTP-response-body-size', val: undefined }, http.BodyTooLarge],
    [{ tag: 'DNS-timeout' }, http.Timeout],
    [{ tag: 'connection-timeout' }, http.Timeout],
    [{ tag: 'connection-read-timeout' }, http.Timeout],
    [{ tag: 'connection-write-timeout' }, http.Timeout],
    [{ tag: 'HTTP-response-timeout' }, http.Timeout],
    [{ tag: 'DNS-error', val: { rcode: 'NXDOMAIN', infoCode: undefined } }, http.Connection],
    [{ tag: 'destination-not-found' }, http.Connection],
    [{ tag: 'destination-unavailable' }, http.Connection],
    [{ tag: 'destination-IP-prohibited' }, http.Connection],
    [{ tag: 'destination-IP-unroutable' }, http.Connection],
    [{ tag: 'connection-refused' }, http.Connection],
    [{ tag: 'connection-terminated' }, http.Connection],
    [{ tag: 'connection-limit-reached' }, http.Connection],
    [{ tag: 'TLS-protocol-error' }, http.Connection],
    [{ tag: 'TLS-certificate-error' }, http.Connection],
    [{ tag: 'TLS-alert-received', val: { alertId: 40, alertMessage: undefined } }, http.Connection],
    [{ tag: 'HTTP-request-length-required' }, http.InvalidRequest],
    [{ tag: 'HTTP-request-method-invalid' }, http.InvalidRequest],
    [{ tag: 'HTTP-request-URI-invalid' }, http.InvalidRequest],
    [{ tag: 'HTTP-request-URI-too-long' }, http.InvalidRequest],
    [{ tag: 'HTTP-request-header-section-size', val: undefined }, http.InvalidRequest],
    [{ tag: 'HTTP-request-header-size', val: size }, http.InvalidRequest],
    [{ tag: 'HTTP-request-trailer-section-size', val: undefined }, http.InvalidRequest],
    [{ tag: 'HTTP-request-trailer-size', val: size }, http.InvalidRequest],
    [{ tag: 'HTTP-response-incomplete' }, http.Protocol],
    [{ tag: 'HTTP-response-header-section-size', val: undefined }, http.Protocol],
    [{ tag: 'HTTP-response-header-size', val: size }, http.Protocol],
    [{ tag: 'HTTP-response-trailer-section-size', val: undefined }, http.Protocol],
    [{ tag: 'HTTP-response-trailer-size', val: size }, http.Protocol],
    [{ tag: 'HTTP-response-transfer-coding', val: undefined }, http.Protocol],
    [{ tag: 'HTTP-response-content-coding', val: 'br' }, http.Protocol],
    [{ tag: 'HTTP-upgrade-failed' }, http.Protocol],
    [{ tag: 'HTTP-protocol-error' }, http.Protocol],
    [{ tag: 'loop-detected' }, http.Protocol],
    [{ tag: 'configuration-error' }, http.Protocol],
    [{ tag: 'a-code-of-a-later-wasi' }, http.Protocol],
  ];
  for (const [code, want] of cases) {
    const error = http.fromWire(WireHttpError.ofCode(code), at, url);
    assert.equal(error.constructor, want, codeText(code));
    assert.ok(error instanceof http.HttpError);
    assert.equal(error.isFenced, want === http.Fenced, codeText(code));
    // Every message says which request failed.
    if (want !== http.Denied) assert.ok(error.message.includes(at), `${codeText(code)}: ${error.message}`);
  }
  assert.equal(http.fromWire(WireHttpError.ofCode({ tag: 'HTTP-request-denied' }), at, url).url, url);
  const fenced = http.fromWire(WireHttpError.ofCode({ tag: 'internal-error', val: `${http.FENCED_PREFIX}lease lost` }), at, url);
  assert.equal(fenced.why, `${at}: lease lost`);
  // Codes are shown as the Rust SDK shows them.
  assert.equal(codeText({ tag: 'HTTP-request-body-size', val: 5n }), 'HTTP-request-body-size (5)');
  assert.equal(codeText({ tag: 'DNS-error', val: { rcode: 'NXDOMAIN' } }), 'DNS-error (NXDOMAIN)');
  assert.equal(codeText({ tag: 'HTTP-response-header-size', val: size }), 'HTTP-response-header-size (x: 9 bytes)');
  assert.equal(codeText({ tag: 'internal-error', val: undefined }), 'internal-error');
});

test("the guest side's failures are typed", () => {
  const at = 'GET http://svc.test/';
  const built = http.fromWire(WireHttpError.build('forbidden header'), at, '');
  assert.ok(built instanceof http.InvalidRequest && built.message.includes('forbidden header'));
  const stream = http.fromWire(WireHttpError.stream('reset'), at, '');
  assert.ok(stream instanceof http.Connection && stream.message.includes('reset'));
});

test("the host's stream error texts are recognized", () => {
  const cases = [
    ['HTTP response body size exceeds limit: 65536 bytes', { tag: 'HTTP-response-body-size', val: 65536n }],
    ['HTTP response body size exceeds limit', { tag: 'HTTP-response-body-size', val: undefined }],
    ['HTTP request body size exceeds limit: 9 bytes', { tag: 'HTTP-request-body-size', val: 9n }],
    ['internal error: leasehold-fenced: controller c: lost', { tag: 'internal-error', val: 'leasehold-fenced: controller c: lost' }],
    ['internal error', { tag: 'internal-error' }],
    ['connection read timeout\nstack backtrace: ...', { tag: 'connection-read-timeout' }],
    ['connection terminated', { tag: 'connection-terminated' }],
    ['HTTP response timeout', { tag: 'HTTP-response-timeout' }],
  ];
  for (const [text, code] of cases) assert.deepEqual(codeFromHostText(text), code, text);
  for (const text of ['', 'HTTP response body size exceeds limit: many', 'connection refused!']) {
    assert.equal(codeFromHostText(text), null, text);
  }
});

test('URLs are taken apart as wasi:http wants them', () => {
  const t = Target.parse('HTTPS://Api.Example.com:8443/v1/things?x=1&y=2#frag');
  assert.ok(t instanceof Target);
  assert.deepEqual(
    [t.scheme, t.authority, t.host, t.port, t.pathWithQuery(), t.shown()],
    ['https', 'Api.Example.com:8443', 'api.example.com', 8443, '/v1/things?x=1&y=2', 'https://Api.Example.com:8443/v1/things'],
  );
  const plain = /** @type {Target} */ (Target.parse('http://svc.test'));
  assert.deepEqual([plain.port, plain.pathWithQuery()], [80, '/']);
  assert.equal(/** @type {Target} */ (Target.parse('http://svc.test?q')).pathWithQuery(), '/?q');
  const v6 = /** @type {Target} */ (Target.parse('http://[::1]:9000/hooks'));
  assert.deepEqual([v6.host, v6.port], ['[::1]', 9000]);
  assert.equal(/** @type {Target} */ (Target.parse('https://[fe80::1]')).port, 443);
});

test('bad URLs are explained without repeating them', () => {
  for (const [url, needle] of [
    ['', 'empty'],
    ['svc.test/x', 'no scheme'],
    ['ftp://svc.test/x', 'only http and https'],
    ['http:///x', 'no host'],
    ['http://svc.test:http/', 'port is not a number'],
    ['http://svc.test:70000/', 'between 1 and 65535'],
    ['http://svc.test:0/', 'between 1 and 65535'],
    ['http://svc test/', 'space'],
    ['http://svc.test/é', 'non-ASCII'],
    ['http://svc.test/a|b', 'percent-encode'],
    ['http://sv*c.test/', 'host is not'],
    ['http://[::1/', 'closing'],
    ['http://[::1]x/', 'after its IPv6 host'],
  ]) {
    const why = Target.parse(url);
    assert.equal(typeof why, 'string', url);
    assert.ok(String(why).includes(needle), `${url}: ${why}`);
  }
  const why = String(Target.parse('https://bob:hunter2@svc.test/?token=abc'));
  assert.ok(why.includes('user information') && !why.includes('hunter2'), why);
  assert.equal(shownUrl('https://bob:hunter2@svc.test/a/b?token=abc#f'), 'https://svc.test/a/b');
  assert.equal(shownUrl('http://svc.test'), 'http://svc.test');
  assert.equal(shownUrl('not a url?secret'), 'not a url');
});

test('headers are checked without echoing values', () => {
  assert.equal(checkHeader('X-Api-Key', 'abc\tdef'), null);
  assert.notEqual(checkHeader('', 'v'), null);
  assert.notEqual(checkHeader('bad name', 'v'), null);
  assert.notEqual(checkHeader('bad:name', 'v'), null);
  const why = String(checkHeader('Authorization', 'Bearer s3cret\r\nX-Evil: 1'));
  assert.ok(why.includes('Authorization') && !why.includes('s3cret'), why);
});

test('the builder sets headers once, bodies, JSON and timeouts', () => {
  const request = Request.get('http://svc.test/').header('Accept', 'text/plain').header('accept', 'application/json');
  assert.deepEqual(request.headers, [['accept', 'application/json']]);
  assert.equal(request.method, http.Method.GET);
  const json = Request.post('http://svc.test/').json({ n: 1 }).timeout(500);
  assert.deepEqual(json.headers, [['content-type', 'application/json']]);
  assert.equal(new TextDecoder().decode(json.bodyBytes ?? undefined), '{"n":1}');
  assert.equal(json.timeoutMs, 500);
  assert.deepEqual(Request.put('http://svc.test/').body(new Uint8Array([1, 2])).bodyBytes, new Uint8Array([1, 2]));
  for (const bad of [{ n: 1n }, { n: Number.NaN }, undefined]) {
    assert.throws(() => Request.post('http://svc.test/x?token=abc').json(bad), (e) => {
      assert.ok(e instanceof http.InvalidRequest, String(e));
      assert.ok(e.message.startsWith('invalid outbound request: POST http://svc.test/x: the JSON body'), e.message);
      return true;
    });
  }
  const key = IdempotencyKey.forAction('tasks', 't1', 3, 'notify');
  assert.deepEqual(Request.post('http://svc.test/').idempotencyKey(key).headers, [['idempotency-key', 'tasks/t1@3/notify']]);
});

test('nothing is reachable until http_allow lists it', () => {
  const host = new FakeHost();
  assert.throws(() => Request.post('http://billing.test/v1/invoices').send(), (e) => {
    assert.ok(e instanceof http.Denied);
    assert.equal(e.url, 'http://billing.test/v1/invoices');
    assert.ok(e.message.includes('http_allow') && e.message.includes('nothing was sent'));
    return true;
  });
  host.allowHttp(['http://svc.test/hooks/', 'https://api.example.com:8443', 'http://svc.test/exact']);
  assert.equal(Request.get('http://svc.test/hooks/a').send().status, 404, 'unscripted: 404');
  assert.equal(Request.get('https://API.example.com:8443/x').send().status, 404);
  assert.equal(Request.get('http://svc.test/exact').send().status, 404);
  assert.equal(Request.get('http://svc.test/exact/below').send().status, 404);
  for (const url of [
    'http://svc.test/other',
    'http://svc.test/hooks',
    'http://svc.test/exactly',
    'https://api.example.com/x',
    'http://api.example.com:8443/x',
    'http://svc.test/hooks/../admin',
    'http://svc.test/hooks/%2e%2e/admin',
  ]) {
    assert.throws(() => Request.get(url).send(), http.Denied, url);
  }
  assert.equal(host.httpRequests().length, 4, 'what was denied never left');
  for (const entry of ['http://svc.test/?q=1', 'ftp://svc.test', 'http://svc.test/a/../b', 'http://svc.test/#f']) {
    assert.throws(() => host.allowHttp([entry]), /http_allow entry/, entry);
  }
});

test('the host stamps the fence, and the SDK states the length', () => {
  const host = new FakeHost();
  host.allowHttp(['http://billing.test/v1/']);
  host.respond('http://billing.test/v1/invoices', HttpReply.json(201, { id: 'inv-7' }));
  const key = IdempotencyKey.forAction('orders', 'o1', 42, 'invoice');
  const response = Request.post('http://billing.test/v1/invoices')
    .json({ order: 'o1', amount: 5 })
    .idempotencyKey(key)
    // A guest cannot forge the fence or the length: both are replaced.
    .header('Leasehold-Epoch', '999')
    .header('Content-Length', '1')
    .send();
  assert.ok(response.isSuccess);
  assert.deepEqual(response.json(), { id: 'inv-7' });
  const [sent] = host.httpRequests();
  const body = '{"order":"o1","amount":5}';
  assert.deepEqual(sent.headers, [
    ['content-type', 'application/json'],
    ['idempotency-key', 'orders/o1@42/invoice'],
    ['content-length', String(body.length)],
    ['leasehold-lease', 'test/controller'],
    ['leasehold-epoch', '1'],
    ['leasehold-holder', 'fake-host'],
  ]);
  assert.equal(sent.bodyText(), body);
  assert.deepEqual(sent.bodyJson(), { order: 'o1', amount: 5 });
  assert.deepEqual([sent.method, sent.url, sent.epoch, sent.delivered, sent.status], ['POST', 'http://billing.test/v1/invoices', 1, true, 201]);

  // A POST without a body still states its (zero) length; a GET has none.
  Request.post('http://billing.test/v1/ping').send();
  Request.get('http://billing.test/v1/ping').timeout(250).send();
  const [, post, get] = host.httpRequests();
  assert.equal(post.header('content-length'), '0');
  assert.equal(get.header('content-length'), null);
  assert.equal(get.timeoutMs, 250);
  host.newTenure();
  Request.get('http://billing.test/v1/ping?token=x').send();
  assert.equal(host.httpRequests()[3].header('Leasehold-Epoch'), '2');
  assert.equal(host.httpRequests()[3].url, 'http://billing.test/v1/ping?token=x');
});

test('a request the guest built wrong is refused before anything is sent', () => {
  const host = new FakeHost();
  host.allowHttp(['http://svc.test']);
  const refused = [
    Request.get('http://svc.test/').header('Host', 'evil.test'),
    Request.get('http://svc.test/').header('Transfer-Encoding', 'chunked'),
    Request.get('http://svc.test/').header('X-Token', 'a\r\nb'),
    Request.get('http://bob:pw@svc.test/'),
    Request.get('http://svc.test/').timeout(-1),
    new Request('CONNECT', 'http://svc.test/'),
  ];
  for (const request of refused) assert.throws(() => request.send(), http.InvalidRequest);
  assert.deepEqual(host.httpRequests(), []);
});

test('after the lease is lost nothing more is sent', () => {
  const host = new FakeHost();
  host.allowHttp(['http://svc.test']);
  Request.get('http://svc.test/').send();
  host.revoke();
  assert.throws(() => Request.post('http://svc.test/').send(), (e) => e instanceof http.Fenced && e.isFenced);
  assert.equal(host.httpRequests().length, 1);

  // A lease lost just before a request: fenced, and so is the store.
  const next = new FakeHost();
  next.allowHttp(['http://svc.test']);
  next.failNextHttp(HttpFault.FENCED);
  assert.throws(() => Request.get('http://svc.test/').send(), (e) => {
    assert.ok(e instanceof http.Fenced);
    assert.ok(e.message.includes(http.FENCED_PREFIX) === false && e.message.includes('the lease is lost'), e.message);
    return true;
  });
  assert.deepEqual(next.httpRequests(), [], 'nothing was sent');
  assert.ok(next.isRevoked);
  assert.throws(() => new Transaction().create('tasks', 'a', 1).commit(), (e) => e.isFenced);
});

/** Sends `count` requests in one reconcile; remembers what each got. */
class Caller extends Controller {
  constructor(count, url = 'http://svc.test/x') {
    super();
    this.count = count;
    this.url = url;
    this.policyCalls = 0;
  }

  describe() {
    return Description.watching(['things']);
  }

  reconcile() {
    for (let i = 0; i < this.count; i += 1) Request.post(this.url).send();
    return Outcome.done();
  }

  errorPolicy() {
    this.policyCalls += 1;
    return Retry.after(1234);
  }
}

test('a fenced request ends the reconcile as fenced, whatever the error policy says', () => {
  const host = new FakeHost();
  host.allowHttp(['http://svc.test']);
  host.failNextHttp(HttpFault.FENCED);
  const caller = new Caller(1);
  assert.deepEqual(host.reconcile(caller, 'things', 'a'), Reply.fenced());
  assert.equal(caller.policyCalls, 0, 'error policy not consulted');
  // Through retryOnConflict too: it is not a conflict, so it is not retried.
  const retrying = new Caller(1);
  retrying.reconcile = () => retryOnConflict(3, () => Caller.prototype.reconcile.call(retrying));
  host.newTenure();
  host.revoke();
  assert.deepEqual(host.reconcile(retrying, 'things', 'a'), Reply.fenced());
  // Any other HTTP error is a failure the host retries after the policy's delay.
  const other = new FakeHost();
  const denied = new Caller(1);
  const reply = other.reconcile(denied, 'things', 'a');
  assert.equal(reply.kind, 'failed');
  assert.equal(reply.delayMs, 1234);
  assert.ok(reply.message?.includes('http_allow'));
});

test('requests per reconcile and body sizes are bounded', () => {
  const host = new FakeHost(new Limits({ httpRequestsPerReconcile: 2 }));
  host.allowHttp(['http://svc.test']);
  const three = host.reconcile(new Caller(3), 'things', 'a');
  assert.equal(three.kind, 'failed');
  assert.ok(three.message?.startsWith('outbound request refused by a host limit: POST http://svc.test/x: '), three.message);
  assert.equal(host.httpRequests().length, 2);
  // Each reconcile has a fresh budget.
  assert.deepEqual(host.reconcile(new Caller(2), 'things', 'a'), Reply.done());
  assert.equal(host.httpRequests().length, 4);
  assert.equal(host.resync(new Caller(2)).length, 0, 'no objects: nothing to resync');

  const big = new FakeHost(new Limits({ httpRequestBodyBytes: 4, httpResponseBodyBytes: 8 }));
  big.allowHttp(['http://svc.test']);
  big.respond('http://svc.test/a', HttpReply.status(204));
  assert.throws(() => Request.put('http://svc.test/a').body('12345').send(), http.BodyTooLarge);
  assert.deepEqual(big.httpRequests(), [], 'an oversized body is not sent');
  Request.put('http://svc.test/a').body('1234').send();
  big.respond('http://svc.test/big', HttpReply.text(200, '123456789'));
  assert.throws(() => Request.get('http://svc.test/big').send(), http.BodyTooLarge);
  assert.equal(big.httpRequests()[1].delivered, true, 'the receiver got it; its answer was too large');
});

test('faults on the wire: refused, timeout, reply lost, reply timed out', () => {
  const host = new FakeHost();
  host.allowHttp(['http://svc.test']);
  host.respondOnce('http://svc.test/apply', HttpReply.status(201));
  host.respond('http://svc.test/apply', HttpReply.status(200));
  host.failNextHttp(HttpFault.REFUSED);
  host.failHttp(2, HttpFault.TIMEOUT);
  host.failHttp(3, HttpFault.REPLY_LOST);
  host.failHttp(4, HttpFault.REPLY_TIMED_OUT);
  assert.equal(host.pendingFaults, 4);
  const send = () => Request.post('http://svc.test/apply').send();
  assert.throws(send, (e) => e instanceof http.Connection && e.message.includes('connection-refused'));
  assert.throws(send, (e) => e instanceof http.Timeout && e.message.includes('connection-timeout'));
  assert.throws(send, (e) => e instanceof http.Connection && e.message.includes('connection-terminated'));
  assert.throws(send, (e) => e instanceof http.Timeout && e.message.includes('connection-read-timeout'));
  assert.equal(send().status, 200);
  assert.equal(host.pendingFaults, 0);
  // Refused and timed out never reached the receiver, so the one-shot 201
  // went to the request whose reply was lost.
  assert.deepEqual(
    host.httpRequests().map((r) => [r.delivered, r.status]),
    [[false, null], [false, null], [true, 201], [true, 200], [true, 200]],
  );
  assert.throws(() => host.failHttp(0, HttpFault.REFUSED), /count from 1/);
  assert.throws(() => host.failHttp(1, 'gremlins'), /not an HttpFault/);
});

test('scripts: one-shot replies first, exact URLs over prefixes, longer prefixes over shorter', () => {
  const host = new FakeHost();
  host.allowHttp(['http://svc.test']);
  host.respond('http://svc.test/*', HttpReply.status(202));
  host.respond('http://svc.test/jobs/*', HttpReply.status(203));
  host.respond('http://svc.test/health', HttpReply.text(200, 'ok'));
  host.respondOnce('http://svc.test/jobs/1', HttpReply.status(503));
  const status = (url) => Request.get(url).send().status;
  assert.equal(Request.get('http://svc.test/health').send().text(), 'ok');
  assert.deepEqual(
    ['http://svc.test/jobs/1', 'http://svc.test/jobs/1', 'http://svc.test/jobs/2', 'http://svc.test/other'].map(status),
    [503, 203, 203, 202],
  );
  const reply = HttpReply.json(409, { error: 'stale epoch' }).header('Retry-After', '1');
  assert.deepEqual(reply.headers, [['content-type', 'application/json'], ['Retry-After', '1']]);
  assert.equal(reply.withBody('x').body.length, 1);
  assert.equal(reply.body.length, '{"error":"stale epoch"}'.length, 'replies are never changed in place');
  assert.throws(() => host.respond('http://svc.test/x', { status: 200 }), TypeError);
  assert.throws(() => host.respondOnce('http://svc.test/x', 200), TypeError);
});

test('a receiver with state dedups by key and refuses an older epoch', () => {
  const host = new FakeHost();
  host.allowHttp(['http://svc.test']);
  let highest = 0;
  const applied = new Map();
  host.respondWith('http://svc.test/apply', (request) => {
    const epoch = Number(request.header('leasehold-epoch'));
    if (epoch < highest) return HttpReply.json(409, { error: 'stale epoch' });
    highest = epoch;
    const key = /** @type {string} */ (request.header('idempotency-key'));
    if (!applied.has(key)) applied.set(key, HttpReply.status(201));
    return applied.get(key);
  });
  const key = IdempotencyKey.forAction('jobs', 'j1', 5, 'apply');
  const send = () => Request.post('http://svc.test/apply').idempotencyKey(key).send();
  assert.equal(send().status, 201);
  host.newTenure();
  assert.equal(send().status, 201, 'the same key: the stored result, not a second effect');
  assert.equal(applied.size, 1);
  host.setFence(new (host.fence().constructor)('test', 'controller', 1, 'old'));
  assert.equal(send().status, 409, 'an older epoch is refused');
});

test('responses: headers, text, JSON, success', () => {
  const body = new TextEncoder().encode('{"id":7}');
  const ok = new Response(200, [['ETag', '"v7"']], body);
  assert.equal(ok.header('etag'), '"v7"');
  assert.equal(ok.header('age'), null);
  assert.deepEqual(ok.json(), { id: 7 });
  assert.equal(ok.json((v) => v.id), 7);
  assert.ok(ok.isSuccess);
  assert.ok(!new Response(409).isSuccess);
  assert.throws(() => new Response(200, [], new TextEncoder().encode('nope')).json(), http.Decode);
  assert.throws(() => ok.json(() => { throw new TypeError('no id'); }), (e) => e instanceof http.Decode && e.message.includes('no id'));
  assert.throws(() => new Response(200, [], new Uint8Array([0xff])).text(), http.Decode);
});

test('a failure of the controller’s own is not mistaken for an HTTP error', () => {
  assert.ok(!(new Failed('x') instanceof http.HttpError));
  assert.ok(new http.Timeout('slow') instanceof http.HttpError);
  assert.ok(!new http.Timeout('slow').isFenced);
});
