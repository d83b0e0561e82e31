/**
 * Conditions: the part of a status that says, per aspect of an object,
 * whether it holds, why, and since when, shaped like Kubernetes'
 * `metav1.Condition`.
 *
 * A status keeps them as a list under `conditions`, one per `type`, in
 * the same JSON every SDK of this repository reads and writes
 * (snake_case on the wire, whatever a language calls the fields):
 *
 * ```json
 * { "conditions": [ { "type": "Ready", "status": "True", "reason": "Provisioned",
 *     "message": "applied by the cloud", "observed_generation": 3,
 *     "last_transition_time": "2026-01-01T00:00:00Z" } ] }
 * ```
 *
 * `status` is `True`, `False` or `Unknown`; `last_transition_time` is RFC
 * 3339 text in UTC, to the second (any RFC 3339 offset and fraction is
 * read). In JavaScript a `Condition` names them `observedGeneration` and
 * `lastTransitionTime` (a `Date`); the list in a status object holds the
 * wire form, so a status read from the store, changed with
 * `setCondition`, and written back with `Transaction.updateStatus` keeps
 * what other SDKs wrote.
 *
 * Owns: `Condition`, `ConditionStatus`, `setCondition`, `getCondition`,
 * `removeCondition` and the RFC 3339 text of a time. Must never: move
 * `last_transition_time` unless the status changed, or take it from
 * anything but the SDK's wall clock (`now()`: the host's, or the fake's).
 *
 * @module
 */

import { now } from './clock.js';

/**
 * Whether a condition holds.
 *
 * @readonly
 * @enum {string}
 */
export const ConditionStatus = Object.freeze({
  /** The condition holds. */
  TRUE: 'True',
  /** It does not. */
  FALSE: 'False',
  /** The controller cannot tell (yet): work in progress, or an answer it is waiting for. */
  UNKNOWN: 'Unknown',
});

/** @type {string[]} */
const STATUSES = Object.values(ConditionStatus);

/**
 * `at` cut to the second.
 *
 * @param {Date} at
 * @returns {Date}
 */
function toTheSecond(at) {
  return new Date(Math.floor(at.getTime() / 1000) * 1000);
}

/**
 * `at` as RFC 3339 text in UTC, to the second: `2026-01-01T00:00:00Z` (a
 * fraction is cut, not rounded).
 *
 * @param {Date} at
 * @returns {string}
 */
export function formatTime(at) {
  return toTheSecond(at).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/**
 * An RFC 3339 date-time (`2026-01-01T12:00:00.5+02:00`, `T` and `Z` in
 * either case) as a `Date` (to the millisecond); null if `text` is not one.
 *
 * @param {string} text
 * @returns {Date | null}
 */
export function parseTime(text) {
  const m = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/.exec(
    typeof text === 'string' ? text : '',
  );
  if (m === null) return null;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number);
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1];
  // A leap second (60) is read as the second before the next minute.
  if (days === undefined || day < 1 || day > days || hour > 23 || minute > 59 || second > 60) return null;
  let offset = 0;
  if (m[8] === undefined) {
    const [hours, minutes] = [Number(m[10]), Number(m[11])];
    if (hours > 23 || minutes > 59) return null;
    offset = (m[9] === '+' ? 1 : -1) * (hours * 60 + minutes) * 60_000;
  }
  const millis = m[7] === undefined ? 0 : Number(m[7].slice(0, 3).padEnd(3, '0'));
  const at = new Date(0);
  // setUTCFullYear: Date.UTC would read years 0 to 99 as 1900 to 1999.
  at.setUTCFullYear(year, month - 1, day);
  at.setUTCHours(hour, minute, Math.min(second, 59), millis);
  return new Date(at.getTime() - offset);
}

/**
 * One condition of an object's status (Kubernetes' `metav1.Condition`).
 *
 * Change a status's list only with `setCondition` and `removeCondition`,
 * which keep one condition per `type` and move `lastTransitionTime` only
 * when the status changes. `JSON.stringify` gives the wire form
 * (`toJSON`).
 */
export class Condition {
  /**
   * A condition of `type` with `status`, `reason` and `message`, observed
   * at `observedGeneration` (0 if not given) and timed `lastTransitionTime`
   * (the SDK's wall clock now, to the second, if not given).
   *
   * @param {object} parts
   * @param {string} parts.type what the condition is about, in PascalCase: `Ready`
   * @param {string} parts.status one of `ConditionStatus`
   * @param {string} parts.reason why, in one PascalCase word, for programs: `Provisioned`
   * @param {string} [parts.message] why, for people (may be empty)
   * @param {number} [parts.observedGeneration] the object's generation the condition was computed from
   * @param {Date} [parts.lastTransitionTime] when the status last changed
   */
  constructor({ type, status, reason, message = '', observedGeneration = 0, lastTransitionTime }) {
    if (typeof type !== 'string' || type === '') throw new TypeError('a condition has a type: a non-empty string');
    if (!STATUSES.includes(status)) {
      throw new TypeError(`a condition's status is True, False or Unknown, not ${JSON.stringify(String(status))}`);
    }
    if (typeof reason !== 'string') throw new TypeError(`condition ${type}: its reason is a string`);
    if (typeof message !== 'string') throw new TypeError(`condition ${type}: its message is a string`);
    if (!Number.isSafeInteger(observedGeneration) || observedGeneration < 0) {
      throw new TypeError(`condition ${type}: its observed generation is a whole number from 0`);
    }
    /** What the condition is about. @type {string} */
    this.type = type;
    /** Whether it holds: one of `ConditionStatus`. @type {string} */
    this.status = status;
    /** Why, for programs. @type {string} */
    this.reason = reason;
    /** Why, for people. @type {string} */
    this.message = message;
    /** The object's generation the condition was computed from (0: not given). @type {number} */
    this.observedGeneration = observedGeneration;
    /** When the status last changed, to the second. @type {Date} */
    this.lastTransitionTime = toTheSecond(lastTransitionTime ?? now());
    Object.freeze(this);
  }

