/**
 * Re-reading after a conflict.
 *
 * @module
 */
/** Attempts `retryOnConflict` makes by default. */
export declare const DEFAULT_CONFLICT_ATTEMPTS = 5;
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
export declare function retryOnConflict<T>(attempts: number, attempt: () => T): T;
