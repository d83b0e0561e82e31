// The component's outbound HTTP (src/component-http.js) natively, against
// a scripted wasi:http: the request is built as wasi:http takes it (the
// SDK's content-length included, so a body never goes out chunked),
// `handle` comes before the body is written, every resource the adapter
// made is dropped exactly once, children before parents, none it handed
// over is dropped, and the host's error codes reach the author
// classified.

import assert from 'node:assert/strict';
import { register } from 'node:module';
import { beforeEach, test } from 'node:test';

register('../support/wit-stub-loader.mjs', import.meta.url);

const { WitHost, exportController } = await import('../src/component.js');
const { install } = await import('../src/host.js');
const { Controller, Description, Outcome, http } = await import('../src/index.js');

const TYPES = 'wasi:http/types@0.2.12';
const HANDLER = 'wasi:http/outgoing-handler@0.2.12';
const TENURE = 'leasehold:controller/tenure@0.4.0';
const DISPOSE = Symbol.dispose ?? Symbol.for('dispose');

/** What componentize-js throws from an import that returned `err(value)`. */
function witErr(value) {
  const e = new Error('component error');
  Object.defineProperty(e, 'payload', { value });
  return e;
}

/** A scripted wasi:http: what the host does, and a log of what the guest did. */
class World {
  constructor() {
    this.log = [];
    this.live = new Set();
    this.handed = new Set();
    this.script = {
      handle: null, // a code to refuse with, or null
      pending: 1, // how many times get() answers "not yet"
      outcome: null, // an error-code for the future, or null for a response
      writeFails: null, // a stream-error for the n-th write, as [n, error]
      status: 201,
      headers: [['Content-Type', new TextEncoder().encode('application/json')]],
      chunks: [new TextEncoder().encode('{"id":'), new TextEncoder().encode('7}')],
      readFails: null, // a stream-error instead of `closed` at the end
      appendFails: null, // [header name, header-error]
    };
    this.written = [];
    this.sent = null;
  }

  /** A resource of kind `name`, with `parent` (which must outlive it). */
  resource(name, parent = null, methods = {}) {
    const world = this;
    const r = {
      id: `${name}#${this.log.length}`,
      parent,
      ...methods,
      [DISPOSE]() {
        assert.ok(world.live.has(r), `${r.id} dropped twice`);
        assert.ok(!world.handed.has(r), `${r.id} was handed to the host, then dropped`);
        for (const other of world.live) assert.notEqual(other.parent, r, `${r.id} dropped before its child ${other.id}`);
        world.live.delete(r);
        world.log.push(`drop ${name}`);
      },
    };
    this.live.add(r);
    return r;
  }

  hand(r) {
    assert.ok(this.live.has(r), `${r.id} handed over after it was dropped`);
    this.live.delete(r);
    this.handed.add(r);
  }

