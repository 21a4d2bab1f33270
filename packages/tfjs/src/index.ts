// @cairn/tfjs owns what Cairn knows about tfjs: model+optimizer state dicts, checkpointed fit/fitDataset runs
// with their data position and seeds, cairnIO and its cairn+ URLs, model files.
// It may import @cairn/core (and its ops), @cairn/manager, @cairn/storage-local and, as types or lazily, the user's tfjs.
export { getStateDict, setStateDict, primeOptimizer } from "./state-dict.js";
export { FitCheckpoint, cairnCheckpoint } from "./fit-checkpoint.js";
export { type FitCheckpointOptions, type BestOptions } from "./fit-options.js";
export { type SaveEvery } from "./fit-callback.js";
export {
  type DataIterator,
  type DatasetLike,
  type SeekableDataset,
  type DataPosition,
  DataCursor,
} from "./data-cursor.js";
export {
  type TensorsLike,
  type TensorBatch,
  type TensorBatches,
  type TensorBatchesOptions,
  tensorBatches,
} from "./tensor-batches.js";
export { SeededRandom, derivedSeed } from "./seeded-random.js";
export { type CairnIOOptions, cairnIO } from "./cairn-io.js";
export { MODEL_FILE, WEIGHTS_FILE, tfjsModelEntries, writeTfjsModel } from "./model-files.js";
export { type TfjsModelInfo, WEIGHTS_KEY, USER_KEY } from "./model-layout.js";
export { ROUTER_PREFIX, registerCairnRouters } from "./io-router.js";
export { torchStyleNames } from "./torch-names.js";
