import { CheckpointError } from "../errors.js";
import { crc32c } from "../format/crc32c.js";
import { type CheckpointMetadata, type ChunkMetadata, METADATA_FILE } from "../format/metadata.js";

/** A data file's size in storage, or null if it is missing, as `StorageAdapter.stat` says. */
export type SizeFn = (file: string) => Promise<number | null>;

/** Throws `corrupt` unless the data file has the size `metadata.json` records. */
export async function checkFileSize(file: string, metadata: CheckpointMetadata, sizeOf: SizeFn): Promise<void> {
  const expected = metadata.files[file]!.size;
  const size = await sizeOf(file);
  if (size === expected) return;
  const problem =
    size === null
      ? "is missing"
      : `holds ${size} bytes but ${METADATA_FILE} says ${expected}: it was truncated or extended`;
  throw new CheckpointError("corrupt", `${file} ${problem}; the data file is damaged`, { context: { file } });
}

/** Checks a data file's first bytes (at least its header, or fewer if the file is that short) against the header's CRC32C. */
export function checkHeader(file: string, metadata: CheckpointMetadata, bytes: Uint8Array): void {
  const info = metadata.files[file]!;
  const header = bytes.subarray(0, 8 + info.headerLength);
  if (header.byteLength < 8 + info.headerLength || crc32c(header) !== info.headerCrc32c) {
    throw new CheckpointError(
      "corrupt",
      `${file}: its safetensors header does not match the checksum in ${METADATA_FILE}; the file is damaged`,
      {
        context: { file },
      },
    );
  }
}

/**
 * Checks bytes of a chunk read from `start` (relative to the chunk, aligned to its `blockSize`)
 * against the chunk's block CRC32Cs. Throws `corrupt` naming the file, the key and the first damaged block.
 */
export function checkBlocks(
  chunk: ChunkMetadata,
  key: string,
  start: number,
  data: Uint8Array,
  sums?: ArrayLike<number>,
): void {
  const { blockSize } = chunk;
  for (let at = 0; at < data.byteLength; at += blockSize) {
    const block = (start + at) / blockSize;
    const end = Math.min(at + blockSize, data.byteLength);
    // `sums`: the blocks' CRC32Cs already computed (on a checksum worker, or by the adapter), one per block of `data`.
    if ((sums ? sums[at / blockSize] : crc32c(data.subarray(at, end))) !== chunk.crc32c[block]) {
      const from = chunk.byteOffset + start + at;
      throw new CheckpointError(
        "corrupt",
        `checksum mismatch in ${chunk.file} for ${key} (block ${block}, file bytes ${from}..${from + end - at}): the data file is damaged`,
        { context: { file: chunk.file, key } },
      );
    }
  }
}
