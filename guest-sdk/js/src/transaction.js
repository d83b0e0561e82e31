/**
 * Commits: operations and events applied atomically, fenced by the lease.
 *
 * @module
 */

import { Invalid } from './errors.js';
import { currentHost } from './host.js';
import { ObjectKey } from './keys.js';
import { Kind } from './objects.js';

/** Create `key` with `value` (JSON text); it must not exist. */
export class Create {
  /** @param {ObjectKey} key @param {string} value JSON text */
  constructor(key, value) {
    /** @type {ObjectKey} */ this.key = key;
    /** @type {string} */ this.value = value;
    Object.freeze(this);
  }
}

/** Replace the value of `key` if it is at `expectedVersion`. */
export class Update {
  /** @param {ObjectKey} key @param {number} expectedVersion @param {string} value JSON text */
  constructor(key, expectedVersion, value) {
    /** @type {ObjectKey} */ this.key = key;
    /** @type {number} */ this.expectedVersion = expectedVersion;
    /** @type {string} */ this.value = value;
    Object.freeze(this);
  }
}

/** Request the deletion of `key` if it is at `expectedVersion`. */
export class Delete {
  /** @param {ObjectKey} key @param {number} expectedVersion */
  constructor(key, expectedVersion) {
    /** @type {ObjectKey} */ this.key = key;
    /** @type {number} */ this.expectedVersion = expectedVersion;
    Object.freeze(this);
  }
}

/** Create `key` with `value` and `metadata`; it must not exist. */
export class CreateWith {
  /** @param {ObjectKey} key @param {string} value JSON text @param {import('./keys.js').Metadata} metadata */
  constructor(key, value, metadata) {
    /** @type {ObjectKey} */ this.key = key;
    /** @type {string} */ this.value = value;
    /** @type {import('./keys.js').Metadata} */ this.metadata = metadata;
    Object.freeze(this);
  }
}

/** Replace the value, the metadata or both of `key` if it is at `expectedVersion` (null keeps a part). */
export class Replace {
  /**
   * @param {ObjectKey} key
   * @param {number} expectedVersion
   * @param {string | null} value JSON text, or null to keep it
   * @param {import('./keys.js').Metadata | null} metadata or null to keep it
   */
  constructor(key, expectedVersion, value, metadata) {
    /** @type {ObjectKey} */ this.key = key;
    /** @type {number} */ this.expectedVersion = expectedVersion;
    /** @type {string | null} */ this.value = value;
    /** @type {import('./keys.js').Metadata | null} */ this.metadata = metadata;
    Object.freeze(this);
  }
}

/** Write only the status of `key` (null clears it), at `expectedGeneration` if given. */
export class Status {
  /** @param {ObjectKey} key @param {number | null} expectedGeneration @param {string | null} status JSON text */
  constructor(key, expectedGeneration, status) {
    /** @type {ObjectKey} */ this.key = key;
    /** @type {number | null} */ this.expectedGeneration = expectedGeneration;
    /** @type {string | null} */ this.status = status;
    Object.freeze(this);
  }
}

/** Write nothing; the commit conflicts unless `key` is at `expectedVersion` (0: absent). */
export class Check {
  /** @param {ObjectKey} key @param {number} expectedVersion */
  constructor(key, expectedVersion) {
    /** @type {ObjectKey} */ this.key = key;
    /** @type {number} */ this.expectedVersion = expectedVersion;
    Object.freeze(this);
  }
}

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
export const EventType = Object.freeze({
  /** Something happened as it should. */
  Normal: 'Normal',
  /** Something a person may have to look at. */
  Warning: 'Warning',
});

/**
 * The message an event of `type` carries on the wire (see `EventType`).
 *
 * @param {string} type one of `EventType`
 * @param {string} message
 * @returns {string}
 */
export function encodeEventMessage(type, message) {
  if (type !== EventType.Normal && type !== EventType.Warning) {
    throw new TypeError(`not an event type: ${JSON.stringify(String(type))} (Normal or Warning)`);
  }
  const marked = message.startsWith('Normal: ') || message.startsWith('Warning: ');
  if (type === EventType.Normal && !marked) return message;
  return `${type}: ${message}`;
}

/**
 * The type of an event and its text, read from its message as stored
 * (see `EventType`).
 *
 * @param {string} message
 * @returns {[string, string]} `[type, text]`
 */
export function decodeEventMessage(message) {
  for (const type of [EventType.Warning, EventType.Normal]) {
    if (message.startsWith(`${type}: `)) return [type, message.slice(type.length + 2)];
  }
  return [EventType.Normal, message];
}

/**
 * An event appended with a commit: about `key`, a PascalCase `reason`, a
 * message as sent (a typed event's type included: see `EventType`).
 */
