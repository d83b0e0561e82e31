// The example provisioner, in JavaScript: makes buckets in an external
// "cloud" API match the `buckets` objects in the store, over fenced
// outbound HTTP, holding each object with a finalizer until its bucket is
// deleted at the cloud.
//
// It does what controllers/provisioner (Rust) does, and derives the same
// idempotency keys and status (see README.md): deletion goes through a
// finalizer (a user deletes the object; no `deleting` field), and the keys
// come from the object's generation and incarnation, so the provisioner
// records `Pending` in the status before it calls the cloud without
// changing the key a retry sends.
//
// Owns: the decisions (put, record, refuse, delete) and the status it
// writes. Must never: derive a key from the version as read or the epoch,
// record an outcome the cloud did not confirm, or let an object go before
// the cloud confirmed its bucket is gone.

import {
  Conflict,
  ConditionStatus,
  Controller,
  Description,
  Failed,
  NotFound,
  Outcome,
  finalizer,
  getCondition,
  info,
  setCondition,
  warn,
  http,
} from './vendor/leasehold/index.js';

/** The kind of the bucket objects. */
export const BUCKETS = 'buckets';
/** The finalizer that holds a bucket object until its bucket is deleted at the cloud (the Rust provisioner's). */
export const FINALIZER = 'provisioner/bucket';
/** The condition that says whether the cloud holds the object's spec. */
export const READY = 'Ready';
/** The reason of the `Ready` condition while a spec is on its way. */
export const PROVISIONING = 'Provisioning';
/** The reason of the event recorded when the cloud applied a spec. */
export const PROVISIONED = 'Provisioned';
/** The reason of the (warning) event recorded when the cloud refused a spec. */
export const PROVISION_FAILED = 'ProvisionFailed';
/** The reason of the event recorded when a bucket was deleted at the cloud and its object let go. */
export const DEPROVISIONED = 'Deprovisioned';
/** The action name of the `PUT` in its idempotency key, followed by `-INCARNATION` (`action`). */
export const PUT_ACTION = 'put';
/** The action name of the `DELETE` in its idempotency key, followed by `-INCARNATION` (`action`). */
export const DELETE_ACTION = 'delete';
/** What a fenced receiver's 409 body says when the epoch is stale. */
export const STALE_EPOCH = 'stale epoch';

/** How often every bucket is looked at again without a change (buckets in sync cost no request). */
export const RESYNC_PERIOD_MS = 60_000;
/** The first-byte timeout asked of the host for each request (the host caps it at its own bound). */
export const REQUEST_TIMEOUT_MS = 10_000;
/** The requeue delay after a commit conflicted: short, since the object changed, but not zero. */
export const CONFLICT_RETRY_AFTER_MS = 200;
/** How long a bucket whose delete the cloud refused waits before the delete is tried again. */
export const DELETE_REFUSED_RETRY_AFTER_MS = 60_000;
/** The longest `Retry-After` honoured. */
export const MAX_RETRY_AFTER_MS = 3_600_000;
/** Longest status or event message built from a cloud's answer, in bytes of UTF-8. */
export const MAX_MESSAGE_BYTES = 512;

/**
 * Where a bucket stands, as far as the provisioner knows (`status.phase`).
 *
 * @readonly
 * @enum {string}
 */
export const Phase = Object.freeze({
  /** A `PUT` of the current spec is decided and may be out; the cloud has not confirmed it yet. */
  PENDING: 'Pending',
  /** The cloud holds `applied_spec`, and it is the object's spec. */
  READY: 'Ready',
  /** The cloud refused `rejected_spec`; nothing is retried until the spec changes. */
  FAILED: 'Failed',
});

/**
 * The action of an idempotency key: `put-INCARNATION` or
 * `delete-INCARNATION`, as the Rust and Python provisioners spell it. The
 * incarnation tells apart objects that had the same name, whose
 * generations both started at 1.
 *
 * @param {string} name `PUT_ACTION` or `DELETE_ACTION`
 * @param {number} incarnation
 * @returns {string}
 */
export function action(name, incarnation) {
  return `${name}-${incarnation}`;
}

/**
 * The object's incarnation: kept in its status from the provisioner's
 * first status write, else the version as read now (versions are never
 * reused, so a bucket made again under the same name gets a new one).
 *
 * @param {import('./vendor/leasehold/index.js').StoredObject} obj
 * @param {Record<string, any>} status
 * @returns {number}
 */
