/**
 * Calling external services under the lease: outbound HTTP through the
 * standard `wasi:http/outgoing-handler`, fenced by the host. The Rust
 * SDK's `leasehold_guest::http`, in JavaScript.
 *
 * A controller's effects outside the store (a webhook, a cloud API) are
 * the ones a deposed leader can still cause after its successor took
 * over. The host closes that window from its side, and the receiver
 * closes the rest:
 *
 * - **Deny by default.** A request reaches the network only if its URL is
 *   in the controller's `http_allow` list in the host's config; anything
 *   else fails with `Denied` and nothing is sent.
 * - **Three fence headers.** The host sets `Leasehold-Lease:
 *   <cluster>/<lease>`, `Leasehold-Epoch: <epoch>` and `Leasehold-Holder:
 *   <holder>` on every request that leaves it (`LEASE_HEADER`,
 *   `EPOCH_HEADER`, `HOLDER_HEADER`), replacing whatever the guest set
 *   under those names.
 * - **Refusal after loss.** Once the lease is lost the host sends nothing
 *   more, and requests in flight are cut: `Fenced`. Let it propagate out
 *   of `reconcile`: the reconcile ends as *fenced*, exactly as after a
 *   fenced store call.
 * - **Bounds.** Timeouts (`Timeout`; `Request.timeout` may ask for a
 *   shorter first-byte timeout), body sizes (`BodyTooLarge`), requests in
 *   flight and per reconcile (`Limit`).
 *
 * A receiver of effects that must happen once follows the fenced-receiver
 * rule: it keeps the highest `Leasehold-Epoch` it accepted and answers a
 * lower one with `409 Conflict`, and it deduplicates by `Idempotency-Key`.
 * The controller's half is the key: `IdempotencyKey.forAction(kind, name,
 * generation, action)` names the decision, never the tenure, so a retry
 * and a successor send the same key (see `IdempotencyKey` for which
 * number to use: the object's **generation** for a spec-driven effect).
 *
 * ```js
 * import { http } from 'leasehold';
 *
 * const key = http.IdempotencyKey.forAction('orders', order.name, order.generation, 'invoice');
 * const response = http.Request.post('https://billing.example.com/v1/invoices')
 *   .json(order.value)
 *   .idempotencyKey(key)
 *   .send(); // throws http.Denied, http.Fenced (stop), http.Timeout, http.Connection, ...
 * ```
 *
 * Owns: the request builder, the author's error classes and the one
 * classification of what a host reports into them (`fromWire`),
 * responses. Must never: report a failure as fenced that the host did
 * not, or show a URL's user information or query, or a header's value, in
 * an error.
 *
 * @module
 */

import { LeaseholdError } from './errors.js';
import { IdempotencyKey } from './fence.js';
import { currentHost } from './host.js';
import { Target, WireHttpError, checkHeader, codeText, shownUrl } from './http-wire.js';

export { IdempotencyKey } from './fence.js';

/** The header naming the lease a request was sent under, `<cluster>/<lease>`; set by the host. */
export const LEASE_HEADER = 'leasehold-lease';
/** The header carrying the sending tenure's fencing epoch, in decimal; set by the host. */
export const EPOCH_HEADER = 'leasehold-epoch';
/** The header naming the replica that holds the lease; set by the host. */
export const HOLDER_HEADER = 'leasehold-holder';
/** The header `Request.idempotencyKey` sets. */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';
/**
 * The start of the host's `internal-error` message when a request was
 * refused, or its connection dropped, because the lease is lost: the SDK
 * derives `Fenced` from it.
 */
export const FENCED_PREFIX = 'leasehold-fenced: ';
/**
 * The start of the host's `internal-error` message when a host bound
 * (requests in flight, requests per reconcile) refused a request: the SDK
 * derives `Limit` from it.
 */
export const LIMIT_PREFIX = 'leasehold-limit: ';

/**
 * The methods a request may have.
 *
 * @readonly
 * @enum {string}
 */
export const Method = Object.freeze({
  /** Read a resource. */
  GET: 'GET',
  /** A `GET` without the response body. */
  HEAD: 'HEAD',
  /** Create, or run an action. */
  POST: 'POST',
  /** Create or replace a resource. */
  PUT: 'PUT',
  /** Change part of a resource. */
  PATCH: 'PATCH',
  /** Remove a resource. */
  DELETE: 'DELETE',
});

