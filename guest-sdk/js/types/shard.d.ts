/**
 * The tenure's shard, and the rule that puts every object in one shard.
 *
 * Owns: FNV-1a 64 (`fnv1a64`), the shard of a key or of a shard label's
 * value (`Shard.ofKey`, `Shard.ofLabel`), whether a shard owns a key or an
 * object read from the store (`ownsKey`, `owns`), and `shard()`, this
 * tenure's shard as the host tells it.
 *
 * Must never: change the rule. The host, every SDK and a user's tooling
 * must agree on which shard an object belongs to (the WIT's `tenure.shard`
 * states it; the tests hold the documented vectors). Nor keep the host's
 * answer: `shard()` asks the host each time. The hash is 64-bit, so it is
 * computed with `BigInt`: a JavaScript number holds 53 bits exactly.
 *
 * @module
 */
/**
 * FNV-1a 64 of `data` (a string is hashed as its UTF-8 bytes), as a
 * `bigint` below 2^64: the hash the host assigns objects to shards with.
 *
 * @param {string | Uint8Array} data
 * @returns {bigint}
 */
export declare function fnv1a64(data: string | Uint8Array): bigint;
/**
 * Which part of its controller's objects this tenure runs: shard `index`
 * of `count`.
 *
 * A controller configured with `shards = N` runs as N leases, each with
 * its own guest instance: shard 0 to N-1 of N. An unsharded controller
 * runs shard 0 of 1, which owns every object. Every object belongs to
 * exactly one shard: the one FNV-1a 64 of its shard label's value picks,
 * if the description declares a shard label (`Description.shardByLabel`)
 * and the object carries it; else the one FNV-1a 64 of `kind/name` picks.
 * The host wakes a shard only for its own objects and those of the kinds
 * every shard watches (`Description.watchOnEveryShard`).
 */
export declare class Shard {
    /** This tenure's shard, from 0 to `count - 1`. @type {number} */
    index: number;
    /** How many shards the controller runs as (1 to `MAX_SHARDS`). @type {number} */
    count: number;
    /**
     * The shard of an unsharded controller: shard 0 of 1, which owns every object.
     *
     * @type {Shard}
     */
    static WHOLE: Shard;
    /**
     * @param {number} index this tenure's shard, from 0 to `count - 1`
     * @param {number} count how many shards the controller runs as (1 to `MAX_SHARDS`)
     */
    constructor(index: number, count: number);
    /**
     * The index of the shard `kind/name` belongs to among `count` shards, by
     * its key: FNV-1a 64 of the UTF-8 bytes of `kind/name`, modulo `count`.
     *
     * @param {string} kind
     * @param {string} name
     * @param {number} count
     * @returns {number}
     */
    static ofKey(kind: string, name: string, count: number): number;
    /**
     * The index of the shard an object whose shard label has `value` belongs
     * to among `count` shards: FNV-1a 64 of `value`'s UTF-8 bytes, modulo `count`.
     *
     * @param {string} value
     * @param {number} count
     * @returns {number}
     */
    static ofLabel(value: string, count: number): number;
    /**
     * True if `kind/name` belongs to this shard by its key (no shard label).
     *
     * @param {string} kind
     * @param {string} name
     * @returns {boolean}
     */
    ownsKey(kind: string, name: string): boolean;
    /**
     * True if `object`, as read from the store, belongs to this shard.
     * `shardLabel` is the label the description declares (null: none): if
     * `object` carries it, the label's value decides; else its key does.
     *
     * @param {{kind: string, name: string, metadata: import('./keys.js').Metadata}} object a `StoredObject`
     * @param {string | null} [shardLabel]
     * @returns {boolean}
     */
    owns(object: {
        kind: string;
        name: string;
        metadata: import('./keys.js').Metadata;
    }, shardLabel?: string | null): boolean;
    /**
     * True if `other` is the same shard of the same count.
     *
     * @param {Shard | null | undefined} other
     * @returns {boolean}
     */
    equals(other: Shard | null | undefined): boolean;
    /** @returns {string} `shard INDEX of COUNT` */
    toString(): string;
}
/**
 * This tenure's shard, from the host (asked each time, never kept).
 *
 * @returns {Shard}
 */
export declare function shard(): Shard;