function incarnationOf(obj, status) {
  return Number.isSafeInteger(status.incarnation) && status.incarnation > 0 ? status.incarnation : obj.version;
}

/**
 * The endpoint of a bucket object, checked; a `TypeError` if it has none.
 *
 * @param {any} value
 * @returns {string}
 */
function endpointOf(value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new TypeError('a bucket is a JSON object');
  if (typeof value.endpoint !== 'string') throw new TypeError('it has no endpoint');
  return value.endpoint;
}

/**
 * The user's part of a bucket object, checked: `{spec: {size_gb, region}, endpoint}`
 * (other fields are allowed and left alone). Throws a `TypeError` saying
 * what is wrong.
 *
 * @param {any} value
 * @returns {{spec: {size_gb: number, region: string}, endpoint: string}}
 */
export function parseBucket(value) {
  const endpoint = endpointOf(value);
  const spec = value.spec;
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) throw new TypeError('spec is not an object');
  const unknown = Object.keys(spec).filter((k) => k !== 'size_gb' && k !== 'region');
  if (unknown.length > 0) throw new TypeError(`spec has unknown field ${JSON.stringify(unknown[0])}`);
  if (!Number.isInteger(spec.size_gb) || spec.size_gb < 0 || spec.size_gb > 0xffff_ffff) {
    throw new TypeError('spec.size_gb is not a whole number of GB');
  }
  if (typeof spec.region !== 'string') throw new TypeError('spec.region is not a string');
  return { spec: { size_gb: spec.size_gb, region: spec.region }, endpoint };
}

/**
 * The URL of bucket `name` at `endpoint`; a `TypeError` if the endpoint is
 * not an `http`/`https` base URL.
 *
 * @param {string} endpoint
 * @param {string} name
 * @returns {string}
 */
