/**
 * The controller's settings: its `[controllers.settings]` table as JSON.
 *
 * @module
 */

import { SettingsError } from './errors.js';
import { currentHost } from './host.js';

/**
 * The settings as JSON text: always an object, `{}` when there are none.
 *
 * @returns {string}
 */
export function settingsJson() {
  return currentHost().settings();
}

/**
 * The settings as a plain object, or decoded by `decode`.
 *
 * A shape error throws `SettingsError`, whose message names the error's
 * type and never a value: settings may hold secrets.
 *
 * @template T
 * @param {(data: Record<string, any>) => T} [decode]
 * @returns {T | Record<string, any>}
 */
export function settings(decode) {
  let data;
  try {
    data = JSON.parse(settingsJson());
  } catch (e) {
    throw new SettingsError(`not JSON (${/** @type {Error} */ (e).name})`);
  }
  if (decode === undefined) return data;
  try {
    return decode(data);
  } catch (e) {
    // The error's text may quote a value: only its type is kept.
    throw new SettingsError(e instanceof Error ? e.name : typeof e);
  }
}
