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

import { EPOCH_HEADER, FENCED_PREFIX, HOLDER_HEADER, LEASE_HEADER, LIMIT_PREFIX } from './http.js';
import { Target, WireHttpError } from './http-wire.js';

const encoder = new TextEncoder();

/**
 * @param {string | Uint8Array} bytes
 * @returns {Uint8Array}
 */
function bytesOf(bytes) {
  return typeof bytes === 'string' ? encoder.encode(bytes) : bytes.slice();
}

/**
 * What the fake's receiver answers: a status, headers and a body.
 * Immutable: `header` and `withBody` return a new reply, so a stored
 * reply can be answered again with an extra header.
 */
export class HttpReply {
  /**
   * @param {number} status
   * @param {Array<[string, string]>} [headers]
   * @param {string | Uint8Array} [body]
   */
  constructor(status, headers = [], body = new Uint8Array(0)) {
    /** The status code. @type {number} */
    this.status = status;
    /** The headers, in order. @type {ReadonlyArray<readonly [string, string]>} */
    this.headers = Object.freeze(headers.map(([n, v]) => /** @type {readonly [string, string]} */ (Object.freeze([n, v]))));
    /** The body. @type {Uint8Array} */
    this.body = bytesOf(body);
    Object.freeze(this);
  }

  /**
   * A reply with `status`, no headers and an empty body.
   *
   * @param {number} status
   * @returns {HttpReply}
   */
  static status(status) {
    return new HttpReply(status);
  }

  /**
   * A reply with `status` and `value` as a JSON body (`content-type: application/json`).
   *
   * @param {number} status
   * @param {any} value
   * @returns {HttpReply}
   */
  static json(status, value) {
    const text = JSON.stringify(value);
    if (text === undefined) throw new TypeError('a scripted JSON reply needs a JSON value');
    return new HttpReply(status, [['content-type', 'application/json']], text);
  }

  /**
   * A reply with `status` and `text` as a plain-text body.
   *
   * @param {number} status
   * @param {string} text
   * @returns {HttpReply}
   */
  static text(status, text) {
    return new HttpReply(status, [['content-type', 'text/plain; charset=utf-8']], text);
  }

  /**
   * This reply with a header added.
   *
   * @param {string} name
   * @param {string} value
   * @returns {HttpReply}
   */
  header(name, value) {
    return new HttpReply(this.status, [...this.headers.map(([n, v]) => /** @type {[string, string]} */ ([n, v])), [name, value]], this.body);
  }

  /**
   * This reply with `bytes` as its body (Rust's `HttpReply::body`: a
   * JavaScript object cannot have a `body` field and method both).
   *
   * @param {string | Uint8Array} bytes
   * @returns {HttpReply}
   */
  withBody(bytes) {
    return new HttpReply(this.status, this.headers.map(([n, v]) => [n, v]), bytes);
  }
}

/**
 * A failure on the wire that `FakeHost.failHttp` injects into an outbound
 * request. The host's own refusals (not in `http_allow`, a bound reached,
 * the lease lost) need no fault: the fake applies them as the host does.
 *
 * @readonly
 * @enum {string}
 */
export const HttpFault = Object.freeze({
  /** The receiver refuses the connection: nothing is delivered; `Connection` (`connection-refused`). */
  REFUSED: 'refused',
  /** The connection is not open in time: nothing is delivered; `Timeout` (`connection-timeout`). */
  TIMEOUT: 'timeout',
  /**
   * The receiver gets the request and applies it (its scripted reply is
   * used up), then the connection drops before the response arrives:
   * `Connection` (`connection-terminated`). The guest cannot tell the
   * effect happened: the case an idempotency key exists for.
   */
  REPLY_LOST: 'reply-lost',
  /** As `REPLY_LOST`, but the response does not come in time: `Timeout` (`connection-read-timeout`). */
  REPLY_TIMED_OUT: 'reply-timed-out',
  /** The lease is lost just before the request: `Fenced`, nothing is sent, and every later call is fenced too. */
  FENCED: 'fenced',
});

/**
 * A request that left the fake host, as the receiver saw it (or would
 * have, for one that was never delivered).
 */