/**
 * Whether requests of `method` carry a body even when none was set (an
 * empty one, with `Content-Length: 0`): `POST`, `PUT` and `PATCH`.
 *
 * @param {string} method one of `Method`
 * @returns {boolean}
 */
export function hasBody(method) {
  return method === Method.POST || method === Method.PUT || method === Method.PATCH;
}

/**
 * Why an outbound request failed: the base of `Denied`, `Fenced`,
 * `Limit`, `BodyTooLarge`, `Timeout`, `Connection`, `Protocol`,
 * `InvalidRequest` and `Decode` (the Rust SDK's `HttpError` variants).
 *
 * `Fenced` means stop: let it propagate (the reconcile ends as fenced).
 * For the others, whether the receiver applied the request tells what a
 * retry needs: nothing was sent after `Denied`, `Limit` and
 * `InvalidRequest`; after `Timeout`, `Connection` or `Protocol` it may
 * have been applied, so retry only with the same idempotency key.
 */
export class HttpError extends LeaseholdError {
  /**
   * @param {string} message the whole message
   * @param {string} why what went wrong, after the request's method and URL
   */
  constructor(message, why) {
    super(message);
    /** What went wrong: which request (method and URL without its query) and how. @type {string} */
    this.why = why;
  }
}

/** The URL is not in the controller's `http_allow` list. Nothing was sent. */
export class Denied extends HttpError {
  /** @param {string} url the request's URL, without its query */
  constructor(url) {
    super(`request to ${url} denied: not in this controller's http_allow; nothing was sent`, url);
    /** The request's URL, without its query. @type {string} */
    this.url = url;
  }
}

/**
 * The lease this guest runs under is lost: nothing was sent, or the
 * request in flight had its connection dropped. Stop: let it propagate,
 * and the reconcile ends as fenced whatever `errorPolicy` says.
 */
export class Fenced extends HttpError {
  /** @param {string} why which request, and the host's explanation */
  constructor(why) {
    super(`no longer the leader, stopping: ${why}`, why);
  }

  /** Always true: the reconcile ends as fenced. @returns {boolean} */
  get isFenced() {
    return true;
  }
}

/** A host bound refused the request (requests in flight, requests per reconcile). Nothing was sent. */
export class Limit extends HttpError {
  /** @param {string} why which request, and the bound */
  constructor(why) {
    super(`outbound request refused by a host limit: ${why}`, why);
  }
}

/** The request's body, or the response's, is over the host's bound. */
export class BodyTooLarge extends HttpError {
  /** @param {string} why which request, and the bound */
  constructor(why) {
    super(`body over the host's bound: ${why}`, why);
  }
}

/** Connecting, waiting for the response, or reading its body took too long. It may have been applied. */
export class Timeout extends HttpError {
  /** @param {string} why which request, and which timeout */
  constructor(why) {
    super(`outbound request timed out: ${why}; it may have been applied`, why);
  }
}

/** The connection failed: refused, reset, DNS, TLS. After a reset the receiver may have applied it. */
export class Connection extends HttpError {
  /** @param {string} why which request, and what failed */
  constructor(why) {
    super(`outbound connection failed: ${why}`, why);
  }
}

/** Anything else that went wrong on the wire. */
export class Protocol extends HttpError {
  /** @param {string} why which request, and the host's code */
  constructor(why) {
    super(`outbound request failed: ${why}`, why);
  }
}

/** The request is malformed (URL, header, body, timeout); it will fail the same way again. Nothing was sent. */
export class InvalidRequest extends HttpError {
  /** @param {string} why which request, and what is wrong */
  constructor(why) {
    super(`invalid outbound request: ${why}`, why);
  }
}

/** A response body did not decode as asked (`Response.json`, `Response.text`). */
export class Decode extends HttpError {
  /** @param {string} why what did not decode */
  constructor(why) {
    super(`response body does not decode: ${why}`, why);
  }
}

