/**
 * The controller: what it watches, how it reconciles, how it fails.
 *
 * @module
 */

import { untilMs } from './clock.js';
import { LeaseholdError } from './errors.js';
import { fence } from './fence.js';
import { Api } from './objects.js';
import { shard } from './shard.js';
import { Transaction } from './transaction.js';

/**
 * A kind whose changes reconcile another object, with the reason `related`.
 *
 * Built with `Description.owns` (a change maps to the changed object's
 * owner, of `ownerKind` only if given) or `Description.relatedByLabel` (an
 * object labelled `labelKey=V` maps to `targetKind/V`).
 */
export class RelatedWatch {
  /**
   * @param {string} kind the kind whose changes are mapped, e.g. `pods`
   * @param {string | null} [ownerKind] for an owner mapping: only owners of this kind (null: any)
   * @param {string | null} [labelKey] for a label mapping: the label key whose value names the target
   * @param {string | null} [targetKind] for a label mapping: the kind of the objects the label's value names
   */
  constructor(kind, ownerKind = null, labelKey = null, targetKind = null) {
    /** @type {string} */ this.kind = kind;
    /** @type {string | null} */ this.ownerKind = ownerKind;
    /** @type {string | null} */ this.labelKey = labelKey;
    /** @type {string | null} */ this.targetKind = targetKind;
    Object.freeze(this);
  }

  /** True for a label mapping, false for an owner mapping. @returns {boolean} */
  get byLabel() {
    return this.labelKey !== null;
  }
}

/**
 * What the controller needs: the kinds it watches, its resync period, the
 * related kinds whose changes reconcile the objects they map to, and how
 * its objects are divided when it runs sharded.
 *
 * `resyncMs` of null (or 0) disables the periodic resync; a resync still
 * happens at the start of each tenure. `shardLabel` and `everyShard`
 * matter only to a sharded controller (see `Shard`); an unsharded one runs
 * shard 0 of 1, which owns every object.
 */
export class Description {
  /**
   * @param {string[]} watches the kinds whose changes trigger a reconcile
   * @param {number | null} [resyncMs]
   * @param {RelatedWatch[]} [related]
   * @param {string | null} [shardLabel] a label whose value decides the shard of an object carrying it (null: none)
   * @param {string[]} [everyShard] kinds every shard watches (each must also be in `watches`: `watchOnEveryShard` adds it)
   * @param {string | null} [settingsSchema] the JSON Schema (JSON text) of the controller's settings (null: unchecked)
   */
  constructor(
    watches,
    resyncMs = null,
    related = [],
    shardLabel = null,
    everyShard = [],
    settingsSchema = null,
  ) {
    /** @type {readonly string[]} */ this.watches = Object.freeze([...watches]);
    /** @type {number | null} */ this.resyncMs = resyncMs;
    /** @type {readonly RelatedWatch[]} */ this.related = Object.freeze([...related]);
    /**
     * A label whose value decides the shard of an object carrying it, e.g.
     * `example.com/tenant`; null: every object goes by its `kind/name`.
     *
     * @type {string | null}
     */
    this.shardLabel = shardLabel;
    /** Kinds every shard watches, whatever shard their objects belong to (each also in `watches`). @type {readonly string[]} */
    this.everyShard = Object.freeze([...everyShard]);
    /**
     * The JSON Schema (JSON text) of the controller's settings, which the
     * host checks the config's `[controllers.settings]` against (see
     * `settingsSchemaOf`); null: unchecked.
     *
     * @type {string | null}
     */
    this.settingsSchema = settingsSchema;
    Object.freeze(this);
  }

  /**
   * A description watching `kinds`, without periodic resync.
   *
   * @param {string[]} kinds
   * @returns {Description}
   */
  static watching(kinds) {
    return new Description(kinds);
  }

