/**
 * The controller's settings: its `[controllers.settings]` table as JSON.
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
 * The settings as a plain object, or decoded by `decode`.
 *
 * A shape error throws `SettingsError`, whose message names the error's
 * type and never a value: settings may hold secrets.
 *
 * @template T
 * @param {(data: Record<string, any>) => T} [decode]
 * @returns {T | Record<string, any>}
 */
export declare function settings<T>(decode?: (data: Record<string, any>) => T): T | Record<string, any>;
