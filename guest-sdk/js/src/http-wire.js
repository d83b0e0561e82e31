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
export class WireHttpError extends Error {
  /**
   * @param {'code' | 'build' | 'stream'} kind
   * @param {ErrorCode | null} code the host's code, for `code`
   * @param {string} why what went wrong, for `build` and `stream`
   */
  constructor(kind, code, why) {
    super(kind === 'code' ? codeText(/** @type {ErrorCode} */ (code)) : why);
    this.name = 'WireHttpError';
    /** @type {'code' | 'build' | 'stream'} */ this.kind = kind;
    /** @type {ErrorCode | null} */ this.code = code;
    /** @type {string} */ this.why = why;
  }

  /**
   * The host answered `code`.
   *
   * @param {ErrorCode} code
   * @returns {WireHttpError}
   */
  static ofCode(code) {
    return new WireHttpError('code', code, '');
  }

  /**
   * `wasi:http` refused to build the request (a header, the method, the
   * URL's parts): nothing was sent.
   *
   * @param {string} why
   * @returns {WireHttpError}
   */
  static build(why) {
    return new WireHttpError('build', null, why);
  }

  /**
   * A body stream failed without an `error-code`.
   *
   * @param {string} why the I/O error's description
   * @returns {WireHttpError}
   */
  static stream(why) {
    return new WireHttpError('stream', null, why);
  }
}

/** @param {unknown} value */
function detail(value) {
  return value === undefined || value === null ? '' : ` (${value})`;
}

/**
 * A `field-size-payload` for messages: `name: N bytes`, `name`, `N bytes`.
 *
 * @param {{fieldName?: string, fieldSize?: number} | undefined} size
 * @returns {string}
 */
function fieldSize(size) {
  const name = size?.fieldName;
  const bytes = size?.fieldSize;
  if (name !== undefined && bytes !== undefined) return `${name}: ${bytes} bytes`;
  if (name !== undefined) return name;
  if (bytes !== undefined) return `${bytes} bytes`;
  return 'unknown field';
}

/**
 * An `error-code` as text: the WIT case's name and its payload when it has
 * one (`connection-refused`, `HTTP-request-body-size (5)`,
 * `internal-error (leasehold-fenced: ...)`), as the Rust SDK shows it.
 *
 * @param {ErrorCode} code
 * @returns {string}
 */
export function codeText(code) {
  const { tag, val } = code;
  switch (tag) {
    case 'DNS-error':
      return `${tag}${detail(val?.rcode)}${detail(val?.infoCode)}`;
    case 'TLS-alert-received':
      return `${tag}${detail(val?.alertId)}${detail(val?.alertMessage)}`;
    case 'HTTP-request-header-size':
      return `${tag}${val === undefined || val === null ? '' : ` (${fieldSize(val)})`}`;
    case 'HTTP-request-trailer-size':
    case 'HTTP-response-header-size':
    case 'HTTP-response-trailer-size':
      return `${tag} (${fieldSize(val)})`;
    default:
      return `${tag}${detail(val)}`;
  }
}

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
export function codeFromHostText(text) {
  const line = (text.split('\n')[0] ?? '').trim();
  /** @param {string} prefix @returns {{n: bigint | undefined} | null} */
  const size = (prefix) => {
    if (!line.startsWith(prefix)) return null;
    const rest = line.slice(prefix.length);
    if (rest === '') return { n: undefined };
    const match = /^: (\d+) bytes$/.exec(rest);
    return match === null ? null : { n: BigInt(match[1]) };
  };
  const response = size('HTTP response body size exceeds limit');
  if (response !== null) return { tag: 'HTTP-response-body-size', val: response.n };
  const request = size('HTTP request body size exceeds limit');
  if (request !== null) return { tag: 'HTTP-request-body-size', val: request.n };
  if (line.startsWith('internal error: ')) return { tag: 'internal-error', val: line.slice('internal error: '.length) };
  /** @type {Record<string, string>} */
  const plain = {
    'internal error': 'internal-error',
    'connection refused': 'connection-refused',
    'connection terminated': 'connection-terminated',
    'connection timeout': 'connection-timeout',
    'connection read timeout': 'connection-read-timeout',
    'connection write timeout': 'connection-write-timeout',
    'HTTP response timeout': 'HTTP-response-timeout',
    'incomplete HTTP response': 'HTTP-response-incomplete',
    'HTTP protocol error': 'HTTP-protocol-error',
  };
  return Object.hasOwn(plain, line) ? { tag: plain[line] } : null;
}

/**
 * A URL for messages: cut before its query or fragment, without user
 * information. Either may carry a secret; neither helps to find which
 * request failed.
 *
 * @param {string} url
 * @returns {string}
 */
