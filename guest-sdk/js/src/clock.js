/**
 * The host's wall clock (UTC), for timestamps and timers.
 *
 * Never compare it across tenures to decide who wrote last: versions and
 * epochs say that.
 *
 * @module
 */

import { currentHost } from './host.js';

/**
 * The wall clock's now.
 *
 * @returns {Date}
 */
export function now() {
  return new Date(currentHost().nowMs());
}

/**
 * Milliseconds from now until `at`; 0 if `at` has passed.
 *
 * @param {Date} at
 * @returns {number}
 */
export function untilMs(at) {
  return Math.max(0, at.getTime() - currentHost().nowMs());
}
