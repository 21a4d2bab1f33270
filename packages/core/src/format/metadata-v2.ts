import { CheckpointError } from "../errors.js";
import { type KeyPath, displayKey } from "../state/state-dict.js";
import { encodeChecksums } from "./checksum-blocks.js";
import { type ChunkMetadata, type DataFileMetadata, type EntryMetadata, CONTENT_HASH_ALGORITHM } from "./metadata.js";
import { tensorName } from "./naming.js";
import { JsonBytes } from "./json-bytes.js";

/**
 * Format 2.x's compact `files` and `entries` (docs/format.md): files are a table that chunks
 * index by position; an entry is an array whose key path shares a counted prefix with the
 * previous entry's; a chunk covering its whole tensor with the default block and name is
 * `[file, byteOffset, crc32c]`, others add offsets, sizes, block size and name. Read by
 * metadata-v2-decode.ts.
 */

/**
 * Writes `"files":[…],"entries":[…]` of format 2.x into `out` directly (an array per entry and chunk,
 * then JSON.stringify, costs more): the bytes JSON.stringify of those arrays gives.
 */
export function writeV2(
  out: JsonBytes,
  files: Readonly<Record<string, DataFileMetadata>>,
  entries: readonly EntryMetadata[],
  defaultBlockSize: number,
  /**
   * Every chunk's hash as bytes, in order (`encodeMetadata`'s `contentHashes`): used instead of
   * each chunk's `hash`, which need not be there (a save keeps its hashes as bytes).
   */
  given?: Uint8Array,
): void {
  const names = Object.keys(files);
  const index = new Map<string, number>();
  out.text('"files":[');
  for (let i = 0; i < names.length; i++) {
    const name = names[i]!;
    const { rank, size, headerLength, headerCrc32c, dir } = files[name]!;
    index.set(name, i);
    out.text(
      (i > 0 ? "," : "") +
        JSON.stringify(
          dir === undefined
            ? { name, rank, size, headerLength, headerCrc32c }
            : { name, rank, size, headerLength, headerCrc32c, dir },
        ),
    );
  }
  out.text('],"entries":[');
  /** Every chunk's content hash in order, as bytes, while every chunk has one (format 2.2). */
  let hashes: Uint8Array | undefined = given ?? new Uint8Array(16 * entries.length);
  let hashCount = 0;
  /** The first hash that is not 32 hex digits: refused if every chunk has a hash. */
  let badHash: string | undefined;
  /** Adds a chunk's hash to the table; the table as it is now (undefined once a chunk has none). */
  const addHash = (hash: string | undefined): Uint8Array | undefined => {
    if (given) {
      hashCount++;
      return given;
    }
    if (hash === undefined || !hashes) return undefined;
    let table: Uint8Array = hashes;
    if (16 * hashCount === table.length) {
      table = new Uint8Array(2 * table.length + 16);
      table.set(hashes);
    }
    if (!hexDigestInto(hash, table, 16 * hashCount++)) badHash ??= hash;
    return table;
  };
  let previous: KeyPath = NO_KEY;
  /** Entries encoded here from frozen inputs, kept (`encodedEntries`) once their bytes are copied out. */
  const toKeep: ToKeep[] = [];
  for (let e = 0; e < entries.length; e++) {
    const entry = entries[e]!;
    const key = entry.key;
    if (e > 0) out.byte(0x2c);
    const chunked = entry.kind !== "value" && entry.chunks.length === 1 ? entry : undefined;
    const only = chunked?.chunks[0];
    const file = only && index.get(only.file);
    const kept = only && encodedEntries.get(key);
    if (
      kept &&
      chunked &&
      only &&
      file !== undefined &&
      sameEncoding(kept, previous, chunked, only, file, defaultBlockSize)
    ) {
      out.rawRange(kept.bytes, kept.start, kept.crc);
      writeCrc32c(out, only.crc32c);
      out.rawRange(kept.bytes, kept.afterCrc, kept.end);
      hashes = addHash(only.hash);
      previous = key;
      continue;
    }
    const start = out.length;
    let crc = -1;
    let afterCrc = -1;
    let shared = 0;
    while (shared < previous.length && shared < key.length - 1 && previous[shared] === key[shared]) shared++;
    const before = previous;
    previous = key;
    out.raw(
      entry.kind === "tensor"
        ? OPEN_TENSOR
        : entry.kind === "bytes"
          ? OPEN_BYTES
          : entry.special !== undefined
            ? OPEN_SPECIAL
            : OPEN_VALUE,
    );
    out.integer(shared);
    for (let k = shared; k < key.length; k++) {
      out.byte(0x2c);
      const element = key[k]!;
      if (typeof element === "string") out.string(element);
      else out.number(element);
    }
    out.byte(0x5d);
    out.byte(0x2c);
    if (entry.kind === "value") {
      out.text(entry.special !== undefined ? JSON.stringify(entry.special) : JSON.stringify(entry.value ?? null));
      out.byte(0x5d);
      continue;
    }
    if (entry.kind === "tensor") {
      out.string(entry.dtype);
      out.byte(0x2c);
      numbers(out, entry.shape);
    } else {
      out.number(entry.byteLength);
    }
    out.byte(0x2c);
    out.byte(0x5b);
    const shape = entry.kind === "tensor" ? entry.shape : [entry.byteLength];
    for (let c = 0; c < entry.chunks.length; c++) {
      const chunk = entry.chunks[c]!;
      const file = index.get(chunk.file);
      if (file === undefined)
        throw new CheckpointError(
          "invalid_argument",
          `a chunk of ${key.join(".")} is in ${chunk.file}, which the metadata's files do not list`,
        );
      const fields = chunkFields(chunk, key, shape, defaultBlockSize);
      hashes = addHash(chunk.hash);
      if (c > 0) out.byte(0x2c);
      out.byte(0x5b);
      out.integer(file);
      out.byte(0x2c);
      out.number(chunk.byteOffset);
      out.byte(0x2c);
      crc = out.length;
      writeCrc32c(out, chunk.crc32c);
      afterCrc = out.length;
      if (fields >= 5) {
        out.byte(0x2c);
        numbers(out, chunk.offsets);
        out.byte(0x2c);
        numbers(out, chunk.sizes);
      }
      if (fields >= 6) {
        out.byte(0x2c);
        out.number(chunk.blockSize);
      }
      if (fields === 7) {
        out.byte(0x2c);
        out.string(chunk.tensorName);
      }
      out.byte(0x5d);
    }
    out.byte(0x5d);
    out.byte(0x5d);
    if (chunked && only && file !== undefined && isFrozenEncoding(before, chunked, only))
      toKeep.push({ previous: before, entry: chunked, chunk: only, file, start, crc, afterCrc, end: out.length });
  }
  out.byte(0x5d);
  keepEncodings(out, toKeep, defaultBlockSize);
  if (given && hashes && 16 * hashCount !== given.length)
    throw new CheckpointError(
      "invalid_argument",
      `the content hashes given hold ${given.length / 16} hashes for ${hashCount} chunks`,
    );
  if (hashes && hashCount > 0) {
    if (badHash !== undefined)
      throw new CheckpointError("invalid_argument", `a chunk's content hash is not 32 hex digits (${badHash})`);
    out.raw(OPEN_CONTENT_HASHES);
    out.base64(hashes, 16 * hashCount);
    out.text('"}');
  }
}

