import { CheckpointError } from "../errors.js";
import { crc32c } from "../format/crc32c.js";
import { crc32cCombine, crc32cCombiner } from "../format/crc32c-combine.js";
import { storedChecksums } from "../format/checksum-blocks.js";
import { type CheckpointMetadata, type ChunkMetadata, METADATA_FILE } from "../format/metadata.js";
import { type KeyPath, displayKey } from "../state/state-dict.js";

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

/** A key as an error names it: a key path is joined only then (a load of 100k tensors would join them all). */
export function keyText(key: string | KeyPath): string {
  return typeof key === "string" ? key : displayKey(key);
}

/**
 * Checks bytes of a chunk read from `start` (relative to the chunk, aligned to its `blockSize`)
 * against the chunk's block CRC32Cs. Throws `corrupt` naming the file, the key and the first damaged block.
 */
export function checkBlocks(
  chunk: ChunkMetadata,
  key: string | KeyPath,
  start: number,
  data: Uint8Array,
  sums?: ArrayLike<number>,
): void {
  const { blockSize } = chunk;
  // These blocks' sums, `stored[block - offset]`: of a lazily parsed chunk, only these are decoded.
  const firstBlock = start / blockSize;
  const blocks = Math.ceil(data.byteLength / blockSize);
  const { sums: stored, offset } = storedChecksums(chunk, firstBlock, firstBlock + blocks);
  // Many small blocks: one CRC32C over the run, checked against their sums combined; block by block only to name the damage.
  if (
    !sums &&
    blockSize < RUN_CHECK_BELOW &&
    data.byteLength > blockSize &&
    runMatches(stored, firstBlock - offset, blockSize, data)
  )
    return;
  for (let at = 0; at < data.byteLength; at += blockSize) {
    const block = (start + at) / blockSize;
    const end = Math.min(at + blockSize, data.byteLength);
    // `sums`: the blocks' CRC32Cs already computed (on a checksum worker, or by the adapter), one per block of `data`.
    if ((sums ? sums[at / blockSize] : crc32c(data.subarray(at, end))) !== stored[block - offset]) {
      const from = chunk.byteOffset + start + at;
      const name = keyText(key);
      throw new CheckpointError(
        "corrupt",
        `checksum mismatch in ${chunk.file} for ${name} (block ${block}, file bytes ${from}..${from + end - at}): the data file is damaged`,
        { context: { file: chunk.file, key: name } },
      );
    }
  }
}

/**
 * Blocks smaller than this are checked as one run: a CRC32C call costs about 0.12 µs on top of
 * its bytes with @cairn/crc32c-native, so 1 GiB took 190 ms of CPU in 1 KiB blocks, 95 in 16 KiB,
 * 75 in 64 KiB and 67 in 1 MiB (2026-11-27, load 14; 468 against 225 ms with @node-rs/crc32).
 */
const RUN_CHECK_BELOW = 64 * 1024;

const combiners = new Map<number, (crcA: number, crcB: number) => number>();

/**
 * Whether `data`'s CRC32C equals its blocks' stored CRC32Cs combined. Damage spread over several
 * blocks of the run then escapes only with the odds of one CRC32C (2⁻³²), as in a 1 MiB block.
 * `stored[first]` is the stored sum of `data`'s first block.
 */
function runMatches(stored: readonly number[], first: number, blockSize: number, data: Uint8Array): boolean {
  let combine = combiners.get(blockSize);
  if (!combine) combiners.set(blockSize, (combine = crc32cCombiner(blockSize)));
  const whole = Math.floor(data.byteLength / blockSize);
  let expected = stored[first];
  if (expected === undefined) return false;
  for (let i = 1; i < whole; i++) {
    const sum = stored[first + i];
    if (sum === undefined) return false;
    expected = combine(expected, sum);
  }
  const tail = data.byteLength - whole * blockSize;
  if (tail > 0) {
    const sum = stored[first + whole];
    if (sum === undefined) return false;
    expected = crc32cCombine(expected, sum, tail);
  }
  return crc32c(data) === expected;
}
