// The conformance tables' runner for the JavaScript fake.
//
// Every case of tests/conformance/store/*.json (the cases the host's stores
// and the Rust and Python fakes run too) against a fresh FakeHost, through
// the calls a guest makes: commit, get, list, listSelected. Cases that need
// the host's HTTP API are the host's alone and are skipped.
//
// What the wire cannot carry is compared as the wire carries it: a
// `too_large` refusal is an Invalid whose text begins `too large: `, and a
// conflict names its object but says nothing more. A selector's `contains`
// reaches the fake as the case's JSON text, as it reaches the host. Numbers
// are a fresh fake's: a case's first number is 1.
//
// The HTTP table (tests/conformance/http/*.json) runs through the SDK's own
// requests (src/http.js), as a controller sends them.

import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { test } from 'node:test';
import { Conflict, Invalid, NotFound, QuotaExceeded, StoreError } from '../src/errors.js';
import { FakeHost, HttpFault, HttpReply, QuotaLimits } from '../src/fake.js';
import * as http from '../src/http.js';
import { Metadata, ObjectKey, Selector } from '../src/keys.js';
import { Check, Create, CreateWith, Delete, NewEvent, Replace, Status, Update } from '../src/transaction.js';

const TABLE = new URL('../../../tests/conformance/store/', import.meta.url);

/** @returns {Array<[string, any]>} */
function cases() {
  const out = [];
  for (const file of readdirSync(TABLE).filter((f) => f.endsWith('.json')).sort()) {
    const doc = JSON.parse(readFileSync(new URL(file, TABLE), 'utf8'));
    for (const c of doc.cases) out.push([file.replace(/\.json$/, ''), c]);
  }
  return out;
}

/** A selector whose `contains` is given as JSON text, as a guest's crosses to the host. */
class TextSelector extends Selector {
  containsJson() {
    return this.contains === null ? null : this.contains.text;
  }
}

/** @param {any} key */
function parseKey(key) {
  if (typeof key === 'string') {
    const at = key.indexOf('/');
    return at < 0 ? new ObjectKey(key, '') : new ObjectKey(key.slice(0, at), key.slice(at + 1));
  }
  return new ObjectKey(key.kind, key.name);
}

/** JSON text as the table gives it: a string, or a generator of a long one. @param {any} value */
function text(value) {
  if (typeof value === 'string') return value;
  if ('string_of' in value) return `"${'x'.repeat(value.string_of)}"`;
  if ('array_of' in value) return `[${Array(value.times).fill(value.array_of).join(',')}]`;
  if ('nested' in value) return '['.repeat(value.nested) + ']'.repeat(value.nested);
  throw new Error(`not a JSON text of the table: ${JSON.stringify(value)}`);
}

/** @param {any} meta */
function metadata(meta) {
  return new Metadata({
    labels: meta.labels ?? {},
    owner: meta.owner == null ? null : parseKey(meta.owner),
    finalizers: meta.finalizers ?? [],
  });
}

/** @param {any} op @returns {any[]} */
function ops(op) {
  if ('create_range' in op) {
    const r = op.create_range;
    const meta = metadata(r.meta ?? {});
    const from = r.from ?? 0;
    return Array.from(
      { length: r.count },
      (_, i) => new CreateWith(new ObjectKey(r.kind, `${r.prefix}${String(from + i).padStart(4, '0')}`), text(r.value), meta),
    );
  }
  if ('create' in op) {
    const key = parseKey(op.create);
    return 'meta' in op ? [new CreateWith(key, text(op.value), metadata(op.meta))] : [new Create(key, text(op.value))];
  }
  if ('update' in op) return [new Update(parseKey(op.update), op.version ?? 0, text(op.value))];
  if ('replace' in op) {
    return [
      new Replace(
        parseKey(op.replace),
        op.version ?? 0,
        'value' in op ? text(op.value) : null,
        'meta' in op ? metadata(op.meta) : null,
      ),
    ];
  }
  if ('delete' in op) return [new Delete(parseKey(op.delete), op.version ?? 0)];
  if ('status' in op) {
    return [new Status(parseKey(op.status), op.generation ?? null, op.value == null ? null : text(op.value))];
  }
  if ('check' in op) return [new Check(parseKey(op.check), op.version ?? 0)];
  throw new Error(`an operation of an unknown kind: ${JSON.stringify(op)}`);
}

class Run {
  constructor() {
    this.host = new FakeHost();
    /** @type {string[]} */
    this.problems = [];
  }

