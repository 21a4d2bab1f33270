import { flattenStateDict } from "../state/flatten.js";
import { type Leaf } from "../state/leaf.js";
import { checkOption, checkpointOptionsOf } from "../storage/checkpoint-location.js";
import { type CommitLeaves, planAndCommit, saveLeaves, savePlannerOf } from "../save/save.js";
import { DEFAULT_SAVE_CONCURRENCY, type SaveOptions, type SaveResult, checkSaveOptions } from "../save/save-options.js";
import { type StagedLeaves, copyInBackground, prepareStaging, stageLeaves } from "../stage/staging.js";
import type { StagingLayout, StagingStrategy } from "../stage/staging-plan.js";
import { StagingPool } from "../stage/staging-pool.js";
import { DEFAULT_BLOCK_SIZE } from "../format/metadata.js";
import { hasStagedHook, runStagedHook, withStagingSums } from "./staging-sums.js";
import type { StateDict } from "../state/state-dict.js";
import { canUploadInWorker, uploadInWorker } from "#platform/background/upload-thread.js";
import { yieldToEventLoop } from "#platform/runtime.js";

export interface AsyncSaveOptions extends SaveOptions {
  /** How tensors are snapshotted before `staged` resolves (default `"copy"`). */
  readonly staging?: StagingStrategy;
  /** Staging buffers to reuse across saves; a manager keeps one. Default: a pool for this save only. */
  readonly pool?: StagingPool;
  /** Runs the upload once staged; a manager passes its bounded upload queue. Default: at once. */
  readonly schedule?: <T>(upload: () => Promise<T>) => Promise<T>;
  /**
   * Write and commit from a worker thread when the storage can be opened there (file://) and
   * the default planner plans the save: default true. The bytes go to the worker in shared
   * memory: copy-staged, or, with `"reference"` staging, copied in the background a slice per
   * event-loop turn (if they fit the pool's budget). The training thread then only relays
   * collectives. False, or when a condition fails, the upload runs on the calling thread's
   * event loop, as asynchronous I/O between its turns.
   */
  readonly uploadWorker?: boolean;
  /**
   * What a copy-staged save does when `pool` is fresh (nothing allocated or prepared yet), where
   * copying would take a page fault every 4 KiB of new memory on the calling thread: `"stage"`
   * (default) stages anyway; `"save"` writes and commits from the state itself on the calling
   * thread, as `save` does, resolving `staged` once written (so it blocks as long as `save`), then
   * prepares the pool for the next saves in the background. For storage as fast as local disk.
   */
  readonly freshPool?: "stage" | "save";
}

/** When the snapshot was complete, and what it cost the caller. */
export interface StagedInfo {
  /** Bytes copied into staging buffers (tensors held by reference are not counted). */
  readonly bytes: number;
  /** Time from the call until the state was safe to change. */
  readonly seconds: number;
}

export interface AsyncSaveHandle {
  /** Resolves once every leaf is snapshotted: from then on training may update, dispose or reuse anything. */
  readonly staged: Promise<StagedInfo>;
  /** Resolves once the checkpoint is committed (metadata.json written); rejects if it was not. */
  readonly done: Promise<SaveResult>;
}

/**
 * Saves in the background, like `torch.distributed.checkpoint.async_save`: the state is
 * snapshotted into host memory (`staged`), then written and committed while the caller goes on
 * (`done`). Where the storage can be opened from another thread (file://) and the bytes are in
 * shared memory (copy-staged, or copied there in the background after reference staging), the
 * data files and the commit are written by the upload worker thread; otherwise they are
 * written as asynchronous I/O on the calling thread, with checksums of shared bytes in worker
 * threads. Either way the training thread is not held.
 * Every rank calls it, as with `save`; with several ranks, collectives stay on the calling
 * thread's process group.
 *
 * A bad location or option of a background save rejects the call with `invalid_argument`; a
 * bad state dict or save option rejects `staged` (and `done`), having written nothing.
 * Both promises are marked handled here, so awaiting only one of them never produces an
 * unhandled rejection; await `done` to learn whether the checkpoint committed.
 */
export async function asyncSave(
  stateDict: StateDict,
  checkpointIdOrOptions: string | AsyncSaveOptions,
): Promise<AsyncSaveHandle> {
  const options = asyncSaveOptionsOf(checkpointIdOrOptions);
  const started = performance.now();
  const pool = options.pool ?? new StagingPool();
  const layout = stagingLayoutOf(options);
  const snapshot = flattenStateDict(stateDict).then(async (leaves): Promise<Snapshot> => {
    checkSaveOptions(options, "asyncSave: option ");
    const strategy = options.staging ?? "copy";
    if (options.freshPool === "save" && strategy === "copy" && pool.fresh) return inPlace(leaves, pool, layout);
    return stageLeaves(leaves, strategy, pool, options.signal, layout);
  });
  // Copies' sums are taken as soon as they are staged, before the upload's turn, where the upload
  // runs on this thread anyway; the upload worker takes them itself, never waiting for this thread.
  const blockSize = options.blockSize ?? DEFAULT_BLOCK_SIZE;
  const summed = snapshot.then(async (s) => {
    if (s.inPlace === true || (options.uploadWorker !== false && !hasStagedHook())) return s.leaves;
    const leaves = await withStagingSums(s.leaves, blockSize);
    await runStagedHook(leaves);
    return leaves;
  });
  summed.catch(() => undefined);
  const schedule = options.schedule ?? (<T>(upload: () => Promise<T>) => upload());
  const done = snapshot.then((s) =>
    schedule(async () => {
      try {
        // In a turn of its own, after the caller resumed: handing thousands of staged leaves to
        // the upload worker (a structured clone) takes milliseconds the call need not block for.
        await yieldToEventLoop();
        const commit =
          options.uploadWorker === false || s.inPlace === true
            ? planAndCommit
            : offloaded(pool, layout, s.dropReferences, blockSize);
        return await saveLeaves(await summed, options, started, commit);
      } finally {
        s.release();
      }
    }),
  );
  const staged = snapshot.then(async (s) => {
    // Written in place: training may change the state once nothing reads it any more, committed or not.
    if (s.inPlace === true) await done.catch(() => undefined);
    return { bytes: s.copiedBytes, seconds: (performance.now() - started) / 1000 };
  });
  staged.catch(() => undefined);
  done.catch(() => undefined);
  return { staged, done };
}

