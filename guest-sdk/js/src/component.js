/**
 * The adapter between the SDK and the component's WIT bindings.
 *
 * Only a component imports this module: it imports the interfaces of the
 * world `leasehold:controller/controller@0.4.0` by their WIT names, which
 * componentize-js binds when it builds the component. A controller's app
 * module exports its controller with
 *
 * ```js
 * import { exportController } from 'leasehold/component';
 * export const reconciler = exportController(() => new MyController());
 * ```
 *
 * `WitHost` answers the SDK's host calls with the WIT imports (outbound
 * HTTP through `wasi:http/outgoing-handler`, in `component-http.js`); the
 * `reconciler` object `exportController` returns is what the component
 * exports as `leasehold:controller/reconciler`. Everything else in the SDK
 * is the same code the tests run natively against `FakeHost`.
 *
 * @module
 */

import { log as witLog } from 'leasehold:controller/logging@0.4.0';
import { get as witSettings } from 'leasehold:controller/settings@0.4.0';
import * as store from 'leasehold:controller/store@0.4.0';
import { current, shard as witShard } from 'leasehold:controller/tenure@0.4.0';
import { now as wallClock } from 'wasi:clocks/wall-clock@0.2.12';

import { sendThroughWasi } from './component-http.js';
import { Reason, dispatch } from './controller.js';
import { Conflict, Fenced, NotFound, Unavailable, invalid } from './errors.js';
import { Fence } from './fence.js';
import { install } from './host.js';
import { Metadata, ObjectKey } from './keys.js';
import { Shard } from './shard.js';
import { Check, Committed, Create, CreateWith, Delete, Replace, Status, Update } from './transaction.js';

/**
 * A u64 from the host as a JS number (exact below 2^53, which versions,
 * generations, epochs and times stay under).
 *
 * @param {bigint} value
 * @returns {number}
 */
function num(value) {
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new Unavailable(`the host sent ${value}, beyond the integers JavaScript holds exactly`);
  }
  return Number(value);
}

/**
 * The SDK's error for a WIT `store-error` thrown by an import.
 *
 * @param {unknown} thrown
 * @returns {Error}
 */
function storeError(thrown) {
  const e = /** @type {any} */ (thrown);
  const err = e !== null && typeof e === 'object' && 'payload' in e ? e.payload : e;
  switch (err?.tag) {
    case 'fenced':
      return new Fenced(err.val);
    case 'conflict':
      return new Conflict(new ObjectKey(err.val.kind, err.val.name));
    case 'not-found':
      return new NotFound(new ObjectKey(err.val.kind, err.val.name));
    case 'invalid':
      return invalid(err.val);
    case 'unavailable':
      return new Unavailable(err.val);
    default:
      return new Unavailable(`the host answered an unknown store error: ${String(err?.tag ?? e)}`);
  }
}

/**
 * @template T
 * @param {() => T} call
 * @returns {T}
 */
function storeCall(call) {
  try {
    return call();
  } catch (e) {
    throw storeError(e);
  }
}

/**
 * @param {import('leasehold:controller/types@0.4.0').Metadata} meta
 * @returns {Metadata}
 */
function metaIn(meta) {
  return new Metadata({
    labels: Object.fromEntries(meta.labels),
    owner: meta.owner === undefined ? null : new ObjectKey(meta.owner.kind, meta.owner.name),
    finalizers: meta.finalizers,
  });
}

/**
 * @param {Metadata} meta
 * @returns {import('leasehold:controller/types@0.4.0').Metadata}
 */
function metaOut(meta) {
  return {
    labels: Object.entries(meta.labels),
    owner: meta.owner === null ? undefined : { kind: meta.owner.kind, name: meta.owner.name },
    finalizers: [...meta.finalizers],
  };
}

/**
 * @param {import('leasehold:controller/types@0.4.0').Object} obj
 * @returns {import('./keys.js').RawObject}
 */
function objectIn(obj) {
  return {
    kind: obj.kind,
    name: obj.name,
    version: num(obj.version),
    value: obj.value,
    metadata: metaIn(obj.metadata),
    status: obj.status ?? null,
    generation: num(obj.generation),
    deletingSinceMs: obj.deletingSince === undefined ? null : num(obj.deletingSince),
  };
}

/**
 * @param {import('leasehold:controller/store@0.4.0').ObjectPage} page
 * @returns {import('./keys.js').RawPage}
 */
function pageIn(page) {
  return { objects: page.objects.map(objectIn), next: page.next ?? null };
}

/**
 * @param {import('./transaction.js').Op} op
 * @returns {import('leasehold:controller/store@0.4.0').Op}
 */
function opOut(op) {
  const { kind, name } = op.key;
  if (op instanceof Create) return { tag: 'create', val: { kind, name, value: op.value } };
  if (op instanceof Update) {
    return { tag: 'update', val: { kind, name, expectedVersion: BigInt(op.expectedVersion), value: op.value } };
  }
  if (op instanceof Delete) return { tag: 'delete', val: { kind, name, expectedVersion: BigInt(op.expectedVersion) } };
  if (op instanceof CreateWith) {
    return { tag: 'create-with', val: { kind, name, value: op.value, metadata: metaOut(op.metadata) } };
  }
  if (op instanceof Replace) {
    return {
      tag: 'replace',
      val: {
        kind,
        name,
        expectedVersion: BigInt(op.expectedVersion),
        value: op.value ?? undefined,
        metadata: op.metadata === null ? undefined : metaOut(op.metadata),
      },
    };
  }
  if (op instanceof Status) {
    return {
      tag: 'status',
      val: {
        kind,
        name,
        expectedGeneration: op.expectedGeneration === null ? undefined : BigInt(op.expectedGeneration),
        status: op.status ?? undefined,
      },
    };
  }
  if (op instanceof Check) return { tag: 'check', val: { kind, name, expectedVersion: BigInt(op.expectedVersion) } };
  throw new TypeError(`not a store operation: ${/** @type {any} */ (op)?.constructor?.name}`);
}

