import { randomBytes } from "node:crypto";
import PQueue from "p-queue";
import { type OpenedCheckpoint, type CheckpointOptions, openCheckpoint } from "./checkpoint-location.js";
import { blockChecksumsAsync } from "./checksum-workers.js";
import { crc32c } from "./crc32c.js";
import { DefaultSavePlanner, tensorName } from "./default-save-planner.js";
import { CheckpointError, cancelledError, isCheckpointError, throwIfAborted } from "./errors.js";
import { type Leaf, flattenStateDict, tensorBytes } from "./flatten.js";
import {
  type ChunkMetadata,
  type CheckpointMetadata,
  type DataFileMetadata,
  type EntryMetadata,
  DEFAULT_BLOCK_SIZE,
  FORMAT_MAJOR,
  FORMAT_MINOR,
  FORMAT_NAME,
  METADATA_FILE,
  parseMetadata,
} from "./metadata.js";
import { withRetry } from "./retry.js";
import { layoutSafetensors } from "./safetensors.js";
import type { DataFilePlan, GlobalSavePlan, SavePlan, SavePlanner, WriteItem } from "./save-planner.js";
import { type StateDict, displayKey, pathId } from "./state-dict.js";
import { joinPath } from "./storage/storage-adapter.js";

export interface SaveOptions extends CheckpointOptions {
  /** User metadata stored in `metadata.json` (step, metrics, anything JSON). */
  readonly metadata?: Readonly<Record<string, unknown>>;
  readonly planner?: SavePlanner;
  /** Data files each rank writes in parallel (default 4). */
  readonly concurrency?: number;
  /** Bytes per CRC32C block (default 1 MiB). */
  readonly blockSize?: number;
}

/** What a save did, for logs. */
export interface SaveResult {
  /** Where the checkpoint was committed. */
  readonly checkpoint: string;
  /** Bytes this rank wrote into data files. */
  readonly bytes: number;
  /** Data files this rank wrote. */
  readonly files: number;
  /** Entries in the checkpoint (all ranks). */
  readonly entries: number;
  readonly seconds: number;
}

/** What one rank reports after writing its files: the file metadata and chunks, or why it failed. */
type RankOutcome =
  | { readonly ok: true; readonly files: Record<string, DataFileMetadata>; readonly chunks: WrittenChunk[]; readonly bytes: number }
  | { readonly ok: false; readonly code: CheckpointError["code"]; readonly message: string };

interface WrittenChunk {
  readonly item: WriteItem;
  readonly chunk: ChunkMetadata;
}

/**
 * Saves a state dict as a checkpoint, like `torch.distributed.checkpoint.save`. Every rank of
 * the process group calls it with its own state dict. The checkpoint is committed by writing
 * `metadata.json` last, only after every rank's data files are durable; a failure or an abort
 * anywhere commits nothing and removes this attempt's data files.
 *
 * Throws `invalid_argument` for a state dict that cannot be saved (nothing is written),
 * `already_exists` if the checkpoint is already committed, `cancelled` on abort, and
 * `storage` when the storage fails beyond the retry policy.
 */
export async function save(stateDict: StateDict, checkpointIdOrOptions: string | SaveOptions): Promise<SaveResult> {
  const options = saveOptionsOf(checkpointIdOrOptions);
  const started = performance.now();
  return saveLeaves(await flattenStateDict(stateDict), options, started);
}

export function saveOptionsOf(checkpointIdOrOptions: string | SaveOptions): SaveOptions {
  return typeof checkpointIdOrOptions === "string" ? { checkpointId: checkpointIdOrOptions } : checkpointIdOrOptions;
}

/** Plans, writes and commits already flattened (and, for a background save, staged) leaves. */
export async function saveLeaves(leaves: readonly Leaf[], options: SaveOptions, started = performance.now()): Promise<SaveResult> {
  const location = await openCheckpoint(options);
  try {
    const prepared = await planSave(leaves, location, options);
    const result = await writeAndCommit(prepared, location, options);
    return { ...result, seconds: (performance.now() - started) / 1000 };
  } finally {
    await location.release();
  }
}

/** A plan agreed by every rank, ready to write. */
export interface PreparedSave {
  readonly leaves: readonly Leaf[];
  readonly plan: GlobalSavePlan;
  readonly myFiles: readonly DataFilePlan[];
  /** Every rank's local plan on the coordinator (it orders the metadata's entries); others hold only their own. */
  readonly plans: readonly SavePlan[];
}

