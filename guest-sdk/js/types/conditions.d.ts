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
/**
 * Whether a condition holds.
 *
 * @readonly
 * @enum {string}
 */
export declare const ConditionStatus: Readonly<{
    /** The condition holds. */
    TRUE: "True";
    /** It does not. */
    FALSE: "False";
    /** The controller cannot tell (yet): work in progress, or an answer it is waiting for. */
    UNKNOWN: "Unknown";
}>;
/**
 * `at` as RFC 3339 text in UTC, to the second: `2026-01-01T00:00:00Z` (a
 * fraction is cut, not rounded).
 *
 * @param {Date} at
 * @returns {string}
 */
export declare function formatTime(at: Date): string;
/**
 * An RFC 3339 date-time (`2026-01-01T12:00:00.5+02:00`, `T` and `Z` in
 * either case) as a `Date` (to the millisecond); null if `text` is not one.
 *
 * @param {string} text
 * @returns {Date | null}
 */
export declare function parseTime(text: string): Date | null;
/**
 * One condition of an object's status (Kubernetes' `metav1.Condition`).
 *
 * Change a status's list only with `setCondition` and `removeCondition`,
 * which keep one condition per `type` and move `lastTransitionTime` only
 * when the status changes. `JSON.stringify` gives the wire form
 * (`toJSON`).
 */
export declare class Condition {
    /** What the condition is about. @type {string} */
    type: string;
    /** Whether it holds: one of `ConditionStatus`. @type {string} */
    status: string;
    /** Why, for programs. @type {string} */
    reason: string;
    /** Why, for people. @type {string} */
    message: string;
    /** The object's generation the condition was computed from (0: not given). @type {number} */
    observedGeneration: number;
    /** When the status last changed, to the second. @type {Date} */
    lastTransitionTime: Date;
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
    constructor({ type, status, reason, message, observedGeneration, lastTransitionTime }: {
        type: string;
        status: string;
        reason: string;
        message?: string;
        observedGeneration?: number;
        lastTransitionTime?: Date;
    });
    /** Whether the status is `True`. @returns {boolean} */
    get isTrue(): boolean;
    /**
     * The wire form, with the field names of every SDK.
     *
     * @returns {{type: string, status: string, reason: string, message: string, observed_generation: number, last_transition_time: string}}
     */
    toJSON(): {
        type: string;
        status: string;
        reason: string;
        message: string;
        observed_generation: number;
        last_transition_time: string;
    };
    /**
     * A condition read from its wire form (`message` and
     * `observed_generation` may be absent); a `TypeError` saying what is
     * wrong if it is not one.
     *
     * @param {any} wire
     * @returns {Condition}
     */
    static fromJSON(wire: any): Condition;
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
export declare function setCondition(status: Record<string, any>, condition: Condition | {
    type: string;
    status: string;
    reason: string;
    message?: string;
    observedGeneration?: number;
}): boolean;
/**
 * The condition of `type` in `status.conditions`, or null (also for a
 * status that is null or has no conditions). A `TypeError` if the one
 * found is not a condition.
 *
 * @param {Record<string, any> | null | undefined} status
 * @param {string} type
 * @returns {Condition | null}
 */
export declare function getCondition(status: Record<string, any> | null | undefined, type: string): Condition | null;
/**
 * Remove the condition of `type` from `status.conditions`; whether there was one.
 *
 * @param {Record<string, any> | null | undefined} status
 * @param {string} type
 * @returns {boolean}
 */
export declare function removeCondition(status: Record<string, any> | null | undefined, type: string): boolean;
