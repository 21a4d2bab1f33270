import PQueue from "p-queue";
import { type OpenedCheckpoint, checkpointOptionsOf, openCheckpoint } from "../storage/checkpoint-location.js";
import { DEFAULT_SAVE_CONCURRENCY, type SaveOptions, type SaveResult, checkSaveOptions } from "./save-options.js";
import { commitMetadata } from "./commit-metadata.js";
import { DefaultSavePlanner } from "../plan/default-save-planner.js";
import { CheckpointError, cancelledError, isTransient, throwIfAborted } from "../errors.js";
import { type RankOutcome, failureOf, firstFailedRank, rankFailure } from "../rank-outcome.js";
import { flattenStateDict } from "../state/flatten.js";
import { type Leaf } from "../state/leaf.js";
import {
  type DataFileMetadata,
  DEFAULT_BLOCK_SIZE,
  METADATA_FILE,
  ownFiles,
  referencedFiles,
} from "../format/metadata.js";
import type { DataFilePlan, GlobalSavePlan, SavePlan, SavePlanner, WriteItem } from "../plan/save-planner.js";
import { checkSharedFiles, readIncrementalBase, skipUnchanged } from "./incremental-base.js";
import type { StateDict } from "../state/state-dict.js";
import { joinPath } from "../storage/storage-adapter.js";
import { isDataFileName, newAttemptId } from "../format/naming.js";
import { type KnownChecksums, type WrittenChunk, prepareDataFileWrites, writeDataFile } from "./write-data-file.js";
import { type WrittenFiles, buildMetadata } from "./build-metadata.js";
import { rememberDigests, spellOutHashes } from "./chunk-digests.js";
import { joinBytes } from "./item-groups.js";

/** What one rank reports after writing its files: the file metadata and chunks, or why it failed. */
type WriteOutcome = RankOutcome<WrittenFiles>;
type Written = Extract<WriteOutcome, { ok: true }>;

/** What the coordinator tells every rank after committing, or why it did not. */
type CommitOutcome = RankOutcome<{ readonly entries: number; readonly referenced: string[] }>;

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
  const started = performance.now();
  const options = checkpointOptionsOf(checkpointIdOrOptions, "save", "write");
  checkSaveOptions(options, "save: option ");
  return saveLeaves(await flattenStateDict(stateDict), options, started);
}

/** Plans, writes and commits a rank's leaves at an opened location: `planAndCommit` here, or the same on another thread. */
export type CommitLeaves = (
  leaves: readonly Leaf[],
  location: OpenedCheckpoint,
  options: SaveOptions,
) => Promise<Omit<SaveResult, "seconds">>;

/**
 * Saves already flattened (and, for a background save, staged) leaves. `commit` may plan, write
 * and commit elsewhere (a background save's upload worker).
 */
export async function saveLeaves(
  leaves: readonly Leaf[],
  options: SaveOptions,
  started = performance.now(),
  commit: CommitLeaves = planAndCommit,
): Promise<SaveResult> {
  const location = await openCheckpoint(options);
  try {
    const result = await commit(leaves, location, options);
    return { ...result, seconds: (performance.now() - started) / 1000 };
  } finally {
    await location.release();
  }
}

/** Collective: `planSave`, then `writeAndCommit`. */
export async function planAndCommit(
  leaves: readonly Leaf[],
  location: OpenedCheckpoint,
  options: SaveOptions,
): Promise<Omit<SaveResult, "seconds">> {
  return writeAndCommit(await planSave(leaves, location, options), location, options);
}

