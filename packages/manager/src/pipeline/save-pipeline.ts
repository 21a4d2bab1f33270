import {
  type SaveOptions,
  type StagingStrategy,
  type SaveResult,
  type StateDict,
  type StorageAdapter,
  StagingPool,
  asyncSave,
  isCheckpointError,
  isTransient,
  prepareAsyncSave,
  startUploadWorker,
  storageUrl,
  uploadWorkerReady,
} from "@cairn/core";
import PQueue from "p-queue";
import type { ManagerEmitter } from "../events/manager-events.js";

export interface SavePipelineOptions {
  /** Background saves in flight at once (default 1). */
  readonly maxPendingAsync?: number;
  /** Most bytes of host memory for staging buffers. */
  readonly stagingBudget?: number;
  readonly staging?: StagingStrategy;
  /** Write and commit background saves from a worker thread, where the storage allows it (default true). */
  readonly uploadWorker?: boolean;
  readonly location: string | StorageAdapter;
  /** False for read-only managers: no upload worker is started. */
  readonly writable: boolean;
  /** Receives `staged` events, and `error` events of failed background saves. */
  readonly events: ManagerEmitter;
}

/** Whether background saves to `location` are written by the upload worker: file://, or an adapter that says how a worker opens it. */
function writtenByWorker(location: string | StorageAdapter): boolean {
  return typeof location === "string" ? storageUrl(location).protocol === "file:" : location.portable !== undefined;
}

/** Whether `location` is local disk, where writing a save costs about what staging it into fresh memory does. */
function onLocalDisk(location: string | StorageAdapter): boolean {
  return typeof location === "string" ? storageUrl(location).protocol === "file:" : location.protocol === "file";
}

/**
 * A manager's saves in flight: the staging pool, the bounded upload queue, the steps pending or
 * being written, the barriers after commits, and the first background failure. Per save the
 * manager calls `waitForRoom()` (saveAsync) or `drain()` (save), then `throwFailure()`, then runs
 * the save inside `hold(step, …)`: a saveAsync through `stage(…)`. `clear()` on close.
 */
export class SavePipeline {
  readonly #options: SavePipelineOptions;
  readonly #pool: StagingPool;
  readonly #uploads: PQueue;
  /** Steps staged but not yet committed or failed, with the promise that settles when they are. */
  readonly #pending = new Map<number, Promise<void>>();
  /** Steps a save is writing: like pending ones, never touched by a retention pass running meanwhile. */
  readonly #saving = new Set<number>();
  /** Per step, the tail of its saves and deletions here: one runs at a time (see `exclusive`). */
  readonly #exclusive = new Map<number, Promise<void>>();
  /** Several ranks only: the barriers after each commit, in order. */
  #barriers: Promise<void> = Promise.resolve();
  #failure: unknown;
  /** Whether it started the upload worker, whose loading a first save would otherwise compete with for a core. */
  #workerStarted = false;

  constructor(options: SavePipelineOptions) {
    this.#options = options;
    this.#pool = new StagingPool(options.stagingBudget === undefined ? {} : { maxBytes: options.stagingBudget });
    this.#uploads = new PQueue({ concurrency: options.maxPendingAsync ?? 1 });
  }

