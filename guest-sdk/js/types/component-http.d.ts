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
/**
 * Send `request` through `wasi:http/outgoing-handler` and read the
 * response to its end; a `WireHttpError` if it failed.
 *
 * @param {import('./http-wire.js').WireRequest} request
 * @returns {import('./http-wire.js').WireResponse}
 */
export declare function sendThroughWasi(request: import('./http-wire.js').WireRequest): import('./http-wire.js').WireResponse;