const TIMEOUTS = new Set([
  'DNS-timeout',
  'connection-timeout',
  'connection-read-timeout',
  'connection-write-timeout',
  'HTTP-response-timeout',
]);
const CONNECTION = new Set([
  'DNS-error',
  'destination-not-found',
  'destination-unavailable',
  'destination-IP-prohibited',
  'destination-IP-unroutable',
  'connection-refused',
  'connection-terminated',
  'connection-limit-reached',
  'TLS-protocol-error',
  'TLS-certificate-error',
  'TLS-alert-received',
]);
// The request as the guest built it is what is wrong: sending it again
// fails the same way.
const INVALID = new Set([
  'HTTP-request-length-required',
  'HTTP-request-method-invalid',
  'HTTP-request-URI-invalid',
  'HTTP-request-URI-too-long',
  'HTTP-request-header-section-size',
  'HTTP-request-header-size',
  'HTTP-request-trailer-section-size',
  'HTTP-request-trailer-size',
]);

/**
 * What a host's failure means to the author: the `error-code` classified,
 * the guest side's failures typed, as the Rust SDK classifies them. `at`
 * is the request's method and shown URL, `url` the shown URL alone.
 * Everything not named (the response's own faults, `loop-detected`,
 * `configuration-error`, an `internal-error` without the host's prefixes,
 * and codes a later WASI may add) is `Protocol`.
 *
 * @param {WireHttpError} error
 * @param {string} at
 * @param {string} url
 * @returns {HttpError}
 */
export function fromWire(error, at, url) {
  if (error.kind === 'build') return new InvalidRequest(`${at}: ${error.why}; nothing was sent`);
  if (error.kind === 'stream') return new Connection(`${at}: the body stream failed: ${error.why}`);
  const code = /** @type {import('./http-wire.js').ErrorCode} */ (error.code);
  const why = `${at}: ${codeText(code)}`;
  const tag = code.tag;
  if (tag === 'HTTP-request-denied') return new Denied(url);
  if (tag === 'internal-error' && typeof code.val === 'string') {
    if (code.val.startsWith(FENCED_PREFIX)) return new Fenced(`${at}: ${code.val.slice(FENCED_PREFIX.length)}`);
    if (code.val.startsWith(LIMIT_PREFIX)) return new Limit(`${at}: ${code.val.slice(LIMIT_PREFIX.length)}`);
    return new Protocol(why);
  }
  if (tag === 'HTTP-request-body-size' || tag === 'HTTP-response-body-size') return new BodyTooLarge(why);
  if (TIMEOUTS.has(tag)) return new Timeout(why);
  if (CONNECTION.has(tag)) return new Connection(why);
  if (INVALID.has(tag)) return new InvalidRequest(why);
  return new Protocol(why);
}

const encoder = new TextEncoder();

/**
 * JSON text of `value`; throws on what JSON cannot carry (a bigint, a
 * number that is not finite, a cycle, nothing at all).
 *
 * @param {any} value
 * @returns {string}
 */
function jsonText(value) {
  const text = JSON.stringify(value, (_k, v) => {
    if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError(`${v} is not JSON`);
    return v;
  });
  if (text === undefined) throw new TypeError(`${typeof value} is not JSON`);
  return text;
}

/**
 * An outbound request, built and then sent with `send()`.
 *
 * The URL is `http://` or `https://`, ASCII, with characters outside RFC
 * 3986 percent-encoded, and without user information (send credentials
 * in a header). Problems with it, a header or the timeout are reported by
 * `send()` as `InvalidRequest`, before anything is sent.
 *
 * The SDK sets `Content-Length` from the body (replacing one the guest
 * set), so a body never goes out chunked: a request with a body, or a
 * `POST`, `PUT` or `PATCH`, carries one. The host sets the three fence
 * headers. The builder methods change the request and return it.
 *
 * ```js
 * const response = http.Request.put('https://api.example.com/v1/things/a')
 *   .header('Authorization', `Bearer ${token}`)
 *   .body('on')
 *   .timeout(2_000)
 *   .send();
 * ```
 */
export class Request {
  /** @type {string} */ #method;
  /** @type {string} */ #url;
  /** @type {Array<[string, string]>} */ #headers = [];
  /** @type {Uint8Array | null} */ #body = null;
  /** @type {number | null} */ #timeoutMs = null;

  /**
   * A request of `method` to `url`, with no headers and no body.
   *
   * @param {string} method one of `Method`
   * @param {string} url
   */
  constructor(method, url) {
    this.#method = method;
    this.#url = url;
  }

  /**
   * A `GET` request.
   *
   * @param {string} url
   * @returns {Request}
   */
  static get(url) {
    return new Request(Method.GET, url);
  }

