/** @module Interface leasehold:controller/tenure@0.2.0 **/
/**
 * The current fence.
 */
export function current(): Fence;
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