export class NewEvent {
  /** @param {ObjectKey} key @param {string} reason @param {string} message */
  constructor(key, reason, message) {
    /** @type {ObjectKey} */ this.key = key;
    /** @type {string} */ this.reason = reason;
    /** @type {string} */ this.message = message;
    Object.freeze(this);
  }
}

/** What a commit produced: its revision and the sequence numbers of its events. */
export class Committed {
  /** @param {number} revision @param {number[]} eventSeqs */
  constructor(revision, eventSeqs) {
    /** The new version of every object the commit created or updated. @type {number} */
    this.revision = revision;
    /** The sequence numbers of the appended events, in order. @type {readonly number[]} */
    this.eventSeqs = Object.freeze([...eventSeqs]);
    Object.freeze(this);
  }
}

/**
 * JSON text of a value or a typed kind's instance; throws on what JSON cannot carry.
 *
 * @param {any} value
 * @returns {string}
 */
function toJson(value) {
  const plain = value instanceof Kind ? value.toValue() : value;
  const text = JSON.stringify(plain, (_k, v) => {
    if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError(`${v} is not JSON`);
    if (typeof v === 'bigint') throw new TypeError('a bigint is not JSON');
    return v;
  });
  if (text === undefined) throw new TypeError(`${typeof plain} is not JSON`);
  return text;
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
export class Transaction {
  /** @type {Op[]} */
  #ops = [];
  /** @type {NewEvent[]} */
  #events = [];
  /** @type {string | null} */
  #refused = null;
  #spent = false;

  /**
   * @param {ObjectKey} key
   * @param {any} value
   * @returns {string}
   */
  #encode(key, value) {
    try {
      return toJson(value);
    } catch (e) {
      this.#refused ??= `the value for ${key} does not serialize: ${/** @type {Error} */ (e).message}`;
      return '';
    }
  }

  /**
   * @param {string} kind
   * @param {any} value
   * @param {ObjectKey} key
   */
  #typedInto(kind, value, key) {
    if (value instanceof Kind) {
      const type = /** @type {typeof Kind} */ (value.constructor);
      if (type.KIND !== kind) {
        this.#refused ??=
          `a ${type.name} is stored under kind ${type.KIND}, not ${kind}: refusing to write it into ${key}`;
      }
    }
  }

  /**
   * Create `kind/name` with `value` (JSON-able, or a `Kind` instance).
   *
   * @param {string} kind
   * @param {string} name
   * @param {any} value
   * @returns {this}
   */
  create(kind, name, value) {
    const key = new ObjectKey(kind, name);
    this.#typedInto(kind, value, key);
    this.#ops.push(new Create(key, this.#encode(key, value)));
    return this;
  }

  /**
   * Create `name` of `value`'s kind.
   *
   * @param {string} name
   * @param {Kind} value
   * @returns {this}
   */
  createTyped(name, value) {
    return this.create(/** @type {typeof Kind} */ (value.constructor).KIND, name, value);
  }

  /**
   * Replace `obj`'s value if it is still at the version read.
   *
   * @param {import('./objects.js').StoredObject} obj
   * @param {any} value
   * @returns {this}
   */
  update(obj, value) {
    this.#typedInto(obj.kind, value, obj.key);
    return this.updateIfVersion(obj.kind, obj.name, obj.version, value);
  }

  /**
   * As `update`, refusing (at commit, `Invalid`) a value of another kind.
   *
   * @param {import('./objects.js').StoredObject} obj
   * @param {Kind} value
   * @returns {this}
   */
  updateTyped(obj, value) {
    return this.update(obj, value);
  }

  /**
   * Replace the value of `kind/name` if it is at `version`.
   *
   * @param {string} kind
   * @param {string} name
   * @param {number} version
   * @param {any} value
   * @returns {this}
   */
  updateIfVersion(kind, name, version, value) {
    const key = new ObjectKey(kind, name);
    this.#ops.push(new Update(key, version, this.#encode(key, value)));
    return this;
  }

  /**
   * Request `obj`'s deletion if it is still at the version read.
   *
   * @param {import('./objects.js').StoredObject} obj
   * @returns {this}
   */
  delete(obj) {
    return this.deleteIfVersion(obj.kind, obj.name, obj.version);
  }

  /**
   * Request the deletion of `kind/name` if it is at `version`.
   *
   * @param {string} kind
   * @param {string} name
   * @param {number} version
   * @returns {this}
   */
  deleteIfVersion(kind, name, version) {
    this.#ops.push(new Delete(new ObjectKey(kind, name), version));
    return this;
  }

  /**
   * Create `kind/name` with `value` and `metadata`.
   *
   * @param {string} kind
   * @param {string} name
   * @param {any} value
   * @param {import('./keys.js').Metadata} metadata
   * @returns {this}
   */
  createWith(kind, name, value, metadata) {
    const key = new ObjectKey(kind, name);
    this.#typedInto(kind, value, key);
    this.#ops.push(new CreateWith(key, this.#encode(key, value), metadata));
    return this;
  }

  /**
   * Replace `obj`'s value and metadata if it is still at the version read.
   *
   * @param {import('./objects.js').StoredObject} obj
   * @param {any} value
   * @param {import('./keys.js').Metadata} metadata
   * @returns {this}
   */
  replace(obj, value, metadata) {
    this.#typedInto(obj.kind, value, obj.key);
    this.#ops.push(new Replace(obj.key, obj.version, this.#encode(obj.key, value), metadata));
    return this;
  }

  /**
   * Replace `obj`'s metadata (keeping its value) if it is at the version read.
   *
   * @param {import('./objects.js').StoredObject} obj
   * @param {import('./keys.js').Metadata} metadata
   * @returns {this}
   */
  setMetadata(obj, metadata) {
    this.#ops.push(new Replace(obj.key, obj.version, null, metadata));
    return this;
  }

  /**
   * Add finalizer `name` to `obj`; if it is there, only check the version.
   *
   * @param {import('./objects.js').StoredObject} obj
   * @param {string} name
   * @returns {this}
   */
  addFinalizer(obj, name) {
    if (obj.hasFinalizer(name)) return this.check(obj);
    return this.setMetadata(obj, obj.metadata.finalizer(name));
  }

  /**
   * Remove finalizer `name` from `obj` (the last one of a marked object removes it).
   *
   * @param {import('./objects.js').StoredObject} obj
   * @param {string} name
   * @returns {this}
   */
  removeFinalizer(obj, name) {
    if (!obj.hasFinalizer(name)) return this.check(obj);
    return this.setMetadata(obj, obj.metadata.withoutFinalizer(name));
  }

  /**
   * Write `obj`'s status, conditional on the generation read.
   *
   * @param {import('./objects.js').StoredObject} obj
   * @param {any} status
   * @returns {this}
   */
  updateStatus(obj, status) {
    return this.writeStatus(obj.kind, obj.name, obj.generation, status);
  }

  /**
   * Write the status of `kind/name`, at `expectedGeneration` if not null.
   *
   * @param {string} kind
   * @param {string} name
   * @param {number | null} expectedGeneration
   * @param {any} status
   * @returns {this}
   */
  writeStatus(kind, name, expectedGeneration, status) {
    const key = new ObjectKey(kind, name);
    this.#ops.push(new Status(key, expectedGeneration, this.#encode(key, status)));
    return this;
  }

  /**
   * Clear `obj`'s status, conditional on the generation read.
   *
   * @param {import('./objects.js').StoredObject} obj
   * @returns {this}
   */
  clearStatus(obj) {
    this.#ops.push(new Status(obj.key, obj.generation, null));
    return this;
  }

  /**
   * Make the commit depend on `obj` still being at the version read.
   *
   * @param {import('./objects.js').StoredObject} obj
   * @returns {this}
   */
  check(obj) {
    return this.checkVersion(obj.kind, obj.name, obj.version);
  }

  /**
   * Make the commit depend on `kind/name` being at `version` (0: absent).
   *
   * @param {string} kind
   * @param {string} name
   * @param {number} version
   * @returns {this}
   */
  checkVersion(kind, name, version) {
    this.#ops.push(new Check(new ObjectKey(kind, name), version));
    return this;
  }

  /**
   * Make the commit depend on `kind/name` not existing.
   *
   * @param {string} kind
   * @param {string} name
   * @returns {this}
   */
  checkAbsent(kind, name) {
    return this.checkVersion(kind, name, 0);
  }

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
  event(kind, name, reason, message) {
    this.#events.push(new NewEvent(new ObjectKey(kind, name), reason, message));
    return this;
  }

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
  eventOfType(kind, name, type, reason, message) {
    return this.event(kind, name, reason, encodeEventMessage(type, message));
  }

  /**
   * Append a `Warning` event about `kind/name` with the commit (see `eventOfType`).
   *
   * @param {string} kind
   * @param {string} name
   * @param {string} reason a PascalCase word, e.g. `ProvisionFailed`
   * @param {string} message
   * @returns {this}
   */
  warning(kind, name, reason, message) {
    return this.eventOfType(kind, name, EventType.Warning, reason, message);
  }

  /** The operations so far. @returns {Op[]} */
  get ops() {
    return [...this.#ops];
  }

  /** The events so far. @returns {NewEvent[]} */
  get events() {
    return [...this.#events];
  }

  /** True if there is nothing to commit. @returns {boolean} */
  isEmpty() {
    return this.#ops.length === 0 && this.#events.length === 0;
  }

  /**
   * Apply everything atomically; throw a `StoreError` if nothing was written.
   *
   * @returns {Committed}
   */
  commit() {
    if (this.#spent) throw new Error('a transaction commits once: build a new one from a re-read');
    this.#spent = true;
    if (this.#refused !== null) throw new Invalid(this.#refused);
    return currentHost().commit([...this.#ops], [...this.#events]);
  }
}
