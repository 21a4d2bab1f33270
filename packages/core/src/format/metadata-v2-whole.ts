import { isDType, itemSize } from "../state/dtypes.js";
import { type KeyPath, isForbiddenKey } from "../state/state-dict.js";
import {
  LAZY_CHECKSUMS_MIN,
  type LazyChecksums,
  checksumTextFits,
  decodeChecksums,
  holdLazyChecksums,
  lazyChecksums,
} from "./checksum-blocks.js";
import { type JsonReader, closingQuote } from "./json-reader.js";
import type { ChunkMetadata, DataFileMetadata, TensorEntry } from "./metadata.js";
import { corrupt } from "./metadata-checks.js";
import type { SharedArrays } from "./shared-arrays.js";

/** What the general decoder of format 2.x entries knows while it reads them (metadata-v2-decode.ts). */
export interface EntryContext {
  readonly bytes: Uint8Array;
  readonly names: readonly string[];
  readonly files: Readonly<Record<string, DataFileMetadata>>;
  readonly defaultBlockSize: number;
  /** Every chunk's content hash, 32 hex digits each, if the metadata has them. */
  readonly hashes: string | undefined;
  readonly shapes: SharedArrays;
  /** Chunks of `LAZY_CHECKSUMS_MIN` sums or more decode them when first asked (`ParseOptions.lazyChecksums`). */
  readonly lazyChecksums: boolean;
  readonly where: string;
}

/**
 * The `count` CRC32Cs of a chunk of the entry `key` from the bytes of their base64 `bytes[start,
 * end)`: decoded now, or, given `lazyWhere` and many of them, a function decoding a copy of them
 * when first called (their length checked now, their alphabet then: `corrupt` naming the entry).
 * Undefined if they are not the base64 of `count` sums.
 */
export function chunkChecksums(
  bytes: Uint8Array,
  count: number,
  start: number,
  end: number,
  lazyWhere: string | undefined,
  key: KeyPath,
): readonly number[] | LazyChecksums | undefined {
  if (lazyWhere === undefined || count < LAZY_CHECKSUMS_MIN) return decodeChecksums(bytes, count, start, end);
  if (!checksumTextFits(bytes, count, start, end)) return undefined;
  return lazyChecksums(bytes.slice(start, end), count, () => badChecksums(lazyWhere, key.join(".")));
}

/** What a chunk whose checksums are not base64 of the count its sizes need is refused with. */
export function badChecksums(where: string, entry: string): Error {
  return corrupt(where, `entry ${entry} has a chunk whose checksums do not match its sizes`);
}

/**
 * A decoder of the entry almost every checkpoint is made of, straight from its bytes: a tensor of
 * one whole chunk with the default block size and name, as Cairn writes it (no whitespace, no
 * escapes, whole numbers): `["t",[shared,…key],"dtype",[…shape],[[file,byteOffset,"crc32c"]]]`.
 * It gives the entry the general decoder would, with every check it makes, and moves `reader`
 * past it; for anything else, or anything a check refuses, it gives undefined and leaves
 * `reader` where it was, so the general decoder reads the entry again and says what is wrong.
 */
