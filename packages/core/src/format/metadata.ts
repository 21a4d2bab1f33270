import { type DType, byteSize, isDType, numel } from "../state/dtypes.js";
import { crc32c } from "./crc32c.js";
import { CheckpointError, describeValue, isCheckpointError } from "../errors.js";
import { type JsonPrimitive, type KeyPath, isForbiddenKey } from "../state/state-dict.js";
import { isDataFileName } from "./naming.js";

/** The file that commits a checkpoint: written last, its presence means the checkpoint is complete. */
export const METADATA_FILE = "metadata.json";
export const FORMAT_NAME = "cairn-checkpoint";
export const FORMAT_MAJOR = 1;
/** 1.1: `metadata.json` opens with `metadataCrc32c`, its own checksum. */
export const FORMAT_MINOR = 1;
export const DEFAULT_BLOCK_SIZE = 1 << 20;

/** A piece of a tensor stored in one data file: its place in the global tensor and where its bytes are. */
export interface ChunkMetadata {
  /** Start of the chunk in each dimension of the global shape. */
  readonly offsets: readonly number[];
  /** Extent of the chunk in each dimension; the chunk's bytes are this box in row-major order. */
  readonly sizes: readonly number[];
  readonly file: string;
  /** The chunk's name in the data file's safetensors header. */
  readonly tensorName: string;
  /** Absolute offset of the chunk's first byte in the data file. */
  readonly byteOffset: number;
  readonly byteLength: number;
  /** CRC32C of each `checksum.blockSize` block of the chunk's bytes, from the chunk's first byte. */
  readonly crc32c: readonly number[];
}

export interface TensorEntry {
  readonly kind: "tensor";
  readonly key: KeyPath;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly chunks: readonly ChunkMetadata[];
}

/** An opaque `Uint8Array`, stored as a 1-D uint8 tensor and restored as a `Uint8Array`. */
export interface BytesEntry {
  readonly kind: "bytes";
  readonly key: KeyPath;
  readonly byteLength: number;
  readonly chunks: readonly ChunkMetadata[];
}

/**
 * A JSON value stored inline. An empty object or array is a value too. Numbers JSON cannot
 * hold (NaN, ±Infinity, -0) are stored as `special` instead of `value`.
 */
export interface ValueEntry {
  readonly kind: "value";
  readonly key: KeyPath;
  readonly value?: JsonPrimitive | Record<string, never> | readonly never[];
  readonly special?: "NaN" | "Infinity" | "-Infinity" | "-0";
}

export type EntryMetadata = TensorEntry | BytesEntry | ValueEntry;

export interface DataFileMetadata {
  /** The rank that wrote the file. */
  readonly rank: number;
  readonly size: number;
  /** The JSON header's length, as the file's first 8 bytes say. */
  readonly headerLength: number;
  /** CRC32C of the file's first `8 + headerLength` bytes. */
  readonly headerCrc32c: number;
}

export interface CheckpointMetadata {
  readonly format: typeof FORMAT_NAME;
  /** "major.minor": readers refuse a newer major and accept a newer minor. */
  readonly version: string;
  readonly worldSize: number;
  /** ISO 8601 time the checkpoint was committed. */
  readonly createdAt: string;
  readonly checksum: { readonly algorithm: "crc32c"; readonly blockSize: number };
  /** Keyed by file name; parsed metadata has a null-prototype object here. */
  readonly files: Readonly<Record<string, DataFileMetadata>>;
  readonly entries: readonly EntryMetadata[];
  /** What the caller passed as `metadata` (step, metrics, anything JSON). */
  readonly user: Readonly<Record<string, unknown>>;
}

export function encodeSpecialNumber(value: number): ValueEntry["special"] {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "Infinity";
  if (value === -Infinity) return "-Infinity";
  if (Object.is(value, -0)) return "-0";
  return undefined;
}

export function valueOf(entry: ValueEntry): ValueEntry["value"] {
  switch (entry.special) {
    case "NaN":
      return NaN;
    case "Infinity":
      return Infinity;
    case "-Infinity":
      return -Infinity;
    case "-0":
      return -0;
    default:
      return entry.value ?? null;
  }
}

