import { bytesToBase64 } from "#platform/format/byte-text.js";
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

/** Each base64 character's 6 bits, -1 for bytes outside the alphabet. */
const SEXTETS = (() => {
  const table = new Int8Array(256).fill(-1);
  for (let i = 0; i < ALPHABET.length; i++) table[ALPHABET.charCodeAt(i)] = i;
  return table;
})();

/** Whether `text` is base64 as Buffer writes it: whole groups of four of the alphabet, the last padded with at most two "=". */
export function isBase64(text: string): boolean {
  const length = text.length;
  if (length % 4 !== 0) return false;
  const pad = length > 0 && text.charCodeAt(length - 1) === 0x3d ? (text.charCodeAt(length - 2) === 0x3d ? 2 : 1) : 0;
  for (let i = 0; i < length - pad; i++) {
    const c = text.charCodeAt(i);
    if (c > 0xff || SEXTETS[c]! < 0) return false;
  }
  return true;
}

/**
 * The `count` CRC32Cs `encodeChecksums` stored, from the bytes of its base64 text (between the
 * quotes of metadata.json, no string made: `text[start, end)`), or undefined if they are not exactly
 * that: the length `count` needs, padded with at most two "=", every other byte of the base64 alphabet.
 */
export function decodeChecksums(
  text: Uint8Array,
  count: number,
  start = 0,
  end = text.byteLength,
): number[] | undefined {
  // Checked before decoding, so hostile text never allocates more than its count says.
  if (!checksumTextFits(text, count, start, end)) return undefined;
  const pad = end > start && text[end - 1] === 0x3d ? (text[end - 2] === 0x3d ? 2 : 1) : 0;
  const sums = new Array<number>(count);
  // Sixteen characters at a time (three sums); any byte outside the alphabet makes its group negative.
  let i = start;
  let bytes = 0;
  for (const S = SEXTETS; i + 16 <= end - pad; i += 16) {
    const g0 = (S[text[i]!]! << 18) | (S[text[i + 1]!]! << 12) | (S[text[i + 2]!]! << 6) | S[text[i + 3]!]!;
    const g1 = (S[text[i + 4]!]! << 18) | (S[text[i + 5]!]! << 12) | (S[text[i + 6]!]! << 6) | S[text[i + 7]!]!;
    const g2 = (S[text[i + 8]!]! << 18) | (S[text[i + 9]!]! << 12) | (S[text[i + 10]!]! << 6) | S[text[i + 11]!]!;
    const g3 = (S[text[i + 12]!]! << 18) | (S[text[i + 13]!]! << 12) | (S[text[i + 14]!]! << 6) | S[text[i + 15]!]!;
    if ((g0 | g1 | g2 | g3) < 0) return undefined;
    const k = bytes >>> 2;
    sums[k] = ((g0 >>> 16) | (((g0 >>> 8) & 0xff) << 8) | ((g0 & 0xff) << 16) | ((g1 >>> 16) << 24)) >>> 0;
    sums[k + 1] = (((g1 >>> 8) & 0xff) | ((g1 & 0xff) << 8) | ((g2 >>> 16) << 16) | (((g2 >>> 8) & 0xff) << 24)) >>> 0;
    sums[k + 2] = ((g2 & 0xff) | ((g3 >>> 16) << 8) | (((g3 >>> 8) & 0xff) << 16) | ((g3 & 0xff) << 24)) >>> 0;
    bytes += 12;
  }
  // The rest, and the padded last group, six bits at a time.
  let bits = 0;
  let pending = 0;
  let word = 0;
  for (; i < end - pad; i++) {
    const sextet = SEXTETS[text[i]!]!;
    if (sextet < 0) return undefined;
    pending = ((pending << 6) | sextet) & 0x3fff;
    bits += 6;
    if (bits < 8) continue;
    bits -= 8;
    // Little-endian: the first byte of each four is the lowest.
    word |= ((pending >>> bits) & 0xff) << (8 * (bytes & 3));
    if ((++bytes & 3) === 0) {
      sums[(bytes >>> 2) - 1] = word >>> 0;
      word = 0;
    }
  }
  return sums;
}

/** Whether base64 `text[start, end)` has the length of `count` CRC32Cs, padded as `encodeChecksums` pads them (its alphabet unchecked). */
export function checksumTextFits(text: Uint8Array, count: number, start = 0, end = text.byteLength): boolean {
  const length = end - start;
  if (length !== Math.ceil((count * 4) / 3) * 4) return false;
  const pad = length > 0 && text[end - 1] === 0x3d ? (text[end - 2] === 0x3d ? 2 : 1) : 0;
  return (length / 4) * 3 - pad === count * 4;
}

/** Chunks with at least this many CRC32Cs may decode them when first asked (`lazyChecksums`); fewer cost less than the deferral. */
export const LAZY_CHECKSUMS_MIN = 16;

/** A chunk's CRC32Cs kept as base64 (`lazyChecksums`), decoded when asked: all of them, or a run's. */
export interface LazyChecksums {
  /** Every sum, decoded at the first call and kept. */
  all(): readonly number[];
  /** Sums `first` to `end` (and a few around them): `sums[i - offset]` is sum i. Decoded at each call, not kept. */
  range(first: number, end: number): { readonly sums: readonly number[]; readonly offset: number };
}

/**
 * The `count` CRC32Cs of base64 `text` (whose length `checksumTextFits` accepted), decoded when
 * asked: a rank loading part of a checkpoint decodes only its chunks' sums, and a read only those
 * of the blocks it checks. Whatever is decoded is checked first: a call whose part of `text` is
 * not base64 throws `refused()`, so a forged string is refused before it is used.
 */
export function lazyChecksums(text: Uint8Array, count: number, refused: () => Error): LazyChecksums {
  let sums: readonly number[] | undefined;
  return {
    all() {
      if (sums) return sums;
      const decoded = decodeChecksums(text, count);
      if (!decoded) throw refused();
      return (sums = decoded);
    },
    range(first, end) {
      if (sums) return { sums, offset: 0 };
      // Whole groups of three sums (16 characters, padded only at the end) decode on their own.
      const from = Math.min(count, Math.max(0, Math.floor(first / 3) * 3));
      const to = Math.min(count, Math.max(from, Math.ceil(end / 3) * 3));
      if (to === from) return { sums: [], offset: from };
      const part = decodeChecksums(text, to - from, (from / 3) * 16, to === count ? text.byteLength : (to / 3) * 16);
      if (!part) throw refused();
      return { sums: part, offset: from };
    },
  };
}

const lazyChunks = new WeakMap<object, LazyChecksums>();

/** Records that `chunk`'s sums are `lazy`'s (its `crc32c` getter calls `lazy.all`), for `storedChecksums`. */
export function holdLazyChecksums(chunk: object, lazy: LazyChecksums): void {
  lazyChunks.set(chunk, lazy);
}

/**
 * The stored CRC32Cs of blocks `first` to `end` of a chunk: `sums[i - offset]` is block i's. Of a
 * chunk parsed with `lazyChecksums`, only those are decoded (each call anew), else its `crc32c`.
 */
export function storedChecksums(
  chunk: { readonly crc32c: readonly number[] },
  first: number,
  end: number,
): { readonly sums: readonly number[]; readonly offset: number } {
  return lazyChunks.get(chunk)?.range(first, end) ?? { sums: chunk.crc32c, offset: 0 };
}
