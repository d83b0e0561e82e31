/**
 * The seam between the SDK and whatever answers its host calls.
 *
 * Inside a component the host is the WIT imports (`component.js`); in
 * tests it is a `FakeHost` (`fake.js`). The SDK's functions call the
 * installed host; nothing else in the SDK knows which one it is.
 *
 * A host answers `get`, `list`, `listSelected`, `commit`, `fence`, `shard`,
 * `log`, `settings`, `nowMs` and `httpSend`, with the SDK's plain shapes
 * (`RawObject`, `RawPage`, `Committed`, `Fence`, `Shard`, `WireResponse`),
 * raising the SDK's `StoreError`s, or `WireHttpError` from `httpSend`.
 *
 * @module
 */
/**
 * Make `host` answer every host call the SDK makes from now on.
 *
 * @param {any} host a `FakeHost`, or the component's WIT host
 * @returns {void}
 */
export declare function install(host: any): void;
/**
 * The installed host; throws if there is none.
 *
 * @returns {any}
 */
export declare function currentHost(): any;