function writeCrc32c(out: JsonBytes, sums: readonly number[]): void {
  if (sums.length === 1) out.base64Uint32LE(sums[0]!);
  else out.string(encodeChecksums(sums));
}

/**
 * What an entry of one chunk was encoded from, and where its bytes are: all but its CRC32C
 * (`bytes[start, crc)`, then `bytes[afterCrc, end)`). A save of the same structure meets the same
 * frozen key, shape and box arrays (the plan cache's), so it copies these bytes instead of
 * encoding the key, shape, place and fields again; its checksums and hash are written anew.
 */
class EncodedEntry {
  readonly key: KeyPath;
  readonly previous: KeyPath;
  readonly kind: "tensor" | "bytes";
  readonly dtype: string | undefined;
  readonly shape: readonly number[] | undefined;
  readonly entryBytes: number;
  readonly file: number;
  readonly byteOffset: number;
  readonly offsets: readonly number[];
  readonly sizes: readonly number[];
  readonly byteLength: number;
  readonly blockSize: number;
  readonly tensorName: string;
  readonly defaultBlockSize: number;

  constructor(
    previous: KeyPath,
    entry: ChunkedEntry,
    chunk: ChunkMetadata,
    file: number,
    defaultBlockSize: number,
    readonly bytes: Uint8Array,
    readonly start: number,
    readonly crc: number,
    readonly afterCrc: number,
    readonly end: number,
  ) {
    this.key = entry.key;
    this.previous = previous;
    this.kind = entry.kind;
    this.dtype = entry.kind === "tensor" ? entry.dtype : undefined;
    this.shape = entry.kind === "tensor" ? entry.shape : undefined;
    this.entryBytes = entry.kind === "bytes" ? entry.byteLength : -1;
    this.file = file;
    this.byteOffset = chunk.byteOffset;
    this.offsets = chunk.offsets;
    this.sizes = chunk.sizes;
    this.byteLength = chunk.byteLength;
    this.blockSize = chunk.blockSize;
    this.tensorName = chunk.tensorName;
    this.defaultBlockSize = defaultBlockSize;
  }
}

