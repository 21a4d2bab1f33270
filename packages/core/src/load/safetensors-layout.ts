import PQueue from "p-queue";
import { CheckpointError, isCheckpointError } from "../errors.js";
import { CAIRN_METADATA_KEY, parseExportedLayout } from "../format/exported-layout.js";
import {
  type CheckpointMetadata,
  type DataFileMetadata,
  type EntryMetadata,
  type ValueEntry,
  DEFAULT_BLOCK_SIZE,
  FORMAT_MAJOR,
  FORMAT_MINOR,
  FORMAT_NAME,
} from "../format/metadata.js";
import { baseName, parentDir } from "../format/naming.js";
import {
  MAX_INDEX_BYTES,
  SAFETENSORS_INDEX_FILE,
  SAFETENSORS_SINGLE_FILE,
  parseSafetensorsIndex,
} from "../format/safetensors-index.js";
import { checkKeyPath } from "../format/stored-keys.js";
import { type DType, itemSize } from "../state/dtypes.js";
import { type KeyPath, pathId } from "../state/state-dict.js";
import { withRetry } from "../storage/retry.js";
import { type StorageAdapter, joinPath } from "../storage/storage-adapter.js";
import { type SafetensorsFile, notSafetensors, readSafetensorsHeader } from "./safetensors-file.js";

/** Shard headers read at once. */
const HEADER_CONCURRENCY = 8;

/** A tensor (or blob) of a safetensors layout: its key path, and where its bytes are. */
export interface LaidOutTensor {
  readonly kind: "tensor" | "bytes";
  readonly key: KeyPath;
  /** Its name in the file's header. */
  readonly name: string;
  /** The file holding it, a name in the layout's `dir`. */
  readonly file: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** Absolute offset of its first byte in the file. */
  readonly byteOffset: number;
  readonly byteLength: number;
}

/**
 * A Hugging Face layout (shards and their index), or one safetensors file, read and checked:
 * what import writes into a checkpoint and what `load("hf+…")` reads from.
 */
export interface SafetensorsLayout {
  /** The directory holding the files, relative to the storage's root. */
  readonly dir: string;
  /** The files, by name in `dir`, in order (shards by number). */
  readonly files: ReadonlyMap<string, SafetensorsFile>;
  /** Tensors in file order, file by file; a file `cairn export` wrote also gives back blobs and values. */
  readonly entries: readonly (LaidOutTensor | ValueEntry)[];
  readonly user: Readonly<Record<string, unknown>>;
  /** Bytes read to find and check it: the index and the files' headers. */
  readonly bytesRead: number;
}

/** What reading `file`'s header took: its length, then the header itself. */
function headerBytes(file: SafetensorsFile): number {
  return 8 + file.dataStart;
}

function layoutError(where: string, problem: string): CheckpointError {
  return new CheckpointError("corrupt", `${where}: ${problem}; the layout is damaged or not one layout`, {
    context: { path: where },
  });
}

/**
 * Reads the safetensors layout at `path` (relative to the storage's root): an index
 * (`….json`) and the shards it names beside it; one `.safetensors` file; or a directory holding
 * `model.safetensors.index.json` or else `model.safetensors`. Only headers are read. Everything
 * is hostile and checked before anything uses it: the index (`parseSafetensorsIndex`), each
 * shard against the spec (`readSafetensorsHeader`), and the shards against the index — a shard
 * missing, a tensor in two shards, in a shard the index does not map it to, or mapped to a shard
 * that lacks it, and a `metadata.total_size` other than the tensors' bytes are all `corrupt`.
 * Tensor names become key paths split at dots (`invalid_argument` where one would hold another
 * or reach a prototype), except in a single file `cairn export` wrote, whose own layout is used.
 * Throws `not_found` when there is no layout at `path`.
 */
