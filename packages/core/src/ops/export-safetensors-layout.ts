import PQueue from "p-queue";
import { CheckpointError, throwIfAborted } from "../errors.js";
import type { TensorEntry } from "../format/metadata.js";
import { layoutSafetensors } from "../format/safetensors.js";
import {
  SAFETENSORS_INDEX_FILE,
  SAFETENSORS_SINGLE_FILE,
  encodeSafetensorsIndex,
  isSafetensorsLayoutFile,
  shardFileName,
} from "../format/safetensors-index.js";
import { type DType, itemSize, numel } from "../state/dtypes.js";
import { convertFloats, isFloatDType, FLOAT_DTYPES } from "../state/float-convert.js";
import { type KeyPath, displayKey } from "../state/state-dict.js";
import { withRetry } from "../storage/retry.js";
import { type StorageAdapter, joinPath } from "../storage/storage-adapter.js";
import type { CheckpointReader } from "./checkpoint-reader.js";
import { prefetched } from "../storage/prefetch.js";
import { permuteDims } from "./row-major.js";
import { tensorPieces } from "./source-tensor.js";

/** huggingface_hub's and transformers' default shard size. */
export const DEFAULT_MAX_SHARD_BYTES = 5_000_000_000;

/** A stored tensor as a naming preset sees it. */
export interface LayoutCandidate {
  readonly key: KeyPath;
  /** Its dotted key, the name it gets unless renamed. */
  readonly dotted: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
}

/** How a preset writes a tensor: its name, and its dimensions reordered where the target framework lays them out otherwise. */
export interface LayoutName {
  readonly name: string;
  /** Dimension `i` written is the stored tensor's dimension `permutation[i]` (a Keras Dense kernel `[in, out]` as torch's `[out, in]`: `[1, 0]`). */
  readonly permutation?: readonly number[];
}

/** A naming preset: one name (or undefined: the dotted key, as stored) for each tensor, given all of them at once. */
export type LayoutNaming = (tensors: readonly LayoutCandidate[]) => readonly (LayoutName | undefined)[];

export interface LayoutExportOptions {
  /** A shard is closed before a tensor would take it past this many bytes of tensors; a larger tensor gets a shard of its own (default 5 GB, as huggingface_hub). */
  readonly maxShardBytes?: number;
  /** Export only tensors whose dotted key is one of these or starts with one and a dot (`model` takes `model.layers.0.w`, not `models.x`). */
  readonly keys?: readonly string[];
  /** A naming preset (`@cairn/tfjs`'s `torchStyleNames`), applied before `rename`. */
  readonly names?: LayoutNaming;
  /** Prefix rewrites of the names, the first rule whose `from` starts a name applies (`{from: "model.", to: ""}` drops a prefix). */
  readonly rename?: readonly { readonly from: string; readonly to: string }[];
  /** Write every floating tensor in this floating dtype (rounded to nearest even, as torch's `.to`); integers and bools stay as they are. */
  readonly dtype?: DType;
  /** Replace a layout already in the directory: its files are deleted first (the index first), so no mix is ever visible. */
  readonly force?: boolean;
  /** Bytes of a tensor read, converted and written at once (default 8 MiB). */
  readonly readBytes?: number;
  /** Shards written at once (default 2, as `copyCheckpoint` copies files). */
  readonly concurrency?: number;
  /** Called once the tensors are chosen, with the bytes they will be written as (for a progress bar). */
  readonly onPlan?: (totalSize: number) => void;
  readonly onWrite?: (bytes: number) => void;
  readonly signal?: AbortSignal;
}

export interface LayoutExportResult {
  /** The shard files, in order, then the index. */
  readonly files: readonly string[];
  readonly tensors: number;
  /** Bytes of the tensors (the index's `total_size`). */
  readonly totalSize: number;
  /** Bytes written: shards and index. */
  readonly bytes: number;
  /** Entries of the checkpoint not exported: blobs, values, and tensors `keys` left out. */
  readonly skipped: number;
}

/** A tensor as it is written: its entry, name, dimension order, dtype, shape and bytes. */
interface Planned {
  readonly entry: TensorEntry;
  readonly name: string;
  readonly permutation: readonly number[] | undefined;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly byteLength: number;
}

function invalid(message: string): CheckpointError {
  return new CheckpointError("invalid_argument", message);
}

function selected(dotted: string, keys: readonly string[] | undefined): boolean {
  return keys === undefined || keys.some((k) => dotted === k || dotted.startsWith(`${k}.`));
}

function checkPermutation(permutation: readonly number[], rank: number, name: string): void {
  const sorted = [...permutation].sort((a, b) => a - b);
  if (sorted.length !== rank || sorted.some((d, i) => d !== i))
    throw invalid(
      `the naming preset gave ${name} the permutation ${JSON.stringify(permutation)}, which does not reorder its ${rank} dimensions`,
    );
}

