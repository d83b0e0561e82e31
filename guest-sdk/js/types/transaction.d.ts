/**
 * Commits: operations and events applied atomically, fenced by the lease.
 *
 * @module
 */
import { ObjectKey } from './keys.js';
import { Kind } from './objects.js';
/** Create `key` with `value` (JSON text); it must not exist. */
export declare class Create {
    /** @type {ObjectKey} */ key: ObjectKey;
    /** @type {string} */ value: string;
    /** @param {ObjectKey} key @param {string} value JSON text */
    constructor(key: ObjectKey, value: string);
}
/** Replace the value of `key` if it is at `expectedVersion`. */
export declare class Update {
    /** @type {ObjectKey} */ key: ObjectKey;
    /** @type {number} */ expectedVersion: number;
    /** @type {string} */ value: string;
    /** @param {ObjectKey} key @param {number} expectedVersion @param {string} value JSON text */
    constructor(key: ObjectKey, expectedVersion: number, value: string);
}
/** Request the deletion of `key` if it is at `expectedVersion`. */
export declare class Delete {
    /** @type {ObjectKey} */ key: ObjectKey;
    /** @type {number} */ expectedVersion: number;
    /** @param {ObjectKey} key @param {number} expectedVersion */
    constructor(key: ObjectKey, expectedVersion: number);
}
/** Create `key` with `value` and `metadata`; it must not exist. */
export declare class CreateWith {
    /** @type {ObjectKey} */ key: ObjectKey;
    /** @type {string} */ value: string;
    /** @type {import('./keys.js').Metadata} */ metadata: import('./keys.js').Metadata;
    /** @param {ObjectKey} key @param {string} value JSON text @param {import('./keys.js').Metadata} metadata */
    constructor(key: ObjectKey, value: string, metadata: import('./keys.js').Metadata);
}
/** Replace the value, the metadata or both of `key` if it is at `expectedVersion` (null keeps a part). */
export declare class Replace {
    /** @type {ObjectKey} */ key: ObjectKey;
    /** @type {number} */ expectedVersion: number;
    /** @type {string | null} */ value: string | null;
    /** @type {import('./keys.js').Metadata | null} */ metadata: import('./keys.js').Metadata | null;
    /**
     * @param {ObjectKey} key
     * @param {number} expectedVersion
     * @param {string | null} value JSON text, or null to keep it
     * @param {import('./keys.js').Metadata | null} metadata or null to keep it
     */
    constructor(key: ObjectKey, expectedVersion: number, value: string | null, metadata: import('./keys.js').Metadata | null);
}
/** Write only the status of `key` (null clears it), at `expectedGeneration` if given. */
export declare class Status {
    /** @type {ObjectKey} */ key: ObjectKey;
    /** @type {number | null} */ expectedGeneration: number | null;
    /** @type {string | null} */ status: string | null;
    /** @param {ObjectKey} key @param {number | null} expectedGeneration @param {string | null} status JSON text */
    constructor(key: ObjectKey, expectedGeneration: number | null, status: string | null);
}
/** Write nothing; the commit conflicts unless `key` is at `expectedVersion` (0: absent). */
export declare class Check {
    /** @type {ObjectKey} */ key: ObjectKey;
    /** @type {number} */ expectedVersion: number;
    /** @param {ObjectKey} key @param {number} expectedVersion */
    constructor(key: ObjectKey, expectedVersion: number);
}
export type Op = Create | Update | Delete | CreateWith | Replace | Status | Check;
/**
 * One write of a commit (the WIT `store.op`).
 *
 * @typedef {Create | Update | Delete | CreateWith | Replace | Status | Check} Op
 */
/**
 * The type of an event: `Normal` (something happened as it should) or
 * `Warning` (something a person may have to look at), as Kubernetes'
 * event types.
 *
 * The store's events have no type field (the WIT's `new-event` is kind,
 * name, reason and message), so the type travels at the start of the
 * message, the same way in every SDK of this repository:
 *
 * - a **warning**'s message starts with `Warning: `;
 * - a **normal** event's message is the message as given, except one
 *   that itself starts with `Warning: ` or `Normal: `, which gets
 *   `Normal: ` in front so that it still reads as normal;
 * - reading, a message that starts with `Warning: ` is a warning, one
 *   that starts with `Normal: ` is normal (the prefix is not part of the
 *   text), and anything else is normal, as is every event written without
 *   a type (`Transaction.event`).
 *
 * The prefix counts toward the host's `MAX_EVENT_MESSAGE_BYTES`.
 *
 * @readonly
 * @enum {string}
 */
