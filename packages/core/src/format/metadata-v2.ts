import { base64ToBytes, bytesToBase64, bytesToHex, hexToBytes } from "#platform/format/byte-text.js";
import { type DType, byteSize, isDType } from "../state/dtypes.js";
import { CheckpointError } from "../errors.js";
import { type KeyPath, displayKey } from "../state/state-dict.js";
import { decodeChecksums, encodeChecksums } from "./checksum-blocks.js";
import { type ChunkMetadata, type DataFileMetadata, type EntryMetadata, CONTENT_HASH_ALGORITHM } from "./metadata.js";
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
import { isDataFileName, tensorName } from "./naming.js";
import type { JsonBytes } from "./json-bytes.js";

/**
 * Format 2.x's compact `files` and `entries` (docs/format.md): files are a table that chunks
 * index by position; an entry is an array whose key path shares a counted prefix with the
 * previous entry's; a chunk covering its whole tensor with the default block and name is
 * `[file, byteOffset, crc32c]`, others add offsets, sizes, block size and name.
 */

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

const FILE_FIELDS: ReadonlySet<string> = new Set(["name", "rank", "size", "headerLength", "headerCrc32c", "dir"]);

/**
 * Writes `"files":[…],"entries":[…]` of format 2.x into `out` directly (an array per entry and chunk,
 * then JSON.stringify, costs more): the bytes JSON.stringify of those arrays gives.
 */
export function writeV2(
  out: JsonBytes,
  files: Readonly<Record<string, DataFileMetadata>>,
  entries: readonly EntryMetadata[],
  defaultBlockSize: number,
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
  /** Every chunk's content hash in order, while every chunk has one (format 2.2). */
  let hashes: string[] | undefined = [];
  let previous: KeyPath = [];
  for (let e = 0; e < entries.length; e++) {
    const entry = entries[e]!;
    const key = entry.key;
    let shared = 0;
    while (shared < previous.length && shared < key.length - 1 && previous[shared] === key[shared]) shared++;
    previous = key;
    out.text(e > 0 ? ',["' : '["');
    out.text(entry.kind === "tensor" ? "t" : entry.kind === "bytes" ? "b" : entry.special !== undefined ? "n" : "v");
    out.text('",[');
    out.integer(shared);
    for (let k = shared; k < key.length; k++) {
      out.byte(0x2c);
      const element = key[k]!;
      if (typeof element === "string") out.string(element);
      else out.number(element);
    }
    out.text("],");
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
    out.text(",[");
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
      if (chunk.hash === undefined) hashes = undefined;
      else hashes?.push(chunk.hash);
      out.text(c > 0 ? ",[" : "[");
      out.integer(file);
      out.byte(0x2c);
      out.number(chunk.byteOffset);
      out.byte(0x2c);
      if (chunk.crc32c.length === 1) out.base64Uint32LE(chunk.crc32c[0]!);
      else out.string(encodeChecksums(chunk.crc32c));
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
    out.text("]]");
  }
  out.byte(0x5d);
  if (hashes && hashes.length > 0) {
    const hex = hashes.join("");
    // Decoding stops at the first character that is not hex: one length check covers every hash.
    const bytes = hexToBytes(hex);
    if (hex.length !== 32 * hashes.length || bytes.byteLength !== 16 * hashes.length)
      throw new CheckpointError(
        "invalid_argument",
        `a chunk's content hash is not 32 hex digits (${hashes.find((h) => !HEX_DIGEST.test(h))})`,
      );
    out.text(`,"${CONTENT_HASHES}":{"algorithm":"${CONTENT_HASH_ALGORITHM}","chunks":"`);
    out.text(bytesToBase64(bytes));
    out.text('"}');
  }
}

/** The field of format 2.2 holding every chunk's content hash, in the order `entries` lists the chunks. */
export const CONTENT_HASHES = "contentHashes";
const HEX_DIGEST = /^[0-9a-f]{32}$/;

/**
 * The content hashes of `raw.contentHashes` as one hex string (32 digits per chunk), undefined
 * when there are none or their algorithm is one this Cairn does not know (the chunks are then
 * read without hashes); `corrupt` when the field is malformed.
 */
