/**
 * The controller's settings: its `[controllers.settings]` table as JSON.
 *
 * Owns: `settings` (decoded by the controller's function, with a
 * `SettingsReader` that names the key a problem is under), `settingsJson`
 * (the text). Must never: put a settings value in an error message
 * (settings may hold secrets, and a failed reconcile's message reaches the
 * host's log).
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
 * What a JSON value is, by type only, for messages.
 *
 * @param {any} value
 * @returns {string}
 */
function kindOf(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a table';
  if (typeof value === 'number') return Number.isInteger(value) ? 'a whole number' : 'a number with a fraction';
  if (typeof value === 'boolean') return 'a boolean';
  if (typeof value === 'string') return 'a string';
  return typeof value;
}

/**
 * Typed reads of a settings table that name the key a problem is under.
 *
 * Each read takes the key and an optional fallback: a missing key gives
 * the fallback, or, without one, a `SettingsError` naming the key
 * (`missing`); a value of the wrong type is a `SettingsError` naming the
 * key and saying what was found by type ("a string, expected a whole
 * number"), never the value. Nested tables read with `section`, whose
 * keys are named as paths (`db.port`); list items as `exempt[2]`.
 *
 * ```js
 * const { region, maxTasks, exempt } = settings((_data, s) => ({
 *   region: s.string('region'),
 *   maxTasks: s.integer('max_tasks_per_project', 10),
 *   exempt: s.strings('exempt', []),
 * }));
 * ```
 */
export class SettingsReader {
  /** @type {Record<string, any>} */ #data;
  /** @type {string} */ #path;

  /**
   * @param {Record<string, any>} data a settings table
   * @param {string} [path] the table's own path from the top ('' at the top)
   */
  constructor(data, path = '') {
    this.#data = data;
    this.#path = path;
  }

  /**
   * The path of `key` in this table.
   *
   * @param {string} key
   * @returns {string}
   */
  pathOf(key) {
    return this.#path === '' ? key : `${this.#path}.${key}`;
  }

  /**
   * Whether `key` is present.
   *
   * @param {string} key
   * @returns {boolean}
   */
  has(key) {
    return Object.hasOwn(this.#data, key);
  }

  /**
   * The value under `key` if it passes `fits`, else the fallback or a
   * `SettingsError` naming the key.
   *
   * @param {string} key
   * @param {any[]} fallback `[]` (required) or `[value]`
   * @param {string} expected what `fits` accepts, for the message
   * @param {(value: any) => boolean} fits
   * @returns {any}
   */
  #read(key, fallback, expected, fits) {
    if (!this.has(key)) {
      if (fallback.length > 0) return fallback[0];
      throw new SettingsError('missing', this.pathOf(key));
    }
    const value = this.#data[key];
    if (!fits(value)) throw new SettingsError(`${kindOf(value)}, expected ${expected}`, this.pathOf(key));
    return value;
  }

  /**
   * The string under `key`.
   *
   * @param {string} key
   * @param {...string} fallback what a missing key gives (required without it)
   * @returns {string}
   */
  string(key, ...fallback) {
    return this.#read(key, fallback, 'a string', (v) => typeof v === 'string');
  }

  /**
   * The number under `key`.
   *
   * @param {string} key
   * @param {...number} fallback
   * @returns {number}
   */
  number(key, ...fallback) {
    return this.#read(key, fallback, 'a number', (v) => typeof v === 'number');
  }

  /**
   * The whole number under `key` (exact in JavaScript: at most 2^53 - 1 in size).
   *
   * @param {string} key
   * @param {...number} fallback
   * @returns {number}
   */
  integer(key, ...fallback) {
    return this.#read(key, fallback, 'a whole number', (v) => Number.isSafeInteger(v));
  }

  /**
   * The boolean under `key`.
   *
   * @param {string} key
   * @param {...boolean} fallback
   * @returns {boolean}
   */
  boolean(key, ...fallback) {
    return this.#read(key, fallback, 'a boolean', (v) => typeof v === 'boolean');
  }

  /**
   * The list of strings under `key`; an item of another type is named `key[i]`.
   *
   * @param {string} key
   * @param {...string[]} fallback
   * @returns {string[]}
   */
  strings(key, ...fallback) {
    const list = this.#read(key, fallback, 'a list of strings', (v) => Array.isArray(v));
    list.forEach((/** @type {any} */ item, /** @type {number} */ i) => {
      if (typeof item !== 'string') {
        throw new SettingsError(`${kindOf(item)}, expected a string`, `${this.pathOf(key)}[${i}]`);
      }
    });
    return [...list];
  }

  /**
   * The list under `key`, items as they are.
   *
   * @param {string} key
   * @param {...any[]} fallback
   * @returns {any[]}
   */
  list(key, ...fallback) {
    return this.#read(key, fallback, 'a list', (v) => Array.isArray(v));
  }

  /**
   * The table under `key`, as a reader whose keys are named under it
   * (`db.port`); a missing key reads as an empty table when `optional`.
   *
   * @param {string} key
   * @param {boolean} [optional]
   * @returns {SettingsReader}
   */
  section(key, optional = false) {
    const fits = (/** @type {any} */ v) => v !== null && typeof v === 'object' && !Array.isArray(v);
    const table = this.#read(key, optional ? [{}] : [], 'a table', fits);
    return new SettingsReader(table, this.pathOf(key));
  }

  /** The table itself (its plain JSON). @returns {Record<string, any>} */
  get data() {
    return this.#data;
  }
}

/**
 * The settings as a plain object, or decoded by `decode`.
 *
 * `decode(data, reader)` gets the plain object and a `SettingsReader`
 * over it: read with the reader, and a missing key or a value of the
 * wrong type is a `SettingsError` naming the key (`key`, a path such as
 * `db.port`), never the value. A `SettingsError` `decode` throws itself
 * is passed on as it is; any other error keeps only its type's name (its
 * text may quote a value: settings may hold secrets).
 *
 * @template T
 * @param {(data: Record<string, any>, reader: SettingsReader) => T} [decode]
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
    return decode(data, new SettingsReader(data));
  } catch (e) {
    if (e instanceof SettingsError) throw e;
    // The error's text may quote a value: only its type is kept.
    throw new SettingsError(e instanceof Error ? e.name : typeof e);
  }
}
