/**
 * Re-reading after a conflict.
 *
 * @module
 */

import { Conflict, NotFound } from './errors.js';
import { info } from './log.js';

/** Attempts `retryOnConflict` makes by default. */
export const DEFAULT_CONFLICT_ATTEMPTS = 5;

/**
 * Call `attempt` (read, decide, commit) until it does not conflict.
 *
 * `Conflict` and `NotFound` mean the objects changed since they were read:
 * `attempt` runs again, up to `attempts` times in all, and the last error
 * is thrown. Every other error (`Fenced`, `Unavailable`, ...) is thrown at
 * once: an unavailable commit may have been applied, so it is never
 * retried blindly.
 *
 * @template T
 * @param {number} attempts
 * @param {() => T} attempt
 * @returns {T}
 */
export function retryOnConflict(attempts, attempt) {
  const most = Math.max(1, attempts);
  for (let made = 1; ; made++) {
    try {
      return attempt();
    } catch (error) {
      if (!(error instanceof Conflict || error instanceof NotFound) || made >= most) throw error;
      info(`${error.key} changed since it was read; reading again (attempt ${made + 1} of ${most})`);
    }
  }
}