  /**
   * A copy with `changes` applied.
   *
   * @param {{watches?: string[], resyncMs?: number | null, related?: RelatedWatch[], shardLabel?: string | null, everyShard?: string[], settingsSchema?: string | null}} changes
   * @returns {Description}
   */
  #with(changes) {
    return new Description(
      changes.watches ?? [...this.watches],
      'resyncMs' in changes ? (changes.resyncMs ?? null) : this.resyncMs,
      changes.related ?? [...this.related],
      'shardLabel' in changes ? (changes.shardLabel ?? null) : this.shardLabel,
      changes.everyShard ?? [...this.everyShard],
      'settingsSchema' in changes ? (changes.settingsSchema ?? null) : this.settingsSchema,
    );
  }

  /**
   * A copy declaring the shape of the controller's settings as a JSON
   * Schema (an object, or its JSON text): `leasehold check`, the host's
   * start and a reload refuse `[controllers.settings]` that do not fit it,
   * naming every wrong, missing or unknown key. The subset the host
   * understands is the WIT's `description.settings-schema` (types,
   * properties, required, additionalProperties, items, enum, bounds,
   * anyOf/oneOf/allOf, local $ref).
   *
   * @param {object | string} schema
   * @returns {Description}
   */
  settingsSchemaOf(schema) {
    const text = typeof schema === 'string' ? schema : JSON.stringify(schema);
    return this.#with({ settingsSchema: text });
  }

  /**
   * A copy that resyncs every watched object every `ms` milliseconds.
   *
   * @param {number} ms
   * @returns {Description}
   */
  resyncEvery(ms) {
    return this.#with({ resyncMs: ms });
  }

  /**
   * A copy where a change of a `kind` object reconciles its owner (of `ownerKind` only, if given).
   *
   * @param {string} kind
   * @param {string | null} [ownerKind]
   * @returns {Description}
   */
  owns(kind, ownerKind = null) {
    return this.#with({ related: [...this.related, new RelatedWatch(kind, ownerKind)] });
  }

  /**
   * A copy where a change of a `kind` object labelled `labelKey=V` reconciles `targetKind/V`.
   *
   * @param {string} kind
   * @param {string} labelKey
   * @param {string} targetKind
   * @returns {Description}
   */
  relatedByLabel(kind, labelKey, targetKind) {
    const watch = new RelatedWatch(kind, null, labelKey, targetKind);
    return this.#with({ related: [...this.related, watch] });
  }

  /**
   * A copy where an object carrying the label `labelKey` belongs to the
   * shard its value picks, so that objects which belong together (a
   * tenant's tasks and quotas, all labelled with the tenant) fall into one
   * shard.
   *
   * @param {string} labelKey
   * @returns {Description}
   */
  shardByLabel(labelKey) {
    return this.#with({ shardLabel: labelKey });
  }

  /**
   * A copy where every shard watches, and resyncs, every object of `kind`
   * (watched too, if it is not yet): shared objects each shard decides on,
   * such as the nodes every shard's tasks are placed on. Writes to another
   * shard's objects must still be conditional (see `Shard`). The same as
   * watching `kind` for an unsharded controller.
   *
   * @param {string} kind
   * @returns {Description}
   */
  watchOnEveryShard(kind) {
    return this.#with({
      watches: this.watches.includes(kind) ? [...this.watches] : [...this.watches, kind],
      everyShard: this.everyShard.includes(kind) ? [...this.everyShard] : [...this.everyShard, kind],
    });
  }
}

/** A successful reconcile's result: done, or the timer `requeueAfterMs`. */
export class Outcome {
  /** @param {number | null} requeueAfterMs null: nothing to do until the object changes */
  constructor(requeueAfterMs) {
    /** @type {number | null} */ this.requeueAfterMs = requeueAfterMs;
    Object.freeze(this);
  }

  /** Nothing more to do until the object changes. @returns {Outcome} */
  static done() {
    return new Outcome(null);
  }

