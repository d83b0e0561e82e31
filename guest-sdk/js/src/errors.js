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
export const QUOTA_EXCEEDED_PREFIX = 'quota exceeded: ';

/** The base of every error the SDK throws from a reconcile. */
export class LeaseholdError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = new.target.name;
    /** When the host should retry, in milliseconds, if the error says. @type {number | null} */
    this.retryAfterMs = null;
  }

  /** True if this error means the tenure's lease is gone. @returns {boolean} */
  get isFenced() {
    return false;
  }
}

/** A store call failed (the WIT `store-error`). */
export class StoreError extends LeaseholdError {}

/**
 * The lease this guest runs under is no longer current.
 *
 * Nothing was written. The guest must stop: throw it on (the SDK reports
 * `fenced` to the host, whatever the controller's error policy says).
 */
export class Fenced extends StoreError {
  /** @param {string} why the host's explanation: which lease, epoch and holder */
  constructor(why) {
    super(`no longer the leader, stopping: ${why}`);
    /** The host's explanation. @type {string} */
    this.why = why;
  }

  /** Always true. @returns {boolean} */
  get isFenced() {
    return true;
  }
}

/** A precondition failed on `key`; nothing was written. Re-read and decide again. */
export class Conflict extends StoreError {
  /** @param {import('./keys.js').ObjectKey} key the object whose precondition failed */
  constructor(key) {
    super(`conflict on ${key}: it changed since it was read; re-read and retry`);
    /** The object whose precondition failed. @type {import('./keys.js').ObjectKey} */
    this.key = key;
  }
}

/** The object named by an update, replace, delete or status write does not exist. */
export class NotFound extends StoreError {
  /** @param {import('./keys.js').ObjectKey} key the missing object */
  constructor(key) {
    super(`${key} does not exist`);
    /** The missing object. @type {import('./keys.js').ObjectKey} */
    this.key = key;
  }
}

/** The request itself is wrong (a bad name, not JSON, too large, too many ops). */
export class Invalid extends StoreError {
  /** @param {string} why what is wrong, as the host says it */
  constructor(why) {
    super(`invalid store request: ${why}`);
    /** What is wrong. @type {string} */
    this.why = why;
  }
}

/** The backend failed; whether a commit was applied is unknown. Re-read first. */
export class Unavailable extends StoreError {
  /** @param {string} why the host's explanation */
  constructor(why) {
    super(`store unavailable: ${why}; re-read before retrying, a commit may have been applied`);
    /** The host's explanation. @type {string} */
    this.why = why;
  }
}

/**
 * A per-controller quota refused the commit; nothing was written.
 *
 * Parsed from the host's `invalid` text (`quota exceeded: controller=...
 * quota=... limit=... [retry_after_ms=...] [kind=...]: message`).
 */
export class QuotaExceeded extends StoreError {
  /**
   * @param {string} message the host's whole text
   * @param {string} controller the controller whose quota it is
   * @param {string} quota the quota's key, e.g. `max_creates_per_second`
   * @param {number} limit the quota's limit
   * @param {number | null} retryAfterMs when the quota allows the write again, if the host says
   * @param {string | null} kind the kind that is full, for `max_objects_per_kind`
   */
  constructor(message, controller, quota, limit, retryAfterMs, kind) {
    super(message);
    /** The controller whose quota it is. @type {string} */
    this.controller = controller;
    /** The quota's key. @type {string} */
    this.quota = quota;
    /** The quota's limit. @type {number} */
    this.limit = limit;
    this.retryAfterMs = retryAfterMs;
    /** The kind that is full, for `max_objects_per_kind`. @type {string | null} */
    this.kind = kind;
  }

  /**
   * The refusal `message` describes, or null if it is not one.
   *
   * @param {string} message
   * @returns {QuotaExceeded | null}
   */
  static parse(message) {
    if (!message.startsWith(QUOTA_EXCEEDED_PREFIX)) return null;
    const rest = message.slice(QUOTA_EXCEEDED_PREFIX.length);
    const sep = rest.indexOf(': ');
    if (sep < 0) return null;
    /** @type {Record<string, string>} */
    const fields = {};
    for (const part of rest.slice(0, sep).split(' ')) {
      const eq = part.indexOf('=');
      if (eq < 0) return null;
      fields[part.slice(0, eq)] = part.slice(eq + 1);
    }
    const int = (/** @type {string | undefined} */ text) =>
      text !== undefined && /^\d+$/.test(text) ? Number(text) : null;
    const limit = int(fields.limit);
    if (fields.controller === undefined || fields.quota === undefined || limit === null) return null;
    const retry = 'retry_after_ms' in fields ? int(fields.retry_after_ms) : null;
    if ('retry_after_ms' in fields && retry === null) return null;
    return new QuotaExceeded(message, fields.controller, fields.quota, limit, retry, fields.kind ?? null);
  }
}

/**
 * The error an `invalid` answer means: `QuotaExceeded` if it is a quota refusal, else `Invalid`.
 *
 * @param {string} why
 * @returns {StoreError}
 */
export function invalid(why) {
  return QuotaExceeded.parse(why) ?? new Invalid(why);
}

/** An object's value (or status) does not have the shape the reader expects. */
export class DecodeError extends LeaseholdError {
  /**
   * @param {import('./keys.js').ObjectKey} key the object that did not decode
   * @param {string} message what is wrong
   */
  constructor(key, message) {
    super(`${key} does not have the expected shape: ${message}`);
    /** The object that did not decode. @type {import('./keys.js').ObjectKey} */
    this.key = key;
  }
}

/** A `listAll` found more objects than the bound it was given. */
export class TooMany extends LeaseholdError {
  /**
   * @param {string} kind the kind listed
   * @param {number} max the bound
   */
  constructor(kind, max) {
    super(`more than ${max} objects of kind ${kind}; page through them with Api.list instead`);
    /** The kind listed. @type {string} */
    this.kind = kind;
    /** The bound. @type {number} */
    this.max = max;
  }
}

/**
 * The controller's settings do not have the expected shape.
 *
 * `key` names the key it failed on, as a path from the top of the
 * settings (`region`, `db.port`, `exempt[2]`), when one is to blame. The
 * message never quotes a value of the settings: they may hold secrets.
 */
export class SettingsError extends LeaseholdError {
  /**
   * @param {string} message what is wrong, by type ("missing", "a string, expected a number"), never by value
   * @param {string | null} [key] the key it failed on, as a path; null when the settings as a whole did not fit
   */
  constructor(message, key = null) {
    super(
      key === null
        ? `the controller's settings do not have the expected shape: ${message}`
        : `the controller's settings do not have the expected shape: key \`${key}\`: ${message}`,
    );
    /** The key it failed on, as a path from the top (`db.port`, `exempt[2]`), or null. @type {string | null} */
    this.key = key;
    /** What was wrong, without any value. @type {string} */
    this.problem = message;
  }
}

/** A reconcile failure of the controller's own, with an optional retry delay. */
export class Failed extends LeaseholdError {
  /**
   * @param {string} message what went wrong
   * @param {number | null} [retryAfterMs] when to retry; null lets the host back off
   */
  constructor(message, retryAfterMs = null) {
    super(message);
    this.retryAfterMs = retryAfterMs;
  }
}