  /**
   * Starts loading the upload worker, if background saves here use one, so the first saveAsync
   * does not wait for it: at the first save, saveAsync, shouldSave or prepare, which a training
   * loop calls every step. Not at construction: a restarted job restores first, and the thread's
   * loading would take a core and fresh memory from that restore.
   */
  startWorker(): void {
    const options = this.#options;
    if (this.#workerStarted || !options.writable || options.uploadWorker === false) return;
    if (!writtenByWorker(options.location)) return;
    startUploadWorker();
    this.#workerStarted = true;
  }

  /** Whether a save of `step` is staged or being written here: retention leaves such a step alone. */
  isBusy(step: number): boolean {
    return this.#pending.has(step) || this.#saving.has(step);
  }

  isPending(step: number): boolean {
    return this.#pending.has(step);
  }

  /**
   * Runs `work` once no other save or deletion of `step` runs here, one at a time per step: a
   * deletion never sweeps the files a save of that step is writing, nor un-commits it before this
   * manager heard of the commit, and a save decides only once a deletion of its step has ended.
   */
  async exclusive<T>(step: number, work: () => Promise<T>): Promise<T> {
    const run = (this.#exclusive.get(step) ?? Promise.resolve()).then(work);
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.#exclusive.set(step, tail);
    void tail.then(() => {
      if (this.#exclusive.get(step) === tail) this.#exclusive.delete(step);
    });
    return run;
  }

  /** Runs the save of `step`, marking it busy meanwhile. */
  async hold<T>(step: number, save: () => Promise<T>): Promise<T> {
    this.#saving.add(step);
    try {
      return await save();
    } finally {
      this.#saving.delete(step);
    }
  }

  /**
   * Stages `stateDict` and queues its upload; resolves once staged, with `settled`, which resolves
   * after `committed` ran or the failure was recorded and reported (it never rejects).
   */
  async stage(
    step: number,
    stateDict: StateDict,
    where: SaveOptions,
    committed: (result: SaveResult) => Promise<void>,
  ): Promise<{ settled: Promise<void> }> {
    const { staged, done } = await asyncSave(stateDict, {
      ...where,
      staging: this.#options.staging ?? "copy",
      uploadWorker: this.#options.uploadWorker,
      pool: this.#pool,
      // Unprepared, the first save to local disk is written in place: no slower than `save`, where staging into fresh memory can be several times slower.
      freshPool: onLocalDisk(this.#options.location) ? "save" : "stage",
      schedule: (upload) => this.#uploads.add(upload),
    });
    const info = await staged;
    this.#options.events.emit("staged", { step, bytes: info.bytes, seconds: info.seconds });
    const settled = done.then(committed).catch((error: unknown) => {
      // Transient (core retried each file and gave up): reported, and the run goes on within its
      // loss budget. Anything else (denied, full, a bad value) also rejects the next call, once.
      const transient = isTransient(error) || (isCheckpointError(error, "storage") && isTransient(error.cause));
      if (!transient) this.#failure ??= error;
      this.#options.events.report({ step, error, operation: "save" }, !transient);
    });
    this.#pending.set(step, settled);
    void settled.finally(() => this.#pending.delete(step));
    return { settled };
  }

  /** Readies the staging buffers for saveAsync of state dicts shaped like `stateDict`, from another thread (see `prepareAsyncSave`), and waits for the upload worker to be up. */
  async prepare(stateDict: StateDict, save: Pick<SaveOptions, "concurrency">): Promise<void> {
    this.startWorker();
    await Promise.all([
      prepareAsyncSave(stateDict, {
        concurrency: save.concurrency,
        staging: this.#options.staging ?? "copy",
        pool: this.#pool,
      }),
      this.#workerStarted ? uploadWorkerReady() : undefined,
    ]);
  }

  /** Several ranks: after `pass`, `collective` (of the step's group: it shares what the pass deleted), in commit order; `drain()` waits for it. */
  async barrierAfter(pass: Promise<unknown> | undefined, collective: () => Promise<void>): Promise<void> {
    this.#barriers = this.#barriers.then(() => pass).then(collective);
    await this.#barriers;
  }

  /** Waits until fewer than `maxPendingAsync` background saves are pending. */
  async waitForRoom(): Promise<void> {
    const max = this.#options.maxPendingAsync ?? 1;
    while (this.#pending.size >= max) await Promise.race(this.#pending.values());
  }

  /** Waits for every pending save and every barrier, including those queued meanwhile, and for staging being prepared. */
  async drain(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all(this.#pending.values());
    await this.#pool.prepared();
    let barriers: Promise<void>;
    do {
      barriers = this.#barriers;
      await barriers;
    } while (barriers !== this.#barriers);
  }

  /** Throws the first background failure not yet thrown, once. */
  throwFailure(): void {
    if (this.#failure === undefined) return;
    const error = this.#failure;
    this.#failure = undefined;
    throw error;
  }

  /** Releases the staging buffers. */
  clear(): void {
    this.#pool.clear();
  }
}
