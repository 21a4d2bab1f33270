import { type CheckpointMetadata, isReferencedFile, valueOf } from "../format/metadata.js";
import type { DType } from "../state/dtypes.js";
import { type KeyPath, displayKey } from "../state/state-dict.js";

/** One entry of a checkpoint as `inspectCheckpoint` shows it. */
export type InspectedEntry =
  | {
      readonly key: KeyPath;
      readonly name: string;
      readonly kind: "value";
      readonly value: unknown;
      readonly special?: string;
    }
  | {
      readonly key: KeyPath;
      readonly name: string;
      readonly kind: "tensor" | "bytes";
      readonly dtype: DType;
      readonly shape: readonly number[];
      readonly chunks: readonly {
        offsets: readonly number[];
        sizes: readonly number[];
        file: string;
        byteOffset: number;
        byteLength: number;
        blockSize: number;
        /** Its content hash (XXH3-128, format 2.2). */
        hash?: string;
      }[];
      /** The data files its chunks are in, each once. */
      readonly files: readonly string[];
    };

export interface CheckpointSummary {
  readonly format: string;
  readonly version: string;
  readonly worldSize: number;
  readonly createdAt: string;
  /** The largest checksum block of any chunk (each chunk lists its own). */
  readonly blockSize: number;
  /** Bytes a load or verify reads: `ownBytes` + `referencedBytes`. */
  readonly bytes: number;
  /** Bytes of the data files in its own directory. */
  readonly ownBytes: number;
  /** Bytes it uses of the files it references in sibling checkpoints (format 2.1): their headers and its chunks. */
  readonly referencedBytes: number;
  readonly files: readonly { readonly name: string; readonly rank: number; readonly size: number }[];
  readonly entries: readonly InspectedEntry[];
  readonly user: Readonly<Record<string, unknown>>;
}

/** A checkpoint's bytes as a load or verify reads them (`CheckpointSummary.ownBytes`, `referencedBytes`). */
export interface CheckpointBytes {
  readonly own: number;
  readonly referenced: number;
}

/**
 * Its own data files whole, and of each file it references in a sibling (format 2.1) only the
 * header and the chunks it uses: the rest of such a file is the sibling's, which this checkpoint
 * never reads. Throws nothing.
 */
export function checkpointBytes(metadata: CheckpointMetadata): CheckpointBytes {
  let own = 0;
  let referenced = 0;
  for (const name in metadata.files) {
    const file = metadata.files[name]!;
    if (isReferencedFile(file)) referenced += 8 + file.headerLength;
    else own += file.size;
  }
  for (const entry of metadata.entries) {
    if (entry.kind === "value") continue;
    for (const chunk of entry.chunks) {
      const file = metadata.files[chunk.file];
      if (file !== undefined && isReferencedFile(file)) referenced += chunk.byteLength;
    }
  }
  return { own, referenced };
}

/** Total bytes of a checkpoint's data files, referenced ones whole: what a copy of it moves. */
export function dataBytes(metadata: CheckpointMetadata): number {
  return Object.values(metadata.files).reduce((n, f) => n + f.size, 0);
}

/**
 * A checkpoint's entries and files from its metadata alone (no data read): kind, dtype, global
 * shape, chunks and files of each entry, inline values with their value (a special number such
 * as NaN as `null` plus `special`). Called by `cairn inspect`; throws nothing.
 */
export function inspectCheckpoint(metadata: CheckpointMetadata): CheckpointSummary {
  const bytes = checkpointBytes(metadata);
  const entries = metadata.entries.map((e): InspectedEntry =>
    e.kind === "value"
      ? {
          key: e.key,
          name: displayKey(e.key),
          kind: e.kind,
          value: e.special === undefined ? valueOf(e) : null,
          ...(e.special ? { special: e.special } : {}),
        }
      : {
          key: e.key,
          name: displayKey(e.key),
          kind: e.kind,
          dtype: e.kind === "tensor" ? e.dtype : "uint8",
          shape: e.kind === "tensor" ? e.shape : [e.byteLength],
          chunks: e.chunks.map(({ offsets, sizes, file, byteOffset, byteLength, blockSize, hash }) => ({
            offsets,
            sizes,
            file,
            byteOffset,
            byteLength,
            blockSize,
            ...(hash !== undefined ? { hash } : {}),
          })),
          files: [...new Set(e.chunks.map((c) => c.file))],
        },
  );
  return {
    format: metadata.format,
    version: metadata.version,
    worldSize: metadata.worldSize,
    createdAt: metadata.createdAt,
    blockSize: metadata.checksum.blockSize,
    bytes: bytes.own + bytes.referenced,
    ownBytes: bytes.own,
    referencedBytes: bytes.referenced,
    files: Object.entries(metadata.files).map(([name, f]) => ({ name, rank: f.rank, size: f.size })),
    entries,
    user: metadata.user,
  };
}
