/**
 * The fake host's outbound HTTP: the host's rules for what may leave
 * (deny by default, `http_allow`, refusal after loss, requests per
 * reconcile, body bounds, the three fence headers), a scripted receiver,
 * faults on the wire, and a record of every request that left. The Rust
 * fake's `fake/http.rs`, in JavaScript; `FakeHost` (`fake.js`) exposes it
 * as `allowHttp`, `respond`, `respondOnce`, `respondWith`, `failHttp`,
 * `failNextHttp` and `httpRequests`.
 *
 * Owns: `HttpReply`, `HttpFault`, `HttpRecord`, the allow list, the
 * scripted routes and the HTTP fault queue (`HttpState`), and the fake's
 * answer to the SDK's `httpSend`. Must never: be laxer than the host (a
 * request the host refuses is refused here, in the host's order: lease,
 * allow list, bounds), let a guest's fence header through, or record a
 * request as delivered that the receiver never saw.
 *
 * @module
 */
/**
 * What the fake's receiver answers: a status, headers and a body.
 * Immutable: `header` and `withBody` return a new reply, so a stored
 * reply can be answered again with an extra header.
 */
export declare class HttpReply {
    /** The status code. @type {number} */
    status: number;
    /** The headers, in order. @type {ReadonlyArray<readonly [string, string]>} */
    headers: ReadonlyArray<readonly [string, string]>;
    /** The body. @type {Uint8Array} */
    body: Uint8Array;
    /**
     * @param {number} status
     * @param {Array<[string, string]>} [headers]
     * @param {string | Uint8Array} [body]
     */
    constructor(status: number, headers?: Array<[string, string]>, body?: string | Uint8Array);
    /**
     * A reply with `status`, no headers and an empty body.
     *
     * @param {number} status
     * @returns {HttpReply}
     */
    static status(status: number): HttpReply;
    /**
     * A reply with `status` and `value` as a JSON body (`content-type: application/json`).
     *
     * @param {number} status
     * @param {any} value
     * @returns {HttpReply}
     */
    static json(status: number, value: any): HttpReply;
    /**
     * A reply with `status` and `text` as a plain-text body.
     *
     * @param {number} status
     * @param {string} text
     * @returns {HttpReply}
     */
    static text(status: number, text: string): HttpReply;
    /**
     * This reply with a header added.
     *
     * @param {string} name
     * @param {string} value
     * @returns {HttpReply}
     */
    header(name: string, value: string): HttpReply;
    /**
     * This reply with `bytes` as its body (Rust's `HttpReply::body`: a
     * JavaScript object cannot have a `body` field and method both).
     *
     * @param {string | Uint8Array} bytes
     * @returns {HttpReply}
     */
    withBody(bytes: string | Uint8Array): HttpReply;
}
/**
 * A failure on the wire that `FakeHost.failHttp` injects into an outbound
 * request. The host's own refusals (not in `http_allow`, a bound reached,
 * the lease lost) need no fault: the fake applies them as the host does.
 *
 * @readonly
 * @enum {string}
 */
export declare const HttpFault: Readonly<{
    /** The receiver refuses the connection: nothing is delivered; `Connection` (`connection-refused`). */
    REFUSED: "refused";
    /** The connection is not open in time: nothing is delivered; `Timeout` (`connection-timeout`). */
    TIMEOUT: "timeout";
    /**
     * The receiver gets the request and applies it (its scripted reply is
     * used up), then the connection drops before the response arrives:
     * `Connection` (`connection-terminated`). The guest cannot tell the
     * effect happened: the case an idempotency key exists for.
     */
    REPLY_LOST: "reply-lost";
    /** As `REPLY_LOST`, but the response does not come in time: `Timeout` (`connection-read-timeout`). */
    REPLY_TIMED_OUT: "reply-timed-out";
    /** The lease is lost just before the request: `Fenced`, nothing is sent, and every later call is fenced too. */
    FENCED: "fenced";
}>;
/**
 * A request that left the fake host, as the receiver saw it (or would
 * have, for one that was never delivered).
 */
