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
import { WireHttpError } from './http-wire.js';
export { IdempotencyKey } from './fence.js';
/** The header naming the lease a request was sent under, `<cluster>/<lease>`; set by the host. */
export declare const LEASE_HEADER = "leasehold-lease";
/** The header carrying the sending tenure's fencing epoch, in decimal; set by the host. */
export declare const EPOCH_HEADER = "leasehold-epoch";
/** The header naming the replica that holds the lease; set by the host. */
export declare const HOLDER_HEADER = "leasehold-holder";
/** The header `Request.idempotencyKey` sets. */
export declare const IDEMPOTENCY_KEY_HEADER = "idempotency-key";
/**
 * The start of the host's `internal-error` message when a request was
 * refused, or its connection dropped, because the lease is lost: the SDK
 * derives `Fenced` from it.
 */
export declare const FENCED_PREFIX = "leasehold-fenced: ";
/**
 * The start of the host's `internal-error` message when a host bound
 * (requests in flight, requests per reconcile) refused a request: the SDK
 * derives `Limit` from it.
 */
export declare const LIMIT_PREFIX = "leasehold-limit: ";
/**
 * The methods a request may have.
 *
 * @readonly
 * @enum {string}
 */
export declare const Method: Readonly<{
    /** Read a resource. */
    GET: "GET";
    /** A `GET` without the response body. */
    HEAD: "HEAD";
    /** Create, or run an action. */
    POST: "POST";
    /** Create or replace a resource. */
    PUT: "PUT";
    /** Change part of a resource. */
    PATCH: "PATCH";
    /** Remove a resource. */
    DELETE: "DELETE";
}>;
/**
 * Whether requests of `method` carry a body even when none was set (an
 * empty one, with `Content-Length: 0`): `POST`, `PUT` and `PATCH`.
 *
 * @param {string} method one of `Method`
 * @returns {boolean}
 */
export declare function hasBody(method: string): boolean;
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
export declare class HttpError extends LeaseholdError {
    /** What went wrong: which request (method and URL without its query) and how. @type {string} */
    why: string;
    /**
     * @param {string} message the whole message
     * @param {string} why what went wrong, after the request's method and URL
     */
    constructor(message: string, why: string);
}
/** The URL is not in the controller's `http_allow` list. Nothing was sent. */
export declare class Denied extends HttpError {
    /** The request's URL, without its query. @type {string} */
    url: string;
    /** @param {string} url the request's URL, without its query */
    constructor(url: string);
}
/**
 * The lease this guest runs under is lost: nothing was sent, or the
 * request in flight had its connection dropped. Stop: let it propagate,
 * and the reconcile ends as fenced whatever `errorPolicy` says.
 */
