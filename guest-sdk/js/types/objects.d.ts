/**
 * Typed kinds, objects as read, and the per-kind reader `Api`.
 *
 * @module
 */
import { Metadata, ObjectKey } from './keys.js';
/**
 * A typed kind: a class whose instances are the values of one kind.
 *
 * Subclasses set the static `KIND` (the kind's name) and convert from and
 * to the JSON-able value with the static `fromValue` and the instance's
 * `toValue`. Typed reads (`Api.typed`, `Context.typed`) decode with
 * `fromValue`; typed writes (`Transaction.createTyped`, `updateTyped`)
 * encode with `toValue` and refuse to write an instance into an object of
 * another kind.
 */
export declare class Kind {
    /** The kind's name, e.g. `tasks`. @type {string} */
    static KIND: string;
    /**
     * Build an instance from a decoded JSON value; throw on a wrong shape.
     *
     * @param {any} value
     * @returns {Kind}
     */
    static fromValue(value: any): Kind;
    /**
     * This instance as a JSON-able value.
     *
     * @returns {any}
     */
    toValue(): any;
}
/**
 * An object as read from the store.
 *
 * `value` is the decoded JSON value (or an instance of a typed kind);
 * `version` is the precondition of conditional writes; `status` is the
 * decoded status part (null if it has none); `generation` grows with each
 * write of the value or metadata; `deletingSince` is set while the object
 * is marked for deletion.
 *
 * @template [T=any]
 */
export declare class StoredObject<T = any> {
    /** The object's kind. @type {string} */
    kind: string;
    /** The object's name. @type {string} */
    name: string;
    /** The store revision that last wrote it. @type {number} */
    version: number;
    /** The decoded value. @type {T} */
    value: T;
    /** Labels, owner and finalizers. @type {Metadata} */
    metadata: Metadata;
    /** The decoded status part, or null. @type {any} */
    status: any;
    /** Grows with each write of the value or metadata. @type {number} */
    generation: number;
    /** When its deletion was requested while finalizers remained, or null. @type {Date | null} */
    deletingSince: Date | null;
    /**
     * @param {string} kind
     * @param {string} name
     * @param {number} version
     * @param {T} value
     * @param {Metadata} [metadata]
     * @param {any} [status]
     * @param {number} [generation]
     * @param {Date | null} [deletingSince]
     */
    constructor(kind: string, name: string, version: number, value: T, metadata?: Metadata, status?: any, generation?: number, deletingSince?: Date | null);
    /** The object's address. @returns {ObjectKey} */
    get key(): ObjectKey;
    /** The object's labels. @returns {Readonly<Record<string, string>>} */
    get labels(): Readonly<Record<string, string>>;
    /**
     * The value of label `key`, or null.
     *
     * @param {string} key
     * @returns {string | null}
     */
    label(key: string): string | null;
    /** The object's owner, or null. @returns {ObjectKey | null} */
    get owner(): ObjectKey | null;
    /** The object's finalizers. @returns {readonly string[]} */
    get finalizers(): readonly string[];
    /**
     * True if finalizer `name` is on the object.
     *
     * @param {string} name
     * @returns {boolean}
     */
    hasFinalizer(name: string): boolean;
    /** True while the object is marked for deletion. @returns {boolean} */
    get isDeleting(): boolean;
    /**
     * This object with its value decoded as `kindType` (`DecodeError` if it does not fit).
     *
     * @template {typeof Kind} K
     * @param {K} kindType
     * @returns {StoredObject<InstanceType<K>>}
     */
    decode<K extends typeof Kind>(kindType: K): StoredObject<InstanceType<K>>;
}
export type Page<T = any> = {
    objects: StoredObject<T>[];
    /**
     * the name to pass as `after` for the next page; null at the end
     */
    next: string | null;
};
/**
 * Turn a host's raw object into a `StoredObject`, decoding its JSON.
 *
 * @param {import('./keys.js').RawObject} raw
 * @param {((value: any) => any) | null} [decode]
 * @returns {StoredObject}
 */
export declare function decodeRaw(raw: import('./keys.js').RawObject, decode?: ((value: any) => any) | null): StoredObject;
/**
 * Reads of one kind: `get`, `list`, `listAll`, `listSelected`, `listAllSelected`.
 *
 * `new Api('tasks')` reads untyped values (decoded JSON); `Api.typed(Task)`
 * (or `Context.typed(Task)`) decodes each value with `Task.fromValue`.
 * Store errors are thrown as the `StoreError` subclasses.
 *
 * @template [T=any]
 */
export declare class Api<T = any> {
    #private;
    /** The kind read. @type {string} */
    kind: string;
    /** @type {((value: any) => T) | null} */
    decode: ((value: any) => T) | null;
    /**
     * @param {string} kind the kind read
     * @param {((value: any) => T) | null} [decode] how each value is decoded; null keeps the JSON
     */
    constructor(kind: string, decode?: ((value: any) => T) | null);
    /**
     * The reader of `kindType.KIND`, decoding with `kindType.fromValue`.
     *
     * @template {typeof Kind} K
     * @param {K} kindType
     * @returns {Api<InstanceType<K>>}
     */
    static typed<K extends typeof Kind>(kindType: K): Api<InstanceType<K>>;
    /**
     * The object `name`, or null if it does not exist.
     *
     * @param {string} name
     * @returns {StoredObject<T> | null}
     */
    get(name: string): StoredObject<T> | null;
    /**
     * One page in name order after `after`; the host caps `limit`.
     *
     * @param {string | null} [after]
     * @param {number} [limit]
     * @returns {Page<T>}
     */
    list(after?: string | null, limit?: number): Page<T>;
    /**
     * One page of the objects `selector` selects, in name order after `after`.
     *
     * @param {import('./keys.js').Selector} selector
     * @param {string | null} [after]
     * @param {number} [limit]
     * @returns {Page<T>}
     */
    listSelected(selector: import('./keys.js').Selector, after?: string | null, limit?: number): Page<T>;
    /**
     * Every object of the kind, page by page; `TooMany` past `max`.
     *
     * @param {number} max
     * @returns {StoredObject<T>[]}
     */
    listAll(max: number): StoredObject<T>[];
    /**
     * Every object `selector` selects, page by page; `TooMany` past `max`.
     *
     * @param {import('./keys.js').Selector} selector
     * @param {number} max
     * @returns {StoredObject<T>[]}
     */
    listAllSelected(selector: import('./keys.js').Selector, max: number): StoredObject<T>[];
}