  /**
   * A `HEAD` request.
   *
   * @param {string} url
   * @returns {Request}
   */
  static head(url) {
    return new Request(Method.HEAD, url);
  }

  /**
   * A `POST` request.
   *
   * @param {string} url
   * @returns {Request}
   */
  static post(url) {
    return new Request(Method.POST, url);
  }

  /**
   * A `PUT` request.
   *
   * @param {string} url
   * @returns {Request}
   */
  static put(url) {
    return new Request(Method.PUT, url);
  }

  /**
   * A `PATCH` request.
   *
   * @param {string} url
   * @returns {Request}
   */
  static patch(url) {
    return new Request(Method.PATCH, url);
  }

  /**
   * A `DELETE` request.
   *
   * @param {string} url
   * @returns {Request}
   */
  static delete(url) {
    return new Request(Method.DELETE, url);
  }

  /**
   * Set the header `name` to `value`, replacing any value set before
   * under that name (names are case-insensitive). The fence headers may
   * be set but the host replaces them; `Content-Length` is the SDK's.
   * `Host`, `Connection`, `Transfer-Encoding` and the other headers
   * `wasi:http` forbids make `send()` fail with `InvalidRequest`.
   *
   * @param {string} name
   * @param {string} value
   * @returns {this}
   */
  header(name, value) {
    const lower = String(name).toLowerCase();
    this.#headers = this.#headers.filter(([n]) => n.toLowerCase() !== lower);
    this.#headers.push([name, value]);
    return this;
  }

  /**
   * Set the body: text (sent as UTF-8) or bytes (copied).
   *
   * @param {string | Uint8Array | ArrayBuffer} bytes
   * @returns {this}
   */
  body(bytes) {
    if (typeof bytes === 'string') this.#body = encoder.encode(bytes);
    else if (bytes instanceof Uint8Array) this.#body = bytes.slice();
    else if (bytes instanceof ArrayBuffer) this.#body = new Uint8Array(bytes.slice(0));
    else throw new TypeError(`a request body is a string, a Uint8Array or an ArrayBuffer, not ${typeof bytes}`);
    return this;
  }

  /**
   * Set the body to `value` as JSON, and `Content-Type` to
   * `application/json`. Throws `InvalidRequest` if `value` is not JSON (a
   * bigint, a number that is not finite, a cycle).
   *
   * @param {any} value
   * @returns {this}
   */
  json(value) {
    let text;
    try {
      text = jsonText(value);
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      throw new InvalidRequest(`${this.#method} ${shownUrl(this.#url)}: the JSON body does not serialize: ${why}`);
    }
    return this.header('content-type', 'application/json').body(text);
  }

  /**
   * Set the `Idempotency-Key` header: the receiver applies requests with
   * the same key once.
   *
   * @param {IdempotencyKey | string} key
   * @returns {this}
   */
  idempotencyKey(key) {
    return this.header(IDEMPOTENCY_KEY_HEADER, String(key));
  }

  /**
   * Ask for a first-byte timeout: how long to wait, in milliseconds, for
   * the response's head once the request is sent. The host caps it at its
   * own bound (10 s by default); past it the request fails with `Timeout`.
   *
   * @param {number} ms
   * @returns {this}
   */
  timeout(ms) {
    this.#timeoutMs = ms;
    return this;
  }

  /** The method. @returns {string} */
  get method() {
    return this.#method;
  }

  /** The URL as given. @returns {string} */
  get url() {
    return this.#url;
  }

  /**
   * The headers set so far, in order, as given (the SDK's
   * `Content-Length` and the host's fence headers are added when sent).
   *
   * @returns {Array<[string, string]>}
   */
  get headers() {
    return this.#headers.map(([n, v]) => [n, v]);
  }

  /** The body, if one was set (a copy). @returns {Uint8Array | null} */
  get bodyBytes() {
    return this.#body === null ? null : this.#body.slice();
  }

  /** The first-byte timeout asked for, in milliseconds, if any. @returns {number | null} */
  get timeoutMs() {
    return this.#timeoutMs;
  }