export async function readSafetensorsLayout(
  storage: StorageAdapter,
  path: string,
  where: string,
  signal?: AbortSignal,
): Promise<SafetensorsLayout> {
  const name = baseName(path);
  if (name.endsWith(".json")) return indexLayout(storage, path, where, signal);
  if (name.endsWith(".safetensors")) return singleFileLayout(storage, path, where, signal);
  const indexPath = joinPath(path, SAFETENSORS_INDEX_FILE);
  if ((await withRetry(() => storage.stat(indexPath), { signal })) !== null)
    return indexLayout(storage, indexPath, `${where}/${SAFETENSORS_INDEX_FILE}`, signal);
  const singlePath = joinPath(path, SAFETENSORS_SINGLE_FILE);
  if ((await withRetry(() => storage.stat(singlePath), { signal })) !== null)
    return singleFileLayout(storage, singlePath, `${where}/${SAFETENSORS_SINGLE_FILE}`, signal);
  throw new CheckpointError(
    "not_found",
    `${where} holds neither ${SAFETENSORS_INDEX_FILE} nor ${SAFETENSORS_SINGLE_FILE}; give the directory of a safetensors layout, its index, or a .safetensors file`,
    { context: { path: where } },
  );
}

/** The location of a file beside the one `where` names. */
function besides(where: string, name: string): string {
  return `${where.slice(0, where.lastIndexOf("/") + 1)}${name}`;
}

async function singleFileLayout(
  storage: StorageAdapter,
  path: string,
  where: string,
  signal: AbortSignal | undefined,
): Promise<SafetensorsLayout> {
  const dir = parentDir(path) ?? "";
  const name = baseName(path);
  const file = await readSafetensorsHeader(storage, path, where, signal);
  const files = new Map([[name, file]]);
  const raw = file.metadata[CAIRN_METADATA_KEY];
  const bytesRead = headerBytes(file);
  if (raw === undefined) return { dir, files, entries: tensorsByName(files, where), user: {}, bytesRead };
  const exported = parseExportedLayout(raw, new Set(file.tensors.map((t) => t.name)), where);
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  const entries = exported.entries.map((e): LaidOutTensor | ValueEntry => {
    if (!("name" in e)) return e as ValueEntry;
    const t = byName.get(e.name)!;
    if (e.kind === "bytes" && (t.dtype !== "uint8" || t.shape.length !== 1))
      throw notSafetensors(where, `blob ${e.name} must be a 1-D U8 tensor`);
    return laidOut(name, file, t, e.key, e.kind);
  });
  return { dir, files, entries, user: exported.user ?? {}, bytesRead };
}

async function indexLayout(
  storage: StorageAdapter,
  path: string,
  where: string,
  signal: AbortSignal | undefined,
): Promise<SafetensorsLayout> {
  const stat = await withRetry(() => storage.stat(path), { signal });
  if (!stat) throw new CheckpointError("not_found", `${where} does not exist`, { context: { path: where } });
  if (stat.size > MAX_INDEX_BYTES)
    throw layoutError(where, `the index holds ${stat.size} bytes, over the ${MAX_INDEX_BYTES} Cairn reads`);
  const index = parseSafetensorsIndex(
    await withRetry(() => storage.read(path, undefined, { signal }), { signal }),
    where,
  );
  const dir = parentDir(path) ?? "";
  const queue = new PQueue({ concurrency: HEADER_CONCURRENCY });
  const headers = await Promise.all(
    index.shards.map((shard) =>
      queue.add(async () => {
        try {
          return await readSafetensorsHeader(storage, joinPath(dir, shard), besides(where, shard), signal);
        } catch (error) {
          if (!isCheckpointError(error, "not_found")) throw error;
          throw layoutError(where, `the index names the shard ${shard}, which does not exist`);
        }
      }),
    ),
  );
  const files = new Map(index.shards.map((shard, i) => [shard, headers[i]!]));
  const holder = new Map<string, string>();
  let bytes = 0;
  for (const [shard, file] of files) {
    for (const t of file.tensors) {
      const other = holder.get(t.name);
      if (other !== undefined)
        throw layoutError(where, `tensor ${JSON.stringify(t.name)} is in both ${other} and ${shard}`);
      holder.set(t.name, shard);
      const mapped = index.weightMap.get(t.name);
      if (mapped !== shard) {
        throw layoutError(
          where,
          `${shard} holds tensor ${JSON.stringify(t.name)}, which the index ${mapped === undefined ? "does not name" : `maps to ${mapped}`}`,
        );
      }
      bytes += t.end - t.begin;
    }
  }
  for (const [name, shard] of index.weightMap) {
    if (!holder.has(name))
      throw layoutError(where, `the index maps tensor ${JSON.stringify(name)} to ${shard}, which does not hold it`);
  }
  if (index.totalSize !== undefined && index.totalSize !== bytes) {
    throw layoutError(
      where,
      `its metadata.total_size is ${index.totalSize} but the shards' tensors hold ${bytes} bytes`,
    );
  }
  const bytesRead = headers.reduce((n, file) => n + headerBytes(file), stat.size);
  return { dir, files, entries: tensorsByName(files, where), user: {}, bytesRead };
}

