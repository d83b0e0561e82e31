/** @module Interface leasehold:controller/reconciler@0.4.0 **/
/**
 * Describe the controller. Called once per tenure, before any reconcile.
 */
export function describe(): Description;
/**
 * Bring the object `kind/name` to its desired state. The object may
 * have been deleted; read it to find out. `reason` says why the host
 * calls now (see `reconcile-reason`).
 */
export function reconcile(kind: string, name: string, reason: ReconcileReason): Outcome;
/**
 * A change of an object carrying the label `key` with value `V`
 * queues `target-kind/V`. An object without the label, or whose value
 * is not an object name (a DNS label: empty, uppercase, `_` or `.`),
 * maps to nothing.
 */
export interface LabelMap {
  /**
   * The label key, of the syntax of `types.metadata.labels`, e.g.
   * `example.com/task`.
   */
  key: string,
  /**
   * The kind of the objects the label's value names, e.g. `tasks`.
   */
  targetKind: string,
}
/**
 * How a change of a related kind maps to the keys to reconcile.
 */
export type RelatedMap = RelatedMapOwner | RelatedMapLabel;
/**
 * To the changed object's owner (`types.metadata.owner`), like
 * controller-runtime's `Owns`: a change of an object owned by
 * `K/N` queues `K/N`. With a kind, only owners of that kind are
 * queued (an object owned by another kind, or by none, maps to
 * nothing); none queues the owner whatever its kind.
 */
export interface RelatedMapOwner {
  tag: 'owner',
  val: string | undefined,
}
/**
 * Through a label, like controller-runtime's
 * `EnqueueRequestsFromMapFunc`: see `label-map`.
 */
export interface RelatedMapLabel {
  tag: 'label',
  val: LabelMap,
}
/**
 * "Watch `kind` and map each of its changes through `mapping`": the
 * keys a change maps to are queued as `related` (merged with any
 * other cause for the same key, as `reconcile-reason` says).
 * 
 * Mapping reads what the change stream recorded with the change: the
 * changed object's owner and labels after the change, and before it
 * when an update changed them. So
 * - a create maps through what the object has;
 * - an update maps through what it has and, if its owner or label
 *   changed, through what it had: both the object it left and the one
 *   it joined are reconciled;
 * - a delete (or a deletion mark, which is an update) maps through
 *   what it had.
 * One change can queue several keys (several related watches of its
 * kind, an old and a new target); a key queued several times before
 * it runs is reconciled once.
 * 
 * A resync (see `reconcile-reason.resync`) also lists every object of
 * each related kind and queues the keys they map to, so nothing a
 * related change would have queued is lost when the queue overflows.
 */
export interface RelatedWatch {
  /**
   * The kind whose changes are mapped, e.g. `pods`.
   */
  kind: string,
  /**
   * How each change maps to the keys to reconcile.
   */
  mapping: RelatedMap,
}
/**
 * What the controller needs from the host.
 */
export interface Description {
  /**
   * The object kinds whose changes trigger a reconcile.
   */
  watches: Array<string>,
  /**
   * How often every watched object is reconciled again even without a
   * change, in milliseconds. Zero disables periodic resync (a resync
   * still happens at the start of each tenure).
   */
  resyncPeriodMs: bigint,
  /**
   * Kinds whose changes reconcile *another* object: the one each
   * change maps to (its owner, or the object a label names), with
   * the reason `related`. Empty for none. A kind may be both in
   * `watches` (its own objects are reconciled) and here (the objects
   * they relate to are too). A related watch whose kind, owner kind,
   * target kind or label key is not of the syntax `types.object`
   * and `types.metadata` give is ignored with a warning in the
   * host's log when the controller starts (as a malformed kind in
   * `watches` is), and so is any beyond the first 32; `leasehold
   * check` refuses a component with a malformed one, naming it.
   */
  related: Array<RelatedWatch>,
  /**
   * A label whose value decides an object's shard, e.g.
   * `example.com/tenant`, so that objects which belong together
   * (a tenant's tasks and quotas) fall into one shard: an object
   * carrying it belongs to the shard FNV-1a 64 of the label's value
   * picks, any other object to the one its `kind/name` picks (see
   * `tenure.shard`). None: every object by its `kind/name`. Ignored
   * by an unsharded controller. A key that is not of the syntax of
   * `types.metadata.labels` is refused by `leasehold check` and
   * fails the guest at the start of its tenure, naming it.
   * 
   * The key a related watch maps a change to goes to the shard that
   * owns the target object as stored when the change is read (the
   * host reads the target's labels; a target that does not exist
   * goes by its `kind/name`).
   */
  shardLabel?: string,
  /**
   * Kinds whose every change wakes, and whose every object a resync
   * queues on, every shard, whatever shard the object belongs to:
   * shared objects each shard decides on, such as the nodes every
   * shard's tasks are placed on. A kind here that is not in
   * `watches` wakes nothing: only watched kinds are read.
   * Writes to them still follow `tenure.shard`'s rule. Ignored by
   * an unsharded controller. A kind that is not of the syntax of
   * `types.object` is refused as a malformed shard label is.
   */
  everyShard: Array<string>,
  /**
   * The shape of the controller's settings (`settings.get`) as a
   * JSON Schema document (JSON text), or none to leave them
   * unchecked. `leasehold check`, the host at start and a reload
   * validate `[controllers.settings]` against it and refuse the
   * config, naming every key that is wrong, missing or unknown
   * (never a value). The host understands this subset of JSON Schema
   * (2020-12): `type` (one or a list of `object`, `array`, `string`,
   * `integer`, `number`, `boolean`, `null`), `properties`,
   * `required`, `additionalProperties` (a boolean or a schema),
   * `items`, `enum`, `const`, `minimum`, `maximum`,
   * `exclusiveMinimum`, `exclusiveMaximum`, `minLength`, `maxLength`,
   * `minItems`, `maxItems`, `anyOf`, `oneOf`, `allOf`, and `$ref` to
   * `#/$defs/NAME` or `#/definitions/NAME`; other keywords (`title`,
   * `description`, `default`, `format`, ...) are annotations it
   * ignores. At most 64 KiB; a schema that is not JSON, not an
   * object, or refers to a definition it lacks is refused by
   * `leasehold check`, naming the controller.
   */
  settingsSchema?: string,
}
/**
 * A successful reconcile's result.
 */