  /** @param {any} c */
  case(c) {
    c.steps.forEach((/** @type {any} */ step, /** @type {number} */ i) => {
      const before = this.problems.length;
      this.step(step);
      for (let j = before; j < this.problems.length; j += 1) this.problems[j] = `step ${i}: ${this.problems[j]}`;
    });
    for (const [key, want] of Object.entries(c.objects ?? {})) {
      const k = parseKey(key);
      this.compareObject(`final ${key}`, this.host.get(k.kind, k.name), want);
    }
    if ('events' in c) {
      const got = this.host.events().map((e, i) => [e.seq, e.revision, String(e.key), e.reason, c.events[i]?.message == null ? null : e.message]);
      const want = c.events.map((/** @type {any} */ e) => [e.seq, e.revision, e.about, e.reason, e.message ?? null]);
      if (JSON.stringify(got) !== JSON.stringify(want)) this.problems.push(`events ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
    }
    if ('changes' in c) {
      const got = this.host
        .changes()
        .map((ch) => [ch.position, ch.revision, String(ch.key), ch.deleted ? 'deleted' : ch.before === null ? 'created' : 'updated']);
      const want = c.changes.map((/** @type {any} */ ch) => [ch.position, ch.revision, ch.object, ch.change]);
      if (JSON.stringify(got) !== JSON.stringify(want)) this.problems.push(`changes ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
    }
  }

  /** @param {any} step */
  step(step) {
    const expect = step.expect;
    try {
      if ('commit' in step) {
        const list = (step.commit.ops ?? []).flatMap(ops);
        const events = (step.commit.events ?? []).map((/** @type {any} */ e) => new NewEvent(parseKey(e.about), e.reason, e.message));
        const committed = this.host.commit(list, events);
        if (
          'error' in expect ||
          committed.revision !== expect.revision ||
          ('events' in expect && JSON.stringify(committed.eventSeqs) !== JSON.stringify(expect.events))
        ) {
          this.problems.push(`committed at ${committed.revision} with events ${committed.eventSeqs}, expected ${JSON.stringify(expect)}`);
        }
      } else if ('get' in step) {
        const key = parseKey(step.get);
        const got = this.host.get(key.kind, key.name);
        if ('error' in expect) this.problems.push(`read ${JSON.stringify(got)}, expected ${JSON.stringify(expect)}`);
        else this.compareObject(`get ${key}`, got, expect.object);
      } else if ('list' in step) {
        const q = step.list;
        const labels = q.labels ?? {};
        const page =
          Object.keys(labels).length > 0 || 'contains' in q
            ? this.host.listSelected(
                q.kind,
                new TextSelector(labels, 'contains' in q ? { value: null, text: text(q.contains) } : null),
                q.after ?? null,
                q.limit ?? 0,
              )
            : this.host.list(q.kind, q.after ?? null, q.limit ?? 0);
        const names = page.objects.map((o) => o.name);
        if ('error' in expect || JSON.stringify(names) !== JSON.stringify(expect.names)) {
          this.problems.push(`listed ${JSON.stringify(names)}, expected ${JSON.stringify(expect)}`);
        }
        if ('next' in expect && page.next !== expect.next) this.problems.push(`next ${page.next}, expected ${expect.next}`);
      } else {
        throw new Error(`a step of an unknown kind: ${JSON.stringify(step)}`);
      }
    } catch (e) {
      if (!(e instanceof StoreError)) throw e;
      this.error(e, expect);
    }
  }

  /** @param {StoreError} error @param {any} expect */
  error(error, expect) {
    const code = expect.error;
    if (code === undefined) {
      this.problems.push(`failed: ${error.message}, expected ${JSON.stringify(expect)}`);
      return;
    }
    let ok = false;
    if (error instanceof Conflict || error instanceof NotFound) {
      ok = code === (error instanceof Conflict ? 'conflict' : 'not_found');
      if ('object' in expect && !parseKey(expect.object).equals(error.key)) {
        this.problems.push(`failed naming ${error.key}, expected ${JSON.stringify(expect.object)}`);
      }
    } else if (error instanceof Invalid || error instanceof QuotaExceeded) {
      // The wire has no `too_large`: the host sends it as `invalid` with its
      // text; a quota refusal is an `invalid` the SDK types.
      const why = error instanceof Invalid ? error.why : error.message;
      ok = code === 'invalid' || (code === 'too_large' && why.startsWith('too large: '));
      if ('message' in expect && !why.includes(expect.message)) {
        this.problems.push(`message ${JSON.stringify(why)} lacks ${JSON.stringify(expect.message)}`);
      }
    }
    if (!ok) this.problems.push(`failed as ${error.constructor.name} (${error.message}), expected ${code}`);
  }

  /** @param {string} what @param {any} got @param {any} want */
  compareObject(what, got, want) {
    if (got === null || want === null) {
      if (got !== want) this.problems.push(`${what}: ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
      return;
    }
    /** @type {Record<string, any>} */
    const fields = {
      version: got.version,
      value: got.value,
      generation: got.generation,
      status: got.status,
      deleting: got.deletingSinceMs !== null,
      labels: Object.fromEntries(Object.entries(got.metadata.labels).sort()),
      owner: got.metadata.owner === null ? null : String(got.metadata.owner),
      finalizers: [...got.metadata.finalizers],
    };
    for (const [name, value] of Object.entries(want)) {
      let expected = value;
      if ((name === 'value' || name === 'status') && value !== null) expected = text(value);
      if (name === 'owner' && value !== null && typeof value === 'object') expected = String(parseKey(value));
      if (name === 'labels') expected = Object.fromEntries(Object.entries(value).sort());
      if (JSON.stringify(fields[name]) !== JSON.stringify(expected)) {
        this.problems.push(`${what}: ${name} ${JSON.stringify(fields[name])}, expected ${JSON.stringify(expected)}`);
      }
    }
  }
}

const all = cases();

test('the table is large enough', () => {
  assert.ok(all.filter(([, c]) => !(c.needs ?? []).includes('api')).length >= 150);
});

for (const [file, c] of all) {
  const needsApi = (c.needs ?? []).includes('api');
  test(`${file}: ${c.name}`, { skip: needsApi ? "needs the host's HTTP API" : false }, () => {
    const run = new Run();
    if (c.quota) {
      run.host.setQuotas(
        new QuotaLimits({
          maxCreatesPerSecond: c.quota.max_creates_per_second,
          createBurst: c.quota.create_burst,
          maxObjectsPerKind: c.quota.max_objects_per_kind,
        }),
      );
    }
    run.case(c);
    assert.deepEqual(run.problems, []);
  });
}

// ----- outbound HTTP: tests/conformance/http/*.json ------------------------

const HTTP_TABLE = new URL('../../../tests/conformance/http/', import.meta.url);

const httpCases = readdirSync(HTTP_TABLE)
  .filter((f) => f.endsWith('.json'))
  .sort()
  .flatMap((file) => JSON.parse(readFileSync(new URL(file, HTTP_TABLE), 'utf8')).cases.map((/** @type {any} */ c) => [file, c]));

test('the HTTP table is there', () => {
  assert.ok(httpCases.length >= 10);
});

/** @type {Record<string, string>} */
const FAULTS = {
  reply_lost: HttpFault.REPLY_LOST,
  reply_timed_out: HttpFault.REPLY_TIMED_OUT,
  refused: HttpFault.REFUSED,
  timeout: HttpFault.TIMEOUT,
  fenced: HttpFault.FENCED,
};

for (const [file, c] of httpCases) {
  test(`http ${file}: ${c.name}`, () => {
    const host = new FakeHost();
    /** @type {string[]} */
    const problems = [];
    if (c.allow) host.allowHttp(c.allow);
    for (const route of c.respond ?? []) host.respond(route.pattern, HttpReply.status(route.status));
    c.steps.forEach((/** @type {any} */ step, /** @type {number} */ i) => {
      if (step.revoke) return host.revoke();
      if (step.new_tenure) return host.newTenure();
      if (step.fault) host.failNextHttp(FAULTS[step.fault]);
      let request = new http.Request(step.send.method, step.send.url);
      for (const [name, value] of Object.entries(step.send.headers ?? {})) request = request.header(name, value);
      if (step.send.body !== undefined) request = request.body(new TextEncoder().encode(step.send.body));
      let got;
      try {
        got = `status ${request.send().status}`;
      } catch (e) {
        if (e instanceof http.Denied) got = 'denied';
        else if (e instanceof http.Fenced) got = 'fenced';
        else if (e instanceof http.Connection) got = 'connection';
        else if (e instanceof http.Timeout) got = 'timeout';
        else throw e;
      }
      const want = 'status' in step.expect ? `status ${step.expect.status}` : step.expect.error;
      if (got !== want) problems.push(`step ${i}: ${got}, expected ${want}`);
    });
    const records = host.httpRequests();
    if (records.length !== c.requests.length) {
      problems.push(`${records.length} requests left (${records.map((r) => r.url)}), expected ${c.requests.length}`);
    } else {
      records.forEach((record, i) => {
        const want = c.requests[i];
        const got = [record.method, record.url, record.delivered, record.status];
        const expected = [want.method, want.url, want.delivered, want.status];
        if (JSON.stringify(got) !== JSON.stringify(expected)) problems.push(`request ${JSON.stringify(got)}, expected ${JSON.stringify(expected)}`);
        for (const [name, value] of Object.entries(want.headers ?? {})) {
          if (record.header(name) !== value) problems.push(`request ${record.url}: header ${name} ${record.header(name)}, expected ${value}`);
        }
      });
    }
    assert.deepEqual(problems, []);
  });
}
