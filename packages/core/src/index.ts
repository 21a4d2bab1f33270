export { CheckpointError, isCheckpointError, cancelledError, throwIfAborted, type CheckpointErrorCode, type CheckpointErrorContext } from "./errors.js";
export {
  type DType,
  type DTypeArrays,
  type TypedArray,
  DTYPE_NAMES,
  isDType,
  itemSize,
  byteSize,
  numel,
  numpyDType,
  safetensorsDType,
  bytesOf,
} from "./state/dtypes.js";
export {
  type KeyPath,
  type JsonPrimitive,
  type Stateful,
  type StateValue,
  type StateDict,
  displayKey,
  isForbiddenKey,
  pathId,
} from "./state/state-dict.js";
export { type HostTensor, type TensorLike, type VariableLike, hostTensor } from "./state/tensors.js";
export { type Shard, type ShardedTensor, shardedTensor, isShardedTensor } from "./state/sharded-tensor.js";
export { type Leaf, type TensorSource, type ShardPlacement, leafBox, flattenStateDict, tensorBytes, isTensorLike, isStateful } from "./state/flatten.js";
export { crc32c, blockChecksums } from "./format/crc32c.js";
export { layoutSafetensors, uniqueTensorNames, parseSafetensorsHeader, type SafetensorsTensor, type SafetensorsLayout, type ParsedSafetensorsHeader } from "./format/safetensors.js";
export {
  type CheckpointMetadata,
  type EntryMetadata,
  type TensorEntry,
  type BytesEntry,
  type ValueEntry,
  type ChunkMetadata,
  type DataFileMetadata,
  METADATA_FILE,
  FORMAT_NAME,
  FORMAT_MAJOR,
  FORMAT_MINOR,
  DEFAULT_BLOCK_SIZE,
  parseMetadata,
  encodeMetadata,
  valueOf,
} from "./format/metadata.js";
export { dataFileName, isDataFileName, isFileOfAttempt, tensorName } from "./format/naming.js";
export { type Box, type RowLayout, intersectBoxes, rowLayout, rowSpan, copyRows } from "./state/box.js";
export { type Layout, layoutBoxes, splitUneven } from "./state/layouts.js";
export {
  type StorageAdapter,
  type PortableStorage,
  type ObjectInfo,
  type ByteRange,
  type WriteBody,
  type WriteOptions,
  type ReadOptions,
  joinPath,
  checkRelativePath,
  notFound,
  alreadyExists,
} from "./storage/storage-adapter.js";
export { ReadTarget, splitHead } from "./storage/read-target.js";
export { type StorageFactory, type StorageOptions, registerStorage, registeredProtocols, knownProtocols, checkStorageUrl, openStorage, storageUrl, redactUrl } from "./storage/storage-registry.js";
export { type ProgressDeadline, type ProgressDeadlineOptions, DEFAULT_PROGRESS_TIMEOUT_MS, progressDeadline, touching } from "./storage/progress-deadline.js";
export { type RetryPolicy, type RetryOptions, DEFAULT_RETRY_POLICY, TRANSIENT_NETWORK_CODES, withRetry, isTransient, sleep } from "./storage/retry.js";
export { type ProcessGroup, type CoordinatedProcessGroup, SingleProcessGroup, isCoordinated } from "./process-group.js";
export { type CheckpointOptions, type OpenedCheckpoint, openCheckpoint } from "./storage/checkpoint-location.js";
export { type SavePlanner, type SavePlan, type WriteItem, type PlannedValue, type DataFilePlan, type GlobalSavePlan, type GlobalPlanContext } from "./plan/save-planner.js";
export { DefaultSavePlanner } from "./plan/default-save-planner.js";
export { type LoadPlanner, type LoadPlan, type LoadRequest, type ReadItem } from "./plan/load-planner.js";
export { DefaultLoadPlanner } from "./plan/default-load-planner.js";
export { type SaveOptions, type SaveResult, checkSaveOptions } from "./save/save-options.js";
export { save } from "./save/save.js";
export { commitMetadata } from "./save/commit-metadata.js";
export { type LoadOptions, type LoadResult, load, readMetadata } from "./load/load.js";
export { type TfjsModule, tfjsModule } from "./load/tfjs.js";
export { type AsyncSaveOptions, type AsyncSaveHandle, type StagedInfo, asyncSave } from "./background/async-save.js";
export { startUploadWorker } from "./background/upload-thread.js";
export { type StagingStrategy, type StagingPoolOptions, type StagedLeaves, StagingPool, stageLeaves } from "./stage/staging.js";
export { pageAlignedAvailable, pageAlignedSharedBytes } from "./stage/page-aligned.js";
