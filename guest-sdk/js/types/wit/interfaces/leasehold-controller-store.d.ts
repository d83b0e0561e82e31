/** @module Interface leasehold:controller/store@0.4.0 **/
/**
 * Read one object; none if it does not exist.
 * 
 * Freshness: the answer is never older than the newest change of the
 * object that this controller's reconciles were woken for so far, nor
 * than any version of it this instance has read or written. When that
 * newest change is this tenure's own commit, the host may answer from
 * what the commit wrote, without asking the database: exactly what a
 * read at that point of the change stream gives. A change committed
 * since then wakes the controller again. Conditional writes still
 * refuse a version that is no longer current (`conflict`), and the
 * read after a refused commit asks the database.
 */
export function get(kind: string, name: string): Object | undefined;
/**
 * List the objects of a kind in name order, starting after the name
 * `after` (exclusive). At most `limit` objects are returned; the host
 * caps `limit` at its configured page size (500 by default).
 */
export function list(kind: string, after: string | undefined, limit: number): ObjectPage;
/**
 * List the objects of a kind that `selector` selects, in name order,
 * starting after the name `after` (exclusive); paged as `list`: pass
 * the page's `next` as `after` with the same selector. At most `limit`
 * objects are returned (capped as in `list`). Served by indexes on
 * PostgreSQL.
 */
export function listSelected(kind: string, selector: Selector, after: string | undefined, limit: number): ObjectPage;
/**
 * Apply `ops` and append `events` atomically, fenced by this tenure's
 * lease. At most 128 operations (by default) per commit.
 */
export function commit(ops: Array<Op>, events: Array<NewEvent>): Committed;
export type Object = import('./leasehold-controller-types.js').Object;
export type ObjectKey = import('./leasehold-controller-types.js').ObjectKey;
export type Metadata = import('./leasehold-controller-types.js').Metadata;
/**
 * Why a store call failed.
 */
export type StoreError = StoreErrorFenced | StoreErrorConflict | StoreErrorNotFound | StoreErrorInvalid | StoreErrorUnavailable;
/**
 * The lease this guest runs under is no longer current. Nothing was
 * written. The guest must stop: it is no longer the leader, and the
 * host is about to tear it down.
 */
export interface StoreErrorFenced {
  tag: 'fenced',
  val: string,
}
/**
 * A precondition failed (the object exists on create, its version
 * differs on update, replace, delete or check, its generation
 * differs on a status write at an expected generation, or an owner
 * named in metadata is absent or marked for deletion). Nothing was
 * written. Re-read and decide again.
 */
export interface StoreErrorConflict {
  tag: 'conflict',
  val: ObjectKey,
}
/**
 * The object named in an update, replace, delete or status write
 * does not exist. Nothing was written.
 */
export interface StoreErrorNotFound {
  tag: 'not-found',
  val: ObjectKey,
}
/**
 * The request itself is wrong: a bad kind or name, a value that is
 * not JSON, too many operations, a payload over the size limit.
 * The message says which.
 */
export interface StoreErrorInvalid {
  tag: 'invalid',
  val: string,
}
/**
 * The backend could not be reached or failed. Whether a commit that
 * returns this was applied is unknown; make the next attempt
 * idempotent (re-read first).
 */
export interface StoreErrorUnavailable {
  tag: 'unavailable',
  val: string,
}
/**
 * Create `kind/name` with `value` (JSON text).
 */
export interface CreateOp {
  /**
   * Kind of the new object.
   */
  kind: string,
  /**
   * Name of the new object.
   */
  name: string,
  /**
   * JSON text of the new object's value.
   */
  value: string,
}
/**
 * Replace the value of `kind/name` if its version equals `expected-version`.
 */
export interface UpdateOp {
  /**
   * Kind of the object.
   */
  kind: string,
  /**
   * Name of the object.
   */
  name: string,
  /**
   * The version the guest read; the update fails with `conflict` otherwise.
   */
  expectedVersion: bigint,
  /**
   * JSON text of the new value.
   */
  value: string,
}
/**
 * Delete `kind/name` if its version equals `expected-version`.
 */
export interface DeleteOp {
  /**
   * Kind of the object.
   */
  kind: string,
  /**
   * Name of the object.
   */
  name: string,
  /**
   * The version the guest read; the delete fails with `conflict` otherwise.
   */
  expectedVersion: bigint,
}
/**
 * Create `kind/name` with `value` (JSON text) and `metadata`. Fails
 * with `conflict` if it exists, or if the owner it names does not
 * exist or is marked for deletion.
 */
export interface CreateWithOp {
  /**
   * Kind of the new object.
   */
  kind: string,
  /**
   * Name of the new object.
   */
  name: string,
  /**
   * JSON text of the new object's value.
   */
  value: string,
  /**
   * Its labels, owner and finalizers.
   */
  metadata: Metadata,
}
/**
 * Replace the value, the metadata or both of `kind/name` if its
 * version equals `expected-version` (`conflict` otherwise, `not-found`
 * if absent). A part left out is kept; at least one must be given.
 * Metadata given replaces all of it (labels, owner and finalizers).
 * On an object marked for deletion finalizers can be removed, not
 * added (`invalid`), and leaving it none removes it.
 */
