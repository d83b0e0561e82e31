/** @module Interface leasehold:controller/tenure@0.4.0 **/
/**
 * The current fence.
 */
export function current(): Fence;
/**
 * The shard this tenure runs. Fixed for the life of the instance:
 * a controller's shard count changes only by removing it and adding
 * it back.
 */
export function shard(): ShardInfo;
/**
 * The fence every write of this guest is stamped with. It cannot be
 * changed by the guest. Use `epoch` for idempotency keys: it strictly
 * increases with each new tenure of the lease.
 */
export interface Fence {
  /**
   * The cluster the lease belongs to.
   */
  cluster: string,
  /**
   * The lease name (the controller's name).
   */
  lease: string,
  /**
   * The fencing epoch of this tenure.
   */
  epoch: bigint,
  /**
   * The replica holding the lease.
   */
  holder: string,
}
/**
 * Which part of its controller's objects this tenure runs.
 * 
 * A controller whose config entry sets `shards = N` runs as N leases,
 * `NAME-0` to `NAME-(N-1)`, each with its own tenures, epochs and
 * guest instance: shard `index` of `count`. Every object belongs to
 * exactly one shard: by default the one FNV-1a 64 of `kind/name`
 * (the UTF-8 bytes of kind, `/`, name) modulo `count` picks, or, for
 * an object carrying the label `description.shard-label` names, the
 * one FNV-1a 64 of that label's value modulo `count` picks. A shard's
 * instance is woken for, and resyncs, only its own objects (and every
 * object of the kinds in `description.every-shard`); its writes are
 * fenced by its own lease. A write to another shard's object must be
 * conditional: a `store.op.status` without an expected generation on
 * it is refused whole with `invalid` (and, under a shard label, every
 * `status` without one is, since the label the host would judge by
 * is the object's, not the op's). An unsharded controller runs shard 0
 * of 1, which owns every object.
 */
export interface ShardInfo {
  /**
   * This tenure's shard, from 0 to `count - 1`.
   */
  index: number,
  /**
   * How many shards the controller runs as (1 to 64).
   */
  count: number,
}