function corrupt(where: string, problem: string): CheckpointError {
  return new CheckpointError("corrupt", `${where}: ${problem}; the checkpoint cannot be read`, { context: { path: where } });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isCount(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

function isCounts(value: unknown): value is number[] {
  return Array.isArray(value) && value.every(isCount);
}

/**
 * `metadata.json` opens with `{"metadataCrc32c":<n>,`: the CRC32C of the file's bytes without that
 * field, that is `{` followed by everything after the prefix. Raw bytes, so any reader can check it
 * without re-encoding JSON the way JavaScript does.
 */
const CHECKSUM_FIELD = "metadataCrc32c";
const CHECKSUM_PREFIX = new RegExp(`^\\{"${CHECKSUM_FIELD}":(\\d{1,10}),`);

/** The bytes of `metadata.json` for `metadata`: compact JSON, opened by its checksum (a stale one in `metadata` is dropped). */
export function encodeMetadata(metadata: CheckpointMetadata): Uint8Array {
  const { [CHECKSUM_FIELD]: _stale, ...rest } = metadata as CheckpointMetadata & { [CHECKSUM_FIELD]?: unknown };
  const body = JSON.stringify(rest);
  return new TextEncoder().encode(`{"${CHECKSUM_FIELD}":${crc32c(new TextEncoder().encode(body))},${body.slice(1)}`);
}

/** Checks the checksum `metadata.json` opens with, if it has one; says whether it had one. */
function verifyChecksum(bytes: Uint8Array, text: string, where: string): boolean {
  const prefix = CHECKSUM_PREFIX.exec(text);
  if (!prefix) return false;
  const body = bytes.slice(prefix[0].length - 1);
  body[0] = 0x7b; // "{"
  if (crc32c(body) !== Number(prefix[1])) throw corrupt(where, `its bytes do not match their checksum (${CHECKSUM_FIELD}): it was changed or damaged`);
  return true;
}

/**
 * Parses and checks `metadata.json`. A newer major version is `unsupported_version`; anything
 * malformed is `corrupt`, so a reader never acts on half-understood metadata.
 */
export function parseMetadata(bytes: Uint8Array, where: string): CheckpointMetadata {
  if (!(bytes instanceof Uint8Array)) {
    throw new CheckpointError("invalid_argument", `parseMetadata: pass the bytes of ${METADATA_FILE} as a Uint8Array, not ${describeValue(bytes)}`);
  }
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch (cause) {
    throw new CheckpointError("corrupt", `${where}: not valid UTF-8; the checkpoint cannot be read`, { cause, context: { path: where } });
  }
  const checked = verifyChecksum(bytes, text, where);
  let raw: unknown;
  try {
    raw = JSON.parse(text, refuseForbiddenKeys);
  } catch (cause) {
    if (isCheckpointError(cause, "corrupt")) throw corrupt(where, cause.message);
    throw new CheckpointError("corrupt", `${where}: not valid JSON; the checkpoint cannot be read`, { cause, context: { path: where } });
  }
  if (!isRecord(raw) || raw.format !== FORMAT_NAME) throw corrupt(where, `not a ${FORMAT_NAME} metadata file`);
  const version = typeof raw.version === "string" ? /^(\d+)\.(\d+)$/.exec(raw.version) : null;
  if (!version) throw corrupt(where, `version ${JSON.stringify(raw.version)} is not "major.minor"`);
  if (Number(version[1]) > FORMAT_MAJOR) {
    throw new CheckpointError(
      "unsupported_version",
      `${where}: format version ${raw.version as string} is newer than this Cairn reads (${FORMAT_MAJOR}.x); upgrade @cairn/core`,
      { context: { path: where } },
    );
  }
  if (!checked && (Number(version[2]) >= 1 || Object.hasOwn(raw, CHECKSUM_FIELD))) {
    throw corrupt(where, `version ${raw.version as string} must open with its checksum ${CHECKSUM_FIELD}, and does not`);
  }
  delete raw[CHECKSUM_FIELD];
  const checksum = raw.checksum;
  if (!isRecord(checksum) || checksum.algorithm !== "crc32c" || !isCount(checksum.blockSize) || checksum.blockSize === 0) {
    throw corrupt(where, "checksum must be { algorithm: \"crc32c\", blockSize > 0 }");
  }
  if (!isCount(raw.worldSize) || raw.worldSize === 0) throw corrupt(where, "worldSize must be a positive integer");
  if (!isRecord(raw.files)) throw corrupt(where, "files must be an object");
  // Null prototype: file names come from storage and index this object.
  const files = Object.create(null) as Record<string, DataFileMetadata>;
  for (const [name, file] of Object.entries(raw.files)) {
    if (!isDataFileName(name)) throw corrupt(where, `file name ${JSON.stringify(name)} is not a plain file name`);
    if (!isRecord(file) || !isCount(file.size) || !isCount(file.headerLength) || !isCount(file.headerCrc32c) || !isCount(file.rank)) {
      throw corrupt(where, `file ${JSON.stringify(name)} needs rank, size, headerLength and headerCrc32c`);
    }
    if (8 + file.headerLength > file.size) throw corrupt(where, `file ${JSON.stringify(name)} has a header longer than the file`);
    files[name] = file as unknown as DataFileMetadata;
  }
  if (!Array.isArray(raw.entries)) throw corrupt(where, "entries must be an array");
  const blocks = checksum.blockSize;
  for (const entry of raw.entries as unknown[]) checkEntry(entry, files, blocks, where);
  if (raw.user !== undefined && !isRecord(raw.user)) throw corrupt(where, "user must be an object");
  return { ...(raw as unknown as CheckpointMetadata), files, user: (raw.user as Record<string, unknown> | undefined) ?? {} };
}

/** JSON.parse reviver: no object in metadata.json may have a key that reaches a prototype when merged. */
function refuseForbiddenKeys(this: unknown, key: string, value: unknown): unknown {
  if (!Array.isArray(this) && isForbiddenKey(key)) throw new CheckpointError("corrupt", `it holds the key ${JSON.stringify(key)}, which Cairn never writes`);
  return value;
}

const SPECIALS: ReadonlySet<unknown> = new Set(["NaN", "Infinity", "-Infinity", "-0"]);

/** What `save` stores inline: a JSON primitive, an empty object or array, or one of the special numbers. */
function isStoredValue(entry: Record<string, unknown>): boolean {
  if (entry.special !== undefined) return SPECIALS.has(entry.special);
  const { value } = entry;
  if (value === null || value === undefined || ["string", "number", "boolean"].includes(typeof value)) return true;
  return typeof value === "object" && Object.keys(value).length === 0;
}

function checkEntry(entry: unknown, files: Record<string, DataFileMetadata>, blockSize: number, where: string): void {
  if (!isRecord(entry) || !Array.isArray(entry.key) || !entry.key.every((k) => typeof k === "string" || isCount(k))) {
    throw corrupt(where, `entry ${JSON.stringify(entry)?.slice(0, 200)} has no valid key path`);
  }
  const key = (entry.key as (string | number)[]).join(".");
  if (entry.key.length === 0) throw corrupt(where, "an entry has an empty key path");
  const forbidden = (entry.key as (string | number)[]).find(isForbiddenKey);
  if (forbidden !== undefined) throw corrupt(where, `entry ${key} has the key ${JSON.stringify(forbidden)}, which Cairn never writes (it would reach Object.prototype when loaded)`);
  if (entry.kind === "value") {
    if (!isStoredValue(entry)) throw corrupt(where, `value ${key} must hold a JSON primitive, {} or [], or a special number`);
    return;
  }
  if (entry.kind !== "tensor" && entry.kind !== "bytes") throw corrupt(where, `entry ${key} has unknown kind ${JSON.stringify(entry.kind)}`);
  if (entry.kind === "tensor" && (!isDType(entry.dtype) || !isCounts(entry.shape))) throw corrupt(where, `tensor ${key} needs a known dtype and a shape`);
  if (entry.kind === "bytes" && !isCount(entry.byteLength)) throw corrupt(where, `bytes ${key} needs a byteLength`);
  if (!Array.isArray(entry.chunks)) throw corrupt(where, `entry ${key} needs chunks`);
  const dtype: DType = entry.kind === "tensor" ? (entry.dtype as DType) : "uint8";
  const shape = entry.kind === "tensor" ? (entry.shape as number[]) : [entry.byteLength as number];
  let elements = 0;
  for (const chunk of entry.chunks as unknown[]) {
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
      throw corrupt(where, `entry ${key} has a malformed chunk`);
    }
    if (chunk.byteLength !== byteSize(dtype, chunk.sizes) || chunk.crc32c.length !== Math.ceil(chunk.byteLength / blockSize)) {
      throw corrupt(where, `entry ${key} has a chunk whose byte length or checksums do not match its sizes`);
    }
    const { offsets, sizes } = chunk;
    if (offsets.length !== shape.length || sizes.length !== shape.length || shape.some((d, i) => offsets[i]! + sizes[i]! > d)) {
      throw corrupt(where, `entry ${key} has a chunk outside its shape ${JSON.stringify(shape)}`);
    }
    const file = files[chunk.file]!;
    if (chunk.byteLength > 0 && (chunk.byteOffset < 8 + file.headerLength || chunk.byteOffset + chunk.byteLength > file.size)) {
      throw corrupt(where, `entry ${key} has a chunk outside the data section of ${chunk.file}`);
    }
    elements += numel(sizes);
  }
  if (elements !== numel(shape)) throw corrupt(where, `entry ${key}: its chunks hold ${elements} elements, not the ${numel(shape)} of its shape`);
}
