import { randomBytes } from "node:crypto";
import {
  type ChunkMetadata,
  type CheckpointMetadata,
  type DataFileMetadata,
  type EntryMetadata,
  type StorageAdapter,
  type ValueEntry,
  CheckpointError,
  DEFAULT_BLOCK_SIZE,
  FORMAT_MAJOR,
  FORMAT_MINOR,
  FORMAT_NAME,
  crc32c,
  displayKey,
  joinPath,
  layoutSafetensors,
  throwIfAborted,
  uniqueTensorNames,
  withRetry,
} from "@cairn/core";
import type { SourceTensor } from "./checkpoint-reader.js";
import { checkpointDestination, commitCheckpoint } from "./commit-checkpoint.js";
import { prefetched } from "./prefetch.js";

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

/** An entry to write: a tensor read from somewhere in ranges, or an inline value. */
export type EntrySource = SourceTensor | ValueEntry;

/** Consecutive tensors grouped into files of about `maxBytes`. */
function groupIntoFiles(tensors: readonly SourceTensor[], maxBytes: number): SourceTensor[][] {
  const files: SourceTensor[][] = [];
  let bytes = Infinity;
  for (const tensor of tensors) {
    if (bytes > 0 && bytes + tensor.byteLength > maxBytes) {
      files.push([]);
      bytes = 0;
    }
    files[files.length - 1]!.push(tensor);
    bytes += tensor.byteLength;
  }
  return files;
}

/**
 * Writes a checkpoint in format v1 from tensors read in ranges, streaming: every tensor is
 * read, checksummed and written `readBytes` at a time, so memory stays bounded whatever the
 * tensors' sizes. The commit protocol is core's: data files first (names unique to this
 * attempt), `metadata.json` last with an atomic create; a failure removes this attempt's files
 * and commits nothing. Each tensor is stored whole, as one chunk, as `save` stores an unsharded one.
 *
 * Throws `already_exists` if `dir` already holds a committed checkpoint, unless `force`: then the
 * old one is replaced only once the new one is complete, and stays readable if this fails.
 */
export async function writeCheckpoint(storage: StorageAdapter, dir: string, entries: readonly EntrySource[], options: WriteCheckpointOptions = {}): Promise<WrittenCheckpoint> {
  const where = `${storage.root.replace(/\/$/, "")}${dir ? `/${dir}` : ""}`;
  const replacing = await checkpointDestination(storage, dir, where, options.force === true, options.signal);
  const blockSize = options.blockSize ?? DEFAULT_BLOCK_SIZE;
  const readBytes = Math.max(blockSize, Math.floor((options.readBytes ?? 8 << 20) / blockSize) * blockSize);
  const attempt = randomBytes(6).toString("hex");
  const tensors = entries.filter((e): e is SourceTensor => e.kind !== "value");
  const groups = groupIntoFiles(tensors, options.maxFileBytes ?? 1 << 30);
  const files: Record<string, DataFileMetadata> = {};
  const chunks = new Map<SourceTensor, ChunkMetadata>();
  const written: string[] = [];
  let bytes = 0;
  try {
    for (const [index, group] of groups.entries()) {
      const name = `data-r0-${index}-${attempt}.safetensors`;
      const names = uniqueTensorNames(group.map((t) => displayKey(t.key)));
      const layout = layoutSafetensors(
        group.map((t, i) => ({ name: names[i]!, dtype: t.dtype, shape: t.shape, byteLength: t.byteLength })),
        { format: `${FORMAT_NAME}/${FORMAT_MAJOR}` },
      );
      const body = async function* (): AsyncGenerator<Uint8Array> {
        yield layout.header;
        for (const [i, tensor] of group.entries()) {
          const sums: number[] = [];
          const pieces = [];
          for (let at = 0; at < tensor.byteLength; at += readBytes) pieces.push({ at, length: Math.min(readBytes, tensor.byteLength - at) });
          for await (const data of prefetched(pieces, 2, async ({ at, length }) => {
            throwIfAborted(options.signal, "the write");
            const data = await tensor.read(at, length);
            if (data.byteLength !== length) {
              throw new CheckpointError("corrupt", `${displayKey(tensor.key)}: got ${data.byteLength} bytes at byte ${at} of the tensor where ${length} were expected; its source is truncated`, {
                context: { key: displayKey(tensor.key) },
              });
            }
            return data;
          })) {
            for (let b = 0; b < data.byteLength; b += blockSize) sums.push(crc32c(data.subarray(b, Math.min(data.byteLength, b + blockSize))));
            yield data;
            options.onWrite?.(data.byteLength);
          }
          chunks.set(tensor, {
            offsets: tensor.shape.map(() => 0),
            sizes: tensor.shape,
            file: name,
            tensorName: names[i]!,
            byteOffset: layout.offsets[i]!,
            byteLength: tensor.byteLength,
            crc32c: sums,
          });
        }
      };
      written.push(name);
      await withRetry(() => storage.write(joinPath(dir, name), body(), { size: layout.fileSize, signal: options.signal }), { signal: options.signal });
      files[name] = { rank: 0, size: layout.fileSize, headerLength: layout.header.byteLength - 8, headerCrc32c: crc32c(layout.header) };
      bytes += layout.fileSize;
    }
    throwIfAborted(options.signal, "the write");
    const metadata: CheckpointMetadata = {
      format: FORMAT_NAME,
      version: `${FORMAT_MAJOR}.${FORMAT_MINOR}`,
      worldSize: 1,
      createdAt: options.createdAt ?? new Date().toISOString(),
      checksum: { algorithm: "crc32c", blockSize },
      files,
      entries: entries.map((e): EntryMetadata => {
        if (e.kind === "value") return e;
        const chunk = chunks.get(e)!;
        return e.kind === "tensor"
          ? { kind: "tensor", key: e.key, dtype: e.dtype, shape: e.shape, chunks: [chunk] }
          : { kind: "bytes", key: e.key, byteLength: e.byteLength, chunks: [chunk] };
      }),
      user: options.user ?? {},
    };
    const leftFiles = await commitCheckpoint(storage, dir, metadata, attempt, where, replacing, options.signal);
    return { bytes, files: groups.length, entries: entries.length, leftFiles };
  } catch (error) {
    await Promise.all(written.map((name) => storage.delete(joinPath(dir, name)).catch(() => undefined)));
    throw error;
  }
}
