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
/**
 * The settings as JSON text: always an object, `{}` when there are none.
 *
 * @returns {string}
 */
export declare function settingsJson(): string;
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
export declare class SettingsReader {
    #private;
    /**
     * @param {Record<string, any>} data a settings table
     * @param {string} [path] the table's own path from the top ('' at the top)
     */
    constructor(data: Record<string, any>, path?: string);
    /**
     * The path of `key` in this table.
     *
     * @param {string} key
     * @returns {string}
     */
    pathOf(key: string): string;
    /**
     * Whether `key` is present.
     *
     * @param {string} key
     * @returns {boolean}
     */
    has(key: string): boolean;
    /**
     * The string under `key`.
     *
     * @param {string} key
     * @param {...string} fallback what a missing key gives (required without it)
     * @returns {string}
     */
    string(key: string, ...fallback: string[]): string;
    /**
     * The number under `key`.
     *
     * @param {string} key
     * @param {...number} fallback
     * @returns {number}
     */
    number(key: string, ...fallback: number[]): number;
    /**
     * The whole number under `key` (exact in JavaScript: at most 2^53 - 1 in size).
     *
     * @param {string} key
     * @param {...number} fallback
     * @returns {number}
     */
    integer(key: string, ...fallback: number[]): number;
    /**
     * The boolean under `key`.
     *
     * @param {string} key
     * @param {...boolean} fallback
     * @returns {boolean}
     */
    boolean(key: string, ...fallback: boolean[]): boolean;
    /**
     * The list of strings under `key`; an item of another type is named `key[i]`.
     *
     * @param {string} key
     * @param {...string[]} fallback
     * @returns {string[]}
     */
    strings(key: string, ...fallback: string[][]): string[];
    /**
     * The list under `key`, items as they are.
     *
     * @param {string} key
     * @param {...any[]} fallback
     * @returns {any[]}
     */
    list(key: string, ...fallback: any[][]): any[];
    /**
     * The table under `key`, as a reader whose keys are named under it
     * (`db.port`); a missing key reads as an empty table when `optional`.
     *
     * @param {string} key
     * @param {boolean} [optional]
     * @returns {SettingsReader}
     */
    section(key: string, optional?: boolean): SettingsReader;
    /** The table itself (its plain JSON). @returns {Record<string, any>} */
    get data(): Record<string, any>;
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
export declare function settings<T>(decode?: (data: Record<string, any>, reader: SettingsReader) => T): T | Record<string, any>;