  /**
   * Send the request through the host and read the whole response.
   *
   * Blocks the reconcile until the response's body has been read to its
   * end, or the request failed. A response of any status is returned:
   * check `isSuccess` (a fenced receiver answers `409` to a request from
   * an older epoch). Throws an `HttpError` saying whether anything was
   * sent (see its subclasses).
   *
   * @returns {Response}
   */
  send() {
    let at = `${this.#method} ${shownUrl(this.#url)}`;
    const invalid = (/** @type {string} */ why) => new InvalidRequest(`${at}: ${why}; nothing was sent`);
    if (!(/** @type {string[]} */ (Object.values(Method)).includes(this.#method))) {
      throw invalid(`${JSON.stringify(String(this.#method))} is not a method this SDK sends`);
    }
    const target = typeof this.#url === 'string' ? Target.parse(this.#url) : 'the URL is not a string';
    if (typeof target === 'string') throw invalid(target);
    const timeout = this.#timeoutMs;
    if (timeout !== null && !(typeof timeout === 'number' && Number.isFinite(timeout) && timeout >= 0)) {
      throw invalid('the timeout is not a number of milliseconds from 0 up');
    }
    /** @type {Array<[string, string]>} */
    const headers = [];
    for (const [name, value] of this.#headers) {
      const wrong = checkHeader(name, value);
      if (wrong !== null) throw invalid(wrong);
      // The body's length is the SDK's to state: a guest's own value
      // could disagree with the bytes written.
      if (name.toLowerCase() !== 'content-length') headers.push([name, value]);
    }
    let body = this.#body;
    if (body === null && hasBody(this.#method)) body = new Uint8Array(0);
    if (body !== null) headers.push(['content-length', String(body.length)]);
    /** @type {import('./http-wire.js').WireRequest} */
    const request = {
      method: this.#method,
      scheme: target.scheme,
      authority: target.authority,
      pathWithQuery: target.pathWithQuery(),
      headers,
      body: body === null ? null : body.slice(),
      firstByteTimeoutMs: timeout === null ? null : Math.ceil(timeout),
    };
    const shown = target.shown();
    at = `${this.#method} ${shown}`;
    /** @type {import('./http-wire.js').WireResponse} */
    let response;
    try {
      response = currentHost().httpSend(request);
    } catch (e) {
      if (e instanceof WireHttpError) throw fromWire(e, at, shown);
      throw e;
    }
    return new Response(response.status, response.headers, response.body);
  }
}

/**
 * A response, read to its end.
 *
 * ```js
 * const response = new http.Response(409, [['Content-Type', 'text/plain']], new TextEncoder().encode('stale'));
 * response.isSuccess;               // false
 * response.header('content-type');  // 'text/plain'
 * ```
 */
export class Response {
  /**
   * @param {number} status
   * @param {Array<[string, string]>} [headers] in the order received
   * @param {Uint8Array} [body]
   */
  constructor(status, headers = [], body = new Uint8Array(0)) {
    /** The status code. @type {number} */
    this.status = status;
    /** The headers, in the order received. @type {ReadonlyArray<readonly [string, string]>} */
    this.headers = Object.freeze(headers.map(([n, v]) => /** @type {readonly [string, string]} */ (Object.freeze([n, v]))));
    /** The whole body. @type {Uint8Array} */
    this.body = body;
  }

  /**
   * The first value of the header `name`, compared case-insensitively; null if absent.
   *
   * @param {string} name
   * @returns {string | null}
   */
  header(name) {
    const lower = name.toLowerCase();
    const found = this.headers.find(([n]) => n.toLowerCase() === lower);
    return found === undefined ? null : found[1];
  }

  /**
   * The body as UTF-8 text; `Decode` if it is not UTF-8.
   *
   * @returns {string}
   */
  text() {
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(this.body);
    } catch {
      throw new Decode(`a ${this.status} response's body is not UTF-8`);
    }
  }

  /**
   * The body decoded as JSON, then by `decode` if given; `Decode` if it
   * is not JSON, or `decode` throws (its message is kept: it describes
   * the shape).
   *
   * @template [T=any]
   * @param {((value: any) => T) | null} [decode]
   * @returns {T}
   */
  json(decode = null) {
    const text = this.text();
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      throw new Decode(`a ${this.status} response's body is not JSON: ${why}`);
    }
    if (decode === null) return value;
    try {
      return decode(value);
    } catch (e) {
      const why = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      throw new Decode(`a ${this.status} response's body is not JSON of the expected shape: ${why}`);
    }
  }

  /** Whether the status is 2xx. @returns {boolean} */
  get isSuccess() {
    return this.status >= 200 && this.status < 300;
  }
}
