import { throwIfAborted } from "../errors.js";
import { crc32c } from "../format/crc32c.js";
import { chunkBlockSize } from "../format/checksum-blocks.js";
import {
  type ChunkMetadata,
  type CheckpointMetadata,
  type DataFileMetadata,
  type EntryMetadata,
  DEFAULT_BLOCK_SIZE,
  FORMAT_NAME,
  formatVersionOf,
} from "../format/metadata.js";
import { loadXxh128 } from "#platform/format/xxh128.js";
import { dataFileName, newAttemptId } from "../format/naming.js";
import { dataFileLayout } from "../plan/data-file-layout.js";
import type { WriteItem } from "../plan/save-planner.js";
import { withRetry } from "../storage/retry.js";
import { type StorageAdapter, joinPath } from "../storage/storage-adapter.js";
import { checkpointDestination, commitCheckpoint } from "./commit-checkpoint.js";
import { type EntrySource, type SourceTensor, tensorPieces } from "./source-tensor.js";

export interface WriteCheckpointOptions {
  /** User metadata of the checkpoint (`metadata.json`'s `user`). */
  readonly user?: Readonly<Record<string, unknown>>;
  /** `createdAt` to record instead of now. */
  readonly createdAt?: string;
  readonly blockSize?: number;
  /** A data file is closed once it holds this many bytes (default 1 GiB); a larger tensor gets a file of its own. */
  readonly maxFileBytes?: number;
  /** Bytes of a tensor read and written at once (default 8 MiB, rounded to whole blocks). */
  readonly readBytes?: number;
  readonly signal?: AbortSignal;
  /** Called with the bytes of tensor data written, for progress. */
  readonly onWrite?: (bytes: number) => void;
  /** Replace a checkpoint committed at `dir` (see `commitCheckpoint`) instead of refusing it. */
  readonly force?: boolean;
}

export interface WrittenCheckpoint {
  readonly bytes: number;
  readonly files: number;
  readonly entries: number;
  /** Data files of a replaced checkpoint that could not be deleted. */
  readonly leftFiles: readonly string[];
}

/** Consecutive tensors grouped into files of about `maxBytes`, each as the plan's write item of the whole tensor. */
function groupIntoFiles(
  tensors: readonly SourceTensor[],
  maxBytes: number,
): { tensor: SourceTensor; item: WriteItem }[][] {
  const files: { tensor: SourceTensor; item: WriteItem }[][] = [];
  let bytes = Infinity;
  for (const [leafIndex, tensor] of tensors.entries()) {
    if (bytes > 0 && bytes + tensor.byteLength > maxBytes) {
      files.push([]);
      bytes = 0;
    }
    const { key, kind, dtype, shape, byteLength } = tensor;
    files[files.length - 1]!.push({
      tensor,
      item: { leafIndex, key, kind, dtype, shape, chunk: { offsets: shape.map(() => 0), sizes: shape }, byteLength },
    });
    bytes += tensor.byteLength;
  }
  return files;
}

/**
 * Writes a checkpoint in format v1 from tensors read in ranges; called by import and tfjs
 * conversion. Streaming: every tensor is read, checksummed and written `readBytes` at a time,
 * so memory stays bounded whatever the tensors' sizes. Data file names and layout are the
 * plan's (`dataFileName`, `dataFileLayout`), each tensor one whole chunk as `save` stores an
 * unsharded one; `metadata.json` is committed last through `commitCheckpoint`. A failure
 * removes this attempt's files and commits nothing.
 *
 * Throws `already_exists` if `dir` already holds a committed checkpoint, unless `force`: then the
 * old one is replaced only once the new one is complete, and stays readable if this fails.
 * A source's errors (`corrupt`, `invalid_argument`…) and storage errors pass through.
 */
export async function writeCheckpoint(
  storage: StorageAdapter,
  dir: string,
  entries: readonly EntrySource[],
  options: WriteCheckpointOptions = {},
): Promise<WrittenCheckpoint> {
  const where = `${storage.root.replace(/\/$/, "")}${dir ? `/${dir}` : ""}`;
  const replacing = await checkpointDestination(storage, dir, where, options.force === true, options.signal);
  const blockSize = options.blockSize ?? DEFAULT_BLOCK_SIZE;
  const readBytes = options.readBytes ?? 8 << 20;
  const attempt = newAttemptId();
  const groups = groupIntoFiles(
    entries.filter((e): e is SourceTensor => e.kind !== "value"),
    options.maxFileBytes ?? 1 << 30,
  );
  const files: Record<string, DataFileMetadata> = {};
  const chunks = new Map<EntrySource, ChunkMetadata>();
  const xxh = await loadXxh128();
  const written: string[] = [];
  let bytes = 0;
  try {
    for (const [index, group] of groups.entries()) {
      const name = dataFileName(0, index, attempt);
      const { names, layout } = dataFileLayout(group.map((g) => g.item));
      const body = async function* (): AsyncGenerator<Uint8Array> {
        yield layout.header;
        for (const [i, { tensor }] of group.entries()) {
          const sums: number[] = [];
          const hash = await xxh.stream();
          const block = chunkBlockSize(tensor.dtype, tensor.shape, blockSize);
          for await (const data of tensorPieces(
            tensor,
            Math.max(block, Math.floor(readBytes / block) * block),
            options.signal,
          )) {
            for (let b = 0; b < data.byteLength; b += block)
              sums.push(crc32c(data.subarray(b, Math.min(data.byteLength, b + block))));
            hash.update(data);
            yield data;
            options.onWrite?.(data.byteLength);
          }
          const whole = { offsets: tensor.shape.map(() => 0), sizes: tensor.shape };
          chunks.set(tensor, {
            ...whole,
            file: name,
            tensorName: names[i]!,
            byteOffset: layout.offsets[i]!,
            byteLength: tensor.byteLength,
            blockSize: block,
            crc32c: sums,
            hash: hash.digest(),
          });
        }
      };
      written.push(name);
      await withRetry(
        () => storage.write(joinPath(dir, name), body(), { size: layout.fileSize, signal: options.signal }),
        { signal: options.signal },
      );
      files[name] = {
        rank: 0,
        size: layout.fileSize,
        headerLength: layout.header.byteLength - 8,
        headerCrc32c: crc32c(layout.header),
      };
      bytes += layout.fileSize;
    }
    throwIfAborted(options.signal, "the write");
    const stored = entries.map((e): EntryMetadata => {
      if (e.kind === "value") return e;
      const chunk = chunks.get(e)!;
      return e.kind === "tensor"
        ? { kind: "tensor", key: e.key, dtype: e.dtype, shape: e.shape, chunks: [chunk] }
        : { kind: "bytes", key: e.key, byteLength: e.byteLength, chunks: [chunk] };
    });
    const metadata: CheckpointMetadata = {
      format: FORMAT_NAME,
      version: formatVersionOf(files, stored),
      worldSize: 1,
      createdAt: options.createdAt ?? new Date().toISOString(),
      checksum: { algorithm: "crc32c", blockSize },
      files,
      entries: stored,
      user: options.user ?? {},
    };
    const leftFiles = await commitCheckpoint(storage, dir, metadata, attempt, where, replacing, options.signal);
    return { bytes, files: groups.length, entries: entries.length, leftFiles };
  } catch (error) {
    await Promise.all(written.map((name) => storage.delete(joinPath(dir, name)).catch(() => undefined)));
    throw error;
  }
}
