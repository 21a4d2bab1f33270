import { base64ToBytes, bytesToBase64 } from "#platform/format/byte-text.js";
import { type DType, itemSize } from "../state/dtypes.js";

/** The smallest checksum block a writer picks: below it, checksums cost more metadata than they save in reads. */
export const MIN_BLOCK_SIZE = 1024;

/** Blocks per row of a chunk: a reader taking a column slice reads at most about 2/16 of a row more than it needs. */
const BLOCKS_PER_ROW = 16;

/** Blocks per 1-D chunk: a reader taking a slice of it reads at most two blocks more than it needs. */
const BLOCKS_PER_VECTOR = 64;

/**
 * The checksum block size of a chunk, chosen from its row size (the bytes of one step of its
 * first dimension): small enough that a reader slicing its columns reads little more than it
 * needs, never below `MIN_BLOCK_SIZE`, never above `maxBlockSize`; always a power of two.
 */
export function chunkBlockSize(dtype: DType, sizes: readonly number[], maxBlockSize: number): number {
  let rowBytes = itemSize(dtype);
  for (let d = 1; d < sizes.length; d++) rowBytes *= sizes[d]!;
  const wanted = sizes.length >= 2 ? rowBytes / BLOCKS_PER_ROW : (rowBytes * (sizes[0] ?? 1)) / BLOCKS_PER_VECTOR;
  let block = MIN_BLOCK_SIZE;
  while (block * 2 <= wanted && block * 2 <= maxBlockSize) block *= 2;
  return Math.min(block, maxBlockSize);
}

/** CRC32Cs as `metadata.json` 2.x stores them: their little-endian uint32 bytes, base64-encoded. */
export function encodeChecksums(sums: ArrayLike<number>): string {
  // One checksum (every chunk of at most one block) in JS: a Buffer per chunk costs more than the bytes.
  if (sums.length === 1) return base64Uint32LE(sums[0]!);
  const bytes = new Uint8Array(sums.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < sums.length; i++) view.setUint32(i * 4, sums[i]!, true);
  return bytesToBase64(bytes);
}

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** The base64 of one uint32's four little-endian bytes, as Buffer would write it. */
function base64Uint32LE(sum: number): string {
  const b0 = sum & 0xff;
  const b1 = (sum >>> 8) & 0xff;
  const b2 = (sum >>> 16) & 0xff;
  const b3 = sum >>> 24;
  return (
    ALPHABET[b0 >> 2]! +
    ALPHABET[((b0 & 3) << 4) | (b1 >> 4)]! +
    ALPHABET[((b1 & 15) << 2) | (b2 >> 6)]! +
    ALPHABET[b2 & 63]! +
    ALPHABET[b3 >> 2]! +
    ALPHABET[(b3 & 3) << 4]! +
    "=="
  );
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** The `count` CRC32Cs `encodeChecksums` stored in `text`, or undefined if it is not exactly that. */
export function decodeChecksums(text: string, count: number): number[] | undefined {
  // Checked before decoding, so a hostile string never allocates more than its count says.
  if (text.length !== Math.ceil((count * 4) / 3) * 4 || !BASE64.test(text)) return undefined;
  const bytes = base64ToBytes(text);
  if (bytes.byteLength !== count * 4) return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const sums = new Array<number>(count);
  for (let i = 0; i < count; i++) sums[i] = view.getUint32(i * 4, true);
  return sums;
}
