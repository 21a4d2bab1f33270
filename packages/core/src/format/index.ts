// @cairn/core/format: the bytes on disk (docs/format.md): metadata.json, safetensors headers,
// CRC32C, file and tensor names, dtypes and chunk geometry, for tools that read checkpoints.
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
} from "../state/dtypes.js";
export { FLOAT_DTYPES, convertFloats, isFloatDType } from "../state/float-convert.js";
export { type KeyPath, displayKey, isForbiddenKey, pathId } from "../state/state-dict.js";
export { type Box, type RowLayout, intersectBoxes, rowLayout, rowSpan, copyRows } from "../state/box.js";
export {
  type Crc32cImplementation,
  CRC32C_IMPLEMENTATION,
  CRC32C_WORKER_MODULE,
  type ReadBlockChecksums,
  readBlockChecksums,
  type AdviseHugePages,
  adviseHugePages,
  type ReadThrough,
  readThrough,
  crc32c,
  blockChecksums,
} from "./crc32c.js";
export { CRC32C_JS_SOURCE, CRC32C_TABLES_SOURCE } from "./crc32c-js.js";
export { CRC32C_WASM_BYTES, CRC32C_WASM_SOURCE } from "./crc32c-wasm.js";
export {
  layoutSafetensors,
  uniqueTensorNames,
  parseSafetensorsHeader,
  type SafetensorsTensor,
  type SafetensorsLayout,
  type ParsedSafetensorsHeader,
} from "./safetensors.js";
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
  FORMAT_MINOR_SHARED,
  FORMAT_MINOR_HASHED,
  CONTENT_HASH_ALGORITHM,
  DEFAULT_BLOCK_SIZE,
  valueOf,
  sharesFiles,
  isReferencedFile,
  ownFiles,
  referencedFiles,
  formatVersionOf,
  hasContentHashes,
} from "./metadata.js";
export { type Xxh128, type Xxh128Stream, loadXxh128 } from "#platform/format/xxh128.js";
export { checkpointFingerprint } from "./fingerprint.js";
export { type ParseOptions, parseMetadata, encodeMetadata } from "./metadata-json.js";
export {
  type SafetensorsIndex,
  SAFETENSORS_INDEX_FILE,
  SAFETENSORS_SINGLE_FILE,
  encodeSafetensorsIndex,
  isSafetensorsLayoutFile,
  parseSafetensorsIndex,
  shardFileName,
} from "./safetensors-index.js";
export { chunkBlockSize, MIN_BLOCK_SIZE } from "./checksum-blocks.js";
export { base64ToBytes, bytesToBase64 } from "#platform/format/byte-text.js";
export { dataFileName, dataFilePath, isDataFileName, isFileOfAttempt, newAttemptId, tensorName } from "./naming.js";