export declare const EventType: Readonly<{
    /** Something happened as it should. */
    Normal: "Normal";
    /** Something a person may have to look at. */
    Warning: "Warning";
}>;
/**
 * The message an event of `type` carries on the wire (see `EventType`).
 *
 * @param {string} type one of `EventType`
 * @param {string} message
 * @returns {string}
 */
export declare function encodeEventMessage(type: string, message: string): string;
/**
 * The type of an event and its text, read from its message as stored
 * (see `EventType`).
 *
 * @param {string} message
 * @returns {[string, string]} `[type, text]`
 */
export declare function decodeEventMessage(message: string): [string, string];
/**
 * An event appended with a commit: about `key`, a PascalCase `reason`, a
 * message as sent (a typed event's type included: see `EventType`).
 */
export declare class NewEvent {
    /** @type {ObjectKey} */ key: ObjectKey;
    /** @type {string} */ reason: string;
    /** @type {string} */ message: string;
    /** @param {ObjectKey} key @param {string} reason @param {string} message */
    constructor(key: ObjectKey, reason: string, message: string);
}
/** What a commit produced: its revision and the sequence numbers of its events. */
export declare class Committed {
    /** The new version of every object the commit created or updated. @type {number} */
    revision: number;
    /** The sequence numbers of the appended events, in order. @type {readonly number[]} */
    eventSeqs: readonly number[];
    /** @param {number} revision @param {number[]} eventSeqs */
    constructor(revision: number, eventSeqs: number[]);
}
/**
 * Operations and events that commit together or not at all.
 *
 * Build it with the chaining methods, then `commit()`. Every write is
 * conditional on the version read (creates on absence), and the commit is
 * fenced: after the lease is lost it throws `Fenced` and writes nothing. A
 * transaction commits once; after `Conflict` or `Unavailable` build a new
 * one from a re-read.
 */
