/**
 * A fake host for testing controllers natively, with node's test runner.
 *
 * `FakeHost` answers every host call the SDK makes with the real host's
 * rules: kinds and names are DNS labels; values are JSON within the size
 * limit, normalized (compact, keys sorted); versions are store revisions
 * that only grow and are never reused; every operation of a commit applies
 * or none does; one operation per object per commit; metadata rules,
 * finalizers, the deletion mark and owner deletion (transitively, at most
 * 1000 per commit) as the host applies them; selectors with the host's
 * containment; commits fenced by the lease (`revoke`, `newTenure`); the
 * tenure's shard (`setShard`): a sharded fake's `resync` and `runChanges`
 * reconcile only the shard's own objects (and those of the kinds every
 * shard watches), and its commits refuse a status write without an
 * expected generation to another shard's object, as the host does.
 *
 * Faults are aimed at a call or commit: `Fault.FENCED` (the lease is
 * lost), `Fault.CONFLICT`, `Fault.UNAVAILABLE`, `Fault.LOST_REPLY` (the
 * commit applied, its reply lost: the guest sees `Unavailable`), and quota
 * refusals. `before` runs a write "by someone else" just before a call.
 *
 * Outbound HTTP (`fake-http.js`) follows the host's rules: denied until
 * `allowHttp` lists the URL, the three fence headers stamped on every
 * request, refused after the lease is lost, bounded per reconcile; a
 * scripted receiver answers (`respond`, `respondOnce`, `respondWith`),
 * `failHttp` injects faults on the wire (`HttpFault`), and
 * `httpRequests` records what left.
 *
 * Creating a `FakeHost` installs it: the SDK's calls go to the newest one.
 *
 * @module
 */
import { Fence } from './fence.js';
import { Metadata, ObjectKey } from './keys.js';
import { Shard } from './shard.js';
import { Committed } from './transaction.js';
export { HttpFault, HttpRecord, HttpReply } from './fake-http.js';
/** The fake's clock starts here: 2026-01-01T00:00:00Z. */
export declare const START: Date;
/** The bounds the fake enforces; the host's defaults unless given. */
export declare class Limits {
    /** @type {number} */ maxValueBytes: number;
    /** @type {number} */ maxOpsPerCommit: number;
    /** @type {number} */ maxEventsPerCommit: number;
    /** @type {number} */ maxEventReasonBytes: number;
    /** @type {number} */ maxEventMessageBytes: number;
    /** @type {number} */ maxPageSize: number;
    /** @type {number} */ maxCallPayloadBytes: number;
    /** @type {number} */ logLineBytes: number;
    /** @type {number} */ httpRequestsPerReconcile: number;
    /** @type {number} */ httpRequestBodyBytes: number;
    /** @type {number} */ httpResponseBodyBytes: number;
    /** @param {Partial<Limits>} [given] */
    constructor(given?: Partial<Limits>);
}
/** A controller's write quotas, as its `[[controllers]]` entry sets them (`FakeHost.setQuotas`); the host's defaults unless given. */
export declare class QuotaLimits {
    /** @type {number} */ maxCreatesPerSecond: number;
    /** @type {number} */ createBurst: number;
    /** @type {number} */ maxObjectsPerKind: number;
    /** @param {Partial<QuotaLimits>} [given] */
    constructor(given?: Partial<QuotaLimits>);
}
/**
 * A fault the fake injects at a chosen call or commit.
 *
 * @readonly
 * @enum {string}
 */
export declare const Fault: Readonly<{
    /** The lease is lost: this call and every later one throw `Fenced`. */
    FENCED: "fenced";
    /** The commit throws `Conflict` naming its first object (commits only). */
    CONFLICT: "conflict";
    /** The call throws `Unavailable` and does nothing. */
    UNAVAILABLE: "unavailable";
    /** The commit applies, then its reply is lost: `Unavailable` (commits only). */
    LOST_REPLY: "lost-reply";
    /** A `max_creates_per_second` quota refusal (commits only). */
    QUOTA_CREATES: "quota-creates";
    /** A `max_objects_per_kind` quota refusal (commits only). */
    QUOTA_OBJECTS: "quota-objects";
}>;
/**
 * True for faults that only a commit can meet.
 *
 * @param {string} fault one of `Fault`
 * @returns {boolean}
 */
