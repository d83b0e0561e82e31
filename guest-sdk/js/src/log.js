/**
 * Log lines through the host, which attaches the controller and epoch.
 *
 * @module
 */

import { currentHost } from './host.js';

/**
 * Severity of a log line (the WIT `logging.level`).
 *
 * @readonly
 * @enum {string}
 */
export const Level = Object.freeze({
  /** Very detailed tracing. */
  TRACE: 'trace',
  /** Debugging detail. */
  DEBUG: 'debug',
  /** Normal operation. */
  INFO: 'info',
  /** Something unexpected but handled. */
  WARN: 'warn',
  /** A failure. */
  ERROR: 'error',
});

/**
 * Write one line at `level`; the host truncates lines over its limit.
 *
 * @param {string} level one of `Level`
 * @param {string} message
 * @returns {void}
 */
export function log(level, message) {
  currentHost().log(level, message);
}

/** Log `message` at `Level.TRACE`. @param {string} message @returns {void} */
export function trace(message) {
  log(Level.TRACE, message);
}

/** Log `message` at `Level.DEBUG`. @param {string} message @returns {void} */
export function debug(message) {
  log(Level.DEBUG, message);
}

/** Log `message` at `Level.INFO`. @param {string} message @returns {void} */
export function info(message) {
  log(Level.INFO, message);
}

/** Log `message` at `Level.WARN`. @param {string} message @returns {void} */
export function warn(message) {
  log(Level.WARN, message);
}

/** Log `message` at `Level.ERROR`. @param {string} message @returns {void} */
export function error(message) {
  log(Level.ERROR, message);
}
