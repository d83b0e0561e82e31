/**
 * `finalizer()`: hold an object with a finalizer while it lives, and
 * clean up before it goes, in one call (kube-rs's `finalizer()` helper,
 * for Leasehold's store).
 *
 * Owns: the four cases of an object and a finalizer (add it, apply, clean
 * up then remove it, nothing) and the commits that add and remove it,
 * each conditional on the version read. Must never: remove the finalizer
 * when the cleanup failed, or write anything for an object that is being
 * deleted without this finalizer.
 *
 * @module
 */

import { Outcome } from './controller.js';
import { Invalid } from './errors.js';
import { StoredObject } from './objects.js';
import { Transaction } from './transaction.js';

/**
 * What `finalizer` calls.
 *
 * @template [T=any]
 * @typedef {object} FinalizerSteps
 * @property {(obj: StoredObject<T>) => (Outcome | void)} apply bring a live object to its
 *   desired state; it carries the finalizer
 * @property {(obj: StoredObject<T>, removal: Transaction) => (Outcome | void)} cleanup undo
 *   what `apply` did outside the object (at an external service, in other objects), for an
 *   object marked for deletion; `removal` is the transaction that removes the finalizer once
 *   cleanup returns, for it to add events (or writes of other objects) to that same commit
 */

/**
 * Run `apply` or `cleanup` for `obj` under the finalizer `name`, keeping
 * the finalizer on the object as long as cleanup has work to do:
 *
 * - **live, without the finalizer**: add it, in a commit conditional on
 *   the version read, then call `apply` with the object as written (its
 *   new version, the finalizer, and the generation the metadata change
 *   gave it: one more);
 * - **live, with the finalizer**: `apply(obj)`;
 * - **marked for deletion, with the finalizer**: `cleanup(obj, removal)`,
 *   then, only if cleanup returned (did not throw), commit `removal`,
 *   which removes the finalizer conditional on the version read (the
 *   object goes with its last finalizer);
 * - **marked for deletion, without the finalizer**: nothing (another
 *   party's finalizer holds it).
 *
 * Returns what `apply` or `cleanup` returned (`Outcome.done()` if
 * nothing). Errors propagate: a `Conflict` when the object changed since
 * it was read (re-read and call again, e.g. in `retryOnConflict`),
 * `Fenced` (stop), and whatever `apply` or `cleanup` threw. A cleanup that
 * is not finished yet throws (e.g. `new Failed('still deleting', 5_000)`
 * to look again in five seconds): returning means done. Cleanup must not
 * write `obj` itself, neither in a commit of its own (that changes its
 * version, and the removal would conflict) nor in `removal` (refused as
 * `Invalid` before anything is sent: the removal is the commit's
 * operation on it); put its events, and writes of other objects, into
 * `removal`.
 *
 * Both may run again for the same state of the object (after a lost
 * reply, a conflict, a new tenure), so their effects must be idempotent.
 * For a request to an external service, key it with
 * `IdempotencyKey.forAction(kind, name, obj.generation, action)`: the
 * **generation**, not the version. A status write (`Pending`, before the
 * request) changes the version but not the generation, so a key from the
 * version would differ on the retry and the receiver would apply the
 * effect twice; the generation changes only with the spec (and once when
 * the object is marked for deletion), so a cleanup retried after a lost
 * reply sends the same key too. (A generation starts at 1 again in an
 * object made again under the same name: `IdempotencyKey` says how to
 * tell the two apart.)
 *
 * @template [T=any]
 * @param {StoredObject<T>} obj the object as read
 * @param {string} name the finalizer, e.g. `example.com/bucket`
 * @param {FinalizerSteps<T>} steps
 * @returns {Outcome}
 */
export function finalizer(obj, name, { apply, cleanup }) {
  if (obj.isDeleting) {
    if (!obj.hasFinalizer(name)) return Outcome.done();
    const removal = new Transaction().removeFinalizer(obj, name);
    const outcome = cleanup(obj, removal);
    const key = obj.key;
    if (removal.ops.filter((op) => op.key.equals(key)).length > 1) {
      throw new Invalid(
        `the cleanup of ${key} writes ${key} itself; the commit that removes its finalizer ${name} is the one ` +
          'operation on it',
      );
    }
    removal.commit();
    return outcome ?? Outcome.done();
  }
  if (obj.hasFinalizer(name)) return apply(obj) ?? Outcome.done();
  const metadata = obj.metadata.finalizer(name);
  const committed = new Transaction().setMetadata(obj, metadata).commit();
  // Adding a finalizer changes the metadata: the store gives the object
  // the commit's revision as its version and one more generation.
  const written = new StoredObject(
    obj.kind,
    obj.name,
    committed.revision,
    obj.value,
    metadata,
    obj.status,
    obj.generation + 1,
    null,
  );
  return apply(written) ?? Outcome.done();
}
