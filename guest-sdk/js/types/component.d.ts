/**
 * The adapter between the SDK and the component's WIT bindings.
 *
 * Only a component imports this module: it imports the interfaces of the
 * world `leasehold:controller/controller@0.4.0` by their WIT names, which
 * componentize-js binds when it builds the component. A controller's app
 * module exports its controller with
 *
 * ```js
 * import { exportController } from 'leasehold/component';
 * export const reconciler = exportController(() => new MyController());
 * ```
 *
 * `WitHost` answers the SDK's host calls with the WIT imports (outbound
 * HTTP through `wasi:http/outgoing-handler`, in `component-http.js`); the
 * `reconciler` object `exportController` returns is what the component
 * exports as `leasehold:controller/reconciler`. Everything else in the SDK
 * is the same code the tests run natively against `FakeHost`.
 *
 * @module
 */
import { Fence } from './fence.js';
import { Shard } from './shard.js';
import { Committed } from './transaction.js';
/** Answers the SDK's host calls with the component's WIT imports. */
export declare class WitHost {
    /**
     * The store's `get`.
     *
     * @param {string} kind
     * @param {string} name
     * @returns {import('./keys.js').RawObject | null}
     */
    get(kind: string, name: string): import('./keys.js').RawObject | null;
    /**
     * The store's `list`.
     *
     * @param {string} kind
     * @param {string | null} after
     * @param {number} limit
     * @returns {import('./keys.js').RawPage}
     */
    list(kind: string, after: string | null, limit: number): import('./keys.js').RawPage;
    /**
     * The store's `list-selected`.
     *
     * @param {string} kind
     * @param {import('./keys.js').Selector} selector
     * @param {string | null} after
     * @param {number} limit
     * @returns {import('./keys.js').RawPage}
     */
    listSelected(kind: string, selector: import('./keys.js').Selector, after: string | null, limit: number): import('./keys.js').RawPage;
    /**
     * The store's `commit`.
     *
     * @param {readonly import('./transaction.js').Op[]} ops
     * @param {readonly import('./transaction.js').NewEvent[]} events
     * @returns {Committed}
     */
    commit(ops: readonly import('./transaction.js').Op[], events: readonly import('./transaction.js').NewEvent[]): Committed;
    /** The tenure's fence. @returns {Fence} */
    fence(): Fence;
    /** The tenure's shard. @returns {Shard} */
    shard(): Shard;
    /**
     * The logging host.
     *
     * @param {string} level one of `Level`
     * @param {string} message
     * @returns {void}
     */
    log(level: string, message: string): void;
    /** The settings host. @returns {string} */
    settings(): string;
    /**
     * One outbound request through `wasi:http/outgoing-handler`; a
     * `WireHttpError` if it failed.
     *
     * @param {import('./http-wire.js').WireRequest} request
     * @returns {import('./http-wire.js').WireResponse}
     */
    httpSend(request: import('./http-wire.js').WireRequest): import('./http-wire.js').WireResponse;
    /** `wasi:clocks/wall-clock` in ms since the Unix epoch. @returns {number} */
    nowMs(): number;
}
/**
 * The `reconciler` export, serving `factory()`'s controller.
 *
 * One controller is created on first use and kept for the guest
 * instance's life (one tenure). A `Fenced` error becomes the WIT
 * `reconcile-error.fenced`; every other failure becomes `failed` with the
 * delay the controller's `errorPolicy` chose.
 *
 * @param {() => import('./controller.js').Controller} factory
 * @returns {typeof import('leasehold:controller/reconciler@0.4.0')}
 */
export declare function exportController(factory: () => import('./controller.js').Controller): typeof import('leasehold:controller/reconciler@0.4.0');
