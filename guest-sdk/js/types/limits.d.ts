/**
 * The host's default bounds, as the Rust SDK's `limits` module states them.
 *
 * The fake host enforces these; a real host may be configured with other
 * values (see `docs/contract.md`).
 *
 * @module
 */
/** Longest kind or name: a DNS label. */
export declare const MAX_LABEL_LEN = 63;
/** Largest value (or status) in bytes of JSON text. */
export declare const MAX_VALUE_BYTES: number;
/** Most operations in one commit. */
export declare const MAX_OPS_PER_COMMIT = 128;
/** Most events in one commit. */
export declare const MAX_EVENTS_PER_COMMIT = 128;
/** Longest event reason in bytes. */
export declare const MAX_EVENT_REASON_BYTES = 128;
/** Longest event message in bytes. */
export declare const MAX_EVENT_MESSAGE_BYTES: number;
/** The page size a list gets when it asks for 0. */
export declare const DEFAULT_PAGE_SIZE = 100;
/** The largest page a list returns, whatever it asks for. */
export declare const MAX_PAGE_SIZE = 500;
/** Largest payload of one host call in bytes. */
export declare const MAX_CALL_PAYLOAD_BYTES: number;
/** Longest log line in bytes; longer lines are truncated. */
export declare const LOG_LINE_BYTES: number;
/** Largest settings JSON text in bytes. */
export declare const MAX_SETTINGS_BYTES: number;
/** Most labels on an object. */
export declare const MAX_LABELS = 32;
/** Longest label key in bytes. */
export declare const MAX_LABEL_KEY_BYTES = 128;
/** Longest non-empty label value in bytes. */
export declare const MAX_LABEL_VALUE_BYTES = 63;
/** Most finalizers on an object. */
export declare const MAX_FINALIZERS = 16;
/** Longest finalizer in bytes. */
export declare const MAX_FINALIZER_BYTES = 128;
/** Most owned objects one commit deletes or marks through their owners. */
export declare const MAX_COLLECTED_PER_COMMIT = 1000;
/** Most labels in a selector. */
export declare const MAX_SELECTOR_LABELS = 32;
/** Largest `contains` of a selector, in bytes of compact JSON. */
export declare const MAX_SELECTOR_CONTAINS_BYTES: number;
/** Deepest nesting of a selector's `contains`. */
export declare const MAX_SELECTOR_CONTAINS_DEPTH = 16;
/** Deepest nesting of arrays and objects in any JSON the store keeps. */
export declare const MAX_JSON_DEPTH = 127;
/** Smallest integer a JSON value may hold (below it: refused, not rounded). */
export declare const MIN_JSON_INTEGER = -9223372036854775808n;
/** Largest integer a JSON value may hold (above it: refused, not rounded). */
export declare const MAX_JSON_INTEGER = 18446744073709551615n;
/** Most shards a controller may run as (`shards = N` in its config entry). */
export declare const MAX_SHARDS = 64;
/** Most outbound HTTP requests one reconcile may send (`Limit` past it). */
export declare const MAX_HTTP_REQUESTS_PER_RECONCILE = 64;
/** Largest outbound HTTP request body in bytes (`BodyTooLarge` past it). */
export declare const MAX_HTTP_REQUEST_BODY_BYTES: number;
/** Largest HTTP response body in bytes (`BodyTooLarge` past it). */
export declare const MAX_HTTP_RESPONSE_BODY_BYTES: number;
