/**
 * The tenure's fence and idempotency keys.
 *
 * @module
 */
/**
 * The lease this guest runs under: cluster, lease, epoch and holder.
 * `epoch` strictly increases with each new tenure of the lease.
 */
export declare class Fence {
    /** @type {string} */
    cluster: string;
    /** @type {string} */
    lease: string;
    /** @type {number} */
    epoch: number;
    /** @type {string} */
    holder: string;
    /**
     * @param {string} cluster the cluster the lease belongs to
     * @param {string} lease the lease name (the controller's name)
     * @param {number} epoch the fencing epoch of this tenure
     * @param {string} holder the replica holding the lease
     */
    constructor(cluster: string, lease: string, epoch: number, holder: string);
    /**
     * A key naming `action` in this tenure: `cluster/lease/epoch/action`.
     *
     * Different in every tenure: use it for effects each tenure may make
     * once. For an effect that must happen once whoever leads, use
     * `IdempotencyKey.forAction`, which leaves the epoch out.
     *
     * @param {string} action
     * @returns {string}
     */
    idempotencyKey(action: string): string;
    /** @returns {string} */
    toString(): string;
}
/**
 * The current fence, from the host.
 *
 * @returns {Fence}
 */
export declare function fence(): Fence;
/**
 * A key naming one action on one state of one object, for the receiver's
 * deduplication (the `Idempotency-Key` header).
 *
 * Stable across tenures and processes: built from the object's kind and
 * name, a number naming the state the decision was made on, and the
 * action's name only (never the epoch, the holder or anything random), so
 * a retry, and a successor re-running the same decision, send the same
 * key and the receiver applies the effect once.
 *
 * **Which number.** For an effect driven by the object's spec (its value
 * and metadata: the usual case), pass the object's **generation**
 * (`obj.generation`). A status write changes the object's version but
 * not its generation, so a key built from the version changes as soon as
 * the controller records `Pending` before the request: a lost reply is
 * then retried under a new key and the effect is applied twice. The
 * generation changes only when the spec does (or the object is marked for
 * deletion), which is when the decision may change.
 *
 * **An object made again under the same name starts at generation 1
 * again.** If a receiver may still hold the keys of a former object of
 * that name (it does, if it deduplicates by key for longer than an object
 * lives), a new object would send the old keys and get the old answers
 * replayed. Tell the objects apart in the action: record the object's
 * version in its status when you first write the status (a version is
 * never reused), keep it there as the object's incarnation, and key with
 * `forAction(kind, name, generation, 'put-' + incarnation)`, as the
 * example provisioners do.
 *
 * The form `<kind>/<name>@<number>/<action>` (kind, name and action
 * percent-encoded except ASCII letters, digits and `-._~`, as upper-case
 * hex of their UTF-8 bytes) is the Rust SDK's `IdempotencyKey::for_action`,
 * part of the contract: the same inputs give the same key in every SDK.
 * Two controllers sending to the same receiver about the same objects
 * should use distinct action names.
 */
export declare class IdempotencyKey {
    /** The key's text. @type {string} */
    value: string;
    /** @param {string} value the key's text */
    constructor(value: string);
    /**
     * The key of `action` decided on `generation` of `kind/name` (see the
     * class: the object's generation for a spec-driven effect, not its
     * version). A whole number from 0 to 2^64 - 1: a JavaScript number up
     * to 2^53 - 1, or a bigint for the rest; a `RangeError` otherwise.
     *
     * @param {string} kind
     * @param {string} name
     * @param {number | bigint} generation
     * @param {string} action
     * @returns {IdempotencyKey}
     */
    static forAction(kind: string, name: string, generation: number | bigint, action: string): IdempotencyKey;
    /** The key, as sent in the header. @returns {string} */
    toString(): string;
}
