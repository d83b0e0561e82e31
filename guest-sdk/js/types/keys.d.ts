/**
 * Addresses, metadata and selectors: the plain shapes the host speaks.
 *
 * @module
 */
/** An object's address: `(kind, name)` inside the controller's cluster, shown as `kind/name`. */
export declare class ObjectKey {
    /** The object's kind. @type {string} */
    kind: string;
    /** The object's name. @type {string} */
    name: string;
    /**
     * @param {string} kind the object's kind
     * @param {string} name the object's name
     */
    constructor(kind: string, name: string);
    /**
     * True if `other` names the same object.
     *
     * @param {ObjectKey | null | undefined} other
     * @returns {boolean}
     */
    equals(other: ObjectKey | null | undefined): boolean;
    /** @returns {string} `kind/name` */
    toString(): string;
}
/**
 * Labels, owner and finalizers of an object.
 *
 * `labels` maps each label key to its value (in key order); `owner` is the
 * object whose first delete request deletes this one too; `finalizers`
 * name the parties that must act before the object is removed. The host
 * checks the rules (`Invalid` on a breach): at most 32 labels and 16
 * finalizers, each spelled as `docs/contract.md` says.
 *
 * A `Metadata` is never changed in place: the builder methods return a new one.
 */
export declare class Metadata {
    #private;
    /** Label key to value, in key order. @type {Readonly<Record<string, string>>} */
    labels: Readonly<Record<string, string>>;
    /** The owning object, or null. @type {ObjectKey | null} */
    owner: ObjectKey | null;
    /** Finalizer names, in the order given. @type {readonly string[]} */
    finalizers: readonly string[];
    /**
     * @param {{labels?: Record<string, string>, owner?: ObjectKey | null, finalizers?: string[]}} [parts]
     */
    constructor(parts?: {
        labels?: Record<string, string>;
        owner?: ObjectKey | null;
        finalizers?: string[];
    });
    /**
     * A copy with label `key` set to `value`.
     *
     * @param {string} key
     * @param {string} value
     * @returns {Metadata}
     */
    label(key: string, value: string): Metadata;
    /**
     * A copy owned by `kind/name`.
     *
     * @param {string} kind
     * @param {string} name
     * @returns {Metadata}
     */
    ownedBy(kind: string, name: string): Metadata;
    /**
     * A copy with finalizer `name` added (once: adding it again keeps one).
     *
     * @param {string} name
     * @returns {Metadata}
     */
    finalizer(name: string): Metadata;
    /**
     * A copy without finalizer `name`.
     *
     * @param {string} name
     * @returns {Metadata}
     */
    withoutFinalizer(name: string): Metadata;
    /**
     * True if `other` has the same labels, owner and finalizers (in order).
     *
     * @param {Metadata | null | undefined} other
     * @returns {boolean}
     */
    equals(other: Metadata | null | undefined): boolean;
}
/**
 * Which objects `Api.listSelected` returns: those that carry every label
 * in `labels` with exactly the value given, and whose value contains
 * `contains` (a JSON-able value, compared as PostgreSQL's `jsonb @>`). The
 * empty selector selects every object.
 */
export declare class Selector {
    /** Labels the object must carry. @type {Readonly<Record<string, string>>} */
    labels: Readonly<Record<string, string>>;
    /** The value the object's value must contain, boxed; null when not given. @type {{value: any} | null} */
    contains: {
        value: any;
    } | null;
    /**
     * @param {Record<string, string>} [labels]
     * @param {{value: any} | null} [contains] the containment condition, boxed (`null`: none)
     */
    constructor(labels?: Record<string, string>, contains?: {
        value: any;
    } | null);
    /**
     * The empty selector: every object of the kind.
     *
     * @returns {Selector}
     */
    static everything(): Selector;
    /**
     * A copy that also requires label `key` to be `value`.
     *
     * @param {string} key
     * @param {string} value
     * @returns {Selector}
     */
    label(key: string, value: string): Selector;
    /**
     * A copy that requires the object's value to contain `value` (`null` is JSON null, a real condition).
     *
     * @param {any} value
     * @returns {Selector}
     */
    containing(value: any): Selector;
    /**
     * `contains` as compact JSON text, or null when not given.
     *
     * @returns {string | null}
     */
    containsJson(): string | null;
}
export type RawObject = {
    kind: string;
    name: string;
    version: number;
    /**
     * JSON text
     */
    value: string;
    metadata: Metadata;
    /**
     * JSON text, or null
     */
    status: string | null;
    generation: number;
    /**
     * ms since the Unix epoch, or null
     */
    deletingSinceMs: number | null;
};
export type RawPage = {
    objects: RawObject[];
    next: string | null;
};
/**
 * An object as the host returns it, value and status as JSON text.
 *
 * @typedef {object} RawObject
 * @property {string} kind
 * @property {string} name
 * @property {number} version
 * @property {string} value JSON text
 * @property {Metadata} metadata
 * @property {string | null} status JSON text, or null
 * @property {number} generation
 * @property {number | null} deletingSinceMs ms since the Unix epoch, or null
 */
/**
 * A page of raw objects and the cursor of the next page, if any.
 *
 * @typedef {object} RawPage
 * @property {RawObject[]} objects
 * @property {string | null} next
 */