export declare class HttpRecord {
    /** The method. @type {string} */
    method: string;
    /** `scheme://authority/path?query`, as sent (no fragment; an empty path is `/`). @type {string} */
    url: string;
    /**
     * The headers as the receiver sees them: names lowercased, the guest's
     * in order (with the SDK's `content-length`), then the host's
     * `leasehold-lease`, `leasehold-epoch` and `leasehold-holder`
     * (whatever the guest set under those names is gone).
     *
     * @type {ReadonlyArray<readonly [string, string]>}
     */
    headers: ReadonlyArray<readonly [string, string]>;
    /** The body (empty if there was none). @type {Uint8Array} */
    body: Uint8Array;
    /** The first-byte timeout the guest asked for, in milliseconds. @type {number | null} */
    timeoutMs: number | null;
    /** The epoch of the fence it was sent under. @type {number} */
    epoch: number;
    /** Whether the receiver got it (and acted on it): false after `REFUSED` or `TIMEOUT`. @type {boolean} */
    delivered: boolean;
    /** The status the receiver answered with, whether or not the answer reached the guest; null if none. @type {number | null} */
    status: number | null;
    /**
     * @param {object} parts
     * @param {string} parts.method
     * @param {string} parts.url `scheme://authority/path?query` as sent
     * @param {Array<[string, string]>} parts.headers as the receiver sees them
     * @param {Uint8Array} parts.body
     * @param {number | null} parts.timeoutMs
     * @param {number} parts.epoch
     * @param {boolean} parts.delivered
     * @param {number | null} parts.status
     */
    constructor({ method, url, headers, body, timeoutMs, epoch, delivered, status }: {
        method: string;
        url: string;
        headers: Array<[string, string]>;
        body: Uint8Array;
        timeoutMs: number | null;
        epoch: number;
        delivered: boolean;
        status: number | null;
    });
    /**
     * The first value of the header `name`, compared case-insensitively; null if absent.
     *
     * @param {string} name
     * @returns {string | null}
     */
    header(name: string): string | null;
    /** The body as text (UTF-8, lossily). @returns {string} */
    bodyText(): string;
    /** The body parsed as JSON, for assertions; undefined if it is not JSON. @returns {any} */
    bodyJson(): any;
    /**
     * A copy with some parts changed.
     *
     * @param {{delivered?: boolean, status?: number | null}} changes
     * @returns {HttpRecord}
     */
    with(changes: {
        delivered?: boolean;
        status?: number | null;
    }): HttpRecord;
}
/**
 * Whether `path` has a `.` or `..` segment, raw or percent-encoded, or an
 * encoded separator: a server may resolve `/hooks/../admin` to `/admin`,
 * outside an allowed prefix, so the host refuses such paths.
 *
 * @param {string} path
 * @returns {boolean}
 */
export declare function hasDotSegment(path: string): boolean;
/** The headers `wasi:http` refuses from a guest (wasmtime's default list, which the host uses). */
export declare const FORBIDDEN_HEADERS: readonly string[];
export type Responder = (request: HttpRecord) => HttpReply;
/**
 * A reply computed from the request, for `FakeHost.respondWith`.
 *
 * @typedef {(request: HttpRecord) => HttpReply} Responder
 */
/** The replies scripted for one URL pattern. */
declare class Route {
    /** @type {string} */ pattern: string;
    /** @type {HttpReply[]} */ once: HttpReply[];
    /** @type {HttpReply | Responder | null} */ standing: HttpReply | Responder | null;
    /** @param {string} pattern an exact URL, or a prefix ending in `*` */
    constructor(pattern: string);
    /**
     * How well the pattern matches `url`: -1 if not at all; exact matches
     * rank above every prefix, longer prefixes above shorter.
     *
     * @param {string} url
     * @returns {number}
     */
    rank(url: string): number;
    canAnswer(): boolean;
}
export type HttpHostView = {
    fence: () => import('./fence.js').Fence;
    isRevoked: boolean;
    revoke: () => void;
    limits: {
        httpRequestsPerReconcile: number;
        httpRequestBodyBytes: number;
        httpResponseBodyBytes: number;
    };
};
/**
 * What the fake needs of its host to admit a request: the fence, whether
 * the lease is lost (and a way to lose it), and the bounds.
 *
 * @typedef {object} HttpHostView
 * @property {() => import('./fence.js').Fence} fence
 * @property {boolean} isRevoked
 * @property {() => void} revoke
 * @property {{httpRequestsPerReconcile: number, httpRequestBodyBytes: number, httpResponseBodyBytes: number}} limits
 */
/** The fake's outbound HTTP state: allow list, routes, faults, the per-reconcile budget, and the records. */
export declare class HttpState {
    #private;
    /** A reconcile begins: its request budget is fresh. @returns {void} */
    beginReconcile(): void;
    /** HTTP faults not met yet. @returns {number} */
    get pendingFaults(): number;
    /**
     * Add entries to the allow list (an `Error` naming a malformed one, as
     * the host's config check would).
     *
     * @param {Iterable<string>} entries
     * @returns {void}
     */
    allow(entries: Iterable<string>): void;
    /**
     * The route of `pattern`, created if new.
     *
     * @param {string} pattern
     * @returns {Route}
     */
    route(pattern: string): Route;
    /**
     * Aim `fault` at the n-th request from now.
     *
     * @param {number} n
     * @param {string} fault one of `HttpFault`
     * @returns {void}
     */
    fail(n: number, fault: string): void;
    /** Every request that left, in order. @returns {HttpRecord[]} */
    records(): HttpRecord[];
    /**
     * Serve one request as the host would: its checks in the host's order,
     * the scripted receiver, the fault aimed at it, and the record. Throws a
     * `WireHttpError` for what the guest sees as a failure.
     *
     * @param {import('./http-wire.js').WireRequest} request
     * @param {HttpHostView} host
     * @returns {import('./http-wire.js').WireResponse}
     */
    serve(request: import('./http-wire.js').WireRequest, host: HttpHostView): import('./http-wire.js').WireResponse;
}
export {};
