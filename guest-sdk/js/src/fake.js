/**
 * A fake host for testing controllers natively, with node's test runner.
 *
 * `FakeHost` answers every host call the SDK makes with the real host's
 * rules: kinds and names are DNS labels; values are JSON within the size
 * limit, normalized (compact, keys sorted); versions are store revisions
 * that only grow and are never reused; every operation of a commit applies
 * or none does; one operation per object per commit; metadata rules,
 * finalizers, the deletion mark and owner deletion (transitively, at most
 * 1000 per commit) as the host applies them; selectors with the host's
 * containment; commits fenced by the lease (`revoke`, `newTenure`); the
 * tenure's shard (`setShard`): a sharded fake's `resync` and `runChanges`
 * reconcile only the shard's own objects (and those of the kinds every
 * shard watches), and its commits refuse a status write without an
 * expected generation to another shard's object, as the host does.
 *
 * Faults are aimed at a call or commit: `Fault.FENCED` (the lease is
 * lost), `Fault.CONFLICT`, `Fault.UNAVAILABLE`, `Fault.LOST_REPLY` (the
 * commit applied, its reply lost: the guest sees `Unavailable`), and quota
 * refusals. `before` runs a write "by someone else" just before a call.
 *
 * Outbound HTTP (`fake-http.js`) follows the host's rules: denied until
 * `allowHttp` lists the URL, the three fence headers stamped on every
 * request, refused after the lease is lost, bounded per reconcile; a
 * scripted receiver answers (`respond`, `respondOnce`, `respondWith`),
 * `failHttp` injects faults on the wire (`HttpFault`), and
 * `httpRequests` records what left.
 *
 * Creating a `FakeHost` installs it: the SDK's calls go to the newest one.
 *
 * @module
 */

import { Reason, dispatch, strongest } from './controller.js';
import { Conflict, Fenced, Invalid, NotFound, QUOTA_EXCEEDED_PREFIX, StoreError, Unavailable, invalid } from './errors.js';
import { Fence } from './fence.js';
import { install } from './host.js';
import { Metadata, ObjectKey } from './keys.js';
import * as J from './fake-json.js';
import * as L from './limits.js';
import { decodeRaw } from './objects.js';
import { HttpReply, HttpState } from './fake-http.js';
import { Shard } from './shard.js';
import { Check, Committed, Create, CreateWith, Delete, Replace, Status, Update, decodeEventMessage } from './transaction.js';

export { HttpFault, HttpRecord, HttpReply } from './fake-http.js';

/** The fake's clock starts here: 2026-01-01T00:00:00Z. */
export const START = new Date(Date.UTC(2026, 0, 1));

/** The bounds the fake enforces; the host's defaults unless given. */
export class Limits {
  /** @param {Partial<Limits>} [given] */
  constructor(given = {}) {
    /** @type {number} */ this.maxValueBytes = given.maxValueBytes ?? L.MAX_VALUE_BYTES;
    /** @type {number} */ this.maxOpsPerCommit = given.maxOpsPerCommit ?? L.MAX_OPS_PER_COMMIT;
    /** @type {number} */ this.maxEventsPerCommit = given.maxEventsPerCommit ?? L.MAX_EVENTS_PER_COMMIT;
    /** @type {number} */ this.maxEventReasonBytes = given.maxEventReasonBytes ?? L.MAX_EVENT_REASON_BYTES;
    /** @type {number} */ this.maxEventMessageBytes = given.maxEventMessageBytes ?? L.MAX_EVENT_MESSAGE_BYTES;
    /** @type {number} */ this.maxPageSize = given.maxPageSize ?? L.MAX_PAGE_SIZE;
    /** @type {number} */ this.maxCallPayloadBytes = given.maxCallPayloadBytes ?? L.MAX_CALL_PAYLOAD_BYTES;
    /** @type {number} */ this.logLineBytes = given.logLineBytes ?? L.LOG_LINE_BYTES;
    /** @type {number} */ this.httpRequestsPerReconcile =
      given.httpRequestsPerReconcile ?? L.MAX_HTTP_REQUESTS_PER_RECONCILE;
    /** @type {number} */ this.httpRequestBodyBytes = given.httpRequestBodyBytes ?? L.MAX_HTTP_REQUEST_BODY_BYTES;
    /** @type {number} */ this.httpResponseBodyBytes = given.httpResponseBodyBytes ?? L.MAX_HTTP_RESPONSE_BODY_BYTES;
    Object.freeze(this);
  }
}

/** A controller's write quotas, as its `[[controllers]]` entry sets them (`FakeHost.setQuotas`); the host's defaults unless given. */
export class QuotaLimits {
  /** @param {Partial<QuotaLimits>} [given] */
  constructor(given = {}) {
    /** @type {number} */ this.maxCreatesPerSecond = given.maxCreatesPerSecond ?? 100;
    /** @type {number} */ this.createBurst = given.createBurst ?? 1000;
    /** @type {number} */ this.maxObjectsPerKind = given.maxObjectsPerKind ?? 100_000;
    Object.freeze(this);
  }
}

/**
 * A fault the fake injects at a chosen call or commit.
 *
 * @readonly
 * @enum {string}
 */
export const Fault = Object.freeze({
  /** The lease is lost: this call and every later one throw `Fenced`. */
  FENCED: 'fenced',
  /** The commit throws `Conflict` naming its first object (commits only). */
  CONFLICT: 'conflict',
  /** The call throws `Unavailable` and does nothing. */
  UNAVAILABLE: 'unavailable',
  /** The commit applies, then its reply is lost: `Unavailable` (commits only). */
  LOST_REPLY: 'lost-reply',
  /** A `max_creates_per_second` quota refusal (commits only). */
  QUOTA_CREATES: 'quota-creates',
  /** A `max_objects_per_kind` quota refusal (commits only). */
  QUOTA_OBJECTS: 'quota-objects',
});

/**
 * True for faults that only a commit can meet.
 *
 * @param {string} fault one of `Fault`
 * @returns {boolean}
 */
export function commitsOnly(fault) {
  return fault !== Fault.FENCED && fault !== Fault.UNAVAILABLE;
}

/**
 * Which call a fault or hook aims at, counting from 1 (the next one).
 * `At.call(n)`: the n-th store call from now (get, list or commit);
 * `At.commit(n)`: the n-th commit from now.
 */
export class At {
  /** @param {boolean} commits @param {number} n */
  constructor(commits, n) {
    /** @type {boolean} */ this.commits = commits;
    /** @type {number} */ this.n = n;
    Object.freeze(this);
  }

  /** The n-th store call from now, of any kind. @param {number} n @returns {At} */
  static call(n) {
    return new At(false, n);
  }

  /** The n-th commit from now. @param {number} n @returns {At} */
  static commit(n) {
    return new At(true, n);
  }
}

/**
 * How many store calls of each kind the guest made.
 *
 * @typedef {object} CallCounts
 * @property {number} get
 * @property {number} list `list` and `listSelected`
 * @property {number} commit
 * @property {number} total all store calls
 */

/**
 * A commit that applied: revision, the epoch it was made in, ops and events.
 *
 * @typedef {object} CommitRecord
 * @property {number} revision
 * @property {number} epoch
 * @property {import('./transaction.js').Op[]} ops as normalized by the fake
 * @property {import('./transaction.js').NewEvent[]} events
 * @property {number[]} eventSeqs
 */

/**
 * An event in the fake's event log.
 *
 * @typedef {object} EventRecord
 * @property {number} seq
 * @property {number} revision the commit that appended it
 * @property {number} epoch the tenure that appended it
 * @property {ObjectKey} key what it is about
 * @property {string} reason
 * @property {string} message as stored: a typed event's type included (see `EventType`)
 * @property {string} type `Normal` or `Warning`, read from the message (see `EventType`)
 * @property {string} text the message without its type (see `EventType`)
 */

/**
 * One entry of the change stream: `key` written (or removed) at `revision`.
 * `before` and `after` are the object's metadata before and after the
 * change (null where it did not exist): what related watches map through.
 *
 * @typedef {object} Change
 * @property {number} position its place in the store's one series of numbers (after its
 *   commit's revision; unique and increasing, with gaps), as the host's change stream gives it
 * @property {number} revision
 * @property {ObjectKey} key
 * @property {boolean} deleted
 * @property {Metadata | null} before
 * @property {Metadata | null} after
 */