  stubs() {
    const world = this;
    const s = this.script;
    class Fields {
      constructor() {
        const r = world.resource('fields', null, {
          entries: [],
          append(name, value) {
            if (s.appendFails !== null && s.appendFails[0] === name) throw witErr(s.appendFails[1]);
            r.entries.push([name, new TextDecoder().decode(value)]);
          },
        });
        return r;
      }
    }
    class OutgoingRequest {
      constructor(fields) {
        world.hand(fields);
        const r = world.resource('outgoing-request', null, {
          headers: fields.entries,
          setMethod: (m) => (r.method = m.tag),
          setScheme: (x) => (r.scheme = x.tag),
          setAuthority: (a) => (r.authority = a),
          setPathWithQuery: (p) => (r.path = p),
          body() {
            world.log.push('body');
            return (r.outgoingBody = world.resource('outgoing-body', null, {
              write() {
                let writes = 0;
                return world.resource('output-stream', r.outgoingBody, {
                  blockingWriteAndFlush(chunk) {
                    writes += 1;
                    if (s.writeFails !== null && s.writeFails[0] === writes) throw witErr(s.writeFails[1]);
                    world.log.push(`write ${chunk.length}`);
                    world.written.push(...chunk);
                  },
                });
              },
            }));
          },
        });
        return r;
      }
    }
    class RequestOptions {
      constructor() {
        return world.resource('request-options', null, { setFirstByteTimeout: (ns) => (world.timeoutNs = ns) });
      }
    }
    const OutgoingBody = {
      finish(body, trailers) {
        assert.equal(trailers, undefined);
        world.hand(body);
        world.log.push('finish');
      },
    };
    const ioError = (text, code) =>
      world.resource('io-error', null, { text, code, toDebugString: () => text });
    const response = () => {
      const resp = world.resource('incoming-response', null, {
        status: () => s.status,
        headers: () => world.resource('fields', resp, { entries: () => s.headers }),
        consume() {
          const body = world.resource('incoming-body', resp, {
            stream() {
              const chunks = [...s.chunks];
              return world.resource('input-stream', body, {
                blockingRead(len) {
                  assert.equal(typeof len, 'bigint');
                  if (chunks.length > 0) return chunks.shift();
                  throw witErr(s.readFails ?? { tag: 'closed' });
                },
              });
            },
          });
          return body;
        },
      });
      return resp;
    };
    const handle = (request, options) => {
      world.hand(request);
      if (options !== undefined) world.hand(options);
      world.sent = request;
      world.log.push('handle');
      if (s.handle !== null) throw witErr(s.handle);
      let pending = s.pending;
      return world.resource('future-incoming-response', null, {
        subscribe: () => world.resource('pollable', null, { block: () => world.log.push('block') }),
        get() {
          if (pending > 0) {
            pending -= 1;
            return undefined;
          }
          if (s.outcome !== null) return { tag: 'ok', val: { tag: 'err', val: s.outcome } };
          return { tag: 'ok', val: { tag: 'ok', val: response() } };
        },
      });
    };
    return {
      [TYPES]: { Fields, OutgoingRequest, OutgoingBody, RequestOptions, httpErrorCode: (e) => e.code },
      [HANDLER]: { handle },
      ioError,
    };
  }
}

let world;
beforeEach(() => {
  world = new World();
  const { ioError, ...stubs } = world.stubs();
  world.ioError = ioError;
  globalThis.witStubs = stubs;
  globalThis.witCalls = [];
  install(new WitHost());
});

test('a request goes out through wasi:http with its length, handle first, every resource dropped once', () => {
  const body = 'x'.repeat(5000);
  const response = http.Request.put('https://api.example.com:8443/v1/things/a?dry=1')
    .header('Authorization', 'Bearer t')
    .body(body)
    .timeout(1500)
    .send();
  assert.equal(response.status, 201);
  assert.deepEqual(response.headers, [['Content-Type', 'application/json']]);
  assert.deepEqual(response.json(), { id: 7 });
  const sent = world.sent;
  assert.deepEqual([sent.method, sent.scheme, sent.authority, sent.path], ['put', 'HTTPS', 'api.example.com:8443', '/v1/things/a?dry=1']);
  assert.deepEqual(sent.headers, [['Authorization', 'Bearer t'], ['content-length', '5000']]);
  assert.equal(world.timeoutNs, 1_500_000_000n);
  assert.equal(new TextDecoder().decode(new Uint8Array(world.written)), body);
  // The body is taken before `handle`, written after it, in chunks, and finished.
  assert.deepEqual(world.log.slice(0, 6), ['body', 'handle', 'write 4096', 'write 904', 'drop output-stream', 'finish']);
  assert.deepEqual(world.log.slice(6), [
    'block',
    'drop pollable',
    'drop future-incoming-response',
    'drop fields',
    'drop input-stream',
    'drop incoming-body',
    'drop incoming-response',
  ]);
  assert.deepEqual([...world.live], [], 'every resource made is dropped');
});

test('a GET has no body and no length; a POST without one states zero', () => {
  world.script.pending = 0;
  http.Request.get('http://svc.test/').send();
  assert.deepEqual(world.sent.headers, []);
  assert.ok(!world.log.includes('body'));
  assert.equal(world.timeoutNs, undefined, 'no options without a timeout');
  http.Request.post('http://svc.test/').send();
  assert.deepEqual(world.sent.headers, [['content-length', '0']]);
  assert.ok(world.log.includes('finish'), 'an empty body is still finished');
  assert.deepEqual([...world.live], []);
});