/** The planner a save with these options plans with. */
export function savePlannerOf(options: Pick<SaveOptions, "planner">): SavePlanner {
  return options.planner ?? new DefaultSavePlanner();
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
export async function planSave(
  leaves: readonly Leaf[],
  location: OpenedCheckpoint,
  options: SaveOptions,
): Promise<PreparedSave> {
  const { group } = location;
  throwIfAborted(options.signal, "the save");
  prepareDataFileWrites(location);
  const planner = savePlannerOf(options);
  // Checked before any byte is written, so a save onto a committed checkpoint fails fast; the ifAbsent commit still decides races.
  // Asked first and awaited after the local plan, so the storage's round trip overlaps the planning.
  const existing = group.rank === 0 ? location.storage.stat(joinPath(location.dir, METADATA_FILE)) : undefined;
  existing?.catch(() => undefined);
  const local = planner.createLocalPlan(leaves, group.rank);
  const exists = existing !== undefined && (await existing) !== null;
  const plans = await group.allGather(local);
  let decision: GlobalSavePlan | { error: string } | undefined;
  let plannerError: unknown;
  if (group.rank === 0) {
    try {
      decision = exists
        ? { error: "exists" }
        : planner.createGlobalPlan(plans, {
            attempt: newAttemptId(),
            filesPerRank: options.concurrency ?? DEFAULT_SAVE_CONCURRENCY,
          });
    } catch (error) {
      plannerError = error;
      decision = { error: (error as Error).message };
    }
  }
  const plan = await group.broadcast(decision);
  if ("error" in plan) {
    if (plan.error === "exists") throw alreadyCommitted(location);
    throw (
      plannerError ?? new CheckpointError("invalid_argument", `the coordinator could not plan the save: ${plan.error}`)
    );
  }
  const badName = plan.files.flat().find((file) => !isDataFileName(file.name));
  if (badName)
    throw new CheckpointError(
      "invalid_argument",
      `the save planner named a data file ${JSON.stringify(badName.name)}; data file names must be single path segments, not "__proto__", "constructor" or "prototype"`,
    );
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
  let outcome: WriteOutcome;
  // This rank's own failure, kept as the cause of the error it throws (other ranks send only code and message).
  let writeError: unknown;
  let commitError: unknown;
  /** The coordinator's own files made durable, beside gathering and committing the metadata, which waits for it. */
  let ownSync: Promise<void> | undefined;
  try {
    const written = await writeRankFiles(prepared, location, options, blockSize);
    outcome = written.outcome;
    // Another rank reports only once its files are durable.
    if (group.rank === 0) ownSync = written.synced;
    else await written.synced;
  } catch (error) {
    writeError = error;
    outcome = rankFailure(error);
  }
  let outcomes: WriteOutcome[];
  let commit: CommitOutcome;
  try {
    // Another rank gets the hashes as strings; this one keeps its own outcome (a group may copy it).
    if (group.worldSize > 1 && outcome.ok) spellOutHashes(outcome.chunks);
    outcomes = await group.allGather(outcome);
    outcomes[group.rank] = outcome;
    if (group.rank === 0) {
      try {
        commit = await commitOnCoordinator(outcomes, prepared, location, options, blockSize, ownSync);
      } catch (error) {
        // Its own files failing after their checksums were in (`ownSync`) is the coordinator's write failing, as before them.
        const own = await ownSync?.then(
          () => undefined,
          (reason: unknown) => ({ reason }),
        );
        if (own) {
          writeError = own.reason;
          outcome = rankFailure(own.reason);
          outcomes[group.rank] = outcome;
          commit = failedCommit(outcomes)!;
        } else {
          commitError = error;
          commit = rankFailure(error);
        }
      }
      commit = await group.broadcast(commit);
    } else {
      commit = await group.broadcast<CommitOutcome>(undefined);
    }
  } catch (error) {
    // The process group broke (a rank died or timed out): nobody can commit this attempt, so its files go.
    await ownSync?.catch(() => undefined);
    await removeFiles(location, prepared.myFiles);
    throw error;
  }
  const refused = failureOf(commit);
  if (refused) {
    await ownSync?.catch(() => undefined);
    await removeFiles(location, prepared.myFiles);
    const failed = firstFailedRank(outcomes);
    if (!outcome.ok && options.signal?.aborted) throw cancelledError(options.signal, "the save");
    throw new CheckpointError(refused.code, refused.message, {
      cause: failed ? (failed.rank === group.rank ? writeError : undefined) : commitError,
      context: { path: location.where, ...(failed ? { rank: failed.rank } : {}) },
    });
  }
  const committed = commit as Extract<CommitOutcome, { ok: true }>;
  return {
    checkpoint: location.where,
    bytes: outcome.ok ? outcome.bytes : 0,
    files: outcome.ok ? ownFiles(outcome).length : 0,
    entries: committed.entries,
    ...(committed.referenced.length > 0 ? { referenced: committed.referenced } : {}),
  };
}

/**
 * Writes a rank's files; `synced` resolves once they are durable. Where the storage syncs many
 * objects at once (`StorageAdapter.sync`), they are written with `syncLater` and synced together:
 * one wait for the disk instead of two per file. If that sync fails with a transient error, the
 * files are written again, each durable on its own (with its retries), and must come out the same.
 */
async function writeRankFiles(
  prepared: PreparedSave,
  location: OpenedCheckpoint,
  options: SaveOptions,
  blockSize: number,
): Promise<{ outcome: Written; synced: Promise<void> }> {
  let shared: Record<string, DataFileMetadata> | undefined;
  let referenced: readonly WrittenChunk[] = [];
  let toWrite = prepared.myFiles;
  let known: ReadonlyMap<WriteItem, KnownChecksums> | undefined;
  if (options.incremental) {
    const base = await readIncrementalBase(location, options.incremental.base, options);
    const skipped = await skipUnchanged(prepared.myFiles, prepared.leaves, base, options, blockSize);
    await checkSharedFiles(location, skipped.sharedFiles, options);
    shared = skipped.sharedFiles;
    referenced = skipped.referenced;
    toWrite = skipped.files;
    known = skipped.sums;
  }
  /**
   * Writes every file; resolves with the outcome once every file's checksums are known, which
   * may be before the writes end (`writeDataFile`), and `written` once all of them succeeded.
   */
  const writeAll = async (syncLater: boolean): Promise<{ outcome: Written; written: Promise<void> }> => {
    const queue = new PQueue({ concurrency: Math.max(1, options.concurrency ?? DEFAULT_SAVE_CONCURRENCY) });
    // Null prototype: a planner names the files, and a name is a key here.
    const files = Object.create(null) as Record<string, DataFileMetadata>;
    if (shared) Object.assign(files, shared);
    const chunks: WrittenChunk[] = [...referenced];
    let bytes = 0;
    const hashed: Promise<void>[] = [];
    // Each file's results in plan order, not the order the writes end in, so the metadata of a save is reproducible.
    const results = new Array<Awaited<ReturnType<typeof writeDataFile>>>(toWrite.length);
    const writes = toWrite.map((file, index) => {
      let isHashed!: () => void;
      let notHashed!: (error: unknown) => void;
      hashed.push(new Promise<void>((resolve, reject) => ((isHashed = resolve), (notHashed = reject))));
      // A file holds its place in the queue until its write ends, not only until it is hashed.
      return queue.add(async () => {
        try {
          const written = await writeDataFile(
            file,
            prepared.leaves,
            location,
            options,
            blockSize,
            prepared.plan.distinctKeys === true,
            known,
            syncLater,
          );
          results[index] = written;
          isHashed();
          await written.written;
        } catch (error) {
          notHashed(error);
          throw error;
        }
      });
    });
    // allSettled, not all: every write must have finished or failed before a failed save removes its files.
    const allWritten = Promise.allSettled(writes).then((settled) => {
      const failure = settled.find((s) => s.status === "rejected");
      if (failure) throw failure.reason;
    });
    allWritten.catch(() => undefined);
    const failure = (await Promise.allSettled(hashed)).find((s) => s.status === "rejected");
    if (failure) {
      await allWritten.catch(() => undefined);
      throw failure.reason;
    }
    toWrite.forEach((file, index) => {
      const written = results[index]!;
      files[file.name] = written.file;
      // One by one: spread as arguments, a file of 150k items or more overflows the stack. An index
      // loop: run before V8 optimizes it, a for-of makes an iterator result per chunk.
      for (let c = 0; c < written.chunks.length; c++) chunks.push(written.chunks[c]!);
      bytes += written.file.size;
    });
    // The content hashes as bytes beside the chunks, where every chunk was hashed here; else
    // the files whose hashes came as bytes get their strings now.
    const digests = results.map((written) => written.digests);
    const kept =
      referenced.length === 0 && digests.every((d) => d !== undefined) && rememberDigests(chunks, joinBytes(digests));
    if (!kept) for (const written of results) spellOutHashes(written.chunks, written.digests);
    return { outcome: { ok: true, files, chunks, bytes }, written: allWritten };
  };
  const { storage } = location;
  const deferred = storage.sync !== undefined && toWrite.length > 0;
  const first = await writeAll(deferred);
  const { outcome } = first;
  if (!deferred) {
    await first.written;
    return { outcome, synced: Promise.resolve() };
  }
  // The metadata is made while the files' writes end; the commit waits for them and their sync.
  const synced = first.written.then(() =>
    storage.sync!(toWrite.map((file) => joinPath(location.dir, file.name))).catch(async (error: unknown) => {
      // A failed fsync may have lost the bytes, and a second one may report success all the same: write them anew.
      if (!isTransient(error)) throw error;
      // The metadata may already be built from the first write: the second must match it.
      const again = await writeAll(false);
      spellOutHashes(outcome.chunks);
      spellOutHashes(again.outcome.chunks);
      checkSameWrite(outcome, again.outcome);
      await again.written;
    }),
  );
  synced.catch(() => undefined);
  return { outcome, synced };
}

/** Throws unless two writes of a rank's files gave the same files and chunk checksums (the state changed between them). */
function checkSameWrite(first: Written, second: Written): void {
  const sumsOf = (written: Written): Map<string, string> =>
    new Map(
      written.chunks.map(({ chunk }) => [
        `${chunk.file}@${chunk.byteOffset}`,
        `${chunk.byteLength}/${chunk.crc32c.join(",")}/${chunk.hash ?? ""}`,
      ]),
    );
  const a = sumsOf(first);
  const b = sumsOf(second);
  const same =
    a.size === b.size &&
    [...a].every(([at, sums]) => b.get(at) === sums) &&
    Object.keys(first.files).every((name) => first.files[name]!.headerCrc32c === second.files[name]?.headerCrc32c);
  if (!same)
    throw new CheckpointError(
      "invalid_argument",
      "the state dict changed while it was being saved: its data files, written again after a failed sync, differ from the first write; nothing was committed",
    );
}

async function commitOnCoordinator(
  outcomes: readonly WriteOutcome[],
  prepared: PreparedSave,
  location: OpenedCheckpoint,
  options: SaveOptions,
  blockSize: number,
  ownSync: Promise<void> | undefined,
): Promise<CommitOutcome> {
  const failed = failedCommit(outcomes);
  if (failed) return failed;
  throwIfAborted(options.signal, "the save");
  const { metadata, contentHashes } = buildMetadata(
    outcomes as Written[],
    prepared.plan,
    prepared.plans,
    options,
    blockSize,
  );
  // Again right before the commit: a base file deleted since the start must not leave a committed step without its bytes.
  if (options.incremental) await checkSharedFiles(location, metadata.files, options);
  // Every rank's bytes are durable before the commit is visible: the others' were before they
  // reported, the coordinator's own are synced meanwhile (`after`).
  await commitMetadata(
    location.storage,
    location.dir,
    metadata,
    prepared.plan.attempt,
    () => alreadyCommitted(location),
    { ...options, ...(ownSync ? { after: ownSync } : {}), ...(contentHashes ? { contentHashes } : {}) },
  );
  return { ok: true, entries: metadata.entries.length, referenced: referencedFiles(metadata) };
}

/** The commit's refusal when a rank failed to write its files, naming the first such rank; undefined if none did. */
function failedCommit(outcomes: readonly WriteOutcome[]): CommitOutcome | undefined {
  const failed = firstFailedRank(outcomes);
  if (!failed) return undefined;
  const prefix = outcomes.length > 1 ? `rank ${failed.rank} failed: ` : "";
  return { ...failed.failure, message: `${prefix}${failed.failure.message}; nothing was committed` };
}

async function removeFiles(location: OpenedCheckpoint, files: readonly DataFilePlan[]): Promise<void> {
  await Promise.all(files.map((f) => location.storage.delete(joinPath(location.dir, f.name)).catch(() => undefined)));
}