export declare function commitsOnly(fault: string): boolean;
/**
 * Which call a fault or hook aims at, counting from 1 (the next one).
 * `At.call(n)`: the n-th store call from now (get, list or commit);
 * `At.commit(n)`: the n-th commit from now.
 */
export declare class At {
    /** @type {boolean} */ commits: boolean;
    /** @type {number} */ n: number;
    /** @param {boolean} commits @param {number} n */
    constructor(commits: boolean, n: number);
    /** The n-th store call from now, of any kind. @param {number} n @returns {At} */
    static call(n: number): At;
    /** The n-th commit from now. @param {number} n @returns {At} */
    static commit(n: number): At;
}
export type CallCounts = {
    get: number;
    /**
     * `list` and `listSelected`
     */
    list: number;
    commit: number;
    /**
     * all store calls
     */
    total: number;
};
export type CommitRecord = {
    revision: number;
    epoch: number;
    /**
     * as normalized by the fake
     */
    ops: import('./transaction.js').Op[];
    events: import('./transaction.js').NewEvent[];
    eventSeqs: number[];
};
export type EventRecord = {
    seq: number;
    /**
     * the commit that appended it
     */
    revision: number;
    /**
     * the tenure that appended it
     */
    epoch: number;
    /**
     * what it is about
     */
    key: ObjectKey;
    reason: string;
    /**
     * as stored: a typed event's type included (see `EventType`)
     */
    message: string;
    /**
     * `Normal` or `Warning`, read from the message (see `EventType`)
     */
    type: string;
    /**
     * the message without its type (see `EventType`)
     */
    text: string;
};
export type Change = {
    /**
     * its place in the store's one series of numbers (after its
     * commit's revision; unique and increasing, with gaps), as the host's change stream gives it
     */
    position: number;
    revision: number;
    key: ObjectKey;
    deleted: boolean;
    before: Metadata | null;
    after: Metadata | null;
};
export type LogLine = {
    /**
     * one of `Level`
     */
    level: string;
    message: string;
    epoch: number;
};
export type Stored = {
    version: number;
    value: string;
    metadata: Metadata;
    status: string | null;
    generation: number;
    deletingSinceMs: number | null;
};
/**
 * The host's canonical JSON text of a JavaScript value, as a seed or a
 * status written through the fake is stored (`fake-json.js`; a number
 * JavaScript holds as an integer is written as one).
 *
 * @param {any} value
 * @returns {string}
 */
export declare function canonicalJson(value: any): string;
/**
 * The keys `change` maps to through `watch` (none if `watch` is of another kind).
 * As the host maps: through what the object has after the change and, when
 * an update moved its owner or label, through what it had before.
 *
 * @param {import('./controller.js').RelatedWatch} watch
 * @param {Change} change
 * @returns {ObjectKey[]}
 */
export declare function relatedKeys(watch: import('./controller.js').RelatedWatch, change: Change): ObjectKey[];
/**
 * A host in memory: the store, the fence, the shard, logs, settings and the clock.
 *
 * Creating one installs it (`install` again to switch between two). Seed
 * objects with `seed`, drive the controller with `reconcile`, `resync` or
 * `runChanges`, inspect `objects`, `commits`, `events`, `logs`, and aim
 * faults with `fail` and writes of others with `before`. It runs shard 0
 * of 1 (unsharded) unless `setShard` says otherwise.
 */
