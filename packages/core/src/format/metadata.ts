import type { DType } from "../state/dtypes.js";
import type { JsonPrimitive, KeyPath } from "../state/state-dict.js";

/** The file that commits a checkpoint: written last, its presence means the checkpoint is complete. */
export const METADATA_FILE = "metadata.json";
export const FORMAT_NAME = "cairn-checkpoint";
/** 2.0: compact entries, a file table, per-chunk checksum block sizes (1.1: `metadataCrc32c`). */
export const FORMAT_MAJOR = 2;
export const FORMAT_MINOR = 0;
/** 2.1: a file may live in a sibling checkpoint (`DataFileMetadata.dir`); written only when one does. */
export const FORMAT_MINOR_SHARED = 1;
/** 2.2: every chunk has its content hash (`ChunkMetadata.hash`, stored in `contentHashes`); a 2.0 or 2.1 reader ignores them. */
export const FORMAT_MINOR_HASHED = 2;
/** The content hash of chunks in format 2.2. */
export const CONTENT_HASH_ALGORITHM = "xxh3-128";
/** The largest checksum block a writer uses unless told otherwise; each chunk's own is chosen from its row size. */
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
  /** Bytes per checksum block of this chunk (format 1.x: `checksum.blockSize` for every chunk). */
  readonly blockSize: number;
  /** CRC32C of each `blockSize` block of the chunk's bytes, from the chunk's first byte. */
  readonly crc32c: readonly number[];
  /**
   * Format 2.2: XXH3-128 of the chunk's bytes, 32 lowercase hex digits (`xxhsum -H2`'s form), what
   * an incremental save compares to decide a chunk is unchanged; absent in checkpoints written before.
   */
  readonly hash?: string;
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
  /**
   * Format 2.1: the sibling checkpoint (its directory's name, one path segment) that holds the
   * file, when an incremental save referenced it instead of writing it; absent: this checkpoint.
   */
  readonly dir?: string;
}

export interface CheckpointMetadata {
  readonly format: typeof FORMAT_NAME;
  /** "major.minor": readers refuse a newer major and accept a newer minor. */
  readonly version: string;
  readonly worldSize: number;
  /** ISO 8601 time the checkpoint was committed. */
  readonly createdAt: string;
  /** `blockSize`: the largest block any chunk uses (format 1.x: the block of every chunk). */
  readonly checksum: { readonly algorithm: "crc32c"; readonly blockSize: number };
  /** Keyed by file name; parsed metadata has a null-prototype object here. */
  readonly files: Readonly<Record<string, DataFileMetadata>>;
  readonly entries: readonly EntryMetadata[];
  /** What the caller passed as `metadata` (step, metrics, anything JSON). */
  readonly user: Readonly<Record<string, unknown>>;
}

/** Whether a data file lives in a sibling checkpoint (format 2.1): referenced, not written, by this one. */
export function isReferencedFile(file: DataFileMetadata): boolean {
  return file.dir !== undefined;
}

/** The data files a checkpoint wrote into its own directory, by name: what deleting it may remove. */
export function ownFiles(metadata: { readonly files: Readonly<Record<string, DataFileMetadata>> }): string[] {
  const names: string[] = [];
  for (const name in metadata.files) if (!isReferencedFile(metadata.files[name]!)) names.push(name);
  return names;
}

/**
 * The data files of sibling checkpoints a checkpoint uses (format 2.1), as `<sibling>/<name>`
 * paths relative to their common parent: what a deleter of those siblings must keep.
 */
export function referencedFiles(metadata: { readonly files: Readonly<Record<string, DataFileMetadata>> }): string[] {
  const paths: string[] = [];
  for (const name in metadata.files) {
    const { dir } = metadata.files[name]!;
    if (dir !== undefined) paths.push(`${dir}/${name}`);
  }
  return paths;
}

/** Whether any data file lives in a sibling checkpoint (format 2.1). */
export function sharesFiles(files: Readonly<Record<string, DataFileMetadata>>): boolean {
  for (const name in files) if (isReferencedFile(files[name]!)) return true;
  return false;
}

/**
 * Whether there are chunks and every one has its content hash (format 2.2): its `hash`, or, where
 * `table` is given (`encodeMetadata`'s `contentHashes`), its 16 bytes there.
 */
export function hasContentHashes(entries: readonly EntryMetadata[], table?: Uint8Array): boolean {
  let chunks = 0;
  // Index loops: run before V8 optimizes them, a for-of makes an iterator result per entry.
  for (let e = 0; e < entries.length; e++) {
    const entry = entries[e]!;
    if (entry.kind === "value") continue;
    if (!table) for (let c = 0; c < entry.chunks.length; c++) if (entry.chunks[c]!.hash === undefined) return false;
    chunks += entry.chunks.length;
  }
  return chunks > 0 && (!table || table.length === 16 * chunks);
}

/**
 * The version a writer gives this metadata: 2.2 when every chunk has its content hash (what
 * every save writes), else 2.1 when a file is shared and 2.0 when none is (a copy of an older
 * checkpoint keeps what it had).
 */
export function formatVersionOf(
  files: Readonly<Record<string, DataFileMetadata>>,
  entries: readonly EntryMetadata[],
  /** Every chunk's content hash as bytes, in entry order, where the chunks may lack their `hash` strings. */
  contentHashes?: Uint8Array,
): string {
  const minor = hasContentHashes(entries, contentHashes)
    ? FORMAT_MINOR_HASHED
    : sharesFiles(files)
      ? FORMAT_MINOR_SHARED
      : FORMAT_MINOR;
  return `${FORMAT_MAJOR}.${minor}`;
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
