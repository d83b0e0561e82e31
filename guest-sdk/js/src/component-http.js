/**
 * Outbound HTTP inside a component: one request through the world's
 * `wasi:http/outgoing-handler@0.2.12` import, with the bindings
 * componentize-js generates for it (not `fetch`, which would hide the
 * host's `error-code`s: the fenced and limit refusals among them).
 *
 * Only `component.js` imports this module. It speaks the seam's shapes
 * (`WireRequest`, `WireResponse`, `WireHttpError`: `http-wire.js`);
 * `http.js` classifies the failures.
 *
 * Owns: building the `outgoing-request`, the order of the calls (`handle`
 * before the body is written: the host's body channel holds a chunk or
 * two and is drained only once the request is on its way), reading the
 * response to its end, and dropping every resource it made, children
 * before their parents. Must never: drop a resource it handed over
 * (`handle`, `outgoing-request` and `outgoing-body.finish` take theirs),
 * or finish a body it could not write whole (a truncated body would be
 * taken for a whole one).
 *
 * @module
 */

import { handle } from 'wasi:http/outgoing-handler@0.2.12';
import { Fields, OutgoingBody, OutgoingRequest, RequestOptions, httpErrorCode } from 'wasi:http/types@0.2.12';

import { WireHttpError, codeFromHostText } from './http-wire.js';

/** What `blocking-write-and-flush` is given at most at a time (the host accepts 4096). */
const WRITE_CHUNK = 4096;
/** The most asked of one `blocking-read`; the host may return less. */
const READ_CHUNK = 64n * 1024n;

/** The bindings' dispose method: `Symbol.dispose`, or its stand-in where the engine has none. */
const DISPOSE = /** @type {any} */ (Symbol).dispose ?? Symbol.for('dispose');

/**
 * Drop a resource now. The bindings drop a resource on garbage collection
 * only until one of its methods is called, so every resource made here is
 * dropped explicitly, in the order `wasi:http` requires.
 *
 * @param {any} resource
 * @returns {void}
 */
function drop(resource) {
  if (resource !== null && resource !== undefined) resource[DISPOSE]?.();
}

/**
 * The WIT value a failed import returned (`err(value)`): componentize-js
 * throws it as `payload`. Anything else thrown is a bug, and is rethrown.
 *
 * @param {unknown} thrown
 * @returns {any}
 */
function payload(thrown) {
  if (thrown !== null && typeof thrown === 'object' && 'payload' in thrown) return thrown.payload;
  throw thrown;
}

/** @param {string} why */
function built(why) {
  return WireHttpError.build(why);
}

/** @type {Record<string, {tag: 'get' | 'head' | 'post' | 'put' | 'patch' | 'delete'}>} */
const METHODS = {
  GET: { tag: 'get' },
  HEAD: { tag: 'head' },
  POST: { tag: 'post' },
  PUT: { tag: 'put' },
  PATCH: { tag: 'patch' },
  DELETE: { tag: 'delete' },
};

/** @type {Record<string, string>} */
const HEADER_ERRORS = {
  'invalid-syntax': 'invalid syntax',
  forbidden: 'forbidden by wasi:http',
  immutable: 'the headers are immutable',
};

const encoder = new TextEncoder();

/**
 * The `outgoing-request` for `request`.
 *
 * @param {import('./http-wire.js').WireRequest} request
 * @returns {OutgoingRequest}
 */
function buildRequest(request) {
  const fields = new Fields();
  for (const [name, value] of request.headers) {
    try {
      fields.append(name, encoder.encode(value));
    } catch (e) {
      const error = payload(e);
      drop(fields);
      throw built(`header ${JSON.stringify(name)}: ${HEADER_ERRORS[error?.tag] ?? 'refused'}`);
    }
  }
  // The request takes the headers: they are its own from here on.
  const outgoing = new OutgoingRequest(fields);
  /** @param {() => void} set @param {string} what */
  const step = (set, what) => {
    try {
      set();
    } catch (e) {
      payload(e);
      drop(outgoing);
      throw built(what);
    }
  };
  const method = METHODS[request.method];
  step(() => outgoing.setMethod(method), `the method ${request.method} was refused`);
  step(() => outgoing.setScheme({ tag: request.scheme === 'https' ? 'HTTPS' : 'HTTP' }), 'the scheme was refused');
  step(() => outgoing.setAuthority(request.authority), "the URL's host and port were refused");
  step(() => outgoing.setPathWithQuery(request.pathWithQuery), "the URL's path or query was refused");
  return outgoing;
}

/**
 * The asked first-byte timeout, if any. A host that cannot honour it
 * refuses to set it; its own bound then applies, which is what the guest
 * gets anyway when it asks for more than the host allows.
 *
 * @param {import('./http-wire.js').WireRequest} request
 * @returns {RequestOptions | undefined}
 */
function requestOptions(request) {
  if (request.firstByteTimeoutMs === null) return undefined;
  const options = new RequestOptions();
  try {
    options.setFirstByteTimeout(BigInt(request.firstByteTimeoutMs) * 1_000_000n);
  } catch (e) {
    payload(e);
  }
  return options;
}