/** An entry encoded in this call from frozen inputs, and where its bytes are in the output. */
interface ToKeep {
  readonly previous: KeyPath;
  readonly entry: ChunkedEntry;
  readonly chunk: ChunkMetadata;
  readonly file: number;
  readonly start: number;
  readonly crc: number;
  readonly afterCrc: number;
  readonly end: number;
}

/** By the entry's key array; only frozen arrays (whose content cannot change) are kept or compared. */
const encodedEntries = new WeakMap<KeyPath, EncodedEntry>();
const NO_KEY: KeyPath = Object.freeze([]);

type ChunkedEntry = Exclude<EntryMetadata, { kind: "value" }>;

/** Whether every array the entry's encoding rests on is frozen (the previous key's too): then the same arrays mean the same content. */
function isFrozenEncoding(previous: KeyPath, entry: ChunkedEntry, chunk: ChunkMetadata): boolean {
  return (
    Object.isFrozen(previous) &&
    Object.isFrozen(entry.key) &&
    (entry.kind !== "tensor" || Object.isFrozen(entry.shape)) &&
    Object.isFrozen(chunk.offsets) &&
    Object.isFrozen(chunk.sizes)
  );
}

/** Whether an entry would be encoded exactly as `kept` was, checksums aside: the same arrays (frozen) and the same values. */
function sameEncoding(
  kept: EncodedEntry,
  previous: KeyPath,
  entry: ChunkedEntry,
  chunk: ChunkMetadata,
  file: number,
  defaultBlockSize: number,
): boolean {
  return (
    kept.previous === previous &&
    kept.kind === entry.kind &&
    (entry.kind === "tensor"
      ? kept.dtype === entry.dtype && kept.shape === entry.shape
      : kept.entryBytes === entry.byteLength) &&
    kept.file === file &&
    kept.byteOffset === chunk.byteOffset &&
    kept.offsets === chunk.offsets &&
    kept.sizes === chunk.sizes &&
    kept.byteLength === chunk.byteLength &&
    kept.blockSize === chunk.blockSize &&
    kept.tensorName === chunk.tensorName &&
    kept.defaultBlockSize === defaultBlockSize
  );
}

/** Copies the bytes of the entries just encoded from frozen inputs out of `out`, once for all, and keeps them by key. */
function keepEncodings(out: JsonBytes, toKeep: readonly ToKeep[], defaultBlockSize: number): void {
  if (toKeep.length === 0) return;
  const from = toKeep[0]!.start;
  const bytes = out.view(from).slice(0, toKeep[toKeep.length - 1]!.end - from);
  for (const k of toKeep) {
    const kept = new EncodedEntry(
      k.previous,
      k.entry,
      k.chunk,
      k.file,
      defaultBlockSize,
      bytes,
      k.start - from,
      k.crc - from,
      k.afterCrc - from,
      k.end - from,
    );
    encodedEntries.set(kept.key, kept);
  }
}

