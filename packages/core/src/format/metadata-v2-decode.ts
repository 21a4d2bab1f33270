import { base64ToBytes, bytesToHex } from "#platform/format/byte-text.js";
import { type DType, byteSize, isDType } from "../state/dtypes.js";
import { CheckpointError } from "../errors.js";
import type { KeyPath } from "../state/state-dict.js";
import { decodeChecksums, isBase64 } from "./checksum-blocks.js";
import type { JsonReader } from "./json-reader.js";
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
import { CONTENT_HASHES } from "./metadata-v2.js";
import { isDataFileName, tensorName } from "./naming.js";
import { SharedArrays } from "./shared-arrays.js";
import { badChecksums, chunkChecksums, chunkRecord, wholeTensorDecoder } from "./metadata-v2-whole.js";

// Reading format 2.x's compact `files` and `entries` (docs/format.md; written by metadata-v2.ts).

const FILE_FIELDS: ReadonlySet<string> = new Set(["name", "rank", "size", "headerLength", "headerCrc32c", "dir"]);

const ASCII = new TextEncoder();

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
  if (!isBase64(text)) throw corrupt(where, `${CONTENT_HASHES}.chunks is not base64`);
  const bytes = base64ToBytes(text);
  if (bytes.byteLength % 16 !== 0 || Math.ceil((bytes.byteLength * 4) / 3 / 4) * 4 !== text.length)
    throw corrupt(where, `${CONTENT_HASHES}.chunks is not a whole number of 16-byte hashes`);
  return bytesToHex(bytes);
}

/** The data file table of a format 2.x `metadata.json` (parsed already: it is small), by name, null-prototype. */
function decodeFiles(
  raw: Record<string, unknown>,
  where: string,
): { files: Record<string, DataFileMetadata>; names: string[] } {
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
        { context: { path: where } },
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
  return { files, names };
}

/**
 * Reads the files and entries of a format 2.x `metadata.json`: the files from `raw` (the other
 * fields, parsed), the entries straight from their bytes (`entries`, at the value; undefined if
 * the field is absent), each field checked before use, as JSON.parse and a walk over its arrays
 * would, without those arrays (100k tensors: half a million of them). `wholeTensors` false reads
 * every entry with the general decoder, the reference the tests compare the fast one with.
 * `lazyChecksums`: see `ParseOptions.lazyChecksums`.
 */
