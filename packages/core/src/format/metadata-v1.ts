import { type DType, byteSize, isDType } from "../state/dtypes.js";
import type { KeyPath } from "../state/state-dict.js";
import type { ChunkMetadata, DataFileMetadata, EntryMetadata } from "./metadata.js";
import {
  checkChunks,
  checkFile,
  checkKey,
  corrupt,
  isCount,
  isCounts,
  isKeyElement,
  isRecord,
  isSpecial,
  isStoredValue,
} from "./metadata-checks.js";
import { isDataFileName } from "./naming.js";

/** Reads the files and entries of a format 1.x `metadata.json` (objects with long field names, one block size). */
export function decodeV1(
  raw: Record<string, unknown>,
  blockSize: number,
  where: string,
): { files: Record<string, DataFileMetadata>; entries: EntryMetadata[] } {
  if (!isRecord(raw.files)) throw corrupt(where, "files must be an object");
  // Null prototype: file names come from storage and index this object.
  const files = Object.create(null) as Record<string, DataFileMetadata>;
  for (const [name, file] of Object.entries(raw.files)) {
    if (!isDataFileName(name)) throw corrupt(where, `file name ${JSON.stringify(name)} is not a plain file name`);
    if (
      !isRecord(file) ||
      !isCount(file.size) ||
      !isCount(file.headerLength) ||
      !isCount(file.headerCrc32c) ||
      !isCount(file.rank)
    ) {
      throw corrupt(where, `file ${JSON.stringify(name)} needs rank, size, headerLength and headerCrc32c`);
    }
    const record: DataFileMetadata = {
      rank: file.rank,
      size: file.size,
      headerLength: file.headerLength,
      headerCrc32c: file.headerCrc32c,
    };
    checkFile(name, record, where);
    files[name] = record;
  }
  if (!Array.isArray(raw.entries)) throw corrupt(where, "entries must be an array");
  const entries = (raw.entries as unknown[]).map((entry) => decodeEntry(entry, files, blockSize, where));
  return { files, entries };
}

function decodeEntry(
  entry: unknown,
  files: Record<string, DataFileMetadata>,
  blockSize: number,
  where: string,
): EntryMetadata {
  if (!isRecord(entry) || !Array.isArray(entry.key) || !entry.key.every(isKeyElement)) {
    throw corrupt(where, `entry ${JSON.stringify(entry)?.slice(0, 200)} has no valid key path`);
  }
  const key = entry.key as KeyPath;
  checkKey(key, where);
  const name = key.join(".");
  if (entry.kind === "value") {
    if (entry.special !== undefined) {
      if (!isSpecial(entry.special))
        throw corrupt(where, `value ${name} must hold a JSON primitive, {} or [], or a special number`);
      return { kind: "value", key, special: entry.special };
    }
    if (!isStoredValue(entry.value))
      throw corrupt(where, `value ${name} must hold a JSON primitive, {} or [], or a special number`);
    return { kind: "value", key, value: (entry.value ?? null) as never };
  }
  if (entry.kind !== "tensor" && entry.kind !== "bytes")
    throw corrupt(where, `entry ${name} has unknown kind ${JSON.stringify(entry.kind)}`);
  if (entry.kind === "tensor" && (!isDType(entry.dtype) || !isCounts(entry.shape)))
    throw corrupt(where, `tensor ${name} needs a known dtype and a shape`);
  if (entry.kind === "bytes" && !isCount(entry.byteLength)) throw corrupt(where, `bytes ${name} needs a byteLength`);
  if (!Array.isArray(entry.chunks)) throw corrupt(where, `entry ${name} needs chunks`);
  const dtype: DType = entry.kind === "tensor" ? (entry.dtype as DType) : "uint8";
  const shape = entry.kind === "tensor" ? (entry.shape as number[]) : [entry.byteLength as number];
  const chunks = (entry.chunks as unknown[]).map((chunk): ChunkMetadata => {
    if (
      !isRecord(chunk) ||
      !isCounts(chunk.offsets) ||
      !isCounts(chunk.sizes) ||
      typeof chunk.file !== "string" ||
      !Object.hasOwn(files, chunk.file) ||
      !isCount(chunk.byteOffset) ||
      !isCount(chunk.byteLength) ||
      !isCounts(chunk.crc32c)
    ) {
      throw corrupt(where, `entry ${name} has a malformed chunk`);
    }
    if (
      chunk.byteLength !== byteSize(dtype, chunk.sizes) ||
      chunk.crc32c.length !== Math.ceil(chunk.byteLength / blockSize)
    )
      throw corrupt(where, `entry ${name} has a chunk whose byte length or checksums do not match its sizes`);
    const tensorName = typeof chunk.tensorName === "string" ? chunk.tensorName : "";
    return {
      offsets: chunk.offsets,
      sizes: chunk.sizes,
      file: chunk.file,
      tensorName,
      byteOffset: chunk.byteOffset,
      byteLength: chunk.byteLength,
      blockSize,
      crc32c: chunk.crc32c,
    };
  });
  checkChunks(key, dtype, shape, chunks, files, where);
  return entry.kind === "tensor"
    ? { kind: "tensor", key, dtype, shape, chunks }
    : { kind: "bytes", key, byteLength: shape[0]!, chunks };
}