export declare class FakeHost {
    #private;
    /** The bounds this fake enforces. @type {Limits} */
    limits: Limits;
    /** Whether log lines are kept without being printed. @type {boolean} */
    quiet: boolean;
    /**
     * @param {Limits} [limits] the bounds to enforce (the host's defaults)
     * @param {{quiet?: boolean}} [options] `quiet`: keep log lines without printing them
     */
    constructor(limits?: Limits, options?: {
        quiet?: boolean;
    });
    /** Make this host answer the SDK's calls. @returns {void} */
    install(): void;
    /**
     * Create or overwrite `kind/name` with `value`, as a user would; its version.
     *
     * @param {string} kind
     * @param {string} name
     * @param {any} value
     * @returns {number}
     */
    seed(kind: string, name: string, value: any): number;
    /**
     * As `seed`, with metadata.
     *
     * @param {string} kind
     * @param {string} name
     * @param {any} value
     * @param {Metadata} metadata
     * @returns {number}
     */
    seedWith(kind: string, name: string, value: any, metadata: Metadata): number;
    /**
     * Write the status of `kind/name` as a user would; the new version.
     *
     * @param {string} kind
     * @param {string} name
     * @param {any} status
     * @returns {number}
     */
    setStatus(kind: string, name: string, status: any): number;
    /**
     * A user's delete request (marks it if it has finalizers); false if absent.
     *
     * @param {string} kind
     * @param {string} name
     * @returns {boolean}
     */
    remove(kind: string, name: string): boolean;
    /**
     * `kind/name` as stored, or null.
     *
     * @param {string} kind
     * @param {string} name
     * @param {((value: any) => any) | null} [decode]
     * @returns {import('./objects.js').StoredObject | null}
     */
    object(kind: string, name: string, decode?: ((value: any) => any) | null): import('./objects.js').StoredObject | null;
    /**
     * Every object of `kind`, in name order.
     *
     * @param {string} kind
     * @param {((value: any) => any) | null} [decode]
     * @returns {import('./objects.js').StoredObject[]}
     */
    objects(kind: string, decode?: ((value: any) => any) | null): import('./objects.js').StoredObject[];
    /** The store's latest revision. @returns {number} */
    get revision(): number;
    /**
     * The change stream: every write after revision `after`, in order.
     *
     * @param {number} [after]
     * @returns {Change[]}
     */
    changes(after?: number): Change[];
    /** The current fence (answers the SDK's `fence()` too). @returns {Fence} */
    fence(): Fence;
    /**
     * Run under `fence` from now on, not revoked.
     *
     * @param {Fence} fence
     * @returns {void}
     */
    setFence(fence: Fence): void;
    /** A new tenure of the same lease: epoch + 1, not revoked. @returns {Fence} */
    newTenure(): Fence;
    /** Lose the lease: every later store call throws `Fenced`. @returns {void} */
    revoke(): void;
    /** True once the lease is lost. @returns {boolean} */
    get isRevoked(): boolean;
    /** The tenure's shard (answers the SDK's `shard()` too): 0 of 1 unless set. @returns {Shard} */
    shard(): Shard;
    /**
     * Run shard `index` of `count` from now on (a `RangeError` unless `count`
     * is 1 to 64 and `index` below it); the new shard.
     *
     * A sharded fake reconciles, in `resync` and `runChanges`, only what the
     * host would wake this shard for, and refuses what the host refuses a
     * shard's commit: a status write without an expected generation to
     * another shard's object, or to any object when the controller declares
     * a shard label (the label the host would judge by is the object's,
     * which the op does not carry). The label is that of the description the
     * fake read last: `reconcile` of a sharded fake, `resync` and
     * `runChanges` read it.
     *
     * @param {number} index
     * @param {number} count
     * @returns {Shard}
     */
    setShard(index: number, count: number): Shard;
    /**
     * Run one reconcile of `kind/name` as the host would; its reply. A
     * sharded fake reads the controller's description first (its shard label
     * decides which status writes the shard may make). Each reconcile (of
     * `resync` and `runChanges` too) has a fresh budget of outbound requests
     * (`limits.httpRequestsPerReconcile`), as in the host; requests made
     * outside a reconcile share one budget.
     *
     * @param {import('./controller.js').Controller} controller
     * @param {string} kind
     * @param {string} name
     * @param {string} [reason] one of `Reason`
     * @returns {import('./controller.js').Reply}
     */
    reconcile(controller: import('./controller.js').Controller, kind: string, name: string, reason?: string): import('./controller.js').Reply;
    /**
     * Reconcile every object of every watched kind, then every key the
     * objects of the related kinds map to (each key once, reason resync).
     *
     * A sharded fake reconciles only the keys the host would queue on this
     * shard: its own objects, every object of the kinds every shard watches,
     * and the mapped keys whose target (as stored) is its own.
     *
     * @param {import('./controller.js').Controller} controller
     * @returns {Array<[ObjectKey, import('./controller.js').Reply]>}
     */
    resync(controller: import('./controller.js').Controller): Array<[ObjectKey, import('./controller.js').Reply]>;
    /**
     * Reconcile each watched key changed after revision `after` (reason
     * change), and each key a related watch maps a change to (reason
     * related, unless the key changed itself), following the changes those
     * reconciles make, until none is left; the last revision seen.
     *
     * A reconcile that asks to be requeued or fails is not repeated here: the
     * test decides about time. Throws past `maxReconciles`.
     *
     * A sharded fake follows only what wakes this shard on the host: a change
     * of its own object (judged by the object's metadata after the change, or
     * before it for a deletion) or of a kind every shard watches, and a
     * mapped key whose target, as stored, is its own.
     *
     * @param {import('./controller.js').Controller} controller
     * @param {number} [after]
     * @param {number} [maxReconciles]
     * @returns {number}
     */
    runChanges(controller: import('./controller.js').Controller, after?: number, maxReconciles?: number): number;
    /**
     * Enforce the host's write quotas on the guest's commits from now on, as
     * the host does with these limits: the create bucket starts full and the
     * fake's clock refills it; a commit creating more than the burst, more
     * than the bucket holds, or past the cap of a kind is refused with the
     * host's `invalid` text (`QuotaExceeded`), writing nothing. Off until
     * called: the fake's clock moves only when a test moves it.
     *
     * @param {QuotaLimits} limits
     * @returns {void}
     */
    setQuotas(limits: QuotaLimits): void;
    /**
     * Inject `fault` at the call `at` names.
     *
     * @param {At} at
     * @param {string} fault one of `Fault`
     * @returns {void}
     */
    fail(at: At, fault: string): void;
    /**
     * Inject `fault` at the next commit.
     *
     * @param {string} fault one of `Fault`
     * @returns {void}
     */
    failNextCommit(fault: string): void;
    /**
     * Make every store call throw `Unavailable` until set back.
     *
     * @param {boolean} unavailable
     * @returns {void}
     */
    setUnavailable(unavailable: boolean): void;
    /**
     * Run `write(host)` just before the call `at` names (someone else's write).
     *
     * @param {At} at
     * @param {(host: FakeHost) => void} write
     * @returns {void}
     */
    before(at: At, write: (host: FakeHost) => void): void;
    /**
     * Run `write(host)` just before the n-th commit from now.
     *
     * @param {number} n
     * @param {(host: FakeHost) => void} write
     * @returns {void}
     */
    beforeCommit(n: number, write: (host: FakeHost) => void): void;
    /** Faults (outbound HTTP's included) and hooks not met yet. @returns {number} */
    get pendingFaults(): number;
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
     * The store's `list-selected` (counted, and struck by faults, as a list).
     *
     * @param {string} kind
     * @param {import('./keys.js').Selector} selector
     * @param {string | null} after
     * @param {number} limit
     * @returns {import('./keys.js').RawPage}
     */
    listSelected(kind: string, selector: import('./keys.js').Selector, after: string | null, limit: number): import('./keys.js').RawPage;
    /**
     * The store's `commit`: validated, fenced, atomic.
     *
     * @param {readonly import('./transaction.js').Op[]} ops
     * @param {readonly import('./transaction.js').NewEvent[]} events
     * @returns {Committed}
     */
    commit(ops: readonly import('./transaction.js').Op[], events: readonly import('./transaction.js').NewEvent[]): Committed;
    /**
     * The logging host: keeps the line (truncated as the host does) and prints it unless quiet.
     *
     * @param {string} level one of `Level`
     * @param {string} message
     * @returns {void}
     */
    log(level: string, message: string): void;
    /**
     * The host's outbound HTTP (`wasi:http/outgoing-handler`): admitted as
     * the host admits requests, answered by the scripted receiver, recorded.
     * Throws a `WireHttpError` for what the guest sees as a failure.
     *
     * @param {import('./http-wire.js').WireRequest} request
     * @returns {import('./http-wire.js').WireResponse}
     */
    httpSend(request: import('./http-wire.js').WireRequest): import('./http-wire.js').WireResponse;
    /** The settings host: JSON text of an object. @returns {string} */
    settings(): string;
    /** The wall clock, in ms since the Unix epoch. @returns {number} */
    nowMs(): number;
    /**
     * Add `entries` to the controller's `http_allow` list, as the host's
     * config would: `scheme://host[:port]` allows every path of that origin,
     * `scheme://host[:port]/prefix/` only paths under the prefix (`/hooks`
     * without the slash allows `/hooks` and `/hooks/…`). Until then every
     * request is denied, as by the host. An entry the host's config check
     * would refuse throws an `Error` naming it.
     *
     * @param {Iterable<string>} entries
     * @returns {void}
     */
    allowHttp(entries: Iterable<string>): void;
    /**
     * Answer every request to `pattern` with `reply` (replacing what was
     * scripted for it before), once its `respondOnce` replies are used up.
     * A pattern is an exact URL as sent (`scheme://authority/path?query`),
     * or a prefix ending in `*` (`http://svc.test/hooks/*`); an exact match
     * wins over a prefix, a longer prefix over a shorter. A request nothing
     * is scripted for is answered `404`.
     *
     * @param {string} pattern
     * @param {import('./fake-http.js').HttpReply} reply
     * @returns {void}
     */
    respond(pattern: string, reply: import('./fake-http.js').HttpReply): void;
    /**
     * Queue `reply` for the next request to `pattern`: one-shot replies are
     * used up in the order queued, before the standing reply of `respond`
     * or `respondWith`.
     *
     * @param {string} pattern as for `respond`
     * @param {import('./fake-http.js').HttpReply} reply
     * @returns {void}
     */
    respondOnce(pattern: string, reply: import('./fake-http.js').HttpReply): void;
    /**
     * Answer every request to `pattern` with what `responder` computes from
     * it (replacing what was scripted for it before): a receiver with state,
     * such as one that follows the fenced-receiver rule. The responder runs
     * only for requests the receiver gets; it sees the request as recorded,
     * fence headers included.
     *
     * @param {string} pattern as for `respond`
     * @param {(request: import('./fake-http.js').HttpRecord) => import('./fake-http.js').HttpReply} responder
     * @returns {void}
     */
    respondWith(pattern: string, responder: (request: import('./fake-http.js').HttpRecord) => import('./fake-http.js').HttpReply): void;
    /**
     * Make the n-th outbound request from now (1 = the next one) fail with
     * `fault` (one of `HttpFault`). Requests count whether or not the host
     * lets them out; a fault aimed at a request the host refuses anyway
     * (not allowed, a bound reached) is used up without effect, except
     * `HttpFault.FENCED`, which the host checks first.
     *
     * @param {number} n
     * @param {string} fault one of `HttpFault`
     * @returns {void}
     */
    failHttp(n: number, fault: string): void;
    /**
     * Make the next outbound request fail with `fault`: `failHttp(1, fault)`.
     *
     * @param {string} fault one of `HttpFault`
     * @returns {void}
     */
    failNextHttp(fault: string): void;
    /**
     * Every request that left the fake host, in order, delivered or not
     * (see `HttpRecord.delivered`). Requests the host refused (not in
     * `http_allow`, the lease lost, a bound reached, a forbidden header)
     * never left and are not here.
     *
     * @returns {import('./fake-http.js').HttpRecord[]}
     */
    httpRequests(): import('./fake-http.js').HttpRecord[];
    /** Every commit that applied, in order. @returns {CommitRecord[]} */
    commits(): CommitRecord[];
    /** Every event appended, in order. @returns {EventRecord[]} */
    events(): EventRecord[];
    /**
     * The events with `reason`.
     *
     * @param {string} reason
     * @returns {EventRecord[]}
     */
    eventsWithReason(reason: string): EventRecord[];
    /** Every log line, in order. @returns {LogLine[]} */
    logs(): LogLine[];
    /** How many store calls of each kind were made. @returns {CallCounts} */
    calls(): CallCounts;
    /**
     * Give the controller these settings (a JSON object within the host's bound).
     *
     * @param {Record<string, any>} settings
     * @returns {void}
     */
    setSettings(settings: Record<string, any>): void;
    /**
     * As `setSettings`, from JSON text.
     *
     * @param {string} text
     * @returns {void}
     */
    setSettingsJson(text: string): void;
    /** The fake's wall clock. @returns {Date} */
    now(): Date;
    /**
     * Set the wall clock.
     *
     * @param {Date} now
     * @returns {void}
     */
    setNow(now: Date): void;
    /**
     * Move the wall clock forward by `ms` milliseconds; the new now.
     *
     * @param {number} ms
     * @returns {Date}
     */
    advance(ms: number): Date;
}