/** The tensors to export, named, in the checkpoint's order; refuses a selection that names nothing, or two tensors alike. */
function plan(entries: readonly TensorEntry[], options: LayoutExportOptions): Planned[] {
  const { dtype } = options;
  if (dtype !== undefined && !isFloatDType(dtype))
    throw invalid(`the export dtype must be floating (${FLOAT_DTYPES.join(", ")}), not ${dtype}`);
  const candidates = entries.map((e) => ({ key: e.key, dotted: displayKey(e.key), dtype: e.dtype, shape: e.shape }));
  const named = options.names?.(candidates) ?? [];
  const taken = new Map<string, string>();
  return entries.map((entry, i) => {
    const preset = named[i];
    let name = preset?.name ?? candidates[i]!.dotted;
    const rule = options.rename?.find((r) => name.startsWith(r.from));
    if (rule) name = rule.to + name.slice(rule.from.length);
    if (name === "" || name === "__metadata__")
      throw invalid(
        `${candidates[i]!.dotted} would be named ${JSON.stringify(name)}, which a safetensors file cannot hold`,
      );
    const other = taken.get(name);
    if (other !== undefined)
      throw invalid(
        `${other} and ${candidates[i]!.dotted} would both be named ${name}; rename one of them (--rename FROM=TO)`,
      );
    taken.set(name, candidates[i]!.dotted);
    const permutation = preset?.permutation;
    if (permutation) checkPermutation(permutation, entry.shape.length, name);
    const outDType = dtype !== undefined && isFloatDType(entry.dtype) ? dtype : entry.dtype;
    const shape = permutation ? permutation.map((p) => entry.shape[p]!) : entry.shape;
    return { entry, name, permutation, dtype: outDType, shape, byteLength: numel(shape) * itemSize(outDType) };
  });
}

/** Consecutive tensors in shards of at most `maxBytes` (a bigger tensor alone), as huggingface_hub splits a state dict. */
function shardsOf(tensors: readonly Planned[], maxBytes: number): Planned[][] {
  const shards: Planned[][] = [];
  let current: Planned[] = [];
  let bytes = 0;
  for (const t of tensors) {
    if (t.byteLength > maxBytes) {
      shards.push([t]);
      continue;
    }
    if (bytes + t.byteLength > maxBytes && current.length > 0) {
      shards.push(current);
      current = [];
      bytes = 0;
    }
    current.push(t);
    bytes += t.byteLength;
  }
  if (current.length > 0) shards.push(current);
  return shards;
}

/** A tensor's bytes as written, in order: read in pieces (or in bands across a reordered dimension), converted to its dtype. */
function writtenPieces(
  reader: CheckpointReader,
  t: Planned,
  readBytes: number,
  signal?: AbortSignal,
): AsyncIterable<Uint8Array> {
  const size = itemSize(t.entry.dtype);
  const convert = (bytes: Uint8Array): Uint8Array =>
    t.dtype === t.entry.dtype ? bytes : convertFloats(bytes, t.entry.dtype, t.dtype);
  const { permutation } = t;
  if (!permutation || permutation.every((p, i) => p === i)) {
    const source = reader.tensor(t.entry);
    return mapped(tensorPieces(source, Math.max(size, Math.floor(readBytes / size) * size), signal), convert);
  }
  // Output rows follow the stored dimension `permutation[0]`: a band of its indices is one box, reordered in memory.
  const lead = permutation[0]!;
  const rowElements = numel(t.entry.shape) / Math.max(1, t.entry.shape[lead]!);
  const band = Math.max(1, Math.floor(readBytes / Math.max(1, rowElements * size)));
  const bands: { offsets: number[]; sizes: number[] }[] = [];
  for (let at = 0; at < t.entry.shape[lead]!; at += band) {
    bands.push({
      offsets: t.entry.shape.map((_, d) => (d === lead ? at : 0)),
      sizes: t.entry.shape.map((s, d) => (d === lead ? Math.min(band, s - at) : s)),
    });
  }
  return prefetched(bands, 2, async (box) => {
    throwIfAborted(signal, "the export");
    return convert(permuteDims(await reader.readBox(t.entry, box), box.sizes, permutation, size));
  });
}

async function* mapped(
  pieces: AsyncIterable<Uint8Array>,
  f: (piece: Uint8Array) => Uint8Array,
): AsyncGenerator<Uint8Array> {
  for await (const piece of pieces) yield f(piece);
}

/** The layout files a directory already holds (the index, the single file, shards), the commit markers first. */
async function existingLayout(storage: StorageAdapter, dir: string, signal?: AbortSignal): Promise<string[]> {
  const prefix = joinPath(dir, "model");
  const found: string[] = [];
  for await (const object of storage.list(prefix)) {
    const name = object.path.slice(dir === "" ? 0 : dir.length + 1);
    if (!name.includes("/") && isSafetensorsLayoutFile(name)) found.push(name);
    if (signal?.aborted) break;
  }
  const first = (n: string): number => (n === SAFETENSORS_INDEX_FILE || n === SAFETENSORS_SINGLE_FILE ? 0 : 1);
  return found.sort((a, b) => first(a) - first(b) || (a < b ? -1 : 1));
}

