/**
 * Typed kinds, objects as read, and the per-kind reader `Api`.
 *
 * @module
 */

import { DecodeError, TooMany } from './errors.js';
import { currentHost } from './host.js';
import { Metadata, ObjectKey } from './keys.js';
import { MAX_PAGE_SIZE } from './limits.js';

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
export class Kind {
  /** The kind's name, e.g. `tasks`. @type {string} */
  static KIND = '';

  /**
   * Build an instance from a decoded JSON value; throw on a wrong shape.
   *
   * @param {any} value
   * @returns {Kind}
   */
  static fromValue(value) {
    throw new Error(`${this.name}.fromValue is not implemented (value of type ${typeof value})`);
  }

  /**
   * This instance as a JSON-able value.
   *
   * @returns {any}
   */
  toValue() {
    throw new Error(`${this.constructor.name}.toValue is not implemented`);
  }
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
export class StoredObject {
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
  constructor(kind, name, version, value, metadata = new Metadata(), status = null, generation = 1, deletingSince = null) {
    /** The object's kind. @type {string} */
    this.kind = kind;
    /** The object's name. @type {string} */
    this.name = name;
    /** The store revision that last wrote it. @type {number} */
    this.version = version;
    /** The decoded value. @type {T} */
    this.value = value;
    /** Labels, owner and finalizers. @type {Metadata} */
    this.metadata = metadata;
    /** The decoded status part, or null. @type {any} */
    this.status = status;
    /** Grows with each write of the value or metadata. @type {number} */
    this.generation = generation;
    /** When its deletion was requested while finalizers remained, or null. @type {Date | null} */
    this.deletingSince = deletingSince;
  }

  /** The object's address. @returns {ObjectKey} */
  get key() {
    return new ObjectKey(this.kind, this.name);
  }

  /** The object's labels. @returns {Readonly<Record<string, string>>} */
  get labels() {
    return this.metadata.labels;
  }

  /**
   * The value of label `key`, or null.
   *
   * @param {string} key
   * @returns {string | null}
   */
  label(key) {
    return Object.hasOwn(this.metadata.labels, key) ? this.metadata.labels[key] : null;
  }

  /** The object's owner, or null. @returns {ObjectKey | null} */
  get owner() {
    return this.metadata.owner;
  }

  /** The object's finalizers. @returns {readonly string[]} */
  get finalizers() {
    return this.metadata.finalizers;
  }

  /**
   * True if finalizer `name` is on the object.
   *
   * @param {string} name
   * @returns {boolean}
   */
  hasFinalizer(name) {
    return this.metadata.finalizers.includes(name);
  }

  /** True while the object is marked for deletion. @returns {boolean} */
  get isDeleting() {
    return this.deletingSince !== null;
  }

  /**
   * This object with its value decoded as `kindType` (`DecodeError` if it does not fit).
   *
   * @template {typeof Kind} K
   * @param {K} kindType
   * @returns {StoredObject<InstanceType<K>>}
   */
  decode(kindType) {
    return new StoredObject(
      this.kind,
      this.name,
      this.version,
      /** @type {InstanceType<K>} */ (decodeValue(this.key, this.value, (v) => kindType.fromValue(v))),
      this.metadata,
      this.status,
      this.generation,
      this.deletingSince,
    );
  }
}

/**
 * One page of a listing: objects in name order and the next page's cursor.
 *
 * @template [T=any]
 * @typedef {object} Page
 * @property {StoredObject<T>[]} objects
 * @property {string | null} next the name to pass as `after` for the next page; null at the end
 */

/**
 * @param {ObjectKey} key
 * @param {any} value
 * @param {((value: any) => any) | null | undefined} decode
 * @returns {any}
 */
function decodeValue(key, value, decode) {
  if (decode == null) return value;
  try {
    return decode(value);
  } catch (e) {
    if (e instanceof Error) throw new DecodeError(key, `${e.name}: ${e.message}`);
    throw new DecodeError(key, String(e));
  }
}

/**
 * Turn a host's raw object into a `StoredObject`, decoding its JSON.
 *
 * @param {import('./keys.js').RawObject} raw
 * @param {((value: any) => any) | null} [decode]
 * @returns {StoredObject}
 */
export function decodeRaw(raw, decode = null) {
  const key = new ObjectKey(raw.kind, raw.name);
  let value;
  try {
    value = JSON.parse(raw.value);
  } catch (e) {
    throw new DecodeError(key, `its value is not JSON: ${/** @type {Error} */ (e).message}`);
  }
  let status = null;
  if (raw.status !== null) {
    try {
      status = JSON.parse(raw.status);
    } catch (e) {
      throw new DecodeError(key, `its status is not JSON: ${/** @type {Error} */ (e).message}`);
    }
  }
  const deleting = raw.deletingSinceMs === null ? null : new Date(raw.deletingSinceMs);
  return new StoredObject(
    raw.kind,
    raw.name,
    raw.version,
    decodeValue(key, value, decode),
    raw.metadata,
    status,
    raw.generation,
    deleting,
  );
}

/**
 * Reads of one kind: `get`, `list`, `listAll`, `listSelected`, `listAllSelected`.
 *
 * `new Api('tasks')` reads untyped values (decoded JSON); `Api.typed(Task)`
 * (or `Context.typed(Task)`) decodes each value with `Task.fromValue`.
 * Store errors are thrown as the `StoreError` subclasses.
 *
 * @template [T=any]
 */
export class Api {
  /**
   * @param {string} kind the kind read
   * @param {((value: any) => T) | null} [decode] how each value is decoded; null keeps the JSON
   */
  constructor(kind, decode = null) {
    /** The kind read. @type {string} */
    this.kind = kind;
    /** @type {((value: any) => T) | null} */
    this.decode = decode;
  }