export function bucketUrl(endpoint, name) {
  const base = endpoint.replace(/\/+$/, '');
  const scheme = /^https?:\/\//i.exec(base);
  if (scheme === null || base.length === scheme[0].length || /[?#\s]/.test(base)) {
    throw new TypeError(`endpoint ${JSON.stringify(endpoint)} is not an http:// or https:// base URL`);
  }
  return `${base}/${BUCKETS}/${name}`;
}

/**
 * @param {any} a
 * @param {any} b
 * @returns {boolean}
 */
function sameSpec(a, b) {
  return a != null && b != null && a.size_gb === b.size_gb && a.region === b.region;
}

/**
 * Whether the cloud needs a `PUT` of `spec`: one may be out (`Pending`),
 * or the spec is neither confirmed applied nor already refused.
 *
 * @param {{size_gb: number, region: string}} spec
 * @param {Record<string, any>} status
 * @returns {boolean}
 */
export function needsPut(spec, status) {
  if (status.phase === Phase.PENDING) return true;
  if (sameSpec(status.applied_spec, spec)) return false;
  return !(status.phase === Phase.FAILED && sameSpec(status.rejected_spec, spec));
}

const encoder = new TextEncoder();

/**
 * `text` cut to `MAX_MESSAGE_BYTES` of UTF-8, at a character boundary.
 *
 * @param {string} text
 * @returns {string}
 */
export function clip(text) {
  if (encoder.encode(text).length <= MAX_MESSAGE_BYTES) return text;
  let out = '';
  let size = 3;
  for (const c of text) {
    size += encoder.encode(c).length;
    if (size > MAX_MESSAGE_BYTES) break;
    out += c;
  }
  return `${out}...`;
}

/**
 * The answer's `error` field, or its text.
 *
 * @param {import('./vendor/leasehold/http.js').Response} response
 * @returns {string}
 */
function answerText(response) {
  try {
    const error = response.json()?.error;
    if (typeof error === 'string') return error;
  } catch {
    // not JSON: its text below
  }
  try {
    const text = response.text().trim();
    return text === '' ? 'no body' : text;
  } catch {
    return 'a body that is not text';
  }
}

/**
 * `Retry-After` in seconds, as milliseconds bounded to an hour; null if none.
 *
 * @param {import('./vendor/leasehold/http.js').Response} response
 * @returns {number | null}
 */
function retryAfterMs(response) {
  const text = response.header('retry-after')?.trim() ?? '';
  if (!/^\d+$/.test(text)) return null;
  return Math.min(Number(text) * 1000, MAX_RETRY_AFTER_MS);
}

/**
 * Throw for an answer that is not a definite refusal of the request: a
 * stale epoch (`http.Fenced`: a newer tenure has acted at the cloud, so
 * this guest stops), or one worth retrying (5xx, 429, 408, 425, a 409
 * that is not a stale epoch, 1xx/3xx). Return for the other 4xx, which
 * refuse the request itself.
 *
 * @param {import('./vendor/leasehold/http.js').Response} response
 * @param {string} url
 * @param {number} epoch
 * @returns {void}
 */
function throwUnlessRefused(response, url, epoch) {
  const status = response.status;
  let body = null;
  try {
    body = response.json();
  } catch {
    // not JSON
  }
  if (status === 409 && body?.error === STALE_EPOCH) {
    const highest = Number.isInteger(body.highest) ? body.highest : 'not given';
    throw new http.Fenced(`${url} refused epoch ${epoch} as stale (highest accepted: ${highest}): a newer tenure has acted`);
  }
  if (status >= 400 && status < 500 && ![408, 409, 425, 429].includes(status)) return;
  throw new Failed(clip(`${url} answered ${status}: ${answerText(response)}; retrying`), retryAfterMs(response));
}

/**
 * A copy of the object's status, to change without touching what was
 * read; an empty one, with a warning, if someone else wrote it badly
 * (start again from nothing).
 *
 * @param {import('./vendor/leasehold/index.js').StoredObject} obj
 * @returns {Record<string, any>}
 */
function statusOf(obj) {
  const status = obj.status;
  if (status === null || status === undefined) return {};
  try {
    if (typeof status !== 'object' || Array.isArray(status)) throw new TypeError('it is not an object');
    const copy = JSON.parse(JSON.stringify(status));
    // Every condition must read as one, or setCondition would fail on it.
    for (const c of copy.conditions ?? []) getCondition({ conditions: [c] }, c?.type);
    return copy;
  } catch (e) {
    warn(`${obj.key}: ignoring its status: ${e instanceof Error ? e.message : String(e)}`);
    return {};
  }
}

/** The provisioner controller. */
export class Provisioner extends Controller {
  describe() {
    return Description.watching([BUCKETS]).resyncEvery(RESYNC_PERIOD_MS);
  }

  reconcile(ctx, kind, name) {
    if (kind !== BUCKETS) {
      warn(`asked to reconcile ${kind}/${name}, a kind not watched`);
      return Outcome.done();
    }
    const obj = ctx.api(BUCKETS).get(name);
    if (obj === null) return Outcome.done();
    // The endpoint is all a deletion needs; a live bucket needs its spec
    // too. A change to the object wakes us again: retrying the same value
    // would fail the same way. (An object marked while its endpoint is
    // not a URL keeps our finalizer until the endpoint is fixed.)
    let spec = null;
    let url;
    try {
      url = bucketUrl(endpointOf(obj.value), name);
      if (!obj.isDeleting) spec = parseBucket(obj.value).spec;
    } catch (e) {
      warn(`skipping ${obj.key}: ${e instanceof Error ? e.message : String(e)}`);
      return Outcome.done();
    }
    try {
      return finalizer(obj, FINALIZER, {
        apply: (live) => provision(ctx, live, /** @type {{size_gb: number, region: string}} */ (spec), url),
        cleanup: (marked, removal) => deprovision(ctx, marked, url, removal),
      });
    } catch (e) {
      // Changed (or gone) since it was read: decided again from a fresh
      // read. If the spec changed, that is a new generation, a new key.
      if (e instanceof Conflict || e instanceof NotFound) {
        info(`${e.key} changed since it was read; looking again`);
        return Outcome.requeueAfter(CONFLICT_RETRY_AFTER_MS);
      }
      throw e;
    }
  }
}

/**
 * Bring the cloud to `spec`: record `Pending` (a status write: the
 * generation, and so the key, stays), `PUT` the spec under the key of
 * this generation and incarnation, then record what the cloud said.
 *
 * @param {import('./vendor/leasehold/index.js').Context} ctx
 * @param {import('./vendor/leasehold/index.js').StoredObject} obj
 * @param {{size_gb: number, region: string}} spec
 * @param {string} url
 * @returns {Outcome}
 */
function provision(ctx, obj, spec, url) {
  const status = statusOf(obj);
  if (!needsPut(spec, status)) return Outcome.done();
  const generation = obj.generation;
  const incarnation = incarnationOf(obj, status);
  const sending = `sending the spec of generation ${generation} to the cloud`;
  const before = JSON.stringify(status);
  status.phase = Phase.PENDING;
  status.observed_generation = generation;
  status.incarnation = incarnation;
  status.message = sending;
  setCondition(status, {
    type: READY,
    status: ConditionStatus.UNKNOWN,
    reason: PROVISIONING,
    message: sending,
    observedGeneration: generation,
  });
  if (JSON.stringify(status) !== before) {
    // Conditional on the generation read: a new spec since conflicts.
    ctx.transaction().updateStatus(obj, status).commit();
  }
  const key = http.IdempotencyKey.forAction(BUCKETS, obj.name, generation, action(PUT_ACTION, incarnation));
  const response = http.Request.put(url).json(spec).idempotencyKey(key).timeout(REQUEST_TIMEOUT_MS).send();
  const epoch = ctx.fence.epoch;
  if (response.isSuccess) {
    let cloudGeneration = null;
    try {
      const g = response.json()?.generation;
      if (Number.isInteger(g)) cloudGeneration = g;
    } catch {
      // an answer without a body: the generation is unknown
    }
    const replayed = response.header('idempotency-replayed') === 'true';
    const message =
      `applied by the cloud${cloudGeneration === null ? '' : ` at generation ${cloudGeneration}`} ` +
      `(epoch ${epoch}${replayed ? '; the answer to an earlier attempt, replayed' : ''})`;
    const ready = { ...status, phase: Phase.READY, applied_spec: spec, observed_generation: generation, message };
    if (cloudGeneration === null) delete ready.cloud_generation;
    else ready.cloud_generation = cloudGeneration;
    delete ready.rejected_spec;
    setCondition(ready, { type: READY, status: ConditionStatus.TRUE, reason: PROVISIONED, message, observedGeneration: generation });
    ctx.transaction().updateStatus(obj, ready).event(BUCKETS, obj.name, PROVISIONED, message).commit();
    info(`${obj.key}: ${message}`);
    return Outcome.done();
  }
  throwUnlessRefused(response, url, epoch);
  // A definite refusal of this spec: record it, do not retry it.
  const message = clip(`the cloud refused the spec with ${response.status}: ${answerText(response)}`);
  const failed = { ...status, phase: Phase.FAILED, rejected_spec: spec, observed_generation: generation, message };
  setCondition(failed, { type: READY, status: ConditionStatus.FALSE, reason: PROVISION_FAILED, message, observedGeneration: generation });
  ctx.transaction().updateStatus(obj, failed).warning(BUCKETS, obj.name, PROVISION_FAILED, message).commit();
  warn(`${obj.key}: ${message}`);
  return Outcome.done();
}

/**
 * `DELETE` the bucket at the cloud under the key of this generation (the
 * deletion mark's: nothing moves it until the object goes) and
 * incarnation (the marked version if the object never had a status), and
 * put the `Deprovisioned` event into the commit that removes the
 * finalizer. Sent even for a bucket never provisioned: a
 * deposed leader's `PUT` may still be on its way, and a `DELETE` at the
 * current epoch makes the cloud refuse it. A 404 counts as deleted.
 *
 * @param {import('./vendor/leasehold/index.js').Context} ctx
 * @param {import('./vendor/leasehold/index.js').StoredObject} obj
 * @param {string} url
 * @param {import('./vendor/leasehold/index.js').Transaction} removal
 * @returns {Outcome}
 */
function deprovision(ctx, obj, url, removal) {
  const incarnation = incarnationOf(obj, statusOf(obj));
  const key = http.IdempotencyKey.forAction(BUCKETS, obj.name, obj.generation, action(DELETE_ACTION, incarnation));
  const response = http.Request.delete(url).idempotencyKey(key).timeout(REQUEST_TIMEOUT_MS).send();
  const epoch = ctx.fence.epoch;
  if (!response.isSuccess && response.status !== 404) {
    throwUnlessRefused(response, url, epoch);
    // Refused: the object stays, marked and held, for a person to look
    // at; the delete is tried again now and then, not at once.
    const message = clip(`the cloud refused the delete with ${response.status}: ${answerText(response)}`);
    warn(`${obj.key}: ${message}`);
    throw new Failed(message, DELETE_REFUSED_RETRY_AFTER_MS);
  }
  const message = `deleted at the cloud (${response.status === 404 ? 'it was not there' : 'confirmed'}, epoch ${epoch})`;
  removal.event(BUCKETS, obj.name, DEPROVISIONED, message);
  info(`${obj.key}: ${message}`);
  return Outcome.done();
}