export class HttpRecord {
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
  constructor({ method, url, headers, body, timeoutMs, epoch, delivered, status }) {
    /** The method. @type {string} */
    this.method = method;
    /** `scheme://authority/path?query`, as sent (no fragment; an empty path is `/`). @type {string} */
    this.url = url;
    /**
     * The headers as the receiver sees them: names lowercased, the guest's
     * in order (with the SDK's `content-length`), then the host's
     * `leasehold-lease`, `leasehold-epoch` and `leasehold-holder`
     * (whatever the guest set under those names is gone).
     *
     * @type {ReadonlyArray<readonly [string, string]>}
     */
    this.headers = Object.freeze(headers.map(([n, v]) => /** @type {readonly [string, string]} */ (Object.freeze([n, v]))));
    /** The body (empty if there was none). @type {Uint8Array} */
    this.body = body;
    /** The first-byte timeout the guest asked for, in milliseconds. @type {number | null} */
    this.timeoutMs = timeoutMs;
    /** The epoch of the fence it was sent under. @type {number} */
    this.epoch = epoch;
    /** Whether the receiver got it (and acted on it): false after `REFUSED` or `TIMEOUT`. @type {boolean} */
    this.delivered = delivered;
    /** The status the receiver answered with, whether or not the answer reached the guest; null if none. @type {number | null} */
    this.status = status;
    Object.freeze(this);
  }

  /**
   * The first value of the header `name`, compared case-insensitively; null if absent.
   *
   * @param {string} name
   * @returns {string | null}
   */
  header(name) {
    const lower = name.toLowerCase();
    const found = this.headers.find(([n]) => n === lower);
    return found === undefined ? null : found[1];
  }

  /** The body as text (UTF-8, lossily). @returns {string} */
  bodyText() {
    return new TextDecoder().decode(this.body);
  }

  /** The body parsed as JSON, for assertions; undefined if it is not JSON. @returns {any} */
  bodyJson() {
    try {
      return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(this.body));
    } catch {
      return undefined;
    }
  }

  /**
   * A copy with some parts changed.
   *
   * @param {{delivered?: boolean, status?: number | null}} changes
   * @returns {HttpRecord}
   */
  with(changes) {
    return new HttpRecord({ ...this, headers: this.headers.map(([n, v]) => [n, v]), ...changes });
  }
}

/**
 * Whether `path` has a `.` or `..` segment, raw or percent-encoded, or an
 * encoded separator: a server may resolve `/hooks/../admin` to `/admin`,
 * outside an allowed prefix, so the host refuses such paths.
 *
 * @param {string} path
 * @returns {boolean}
 */
export function hasDotSegment(path) {
  const lowered = path.toLowerCase().replaceAll('%2e', '.');
  return (
    lowered.split(/[/\\]/).some((segment) => segment === '.' || segment === '..') ||
    lowered.includes('%2f') ||
    lowered.includes('%5c')
  );
}

/** One `http_allow` entry, parsed as the host parses it. */
class AllowEntry {
  /**
   * @param {Target} target
   * @param {string | null} pathPrefix null allows every path of the origin
   */
  constructor(target, pathPrefix) {
    /** @type {string} */ this.scheme = target.scheme;
    /** @type {string} */ this.host = target.host;
    /** @type {number} */ this.port = target.port;
    /** @type {string | null} */ this.pathPrefix = pathPrefix;
  }

  /**
   * @param {string} text
   * @returns {AllowEntry}
   */
  static parse(text) {
    /** @param {string} why */
    const refuse = (why) => {
      throw new Error(`http_allow entry ${JSON.stringify(text)}: ${why}`);
    };
    if (typeof text !== 'string') return refuse('an entry is a string');
    if (text.includes('#')) refuse('an entry has no fragment');
    const target = Target.parse(text);
    if (typeof target === 'string') return refuse(target);
    if (target.query !== null) refuse('an entry is scheme://host[:port][/path-prefix], without a query');
    if (target.path === '/') return new AllowEntry(target, null);
    if (hasDotSegment(target.path)) refuse("an entry's path has a `.` or `..` segment");
    return new AllowEntry(target, target.path);
  }

  /**
   * The host's rule: same scheme, host and port; a prefix ending in `/`
   * matches paths under it, one without matches itself and paths under it
   * (`/hooks` allows `/hooks` and `/hooks/a`, not `/hookshot`).
   *
   * @param {Target} target
   * @returns {boolean}
   */
  allows(target) {
    if (target.scheme !== this.scheme || target.port !== this.port || target.host !== this.host) return false;
    const prefix = this.pathPrefix;
    if (prefix === null) return true;
    if (prefix.endsWith('/')) return target.path.startsWith(prefix);
    return target.path === prefix || (target.path.startsWith(prefix) && target.path[prefix.length] === '/');
  }
}