/** Collective: local plans are gathered, the coordinator makes the global plan and broadcasts it. */
export async function planSave(leaves: readonly Leaf[], location: OpenedCheckpoint, options: SaveOptions): Promise<PreparedSave> {
  const { group } = location;
  throwIfAborted(options.signal, "the save");
  const planner = options.planner ?? new DefaultSavePlanner();
  // Checked before any byte is written, so a save onto a committed checkpoint fails fast; the ifAbsent commit still decides races.
  const exists = group.rank === 0 && (await location.storage.stat(joinPath(location.dir, METADATA_FILE))) !== null;
  const plans = await group.allGather(planner.createLocalPlan(leaves, group.rank));
  let decision: GlobalSavePlan | { error: string } | undefined;
  let plannerError: unknown;
  if (group.rank === 0) {
    try {
      decision = exists
        ? { error: "exists" }
        : planner.createGlobalPlan(plans, { attempt: randomBytes(6).toString("hex"), filesPerRank: options.concurrency ?? 4 });
    } catch (error) {
      plannerError = error;
      decision = { error: (error as Error).message };
    }
  }
  const plan = await group.broadcast(decision);
  if ("error" in plan) {
    if (plan.error === "exists") throw alreadyCommitted(location);
    throw plannerError ?? new CheckpointError("invalid_argument", `the coordinator could not plan the save: ${plan.error}`);
  }
  return { leaves, plan, myFiles: plan.files[group.rank] ?? [], plans };
}

function alreadyCommitted(location: OpenedCheckpoint): CheckpointError {
  return new CheckpointError(
    "already_exists",
    `a checkpoint is already committed at ${location.where}; save to a new location or delete that one first`,
    { context: { path: location.where } },
  );
}

/**
 * Collective: every rank writes its files; outcomes are gathered; the coordinator commits only
 * if all succeeded and tells everyone. Data files of a failed attempt are removed by their writers.
 */
export async function writeAndCommit(
  prepared: PreparedSave,
  location: OpenedCheckpoint,
  options: SaveOptions,
): Promise<Omit<SaveResult, "seconds">> {
  const { group } = location;
  const blockSize = options.blockSize ?? DEFAULT_BLOCK_SIZE;
  let outcome: RankOutcome;
  try {
    outcome = await writeRankFiles(prepared, location, options, blockSize);
  } catch (error) {
    const e = error instanceof CheckpointError ? error : new CheckpointError("storage", (error as Error).message, { cause: error });
    outcome = { ok: false, code: e.code, message: e.message };
  }
  const outcomes = await group.allGather(outcome);
  let commit: { ok: true; entries: number } | { ok: false; code: CheckpointError["code"]; message: string };
  if (group.rank === 0) {
    try {
      commit = await commitOnCoordinator(outcomes, prepared, location, options, blockSize);
    } catch (error) {
      const e = error instanceof CheckpointError ? error : new CheckpointError("storage", (error as Error).message, { cause: error });
      commit = { ok: false, code: e.code, message: e.message };
    }
    commit = await group.broadcast(commit);
  } else {
    commit = await group.broadcast<typeof commit>(undefined);
  }
  if (!commit.ok) {
    await removeFiles(location, prepared.myFiles);
    const failed = outcomes.findIndex((o) => !o.ok);
    if (!outcome.ok && options.signal?.aborted) throw cancelledError(options.signal, "the save");
    throw new CheckpointError(commit.code, commit.message, {
      context: { path: location.where, ...(failed >= 0 ? { rank: failed } : {}) },
    });
  }
  return {
    checkpoint: location.where,
    bytes: outcome.ok ? outcome.bytes : 0,
    files: prepared.myFiles.length,
    entries: commit.entries,
  };
}

async function writeRankFiles(prepared: PreparedSave, location: OpenedCheckpoint, options: SaveOptions, blockSize: number): Promise<RankOutcome> {
  const queue = new PQueue({ concurrency: Math.max(1, options.concurrency ?? 4) });
  const files: Record<string, DataFileMetadata> = {};
  const chunks: WrittenChunk[] = [];
  let bytes = 0;
  // allSettled, not all: every write must have finished or failed before a failed save removes its files.
  const settled = await Promise.allSettled(
    prepared.myFiles.map((file) =>
      queue.add(async () => {
        const written = await writeDataFile(file, prepared.leaves, location, options, blockSize);
        files[file.name] = written.file;
        chunks.push(...written.chunks);
        bytes += written.file.size;
      }),
    ),
  );
  const failure = settled.find((s) => s.status === "rejected");
  if (failure) throw failure.reason;
  return { ok: true, files, chunks, bytes };
}

/** Items are read and checksummed in groups of up to this many bytes (one item if larger). */
const GROUP_BYTES = 64 << 20;
/** Runs of items smaller than this are copied into one buffer, so they go out in a single write. */
const COALESCE_BELOW = 4 << 20;