function decodeContentHashes(raw: Record<string, unknown>, where: string): string | undefined {
  const table = raw[CONTENT_HASHES];
  if (table === undefined) return undefined;
  if (!isRecord(table) || typeof table.algorithm !== "string" || typeof table.chunks !== "string")
    throw corrupt(where, `${CONTENT_HASHES} must be { algorithm, chunks } with two strings`);
  if (table.algorithm !== CONTENT_HASH_ALGORITHM) return undefined;
  const text = table.chunks;
  // Checked before decoding, so a hostile string never decodes to more than whole 16-byte digests.
  if (text.length % 4 !== 0 || !BASE64.test(text)) throw corrupt(where, `${CONTENT_HASHES}.chunks is not base64`);
  const bytes = base64ToBytes(text);
  if (bytes.byteLength % 16 !== 0 || Math.ceil((bytes.byteLength * 4) / 3 / 4) * 4 !== text.length)
    throw corrupt(where, `${CONTENT_HASHES}.chunks is not a whole number of 16-byte hashes`);
  return bytesToHex(bytes);
}

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

/** Reads the files and entries of a format 2.x `metadata.json`; everything is checked before use. */
export function decodeV2(
  raw: Record<string, unknown>,
  defaultBlockSize: number,
  where: string,
): { files: Record<string, DataFileMetadata>; entries: EntryMetadata[] } {
  if (!Array.isArray(raw.files)) throw corrupt(where, "files must be an array");
  // Null prototype: file names come from storage and index this object.
  const files = Object.create(null) as Record<string, DataFileMetadata>;
  const names: string[] = [];
  for (const file of raw.files as unknown[]) {
    if (!isRecord(file) || typeof file.name !== "string" || !isDataFileName(file.name))
      throw corrupt(where, `file ${JSON.stringify(file)?.slice(0, 200)} has no plain file name`);
    const unknown = Object.keys(file).find((field) => !FILE_FIELDS.has(field));
    if (unknown !== undefined) {
      // A later format may locate a file elsewhere (an earlier step): reading it from here would read the wrong bytes.
      throw new CheckpointError(
        "unsupported_version",
        `${where}: file ${file.name} has the field ${JSON.stringify(unknown)}, which this Cairn does not know; upgrade @cairn/core`,
        {
          context: { path: where },
        },
      );
    }
    if (!isCount(file.size) || !isCount(file.headerLength) || !isCount(file.headerCrc32c) || !isCount(file.rank)) {
      throw corrupt(where, `file ${JSON.stringify(file.name)} needs rank, size, headerLength and headerCrc32c`);
    }
    // 2.1: a sibling checkpoint holding the file; one plain segment, so it never reaches outside the root of steps.
    if (file.dir !== undefined && (typeof file.dir !== "string" || !isDataFileName(file.dir))) {
      throw corrupt(
        where,
        `file ${JSON.stringify(file.name)} has the dir ${JSON.stringify(file.dir)?.slice(0, 200)}, which is not the plain name of a sibling checkpoint`,
      );
    }
    if (Object.hasOwn(files, file.name)) throw corrupt(where, `file ${JSON.stringify(file.name)} is listed twice`);
    const record: DataFileMetadata = {
      rank: file.rank,
      size: file.size,
      headerLength: file.headerLength,
      headerCrc32c: file.headerCrc32c,
      ...(file.dir !== undefined ? { dir: file.dir } : {}),
    };
    checkFile(file.name, record, where);
    files[file.name] = record;
    names.push(file.name);
  }
  if (!Array.isArray(raw.entries)) throw corrupt(where, "entries must be an array");
  const hashes = decodeContentHashes(raw, where);
  /** Chunks read so far: the next one's hash is at `32 * chunkCount` in `hashes`. */
  let chunkCount = 0;
  let previous: KeyPath = [];
  const entries = (raw.entries as unknown[]).map((entry): EntryMetadata => {
    if (!Array.isArray(entry) || typeof entry[0] !== "string" || !Array.isArray(entry[1]))
      throw corrupt(where, `entry ${JSON.stringify(entry)?.slice(0, 200)} is not [kind, key, …]`);
    const packed = entry[1] as unknown[];
    const shared = packed[0];
    if (!isCount(shared) || shared > previous.length || !packed.every((k, i) => i === 0 || isKeyElement(k))) {
      throw corrupt(where, `entry ${JSON.stringify(entry).slice(0, 200)} has no valid key path`);
    }
    const key: KeyPath = [...previous.slice(0, shared), ...(packed.slice(1) as (string | number)[])];
    previous = key;
    checkKey(key, where);
    return decodeEntry(entry, key);
  });
  if (hashes !== undefined && hashes.length !== 32 * chunkCount)
    throw corrupt(where, `${CONTENT_HASHES} holds ${hashes.length / 32} hashes for ${chunkCount} chunks`);
  return { files, entries };

  function decodeEntry(entry: unknown[], key: KeyPath): EntryMetadata {
    const name = (): string => key.join(".");
    const [kind, , a, b, c] = entry;
    if (kind === "v" && entry.length === 3) {
      if (!isStoredValue(a)) throw corrupt(where, `value ${name()} must hold a JSON primitive, {} or []`);
      return { kind: "value", key, value: (a ?? null) as never };
    }
    if (kind === "n" && entry.length === 3) {
      if (!isSpecial(a)) throw corrupt(where, `value ${name()} holds the unknown special number ${JSON.stringify(a)}`);
      return { kind: "value", key, special: a };
    }
    if (kind === "t" && entry.length === 5) {
      if (!isDType(a) || !isCounts(b) || !Array.isArray(c))
        throw corrupt(where, `tensor ${name()} needs a known dtype, a shape and chunks`);
      return { kind: "tensor", key, dtype: a, shape: b, chunks: decodeChunks(c as unknown[], key, a, b) };
    }
    if (kind === "b" && entry.length === 4) {
      if (!isCount(a) || !Array.isArray(b)) throw corrupt(where, `bytes ${name()} needs a byteLength and chunks`);
      return { kind: "bytes", key, byteLength: a, chunks: decodeChunks(b as unknown[], key, "uint8", [a]) };
    }
    throw corrupt(where, `entry ${name()} has unknown kind ${JSON.stringify(kind)} or the wrong number of fields`);
  }

  function decodeChunks(raw: unknown[], key: KeyPath, dtype: DType, shape: number[]): ChunkMetadata[] {
    const name = (): string => key.join(".");
    const chunks = raw.map((chunk): ChunkMetadata => {
      if (!Array.isArray(chunk) || chunk.length < 3 || chunk.length > 7 || chunk.length === 4)
        throw corrupt(where, `entry ${name()} has a malformed chunk`);
      const [
        file,
        byteOffset,
        sums,
        offsets = shape.map(() => 0),
        sizes = shape,
        blockSize = defaultBlockSize,
        ownName,
      ] = chunk as unknown[];
      if (
        !isCount(file) ||
        file >= names.length ||
        !isCount(byteOffset) ||
        typeof sums !== "string" ||
        !isCounts(offsets) ||
        !isCounts(sizes) ||
        !isCount(blockSize) ||
        blockSize === 0 ||
        (ownName !== undefined && typeof ownName !== "string")
      ) {
        throw corrupt(where, `entry ${name()} has a malformed chunk`);
      }
      const byteLength = byteSize(dtype, sizes);
      const crc32c = Number.isSafeInteger(byteLength)
        ? decodeChecksums(sums, Math.ceil(byteLength / blockSize))
        : undefined;
      if (!crc32c) throw corrupt(where, `entry ${name()} has a chunk whose checksums do not match its sizes`);
      const box = { offsets, sizes };
      const stored = ownName ?? tensorName(key, shape, box);
      const at = 32 * chunkCount++;
      if (hashes === undefined)
        return { offsets, sizes, file: names[file]!, tensorName: stored, byteOffset, byteLength, blockSize, crc32c };
      if (at >= hashes.length) throw corrupt(where, `${CONTENT_HASHES} holds fewer hashes than there are chunks`);
      const hash = hashes.slice(at, at + 32);
      return {
        offsets,
        sizes,
        file: names[file]!,
        tensorName: stored,
        byteOffset,
        byteLength,
        blockSize,
        crc32c,
        hash,
      };
    });
    checkChunks(key, dtype, shape, chunks, files, where);
    return chunks;
  }
}
