/**
 * JSON as the host's store keeps it, for the fake host.
 *
 * The host parses every value, status and selector `contains` strictly and
 * stores one canonical text of it (its model crate, `leasehold_model::json`);
 * `JSON.parse` cannot give the same answers (it reads `1.0` as `1`, rounds
 * integers beyond 2^53 and reads `1e400` as `Infinity`), so the fake reads
 * JSON text with this parser instead:
 *
 * - the canonical text is compact, object keys sorted by code point (the
 *   last of a repeated key wins), strings with only `"`, `\` and control
 *   characters escaped, integers as written, every other number as the
 *   nearest double in its shortest digits: written out (`1.0`,
 *   `1000000000.0`, `0.00001`) when its decimal exponent is from -5 to 15,
 *   else in scientific notation (`1e+16`, `1.5e-7`); `-0` is `-0.0`;
 * - refused as not JSON: what the grammar refuses, a number too large for a
 *   double (`1e400`), a lone surrogate, nesting deeper than `MAX_JSON_DEPTH`;
 * - refused as well: an integer outside `MIN_JSON_INTEGER` to
 *   `MAX_JSON_INTEGER` (the host would have to round it), and a NUL
 *   character in any string or key (no store keeps it).
 *
 * Parsed values are `null`, booleans, strings, arrays, `Map`s (objects) and
 * `JsonNumber`s. Containment is PostgreSQL's `jsonb @>`, numbers compared
 * by exact value.
 *
 * @module
 */
/** A `JsonRefused.kind`: not JSON at all (or too deep, or out of range). */
export declare const NOT_JSON = "not-json";
/** A `JsonRefused.kind`: an integer outside the 64-bit range. */
export declare const WIDE_INTEGER = "wide-integer";
/** A `JsonRefused.kind`: a NUL character in a string or key. */
export declare const NUL = "nul";
/** Why a text is not JSON the store keeps. */
export declare class JsonRefused extends Error {
    /** @type {string} */ kind: string;
    /** @type {string} */ detail: string;
    /**
     * @param {string} kind one of `NOT_JSON`, `WIDE_INTEGER`, `NUL`
     * @param {string} [detail] the parser's description, or the integer as written
     */
    constructor(kind: string, detail?: string);
    /** The host's words for this refusal, after "the value of K ". @returns {string} */
    describe(): string;
}
/** A JSON number: its canonical text, and its value for comparisons. */
export declare class JsonNumber {
    /** @type {string} */ text: string;
    /** @type {bigint | null} */ integer: bigint | null;
    /** @type {number} */ float: number;
    /**
     * @param {string} text canonical
     * @param {bigint | null} integer the value when written as an integer
     * @param {number} float the nearest double
     */
    constructor(text: string, integer: bigint | null, float: number);
}
/**
 * `text` as JSON the store keeps; throws `JsonRefused`.
 *
 * @param {string} text
 * @returns {any}
 */
export declare function parse(text: string): any;
/**
 * The canonical text of `text`; throws `JsonRefused`.
 *
 * @param {string} text
 * @returns {string}
 */
export declare function canonical(text: string): string;
/**
 * A double as the host writes it: its shortest digits, written out when
 * the decimal exponent is from -5 to 15, else `d.ddde±x`.
 *
 * @param {number} number finite
 * @returns {string}
 */
export declare function floatText(number: number): string;
/**
 * Compare by the bytes of the UTF-8 encodings: code point order, the
 * host's order of object keys.
 *
 * @param {string} a
 * @param {string} b
 * @returns {number}
 */
export declare function byCodePoint(a: string, b: string): number;
/**
 * A parsed value's canonical text.
 *
 * @param {any} value
 * @returns {string}
 */
export declare function dumps(value: any): string;
/**
 * PostgreSQL's `jsonb @>`: at the top level only, an array contains a
 * scalar it has as an element.
 *
 * @param {any} value parsed
 * @param {any} query parsed
 * @returns {boolean}
 */
export declare function contains(value: any, query: any): boolean;
/**
 * How deep `value` nests arrays and objects (a scalar is 0), counted no
 * further than `cap`.
 *
 * @param {any} value parsed
 * @param {number} cap
 * @returns {number}
 */
export declare function depth(value: any, cap: number): number;
/**
 * UTF-8 length of `text`.
 *
 * @param {string} text
 * @returns {number}
 */
export declare function utf8Len(text: string): number;