/** Consecutive items of a file, each group at most GROUP_BYTES unless a single item is larger. */
function groupItems(items: readonly WriteItem[]): number[][] {
  const groups: number[][] = [];
  let bytes = Infinity;
  items.forEach((item, i) => {
    if (bytes + item.byteLength > GROUP_BYTES) {
      groups.push([]);
      bytes = 0;
    }
    groups[groups.length - 1]!.push(i);
    bytes += item.byteLength;
  });
  return groups;
}

/** The group's bytes as few chunks: big items as they are, runs of small ones copied together (up to COALESCE_BELOW each). */
function* coalesce(datas: readonly Uint8Array[]): Generator<Uint8Array> {
  let run: Uint8Array[] = [];
  let runBytes = 0;
  const flush = function* (): Generator<Uint8Array> {
    if (run.length === 1) yield run[0]!;
    else if (run.length > 1) {
      const joined = new Uint8Array(run.reduce((n, d) => n + d.byteLength, 0));
      let at = 0;
      for (const d of run) {
        joined.set(d, at);
        at += d.byteLength;
      }
      yield joined;
    }
    run = [];
    runBytes = 0;
  };
  for (const data of datas) {
    if (data.byteLength >= COALESCE_BELOW) {
      yield* flush();
      yield data;
    } else {
      if (runBytes + data.byteLength > COALESCE_BELOW) yield* flush();
      run.push(data);
      runBytes += data.byteLength;
    }
  }
  yield* flush();
}

/**
 * Streams one data file: the safetensors header (known from shapes alone), then the items'
 * bytes. Items go in groups: a group's bytes are read and checksummed while the previous group
 * is written, with one checksum round trip and few writes per group, because a background save
 * may get only one event-loop turn per training step. At most two groups' bytes are held at once
 * per file. A transient storage failure rewrites the whole file.
 */
async function writeDataFile(
  file: DataFilePlan,
  leaves: readonly Leaf[],
  location: OpenedCheckpoint,
  options: SaveOptions,
  blockSize: number,
): Promise<{ file: DataFileMetadata; chunks: WrittenChunk[] }> {
  const names = uniqueNames(file.items.map(tensorName));
  const layout = layoutSafetensors(
    file.items.map((item, i) => ({ name: names[i]!, dtype: item.dtype, shape: item.chunk.sizes, byteLength: item.byteLength })),
    { format: `${FORMAT_NAME}/${FORMAT_MAJOR}` },
  );
  const rank = location.group.rank;
  const groups = groupItems(file.items);
  const prepare = async (group: readonly number[]): Promise<{ group: readonly number[]; datas: Uint8Array[]; sums: number[][] }> => {
    throwIfAborted(options.signal, "the save");
    const datas: Uint8Array[] = [];
    for (const i of group) {
      const item = file.items[i]!;
      const leaf = leaves[item.leafIndex]!;
      const data = leaf.kind === "tensor" ? await tensorBytes(leaf) : leaf.kind === "bytes" ? leaf.data : undefined;
      if (!data || data.byteLength !== item.byteLength) {
        throw new CheckpointError("invalid_argument", `state dict key ${displayKey(item.key)} changed size while it was being saved`, {
          context: { key: displayKey(item.key) },
        });
      }
      datas.push(data);
    }
    return { group, datas, sums: await blockChecksumsAsync(datas, blockSize) };
  };
  let chunks: WrittenChunk[] = [];
  const body = async function* (): AsyncGenerator<Uint8Array> {
    chunks = [];
    yield layout.header;
    let next = groups.length > 0 ? prepare(groups[0]!) : undefined;
    for (let g = 0; g < groups.length; g++) {
      const current = await next!;
      next = g + 1 < groups.length ? prepare(groups[g + 1]!) : undefined;
      // Settled when awaited next turn; marked handled so an abandoned write leaves no unhandled rejection.
      next?.catch(() => undefined);
      current.group.forEach((i, k) => {
        const item = file.items[i]!;
        chunks.push({
          item,
          chunk: {
            offsets: item.chunk.offsets,
            sizes: item.chunk.sizes,
            file: file.name,
            tensorName: names[i]!,
            byteOffset: layout.offsets[i]!,
            byteLength: item.byteLength,
            crc32c: current.sums[k]!,
          },
        });
      });
      yield* coalesce(current.datas);
    }
  };
  await withRetry(() => location.storage.write(joinPath(location.dir, file.name), body(), { size: layout.fileSize, signal: options.signal }), {
    policy: options.retry,
    signal: options.signal,
  });
  const headerLength = layout.header.byteLength - 8;
  return { file: { rank, size: layout.fileSize, headerLength, headerCrc32c: crc32c(layout.header) }, chunks };
}

