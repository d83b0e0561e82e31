/**
 * Leasehold's guest SDK for JavaScript: write a controller, test it with the fake host.
 *
 * A controller extends `Controller` (`describe`, `reconcile`), reads with
 * `Api` / `Context.typed`, writes with `Transaction`, holds its objects
 * with `finalizer`, reports with conditions (`setCondition`) and typed
 * events (`EventType`), calls external services with `http` (fenced
 * outbound HTTP), learns which objects are its own from `shard()` when it
 * runs sharded, and is tested natively against `FakeHost`
 * (`leasehold/fake`). Inside a component,
 * `exportController` (`leasehold/component`) connects it to the WIT world
 * `leasehold:controller/controller@0.4.0`. See guest-sdk/README.md.
 *
 * @module
 */

export { now, untilMs } from './clock.js';
export {
  Condition,
  ConditionStatus,
  formatTime,
  getCondition,
  parseTime,
  removeCondition,
  setCondition,
} from './conditions.js';
export {
  Context,
  Controller,
  Description,
  Outcome,
  Reason,
  RelatedWatch,
  Reply,
  Retry,
  dispatch,
  strongest,
} from './controller.js';
export {
  Conflict,
  DecodeError,
  Failed,
  Fenced,
  Invalid,
  LeaseholdError,
  NotFound,
  QUOTA_EXCEEDED_PREFIX,
  QuotaExceeded,
  SettingsError,
  StoreError,
  TooMany,
  Unavailable,
} from './errors.js';
export { Fence, IdempotencyKey, fence } from './fence.js';
export { finalizer } from './finalizer.js';
export * as http from './http.js';
export { Metadata, ObjectKey, Selector } from './keys.js';
export { Level, debug, error, info, log, trace, warn } from './log.js';
export { Api, Kind, StoredObject, decodeRaw } from './objects.js';
export { DEFAULT_CONFLICT_ATTEMPTS, retryOnConflict } from './retry.js';
export { SettingsReader, settings, settingsJson } from './settings.js';
export { Shard, fnv1a64, shard } from './shard.js';
export {
  Check,
  Committed,
  Create,
  CreateWith,
  Delete,
  EventType,
  NewEvent,
  Replace,
  Status,
  Transaction,
  Update,
  decodeEventMessage,
  encodeEventMessage,
} from './transaction.js';
export * as limits from './limits.js';
