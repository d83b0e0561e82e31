/**
 * Outbound HTTP below the author's API: the request and response as they
 * cross the host seam (`host.httpSend`), the host's `wasi:http`
 * `error-code`s, and the rules a URL and a header must follow.
 *
 * Both hosts speak these shapes: the component's (`component-http.js`,
 * through `wasi:http/outgoing-handler`) and the fake's (`fake-http.js`).
 * `http.js` classifies what they report into the author's error classes,
 * in one place.
 *
 * Owns: `WireHttpError`, the text of an `error-code` (`codeText`), the
 * recognition of the host's stream error texts (`codeFromHostText`), URL
 * parsing (`Target`), `shownUrl` and `checkHeader`. Must never: put a
 * URL's user information or query, or a header's value, into a message
 * (any of them may carry a secret).
 *
 * @module
 */
export type ErrorCode = {
    tag: string;
    val?: any;
};
export type WireRequest = {
    /**
     * `GET`, `HEAD`, `POST`, `PUT`, `PATCH` or `DELETE`
     */
    method: string;
    scheme: 'http' | 'https';
    /**
     * `host[:port]` as written
     */
    authority: string;
    /**
     * starts with `/`
     */
    pathWithQuery: string;
    headers: Array<[string, string]>;
    body: Uint8Array | null;
    firstByteTimeoutMs: number | null;
};
export type WireResponse = {
    status: number;
    headers: Array<[string, string]>;
    body: Uint8Array;
};
/**
 * A `wasi:http` `error-code` as the WIT bindings give it: a `tag` (the WIT
 * case's name, e.g. `connection-refused`) and, for cases with a payload,
 * `val`.
 *
 * @typedef {{tag: string, val?: any}} ErrorCode
 */
/**
 * An outbound request as `wasi:http` takes it: the URL already taken
 * apart, the headers as sent (the SDK's `content-length` included), the
 * body (null: none) and the first-byte timeout asked for.
 *
 * @typedef {object} WireRequest
 * @property {string} method `GET`, `HEAD`, `POST`, `PUT`, `PATCH` or `DELETE`
 * @property {'http' | 'https'} scheme
 * @property {string} authority `host[:port]` as written
 * @property {string} pathWithQuery starts with `/`
 * @property {Array<[string, string]>} headers
 * @property {Uint8Array | null} body
 * @property {number | null} firstByteTimeoutMs
 */
/**
 * A response as it crosses the seam: header values already text (bytes
 * that are not UTF-8 converted lossily), the body read to its end.
 *
 * @typedef {object} WireResponse
 * @property {number} status
 * @property {Array<[string, string]>} headers
 * @property {Uint8Array} body
 */
/**
 * Why a request failed, below any classification: the host's `error-code`
 * (`kind` `code`), a request `wasi:http` would not build (`build`: nothing
 * was sent), or a body stream that failed without a code (`stream`).
 * Hosts throw it from `httpSend`; `http.js` turns it into an `HttpError`.
 */
export declare class WireHttpError extends Error {
    /** @type {'code' | 'build' | 'stream'} */ kind: 'code' | 'build' | 'stream';
    /** @type {ErrorCode | null} */ code: ErrorCode | null;
    /** @type {string} */ why: string;
    /**
     * @param {'code' | 'build' | 'stream'} kind
     * @param {ErrorCode | null} code the host's code, for `code`
     * @param {string} why what went wrong, for `build` and `stream`
     */
    constructor(kind: 'code' | 'build' | 'stream', code: ErrorCode | null, why: string);
    /**
     * The host answered `code`.
     *
     * @param {ErrorCode} code
     * @returns {WireHttpError}
     */
    static ofCode(code: ErrorCode): WireHttpError;
    /**
     * `wasi:http` refused to build the request (a header, the method, the
     * URL's parts): nothing was sent.
     *
     * @param {string} why
     * @returns {WireHttpError}
     */
    static build(why: string): WireHttpError;
    /**
     * A body stream failed without an `error-code`.
     *
     * @param {string} why the I/O error's description
     * @returns {WireHttpError}
     */
    static stream(why: string): WireHttpError;
}
/**
 * An `error-code` as text: the WIT case's name and its payload when it has
 * one (`connection-refused`, `HTTP-request-body-size (5)`,
 * `internal-error (leasehold-fenced: ...)`), as the Rust SDK shows it.
 *
 * @param {ErrorCode} code
 * @returns {string}
 */
export declare function codeText(code: ErrorCode): string;
/**
 * The `error-code` that the text of a body stream's I/O error names, if it
 * is one wasmtime-wasi-http writes; null otherwise.
 *
 * `http-error-code` should recover the code behind a stream error, but the
 * host's wasmtime keeps a response body's failure as its own error type:
 * a body over the host's bound, a between-bytes timeout or a connection
 * dropped on lease loss reach the guest only as text. Only the first line
 * is read (a host with backtraces enabled appends them).
 *
 * @param {string} text
 * @returns {ErrorCode | null}
 */
export declare function codeFromHostText(text: string): ErrorCode | null;
/**
 * A URL for messages: cut before its query or fragment, without user
 * information. Either may carry a secret; neither helps to find which
 * request failed.
 *
 * @param {string} url
 * @returns {string}
 */
export declare function shownUrl(url: string): string;
/**
 * A request URL taken apart: what `wasi:http` takes, and what an
 * `http_allow` entry is matched against.
 */
export declare class Target {
    /** @type {'http' | 'https'} */ scheme: 'http' | 'https';
    /** @type {string} */ authority: string;
    /** @type {string} */ host: string;
    /** @type {number} */ port: number;
    /** @type {string} */ path: string;
    /** @type {string | null} */ query: string | null;
    /**
     * @param {'http' | 'https'} scheme
     * @param {string} authority `host[:port]` as written
     * @param {string} host lowercase; an IPv6 address keeps its brackets
     * @param {number} port as written, or the scheme's default
     * @param {string} path starts with `/`
     * @param {string | null} query after the `?`, if there is one
     */
    constructor(scheme: 'http' | 'https', authority: string, host: string, port: number, path: string, query: string | null);
    /**
     * Take `url` apart; a string saying what is wrong (without repeating the
     * URL) if it is not an `http://` or `https://` URL `wasi:http` takes.
     *
     * @param {string} url
     * @returns {Target | string}
     */
    static parse(url: string): Target | string;
    /** The path and query as sent. @returns {string} */
    pathWithQuery(): string;
    /** `scheme://authority/path?query`, as sent. @returns {string} */
    url(): string;
    /** `scheme://authority/path`, for messages: no query. @returns {string} */
    shown(): string;
}
/**
 * Whether a header is one `wasi:http` takes: a name of RFC 9110 token
 * characters, a value without control characters (tab allowed). A string
 * naming the header (never its value) if not; null if it is.
 *
 * @param {string} name
 * @param {string} value
 * @returns {string | null}
 */
export declare function checkHeader(name: string, value: string): string | null;