function laidOut(
  file: string,
  header: SafetensorsFile,
  t: SafetensorsFile["tensors"][number],
  key: KeyPath,
  kind: "tensor" | "bytes",
): LaidOutTensor {
  return {
    kind,
    key,
    name: t.name,
    file,
    dtype: t.dtype,
    shape: t.shape,
    byteOffset: header.dataStart + t.begin,
    byteLength: t.end - t.begin,
  };
}

/**
 * Every tensor of the files, in file order, keyed by its name split at dots as torch's fully
 * qualified names are. Throws `invalid_argument` for names that would reach a prototype or where
 * one name would hold another (`a` and `a.b`).
 */
function tensorsByName(files: ReadonlyMap<string, SafetensorsFile>, where: string): LaidOutTensor[] {
  const entries: LaidOutTensor[] = [];
  for (const [name, file] of files) {
    for (const t of [...file.tensors].sort((a, b) => a.begin - b.begin)) {
      const key = t.name.split(".");
      checkKeyPath(
        key,
        where,
        "invalid_argument",
        `tensor name ${t.name} would be the key path ${JSON.stringify(key)}`,
      );
      entries.push(laidOut(name, file, t, key, "tensor"));
    }
  }
  const ids = new Set(entries.map((e) => pathId(e.key)));
  for (const { key, name } of entries) {
    for (let n = 1; n < key.length; n++) {
      if (ids.has(pathId(key.slice(0, n)))) {
        throw new CheckpointError(
          "invalid_argument",
          `${where}: tensor names ${key.slice(0, n).join(".")} and ${name} cannot both be keys of one state dict (one would hold the other)`,
          { context: { path: where } },
        );
      }
    }
  }
  return entries;
}

/**
 * The layout as checkpoint metadata, for `load` to plan and read from like any checkpoint: each
 * tensor one whole chunk where the file has it. Safetensors files carry no checksums, so chunks
 * have none (`crc32c` empty, blocks of one element, so reads take exactly the bytes a target
 * needs) and the caller must read them without block checks; each file's header CRC32C is the one
 * computed when the layout was read, so a file changed since is still caught.
 */
export function layoutMetadata(layout: SafetensorsLayout): CheckpointMetadata {
  const files = Object.create(null) as Record<string, DataFileMetadata>;
  for (const [name, file] of layout.files) {
    files[name] = { rank: 0, size: file.size, headerLength: file.dataStart - 8, headerCrc32c: file.headerCrc32c };
  }
  const entries = layout.entries.map((e): EntryMetadata => {
    if (e.kind === "value") return e;
    const chunk = {
      offsets: e.shape.map(() => 0),
      sizes: e.shape,
      file: e.file,
      tensorName: e.name,
      byteOffset: e.byteOffset,
      byteLength: e.byteLength,
      blockSize: itemSize(e.dtype),
      crc32c: [],
    };
    return e.kind === "tensor"
      ? { kind: "tensor", key: e.key, dtype: e.dtype, shape: e.shape, chunks: [chunk] }
      : { kind: "bytes", key: e.key, byteLength: e.byteLength, chunks: [chunk] };
  });
  return {
    format: FORMAT_NAME,
    version: `${FORMAT_MAJOR}.${FORMAT_MINOR}`,
    worldSize: 1,
    createdAt: new Date(0).toISOString(),
    checksum: { algorithm: "crc32c", blockSize: DEFAULT_BLOCK_SIZE },
    files,
    entries,
    user: layout.user,
  };
}
