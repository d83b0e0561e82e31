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

import * as L from './limits.js';

/** A `JsonRefused.kind`: not JSON at all (or too deep, or out of range). */
export const NOT_JSON = 'not-json';
/** A `JsonRefused.kind`: an integer outside the 64-bit range. */
export const WIDE_INTEGER = 'wide-integer';
/** A `JsonRefused.kind`: a NUL character in a string or key. */
export const NUL = 'nul';

/** Why a text is not JSON the store keeps. */
export class JsonRefused extends Error {
  /**
   * @param {string} kind one of `NOT_JSON`, `WIDE_INTEGER`, `NUL`
   * @param {string} [detail] the parser's description, or the integer as written
   */
  constructor(kind, detail = '') {
    super('');
    /** @type {string} */ this.kind = kind;
    /** @type {string} */ this.detail = detail;
    this.message = this.describe();
  }

  /** The host's words for this refusal, after "the value of K ". @returns {string} */
  describe() {
    if (this.kind === WIDE_INTEGER) {
      return (
        `holds the integer ${this.detail}, outside the 64-bit range (${L.MIN_JSON_INTEGER} to ` +
        `${L.MAX_JSON_INTEGER}) that every store keeps exactly; write it as a string`
      );
    }
    if (this.kind === NUL) {
      return 'holds a NUL character (\\u0000), which no store can keep; remove it or encode the text';
    }
    return `is not JSON: ${this.detail}`;
  }
}

/** A JSON number: its canonical text, and its value for comparisons. */
export class JsonNumber {
  /**
   * @param {string} text canonical
   * @param {bigint | null} integer the value when written as an integer
   * @param {number} float the nearest double
   */
  constructor(text, integer, float) {
    /** @type {string} */ this.text = text;
    /** @type {bigint | null} */ this.integer = integer;
    /** @type {number} */ this.float = float;
  }
}

const MIN_INTEGER = BigInt(L.MIN_JSON_INTEGER);
const MAX_INTEGER = BigInt(L.MAX_JSON_INTEGER);
const encoder = new TextEncoder();

/**
 * `text` as JSON the store keeps; throws `JsonRefused`.
 *
 * @param {string} text
 * @returns {any}
 */
export function parse(text) {
  const reader = new Reader(text);
  reader.space();
  const value = reader.value(0);
  reader.space();
  if (reader.at < text.length) reader.fail('trailing characters');
  if (reader.wide !== null) throw new JsonRefused(WIDE_INTEGER, reader.wide);
  if (hasNul(value)) throw new JsonRefused(NUL);
  return value;
}

/**
 * The canonical text of `text`; throws `JsonRefused`.
 *
 * @param {string} text
 * @returns {string}
 */
export function canonical(text) {
  return dumps(parse(text));
}

class Reader {
  /** @param {string} text */
  constructor(text) {
    this.text = text;
    this.at = 0;
    /** The first integer outside the 64-bit range, as written. @type {string | null} */
    this.wide = null;
  }

  /** @param {string} why @returns {never} */
  fail(why) {
    throw new JsonRefused(NOT_JSON, `${why} at character ${this.at}`);
  }

  space() {
    while (this.at < this.text.length && ' \t\n\r'.includes(this.text[this.at])) this.at += 1;
  }

  /** @param {number} depth the containers around this value @returns {any} */
  value(depth) {
    const c = this.text[this.at];
    if (c === '{' || c === '[') {
      // The host's parser stops at 128 levels.
      if (depth + 1 > L.MAX_JSON_DEPTH) this.fail('recursion limit exceeded');
      return c === '{' ? this.object(depth + 1) : this.array(depth + 1);
    }
    if (c === '"') return this.string();
    if (c === '-' || (c >= '0' && c <= '9')) return this.number();
    for (const [word, value] of /** @type {const} */ ([['true', true], ['false', false], ['null', null]])) {
      if (this.text.startsWith(word, this.at)) {
        this.at += word.length;
        return value;
      }
    }
    return this.fail(c === undefined ? 'EOF while parsing a value' : 'expected value');
  }

  /** @param {number} depth @returns {Map<string, any>} */
  object(depth) {
    this.at += 1;
    /** @type {Map<string, any>} */
    const map = new Map();
    this.space();
    if (this.text[this.at] === '}') {
      this.at += 1;
      return map;
    }
    for (;;) {
      this.space();
      if (this.text[this.at] !== '"') this.fail('key must be a string');
      const key = this.string();
      this.space();
      if (this.text[this.at] !== ':') this.fail("expected ':'");
      this.at += 1;
      this.space();
      // The last of a repeated key wins, as on the host.
      map.delete(key);
      map.set(key, this.value(depth));
      this.space();
      const c = this.text[this.at];
      this.at += 1;
      if (c === '}') return map;
      if (c !== ',') this.fail("expected ',' or '}'");
    }
  }