test("the host's refusals reach the author classified", () => {
  world.script.handle = { tag: 'HTTP-request-denied' };
  assert.throws(() => http.Request.get('http://svc.test/a?token=s3cret').send(), (e) => {
    assert.ok(e instanceof http.Denied);
    assert.equal(e.url, 'http://svc.test/a', 'without the query');
    return true;
  });
  world.script.handle = null;
  world.script.outcome = { tag: 'internal-error', val: `${http.LIMIT_PREFIX}controller c: 64 requests` };
  assert.throws(() => http.Request.get('http://svc.test/').send(), http.Limit);
  world.script.outcome = { tag: 'connection-read-timeout' };
  assert.throws(() => http.Request.post('http://svc.test/').body('x').send(), http.Timeout);
  assert.deepEqual([...world.live], []);
});

class Caller extends Controller {
  describe() {
    return Description.watching(['things']);
  }

  reconcile() {
    http.Request.post('http://svc.test/hook').send();
    return Outcome.done();
  }
}

test('a fenced request ends the reconcile as fenced at the component boundary', () => {
  globalThis.witStubs[TENURE] = { current: () => ({ cluster: 'c', lease: 'l', epoch: 3n, holder: 'h' }) };
  world.script.outcome = { tag: 'internal-error', val: `${http.FENCED_PREFIX}controller l: the lease is lost` };
  const reconciler = exportController(() => new Caller());
  assert.throws(() => reconciler.reconcile('things', 'a', { tag: 'change' }), (e) => {
    assert.deepEqual(e.payload, { tag: 'fenced' });
    return true;
  });
  // Any other failure is `failed`, with its classified message.
  world.script.outcome = { tag: 'connection-refused' };
  assert.throws(() => reconciler.reconcile('things', 'a', { tag: 'change' }), (e) => {
    assert.equal(e.payload.tag, 'failed');
    assert.match(e.payload.val.message, /^outbound connection failed: POST http:\/\/svc.test\/hook: connection-refused$/);
    return true;
  });
});

test("a body stream's failure names the host's code, from the code or the host's text", () => {
  world.script.readFails = { tag: 'last-operation-failed', val: world.ioError('HTTP response body size exceeds limit: 10 bytes') };
  assert.throws(() => http.Request.get('http://svc.test/').send(), (e) => {
    assert.ok(e instanceof http.BodyTooLarge, String(e));
    assert.ok(e.message.includes('HTTP-response-body-size (10)'), e.message);
    return true;
  });
  assert.deepEqual([...world.live], [], 'the I/O error and the response are dropped too');
  world.script.readFails = {
    tag: 'last-operation-failed',
    val: world.ioError('ignored', { tag: 'internal-error', val: `${http.FENCED_PREFIX}cut` }),
  };
  assert.throws(() => http.Request.get('http://svc.test/').send(), http.Fenced);
  world.script.readFails = { tag: 'last-operation-failed', val: world.ioError('something odd\nbacktrace') };
  assert.throws(() => http.Request.get('http://svc.test/').send(), (e) => {
    assert.ok(e instanceof http.Connection);
    assert.ok(e.message.endsWith('the body stream failed: something odd'), e.message);
    return true;
  });
  assert.deepEqual([...world.live], []);
});

test('a body that cannot be written whole is dropped unfinished, and the response decides', () => {
  world.script.writeFails = [2, { tag: 'closed' }];
  world.script.outcome = { tag: 'HTTP-request-body-size', val: 4096n };
  assert.throws(() => http.Request.put('http://svc.test/').body('y'.repeat(9000)).send(), http.BodyTooLarge);
  assert.ok(!world.log.includes('finish'), 'never finished');
  assert.ok(world.log.includes('drop outgoing-body'));
  assert.deepEqual([...world.live], []);
});

test('a header wasi:http refuses is named, and nothing is handed over', () => {
  world.script.appendFails = ['X-Odd', { tag: 'forbidden' }];
  assert.throws(() => http.Request.get('http://svc.test/').header('X-Odd', 's3cret').send(), (e) => {
    assert.ok(e instanceof http.InvalidRequest);
    assert.ok(e.message.includes('"X-Odd": forbidden by wasi:http') && !e.message.includes('s3cret'), e.message);
    return true;
  });
  assert.equal(world.sent, null);
  assert.deepEqual(world.log, ['drop fields']);
  assert.deepEqual([...world.live], []);
});