export function decodeV2(
  raw: Record<string, unknown>,
  entries: JsonReader | undefined,
  bytes: Uint8Array,
  defaultBlockSize: number,
  where: string,
  wholeTensors = true,
  lazyChecksums = false,
): { files: Record<string, DataFileMetadata>; entries: EntryMetadata[] } {
  const { files, names } = decodeFiles(raw, where);
  if (entries === undefined || entries.peek() !== 0x5b) throw corrupt(where, "entries must be an array");
  const r = entries;
  const hashes = decodeContentHashes(raw, where);
  /** Chunks read so far: the next one's hash is at `32 * chunkCount` in `hashes`. */
  let chunkCount = 0;
  let previous: KeyPath = [];
  /** The key path's elements after its shared prefix, reused from entry to entry. */
  const parts: (string | number)[] = [];
  const scratch: unknown[] = [];
  const shapes = new SharedArrays();
  const decoded: EntryMetadata[] = [];
  const whole = wholeTensors
    ? wholeTensorDecoder(r, { bytes, names, files, defaultBlockSize, hashes, shapes, lazyChecksums, where })
    : () => undefined;
  if (!r.open(0x5b)) {
    do {
      r.peek();
      const entry = whole(previous, chunkCount);
      if (entry === undefined) decoded.push(readEntry(decoded.length));
      else {
        previous = entry.key;
        chunkCount++;
        decoded.push(entry);
      }
    } while (r.more(0x5d));
  }
  if (hashes !== undefined && hashes.length !== 32 * chunkCount)
    throw corrupt(where, `${CONTENT_HASHES} holds ${hashes.length / 32} hashes for ${chunkCount} chunks`);
  return { files, entries: decoded };

  /** The elements of an array (a shape, offsets, sizes), or the value itself if it is not an array. */
  function values(): unknown {
    if (r.peek() !== 0x5b) return r.value();
    scratch.length = 0;
    if (!r.open(0x5b)) {
      do scratch.push(r.value());
      while (r.more(0x5d));
    }
    return scratch.slice();
  }

  function notEntry(index: number): CheckpointError {
    return corrupt(where, `entry ${index} is not [kind, key, …]`);
  }

  function wrongFields(key: KeyPath, kind: string): CheckpointError {
    return corrupt(
      where,
      `entry ${key.join(".")} has unknown kind ${JSON.stringify(kind)} or the wrong number of fields`,
    );
  }

  function readEntry(index: number): EntryMetadata {
    if (r.peek() !== 0x5b) {
      r.value();
      throw notEntry(index);
    }
    if (r.open(0x5b)) throw notEntry(index);
    const kind = r.value();
    if (typeof kind !== "string" || !r.more(0x5d) || r.peek() !== 0x5b) throw notEntry(index);
    const key = readKey(index);
    if (!r.more(0x5d)) throw wrongFields(key, kind);
    if (kind === "v" || kind === "n") {
      const a = r.value();
      if (r.more(0x5d)) throw wrongFields(key, kind);
      if (kind === "n") {
        if (!isSpecial(a))
          throw corrupt(where, `value ${key.join(".")} holds the unknown special number ${JSON.stringify(a)}`);
        return { kind: "value", key, special: a };
      }
      if (!isStoredValue(a)) throw corrupt(where, `value ${key.join(".")} must hold a JSON primitive, {} or []`);
      return { kind: "value", key, value: (a ?? null) as never };
    }
    if (kind === "t") {
      const dtype = r.value();
      if (!r.more(0x5d)) throw wrongFields(key, kind);
      const listed = values();
      if (!r.more(0x5d)) throw wrongFields(key, kind);
      if (!isDType(dtype) || !isCounts(listed) || r.peek() !== 0x5b)
        throw corrupt(where, `tensor ${key.join(".")} needs a known dtype, a shape and chunks`);
      const shape = shapes.shared(listed);
      const chunks = readChunks(key, dtype, shape);
      if (r.more(0x5d)) throw wrongFields(key, kind);
      return { kind: "tensor", key, dtype, shape, chunks };
    }
    if (kind === "b") {
      const byteLength = r.value();
      if (!r.more(0x5d)) throw wrongFields(key, kind);
      if (!isCount(byteLength) || r.peek() !== 0x5b)
        throw corrupt(where, `bytes ${key.join(".")} needs a byteLength and chunks`);
      const chunks = readChunks(key, "uint8", [byteLength]);
      if (r.more(0x5d)) throw wrongFields(key, kind);
      return { kind: "bytes", key, byteLength, chunks };
    }
    throw wrongFields(key, kind);
  }

  /** `[shared, …elements]`: the previous key's first `shared` elements, then these. */
  function readKey(index: number): KeyPath {
    const invalid = (): CheckpointError => corrupt(where, `entry ${index} has no valid key path`);
    if (r.open(0x5b)) throw invalid();
    const shared = r.value();
    if (!isCount(shared) || shared > previous.length) throw invalid();
    parts.length = 0;
    while (r.more(0x5d)) {
      const element = r.value();
      if (!isKeyElement(element)) throw invalid();
      parts.push(element);
    }
    const key = new Array<string | number>(shared + parts.length);
    for (let i = 0; i < shared; i++) key[i] = previous[i]!;
    for (let i = 0; i < parts.length; i++) key[shared + i] = parts[i]!;
    previous = key;
    checkKey(key, where);
    return key;
  }

  function readChunks(key: KeyPath, dtype: DType, shape: readonly number[]): ChunkMetadata[] {
    const chunks: ChunkMetadata[] = [];
    if (!r.open(0x5b)) {
      let dotted: string | undefined;
      do chunks.push(readChunk(key, dtype, shape, (dotted ??= key.join("."))));
      while (r.more(0x5d));
    }
    checkChunks(key, dtype, shape, chunks, files, where);
    return chunks;
  }

  function malformedChunk(dotted: string): CheckpointError {
    return corrupt(where, `entry ${dotted} has a malformed chunk`);
  }

  /** `[file, byteOffset, crc32c]`, then optionally offsets and sizes, block size, name (3, 5, 6 or 7 fields). */
  function readChunk(key: KeyPath, dtype: DType, shape: readonly number[], dotted: string): ChunkMetadata {
    if (r.peek() !== 0x5b) {
      r.value();
      throw malformedChunk(dotted);
    }
    if (r.open(0x5b)) throw malformedChunk(dotted);
    const file = r.value();
    if (!r.more(0x5d)) throw malformedChunk(dotted);
    const byteOffset = r.value();
    if (!r.more(0x5d)) throw malformedChunk(dotted);
    // The checksums' base64 is decoded from its bytes (which checks each of them); a string
    // written with escapes is read as text first.
    const quote = r.peek() === 0x22 ? r.position : -1;
    const close = r.unescapedString();
    const sums = close >= 0 ? bytes.subarray(quote + 1, close) : r.value();
    let fields = 3;
    let offsets: unknown = undefined;
    let sizes: unknown = undefined;
    let blockSize: unknown = defaultBlockSize;
    let ownName: unknown = undefined;
    while (r.more(0x5d)) {
      fields++;
      if (fields === 4) offsets = values();
      else if (fields === 5) sizes = values();
      else if (fields === 6) blockSize = r.value();
      else if (fields === 7) ownName = r.value();
      else throw malformedChunk(dotted);
    }
    if (fields === 4) throw malformedChunk(dotted);
    if (offsets === undefined) offsets = shapes.zeros(shape.length);
    if (sizes === undefined) sizes = shape;
    if (
      !isCount(file) ||
      file >= names.length ||
      !isCount(byteOffset) ||
      !(sums instanceof Uint8Array || typeof sums === "string") ||
      !isCounts(offsets) ||
      !isCounts(sizes) ||
      !isCount(blockSize) ||
      blockSize === 0 ||
      (ownName !== undefined && typeof ownName !== "string")
    ) {
      throw malformedChunk(dotted);
    }
    const byteLength = byteSize(dtype, sizes);
    const count = Math.ceil(byteLength / blockSize);
    const crc32c = !Number.isSafeInteger(byteLength)
      ? undefined
      : typeof sums === "string"
        ? decodeChecksums(ASCII.encode(sums), count)
        : chunkChecksums(sums, count, 0, sums.byteLength, lazyChecksums ? where : undefined, key);
    if (!crc32c) throw badChecksums(where, dotted);
    // The default name: the dotted key when the chunk is the whole tensor (its sizes the shape itself).
    const stored = ownName ?? (sizes === shape ? dotted : tensorName(key, shape, { offsets, sizes }, dotted));
    const at = 32 * chunkCount++;
    if (hashes !== undefined && at >= hashes.length)
      throw corrupt(where, `${CONTENT_HASHES} holds fewer hashes than there are chunks`);
    const hash = hashes?.slice(at, at + 32);
    return chunkRecord(offsets, sizes, names[file]!, stored, byteOffset, byteLength, blockSize, crc32c, hash);
  }
}