export interface ReplaceOp {
  /**
   * Kind of the object.
   */
  kind: string,
  /**
   * Name of the object.
   */
  name: string,
  /**
   * The version the guest read.
   */
  expectedVersion: bigint,
  /**
   * JSON text of the new value, or none to keep it.
   */
  value?: string,
  /**
   * The new metadata, or none to keep it.
   */
  metadata?: Metadata,
}
/**
 * Write the status part of `kind/name`, keeping its value, metadata
 * and generation (`not-found` if absent). With `expected-generation`
 * the write fails with `conflict` unless the object is still at that
 * generation: "this status is about the spec I read". Without it, the
 * write applies whatever the object's version. It takes a new
 * version, so a later `update`, `replace` or `delete` based on an
 * earlier read conflicts.
 */
export interface StatusOp {
  /**
   * Kind of the object.
   */
  kind: string,
  /**
   * Name of the object.
   */
  name: string,
  /**
   * The generation the status was computed from, if it must still be
   * current.
   */
  expectedGeneration?: bigint,
  /**
   * JSON text of the new status (same rules and size limit as a
   * value), or none to clear it.
   */
  status?: string,
}
/**
 * Require `kind/name` to be at `expected-version` when the commit
 * applies, writing nothing; 0 requires it to be absent. Otherwise the
 * whole commit fails with `conflict` naming it. An object may appear
 * in one operation per commit, checks included.
 */
export interface CheckOp {
  /**
   * Kind of the object.
   */
  kind: string,
  /**
   * Name of the object.
   */
  name: string,
  /**
   * The version it must be at (a version the guest read), or 0 for
   * "must not exist".
   */
  expectedVersion: bigint,
}
/**
 * One write inside a commit. All the operations of one commit apply
 * together or not at all.
 */
export type Op = OpCreate | OpUpdate | OpDelete | OpCreateWith | OpReplace | OpStatus | OpCheck;
/**
 * Create an object that must not exist yet.
 */
export interface OpCreate {
  tag: 'create',
  val: CreateOp,
}
/**
 * Replace an object's value if its version is still the expected one.
 */
export interface OpUpdate {
  tag: 'update',
  val: UpdateOp,
}
/**
 * Request the deletion of an object if its version is still the
 * expected one. An object without finalizers is removed; one with
 * finalizers is marked (`object.deleting-since`) and stays until
 * its last finalizer is removed; one already marked is left as it
 * is. The first delete request of an object also requests the
 * deletion of every object it owns (`metadata.owner`).
 */
export interface OpDelete {
  tag: 'delete',
  val: DeleteOp,
}
/**
 * Create an object that must not exist yet, with metadata.
 */
export interface OpCreateWith {
  tag: 'create-with',
  val: CreateWithOp,
}
/**
 * Replace an object's value, its metadata or both if its version
 * is still the expected one. `update` keeps the metadata.
 */
export interface OpReplace {
  tag: 'replace',
  val: ReplaceOp,
}
/**
 * Write only an object's status part.
 */
export interface OpStatus {
  tag: 'status',
  val: StatusOp,
}
/**
 * Write nothing: the whole commit fails with `conflict` unless the
 * object is at the expected version. Lets a commit depend on an
 * object it does not change.
 */
export interface OpCheck {
  tag: 'check',
  val: CheckOp,
}
/**
 * An event to append to the cluster's event log with a commit.
 */
export interface NewEvent {
  /**
   * Kind of the object the event is about.
   */
  kind: string,
  /**
   * Name of the object the event is about.
   */
  name: string,
  /**
   * A short machine-readable reason in PascalCase, e.g. `Assigned`.
   */
  reason: string,
  /**
   * A human-readable message.
   */
  message: string,
}
/**
 * What a successful commit produced.
 */
export interface Committed {
  /**
   * The store revision of this commit: the new version of every object
   * the commit created or updated.
   */
  revision: bigint,
  /**
   * The sequence numbers of the appended events, in the order given.
   */
  eventSeqs: BigUint64Array,
}
/**
 * One page of a listing.
 */
export interface ObjectPage {
  /**
   * Objects in name order.
   */
  objects: Array<Object>,
  /**
   * The name to pass as `after` for the next page; none at the end.
   */
  next?: string,
}
/**
 * Which objects `list-selected` returns: those that carry every label
 * given, each with exactly the value given (an empty value matches a
 * label set to the empty string, not an absent one), and whose value
 * contains `contains`. The empty selector (no labels, no `contains`)
 * selects every object of the kind.
 * 
 * Containment follows PostgreSQL's `jsonb @>` on both backends: an
 * object contains an object if it has each of its keys with a value
 * that contains the given one; an array contains an array if each
 * element given is contained in some element of it; scalars contain
 * equal scalars (numbers by value: `1` equals `1.0`), never across
 * types; and at the top level only, an array contains a scalar it has
 * as an element (`["a", "b"]` contains `"a"`).
 * 
 * Bounds (else `invalid`): at most 32 labels, of the syntax of
 * `metadata.labels`, each key once; `contains` JSON text of at most
 * 4096 bytes once compact, nested at most 16 arrays or objects deep.
 */
export interface Selector {
  /**
   * Labels the object must carry, as `(key, value)` pairs.
   */
  labels: Array<[string, string]>,
  /**
   * JSON text the object's value must contain; none places no
   * condition on the value.
   */
  contains?: string,
}