export declare class Fenced extends HttpError {
    /** @param {string} why which request, and the host's explanation */
    constructor(why: string);
    /** Always true: the reconcile ends as fenced. @returns {boolean} */
    get isFenced(): boolean;
}
/** A host bound refused the request (requests in flight, requests per reconcile). Nothing was sent. */
export declare class Limit extends HttpError {
    /** @param {string} why which request, and the bound */
    constructor(why: string);
}
/** The request's body, or the response's, is over the host's bound. */
export declare class BodyTooLarge extends HttpError {
    /** @param {string} why which request, and the bound */
    constructor(why: string);
}
/** Connecting, waiting for the response, or reading its body took too long. It may have been applied. */
export declare class Timeout extends HttpError {
    /** @param {string} why which request, and which timeout */
    constructor(why: string);
}
/** The connection failed: refused, reset, DNS, TLS. After a reset the receiver may have applied it. */
export declare class Connection extends HttpError {
    /** @param {string} why which request, and what failed */
    constructor(why: string);
}
/** Anything else that went wrong on the wire. */
export declare class Protocol extends HttpError {
    /** @param {string} why which request, and the host's code */
    constructor(why: string);
}
/** The request is malformed (URL, header, body, timeout); it will fail the same way again. Nothing was sent. */
export declare class InvalidRequest extends HttpError {
    /** @param {string} why which request, and what is wrong */
    constructor(why: string);
}
/** A response body did not decode as asked (`Response.json`, `Response.text`). */
export declare class Decode extends HttpError {
    /** @param {string} why what did not decode */
    constructor(why: string);
}
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
export declare function fromWire(error: WireHttpError, at: string, url: string): HttpError;
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
export declare class Request {
    #private;
    /**
     * A request of `method` to `url`, with no headers and no body.
     *
     * @param {string} method one of `Method`
     * @param {string} url
     */
    constructor(method: string, url: string);
    /**
     * A `GET` request.
     *
     * @param {string} url
     * @returns {Request}
     */
    static get(url: string): Request;
    /**
     * A `HEAD` request.
     *
     * @param {string} url
     * @returns {Request}
     */
    static head(url: string): Request;
    /**
     * A `POST` request.
     *
     * @param {string} url
     * @returns {Request}
     */
    static post(url: string): Request;
    /**
     * A `PUT` request.
     *
     * @param {string} url
     * @returns {Request}
     */
    static put(url: string): Request;
    /**
     * A `PATCH` request.
     *
     * @param {string} url
     * @returns {Request}
     */
    static patch(url: string): Request;
    /**
     * A `DELETE` request.
     *
     * @param {string} url
     * @returns {Request}
     */
    static delete(url: string): Request;
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
    header(name: string, value: string): this;
    /**
     * Set the body: text (sent as UTF-8) or bytes (copied).
     *
     * @param {string | Uint8Array | ArrayBuffer} bytes
     * @returns {this}
     */
    body(bytes: string | Uint8Array | ArrayBuffer): this;
    /**
     * Set the body to `value` as JSON, and `Content-Type` to
     * `application/json`. Throws `InvalidRequest` if `value` is not JSON (a
     * bigint, a number that is not finite, a cycle).
     *
     * @param {any} value
     * @returns {this}
     */
    json(value: any): this;
    /**
     * Set the `Idempotency-Key` header: the receiver applies requests with
     * the same key once.
     *
     * @param {IdempotencyKey | string} key
     * @returns {this}
     */
    idempotencyKey(key: IdempotencyKey | string): this;
    /**
     * Ask for a first-byte timeout: how long to wait, in milliseconds, for
     * the response's head once the request is sent. The host caps it at its
     * own bound (10 s by default); past it the request fails with `Timeout`.
     *
     * @param {number} ms
     * @returns {this}
     */
    timeout(ms: number): this;
    /** The method. @returns {string} */
    get method(): string;
    /** The URL as given. @returns {string} */
    get url(): string;
    /**
     * The headers set so far, in order, as given (the SDK's
     * `Content-Length` and the host's fence headers are added when sent).
     *
     * @returns {Array<[string, string]>}
     */
    get headers(): Array<[string, string]>;
    /** The body, if one was set (a copy). @returns {Uint8Array | null} */
    get bodyBytes(): Uint8Array | null;
    /** The first-byte timeout asked for, in milliseconds, if any. @returns {number | null} */
    get timeoutMs(): number | null;
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
    send(): Response;
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
export declare class Response {
    /** The status code. @type {number} */
    status: number;
    /** The headers, in the order received. @type {ReadonlyArray<readonly [string, string]>} */
    headers: ReadonlyArray<readonly [string, string]>;
    /** The whole body. @type {Uint8Array} */
    body: Uint8Array;
    /**
     * @param {number} status
     * @param {Array<[string, string]>} [headers] in the order received
     * @param {Uint8Array} [body]
     */
    constructor(status: number, headers?: Array<[string, string]>, body?: Uint8Array);
    /**
     * The first value of the header `name`, compared case-insensitively; null if absent.
     *
     * @param {string} name
     * @returns {string | null}
     */
    header(name: string): string | null;
    /**
     * The body as UTF-8 text; `Decode` if it is not UTF-8.
     *
     * @returns {string}
     */
    text(): string;
    /**
     * The body decoded as JSON, then by `decode` if given; `Decode` if it
     * is not JSON, or `decode` throws (its message is kept: it describes
     * the shape).
     *
     * @template [T=any]
     * @param {((value: any) => T) | null} [decode]
     * @returns {T}
     */
    json<T = any>(decode?: ((value: any) => T) | null): T;
    /** Whether the status is 2xx. @returns {boolean} */
    get isSuccess(): boolean;
}