/**
 * A log line the guest wrote, with the epoch it was written in.
 *
 * @typedef {object} LogLine
 * @property {string} level one of `Level`
 * @property {string} message
 * @property {number} epoch
 */

/**
 * @typedef {object} Stored
 * @property {number} version
 * @property {string} value
 * @property {Metadata} metadata
 * @property {string | null} status
 * @property {number} generation
 * @property {number | null} deletingSinceMs
 */

// ----- rules -----------------------------------------------------------------

const encoder = new TextEncoder();

/** @param {string} text */
function utf8Len(text) {
  return encoder.encode(text).length;
}

/** @param {string} c */
function isLowerAlnum(c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/** @param {string} c */
function isAlnum(c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// The host's refusals read "invalid request: …" and "too large: …" (its
// store errors); the fake's say the same, word for word.

/** @param {string} why @returns {Invalid} */
function refused(why) {
  return new Invalid(`invalid request: ${why}`);
}

/** @param {string} why @returns {Invalid} */
function tooLarge(why) {
  return new Invalid(`too large: ${why}`);
}

/**
 * @param {string} what
 * @param {string} value
 */
function checkLabel(what, value) {
  /** @param {string} rule */
  const refuse = (rule) => {
    throw refused(`invalid ${what} ${shown(String(value))}: ${rule}`);
  };
  if (typeof value !== 'string' || value.length === 0) refuse('must not be empty');
  if (utf8Len(value) > L.MAX_LABEL_LEN) refuse('must be at most 63 characters');
  if (!(isLowerAlnum(value[0]) && isLowerAlnum(value[value.length - 1]))) {
    refuse('must start and end with a lowercase letter or digit');
  }
  if (![...value].every((c) => isLowerAlnum(c) || c === '-')) {
    refuse("may contain only lowercase letters, digits and '-'");
  }
}

/**
 * True if `value` is an object name (a DNS label).
 *
 * @param {string} value
 * @returns {boolean}
 */
function isName(value) {
  try {
    checkLabel('name', value);
    return true;
  } catch {
    return false;
  }
}

/** @param {ObjectKey} key */
function checkKey(key) {
  checkLabel('object kind', key.kind);
  checkLabel('object name', key.name);
}

/** @param {string} text @param {number} maxBytes */
function qualified(text, maxBytes) {
  return (
    text.length > 0 &&
    utf8Len(text) <= maxBytes &&
    isAlnum(text[0]) &&
    isAlnum(text[text.length - 1]) &&
    [...text].every((c) => isAlnum(c) || '-_./'.includes(c))
  );
}

/** @param {string} text */
function labelValue(text) {
  return (
    text === '' ||
    (utf8Len(text) <= L.MAX_LABEL_VALUE_BYTES &&
      isAlnum(text[0]) &&
      isAlnum(text[text.length - 1]) &&
      [...text].every((c) => isAlnum(c) || '-_.'.includes(c)))
  );
}

/** @param {string} text */
function shown(text) {
  return JSON.stringify([...text].slice(0, 80).join(''));
}

/**
 * The host's canonical JSON text of a JavaScript value, as a seed or a
 * status written through the fake is stored (`fake-json.js`; a number
 * JavaScript holds as an integer is written as one).
 *
 * @param {any} value
 * @returns {string}
 */
export function canonicalJson(value) {
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`${typeof value} is not JSON`);
  return J.canonical(text);
}

/**
 * The host's canonical text of a value or status (`fake-json.js`).
 *
 * @param {Limits} limits
 * @param {ObjectKey} key
 * @param {string} part
 * @param {string} text
 * @returns {string}
 */
function normalize(limits, key, part, text) {
  if (utf8Len(text) > limits.maxValueBytes) {
    throw tooLarge(`the ${part} of ${key} is ${utf8Len(text)} bytes; the limit is ${limits.maxValueBytes}`);
  }
  let normal;
  try {
    normal = J.canonical(text);
  } catch (e) {
    if (e instanceof J.JsonRefused) throw refused(`the ${part} of ${key} ${e.describe()}`);
    throw e;
  }
  if (utf8Len(normal) > limits.maxValueBytes) {
    throw tooLarge(
      `the ${part} of ${key} is ${utf8Len(normal)} bytes once normalized; the limit is ${limits.maxValueBytes}`,
    );
  }
  return normal;
}

/**
 * @param {ObjectKey} key
 * @param {Metadata} meta
 */
function checkMetadata(key, meta) {
  const labels = Object.entries(meta.labels).sort(([a], [b]) => J.byCodePoint(a, b));
  if (labels.length > L.MAX_LABELS) {
    throw tooLarge(`${key} has ${labels.length} labels; the limit is ${L.MAX_LABELS}`);
  }
  for (const [name, value] of labels) {
    if (!qualified(name, L.MAX_LABEL_KEY_BYTES)) {
      throw refused(
        `label key ${shown(name)} of ${key} must be 1 to ${L.MAX_LABEL_KEY_BYTES} ASCII letters, digits, ` +
          "'-', '_', '.' or '/', beginning and ending with a letter or digit",
      );
    }
    if (!labelValue(value)) {
      throw refused(
        `label ${name} of ${key} has value ${shown(value)}; a label value is empty or 1 to ` +
          `${L.MAX_LABEL_VALUE_BYTES} ASCII letters, digits, '-', '_' or '.', beginning and ending with a ` +
          'letter or digit',
      );
    }
  }
  if (meta.finalizers.length > L.MAX_FINALIZERS) {
    throw tooLarge(`${key} has ${meta.finalizers.length} finalizers; the limit is ${L.MAX_FINALIZERS}`);
  }
  meta.finalizers.forEach((finalizer, i) => {
    if (!qualified(finalizer, L.MAX_FINALIZER_BYTES)) {
      throw refused(
        `finalizer ${shown(finalizer)} of ${key} must be 1 to ${L.MAX_FINALIZER_BYTES} ASCII letters, ` +
          "digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
      );
    }
    if (meta.finalizers.slice(0, i).includes(finalizer)) {
      throw refused(`finalizer ${finalizer} of ${key} is listed twice`);
    }
  });
  if (meta.owner !== null) {
    checkLabel('owner kind', meta.owner.kind);
    checkLabel('owner name', meta.owner.name);
    if (meta.owner.equals(key)) throw refused(`${key} cannot own itself`);
  }
}

/** @param {Metadata | null} meta */
function metaSize(meta) {
  if (meta === null) return 0;
  let size = Object.entries(meta.labels).reduce((n, [k, v]) => n + utf8Len(k) + utf8Len(v), 0);
  if (meta.owner !== null) size += utf8Len(meta.owner.kind) + utf8Len(meta.owner.name);
  return size + meta.finalizers.reduce((n, f) => n + utf8Len(f), 0);
}

/** @param {import('./transaction.js').Op} op */
function opSize(op) {
  let size = utf8Len(op.key.kind) + utf8Len(op.key.name);
  if (op instanceof Create || op instanceof Update) size += utf8Len(op.value);
  else if (op instanceof CreateWith) size += utf8Len(op.value) + metaSize(op.metadata);
  else if (op instanceof Replace) size += (op.value === null ? 0 : utf8Len(op.value)) + metaSize(op.metadata);
  else if (op instanceof Status) size += op.status === null ? 0 : utf8Len(op.status);
  return size;
}

/**
 * @param {Limits} limits
 * @param {import('./transaction.js').NewEvent} event
 */
function checkEvent(limits, event) {
  checkKey(event.key);
  const { key, reason } = event;
  if (utf8Len(reason) > limits.maxEventReasonBytes) {
    throw tooLarge(
      `the reason of an event about ${key} is ${utf8Len(reason)} bytes; the limit is ${limits.maxEventReasonBytes}`,
    );
  }
  const pascal = reason.length > 0 && reason[0] >= 'A' && reason[0] <= 'Z' && [...reason].every(isAlnum);
  if (!pascal) {
    throw refused(
      `the reason ${shown(reason)} of an event about ${key} must be a PascalCase word ` +
        '(A-Z first, then letters and digits)',
    );
  }
  if (utf8Len(event.message) > limits.maxEventMessageBytes) {
    throw tooLarge(
      `the message of an event about ${key} is ${utf8Len(event.message)} bytes; the limit is ` +
        `${limits.maxEventMessageBytes}`,
    );
  }
  if (event.message.includes('\0')) {
    throw refused(`the message of an event about ${key} contains a NUL character`);
  }
}

/**
 * @param {Limits} limits
 * @param {readonly import('./transaction.js').Op[]} ops
 * @param {readonly import('./transaction.js').NewEvent[]} events
 * @returns {import('./transaction.js').Op[]}
 */
function validateCommit(limits, ops, events) {
  const size =
    ops.reduce((n, op) => n + opSize(op), 0) +
    events.reduce(
      (n, e) => n + utf8Len(e.key.kind) + utf8Len(e.key.name) + utf8Len(e.reason) + utf8Len(e.message),
      0,
    );
  if (size > limits.maxCallPayloadBytes) {
    throw new Invalid(
      `host call payload of ${size} bytes exceeds the limit of ${limits.maxCallPayloadBytes} bytes`,
    );
  }
  if (ops.length > limits.maxOpsPerCommit) {
    throw tooLarge(`a commit has ${ops.length} operations; the limit is ${limits.maxOpsPerCommit}`);
  }
  if (events.length > limits.maxEventsPerCommit) {
    throw tooLarge(`a commit has ${events.length} events; the limit is ${limits.maxEventsPerCommit}`);
  }
  if (ops.length === 0 && events.length === 0) throw refused('a commit needs at least one operation or event');
  const seen = new Set();
  /** @type {import('./transaction.js').Op[]} */
  const normalized = [];
  for (let op of ops) {
    const key = op.key;
    checkKey(key);
    if (seen.has(String(key))) throw refused(`${key} appears in more than one operation of the commit`);
    seen.add(String(key));
    if (op instanceof Create) {
      op = new Create(key, normalize(limits, key, 'value', op.value));
    } else if (op instanceof Update) {
      op = new Update(key, op.expectedVersion, normalize(limits, key, 'value', op.value));
    } else if (op instanceof CreateWith) {
      checkMetadata(key, op.metadata);
      op = new CreateWith(key, normalize(limits, key, 'value', op.value), op.metadata);
    } else if (op instanceof Replace) {
      if (op.metadata !== null) checkMetadata(key, op.metadata);
      if (op.value === null && op.metadata === null) {
        throw refused(`a replace of ${key} needs a value, metadata or both`);
      }
      const value = op.value === null ? null : normalize(limits, key, 'value', op.value);
      op = new Replace(key, op.expectedVersion, value, op.metadata);
    } else if (op instanceof Status) {
      const status = op.status === null ? null : normalize(limits, key, 'status', op.status);
      op = new Status(key, op.expectedGeneration, status);
    } else if (!(op instanceof Delete || op instanceof Check)) {
      throw refused(`unknown operation ${/** @type {any} */ (op).constructor?.name} on ${key}`);
    }
    normalized.push(op);
  }
  for (const event of events) checkEvent(limits, event);
  return normalized;
}

/**
 * The selector's `contains` as the host reads it: the guest's JSON text,
 * parsed under the store's rules (`undefined` when not given).
 *
 * @param {string} kind
 * @param {import('./keys.js').Selector} selector
 * @returns {any}
 */
function selectorContains(kind, selector) {
  const text = selector.containsJson();
  if (text === null) return undefined;
  if (utf8Len(text) > L.MAX_VALUE_BYTES) {
    throw refused(
      `selector for kind ${kind}: contains is ${utf8Len(text)} bytes of JSON text; the limit is ${L.MAX_VALUE_BYTES}`,
    );
  }
  try {
    return J.parse(text);
  } catch (e) {
    if (e instanceof J.JsonRefused) throw refused(`selector for kind ${kind}: contains ${e.describe()}`);
    throw e;
  }
}

/**
 * @param {string} kind
 * @param {import('./keys.js').Selector} selector
 * @param {any} contains parsed, or `undefined`
 */
function checkSelector(kind, selector, contains) {
  const labels = Object.entries(selector.labels).sort(([a], [b]) => J.byCodePoint(a, b));
  if (labels.length > L.MAX_SELECTOR_LABELS) {
    throw refused(`selector for kind ${kind} names ${labels.length} labels; the limit is ${L.MAX_SELECTOR_LABELS}`);
  }
  for (const [name, value] of labels) {
    if (!qualified(name, L.MAX_LABEL_KEY_BYTES)) {
      throw refused(
        `selector for kind ${kind}: label key ${shown(name)} must be 1 to ${L.MAX_LABEL_KEY_BYTES} ASCII ` +
          "letters, digits, '-', '_', '.' or '/', beginning and ending with a letter or digit",
      );
    }
    if (!labelValue(value)) {
      throw refused(
        `selector for kind ${kind}: label ${name} has value ${shown(value)}; a label value is empty or 1 ` +
          `to ${L.MAX_LABEL_VALUE_BYTES} ASCII letters, digits, '-', '_' or '.', beginning and ending ` +
          'with a letter or digit',
      );
    }
  }
  if (contains !== undefined) {
    const cap = L.MAX_SELECTOR_CONTAINS_DEPTH;
    if (J.depth(contains, cap + 1) > cap) {
      throw refused(`selector for kind ${kind}: contains is nested more than ${cap} arrays or objects deep`);
    }
    if (utf8Len(J.dumps(contains)) > L.MAX_SELECTOR_CONTAINS_BYTES) {
      throw refused(
        `selector for kind ${kind}: contains is over ${L.MAX_SELECTOR_CONTAINS_BYTES} bytes of compact JSON`,
      );
    }
  }
}

/**
 * @param {import('./keys.js').Selector} selector
 * @param {any} contains parsed, or `undefined`
 * @param {Stored} stored
 */
function selects(selector, contains, stored) {
  const labels = stored.metadata.labels;
  if (Object.entries(selector.labels).some(([k, v]) => !Object.hasOwn(labels, k) || labels[k] !== v)) return false;
  if (contains === undefined) return true;
  return J.contains(J.parse(stored.value), contains);
}

/**
 * The keys `change` maps to through `watch` (none if `watch` is of another kind).
 * As the host maps: through what the object has after the change and, when
 * an update moved its owner or label, through what it had before.
 *
 * @param {import('./controller.js').RelatedWatch} watch
 * @param {Change} change
 * @returns {ObjectKey[]}
 */
export function relatedKeys(watch, change) {
  if (change.key.kind !== watch.kind) return [];
  /** @type {ObjectKey[]} */
  const keys = [];
  for (const meta of [change.after, change.before]) {
    if (meta === null) continue;
    let key;
    if (watch.byLabel) {
      const labelKey = watch.labelKey ?? '';
      if (!Object.hasOwn(meta.labels, labelKey)) continue;
      const value = meta.labels[labelKey];
      if (!isName(value)) continue;
      key = new ObjectKey(watch.targetKind ?? '', value);
    } else {
      if (meta.owner === null || (watch.ownerKind !== null && watch.ownerKind !== meta.owner.kind)) continue;
      key = meta.owner;
    }
    if (!keys.some((k) => k.equals(key))) keys.push(key);
  }
  return keys;
}

/**
 * `reply`, if it is an `HttpReply` (a script's mistake is reported where it is made).
 *
 * @param {any} reply
 * @returns {HttpReply}
 */
function checkedReply(reply) {
  if (!(reply instanceof HttpReply)) throw new TypeError('a scripted reply is an HttpReply (HttpReply.status, .json, .text)');
  return reply;
}

// ----- the store ---------------------------------------------------------------

/** @param {Stored} s @param {Partial<Stored>} changes @returns {Stored} */
function withParts(s, changes) {
  return { ...s, ...changes };
}

class Plan {
  constructor() {
    /** key -> [key, the row to put, or null to remove] @type {Map<string, [ObjectKey, Stored | null]>} */
    this.writes = new Map();
    /** @type {ObjectKey[]} */
    this.pendingOwners = [];
    this.collected = 0;
  }
}

/**
 * The objects a commit names, then the owners its metadata names, once
 * each (the host's order when it names a refused commit).
 *
 * @param {readonly import('./transaction.js').Op[]} ops
 * @returns {string[]}
 */
function batchKeys(ops) {
  /** @type {string[]} */
  const keys = [];
  for (const op of ops) if (!keys.includes(String(op.key))) keys.push(String(op.key));
  for (const op of ops) {
    const meta = op instanceof CreateWith || op instanceof Replace ? op.metadata : null;
    if (meta !== null && meta.owner !== null && !keys.includes(String(meta.owner))) keys.push(String(meta.owner));
  }
  return keys;
}

/**
 * @param {Plan} plan
 * @param {ObjectKey} key
 * @param {Stored} stored
 * @param {number} nowMs
 */
function requestDelete(plan, key, stored, nowMs) {
  if (stored.metadata.finalizers.length === 0) {
    plan.pendingOwners.push(key);
    plan.writes.set(String(key), [key, null]);
    return;
  }
  if (stored.deletingSinceMs !== null) return;
  plan.pendingOwners.push(key);
  plan.writes.set(String(key), [
    key,
    withParts(stored, { generation: stored.generation + 1, deletingSinceMs: nowMs }),
  ]);
}

class Objects {
  constructor() {
    /** `kind/name` -> [key, row] @type {Map<string, [ObjectKey, Stored]>} */
    this.map = new Map();
    /** The revision of the last write. */
    this.revision = 0;
    /** The last number given out: revisions, change positions and event sequence numbers. */
    this.last = 0;
    /** @type {Change[]} */
    this.changes = [];
  }

  /** The next number of the store's one series. @returns {number} */
  next() {
    this.last += 1;
    return this.last;
  }

  /** @param {ObjectKey} key @returns {Stored | undefined} */
  stored(key) {
    return this.map.get(String(key))?.[1];
  }

  /** @param {string} kind @returns {ObjectKey[]} in name order */
  keysOf(kind) {
    return [...this.map.values()]
      .map(([k]) => k)
      .filter((k) => k.kind === kind)
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** @param {ObjectKey} key @returns {import('./keys.js').RawObject | null} */
  raw(key) {
    const s = this.stored(key);
    if (s === undefined) return null;
    return {
      kind: key.kind,
      name: key.name,
      version: s.version,
      value: s.value,
      metadata: s.metadata,
      status: s.status,
      generation: s.generation,
      deletingSinceMs: s.deletingSinceMs,
    };
  }

  /**
   * @param {Limits} limits
   * @param {string} kind
   * @param {string | null} after
   * @param {number} limit
   * @param {(s: Stored) => boolean} keep
   * @returns {import('./keys.js').RawPage}
   */
  listMatching(limits, kind, after, limit, keep) {
    const most = Math.min(limit === 0 ? L.DEFAULT_PAGE_SIZE : limit, limits.maxPageSize);
    /** @type {import('./keys.js').RawObject[]} */
    let objects = [];
    for (const key of this.keysOf(kind)) {
      if (after !== null && !(key.name > after)) continue;
      if (keep(/** @type {Stored} */ (this.stored(key)))) {
        objects.push(/** @type {import('./keys.js').RawObject} */ (this.raw(key)));
        if (objects.length > most) break;
      }
    }
    let next = null;
    if (objects.length > most) {
      objects = objects.slice(0, most);
      next = objects[objects.length - 1].name;
    }
    return { objects, next };
  }

  /**
   * Plan and apply validated `ops`, numbered as the host numbers a commit:
   * its revision, then one position per change, then `events` sequence numbers.
   *
   * @param {readonly import('./transaction.js').Op[]} ops
   * @param {number} events
   * @param {number} nowMs
   * @returns {{revision: number, seqs: number[]}}
   */
  apply(ops, events, nowMs) {
    const plan = new Plan();
    for (const op of ops) this.#resolve(ops, plan, op, nowMs);
    this.#collect(ops, plan, nowMs);
    return this.#commit(plan, events);
  }

  /**
   * @param {ObjectKey} key
   * @param {number} nowMs
   * @returns {boolean}
   */
  requestDeleteByUser(key, nowMs) {
    const stored = this.stored(key);
    if (stored === undefined) return false;
    const plan = new Plan();
    requestDelete(plan, key, stored, nowMs);
    this.#collect([new Delete(key, stored.version)], plan, nowMs);
    if (plan.writes.size > 0) this.#commit(plan, 0);
    return true;
  }

  /** @param {Plan} plan @param {number} events @returns {{revision: number, seqs: number[]}} */
  #commit(plan, events) {
    const revision = this.next();
    const positions = [...plan.writes.keys()].map(() => this.next());
    const seqs = Array.from({ length: events }, () => this.next());
    let i = 0;
    for (const [id, [key, row]] of plan.writes) {
      const position = positions[i];
      i += 1;
      const old = this.map.get(id);
      const before = old === undefined ? null : old[1].metadata;
      if (row === null) {
        this.map.delete(id);
      } else {
        row.version = revision;
        this.map.set(id, [key, row]);
      }
      const after = row === null ? null : row.metadata;
      this.changes.push({ position, revision, key, deleted: row === null, before, after });
    }
    this.revision = revision;
    return { revision, seqs };
  }

  /**
   * @param {readonly import('./transaction.js').Op[]} ops
   * @param {Plan} plan
   * @param {number} nowMs
   */
  #collect(ops, plan, nowMs) {
    while (plan.pendingOwners.length > 0) {
      const owners = plan.pendingOwners;
      plan.pendingOwners = [];
      const owned = [...this.map.values()]
        .filter(([, s]) => s.metadata.owner !== null && owners.some((o) => o.equals(s.metadata.owner)))
        .sort(([a], [b]) => J.byCodePoint(a.kind, b.kind) || J.byCodePoint(a.name, b.name));
      for (const [key, stored] of owned) {
        if (plan.writes.has(String(key))) {
          if (ops.some((op) => op instanceof Delete && op.key.equals(key))) continue;
          throw refused(
            `the commit deletes ${stored.metadata.owner}, which owns ${key}, and also writes ${key}: ` +
              `delete ${key} too, or write it in another commit`,
          );
        }
        if (ops.some((op) => op.key.equals(key))) {
          throw refused(`the commit checks ${key} and deletes its owner; check or delete, not both`);
        }
        plan.collected += 1;
        if (plan.collected > L.MAX_COLLECTED_PER_COMMIT) {
          throw tooLarge(
            `deleting ${batchKeys(ops).join(', ')} would delete or mark more than ` +
              `${L.MAX_COLLECTED_PER_COMMIT} owned objects in one commit; delete owned objects first`,
          );
        }
        requestDelete(plan, key, stored, nowMs);
      }
    }
  }

  /**
   * @param {readonly import('./transaction.js').Op[]} ops
   * @param {Plan} plan
   * @param {import('./transaction.js').Op} op
   * @param {number} nowMs
   */
  #resolve(ops, plan, op, nowMs) {
    const key = op.key;
    const found = this.stored(key);
    if (op instanceof Check) {
      const have = found === undefined ? 0 : found.version;
      if (have !== op.expectedVersion || (found !== undefined && op.expectedVersion === 0)) throw new Conflict(key);
      return;
    }
    if (op instanceof Create || op instanceof CreateWith) {
      if (found !== undefined) throw new Conflict(key);
      const meta = op instanceof CreateWith ? op.metadata : new Metadata();
      this.#checkOwner(ops, key, null, meta);
      plan.writes.set(String(key), [
        key,
        { version: 0, value: op.value, metadata: meta, status: null, generation: 1, deletingSinceMs: null },
      ]);
      return;
    }
    if (found === undefined) throw new NotFound(key);
    if ((op instanceof Update || op instanceof Replace || op instanceof Delete) && op.expectedVersion !== found.version) {
      throw new Conflict(key);
    }
    if (op instanceof Update) {
      plan.writes.set(String(key), [key, this.#rewrite(ops, key, found, op.value, null)]);
    } else if (op instanceof Replace) {
      plan.writes.set(String(key), [key, this.#rewrite(ops, key, found, op.value, op.metadata)]);
    } else if (op instanceof Delete) {
      requestDelete(plan, key, found, nowMs);
    } else if (op instanceof Status) {
      if (op.expectedGeneration !== null && op.expectedGeneration !== found.generation) throw new Conflict(key);
      plan.writes.set(String(key), [key, withParts(found, { status: op.status })]);
    }
  }

  /**
   * @param {readonly import('./transaction.js').Op[]} ops
   * @param {ObjectKey} key
   * @param {Stored} stored
   * @param {string | null} value
   * @param {Metadata | null} meta
   * @returns {Stored | null}
   */
  #rewrite(ops, key, stored, value, meta) {
    const newValue = value ?? stored.value;
    const newMeta = meta ?? stored.metadata;
    if (stored.deletingSinceMs !== null) {
      const added = newMeta.finalizers.filter((f) => !stored.metadata.finalizers.includes(f));
      if (added.length > 0) {
        throw refused(`${key} is marked for deletion: finalizers can be removed, not added (${added[0]})`);
      }
      if (newMeta.finalizers.length === 0) return null;
    }
    this.#checkOwner(ops, key, stored.metadata.owner, newMeta);
    const changed = newValue !== stored.value || !newMeta.equals(stored.metadata);
    return withParts(stored, {
      value: newValue,
      metadata: newMeta,
      generation: stored.generation + (changed ? 1 : 0),
    });
  }

  /**
   * @param {readonly import('./transaction.js').Op[]} ops
   * @param {ObjectKey} key
   * @param {ObjectKey | null} had
   * @param {Metadata} meta
   */
  #checkOwner(ops, key, had, meta) {
    const owner = meta.owner;
    if (owner === null || owner.equals(had)) return;
    if (ops.some((op) => (op instanceof Create || op instanceof CreateWith) && op.key.equals(owner))) return;
    const found = this.stored(owner);
    if (found === undefined || found.deletingSinceMs !== null) throw new Conflict(key);
    if (ops.some((op) => op instanceof Delete && op.key.equals(owner))) {
      throw refused(`the commit deletes ${owner} and makes it the owner of ${key}`);
    }
  }
}

// ----- the host ------------------------------------------------------------------

/**
 * A host in memory: the store, the fence, the shard, logs, settings and the clock.
 *
 * Creating one installs it (`install` again to switch between two). Seed
 * objects with `seed`, drive the controller with `reconcile`, `resync` or
 * `runChanges`, inspect `objects`, `commits`, `events`, `logs`, and aim
 * faults with `fail` and writes of others with `before`. It runs shard 0
 * of 1 (unsharded) unless `setShard` says otherwise.
 */
export class FakeHost {
  /** @type {Fence} */ #fence = new Fence('test', 'controller', 1, 'fake-host');
  #revoked = false;
  #unavailable = false;
  #objects = new Objects();
  /** @type {CommitRecord[]} */ #commits = [];
  /** @type {EventRecord[]} */ #events = [];
  /** @type {LogLine[]} */ #logs = [];
  #calls = { get: 0, list: 0, commit: 0 };
  /** @type {Array<{what: string, n: number, fault: string}>} */ #faults = [];
  /** @type {Array<{what: string, n: number, hook: (host: FakeHost) => void}>} */ #hooks = [];
  #settings = '{}';
  #nowMs = START.getTime();
  #shard = Shard.WHOLE;
  // The shard label of the description this fake read last, which its
  // commits judge status writes by (the host judges by the label the
  // running guest's `describe` declared).
  /** @type {string | null} */ #shardLabel = null;
  #http = new HttpState();
  // The host's write quotas once a test sets them: the limits, the create
  // bucket's tokens and when it was last refilled (fake ms).
  /** @type {{limits: QuotaLimits, tokens: number, at: number} | null} */ #quota = null;

  /**
   * @param {Limits} [limits] the bounds to enforce (the host's defaults)
   * @param {{quiet?: boolean}} [options] `quiet`: keep log lines without printing them
   */
  constructor(limits = new Limits(), options = {}) {
    /** The bounds this fake enforces. @type {Limits} */
    this.limits = limits;
    /** Whether log lines are kept without being printed. @type {boolean} */
    this.quiet = options.quiet ?? true;
    this.install();
  }

  /** Make this host answer the SDK's calls. @returns {void} */
  install() {
    install(this);
  }

  // ----- seeding and inspecting ---------------------------------------------------

  /**
   * Create or overwrite `kind/name` with `value`, as a user would; its version.
   *
   * @param {string} kind
   * @param {string} name
   * @param {any} value
   * @returns {number}
   */
  seed(kind, name, value) {
    return this.#put(kind, name, value, null);
  }

  /**
   * As `seed`, with metadata.
   *
   * @param {string} kind
   * @param {string} name
   * @param {any} value
   * @param {Metadata} metadata
   * @returns {number}
   */
  seedWith(kind, name, value, metadata) {
    return this.#put(kind, name, value, metadata);
  }

  /**
   * @param {string} kind
   * @param {string} name
   * @param {any} value
   * @param {Metadata | null} meta
   */
  #put(kind, name, value, meta) {
    const key = new ObjectKey(kind, name);
    const text = canonicalJson(value);
    const stored = this.#objects.stored(key);
    const op =
      stored === undefined
        ? new CreateWith(key, text, meta ?? new Metadata())
        : new Replace(key, stored.version, text, meta);
    return this.#asUser(key, 'seeding', [op]);
  }

  /**
   * @param {ObjectKey} key
   * @param {string} what
   * @param {import('./transaction.js').Op[]} ops
   */
  #asUser(key, what, ops) {
    try {
      return this.#objects.apply(validateCommit(this.limits, ops, []), 0, this.#nowMs).revision;
    } catch (e) {
      if (e instanceof StoreError) throw new Error(`${what} ${key}: ${e.message}`);
      throw e;
    }
  }

  /**
   * Write the status of `kind/name` as a user would; the new version.
   *
   * @param {string} kind
   * @param {string} name
   * @param {any} status
   * @returns {number}
   */
  setStatus(kind, name, status) {
    const key = new ObjectKey(kind, name);
    return this.#asUser(key, 'setting the status of', [new Status(key, null, canonicalJson(status))]);
  }

  /**
   * A user's delete request (marks it if it has finalizers); false if absent.
   *
   * @param {string} kind
   * @param {string} name
   * @returns {boolean}
   */
  remove(kind, name) {
    return this.#objects.requestDeleteByUser(new ObjectKey(kind, name), this.#nowMs);
  }

  /**
   * `kind/name` as stored, or null.
   *
   * @param {string} kind
   * @param {string} name
   * @param {((value: any) => any) | null} [decode]
   * @returns {import('./objects.js').StoredObject | null}
   */
  object(kind, name, decode = null) {
    const raw = this.#objects.raw(new ObjectKey(kind, name));
    return raw === null ? null : decodeRaw(raw, decode);
  }

  /**
   * Every object of `kind`, in name order.
   *
   * @param {string} kind
   * @param {((value: any) => any) | null} [decode]
   * @returns {import('./objects.js').StoredObject[]}
   */
  objects(kind, decode = null) {
    return this.#objects
      .keysOf(kind)
      .map((k) => decodeRaw(/** @type {import('./keys.js').RawObject} */ (this.#objects.raw(k)), decode));
  }

  /** The store's latest revision. @returns {number} */
  get revision() {
    return this.#objects.revision;
  }

  /**
   * The change stream: every write after revision `after`, in order.
   *
   * @param {number} [after]
   * @returns {Change[]}
   */
  changes(after = 0) {
    return this.#objects.changes.filter((c) => c.revision > after);
  }

  // ----- the fence ---------------------------------------------------------------

  /** The current fence (answers the SDK's `fence()` too). @returns {Fence} */
  fence() {
    return this.#fence;
  }

  /**
   * Run under `fence` from now on, not revoked.
   *
   * @param {Fence} fence
   * @returns {void}
   */
  setFence(fence) {
    this.#fence = fence;
    this.#revoked = false;
  }

  /** A new tenure of the same lease: epoch + 1, not revoked. @returns {Fence} */
  newTenure() {
    const f = this.#fence;
    this.#fence = new Fence(f.cluster, f.lease, f.epoch + 1, f.holder);
    this.#revoked = false;
    return this.#fence;
  }

  /** Lose the lease: every later store call throws `Fenced`. @returns {void} */
  revoke() {
    this.#revoked = true;
  }

  /** True once the lease is lost. @returns {boolean} */
  get isRevoked() {
    return this.#revoked;
  }

  // ----- the shard -------------------------------------------------------------------

  /** The tenure's shard (answers the SDK's `shard()` too): 0 of 1 unless set. @returns {Shard} */
  shard() {
    return this.#shard;
  }

  /**
   * Run shard `index` of `count` from now on (a `RangeError` unless `count`
   * is 1 to 64 and `index` below it); the new shard.
   *
   * A sharded fake reconciles, in `resync` and `runChanges`, only what the
   * host would wake this shard for, and refuses what the host refuses a
   * shard's commit: a status write without an expected generation to
   * another shard's object, or to any object when the controller declares
   * a shard label (the label the host would judge by is the object's,
   * which the op does not carry). The label is that of the description the
   * fake read last: `reconcile` of a sharded fake, `resync` and
   * `runChanges` read it.
   *
   * @param {number} index
   * @param {number} count
   * @returns {Shard}
   */
  setShard(index, count) {
    try {
      this.#shard = new Shard(index, count);
    } catch (e) {
      if (e instanceof RangeError) throw new RangeError(`FakeHost.setShard(${index}, ${count}): ${e.message}`);
      throw e;
    }
    return this.#shard;
  }

  /**
   * @param {import('./controller.js').Description} description
   * @returns {import('./controller.js').Description}
   */
  #learn(description) {
    this.#shardLabel = description.shardLabel;
    return description;
  }

  /**
   * Whether this shard is woken for `key`, whose metadata is `meta` (null:
   * unknown, as for an object that does not exist).
   *
   * @param {import('./controller.js').Description} description
   * @param {ObjectKey} key
   * @param {Metadata | null} meta
   * @returns {boolean}
   */
  #watchesObject(description, key, meta) {
    const shard = this.#shard;
    if (shard.count === 1 || description.everyShard.includes(key.kind)) return true;
    const label = description.shardLabel;
    if (label === null || meta === null || !Object.hasOwn(meta.labels, label)) return shard.ownsKey(key.kind, key.name);
    return Shard.ofLabel(meta.labels[label], shard.count) === shard.index;
  }

  /**
   * @param {import('./controller.js').Description} description
   * @param {ObjectKey} key
   * @returns {boolean}
   */
  #watchesStored(description, key) {
    return this.#watchesObject(description, key, this.#objects.stored(key)?.metadata ?? null);
  }

  /**
   * The host's rule for a shard's writes: an op on another shard's object
   * must be conditional, and every op is but a blind status write.
   *
   * @param {import('./transaction.js').Op} op
   * @returns {void}
   */
  #checkShardWrite(op) {
    const shard = this.#shard;
    if (shard.count === 1 || !(op instanceof Status) || op.expectedGeneration !== null) return;
    const key = op.key;
    if (this.#shardLabel !== null) {
      throw invalid(
        `${key}: this controller's objects are sharded by the label ${this.#shardLabel}, which the op does not ` +
          `carry, so this ${shard} cannot tell whose it is: a status write of a controller sharded by a label ` +
          'must be conditional (give it an expected generation)',
      );
    }
    if (!shard.ownsKey(key.kind, key.name)) {
      const theirs = Shard.ofKey(key.kind, key.name, shard.count);
      throw invalid(
        `${key} belongs to shard ${theirs} of ${shard.count}, not to this ${shard}: a write to another shard's ` +
          'object must be conditional (give the status write an expected generation)',
      );
    }
  }

  // ----- driving a controller -------------------------------------------------------

  /**
   * Run one reconcile of `kind/name` as the host would; its reply. A
   * sharded fake reads the controller's description first (its shard label
   * decides which status writes the shard may make). Each reconcile (of
   * `resync` and `runChanges` too) has a fresh budget of outbound requests
   * (`limits.httpRequestsPerReconcile`), as in the host; requests made
   * outside a reconcile share one budget.
   *
   * @param {import('./controller.js').Controller} controller
   * @param {string} kind
   * @param {string} name
   * @param {string} [reason] one of `Reason`
   * @returns {import('./controller.js').Reply}
   */
  reconcile(controller, kind, name, reason = Reason.CHANGE) {
    this.install();
    if (this.#shard.count > 1) this.#learn(controller.describe());
    return this.#dispatch(controller, kind, name, reason);
  }

  /**
   * One reconcile, with a fresh budget of outbound requests as each
   * reconcile has in the host.
   *
   * @param {import('./controller.js').Controller} controller
   * @param {string} kind
   * @param {string} name
   * @param {string} reason
   * @returns {import('./controller.js').Reply}
   */
  #dispatch(controller, kind, name, reason) {
    this.#http.beginReconcile();
    return dispatch(controller, kind, name, reason);
  }

  /**
   * Reconcile every object of every watched kind, then every key the
   * objects of the related kinds map to (each key once, reason resync).
   *
   * A sharded fake reconciles only the keys the host would queue on this
   * shard: its own objects, every object of the kinds every shard watches,
   * and the mapped keys whose target (as stored) is its own.
   *
   * @param {import('./controller.js').Controller} controller
   * @returns {Array<[ObjectKey, import('./controller.js').Reply]>}
   */
  resync(controller) {
    this.install();
    const description = this.#learn(controller.describe());
    /** @type {ObjectKey[]} */
    const keys = [];
    for (const kind of description.watches) {
      keys.push(...this.#objects.keysOf(kind).filter((k) => this.#watchesStored(description, k)));
    }
    for (const watch of description.related) {
      for (const key of this.#objects.keysOf(watch.kind)) {
        const meta = /** @type {Stored} */ (this.#objects.stored(key)).metadata;
        for (const mapped of relatedKeys(watch, { position: 0, revision: 0, key, deleted: false, before: null, after: meta })) {
          if (!keys.some((k) => k.equals(mapped)) && this.#watchesStored(description, mapped)) keys.push(mapped);
        }
      }
    }
    return keys.map((k) => [k, this.#dispatch(controller, k.kind, k.name, Reason.RESYNC)]);
  }

  /**
   * Reconcile each watched key changed after revision `after` (reason
   * change), and each key a related watch maps a change to (reason
   * related, unless the key changed itself), following the changes those
   * reconciles make, until none is left; the last revision seen.
   *
   * A reconcile that asks to be requeued or fails is not repeated here: the
   * test decides about time. Throws past `maxReconciles`.
   *
   * A sharded fake follows only what wakes this shard on the host: a change
   * of its own object (judged by the object's metadata after the change, or
   * before it for a deletion) or of a kind every shard watches, and a
   * mapped key whose target, as stored, is its own.
   *
   * @param {import('./controller.js').Controller} controller
   * @param {number} [after]
   * @param {number} [maxReconciles]
   * @returns {number}
   */
  runChanges(controller, after = 0, maxReconciles = 10_000) {
    this.install();
    const description = this.#learn(controller.describe());
    const watches = new Set(description.watches);
    let seen = after;
    let done = 0;
    for (;;) {
      /** @type {Map<string, [ObjectKey, string]>} */
      const pending = new Map();
      for (const change of this.changes(seen)) {
        const meta = change.after ?? change.before;
        if (watches.has(change.key.kind) && this.#watchesObject(description, change.key, meta)) {
          pending.set(String(change.key), [change.key, Reason.CHANGE]);
        }
        for (const watch of description.related) {
          for (const key of relatedKeys(watch, change)) {
            if (!this.#watchesStored(description, key)) continue;
            const had = pending.get(String(key));
            pending.set(String(key), [key, had ? strongest(had[1], Reason.RELATED) : Reason.RELATED]);
          }
        }
        seen = change.revision;
      }
      if (pending.size === 0) return seen;
      for (const [key, reason] of pending.values()) {
        done += 1;
        if (done > maxReconciles) throw new Error(`more than ${maxReconciles} reconciles: not settling`);
        this.reconcile(controller, key.kind, key.name, reason);
      }
    }
  }

  // ----- quotas ------------------------------------------------------------------

  /**
   * Enforce the host's write quotas on the guest's commits from now on, as
   * the host does with these limits: the create bucket starts full and the
   * fake's clock refills it; a commit creating more than the burst, more
   * than the bucket holds, or past the cap of a kind is refused with the
   * host's `invalid` text (`QuotaExceeded`), writing nothing. Off until
   * called: the fake's clock moves only when a test moves it.
   *
   * @param {QuotaLimits} limits
   * @returns {void}
   */
  setQuotas(limits) {
    this.#quota = { limits, tokens: limits.createBurst, at: this.#nowMs };
  }

  /**
   * The creates a commit of `ops` may spend; throws the host's refusal.
   *
   * @param {readonly import('./transaction.js').Op[]} ops
   * @returns {number}
   */
  #admitQuota(ops) {
    const quota = this.#quota;
    if (quota === null) return 0;
    /** @type {Map<string, number>} */
    const creates = new Map();
    for (const op of ops) {
      if (op instanceof Create || op instanceof CreateWith) creates.set(op.key.kind, (creates.get(op.key.kind) ?? 0) + 1);
    }
    const wanted = [...creates.values()].reduce((a, b) => a + b, 0);
    if (wanted === 0) return 0;
    const controller = this.#fence.lease;
    const { maxCreatesPerSecond: rate, createBurst: burst, maxObjectsPerKind: cap } = quota.limits;
    const head = `${QUOTA_EXCEEDED_PREFIX}controller=${controller} quota=`;
    if (wanted > burst) {
      throw invalid(
        `${head}max_creates_per_second limit=${rate}: this commit creates ${wanted} objects, more than controller ` +
          `${JSON.stringify(controller)} may ever create at once (create_burst ${burst}); split it; nothing was written`,
      );
    }
    if (this.#nowMs >= quota.at) {
      quota.tokens = Math.min(quota.tokens + ((this.#nowMs - quota.at) / 1000) * rate, burst);
      quota.at = this.#nowMs;
    }
    if (quota.tokens < wanted) {
      const waitMs = Math.ceil(((wanted - quota.tokens) / rate) * 1000);
      throw invalid(
        `${head}max_creates_per_second limit=${rate} retry_after_ms=${waitMs}: controller ${JSON.stringify(controller)} ` +
          `may create ${rate} objects per second (create_burst ${burst}) and has spent them; this commit creates ` +
          `${wanted}; retry later; nothing was written`,
      );
    }
    for (const kind of [...creates.keys()].sort(J.byCodePoint)) {
      const current = this.#objects.keysOf(kind).length;
      const adding = /** @type {number} */ (creates.get(kind));
      if (current + adding > cap) {
        throw invalid(
          `${head}max_objects_per_kind limit=${cap} kind=${kind}: kind ${JSON.stringify(kind)} holds ${current} ` +
            `objects and this commit creates ${adding} more; controller ${JSON.stringify(controller)} may bring it ` +
            `to at most ${cap} (max_objects_per_kind); delete some or raise the limit; nothing was written`,
        );
      }
    }
    return wanted;
  }

  // ----- faults ------------------------------------------------------------------

  /**
   * Inject `fault` at the call `at` names.
   *
   * @param {At} at
   * @param {string} fault one of `Fault`
   * @returns {void}
   */
  fail(at, fault) {
    if (!at.commits && commitsOnly(fault)) {
      throw new Error(`${fault} applies to commits only: aim it with At.commit`);
    }
    this.#faults.push({ ...this.#target(at), fault });
  }

  /**
   * Inject `fault` at the next commit.
   *
   * @param {string} fault one of `Fault`
   * @returns {void}
   */
  failNextCommit(fault) {
    this.fail(At.commit(1), fault);
  }

  /**
   * Make every store call throw `Unavailable` until set back.
   *
   * @param {boolean} unavailable
   * @returns {void}
   */
  setUnavailable(unavailable) {
    this.#unavailable = unavailable;
  }

  /**
   * Run `write(host)` just before the call `at` names (someone else's write).
   *
   * @param {At} at
   * @param {(host: FakeHost) => void} write
   * @returns {void}
   */
  before(at, write) {
    this.#hooks.push({ ...this.#target(at), hook: write });
  }

  /**
   * Run `write(host)` just before the n-th commit from now.
   *
   * @param {number} n
   * @param {(host: FakeHost) => void} write
   * @returns {void}
   */
  beforeCommit(n, write) {
    this.before(At.commit(n), write);
  }

  /** Faults (outbound HTTP's included) and hooks not met yet. @returns {number} */
  get pendingFaults() {
    return this.#faults.length + this.#hooks.length + this.#http.pendingFaults;
  }

  /** @param {At} at @returns {{what: string, n: number}} */
  #target(at) {
    if (at.n < 1) throw new Error('positions count from 1 (the next call)');
    if (at.commits) return { what: 'commit', n: this.#calls.commit + at.n };
    return { what: 'call', n: this.#total() + at.n };
  }

  #total() {
    return this.#calls.get + this.#calls.list + this.#calls.commit;
  }

  /** @param {{what: string, n: number}} target @param {string} call */
  #isNow(target, call) {
    if (target.what === 'call') return target.n === this.#total();
    return call === 'commit' && target.n === this.#calls.commit;
  }

  /**
   * @param {'get' | 'list' | 'commit'} call
   * @returns {string | null} the fault aimed at this call, if any
   */
  #enter(call) {
    this.#calls[call] += 1;
    const due = this.#hooks.filter((h) => this.#isNow(h, call));
    this.#hooks = this.#hooks.filter((h) => !this.#isNow(h, call));
    for (const { hook } of due) {
      hook(this);
      this.install();
    }
    let fault = null;
    const i = this.#faults.findIndex((f) => this.#isNow(f, call));
    if (i >= 0) {
      fault = this.#faults[i].fault;
      this.#faults.splice(i, 1);
    }
    if (fault === Fault.FENCED) this.#revoked = true;
    if (this.#revoked) throw new Fenced(`${this.#fence} was revoked by the host: the lease is no longer held`);
    if (fault === Fault.UNAVAILABLE) throw new Unavailable('the backend did not answer (injected by FakeHost)');
    if (this.#unavailable) throw new Unavailable('the backend is down (FakeHost.setUnavailable)');
    return fault;
  }

  // ----- the host calls (the SDK's side) ---------------------------------------------

  /**
   * The store's `get`.
   *
   * @param {string} kind
   * @param {string} name
   * @returns {import('./keys.js').RawObject | null}
   */
  get(kind, name) {
    this.#enter('get');
    const key = new ObjectKey(kind, name);
    checkKey(key);
    return this.#objects.raw(key);
  }

  /**
   * The store's `list`.
   *
   * @param {string} kind
   * @param {string | null} after
   * @param {number} limit
   * @returns {import('./keys.js').RawPage}
   */
  list(kind, after, limit) {
    this.#enter('list');
    checkLabel('object kind', kind);
    if (after !== null) checkLabel('list cursor', after);
    return this.#objects.listMatching(this.limits, kind, after, limit, () => true);
  }

  /**
   * The store's `list-selected` (counted, and struck by faults, as a list).
   *
   * @param {string} kind
   * @param {import('./keys.js').Selector} selector
   * @param {string | null} after
   * @param {number} limit
   * @returns {import('./keys.js').RawPage}
   */
  listSelected(kind, selector, after, limit) {
    this.#enter('list');
    const contains = selectorContains(kind, selector);
    checkLabel('object kind', kind);
    if (after !== null) checkLabel('list cursor', after);
    checkSelector(kind, selector, contains);
    return this.#objects.listMatching(this.limits, kind, after, limit, (s) => selects(selector, contains, s));
  }

  /**
   * The store's `commit`: validated, fenced, atomic.
   *
   * @param {readonly import('./transaction.js').Op[]} ops
   * @param {readonly import('./transaction.js').NewEvent[]} events
   * @returns {Committed}
   */
  commit(ops, events) {
    const fault = this.#enter('commit');
    const normalized = validateCommit(this.limits, ops, events);
    for (const op of normalized) this.#checkShardWrite(op);
    const first = normalized.length > 0 ? normalized[0].key : events[0].key;
    if (fault === Fault.CONFLICT) throw new Conflict(first);
    if (fault === Fault.QUOTA_CREATES || fault === Fault.QUOTA_OBJECTS) {
      throw invalid(this.#quotaMessage(fault, first.kind));
    }
    const creates = this.#admitQuota(normalized);
    const { revision, seqs } = this.#objects.apply(normalized, events.length, this.#nowMs);
    if (this.#quota !== null) this.#quota.tokens -= creates;
    const epoch = this.#fence.epoch;
    events.forEach((event, i) => {
      const [type, text] = decodeEventMessage(event.message);
      this.#events.push({ seq: seqs[i], revision, epoch, key: event.key, reason: event.reason, message: event.message, type, text });
    });
    this.#commits.push({ revision, epoch, ops: normalized, events: [...events], eventSeqs: seqs });
    if (fault === Fault.LOST_REPLY) {
      throw new Unavailable('the connection dropped before the reply arrived (injected by FakeHost)');
    }
    return new Committed(revision, seqs);
  }

  /** @param {string} fault @param {string} kind */
  #quotaMessage(fault, kind) {
    const controller = this.#fence.lease;
    if (fault === Fault.QUOTA_CREATES) {
      return (
        `${QUOTA_EXCEEDED_PREFIX}controller=${controller} quota=max_creates_per_second limit=100 ` +
        `retry_after_ms=10: controller ${JSON.stringify(controller)} has spent its creates (injected by ` +
        'FakeHost); nothing was written'
      );
    }
    return (
      `${QUOTA_EXCEEDED_PREFIX}controller=${controller} quota=max_objects_per_kind limit=100000 ` +
      `kind=${kind}: kind ${JSON.stringify(kind)} is full (injected by FakeHost); nothing was written`
    );
  }

  /**
   * The logging host: keeps the line (truncated as the host does) and prints it unless quiet.
   *
   * @param {string} level one of `Level`
   * @param {string} message
   * @returns {void}
   */
  log(level, message) {
    let line = message;
    const bytes = encoder.encode(message);
    if (bytes.length > this.limits.logLineBytes) {
      line = new TextDecoder('utf-8', { fatal: false }).decode(bytes.slice(0, this.limits.logLineBytes));
      // A character cut in half decodes as U+FFFD: drop it, as the host does.
      line = line.replace(/\uFFFD$/, '');
    }
    const epoch = this.#fence.epoch;
    if (!this.quiet) console.error(`[${level} epoch=${epoch}] ${line}`);
    this.#logs.push({ level, message: line, epoch });
  }

  /**
   * The host's outbound HTTP (`wasi:http/outgoing-handler`): admitted as
   * the host admits requests, answered by the scripted receiver, recorded.
   * Throws a `WireHttpError` for what the guest sees as a failure.
   *
   * @param {import('./http-wire.js').WireRequest} request
   * @returns {import('./http-wire.js').WireResponse}
   */
  httpSend(request) {
    return this.#http.serve(request, this);
  }

  /** The settings host: JSON text of an object. @returns {string} */
  settings() {
    return this.#settings;
  }

  /** The wall clock, in ms since the Unix epoch. @returns {number} */
  nowMs() {
    return this.#nowMs;
  }

  // ----- outbound HTTP ---------------------------------------------------------------

  /**
   * Add `entries` to the controller's `http_allow` list, as the host's
   * config would: `scheme://host[:port]` allows every path of that origin,
   * `scheme://host[:port]/prefix/` only paths under the prefix (`/hooks`
   * without the slash allows `/hooks` and `/hooks/…`). Until then every
   * request is denied, as by the host. An entry the host's config check
   * would refuse throws an `Error` naming it.
   *
   * @param {Iterable<string>} entries
   * @returns {void}
   */
  allowHttp(entries) {
    this.#http.allow(typeof entries === 'string' ? [entries] : entries);
  }

  /**
   * Answer every request to `pattern` with `reply` (replacing what was
   * scripted for it before), once its `respondOnce` replies are used up.
   * A pattern is an exact URL as sent (`scheme://authority/path?query`),
   * or a prefix ending in `*` (`http://svc.test/hooks/*`); an exact match
   * wins over a prefix, a longer prefix over a shorter. A request nothing
   * is scripted for is answered `404`.
   *
   * @param {string} pattern
   * @param {import('./fake-http.js').HttpReply} reply
   * @returns {void}
   */
  respond(pattern, reply) {
    this.#http.route(pattern).standing = checkedReply(reply);
  }

  /**
   * Queue `reply` for the next request to `pattern`: one-shot replies are
   * used up in the order queued, before the standing reply of `respond`
   * or `respondWith`.
   *
   * @param {string} pattern as for `respond`
   * @param {import('./fake-http.js').HttpReply} reply
   * @returns {void}
   */
  respondOnce(pattern, reply) {
    this.#http.route(pattern).once.push(checkedReply(reply));
  }

  /**
   * Answer every request to `pattern` with what `responder` computes from
   * it (replacing what was scripted for it before): a receiver with state,
   * such as one that follows the fenced-receiver rule. The responder runs
   * only for requests the receiver gets; it sees the request as recorded,
   * fence headers included.
   *
   * @param {string} pattern as for `respond`
   * @param {(request: import('./fake-http.js').HttpRecord) => import('./fake-http.js').HttpReply} responder
   * @returns {void}
   */
  respondWith(pattern, responder) {
    if (typeof responder !== 'function') throw new TypeError('respondWith takes a function of the request');
    this.#http.route(pattern).standing = responder;
  }

  /**
   * Make the n-th outbound request from now (1 = the next one) fail with
   * `fault` (one of `HttpFault`). Requests count whether or not the host
   * lets them out; a fault aimed at a request the host refuses anyway
   * (not allowed, a bound reached) is used up without effect, except
   * `HttpFault.FENCED`, which the host checks first.
   *
   * @param {number} n
   * @param {string} fault one of `HttpFault`
   * @returns {void}
   */
  failHttp(n, fault) {
    this.#http.fail(n, fault);
  }

  /**
   * Make the next outbound request fail with `fault`: `failHttp(1, fault)`.
   *
   * @param {string} fault one of `HttpFault`
   * @returns {void}
   */
  failNextHttp(fault) {
    this.failHttp(1, fault);
  }

  /**
   * Every request that left the fake host, in order, delivered or not
   * (see `HttpRecord.delivered`). Requests the host refused (not in
   * `http_allow`, the lease lost, a bound reached, a forbidden header)
   * never left and are not here.
   *
   * @returns {import('./fake-http.js').HttpRecord[]}
   */
  httpRequests() {
    return this.#http.records();
  }

  // ----- records, settings and the clock ------------------------------------------

  /** Every commit that applied, in order. @returns {CommitRecord[]} */
  commits() {
    return [...this.#commits];
  }

  /** Every event appended, in order. @returns {EventRecord[]} */
  events() {
    return [...this.#events];
  }

  /**
   * The events with `reason`.
   *
   * @param {string} reason
   * @returns {EventRecord[]}
   */
  eventsWithReason(reason) {
    return this.#events.filter((e) => e.reason === reason);
  }

  /** Every log line, in order. @returns {LogLine[]} */
  logs() {
    return [...this.#logs];
  }

  /** How many store calls of each kind were made. @returns {CallCounts} */
  calls() {
    return { ...this.#calls, total: this.#total() };
  }

  /**
   * Give the controller these settings (a JSON object within the host's bound).
   *
   * @param {Record<string, any>} settings
   * @returns {void}
   */
  setSettings(settings) {
    if (settings === null || typeof settings !== 'object' || Array.isArray(settings)) {
      throw new Error("settings are a table in the host's config, so a JSON object");
    }
    const text = JSON.stringify(settings);
    if (utf8Len(text) > L.MAX_SETTINGS_BYTES) {
      throw new Error(
        `the settings are ${utf8Len(text)} bytes of JSON; the host allows at most ${L.MAX_SETTINGS_BYTES}`,
      );
    }
    this.#settings = text;
  }

  /**
   * As `setSettings`, from JSON text.
   *
   * @param {string} text
   * @returns {void}
   */
  setSettingsJson(text) {
    this.setSettings(JSON.parse(text));
  }

  /** The fake's wall clock. @returns {Date} */
  now() {
    return new Date(this.#nowMs);
  }

  /**
   * Set the wall clock.
   *
   * @param {Date} now
   * @returns {void}
   */
  setNow(now) {
    this.#nowMs = now.getTime();
  }

  /**
   * Move the wall clock forward by `ms` milliseconds; the new now.
   *
   * @param {number} ms
   * @returns {Date}
   */
  advance(ms) {
    this.#nowMs += ms;
    return this.now();
  }
}
