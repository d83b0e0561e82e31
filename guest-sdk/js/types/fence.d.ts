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
 * A key naming one action on one version of one object.
 *
 * Stable across tenures and processes: built from the object's kind, name
 * and version and the action's name only, never the epoch. The form
 * `<kind>/<name>@<version>/<action>` (fields percent-encoded except ASCII
 * letters, digits and `-._~`) is the Rust SDK's, part of the contract.
 */
export declare class IdempotencyKey {
    /** The key's text. @type {string} */
    value: string;
    /** @param {string} value the key's text */
    constructor(value: string);
    /**
     * The key of `action` decided on version `version` of `kind/name`.
     *
     * @param {string} kind
     * @param {string} name
     * @param {number} version
     * @param {string} action
     * @returns {IdempotencyKey}
     */
    static forAction(kind: string, name: string, version: number, action: string): IdempotencyKey;
    /** @returns {string} */
    toString(): string;
}