  /**
   * The reader of `kindType.KIND`, decoding with `kindType.fromValue`.
   *
   * @template {typeof Kind} K
   * @param {K} kindType
   * @returns {Api<InstanceType<K>>}
   */
  static typed(kindType) {
    return new Api(kindType.KIND, (v) => /** @type {InstanceType<K>} */ (kindType.fromValue(v)));
  }

  /**
   * The object `name`, or null if it does not exist.
   *
   * @param {string} name
   * @returns {StoredObject<T> | null}
   */
  get(name) {
    const raw = currentHost().get(this.kind, name);
    return raw === null ? null : decodeRaw(raw, this.decode);
  }

  /**
   * One page in name order after `after`; the host caps `limit`.
   *
   * @param {string | null} [after]
   * @param {number} [limit]
   * @returns {Page<T>}
   */
  list(after = null, limit = MAX_PAGE_SIZE) {
    const page = currentHost().list(this.kind, after, limit);
    return { objects: page.objects.map((/** @type {any} */ r) => decodeRaw(r, this.decode)), next: page.next };
  }

  /**
   * One page of the objects `selector` selects, in name order after `after`.
   *
   * @param {import('./keys.js').Selector} selector
   * @param {string | null} [after]
   * @param {number} [limit]
   * @returns {Page<T>}
   */
  listSelected(selector, after = null, limit = MAX_PAGE_SIZE) {
    const page = currentHost().listSelected(this.kind, selector, after, limit);
    return { objects: page.objects.map((/** @type {any} */ r) => decodeRaw(r, this.decode)), next: page.next };
  }

  /**
   * Every object of the kind, page by page; `TooMany` past `max`.
   *
   * @param {number} max
   * @returns {StoredObject<T>[]}
   */
  listAll(max) {
    return this.#collect(max, (after) => this.list(after, MAX_PAGE_SIZE));
  }

  /**
   * Every object `selector` selects, page by page; `TooMany` past `max`.
   *
   * @param {import('./keys.js').Selector} selector
   * @param {number} max
   * @returns {StoredObject<T>[]}
   */
  listAllSelected(selector, max) {
    return this.#collect(max, (after) => this.listSelected(selector, after, MAX_PAGE_SIZE));
  }

  /**
   * @param {number} max
   * @param {(after: string | null) => Page<T>} pageOf
   * @returns {StoredObject<T>[]}
   */
  #collect(max, pageOf) {
    /** @type {StoredObject<T>[]} */
    const everything = [];
    /** @type {string | null} */
    let after = null;
    for (;;) {
      const page = pageOf(after);
      everything.push(...page.objects);
      if (everything.length > max) throw new TooMany(this.kind, max);
      // An empty page ends the listing whatever its cursor says.
      if (page.next === null || page.objects.length === 0) return everything;
      after = page.next;
    }
  }
}