/**
 * Readies `options.pool` for background saves of state dicts shaped like `stateDict` (same
 * leaves, shapes and dtypes): the staging buffers the next `asyncSave` with these options will
 * take are allocated and made resident by another thread now, so that save blocks for a memcpy
 * alone rather than a page fault every 4 KiB of fresh memory. Call it off the training path (at
 * start-up, or on a step that is not saved); an `asyncSave` meanwhile waits for it. Reads no
 * tensor data, holds nothing of the state dict, and never rejects for lack of memory budget
 * (it then readies nothing); a bad state dict rejects as `asyncSave` would.
 */
export async function prepareAsyncSave(
  stateDict: StateDict,
  options: Pick<AsyncSaveOptions, "staging" | "planner" | "concurrency" | "processGroup"> & {
    readonly pool: StagingPool;
  },
): Promise<void> {
  await prepareStaging(
    await flattenStateDict(stateDict),
    options.staging ?? "copy",
    options.pool,
    stagingLayoutOf(options),
  );
}

/** Copies are staged in the layout of the data files the save's planner gives this rank (see stageLeaves). */
function stagingLayoutOf(options: Pick<AsyncSaveOptions, "planner" | "concurrency" | "processGroup">): StagingLayout {
  return {
    planner: savePlannerOf(options),
    defaultPlanner: options.planner === undefined,
    rank: options.processGroup?.rank ?? 0,
    filesPerRank: options.concurrency ?? DEFAULT_SAVE_CONCURRENCY,
  };
}

type Snapshot = StagedLeaves & { readonly inPlace?: true };

/** A save written from the state itself (see `freshPool`); once written, the pool is prepared for the next one. */
function inPlace(leaves: readonly Leaf[], pool: StagingPool, layout: StagingLayout | undefined): Snapshot {
  const release = (): void => void prepareStaging(leaves, "copy", pool, layout);
  return {
    leaves: [...leaves],
    copiedBytes: 0,
    copySeconds: 0,
    release,
    dropReferences: () => undefined,
    inPlace: true,
  };
}

const STAGING_STRATEGIES: ReadonlySet<unknown> = new Set<StagingStrategy>(["copy", "reference"]);

/** The options of the call itself: where, and the options only a background save has; save's own are checked once staged, as for `save`. */
function asyncSaveOptionsOf(idOrOptions: string | AsyncSaveOptions): AsyncSaveOptions {
  const options = checkpointOptionsOf(idOrOptions, "asyncSave", "write");
  const prefix = "asyncSave: option ";
  checkOption(
    options,
    "staging",
    (v) => STAGING_STRATEGIES.has(v),
    `one of ${[...STAGING_STRATEGIES].map((s) => JSON.stringify(s)).join(", ")}`,
    prefix,
  );
  checkOption(options, "pool", (v) => v instanceof StagingPool, "a StagingPool", prefix);
  checkOption(options, "schedule", (v) => typeof v === "function", "a function", prefix);
  checkOption(options, "uploadWorker", (v) => typeof v === "boolean", "true or false", prefix);
  checkOption(options, "freshPool", (v) => v === "stage" || v === "save", '"stage" or "save"', prefix);
  return options;
}

/**
 * Plans, writes and commits on the upload worker when it can, on this thread when it cannot.
 * Tensors held by reference reach the worker as copies in the pool, made in the background a
 * slice per event-loop turn (`copyInBackground`): that is less work for this thread than the
 * upload from here (which checksums every byte here, and may get one turn per training step for
 * it), and the worker then writes as for copy staging; the held tensors are dropped as soon as
 * they are copied. Where the copies would not fit the staging budget, or the worker could not
 * take them anyway, the upload runs here.
 */
function offloaded(
  pool: StagingPool,
  layout: StagingLayout | undefined,
  dropReferences: () => void,
  blockSize: number,
): CommitLeaves {
  return async (leaves, location, options) => {
    if (canUploadInWorker(leaves, location, options)) return uploadInWorker(leaves, location, options);
    // Could the worker take these leaves once they are in shared memory?
    const workerCould = canUploadInWorker([], location, options);
    const copied = workerCould ? await copyInBackground(leaves, pool, options.signal, layout) : undefined;
    if (!copied) return planAndCommit(await withStagingSums(leaves, blockSize), location, options);
    // The clones' (device) memory is not read again: the worker writes the copies.
    dropReferences();
    try {
      return { ...(await uploadInWorker(copied.leaves, location, options)), backgroundCopySeconds: copied.copySeconds };
    } finally {
      copied.release();
    }
  };
}
