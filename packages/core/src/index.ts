// @cairn/core: save, load and what a training script or a package built on core needs.
// Adapter authors: @cairn/core/storage; format readers: @cairn/core/format; tools: @cairn/core/ops.
export {
  CheckpointError,
  isCheckpointError,
  isCheckpointErrorCode,
  isGone,
  isDamaged,
  isUnusable,
  isStorageFailure,
  isInterrupted,
  isPermanent,
  isTransient,
  describeValue,
  type CheckpointErrorCode,
  type CheckpointErrorContext,
} from "./errors.js";
export { type DType, type DTypeArrays, type TypedArray, DTYPE_NAMES, isDType } from "./state/dtypes.js";
export {
  type KeyPath,
  type JsonPrimitive,
  type Stateful,
  type StateValue,
  type StateDict,
  displayKey,
} from "./state/state-dict.js";
export { bfloat16ToNumber, elementValues, float16ToNumber } from "./state/element-values.js";
export { type HostTensor, type TensorLike, type VariableLike, hostTensor } from "./state/tensors.js";
export { type Shard, type ShardedTensor, shardedTensor, isShardedTensor } from "./state/sharded-tensor.js";
export { flattenStateDict, isTensorLike, isStateful } from "./state/flatten.js";
export { type Leaf, type TensorSource, type ShardPlacement, type StagedPlace } from "./state/leaf.js";
export { type Layout, layoutBoxes, splitUneven } from "./state/layouts.js";
export { type CheckpointMetadata } from "./format/metadata.js";
export {
  type StorageAdapter,
  type StorageOptions,
  type CheckpointOptions,
  type RetryPolicy,
  knownProtocols,
  checkStorageUrl,
  openStorage,
  registerStorage,
  storageUrl,
} from "./storage/index.js";
export { type ProcessGroup, type CoordinatedProcessGroup, SingleProcessGroup, isCoordinated } from "./process-group.js";
export {
  type RankOutcome,
  type RankFailure,
  rankFailure,
  failureOf,
  firstFailedRank,
  agreeAcrossRanks,
} from "./rank-outcome.js";
export {
  type SavePlanner,
  type SavePlan,
  type WriteItem,
  type PlannedValue,
  type DataFilePlan,
  type GlobalSavePlan,
  type GlobalPlanContext,
} from "./plan/save-planner.js";
export { DefaultSavePlanner, type DefaultSavePlannerOptions } from "./plan/default-save-planner.js";
export { type LoadPlanner, type LoadPlan, type LoadRequest, type ReadItem } from "./plan/load-planner.js";
export { DefaultLoadPlanner } from "./plan/default-load-planner.js";
export { type SaveOptions, type SaveResult, DEFAULT_SAVE_CONCURRENCY, checkSaveOptions } from "./save/save-options.js";
export { save } from "./save/save.js";
export { type LoadOptions, type LoadResult, load } from "./load/load.js";
export { readMetadata } from "./load/read-metadata.js";
export { type TfjsModule, registerTfjs, tfjsModule } from "./load/tfjs.js";
export {
  type AsyncSaveOptions,
  type AsyncSaveHandle,
  type StagedInfo,
  asyncSave,
  prepareAsyncSave,
} from "./background/async-save.js";
export { startUploadWorker, uploadWorkerReady } from "#platform/background/upload-thread.js";
export { RUNTIME, emitWarning, unrefTimer, yieldToEventLoop } from "#platform/runtime.js";
export { type StagedLeaves } from "./stage/staging.js";
export { type StagingStrategy } from "./stage/staging-plan.js";
export { type StagingPoolOptions, StagingPool } from "./stage/staging-pool.js";