/** Dotted names can collide (["a.b"] and ["a", "b"]); later ones get "#2", "#3"… as the format says. */
function uniqueNames(names: readonly string[]): string[] {
  const seen = new Map<string, number>();
  return names.map((name) => {
    const count = (seen.get(name) ?? 0) + 1;
    seen.set(name, count);
    return count === 1 ? name : `${name}#${count}`;
  });
}

async function commitOnCoordinator(
  outcomes: readonly RankOutcome[],
  prepared: PreparedSave,
  location: OpenedCheckpoint,
  options: SaveOptions,
  blockSize: number,
): Promise<{ ok: true; entries: number } | { ok: false; code: CheckpointError["code"]; message: string }> {
  const failed = outcomes.findIndex((o) => !o.ok);
  if (failed >= 0) {
    const o = outcomes[failed] as Extract<RankOutcome, { ok: false }>;
    const prefix = outcomes.length > 1 ? `rank ${failed} failed: ` : "";
    return { ok: false, code: o.code, message: `${prefix}${o.message}; nothing was committed` };
  }
  throwIfAborted(options.signal, "the save");
  const metadata = buildMetadata(outcomes as Extract<RankOutcome, { ok: true }>[], prepared, options, blockSize);
  const path = joinPath(location.dir, METADATA_FILE);
  const bytes = new TextEncoder().encode(JSON.stringify(metadata));
  try {
    await withRetry(() => location.storage.write(path, bytes, { ifAbsent: true, signal: options.signal }), {
      policy: options.retry,
      signal: options.signal,
    });
  } catch (error) {
    // A retried create may find its own earlier attempt: that attempt did commit.
    if (isCheckpointError(error, "already_exists") && (await committedBy(location, path, prepared.plan.attempt))) {
      return { ok: true, entries: metadata.entries.length };
    }
    if (isCheckpointError(error, "already_exists")) throw alreadyCommitted(location);
    throw error;
  }
  return { ok: true, entries: metadata.entries.length };
}

async function committedBy(location: OpenedCheckpoint, path: string, attempt: string): Promise<boolean> {
  try {
    const existing = parseMetadata(await location.storage.read(path), path);
    return Object.keys(existing.files).some((name) => name.endsWith(`-${attempt}.safetensors`));
  } catch {
    return false;
  }
}

function buildMetadata(
  outcomes: readonly Extract<RankOutcome, { ok: true }>[],
  prepared: PreparedSave,
  options: SaveOptions,
  blockSize: number,
): CheckpointMetadata {
  const files: Record<string, DataFileMetadata> = {};
  const byKey = new Map<string, EntryMetadata & { chunks?: ChunkMetadata[] }>();
  for (const outcome of outcomes) {
    Object.assign(files, outcome.files);
    for (const { item, chunk } of outcome.chunks) {
      const id = pathId(item.key);
      let entry = byKey.get(id) as { chunks: ChunkMetadata[] } | undefined;
      if (!entry) {
        const base =
          item.kind === "tensor"
            ? { kind: "tensor" as const, key: item.key, dtype: item.dtype, shape: item.shape, chunks: [] as ChunkMetadata[] }
            : { kind: "bytes" as const, key: item.key, byteLength: item.byteLength, chunks: [] as ChunkMetadata[] };
        byKey.set(id, base);
        entry = base;
      }
      entry.chunks.push(chunk);
    }
  }
  for (const value of prepared.plan.values) byKey.set(pathId(value.key), value);
  return {
    format: FORMAT_NAME,
    version: `${FORMAT_MAJOR}.${FORMAT_MINOR}`,
    worldSize: outcomes.length,
    createdAt: new Date().toISOString(),
    checksum: { algorithm: "crc32c", blockSize },
    files,
    entries: entryOrder(prepared.plans).map((id) => byKey.get(id)!),
    user: options.metadata ?? {},
  };
}

/** Entries in the order their leaves stood in the state dicts (rank 0's first), so a load without target rebuilds the same key order. */
function entryOrder(plans: readonly SavePlan[]): string[] {
  const order = new Set<string>();
  for (const plan of plans) {
    const leaves = [
      ...plan.items.map((i) => ({ leafIndex: i.leafIndex, key: i.key })),
      ...plan.values.map((v) => ({ leafIndex: v.leafIndex, key: v.entry.key })),
    ].sort((a, b) => a.leafIndex - b.leafIndex);
    for (const { key } of leaves) order.add(pathId(key));
  }
  return [...order];
}

async function removeFiles(location: OpenedCheckpoint, files: readonly DataFilePlan[]): Promise<void> {
  await Promise.all(files.map((f) => location.storage.delete(joinPath(location.dir, f.name)).catch(() => undefined)));
}