/** Each character code's hex digit value (either case), 255 for any other below 128. */
const HEX_VALUE = Uint8Array.from({ length: 128 }, (_, c) => {
  const digit = "0123456789abcdef".indexOf(String.fromCharCode(c).toLowerCase());
  return digit < 0 ? 255 : digit;
});

/** Writes a 32-hex-digit digest's 16 bytes into `bytes` at `at`; false (bytes left partly written) if it is not one. */
function hexDigestInto(hex: string, bytes: Uint8Array, at: number): boolean {
  if (hex.length !== 32) return false;
  for (let i = 0; i < 16; i++) {
    const high = HEX_VALUE[hex.charCodeAt(2 * i)] ?? 255;
    const low = HEX_VALUE[hex.charCodeAt(2 * i + 1)] ?? 255;
    if ((high | low) > 15) return false;
    bytes[at + i] = (high << 4) | low;
  }
  return true;
}

/** An entry's opening by kind, up to its key's shared prefix length: `["t",[`. */
const OPEN_TENSOR = JsonBytes.encoded('["t",[');
const OPEN_BYTES = JsonBytes.encoded('["b",[');
const OPEN_SPECIAL = JsonBytes.encoded('["n",[');
const OPEN_VALUE = JsonBytes.encoded('["v",[');

/** The field of format 2.2 holding every chunk's content hash, in the order `entries` lists the chunks. */
export const CONTENT_HASHES = "contentHashes";
const OPEN_CONTENT_HASHES = JsonBytes.encoded(
  `,"${CONTENT_HASHES}":{"algorithm":"${CONTENT_HASH_ALGORITHM}","chunks":"`,
);

function numbers(out: JsonBytes, values: readonly number[]): void {
  out.byte(0x5b);
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out.byte(0x2c);
    out.number(values[i]!);
  }
  out.byte(0x5d);
}

/**
 * How many fields a chunk's array needs: 3 `[file, byteOffset, crc32c]` for a whole tensor with
 * the default block and name, 5 adding its offsets and sizes, 6 its block size, 7 its name.
 */
export function chunkFields(
  chunk: ChunkMetadata,
  key: KeyPath,
  shape: readonly number[],
  defaultBlockSize: number,
): 3 | 5 | 6 | 7 {
  let whole = chunk.sizes.length === shape.length;
  for (let d = 0; whole && d < shape.length; d++) whole = chunk.sizes[d] === shape[d] && chunk.offsets[d] === 0;
  // A whole chunk's default name is its dotted key (`tensorName`), compared here without joining it.
  const defaultName = whole ? isDottedKey(chunk.tensorName, key) : chunk.tensorName === tensorName(key, shape, chunk);
  if (!defaultName) return 7;
  // A chunk of at most one block under both sizes has the same checksum under either: no need to say which.
  const oneBlock = chunk.byteLength <= chunk.blockSize && chunk.byteLength <= defaultBlockSize;
  if (chunk.blockSize !== defaultBlockSize && !oneBlock) return 6;
  return whole ? 3 : 5;
}

/** Whether `name` is `key`'s elements joined by dots (`displayKey`, for a non-empty key). */
function isDottedKey(name: string, key: KeyPath): boolean {
  if (key.length === 0) return name === displayKey(key);
  let at = 0;
  for (let k = 0; k < key.length; k++) {
    if (k > 0 && name.charCodeAt(at++) !== 46) return false;
    const element = key[k]!;
    at =
      typeof element === "string"
        ? name.startsWith(element, at)
          ? at + element.length
          : -1
        : integerAt(name, at, element);
    if (at < 0) return false;
  }
  return at === name.length;
}

/** Where `name`'s decimal digits of `value` (as `String` writes it) end, if they start at `at`; -1 if not there. */
function integerAt(name: string, at: number, value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) {
    const text = String(value);
    return name.startsWith(text, at) ? at + text.length : -1;
  }
  let digits = 1;
  for (let rest = value; rest >= 10; rest = Math.floor(rest / 10)) digits++;
  let rest = value;
  for (let i = at + digits - 1; i >= at; i--) {
    if (name.charCodeAt(i) !== 48 + (rest % 10)) return -1;
    rest = Math.floor(rest / 10);
  }
  return at + digits;
}