  /**
   * Reconcile the same key again in `ms` milliseconds (capped at a day by the host).
   *
   * @param {number} ms
   * @returns {Outcome}
   */
  static requeueAfter(ms) {
    return new Outcome(Math.max(0, Math.trunc(ms)));
  }

  /**
   * Reconcile the same key again at the wall-clock time `at`.
   *
   * @param {Date} at
   * @returns {Outcome}
   */
  static wakeAt(at) {
    return new Outcome(untilMs(at));
  }
}

/** What `Controller.errorPolicy` decides: the host's backoff, or a delay. */
export class Retry {
  /** @param {number | null} afterMs null: the host's exponential backoff */
  constructor(afterMs) {
    /** @type {number | null} */ this.afterMs = afterMs;
    Object.freeze(this);
  }

  /** Let the host back off exponentially. @returns {Retry} */
  static backoff() {
    return new Retry(null);
  }

  /**
   * Retry after `ms` milliseconds.
   *
   * @param {number} ms
   * @returns {Retry}
   */
  static after(ms) {
    return new Retry(Math.max(0, Math.trunc(ms)));
  }
}

/**
 * Why the host calls `reconcile`: a hint, never a promise about the object.
 *
 * @readonly
 * @enum {string}
 */
export const Reason = Object.freeze({
  /** The object itself was created, updated or deleted. */
  CHANGE: 'change',
  /** The controller's own timer came due. */
  REQUEUE: 'requeue',
  /** A full resync (tenure start, resync period, queue overflow). */
  RESYNC: 'resync',
  /** The previous reconcile of this key failed and its backoff passed. */
  RETRY: 'retry',
  /** An object of a related kind that maps to this key changed. */
  RELATED: 'related',
});

/** @type {Record<string, number>} */
const RANK = { resync: 0, requeue: 1, retry: 2, related: 3, change: 4 };

/**
 * The stronger of two causes: change, related, retry, requeue, then resync.
 *
 * @param {string} a one of `Reason`
 * @param {string} b one of `Reason`
 * @returns {string}
 */
export function strongest(a, b) {
  return RANK[b] > RANK[a] ? b : a;
}

/**
 * What the host hears from one reconcile (`dispatch`'s result).
 *
 * `kind` is `done`, `requeue`, `fenced` or `failed`; `delayMs` is the
 * requeue delay or the failure's retry delay (null: the host's backoff).
 */
export class Reply {
  /**
   * @param {'done' | 'requeue' | 'fenced' | 'failed'} kind
   * @param {number | null} [delayMs]
   * @param {string | null} [message]
   */
  constructor(kind, delayMs = null, message = null) {
    /** @type {'done' | 'requeue' | 'fenced' | 'failed'} */ this.kind = kind;
    /** @type {number | null} */ this.delayMs = delayMs;
    /** @type {string | null} */ this.message = message;
    Object.freeze(this);
  }

  /** The reply of a reconcile that is done. @returns {Reply} */
  static done() {
    return new Reply('done');
  }

  /**
   * The reply of a reconcile that asked to be requeued after `ms`.
   *
   * @param {number} ms
   * @returns {Reply}
   */
  static requeue(ms) {
    return new Reply('requeue', ms);
  }

  /** The reply of a reconcile that ended fenced. @returns {Reply} */
  static fenced() {
    return new Reply('fenced');
  }

  /** True if the reconcile ended fenced. @returns {boolean} */
  get isFenced() {
    return this.kind === 'fenced';
  }

  /** True if the reconcile failed (not fenced). @returns {boolean} */
  get isFailed() {
    return this.kind === 'failed';
  }
}

/** What a reconcile may use besides the key: the reason, the fence, the shard, readers, transactions. */
export class Context {
  /** @type {import('./fence.js').Fence | null} */
  #fence = null;

  /** @param {string} [reason] one of `Reason` */
  constructor(reason = Reason.CHANGE) {
    /** Why this reconcile was called (one of `Reason`). @type {string} */
    this.reason = reason;
  }