export function shownUrl(url) {
  const end = url.search(/[?#]/);
  const cut = end < 0 ? url : url.slice(0, end);
  const sep = cut.indexOf('://');
  if (sep < 0) return cut;
  const scheme = cut.slice(0, sep);
  const rest = cut.slice(sep + 3);
  const slash = rest.indexOf('/');
  const authority = slash < 0 ? rest : rest.slice(0, slash);
  const path = slash < 0 ? '' : rest.slice(slash);
  const at = authority.lastIndexOf('@');
  return `${scheme}://${at < 0 ? authority : authority.slice(at + 1)}${path}`;
}

/** Characters RFC 3986 never allows unescaped in a URL. */
const NOT_IN_URLS = '"<>\\^`{|}';

/** @param {string} scheme */
function defaultPort(scheme) {
  return scheme === 'https' ? 443 : 80;
}

/**
 * A request URL taken apart: what `wasi:http` takes, and what an
 * `http_allow` entry is matched against.
 */
export class Target {
  /**
   * @param {'http' | 'https'} scheme
   * @param {string} authority `host[:port]` as written
   * @param {string} host lowercase; an IPv6 address keeps its brackets
   * @param {number} port as written, or the scheme's default
   * @param {string} path starts with `/`
   * @param {string | null} query after the `?`, if there is one
   */
  constructor(scheme, authority, host, port, path, query) {
    /** @type {'http' | 'https'} */ this.scheme = scheme;
    /** @type {string} */ this.authority = authority;
    /** @type {string} */ this.host = host;
    /** @type {number} */ this.port = port;
    /** @type {string} */ this.path = path;
    /** @type {string | null} */ this.query = query;
    Object.freeze(this);
  }

  /**
   * Take `url` apart; a string saying what is wrong (without repeating the
   * URL) if it is not an `http://` or `https://` URL `wasi:http` takes.
   *
   * @param {string} url
   * @returns {Target | string}
   */
  static parse(url) {
    if (url.length === 0) return 'the URL is empty';
    if (![...url].every((c) => c >= '!' && c <= '~')) {
      return 'the URL has a space, a control or a non-ASCII character; percent-encode it';
    }
    const sep = url.indexOf('://');
    if (sep < 0) return 'the URL has no scheme; write http://… or https://…';
    const schemeText = url.slice(0, sep);
    const scheme = schemeText.toLowerCase();
    if (scheme !== 'http' && scheme !== 'https') {
      return `only http and https URLs can be sent, not ${JSON.stringify(schemeText)}`;
    }
    // A fragment is the client's own business: it is never sent.
    const rest = url.slice(sep + 3).split('#')[0];
    const end = rest.search(/[/?]/);
    const authority = end < 0 ? rest : rest.slice(0, end);
    const pathAndQuery = end < 0 ? '' : rest.slice(end);
    if (authority.includes('@')) {
      return 'the URL carries user information (user:password@); send credentials in a header instead';
    }
    const split = splitAuthority(authority);
    if (typeof split === 'string') return split;
    const [host, portText] = split;
    let port = defaultPort(scheme);
    if (portText !== null && portText !== '') {
      if (!/^\d+$/.test(portText)) return "the URL's port is not a number";
      port = Number(portText);
      if (!(port > 0 && port <= 65535)) return "the URL's port is not between 1 and 65535";
    }
    const q = pathAndQuery.indexOf('?');
    const rawPath = q < 0 ? pathAndQuery : pathAndQuery.slice(0, q);
    const query = q < 0 ? null : pathAndQuery.slice(q + 1);
    const path = rawPath === '' ? '/' : rawPath;
    const unescaped = (/** @type {string} */ text) => [...text].some((c) => NOT_IN_URLS.includes(c));
    if (unescaped(path) || (query !== null && unescaped(query))) {
      return `the URL's path or query has one of ${NOT_IN_URLS} unescaped; percent-encode it`;
    }
    return new Target(scheme, authority, host.toLowerCase(), port, path, query);
  }

  /** The path and query as sent. @returns {string} */
  pathWithQuery() {
    return this.query === null ? this.path : `${this.path}?${this.query}`;
  }

  /** `scheme://authority/path?query`, as sent. @returns {string} */
  url() {
    return `${this.scheme}://${this.authority}${this.pathWithQuery()}`;
  }

  /** `scheme://authority/path`, for messages: no query. @returns {string} */
  shown() {
    return `${this.scheme}://${this.authority}${this.path}`;
  }
}

/**
 * `host` and the port text after its `:` (null: none), or what is wrong.
 *
 * @param {string} authority
 * @returns {[string, string | null] | string}
 */
function splitAuthority(authority) {
  if (authority === '') return 'the URL has no host';
  let host;
  /** @type {string | null} */
  let port = null;
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']');
    if (close < 0) return "the URL's IPv6 host has no closing `]`";
    const address = authority.slice(1, close);
    if (address === '' || !/^[0-9A-Fa-f:.]+$/.test(address)) return "the URL's IPv6 host is not an address";
    const after = authority.slice(close + 1);
    if (after !== '') {
      if (!after.startsWith(':')) return 'the URL has text after its IPv6 host';
      port = after.slice(1);
    }
    host = authority.slice(0, close + 1);
  } else {
    const colon = authority.indexOf(':');
    host = colon < 0 ? authority : authority.slice(0, colon);
    port = colon < 0 ? null : authority.slice(colon + 1);
  }
  if (host === '' || (!host.startsWith('[') && !/^[A-Za-z0-9._-]+$/.test(host))) {
    return "the URL's host is not a name or an address";
  }
  return [host, port];
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
export function checkHeader(name, value) {
  if (typeof name !== 'string' || !/^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/.test(name)) {
    return `${JSON.stringify(String(name))} is not a valid header name`;
  }
  if (typeof value !== 'string') return `the value of header ${JSON.stringify(name)} is not a string`;
  // Sent as its UTF-8 bytes: only control characters (tab allowed) and
  // DEL are refused, as by wasi:http.
  if ([...value].some((c) => (c < ' ' && c !== '\t') || c === '\x7f')) {
    return `the value of header ${JSON.stringify(name)} has a control character (CR, LF, NUL, ...)`;
  }
  return null;
}
