/**
 * The controller: what it watches, how it reconciles, how it fails.
 *
 * @module
 */
import { Api } from './objects.js';
import { Transaction } from './transaction.js';
/**
 * A kind whose changes reconcile another object, with the reason `related`.
 *
 * Built with `Description.owns` (a change maps to the changed object's
 * owner, of `ownerKind` only if given) or `Description.relatedByLabel` (an
 * object labelled `labelKey=V` maps to `targetKind/V`).
 */
export declare class RelatedWatch {
    /** @type {string} */ kind: string;
    /** @type {string | null} */ ownerKind: string | null;
    /** @type {string | null} */ labelKey: string | null;
    /** @type {string | null} */ targetKind: string | null;
    /**
     * @param {string} kind the kind whose changes are mapped, e.g. `pods`
     * @param {string | null} [ownerKind] for an owner mapping: only owners of this kind (null: any)
     * @param {string | null} [labelKey] for a label mapping: the label key whose value names the target
     * @param {string | null} [targetKind] for a label mapping: the kind of the objects the label's value names
     */
    constructor(kind: string, ownerKind?: string | null, labelKey?: string | null, targetKind?: string | null);
    /** True for a label mapping, false for an owner mapping. @returns {boolean} */
    get byLabel(): boolean;
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
export declare class Description {
    #private;
    /** @type {readonly string[]} */ watches: readonly string[];
    /** @type {number | null} */ resyncMs: number | null;
    /** @type {readonly RelatedWatch[]} */ related: readonly RelatedWatch[];
    /**
     * A label whose value decides the shard of an object carrying it, e.g.
     * `example.com/tenant`; null: every object goes by its `kind/name`.
     *
     * @type {string | null}
     */
    shardLabel: string | null;
    /** Kinds every shard watches, whatever shard their objects belong to (each also in `watches`). @type {readonly string[]} */
    everyShard: readonly string[];
    /**
     * The JSON Schema (JSON text) of the controller's settings, which the
     * host checks the config's `[controllers.settings]` against (see
     * `settingsSchemaOf`); null: unchecked.
     *
     * @type {string | null}
     */
    settingsSchema: string | null;
    /**
     * @param {string[]} watches the kinds whose changes trigger a reconcile
     * @param {number | null} [resyncMs]
     * @param {RelatedWatch[]} [related]
     * @param {string | null} [shardLabel] a label whose value decides the shard of an object carrying it (null: none)
     * @param {string[]} [everyShard] kinds every shard watches (each must also be in `watches`: `watchOnEveryShard` adds it)
     * @param {string | null} [settingsSchema] the JSON Schema (JSON text) of the controller's settings (null: unchecked)
     */
    constructor(watches: string[], resyncMs?: number | null, related?: RelatedWatch[], shardLabel?: string | null, everyShard?: string[], settingsSchema?: string | null);
    /**
     * A description watching `kinds`, without periodic resync.
     *
     * @param {string[]} kinds
     * @returns {Description}
     */
    static watching(kinds: string[]): Description;
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
    settingsSchemaOf(schema: object | string): Description;
    /**
     * A copy that resyncs every watched object every `ms` milliseconds.
     *
     * @param {number} ms
     * @returns {Description}
     */
    resyncEvery(ms: number): Description;
    /**
     * A copy where a change of a `kind` object reconciles its owner (of `ownerKind` only, if given).
     *
     * @param {string} kind
     * @param {string | null} [ownerKind]
     * @returns {Description}
     */
    owns(kind: string, ownerKind?: string | null): Description;
    /**
     * A copy where a change of a `kind` object labelled `labelKey=V` reconciles `targetKind/V`.
     *
     * @param {string} kind
     * @param {string} labelKey
     * @param {string} targetKind
     * @returns {Description}
     */
    relatedByLabel(kind: string, labelKey: string, targetKind: string): Description;
    /**
     * A copy where an object carrying the label `labelKey` belongs to the
     * shard its value picks, so that objects which belong together (a
     * tenant's tasks and quotas, all labelled with the tenant) fall into one
     * shard.
     *
     * @param {string} labelKey
     * @returns {Description}
     */
    shardByLabel(labelKey: string): Description;
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
    watchOnEveryShard(kind: string): Description;
}
/** A successful reconcile's result: done, or the timer `requeueAfterMs`. */
export declare class Outcome {
    /** @type {number | null} */ requeueAfterMs: number | null;
    /** @param {number | null} requeueAfterMs null: nothing to do until the object changes */
    constructor(requeueAfterMs: number | null);
    /** Nothing more to do until the object changes. @returns {Outcome} */
    static done(): Outcome;
    /**
     * Reconcile the same key again in `ms` milliseconds (capped at a day by the host).
     *
     * @param {number} ms
     * @returns {Outcome}
     */
    static requeueAfter(ms: number): Outcome;
    /**
     * Reconcile the same key again at the wall-clock time `at`.
     *
     * @param {Date} at
     * @returns {Outcome}
     */
    static wakeAt(at: Date): Outcome;
}
/** What `Controller.errorPolicy` decides: the host's backoff, or a delay. */
export declare class Retry {
    /** @type {number | null} */ afterMs: number | null;
    /** @param {number | null} afterMs null: the host's exponential backoff */
    constructor(afterMs: number | null);
    /** Let the host back off exponentially. @returns {Retry} */
    static backoff(): Retry;
    /**
     * Retry after `ms` milliseconds.
     *
     * @param {number} ms
     * @returns {Retry}
     */
    static after(ms: number): Retry;
}
/**
 * Why the host calls `reconcile`: a hint, never a promise about the object.
 *
 * @readonly
 * @enum {string}
 */
export declare const Reason: Readonly<{
    /** The object itself was created, updated or deleted. */
    CHANGE: "change";
    /** The controller's own timer came due. */
    REQUEUE: "requeue";
    /** A full resync (tenure start, resync period, queue overflow). */
    RESYNC: "resync";
    /** The previous reconcile of this key failed and its backoff passed. */
    RETRY: "retry";
    /** An object of a related kind that maps to this key changed. */
    RELATED: "related";
}>;
/**
 * The stronger of two causes: change, related, retry, requeue, then resync.
 *
 * @param {string} a one of `Reason`
 * @param {string} b one of `Reason`
 * @returns {string}
 */
export declare function strongest(a: string, b: string): string;
/**
 * What the host hears from one reconcile (`dispatch`'s result).
 *
 * `kind` is `done`, `requeue`, `fenced` or `failed`; `delayMs` is the
 * requeue delay or the failure's retry delay (null: the host's backoff).
 */
export declare class Reply {
    /** @type {'done' | 'requeue' | 'fenced' | 'failed'} */ kind: 'done' | 'requeue' | 'fenced' | 'failed';
    /** @type {number | null} */ delayMs: number | null;
    /** @type {string | null} */ message: string | null;
    /**
     * @param {'done' | 'requeue' | 'fenced' | 'failed'} kind
     * @param {number | null} [delayMs]
     * @param {string | null} [message]
     */
    constructor(kind: 'done' | 'requeue' | 'fenced' | 'failed', delayMs?: number | null, message?: string | null);
    /** The reply of a reconcile that is done. @returns {Reply} */
    static done(): Reply;
    /**
     * The reply of a reconcile that asked to be requeued after `ms`.
     *
     * @param {number} ms
     * @returns {Reply}
     */
    static requeue(ms: number): Reply;
    /** The reply of a reconcile that ended fenced. @returns {Reply} */
    static fenced(): Reply;
    /** True if the reconcile ended fenced. @returns {boolean} */
    get isFenced(): boolean;
    /** True if the reconcile failed (not fenced). @returns {boolean} */
    get isFailed(): boolean;
}
/** What a reconcile may use besides the key: the reason, the fence, the shard, readers, transactions. */
export declare class Context {
    #private;
    /** Why this reconcile was called (one of `Reason`). @type {string} */
    reason: string;
    /** @param {string} [reason] one of `Reason` */
    constructor(reason?: string);
    /** The tenure's fence (read from the host on first use). @returns {import('./fence.js').Fence} */
    get fence(): import('./fence.js').Fence;
    /**
     * The shard of its controller this tenure runs (0 of 1 unless sharded),
     * asked of the host on each use.
     *
     * @returns {import('./shard.js').Shard}
     */
    get shard(): import('./shard.js').Shard;
    /**
     * A reader of `kind`, untyped or decoding with `decode`.
     *
     * @param {string} kind
     * @param {((value: any) => any) | null} [decode]
     * @returns {Api}
     */
    api(kind: string, decode?: ((value: any) => any) | null): Api;
    /**
     * A reader of `kindType.KIND` decoding each value as `kindType`.
     *
     * @template {typeof import('./objects.js').Kind} K
     * @param {K} kindType
     * @returns {Api<InstanceType<K>>}
     */
    typed<K extends typeof import('./objects.js').Kind>(kindType: K): Api<InstanceType<K>>;
    /** A new, empty transaction. @returns {Transaction} */
    transaction(): Transaction;
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
export declare class Controller {
    /**
     * The kinds this controller watches and its resync period.
     *
     * @returns {Description}
     */
    describe(): Description;
    /**
     * Bring `kind/name` to its desired state (it may have been deleted: read it).
     *
     * @param {Context} ctx
     * @param {string} kind
     * @param {string} name
     * @returns {Outcome}
     */
    reconcile(ctx: Context, kind: string, name: string): Outcome;
    /**
     * When to retry after `error`: by default the error's own hint, else backoff.
     *
     * @param {Context} _ctx
     * @param {string} _kind
     * @param {string} _name
     * @param {unknown} error
     * @returns {Retry}
     */
    errorPolicy(_ctx: Context, _kind: string, _name: string, error: unknown): Retry;
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
export declare function dispatch(controller: Controller, kind: string, name: string, reason: string): Reply;