  /** @param {number} depth @returns {any[]} */
  array(depth) {
    this.at += 1;
    /** @type {any[]} */
    const items = [];
    this.space();
    if (this.text[this.at] === ']') {
      this.at += 1;
      return items;
    }
    for (;;) {
      this.space();
      items.push(this.value(depth));
      this.space();
      const c = this.text[this.at];
      this.at += 1;
      if (c === ']') return items;
      if (c !== ',') this.fail("expected ',' or ']'");
    }
  }

  /** @returns {string} */
  string() {
    this.at += 1;
    let out = '';
    for (;;) {
      if (this.at >= this.text.length) this.fail('EOF while parsing a string');
      const code = this.text.charCodeAt(this.at);
      if (code === 0x22) {
        this.at += 1;
        return out;
      }
      if (code < 0x20) this.fail('control character found while parsing a string');
      if (code === 0x5c) {
        const e = this.text[this.at + 1];
        this.at += 2;
        const simple = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
        if (e !== undefined && Object.hasOwn(simple, e)) {
          out += simple[/** @type {keyof typeof simple} */ (e)];
          continue;
        }
        if (e !== 'u') this.fail('invalid escape');
        let unit = this.hex();
        if (unit >= 0xdc00 && unit <= 0xdfff) this.fail('lone trailing surrogate in hex escape');
        if (unit >= 0xd800 && unit <= 0xdbff) {
          if (this.text[this.at] !== '\\' || this.text[this.at + 1] !== 'u') {
            this.fail('lone leading surrogate in hex escape');
          }
          this.at += 2;
          const low = this.hex();
          if (low < 0xdc00 || low > 0xdfff) this.fail('lone leading surrogate in hex escape');
          out += String.fromCharCode(unit, low);
          continue;
        }
        out += String.fromCharCode(unit);
        continue;
      }
      if (code >= 0xd800 && code <= 0xdfff) {
        // A raw surrogate must be half of a pair.
        const next = this.text.charCodeAt(this.at + 1);
        if (code > 0xdbff || !(next >= 0xdc00 && next <= 0xdfff)) this.fail('lone surrogate');
        out += this.text.slice(this.at, this.at + 2);
        this.at += 2;
        continue;
      }
      out += this.text[this.at];
      this.at += 1;
    }
  }

  /** @returns {number} */
  hex() {
    const digits = this.text.slice(this.at, this.at + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(digits)) this.fail('invalid escape');
    this.at += 4;
    return parseInt(digits, 16);
  }

  /** @returns {JsonNumber} */
  number() {
    const match = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(this.text.slice(this.at));
    if (match === null) return this.fail('invalid number');
    const literal = match[0];
    this.at += literal.length;
    const next = this.text[this.at];
    if (next !== undefined && /[0-9.eE+-]/.test(next)) this.fail('invalid number');
    if (match[2] === undefined && match[3] === undefined) {
      // The host reads `-0` as a double.
      if (literal === '-0') return new JsonNumber('-0.0', null, -0);
      const integer = BigInt(literal);
      if ((integer < MIN_INTEGER || integer > MAX_INTEGER) && this.wide === null) {
        this.wide = literal.slice(0, 80);
      }
      return new JsonNumber(integer.toString(), integer, Number(integer));
    }
    const float = Number(literal);
    if (!Number.isFinite(float)) this.fail('number out of range');
    return new JsonNumber(floatText(float), null, float);
  }
}

/**
 * A double as the host writes it: its shortest digits, written out when
 * the decimal exponent is from -5 to 15, else `d.ddde±x`.
 *
 * @param {number} number finite
 * @returns {string}
 */
