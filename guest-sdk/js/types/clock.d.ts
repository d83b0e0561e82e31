/**
 * The host's wall clock (UTC), for timestamps and timers.
 *
 * Never compare it across tenures to decide who wrote last: versions and
 * epochs say that.
 *
 * @module
 */
/**
 * The wall clock's now.
 *
 * @returns {Date}
 */
export declare function now(): Date;
/**
 * Milliseconds from now until `at`; 0 if `at` has passed.
 *
 * @param {Date} at
 * @returns {number}
 */
export declare function untilMs(at: Date): number;