/**
 * Writes the tensors of a committed checkpoint as a Hugging Face layout in the directory `dir`:
 * `model-00001-of-0000N.safetensors` … (`{"format": "pt"}`) and `model.safetensors.index.json`
 * (`metadata.total_size`, `weight_map`), which transformers, huggingface_hub, vLLM and DCP read.
 * Like DCP's `HuggingFaceStorageWriter` and `consolidate_safetensors_files`, from any checkpoint
 * (sharded over any number of ranks, incremental or not): each tensor is whole, its ranges read
 * once through `reader` (every block verified) and written `readBytes` at a time, so memory stays
 * bounded whatever the checkpoint's size. Blobs and values are not weights and are left out.
 *
 * Committed like a checkpoint: shards first (`concurrency` at once), each an atomic create, the index last, so the
 * directory holds a layout only once it is complete; a failure removes the shards written. A
 * directory that already holds a layout is `already_exists` unless `force` (then the old layout's
 * files are deleted first, its index first). Other files there (config.json, a tokenizer) are
 * never touched. Called by `cairn export --hf`. Throws `invalid_argument` (a selection naming
 * nothing, two tensors named alike, a dtype that is not floating), `corrupt` for a damaged
 * checkpoint, storage errors as they come.
 */
export async function exportSafetensorsLayout(
  reader: CheckpointReader,
  out: { readonly storage: StorageAdapter; readonly dir: string; readonly where: string },
  options: LayoutExportOptions = {},
): Promise<LayoutExportResult> {
  const { storage, dir, where } = out;
  const { signal } = options;
  const maxShardBytes = options.maxShardBytes ?? DEFAULT_MAX_SHARD_BYTES;
  if (!Number.isSafeInteger(maxShardBytes) || maxShardBytes <= 0)
    throw invalid(`the largest shard must be a positive number of bytes, not ${maxShardBytes}`);
  const { entries } = reader.metadata;
  const chosen = entries.filter(
    (e): e is TensorEntry => e.kind === "tensor" && selected(displayKey(e.key), options.keys),
  );
  if (chosen.length === 0) {
    throw invalid(
      `${options.keys ? `no tensor's key is or starts with ${options.keys.join(", ")}` : "the checkpoint holds no tensor"}: nothing to export`,
    );
  }
  const tensors = plan(chosen, options);
  const shards = shardsOf(tensors, maxShardBytes);
  const existing = await existingLayout(storage, dir, signal);
  if (existing.length > 0 && options.force !== true) {
    throw new CheckpointError(
      "already_exists",
      `${where} already holds a safetensors layout (${existing.join(", ")}); choose another directory or pass --force to replace it`,
      { context: { path: where } },
    );
  }
  for (const name of existing) await withRetry(() => storage.delete(joinPath(dir, name)), { signal });
  const totalSize = tensors.reduce((n, t) => n + t.byteLength, 0);
  options.onPlan?.(totalSize);
  const readBytes = options.readBytes ?? 8 << 20;
  const files = shards.map((_, i) => shardFileName(i + 1, shards.length));
  const created: string[] = [];
  // The first failure stops the other shards; every write has settled before the failed export removes its shards.
  const stop = new AbortController();
  const writing = signal ? AbortSignal.any([signal, stop.signal]) : stop.signal;
  let firstFailure: unknown;
  const queue = new PQueue({ concurrency: options.concurrency ?? 2 });
  try {
    const settled = await Promise.allSettled(
      shards.map((shard, i) =>
        queue.add(async () => {
          const layout = layoutSafetensors(
            shard.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, byteLength: t.byteLength })),
            { format: "pt" },
          );
          const body = async function* (): AsyncGenerator<Uint8Array> {
            yield layout.header;
            for (const t of shard) {
              for await (const piece of writtenPieces(reader, t, readBytes, writing)) {
                yield piece;
                options.onWrite?.(piece.byteLength);
              }
            }
          };
          try {
            const path = joinPath(dir, files[i]!);
            await withRetry(
              () => storage.write(path, body(), { size: layout.fileSize, signal: writing, ifAbsent: true }),
              { signal: writing },
            );
          } catch (error) {
            if (!stop.signal.aborted) {
              firstFailure = error;
              stop.abort(error);
            }
            throw error;
          }
          created.push(files[i]!);
          return layout.fileSize;
        }),
      ),
    );
    const failed = settled.find((s) => s.status === "rejected");
    if (failed) throw firstFailure ?? failed.reason;
    const weightMap = new Map(shards.flatMap((shard, i) => shard.map((t) => [t.name, files[i]!] as const)));
    const index = encodeSafetensorsIndex(totalSize, weightMap);
    await withRetry(() => storage.write(joinPath(dir, SAFETENSORS_INDEX_FILE), index, { signal, ifAbsent: true }), {
      signal,
    });
    const shardBytes = settled.reduce((n, s) => n + (s.status === "fulfilled" ? s.value : 0), 0);
    return {
      files: [...files, SAFETENSORS_INDEX_FILE],
      tensors: tensors.length,
      totalSize,
      bytes: shardBytes + index.byteLength,
      skipped: entries.length - tensors.length,
    };
  } catch (error) {
    await Promise.all(created.map((file) => storage.delete(joinPath(dir, file)).catch(() => undefined)));
    throw error;
  }
}
