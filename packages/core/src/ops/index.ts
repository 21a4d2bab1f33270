export { type CheckpointReaderOptions, CheckpointReader } from "./checkpoint-reader.js";
export { type ReplacedCheckpoint, checkpointDestination, commitCheckpoint } from "./commit-checkpoint.js";
export { type CopyOptions, type CopyResult, copyCheckpoint } from "./copy-checkpoint.js";
export { type DeletedCheckpoint, deleteCheckpoint } from "./delete-checkpoint.js";
export { refuseInsideSource } from "./destination-inside-source.js";
export { type ExportOptions, exportSafetensors } from "./export-safetensors.js";
export {
  type LayoutCandidate,
  type LayoutExportOptions,
  type LayoutExportResult,
  type LayoutName,
  type LayoutNaming,
  DEFAULT_MAX_SHARD_BYTES,
  exportSafetensorsLayout,
} from "./export-safetensors-layout.js";
export { CAIRN_METADATA_KEY, type ExportedLayout } from "../format/exported-layout.js";
export { importSafetensors, layoutEntries } from "./import-safetensors.js";
export { type SafetensorsFile, readSafetensorsHeader } from "../load/safetensors-file.js";
export { type LaidOutTensor, type SafetensorsLayout, readSafetensorsLayout } from "../load/safetensors-layout.js";
export { type ReusableCheckpoint, type ReusedFile, reusableFiles } from "./reuse-files.js";
export { type SiblingReferences, siblingReferences } from "./files-in-use.js";
export { type CheckpointDiff, type DiffOptions, type EntryDiff, diffCheckpoints } from "./diff-checkpoints.js";
export { selectEntries } from "./select-entries.js";
export {
  type Histogram,
  type StatsOptions,
  type TensorStats,
  binEdge,
  checkpointStats,
  tensorStats,
} from "./tensor-stats.js";
export {
  type CheckpointBytes,
  type CheckpointSummary,
  type InspectedEntry,
  checkpointBytes,
  dataBytes,
  inspectCheckpoint,
} from "./inspect-checkpoint.js";
export { permuteDims, rangeBoxes } from "./row-major.js";
export { type EntrySource, type SourceTensor, tensorPieces } from "./source-tensor.js";
export { checkKeyPath, forbiddenKeyReason, parseStoredJson } from "../format/stored-keys.js";
export {
  type Damage,
  type VerifyOptions,
  type VerifyReport,
  verifyCheckpoint,
  throwIfDamaged,
} from "./verify-checkpoint.js";
export { type WriteCheckpointOptions, type WrittenCheckpoint, writeCheckpoint } from "./write-checkpoint.js";
