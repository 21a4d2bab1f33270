import { CheckpointError, isCheckpointError, throwIfAborted } from "../errors.js";
import { chunkBlockSize } from "../format/checksum-blocks.js";
import {
  type ChunkMetadata,
  type CheckpointMetadata,
  type DataFileMetadata,
  METADATA_FILE,
  isReferencedFile,
} from "../format/metadata.js";
import { parseMetadata } from "../format/metadata-json.js";
import { baseName, dataFilePath, isDataFileName, parentDir } from "../format/naming.js";
import type { DataFilePlan, WriteItem } from "../plan/save-planner.js";
import { type Leaf, tensorBytes } from "../state/leaf.js";
import { pathId } from "../state/state-dict.js";
import type { OpenedCheckpoint } from "../storage/checkpoint-location.js";
import { withRetry } from "../storage/retry.js";
import { joinPath } from "../storage/storage-adapter.js";
import { blockChecksumsAsync } from "#platform/save/checksum-workers.js";
import type { SaveOptions } from "./save-options.js";
import type { KnownChecksums, WrittenChunk } from "./write-data-file.js";

/** A committed sibling checkpoint an incremental save compares its chunks with. */
export interface IncrementalBase {
  /** The sibling's directory name, as `incremental.base` gave it. */
  readonly name: string;
  readonly metadata: CheckpointMetadata;
  /** Base chunks by key and box, each with the file record a new step would reference (its `dir` where the bytes really are). */
  readonly chunks: ReadonlyMap<
    string,
    {
      readonly chunk: ChunkMetadata;
      readonly dtype: string;
      readonly file: DataFileMetadata & { readonly dir: string };
    }
  >;
}

function chunkId(key: WriteItem["key"], offsets: readonly number[], sizes: readonly number[]): string {
  return `${pathId(key)}\u0000${offsets.join(",")}\u0000${sizes.join(",")}`;
}

/**
 * Reads the base of an incremental save: a committed checkpoint beside this one (`base` is its
 * directory's name), refusing anything that is not. Chains stay one hop: a base file that the
 * base itself referenced in another sibling is recorded with that sibling's name.
 */
export async function readIncrementalBase(
  location: OpenedCheckpoint,
  base: string,
  options: SaveOptions,
): Promise<IncrementalBase> {
  const parent = parentDir(location.dir);
  if (typeof base !== "string" || !isDataFileName(base) || base === baseName(location.dir)) {
    throw new CheckpointError(
      "invalid_argument",
      `incremental.base must name a committed checkpoint beside this one (its directory's name, like "100"), not ${JSON.stringify(base)}`,
    );
  }
  if (parent === undefined) {
    throw new CheckpointError(
      "invalid_argument",
      `an incremental save references files of a sibling checkpoint, and ${location.where} is at its storage's root; save inside a directory of checkpoints`,
      {
        context: { path: location.where },
      },
    );
  }
  const path = joinPath(parent, base, METADATA_FILE);
  let metadata: CheckpointMetadata;
  try {
    metadata = parseMetadata(
      await withRetry(() => location.storage.read(path, undefined, { signal: options.signal }), {
        policy: options.retry,
        signal: options.signal,
      }),
      path,
    );
  } catch (error) {
    if (!isCheckpointError(error, "not_found")) throw error;
    throw new CheckpointError(
      "not_found",
      `the base of the incremental save, ${base}, is not a committed checkpoint beside ${location.where}`,
      { cause: error, context: { path } },
    );
  }
  const chunks = new Map<string, { chunk: ChunkMetadata; dtype: string; file: DataFileMetadata & { dir: string } }>();
  for (const entry of metadata.entries) {
    if (entry.kind === "value") continue;
    const dtype = entry.kind === "tensor" ? entry.dtype : "uint8";
    for (const chunk of entry.chunks) {
      const file = metadata.files[chunk.file]!;
      chunks.set(chunkId(entry.key, chunk.offsets, chunk.sizes), {
        chunk,
        dtype,
        file: { ...file, dir: file.dir ?? base },
      });
    }
  }
  return { name: base, metadata, chunks };
}

/** Bytes a group of candidates may hold at once while they are checksummed (tfjs tensors are read into memory). */
const GROUP_BYTES = 64 << 20;

/**
 * Splits a rank's files into what it must write and the chunks it references: an item whose key,
 * dtype, box and content hash (XXH3-128) equal a chunk of the base is not written; its chunk
 * points at the base's bytes. A base written before content hashes (format 2.1 or older) has
 * none to compare with, so every item is written (a full save that the next one can use as its
 * base). The hashes and CRCs are computed once here: `sums` hands those of changed items to the
 * writer, so nothing is hashed twice. A file left with no items is dropped.
 */