  /** The tenure's fence (read from the host on first use). @returns {import('./fence.js').Fence} */
  get fence() {
    this.#fence ??= fence();
    return this.#fence;
  }

  /**
   * The shard of its controller this tenure runs (0 of 1 unless sharded),
   * asked of the host on each use.
   *
   * @returns {import('./shard.js').Shard}
   */
  get shard() {
    return shard();
  }

  /**
   * A reader of `kind`, untyped or decoding with `decode`.
   *
   * @param {string} kind
   * @param {((value: any) => any) | null} [decode]
   * @returns {Api}
   */
  api(kind, decode = null) {
    return new Api(kind, decode);
  }

  /**
   * A reader of `kindType.KIND` decoding each value as `kindType`.
   *
   * @template {typeof import('./objects.js').Kind} K
   * @param {K} kindType
   * @returns {Api<InstanceType<K>>}
   */
  typed(kindType) {
    return Api.typed(kindType);
  }

  /** A new, empty transaction. @returns {Transaction} */
  transaction() {
    return new Transaction();
  }
}

/**
 * The base class of a controller: override `describe` and `reconcile`.
 *
 * One instance serves one tenure: the host makes one call at a time
 * (`describe`, then reconciles one after another). `reconcile` returns an
 * `Outcome` or throws. A `Fenced` error (the lease is gone) is reported as
 * fenced whatever `errorPolicy` says; any other error is a failure the
 * host retries after `errorPolicy`'s delay.
 */
export class Controller {
  /**
   * The kinds this controller watches and its resync period.
   *
   * @returns {Description}
   */
  describe() {
    throw new Error(`${this.constructor.name}.describe is not implemented`);
  }

  /**
   * Bring `kind/name` to its desired state (it may have been deleted: read it).
   *
   * @param {Context} ctx
   * @param {string} kind
   * @param {string} name
   * @returns {Outcome}
   */
  // eslint-disable-next-line no-unused-vars
  reconcile(ctx, kind, name) {
    throw new Error(`${this.constructor.name}.reconcile is not implemented (${kind}/${name})`);
  }

  /**
   * When to retry after `error`: by default the error's own hint, else backoff.
   *
   * @param {Context} _ctx
   * @param {string} _kind
   * @param {string} _name
   * @param {unknown} error
   * @returns {Retry}
   */
  errorPolicy(_ctx, _kind, _name, error) {
    const hint = error instanceof LeaseholdError ? error.retryAfterMs : null;
    return hint === null ? Retry.backoff() : Retry.after(hint);
  }
}

/**
 * Run one reconcile and turn its result into the host's reply.
 *
 * @param {Controller} controller
 * @param {string} kind
 * @param {string} name
 * @param {string} reason one of `Reason`
 * @returns {Reply}
 */
export function dispatch(controller, kind, name, reason) {
  const ctx = new Context(reason);
  let outcome;
  try {
    outcome = controller.reconcile(ctx, kind, name);
  } catch (error) {
    if (error instanceof LeaseholdError && error.isFenced) return Reply.fenced();
    const retry = controller.errorPolicy(ctx, kind, name, error);
    let message;
    if (error instanceof LeaseholdError) message = error.message;
    else if (error instanceof Error) message = `${error.name}: ${error.message}`;
    else message = `thrown: ${String(error)}`;
    return new Reply('failed', retry.afterMs, message);
  }
  if (!(outcome instanceof Outcome)) {
    /** @type {any} */
    const returned = outcome;
    const what = returned === null || typeof returned !== 'object' ? String(returned) : returned.constructor?.name;
    return new Reply('failed', null, `reconcile of ${kind}/${name} returned ${what}, not an Outcome`);
  }
  if (outcome.requeueAfterMs === null) return Reply.done();
  return Reply.requeue(outcome.requeueAfterMs);
}