/**
 * A body stream's failure: the `error-code` behind it when the host gives
 * one (a body over its bound, a between-bytes timeout, a connection
 * dropped on lease loss), through `http-error-code` or, where the host
 * leaves that empty, its error's text; otherwise the I/O error's
 * description.
 *
 * @param {any} error a `wasi:io/streams` `stream-error`
 * @returns {WireHttpError}
 */
function streamError(error) {
  if (error?.tag !== 'last-operation-failed') return WireHttpError.stream('the stream was closed');
  const io = error.val;
  try {
    const code = httpErrorCode(io);
    if (code !== undefined) return WireHttpError.ofCode(code);
    const text = io.toDebugString();
    const known = codeFromHostText(text);
    return known === null ? WireHttpError.stream((text.split('\n')[0] ?? '').trim()) : WireHttpError.ofCode(known);
  } finally {
    drop(io);
  }
}

/**
 * Write `bytes` through the body's stream in chunks the stream accepts,
 * then finish the body. An unfinished body is dropped instead, which
 * tells the host the request is incomplete.
 *
 * @param {OutgoingBody} body
 * @param {Uint8Array} bytes
 * @returns {WireHttpError | null}
 */
function sendBody(body, bytes) {
  let stream;
  try {
    stream = body.write();
  } catch (e) {
    payload(e);
    drop(body);
    return built("the request's body stream was already taken");
  }
  /** @type {WireHttpError | null} */
  let failed = null;
  for (let at = 0; at < bytes.length && failed === null; at += WRITE_CHUNK) {
    try {
      stream.blockingWriteAndFlush(bytes.subarray(at, at + WRITE_CHUNK));
    } catch (e) {
      failed = streamError(payload(e));
    }
  }
  // The stream is the body's child: it goes before the body is finished.
  drop(stream);
  if (failed !== null) {
    drop(body);
    return failed;
  }
  try {
    OutgoingBody.finish(body, undefined);
  } catch (e) {
    return WireHttpError.ofCode(payload(e));
  }
  return null;
}

/**
 * Block until the response's head arrived, or the request failed.
 *
 * @param {import('wasi:http/types@0.2.12').FutureIncomingResponse} future
 * @returns {import('wasi:http/types@0.2.12').IncomingResponse}
 */
function wait(future) {
  for (;;) {
    const ready = future.get();
    if (ready === undefined) {
      const pollable = future.subscribe();
      pollable.block();
      drop(pollable);
      continue;
    }
    if (ready.tag === 'err') throw WireHttpError.stream('the response was already taken');
    if (ready.val.tag === 'err') throw WireHttpError.ofCode(ready.val.val);
    return ready.val.val;
  }
}

/**
 * The response's status, headers and whole body; the response and its
 * children dropped.
 *
 * @param {import('wasi:http/types@0.2.12').IncomingResponse} response
 * @returns {import('./http-wire.js').WireResponse}
 */
function readResponse(response) {
  const status = response.status();
  const fields = response.headers();
  const decoder = new TextDecoder();
  /** @type {Array<[string, string]>} */
  const headers = fields.entries().map(([name, value]) => [name, decoder.decode(value)]);
  drop(fields);
  let body;
  try {
    body = response.consume();
  } catch (e) {
    payload(e);
    drop(response);
    throw WireHttpError.stream('the response body was already taken');
  }
  let stream;
  try {
    stream = body.stream();
  } catch (e) {
    payload(e);
    drop(body);
    drop(response);
    throw WireHttpError.stream('the response body stream was already taken');
  }
  /** @type {Uint8Array[]} */
  const chunks = [];
  let size = 0;
  /** @type {WireHttpError | null} */
  let failed = null;
  for (;;) {
    try {
      const chunk = stream.blockingRead(READ_CHUNK);
      chunks.push(chunk);
      size += chunk.length;
    } catch (e) {
      const error = payload(e);
      if (error?.tag !== 'closed') failed = streamError(error);
      break;
    }
  }
  // Children before parents: the stream, the body, then the response.
  drop(stream);
  drop(body);
  drop(response);
  if (failed !== null) throw failed;
  const whole = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    whole.set(chunk, at);
    at += chunk.length;
  }
  return { status, headers, body: whole };
}

/**
 * Send `request` through `wasi:http/outgoing-handler` and read the
 * response to its end; a `WireHttpError` if it failed.
 *
 * @param {import('./http-wire.js').WireRequest} request
 * @returns {import('./http-wire.js').WireResponse}
 */
export function sendThroughWasi(request) {
  const outgoing = buildRequest(request);
  let body = null;
  if (request.body !== null) {
    try {
      body = outgoing.body();
    } catch (e) {
      payload(e);
      drop(outgoing);
      throw built("the request's body was already taken");
    }
  }
  const options = requestOptions(request);
  let future;
  try {
    // `handle` takes the request and the options, whatever it answers.
    future = handle(outgoing, options);
  } catch (e) {
    const code = payload(e);
    drop(body);
    throw WireHttpError.ofCode(code);
  }
  if (body !== null && request.body !== null) {
    // A body that cannot be written whole is not the final word, so its
    // failure is not returned: the host may have refused the request (it
    // then drops the body, which closes the stream), or the server may
    // have answered before reading it all. The response says which.
    sendBody(body, request.body);
  }
  let response;
  try {
    response = wait(future);
  } finally {
    drop(future);
  }
  return readResponse(response);
}