export type Outcome = OutcomeDone | OutcomeRequeueAfter;
/**
 * Nothing more to do until the object changes.
 */
export interface OutcomeDone {
  tag: 'done',
}
/**
 * The timer: "wake me in this many milliseconds for this key".
 * The host reconciles the same `kind/name` again once the delay
 * has passed, whether or not the object changed; to be woken at a
 * wall-clock time T, return T minus the wall clock's now. Rules:
 * - one timer per key: a key already due earlier keeps its earlier
 *   time;
 * - a change of the object before the time reconciles it at once
 *   and consumes the timer (return `requeue-after` again from that
 *   reconcile to keep waiting);
 * - delays are capped at a day, and zero means "as soon as
 *   possible";
 * - timers live in the tenure that set them: a new tenure starts
 *   with a full resync of every watched object instead, whose
 *   reconciles set their timers again.
 */
export interface OutcomeRequeueAfter {
  tag: 'requeue-after',
  val: bigint,
}
/**
 * Details of a failed reconcile.
 */
export interface Failure {
  /**
   * What went wrong, for the log.
   */
  message: string,
  /**
   * When to retry, in milliseconds; none lets the host back off.
   */
  retryAfterMs?: bigint,
}
/**
 * A failed reconcile.
 */
export type ReconcileError = ReconcileErrorFenced | ReconcileErrorFailed;
/**
 * The guest saw `fenced`: it is no longer the leader and stops.
 */
export interface ReconcileErrorFenced {
  tag: 'fenced',
}
/**
 * Anything else. The host requeues the object with exponential
 * backoff, or after `retry-after-ms` when given.
 */
export interface ReconcileErrorFailed {
  tag: 'failed',
  val: Failure,
}
/**
 * Why the host calls `reconcile` for a key: for the guest's logs, and
 * to skip work that only one cause needs. It is a hint, never a
 * promise about the object: whatever the reason, read the object to
 * learn its state (it may have changed again, or been deleted, since
 * the cause was queued).
 * 
 * The host's work queue holds one entry per key. Causes that are due
 * together (a change that arrives while a resync has the key queued,
 * two timers for the same instant) make one reconcile, whose reason is
 * the strongest of them: `change`, then `related`, then `retry`, then
 * `requeue`, then `resync`. A change is work the guest has not seen
 * yet (of the object itself, then of an object related to it); a
 * retry repeats work that failed; a requeue is the guest's own timer;
 * a resync is the safety net. A timer (a `requeue-after`, or a failure's
 * retry) that is not due yet when something else makes the key run is
 * consumed by that run and is not its reason, as `outcome.requeue-after`
 * says: the reason is always a cause that was due.
 */
export type ReconcileReason = ReconcileReasonChange | ReconcileReasonRequeue | ReconcileReasonResync | ReconcileReasonRetry | ReconcileReasonRelated;
/**
 * The object itself was created, updated or deleted (by the API or
 * by any guest), as the change stream of its kind reported.
 */
export interface ReconcileReasonChange {
  tag: 'change',
}
/**
 * The guest's timer came due: an earlier reconcile of this key
 * returned `outcome.requeue-after`.
 */
export interface ReconcileReasonRequeue {
  tag: 'requeue',
}
/**
 * A full resync: at the start of every tenure, every
 * `resync-period-ms`, and after the host's work queue overflowed
 * (keys were dropped, so every watched object is queued again).
 */
export interface ReconcileReasonResync {
  tag: 'resync',
}
/**
 * The previous reconcile of this key failed (`reconcile-error.failed`)
 * and its backoff, or its `retry-after-ms`, has passed.
 */
export interface ReconcileReasonRetry {
  tag: 'retry',
}
/**
 * An object of another kind that relates to this one changed: a
 * change mapped to this key by one of `description.related` (an
 * object it owns, or one whose label names it, was created,
 * updated or deleted, or its owner or label moved to or away from
 * this key). Ranks just below `change`.
 */
export interface ReconcileReasonRelated {
  tag: 'related',
}