/** Answers the SDK's host calls with the component's WIT imports. */
export class WitHost {
  /**
   * The store's `get`.
   *
   * @param {string} kind
   * @param {string} name
   * @returns {import('./keys.js').RawObject | null}
   */
  get(kind, name) {
    const found = storeCall(() => store.get(kind, name));
    return found === undefined ? null : objectIn(found);
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
    return pageIn(storeCall(() => store.list(kind, after ?? undefined, limit)));
  }

  /**
   * The store's `list-selected`.
   *
   * @param {string} kind
   * @param {import('./keys.js').Selector} selector
   * @param {string | null} after
   * @param {number} limit
   * @returns {import('./keys.js').RawPage}
   */
  listSelected(kind, selector, after, limit) {
    const wire = { labels: Object.entries(selector.labels), contains: selector.containsJson() ?? undefined };
    return pageIn(storeCall(() => store.listSelected(kind, wire, after ?? undefined, limit)));
  }

  /**
   * The store's `commit`.
   *
   * @param {readonly import('./transaction.js').Op[]} ops
   * @param {readonly import('./transaction.js').NewEvent[]} events
   * @returns {Committed}
   */
  commit(ops, events) {
    const wireOps = ops.map(opOut);
    const wireEvents = events.map((e) => ({ kind: e.key.kind, name: e.key.name, reason: e.reason, message: e.message }));
    const done = storeCall(() => store.commit(wireOps, wireEvents));
    return new Committed(num(done.revision), Array.from(done.eventSeqs, (s) => num(BigInt(s))));
  }

  /** The tenure's fence. @returns {Fence} */
  fence() {
    const f = current();
    return new Fence(f.cluster, f.lease, num(f.epoch), f.holder);
  }

  /** The tenure's shard. @returns {Shard} */
  shard() {
    const s = witShard();
    return new Shard(s.index, s.count);
  }

  /**
   * The logging host.
   *
   * @param {string} level one of `Level`
   * @param {string} message
   * @returns {void}
   */
  log(level, message) {
    witLog(/** @type {any} */ (level), message);
  }

  /** The settings host. @returns {string} */
  settings() {
    return witSettings();
  }

  /**
   * One outbound request through `wasi:http/outgoing-handler`; a
   * `WireHttpError` if it failed.
   *
   * @param {import('./http-wire.js').WireRequest} request
   * @returns {import('./http-wire.js').WireResponse}
   */
  httpSend(request) {
    return sendThroughWasi(request);
  }

  /** `wasi:clocks/wall-clock` in ms since the Unix epoch. @returns {number} */
  nowMs() {
    const t = wallClock();
    return num(t.seconds) * 1000 + Math.floor(t.nanoseconds / 1_000_000);
  }
}

/**
 * @param {import('./controller.js').Description} d
 * @returns {import('leasehold:controller/reconciler@0.4.0').Description}
 */
function descriptionOut(d) {
  return {
    watches: [...d.watches],
    resyncPeriodMs: BigInt(d.resyncMs ?? 0),
    related: d.related.map((w) => ({
      kind: w.kind,
      mapping: w.byLabel
        ? { tag: 'label', val: { key: w.labelKey ?? '', targetKind: w.targetKind ?? '' } }
        : { tag: 'owner', val: w.ownerKind ?? undefined },
    })),
    shardLabel: d.shardLabel ?? undefined,
    everyShard: [...d.everyShard],
    settingsSchema: d.settingsSchema ?? undefined,
  };
}

/**
 * The value an exported function throws to return the WIT `err` case.
 *
 * @param {any} value the `reconcile-error`
 * @returns {{payload: any}}
 */
function err(value) {
  return { payload: value };
}

/**
 * The `reconciler` export, serving `factory()`'s controller.
 *
 * One controller is created on first use and kept for the guest
 * instance's life (one tenure). A `Fenced` error becomes the WIT
 * `reconcile-error.fenced`; every other failure becomes `failed` with the
 * delay the controller's `errorPolicy` chose.
 *
 * @param {() => import('./controller.js').Controller} factory
 * @returns {typeof import('leasehold:controller/reconciler@0.4.0')}
 */
export function exportController(factory) {
  /** @type {import('./controller.js').Controller | null} */
  let controller = null;
  const get = () => {
    if (controller === null) {
      install(new WitHost());
      controller = factory();
    }
    return controller;
  };
  const known = new Set(Object.values(Reason));
  return {
    describe() {
      return descriptionOut(get().describe());
    },
    reconcile(kind, name, reason) {
      // A cause this SDK does not know yet: a reason is a hint, so
      // reconcile as for a change (read the object, decide).
      const why = known.has(reason?.tag) ? reason.tag : Reason.CHANGE;
      const reply = dispatch(get(), kind, name, why);
      if (reply.kind === 'done') return { tag: 'done' };
      if (reply.kind === 'requeue') return { tag: 'requeue-after', val: BigInt(reply.delayMs ?? 0) };
      if (reply.kind === 'fenced') throw err({ tag: 'fenced' });
      const failure = {
        message: reply.message ?? '',
        retryAfterMs: reply.delayMs === null ? undefined : BigInt(reply.delayMs),
      };
      throw err({ tag: 'failed', val: failure });
    },
  };
}
