/**
 * Log lines through the host, which attaches the controller and epoch.
 *
 * @module
 */
/**
 * Severity of a log line (the WIT `logging.level`).
 *
 * @readonly
 * @enum {string}
 */
export declare const Level: Readonly<{
    /** Very detailed tracing. */
    TRACE: "trace";
    /** Debugging detail. */
    DEBUG: "debug";
    /** Normal operation. */
    INFO: "info";
    /** Something unexpected but handled. */
    WARN: "warn";
    /** A failure. */
    ERROR: "error";
}>;
/**
 * Write one line at `level`; the host truncates lines over its limit.
 *
 * @param {string} level one of `Level`
 * @param {string} message
 * @returns {void}
 */
export declare function log(level: string, message: string): void;
/** Log `message` at `Level.TRACE`. @param {string} message @returns {void} */
export declare function trace(message: string): void;
/** Log `message` at `Level.DEBUG`. @param {string} message @returns {void} */
export declare function debug(message: string): void;
/** Log `message` at `Level.INFO`. @param {string} message @returns {void} */
export declare function info(message: string): void;
/** Log `message` at `Level.WARN`. @param {string} message @returns {void} */
export declare function warn(message: string): void;
/** Log `message` at `Level.ERROR`. @param {string} message @returns {void} */
export declare function error(message: string): void;