export function wholeTensorDecoder(
  reader: JsonReader,
  context: EntryContext,
): (previous: KeyPath, chunkIndex: number) => TensorEntry | undefined {
  const { bytes, names, files, defaultBlockSize, hashes, shapes, where } = context;
  const end = Math.min(reader.end, bytes.byteLength);
  const parts: (string | number)[] = [];
  const dims: number[] = [];
  let at = 0;

  /** A count of at most 15 digits at `at`, moved past; -1 for anything else (a sign, a leading zero, too many digits). */
  function count(): number {
    const first = at;
    let value = 0;
    while (at < end) {
      const digit = bytes[at]! - 0x30;
      if (digit < 0 || digit > 9) break;
      value = value * 10 + digit;
      at++;
    }
    const digits = at - first;
    if (digits === 0 || digits > 15 || (digits > 1 && bytes[first] === 0x30)) return -1;
    return value;
  }

  /** A string of printable ASCII without escapes opening at `at`, moved past: its closing quote's position, or -1 (`at` unmoved). */
  function plain(): number {
    if (at >= end || bytes[at] !== 0x22) return -1;
    for (let i = at + 1; i < end; i++) {
      const c = bytes[i]!;
      if (c === 0x22) {
        at = i + 1;
        return i;
      }
      if (c < 0x20 || c > 0x7e || c === 0x5c) return -1;
    }
    return -1;
  }

  /** Whether the byte at `at` is `byte`, moved past it if so. */
  function skip(byte: number): boolean {
    if (at >= end || bytes[at] !== byte) return false;
    at++;
    return true;
  }

  return (previous, chunkIndex) => {
    const start = reader.position;
    at = start;
    // `["t",[`, the key's shared prefix, and its elements after that.
    if (!skip(0x5b) || !skip(0x22) || !skip(0x74) || !skip(0x22) || !skip(0x2c) || !skip(0x5b)) return undefined;
    const shared = count();
    if (shared < 0 || shared > previous.length) return undefined;
    let partCount = 0;
    while (skip(0x2c)) {
      const open = at;
      const close = plain();
      const element = close >= 0 ? reader.ascii(open + 1, close) : count();
      if (element === -1 || isForbiddenKey(element)) return undefined;
      parts[partCount++] = element;
    }
    if (shared + partCount === 0 || !skip(0x5d) || !skip(0x2c)) return undefined;
    // `"dtype",[…shape]`
    const dtypeOpen = at;
    const dtypeClose = plain();
    if (dtypeClose < 0) return undefined;
    const dtype = reader.ascii(dtypeOpen + 1, dtypeClose);
    if (!isDType(dtype) || !skip(0x2c) || !skip(0x5b)) return undefined;
    let dimCount = 0;
    let elements = 1;
    if (!skip(0x5d)) {
      do {
        const d = count();
        if (d < 0) return undefined;
        dims[dimCount++] = d;
        elements *= d;
      } while (skip(0x2c));
      if (!skip(0x5d)) return undefined;
    }
    // `,[[file,byteOffset,"crc32c"]]]`
    if (!skip(0x2c) || !skip(0x5b) || !skip(0x5b)) return undefined;
    const file = count();
    if (file < 0 || file >= names.length || !skip(0x2c)) return undefined;
    const byteOffset = count();
    if (byteOffset < 0 || !skip(0x2c)) return undefined;
    const sumsOpen = at;
    // Base64, each byte checked as it is decoded below.
    const sumsClose = at < end && bytes[at] === 0x22 ? closingQuote(bytes, at, end) : -1;
    if (sumsClose < 0) return undefined;
    at = sumsClose + 1;
    if (!skip(0x5d) || !skip(0x5d) || !skip(0x5d)) return undefined;
    // The checks of the general decoder and `checkChunks`, for one chunk that is the whole tensor.
    const byteLength = elements * itemSize(dtype);
    if (!Number.isSafeInteger(byteLength)) return undefined;
    const key = new Array<string | number>(shared + partCount);
    const crc32c = chunkChecksums(
      bytes,
      Math.ceil(byteLength / defaultBlockSize),
      sumsOpen + 1,
      sumsClose,
      context.lazyChecksums ? where : undefined,
      key,
    );
    if (!crc32c) return undefined;
    const fileName = names[file]!;
    const record = files[fileName]!;
    if (byteLength > 0 && (byteOffset < 8 + record.headerLength || byteOffset + byteLength > record.size))
      return undefined;
    const hashAt = 32 * chunkIndex;
    if (hashes !== undefined && hashAt >= hashes.length) return undefined;
    for (let i = 0; i < shared; i++) key[i] = previous[i]!;
    for (let i = 0; i < partCount; i++) key[shared + i] = parts[i]!;
    const shape = shapes.shared(dims, dimCount);
    const offsets = shapes.zeros(shape.length);
    const tensorName = key.join(".");
    const hash = hashes === undefined ? undefined : hashes.slice(hashAt, hashAt + 32);
    const chunk = chunkRecord(
      offsets,
      shape,
      fileName,
      tensorName,
      byteOffset,
      byteLength,
      defaultBlockSize,
      crc32c,
      hash,
    );
    reader.seek(at);
    return { kind: "tensor", key, dtype, shape, chunks: [chunk] };
  };
}

/**
 * A decoded chunk, its fields always in this order (one object shape for every chunk read); with
 * `LazyChecksums`, the chunk's `crc32c` is an own getter decoding them all (`lazyChecksums`).
 */
export function chunkRecord(
  offsets: readonly number[],
  sizes: readonly number[],
  file: string,
  tensorName: string,
  byteOffset: number,
  byteLength: number,
  blockSize: number,
  crc32c: readonly number[] | LazyChecksums,
  hash: string | undefined,
): ChunkMetadata {
  if (!Array.isArray(crc32c)) {
    const lazy = crc32c as LazyChecksums;
    const chunk = {
      ...{ offsets, sizes, file, tensorName, byteOffset, byteLength, blockSize },
      get crc32c() {
        return lazy.all();
      },
    };
    holdLazyChecksums(chunk, lazy);
    return hash === undefined ? chunk : Object.assign(chunk, { hash });
  }
  return hash === undefined
    ? { offsets, sizes, file, tensorName, byteOffset, byteLength, blockSize, crc32c }
    : { offsets, sizes, file, tensorName, byteOffset, byteLength, blockSize, crc32c, hash };
}