/** The headers `wasi:http` refuses from a guest (wasmtime's default list, which the host uses). */
export const FORBIDDEN_HEADERS = Object.freeze([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'host',
  'http2-settings',
]);

/**
 * A reply computed from the request, for `FakeHost.respondWith`.
 *
 * @typedef {(request: HttpRecord) => HttpReply} Responder
 */

/** The replies scripted for one URL pattern. */
class Route {
  /** @param {string} pattern an exact URL, or a prefix ending in `*` */
  constructor(pattern) {
    /** @type {string} */ this.pattern = pattern;
    /** @type {HttpReply[]} */ this.once = [];
    /** @type {HttpReply | Responder | null} */ this.standing = null;
  }

  /**
   * How well the pattern matches `url`: -1 if not at all; exact matches
   * rank above every prefix, longer prefixes above shorter.
   *
   * @param {string} url
   * @returns {number}
   */
  rank(url) {
    if (this.pattern.endsWith('*')) {
      const prefix = this.pattern.slice(0, -1);
      return url.startsWith(prefix) ? prefix.length : -1;
    }
    return this.pattern === url ? Number.MAX_SAFE_INTEGER : -1;
  }

  canAnswer() {
    return this.once.length > 0 || this.standing !== null;
  }
}

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
export class HttpState {
  /** @type {AllowEntry[]} */ #allow = [];
  /** @type {Route[]} */ #routes = [];
  /** Faults by the request number they strike. @type {Array<{at: number, fault: string}>} */ #faults = [];
  /** Every `httpSend` so far, refused or not. */ #sent = 0;
  /** Requests admitted in the current reconcile. */ #thisReconcile = 0;
  /** @type {HttpRecord[]} */ #records = [];

  /** A reconcile begins: its request budget is fresh. @returns {void} */
  beginReconcile() {
    this.#thisReconcile = 0;
  }

  /** HTTP faults not met yet. @returns {number} */
  get pendingFaults() {
    return this.#faults.length;
  }

  /**
   * Add entries to the allow list (an `Error` naming a malformed one, as
   * the host's config check would).
   *
   * @param {Iterable<string>} entries
   * @returns {void}
   */
  allow(entries) {
    const parsed = [...entries].map((e) => AllowEntry.parse(e));
    this.#allow.push(...parsed);
  }

  /**
   * The route of `pattern`, created if new.
   *
   * @param {string} pattern
   * @returns {Route}
   */
  route(pattern) {
    let route = this.#routes.find((r) => r.pattern === pattern);
    if (route === undefined) {
      route = new Route(pattern);
      this.#routes.push(route);
    }
    return route;
  }

  /**
   * Aim `fault` at the n-th request from now.
   *
   * @param {number} n
   * @param {string} fault one of `HttpFault`
   * @returns {void}
   */
  fail(n, fault) {
    if (!Number.isInteger(n) || n < 1) throw new Error('positions count from 1 (the next request)');
    if (!(/** @type {string[]} */ (Object.values(HttpFault)).includes(fault))) throw new Error(`not an HttpFault: ${String(fault)}`);
    this.#faults.push({ at: this.#sent + n, fault });
  }

  /** Every request that left, in order. @returns {HttpRecord[]} */
  records() {
    return [...this.#records];
  }

  /**
   * The scripted answer for `url`, using up a one-shot reply.
   *
   * @param {string} url
   * @returns {HttpReply | Responder}
   */
  #answer(url) {
    let best = null;
    let bestRank = -1;
    for (const route of this.#routes) {
      if (!route.canAnswer()) continue;
      const rank = route.rank(url);
      if (rank > bestRank) {
        best = route;
        bestRank = rank;
      }
    }
    if (best === null) return HttpReply.text(404, `FakeHost: no reply is scripted for ${url}`);
    const once = best.once.shift();
    if (once !== undefined) return once;
    return /** @type {HttpReply | Responder} */ (best.standing);
  }

