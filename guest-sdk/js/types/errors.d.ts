/**
 * Errors a reconcile meets, as exception classes.
 *
 * `LeaseholdError` is the base of every error the SDK throws. The store's
 * errors mirror the WIT `store-error` variant one for one (`Fenced`,
 * `Conflict`, `NotFound`, `Invalid`, `Unavailable`), plus `QuotaExceeded`,
 * the host's typed form of an `invalid` quota refusal. Each says whether
 * anything was written: a `Fenced`, `Conflict`, `NotFound` or `Invalid`
 * commit wrote nothing; after `Unavailable` the outcome is unknown.
 *
 * @module
 */
/** How the host's quota refusals begin (an `invalid` store error). */
export declare const QUOTA_EXCEEDED_PREFIX = "quota exceeded: ";
/** The base of every error the SDK throws from a reconcile. */
export declare class LeaseholdError extends Error {
    /** When the host should retry, in milliseconds, if the error says. @type {number | null} */
    retryAfterMs: number | null;
    /** @param {string} message */
    constructor(message: string);
    /** True if this error means the tenure's lease is gone. @returns {boolean} */
    get isFenced(): boolean;
}
/** A store call failed (the WIT `store-error`). */
export declare class StoreError extends LeaseholdError {
}
/**
 * The lease this guest runs under is no longer current.
 *
 * Nothing was written. The guest must stop: throw it on (the SDK reports
 * `fenced` to the host, whatever the controller's error policy says).
 */
export declare class Fenced extends StoreError {
    /** The host's explanation. @type {string} */
    why: string;
    /** @param {string} why the host's explanation: which lease, epoch and holder */
    constructor(why: string);
    /** Always true. @returns {boolean} */
    get isFenced(): boolean;
}
/** A precondition failed on `key`; nothing was written. Re-read and decide again. */
export declare class Conflict extends StoreError {
    /** The object whose precondition failed. @type {import('./keys.js').ObjectKey} */
    key: import('./keys.js').ObjectKey;
    /** @param {import('./keys.js').ObjectKey} key the object whose precondition failed */
    constructor(key: import('./keys.js').ObjectKey);
}
/** The object named by an update, replace, delete or status write does not exist. */
export declare class NotFound extends StoreError {
    /** The missing object. @type {import('./keys.js').ObjectKey} */
    key: import('./keys.js').ObjectKey;
    /** @param {import('./keys.js').ObjectKey} key the missing object */
    constructor(key: import('./keys.js').ObjectKey);
}
/** The request itself is wrong (a bad name, not JSON, too large, too many ops). */
export declare class Invalid extends StoreError {
    /** What is wrong. @type {string} */
    why: string;
    /** @param {string} why what is wrong, as the host says it */
    constructor(why: string);
}
/** The backend failed; whether a commit was applied is unknown. Re-read first. */
export declare class Unavailable extends StoreError {
    /** The host's explanation. @type {string} */
    why: string;
    /** @param {string} why the host's explanation */
    constructor(why: string);
}
/**
 * A per-controller quota refused the commit; nothing was written.
 *
 * Parsed from the host's `invalid` text (`quota exceeded: controller=...
 * quota=... limit=... [retry_after_ms=...] [kind=...]: message`).
 */
export declare class QuotaExceeded extends StoreError {
    /** The controller whose quota it is. @type {string} */
    controller: string;
    /** The quota's key. @type {string} */
    quota: string;
    /** The quota's limit. @type {number} */
    limit: number;
    /** The kind that is full, for `max_objects_per_kind`. @type {string | null} */
    kind: string | null;
    /**
     * @param {string} message the host's whole text
     * @param {string} controller the controller whose quota it is
     * @param {string} quota the quota's key, e.g. `max_creates_per_second`
     * @param {number} limit the quota's limit
     * @param {number | null} retryAfterMs when the quota allows the write again, if the host says
     * @param {string | null} kind the kind that is full, for `max_objects_per_kind`
     */
    constructor(message: string, controller: string, quota: string, limit: number, retryAfterMs: number | null, kind: string | null);
    /**
     * The refusal `message` describes, or null if it is not one.
     *
     * @param {string} message
     * @returns {QuotaExceeded | null}
     */
    static parse(message: string): QuotaExceeded | null;
}
/**
 * The error an `invalid` answer means: `QuotaExceeded` if it is a quota refusal, else `Invalid`.
 *
 * @param {string} why
 * @returns {StoreError}
 */
export declare function invalid(why: string): StoreError;
/** An object's value (or status) does not have the shape the reader expects. */
export declare class DecodeError extends LeaseholdError {
    /** The object that did not decode. @type {import('./keys.js').ObjectKey} */
    key: import('./keys.js').ObjectKey;
    /**
     * @param {import('./keys.js').ObjectKey} key the object that did not decode
     * @param {string} message what is wrong
     */
    constructor(key: import('./keys.js').ObjectKey, message: string);
}
/** A `listAll` found more objects than the bound it was given. */
export declare class TooMany extends LeaseholdError {
    /** The kind listed. @type {string} */
    kind: string;
    /** The bound. @type {number} */
    max: number;
    /**
     * @param {string} kind the kind listed
     * @param {number} max the bound
     */
    constructor(kind: string, max: number);
}
/**
 * The controller's settings do not have the expected shape.
 *
 * `key` names the key it failed on, as a path from the top of the
 * settings (`region`, `db.port`, `exempt[2]`), when one is to blame. The
 * message never quotes a value of the settings: they may hold secrets.
 */
export declare class SettingsError extends LeaseholdError {
    /** The key it failed on, as a path from the top (`db.port`, `exempt[2]`), or null. @type {string | null} */
    key: string | null;
    /** What was wrong, without any value. @type {string} */
    problem: string;
    /**
     * @param {string} message what is wrong, by type ("missing", "a string, expected a number"), never by value
     * @param {string | null} [key] the key it failed on, as a path; null when the settings as a whole did not fit
     */
    constructor(message: string, key?: string | null);
}
/** A reconcile failure of the controller's own, with an optional retry delay. */
export declare class Failed extends LeaseholdError {
    /**
     * @param {string} message what went wrong
     * @param {number | null} [retryAfterMs] when to retry; null lets the host back off
     */
    constructor(message: string, retryAfterMs?: number | null);
}