  /** Whether the status is `True`. @returns {boolean} */
  get isTrue() {
    return this.status === ConditionStatus.TRUE;
  }

  /**
   * The wire form, with the field names of every SDK.
   *
   * @returns {{type: string, status: string, reason: string, message: string, observed_generation: number, last_transition_time: string}}
   */
  toJSON() {
    return {
      type: this.type,
      status: this.status,
      reason: this.reason,
      message: this.message,
      observed_generation: this.observedGeneration,
      last_transition_time: formatTime(this.lastTransitionTime),
    };
  }

  /**
   * A condition read from its wire form (`message` and
   * `observed_generation` may be absent); a `TypeError` saying what is
   * wrong if it is not one.
   *
   * @param {any} wire
   * @returns {Condition}
   */
  static fromJSON(wire) {
    if (wire === null || typeof wire !== 'object' || Array.isArray(wire)) {
      throw new TypeError('a condition is a JSON object');
    }
    const at = parseTime(wire.last_transition_time);
    if (at === null) {
      throw new TypeError(`condition ${String(wire.type)}: last_transition_time is not an RFC 3339 time`);
    }
    return new Condition({
      type: wire.type,
      status: wire.status,
      reason: wire.reason,
      message: wire.message ?? '',
      observedGeneration: wire.observed_generation ?? 0,
      lastTransitionTime: at,
    });
  }
}

/**
 * The `conditions` list of `status`, checked.
 *
 * @param {any} status
 * @param {boolean} create make an empty list if there is none
 * @returns {any[] | null}
 */
function listOf(status, create) {
  if (status === null || status === undefined) {
    if (create) throw new TypeError('setCondition needs a status object to put the condition in');
    return null;
  }
  if (typeof status !== 'object' || Array.isArray(status)) throw new TypeError('a status with conditions is a JSON object');
  if (status.conditions === undefined || status.conditions === null) {
    if (!create) return null;
    status.conditions = [];
  }
  if (!Array.isArray(status.conditions)) throw new TypeError("a status's conditions are a list");
  return status.conditions;
}

/**
 * Put `condition` into `status.conditions` (created if absent), replacing
 * the one of its type, and say whether anything changed (so a controller
 * writes the status only when it did). `status` is changed in place; the
 * list holds the wire form.
 *
 * `lastTransitionTime` is set from the SDK's wall clock (`now()`, to the
 * second) when the condition is new or its status changed; when only the
 * reason, message or observed generation changed it keeps its time. The
 * given condition's own time is not used.
 *
 * @param {Record<string, any>} status
 * @param {Condition | {type: string, status: string, reason: string, message?: string, observedGeneration?: number}} condition
 * @returns {boolean}
 */
export function setCondition(status, condition) {
  const list = /** @type {any[]} */ (listOf(status, true));
  const given = condition instanceof Condition ? condition : new Condition(condition);
  const index = list.findIndex((c) => c?.type === given.type);
  if (index < 0) {
    list.push(new Condition({ ...given, lastTransitionTime: now() }).toJSON());
    return true;
  }
  const existing = Condition.fromJSON(list[index]);
  const transition = existing.status !== given.status;
  const changed =
    transition ||
    existing.reason !== given.reason ||
    existing.message !== given.message ||
    existing.observedGeneration !== given.observedGeneration;
  const time = transition ? now() : existing.lastTransitionTime;
  list[index] = new Condition({ ...given, lastTransitionTime: time }).toJSON();
  return changed;
}

/**
 * The condition of `type` in `status.conditions`, or null (also for a
 * status that is null or has no conditions). A `TypeError` if the one
 * found is not a condition.
 *
 * @param {Record<string, any> | null | undefined} status
 * @param {string} type
 * @returns {Condition | null}
 */
export function getCondition(status, type) {
  const found = listOf(status, false)?.find((c) => c?.type === type);
  return found === undefined ? null : Condition.fromJSON(found);
}

/**
 * Remove the condition of `type` from `status.conditions`; whether there was one.
 *
 * @param {Record<string, any> | null | undefined} status
 * @param {string} type
 * @returns {boolean}
 */
export function removeCondition(status, type) {
  const list = listOf(status, false);
  if (list === null) return false;
  const index = list.findIndex((c) => c?.type === type);
  if (index < 0) return false;
  list.splice(index, 1);
  return true;
}