  /**
   * Serve one request as the host would: its checks in the host's order,
   * the scripted receiver, the fault aimed at it, and the record. Throws a
   * `WireHttpError` for what the guest sees as a failure.
   *
   * @param {import('./http-wire.js').WireRequest} request
   * @param {HttpHostView} host
   * @returns {import('./http-wire.js').WireResponse}
   */
  serve(request, host) {
    this.#sent += 1;
    const sent = this.#sent;
    const index = this.#faults.findIndex((f) => f.at === sent);
    const fault = index < 0 ? null : this.#faults.splice(index, 1)[0].fault;
    // wasi:http refuses a forbidden header while the request is built,
    // before the host sees it.
    const forbidden = request.headers.find(([name]) => FORBIDDEN_HEADERS.includes(name.toLowerCase()));
    if (forbidden !== undefined) {
      throw WireHttpError.build(`header ${JSON.stringify(forbidden[0])} is forbidden by wasi:http`);
    }
    if (fault === HttpFault.FENCED) host.revoke();
    const fence = host.fence();
    if (host.isRevoked) {
      throw WireHttpError.ofCode({
        tag: 'internal-error',
        val: `${FENCED_PREFIX}controller ${fence.lease}: ${fence}: the lease is lost; nothing was sent`,
      });
    }
    const url = `${request.scheme}://${request.authority}${request.pathWithQuery}`;
    const target = Target.parse(url);
    if (typeof target === 'string') throw WireHttpError.build(target);
    if (hasDotSegment(target.path) || !this.#allow.some((entry) => entry.allows(target))) {
      throw WireHttpError.ofCode({ tag: 'HTTP-request-denied' });
    }
    const limits = host.limits;
    if (this.#thisReconcile >= limits.httpRequestsPerReconcile) {
      throw WireHttpError.ofCode({
        tag: 'internal-error',
        val:
          `${LIMIT_PREFIX}controller ${fence.lease}: ${fence}: ${limits.httpRequestsPerReconcile} requests in ` +
          'this reconcile already (the limit); nothing was sent',
      });
    }
    const body = request.body === null ? new Uint8Array(0) : request.body.slice();
    if (body.length > limits.httpRequestBodyBytes) {
      throw WireHttpError.ofCode({ tag: 'HTTP-request-body-size', val: BigInt(body.length) });
    }
    this.#thisReconcile += 1;
    let record = new HttpRecord({
      method: request.method,
      url,
      headers: stamped(request.headers, fence),
      body,
      timeoutMs: request.firstByteTimeoutMs,
      epoch: fence.epoch,
      delivered: false,
      status: null,
    });
    // A receiver that never got the request never answered it, so its
    // script is left for the next one.
    const delivered = fault !== HttpFault.REFUSED && fault !== HttpFault.TIMEOUT;
    let reply = null;
    if (delivered) {
      const answer = this.#answer(url);
      reply = answer instanceof HttpReply ? answer : answer(record.with({ delivered: true }));
      if (!(reply instanceof HttpReply)) throw new TypeError(`a responder for ${url} returned no HttpReply`);
      record = record.with({ delivered: true, status: reply.status });
    }
    this.#records.push(record);
    /** @type {Record<string, string>} */
    const failures = {
      [HttpFault.REFUSED]: 'connection-refused',
      [HttpFault.TIMEOUT]: 'connection-timeout',
      [HttpFault.REPLY_LOST]: 'connection-terminated',
      [HttpFault.REPLY_TIMED_OUT]: 'connection-read-timeout',
    };
    if (fault !== null && Object.hasOwn(failures, fault)) throw WireHttpError.ofCode({ tag: failures[fault] });
    const answered = /** @type {HttpReply} */ (reply);
    if (answered.body.length > limits.httpResponseBodyBytes) {
      throw WireHttpError.ofCode({ tag: 'HTTP-response-body-size', val: BigInt(limits.httpResponseBodyBytes) });
    }
    return {
      status: answered.status,
      headers: answered.headers.map(([n, v]) => [n, v]),
      body: answered.body.slice(),
    };
  }
}

/**
 * The guest's headers as the receiver sees them, with the fence's
 * replacing whatever the guest set under its names.
 *
 * @param {Array<[string, string]>} headers
 * @param {import('./fence.js').Fence} fence
 * @returns {Array<[string, string]>}
 */
function stamped(headers, fence) {
  const fenceNames = [LEASE_HEADER, EPOCH_HEADER, HOLDER_HEADER];
  /** @type {Array<[string, string]>} */
  const out = headers
    .map(([name, value]) => /** @type {[string, string]} */ ([name.toLowerCase(), value]))
    .filter(([name]) => !fenceNames.includes(name));
  out.push([LEASE_HEADER, `${fence.cluster}/${fence.lease}`]);
  out.push([EPOCH_HEADER, String(fence.epoch)]);
  out.push([HOLDER_HEADER, fence.holder]);
  return out;
}
