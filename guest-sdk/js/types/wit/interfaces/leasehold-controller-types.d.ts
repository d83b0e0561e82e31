/** @module Interface leasehold:controller/types@0.4.0 **/
/**
 * An object's address.
 */
export interface ObjectKey {
  /**
   * The object's kind.
   */
  kind: string,
  /**
   * The object's name.
   */
  name: string,
}
/**
 * What an object carries beside its value and status. Rules (checked
 * by the host; a breach is `store-error.invalid`):
 * - at most 32 labels; a label key is 1 to 128 ASCII letters, digits,
 *   `-`, `_`, `.` or `/`, beginning and ending with a letter or digit
 *   (`app`, `example.com/team`); a label value is empty, or 1 to 63
 *   ASCII letters, digits, `-`, `_` or `.`, beginning and ending with
 *   a letter or digit;
 * - at most 16 distinct finalizers, each spelled like a label key;
 * - an owner is another object of the same cluster. A write that
 *   gives an object an owner it did not have needs that owner to
 *   exist and not be marked for deletion (or to be created by the
 *   same commit), else `conflict` naming the written object.
 */
export interface Metadata {
  /**
   * Labels as `(key, value)` pairs, in key order when read; each key
   * at most once.
   */
  labels: Array<[string, string]>,
  /**
   * The object that owns this one: the first delete request of the
   * owner is a delete request of this object too, in the same commit
   * (removed, or marked if it has finalizers), transitively; at most
   * 1000 objects per commit, beyond which the deleting commit is
   * refused (`invalid`) and writes nothing.
   */
  owner?: ObjectKey,
  /**
   * Names of the parties that must act before the object is
   * removed: while any remain, a delete request only marks it
   * (`object.deleting-since`), and the write that removes the last
   * one removes the object.
   */
  finalizers: Array<string>,
}
/**
 * A stored object. Objects are addressed by `(kind, name)` inside the
 * controller's cluster.
 * 
 * `kind` and `name` are 1 to 63 characters of lowercase ASCII letters,
 * digits and `-`, starting and ending with a letter or digit (a DNS
 * label). `value` is JSON text (an object, array or scalar), at most
 * the host's configured value size (256 KiB by default).
 */
export interface Object {
  /**
   * The object's kind, e.g. `tasks`.
   */
  kind: string,
  /**
   * The object's name, unique within its kind.
   */
  name: string,
  /**
   * The store revision that last wrote this object. Versions only
   * grow, are never reused (not even after a delete and re-create),
   * and are the precondition for conditional updates and deletes.
   */
  version: bigint,
  /**
   * The object's value as JSON text: the spec, what users write.
   */
  value: string,
  /**
   * Labels, owner and finalizers (see `metadata`).
   */
  metadata: Metadata,
  /**
   * The status part as JSON text, written only by status writes
   * (`store.op.status`, or a user's status write through the API);
   * none until the first, or after one that cleared it. A status
   * write changes `version` but never `generation`, and never
   * conflicts with a write of the value unless it asks to.
   */
  status?: string,
  /**
   * 1 at creation; grows by one with each write that changes the
   * value or the metadata (a deletion mark included), never with a
   * status write. A controller records the generation it acted on
   * (`store.op.status` with `expected-generation`) to tell whether
   * its status is about the current spec.
   */
  generation: bigint,
  /**
   * When a delete was requested while finalizers remained, in
   * milliseconds since the Unix epoch (UTC, the store's clock); none
   * if the object is not marked for deletion. A marked object stays
   * readable with its last value and can still be written (value,
   * status, fewer finalizers, never more); the write that leaves it
   * without finalizers removes it.
   */
  deletingSince?: bigint,
}