export function floatText(number) {
  if (number === 0) return Object.is(number, -0) ? '-0.0' : '0.0';
  const sign = number < 0 ? '-' : '';
  const [mantissa, exponent] = Math.abs(number).toString().split('e');
  const [whole, fraction = ''] = mantissa.split('.');
  const all = whole + fraction;
  const significant = all.replace(/^0+/, '');
  // The decimal exponent of the first significant digit.
  const e = whole.length - 1 + (exponent === undefined ? 0 : Number(exponent)) - (all.length - significant.length);
  const digits = significant.replace(/0+$/, '') || '0';
  if (e >= -5 && e <= 15) {
    if (digits.length - 1 <= e) return `${sign}${digits}${'0'.repeat(e - (digits.length - 1))}.0`;
    if (e >= 0) return `${sign}${digits.slice(0, e + 1)}.${digits.slice(e + 1)}`;
    return `${sign}0.${'0'.repeat(-e - 1)}${digits}`;
  }
  const body = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${body}e${e >= 0 ? '+' : '-'}${Math.abs(e)}`;
}

/**
 * Compare by the bytes of the UTF-8 encodings: code point order, the
 * host's order of object keys.
 *
 * @param {string} a
 * @param {string} b
 * @returns {number}
 */
export function byCodePoint(a, b) {
  const x = encoder.encode(a);
  const y = encoder.encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i += 1) {
    if (x[i] !== y[i]) return x[i] - y[i];
  }
  return x.length - y.length;
}

/**
 * A parsed value's canonical text.
 *
 * @param {any} value
 * @returns {string}
 */
export function dumps(value) {
  if (value === null) return 'null';
  if (value === true) return 'true';
  if (value === false) return 'false';
  if (value instanceof JsonNumber) return value.text;
  if (typeof value === 'string') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(dumps).join(',')}]`;
  if (value instanceof Map) {
    const keys = [...value.keys()].sort(byCodePoint);
    return `{${keys.map((k) => `${JSON.stringify(k)}:${dumps(value.get(k))}`).join(',')}}`;
  }
  throw new TypeError(`${typeof value} is not a parsed JSON value`);
}

/** @param {any} value @returns {boolean} */
function hasNul(value) {
  if (typeof value === 'string') return value.includes('\0');
  if (Array.isArray(value)) return value.some(hasNul);
  if (value instanceof Map) return [...value].some(([k, v]) => k.includes('\0') || hasNul(v));
  return false;
}

/** @param {any} value @returns {string} */
function kind(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (value instanceof Map) return 'object';
  if (value instanceof JsonNumber) return 'number';
  return typeof value;
}

/**
 * PostgreSQL's `jsonb @>`: at the top level only, an array contains a
 * scalar it has as an element.
 *
 * @param {any} value parsed
 * @param {any} query parsed
 * @returns {boolean}
 */
export function contains(value, query) {
  const q = kind(query);
  if (Array.isArray(value) && q !== 'array' && q !== 'object') return value.some((item) => contained(item, query));
  return contained(value, query);
}

/** @param {any} value @param {any} query @returns {boolean} */
function contained(value, query) {
  const a = kind(value);
  if (a !== kind(query)) return false;
  if (a === 'object') {
    return [...query].every(([k, q]) => value.has(k) && contained(value.get(k), q));
  }
  if (a === 'array') return query.every((/** @type {any} */ want) => value.some((/** @type {any} */ have) => contained(have, want)));
  if (a === 'number') return sameNumber(value, query);
  return value === query;
}

/**
 * Numbers by exact value, as PostgreSQL's numeric: integers as integers,
 * an integer and a double only when the double is exactly that integer.
 *
 * @param {JsonNumber} a
 * @param {JsonNumber} b
 * @returns {boolean}
 */
function sameNumber(a, b) {
  if (a.integer !== null && b.integer !== null) return a.integer === b.integer;
  if (a.integer !== null) return integerIs(a.integer, b.float);
  if (b.integer !== null) return integerIs(b.integer, a.float);
  return a.float === b.float;
}

/**
 * Whether the double `float` is exactly `integer`.
 *
 * @param {bigint} integer
 * @param {number} float
 * @returns {boolean}
 */
function integerIs(integer, float) {
  return Number.isInteger(float) && BigInt(float) === integer;
}

/**
 * How deep `value` nests arrays and objects (a scalar is 0), counted no
 * further than `cap`.
 *
 * @param {any} value parsed
 * @param {number} cap
 * @returns {number}
 */
export function depth(value, cap) {
  if (cap === 0) return 0;
  if (Array.isArray(value)) return 1 + Math.max(0, ...value.map((v) => depth(v, cap - 1)));
  if (value instanceof Map) return 1 + Math.max(0, ...[...value.values()].map((v) => depth(v, cap - 1)));
  return 0;
}

/**
 * UTF-8 length of `text`.
 *
 * @param {string} text
 * @returns {number}
 */
export function utf8Len(text) {
  return encoder.encode(text).length;
}
