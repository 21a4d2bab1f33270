// @cairn/core/storage: what a storage adapter is built from: the interface, the registry, errors
// and their codes, the retry policy, progress deadlines, and page-aligned memory for direct I/O.
export {
  CheckpointError,
  isCheckpointError,
  cancelledError,
  throwIfAborted,
  describeValue,
  isTransient,
  isGone,
  isDamaged,
  isUnusable,
  isStorageFailure,
  isInterrupted,
  isPermanent,
  isCheckpointErrorCode,
  type CheckpointErrorCode,
  type CheckpointErrorContext,
} from "../errors.js";
export {
  type StorageAdapter,
  type PortableStorage,
  type ObjectInfo,
  type ObjectReader,
  type ByteRange,
  type WriteBody,
  type WriteOptions,
  type DeleteOptions,
  type KnownCrc32c,
  type ReadOptions,
  type BlockChecksumRequest,
  joinPath,
  checkRelativePath,
  notFound,
  alreadyExists,
  TEMP_OBJECT_PREFIX,
} from "./storage-adapter.js";
export { ReadTarget, splitHead } from "./read-target.js";
export { type StorageOperation, errnoCode } from "./errno-codes.js";
export { type ContentRange, parseContentRange } from "./content-range.js";
export { ByteBudget } from "./byte-budget.js";
export { prefetched } from "./prefetch.js";
export { importOptional } from "#platform/storage/import-optional.js";
export { invalidUrl, refuseQueryAndFragment, urlNames } from "./url-names.js";
export {
  type StorageFactory,
  type StorageOptions,
  registerStorage,
  registeredProtocols,
  knownProtocols,
  checkStorageUrl,
  openStorage,
  storageUrl,
  redactUrl,
} from "./storage-registry.js";
export {
  type ProgressDeadline,
  type ProgressDeadlineOptions,
  DEFAULT_PROGRESS_TIMEOUT_MS,
  progressDeadline,
  touching,
} from "./progress-deadline.js";
export { MAX_TIMER_MS, checkDuration, longTimer } from "./timers.js";
export {
  type RetryPolicy,
  type RetryOptions,
  type BackoffPolicy,
  type Jitter,
  DEFAULT_RETRY_POLICY,
  backoffDelay,
  TRANSIENT_NETWORK_CODES,
  withRetry,
  exhausted,
  sleep,
} from "./retry.js";
export {
  type CheckpointOptions,
  type OpenedCheckpoint,
  openCheckpoint,
  splitLastSegment,
} from "./checkpoint-location.js";
export { pageAlignedAvailable, pageAlignedSharedBytes } from "./page-aligned.js";
export { giveBackReusableMemory, takeReusableMemory } from "./reusable-memory.js";