export async function skipUnchanged(
  files: readonly DataFilePlan[],
  leaves: readonly Leaf[],
  base: IncrementalBase,
  options: SaveOptions,
  blockSize: number,
): Promise<{
  files: DataFilePlan[];
  referenced: WrittenChunk[];
  sharedFiles: Record<string, DataFileMetadata>;
  sums: Map<WriteItem, KnownChecksums>;
}> {
  const candidates: {
    item: WriteItem;
    chunk: ChunkMetadata & { readonly hash: string };
    file: DataFileMetadata & { dir: string };
    blockSize: number;
  }[] = [];
  for (const file of files) {
    for (const item of file.items) {
      const found = base.chunks.get(chunkId(item.key, item.chunk.offsets, item.chunk.sizes));
      const hash = found?.chunk.hash;
      if (
        !found ||
        hash === undefined ||
        found.dtype !== item.dtype ||
        found.chunk.byteLength !== item.byteLength ||
        found.chunk.sizes.length !== item.chunk.sizes.length
      )
        continue;
      const own = chunkBlockSize(item.dtype, item.chunk.sizes, blockSize);
      candidates.push({ item, chunk: { ...found.chunk, hash }, file: found.file, blockSize: own });
    }
  }
  const sums = new Map<WriteItem, KnownChecksums>();
  const unchanged = new Set<WriteItem>();
  const referenced: WrittenChunk[] = [];
  const sharedFiles = Object.create(null) as Record<string, DataFileMetadata>;
  for (let start = 0; start < candidates.length;) {
    throwIfAborted(options.signal, "the save");
    let bytes = 0;
    let end = start;
    while (end < candidates.length && (end === start || bytes + candidates[end]!.item.byteLength <= GROUP_BYTES))
      bytes += candidates[end++]!.item.byteLength;
    const group = candidates.slice(start, end);
    start = end;
    const datas = await Promise.all(group.map(({ item }) => leafBytes(leaves[item.leafIndex]!)));
    const computed = await blockChecksumsAsync(
      datas,
      group.map((c) => c.blockSize),
    );
    group.forEach((candidate, k) => {
      const hash = computed.hashes?.[k];
      if (datas[k]!.byteLength !== candidate.item.byteLength || hash !== candidate.chunk.hash) {
        sums.set(candidate.item, hash === undefined ? { sums: computed.sums[k]! } : { sums: computed.sums[k]!, hash });
        return;
      }
      unchanged.add(candidate.item);
      sharedFiles[candidate.chunk.file] = candidate.file;
      referenced.push({ item: candidate.item, chunk: candidate.chunk });
    });
  }
  const written = files
    .map((file) => ({ ...file, items: file.items.filter((item) => !unchanged.has(item)) }))
    .filter((file) => file.items.length > 0);
  for (const file of written) {
    if (Object.hasOwn(sharedFiles, file.name))
      throw new CheckpointError(
        "invalid_argument",
        `the save planner named a data file ${file.name}, as the base ${base.name} names one of its own; plan with this attempt's names`,
      );
  }
  return { files: written, referenced, sharedFiles, sums };
}

async function leafBytes(leaf: Leaf): Promise<Uint8Array> {
  if (leaf.kind === "bytes") return leaf.data;
  if (leaf.kind === "tensor") return tensorBytes(leaf);
  return new Uint8Array(0);
}

/**
 * Checks that the sibling files a save references still exist with their recorded sizes: at a
 * save's start and again right before its commit, so a step never commits pointing at bytes a
 * concurrent deletion removed. Throws `not_found`, naming the file.
 */
export async function checkSharedFiles(
  location: Pick<OpenedCheckpoint, "storage" | "dir">,
  files: Readonly<Record<string, DataFileMetadata>>,
  options: Pick<SaveOptions, "retry" | "signal">,
): Promise<void> {
  await Promise.all(
    Object.entries(files)
      .filter(([, info]) => isReferencedFile(info))
      .map(async ([name, info]) => {
        const path = dataFilePath(location.dir, name, info);
        const stat = await withRetry(() => location.storage.stat(path), {
          policy: options.retry,
          signal: options.signal,
        });
        if (stat === null || stat.size !== info.size) {
          throw new CheckpointError(
            "not_found",
            `the incremental save references ${name} of ${info.dir!}, which is ${stat === null ? "gone" : `${stat.size} bytes, not ${info.size}`} (deleted by retention or gc meanwhile?); nothing was committed, save again`,
            {
              context: { path, file: name },
            },
          );
        }
      }),
  );
}
