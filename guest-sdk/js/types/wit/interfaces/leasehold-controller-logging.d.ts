/** @module Interface leasehold:controller/logging@0.4.0 **/
/**
 * Write one log line. Lines longer than the host's limit are truncated.
 */
export function log(level: Level, message: string): void;
/**
 * Severity of a log line.
 * # Variants
 * 
 * ## `"trace"`
 * 
 * Very detailed tracing.
 * ## `"debug"`
 * 
 * Debugging detail.
 * ## `"info"`
 * 
 * Normal operation.
 * ## `"warn"`
 * 
 * Something unexpected but handled.
 * ## `"error"`
 * 
 * A failure.
 */
export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
