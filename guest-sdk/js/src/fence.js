/**
 * The tenure's fence and idempotency keys.
 *
 * @module
 */

import { currentHost } from './host.js';

/**
 * The lease this guest runs under: cluster, lease, epoch and holder.
 * `epoch` strictly increases with each new tenure of the lease.
 */
export class Fence {
  /**
   * @param {string} cluster the cluster the lease belongs to
   * @param {string} lease the lease name (the controller's name)
   * @param {number} epoch the fencing epoch of this tenure
   * @param {string} holder the replica holding the lease
   */
  constructor(cluster, lease, epoch, holder) {
    /** @type {string} */
    this.cluster = cluster;
    /** @type {string} */
    this.lease = lease;
    /** @type {number} */
    this.epoch = epoch;
    /** @type {string} */
    this.holder = holder;
    Object.freeze(this);
  }

  /**
   * A key naming `action` in this tenure: `cluster/lease/epoch/action`.
   *
   * Different in every tenure: use it for effects each tenure may make
   * once. For an effect that must happen once whoever leads, use
   * `IdempotencyKey.forAction`, which leaves the epoch out.
   *
   * @param {string} action
   * @returns {string}
   */
  idempotencyKey(action) {
    return `${this.cluster}/${this.lease}/${this.epoch}/${action}`;
  }

  /** @returns {string} */
  toString() {
    return `lease ${this.cluster}/${this.lease} epoch ${this.epoch} holder ${this.holder}`;
  }
}

/**
 * The current fence, from the host.
 *
 * @returns {Fence}
 */
export function fence() {
  return currentHost().fence();
}

/**
 * Percent-encode everything but ASCII letters, digits and `-._~`
 * (upper-case hex of each UTF-8 byte), as the Rust SDK does.
 *
 * @param {string} field
 * @returns {string}
 */
function escape(field) {
  let out = '';
  for (const byte of new TextEncoder().encode(field)) {
    const c = String.fromCharCode(byte);
    out += /[A-Za-z0-9\-._~]/.test(c) ? c : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/**
 * A key naming one action on one version of one object.
 *
 * Stable across tenures and processes: built from the object's kind, name
 * and version and the action's name only, never the epoch. The form
 * `<kind>/<name>@<version>/<action>` (fields percent-encoded except ASCII
 * letters, digits and `-._~`) is the Rust SDK's, part of the contract.
 */
export class IdempotencyKey {
  /** @param {string} value the key's text */
  constructor(value) {
    /** The key's text. @type {string} */
    this.value = value;
    Object.freeze(this);
  }

  /**
   * The key of `action` decided on version `version` of `kind/name`.
   *
   * @param {string} kind
   * @param {string} name
   * @param {number} version
   * @param {string} action
   * @returns {IdempotencyKey}
   */
  static forAction(kind, name, version, action) {
    return new IdempotencyKey(`${escape(kind)}/${escape(name)}@${version}/${escape(action)}`);
  }

  /** @returns {string} */
  toString() {
    return this.value;
  }
}