export declare class Transaction {
    #private;
    /**
     * Create `kind/name` with `value` (JSON-able, or a `Kind` instance).
     *
     * @param {string} kind
     * @param {string} name
     * @param {any} value
     * @returns {this}
     */
    create(kind: string, name: string, value: any): this;
    /**
     * Create `name` of `value`'s kind.
     *
     * @param {string} name
     * @param {Kind} value
     * @returns {this}
     */
    createTyped(name: string, value: Kind): this;
    /**
     * Replace `obj`'s value if it is still at the version read.
     *
     * @param {import('./objects.js').StoredObject} obj
     * @param {any} value
     * @returns {this}
     */
    update(obj: import('./objects.js').StoredObject, value: any): this;
    /**
     * As `update`, refusing (at commit, `Invalid`) a value of another kind.
     *
     * @param {import('./objects.js').StoredObject} obj
     * @param {Kind} value
     * @returns {this}
     */
    updateTyped(obj: import('./objects.js').StoredObject, value: Kind): this;
    /**
     * Replace the value of `kind/name` if it is at `version`.
     *
     * @param {string} kind
     * @param {string} name
     * @param {number} version
     * @param {any} value
     * @returns {this}
     */
    updateIfVersion(kind: string, name: string, version: number, value: any): this;
    /**
     * Request `obj`'s deletion if it is still at the version read.
     *
     * @param {import('./objects.js').StoredObject} obj
     * @returns {this}
     */
    delete(obj: import('./objects.js').StoredObject): this;
    /**
     * Request the deletion of `kind/name` if it is at `version`.
     *
     * @param {string} kind
     * @param {string} name
     * @param {number} version
     * @returns {this}
     */
    deleteIfVersion(kind: string, name: string, version: number): this;
    /**
     * Create `kind/name` with `value` and `metadata`.
     *
     * @param {string} kind
     * @param {string} name
     * @param {any} value
     * @param {import('./keys.js').Metadata} metadata
     * @returns {this}
     */
    createWith(kind: string, name: string, value: any, metadata: import('./keys.js').Metadata): this;
    /**
     * Replace `obj`'s value and metadata if it is still at the version read.
     *
     * @param {import('./objects.js').StoredObject} obj
     * @param {any} value
     * @param {import('./keys.js').Metadata} metadata
     * @returns {this}
     */
    replace(obj: import('./objects.js').StoredObject, value: any, metadata: import('./keys.js').Metadata): this;
    /**
     * Replace `obj`'s metadata (keeping its value) if it is at the version read.
     *
     * @param {import('./objects.js').StoredObject} obj
     * @param {import('./keys.js').Metadata} metadata
     * @returns {this}
     */
    setMetadata(obj: import('./objects.js').StoredObject, metadata: import('./keys.js').Metadata): this;
    /**
     * Add finalizer `name` to `obj`; if it is there, only check the version.
     *
     * @param {import('./objects.js').StoredObject} obj
     * @param {string} name
     * @returns {this}
     */
    addFinalizer(obj: import('./objects.js').StoredObject, name: string): this;
    /**
     * Remove finalizer `name` from `obj` (the last one of a marked object removes it).
     *
     * @param {import('./objects.js').StoredObject} obj
     * @param {string} name
     * @returns {this}
     */
    removeFinalizer(obj: import('./objects.js').StoredObject, name: string): this;
    /**
     * Write `obj`'s status, conditional on the generation read.
     *
     * @param {import('./objects.js').StoredObject} obj
     * @param {any} status
     * @returns {this}
     */
    updateStatus(obj: import('./objects.js').StoredObject, status: any): this;
    /**
     * Write the status of `kind/name`, at `expectedGeneration` if not null.
     *
     * @param {string} kind
     * @param {string} name
     * @param {number | null} expectedGeneration
     * @param {any} status
     * @returns {this}
     */
    writeStatus(kind: string, name: string, expectedGeneration: number | null, status: any): this;
    /**
     * Clear `obj`'s status, conditional on the generation read.
     *
     * @param {import('./objects.js').StoredObject} obj
     * @returns {this}
     */
    clearStatus(obj: import('./objects.js').StoredObject): this;
    /**
     * Make the commit depend on `obj` still being at the version read.
     *
     * @param {import('./objects.js').StoredObject} obj
     * @returns {this}
     */
    check(obj: import('./objects.js').StoredObject): this;
    /**
     * Make the commit depend on `kind/name` being at `version` (0: absent).
     *
     * @param {string} kind
     * @param {string} name
     * @param {number} version
     * @returns {this}
     */
    checkVersion(kind: string, name: string, version: number): this;
    /**
     * Make the commit depend on `kind/name` not existing.
     *
     * @param {string} kind
     * @param {string} name
     * @returns {this}
     */
    checkAbsent(kind: string, name: string): this;
    /**
     * Append an event about `kind/name` with the commit. The message is
     * sent as given, and reads as a `Normal` event unless it starts with a
     * type's prefix; to give the type, use `eventOfType` or `warning`.
     *
     * @param {string} kind
     * @param {string} name
     * @param {string} reason a PascalCase word, e.g. `Assigned`
     * @param {string} message
     * @returns {this}
     */
    event(kind: string, name: string, reason: string, message: string): this;
    /**
     * Append an event of `type` about `kind/name` with the commit: `event`
     * with the type carried in the message as `EventType` describes.
     *
     * @param {string} kind
     * @param {string} name
     * @param {string} type one of `EventType`
     * @param {string} reason a PascalCase word
     * @param {string} message
     * @returns {this}
     */
    eventOfType(kind: string, name: string, type: string, reason: string, message: string): this;
    /**
     * Append a `Warning` event about `kind/name` with the commit (see `eventOfType`).
     *
     * @param {string} kind
     * @param {string} name
     * @param {string} reason a PascalCase word, e.g. `ProvisionFailed`
     * @param {string} message
     * @returns {this}
     */
    warning(kind: string, name: string, reason: string, message: string): this;
    /** The operations so far. @returns {Op[]} */
    get ops(): Op[];
    /** The events so far. @returns {NewEvent[]} */
    get events(): NewEvent[];
    /** True if there is nothing to commit. @returns {boolean} */
    isEmpty(): boolean;
    /**
     * Apply everything atomically; throw a `StoreError` if nothing was written.
     *
     * @returns {Committed}
     */
    commit(): Committed;
}
