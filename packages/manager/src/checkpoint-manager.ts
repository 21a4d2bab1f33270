import {
  CheckpointError,
  type LoadOptions,
  type LoadResult,
  type SaveResult,
  type StateDict,
  type StorageAdapter,
  StagingPool,
  asyncSave,
  knownProtocols,
  load,
  openStorage,
  save,
  storageUrl,
} from "@cairn/core";
import "@cairn/storage-local";
import PQueue from "p-queue";
import { type CheckpointManagerOptions, checkOptions } from "./checkpoint-manager-options.js";
import { ManagerEmitter, type ManagerEventName, type ManagerEvents } from "./manager-events.js";
import { type PreemptionSource, SignalPreemptionSource } from "./preemption.js";
import { checkStep, stepDir } from "./step-naming.js";
import { type StepMetadata, StepStore } from "./step-store.js";

export type { CheckpointManagerOptions } from "./checkpoint-manager-options.js";
export type { StepMetadata } from "./step-store.js";

/** Per-call options of `save` and `saveAsync`. */
export interface SaveStepOptions {
  /** Save whatever the interval says. */
  readonly force?: boolean;
  /** Replace a committed step: it is un-committed (its metadata.json deleted) first. */
  readonly overwrite?: boolean;
  /** JSON stored with the step, returned by `metadata(step)`. */
  readonly metadata?: Readonly<Record<string, unknown>>;
  /** Numbers stored with the step; `bestFn` ranks steps by them. */
  readonly metrics?: Readonly<Record<string, number>>;
}

/**
 * Checkpoints a training loop, like torch_xla's and Orbax's `CheckpointManager`: call
 * `save(step, stateDict)` or `saveAsync(step, stateDict)` every step and it saves when
 * `step % saveInterval === 0` (or when forced, or after a preemption notice), into
 * `<root>/<step>/` in Cairn's format, then applies retention in the background. `allSteps()`
 * lists committed steps from storage, so a new process sees an old run; `restore(step, target)`
 * loads one in place.
 *
 * Call order: construct, any number of saves, restores and queries, then `close()` (which
 * waits for background uploads and removes the preemption handlers). Methods reject with
 * `CheckpointError`: `invalid_argument` for bad input (nothing saved is touched),
 * `already_exists` for a committed step saved again without `overwrite`, `not_found` for a
 * missing step; a background failure (an upload or a deletion) rejects the next `save`,
 * `saveAsync`, `restore`, `join` or `close`, once, and is emitted as `error`.
 */
export class CheckpointManager {
  readonly saveInterval: number;
  readonly #location: string | StorageAdapter;
  readonly #options: CheckpointManagerOptions;
  readonly #events = new ManagerEmitter();
  readonly #pool: StagingPool;
  readonly #uploads: PQueue;
  /** Steps staged but not yet committed or failed, with the promise that settles when they are. */
  readonly #pending = new Map<number, Promise<void>>();
  readonly #preemptionSources: PreemptionSource[] = [];
  #store: Promise<StepStore> | undefined;
  #background: Promise<void> = Promise.resolve();
  #backgroundError: unknown;
  #preemptionNotice: string | undefined;
  #preemptionStep: number | undefined;
  #closed = false;

  constructor(location: string | StorageAdapter, saveInterval: number, options: CheckpointManagerOptions = {}) {
    if (!Number.isSafeInteger(saveInterval) || saveInterval < 1) {
      throw new CheckpointError("invalid_argument", `saveInterval must be an integer of at least 1, got ${String(saveInterval)}`);
    }
    checkOptions(options);
    if (typeof location === "string") {
      const protocol = storageUrl(location).protocol.replace(/:$/, "");
      if (!knownProtocols().includes(protocol)) {
        throw new CheckpointError("invalid_argument", `unknown storage protocol ${protocol}:// in ${JSON.stringify(location)}; known: ${knownProtocols().join(", ")}`);
      }
    } else if (typeof location?.read !== "function") {
      throw new CheckpointError("invalid_argument", "the checkpoint location must be a URL, a path or a StorageAdapter");
    }
    this.#location = location;
    this.saveInterval = saveInterval;
    this.#options = options;
    this.#pool = new StagingPool(options.stagingBudget === undefined ? {} : { maxBytes: options.stagingBudget });
    this.#uploads = new PQueue({ concurrency: options.maxPendingAsync ?? 1 });
    if ((options.checkpointOnPreemption ?? true) && !options.readOnly) {
      this.#preemptionSources.push(new SignalPreemptionSource(options.preemptionSignals ?? ["SIGTERM"], options.signalTarget), ...(options.preemptionSources ?? []));
      for (const source of this.#preemptionSources) source.start((reason) => this.#onPreemption(reason));
    }
  }

  /** Subscribes to `staged`, `committed`, `error` or `preemption`; returns the unsubscribe function. */
  on<E extends ManagerEventName>(event: E, listener: (payload: ManagerEvents[E]) => void): () => void {
    return this.#events.on(event, listener);
  }

  /** Whether `save(step)` would save: every `saveInterval` steps, and once after a preemption notice. */
  shouldSave(step: number): boolean {
    return checkStep(step) % this.saveInterval === 0 || this.#preemptionPending();
  }

  /** True once a preemption notice arrived and its checkpoint is committed at `step` or before: stop training. */
  reachedPreemption(step: number): boolean {
    checkStep(step);
    return this.#preemptionStep !== undefined && step >= this.#preemptionStep;
  }

  /**
   * Saves `stateDict` as `step` if the interval says so (or `force`, or a preemption notice),
   * resolving once it is committed; resolves whether it saved. Steps it skips cost no I/O
   * (building the state dict does: guard with `shouldSave`). Waits for background saves first.
   */
  async save(step: number, stateDict: StateDict, options: SaveStepOptions = {}): Promise<boolean> {
    return this.#save(step, stateDict, options, false);
  }

  /**
   * Like `save`, but resolves as soon as the state is staged into host memory the manager owns:
   * from then on training may update, dispose or reuse every tensor. The upload goes on in the
   * background; at most `maxPendingAsync` run at once, and beyond that this waits for the oldest.
   * After a preemption notice it waits until the checkpoint is committed.
   */
  async saveAsync(step: number, stateDict: StateDict, options: SaveStepOptions = {}): Promise<boolean> {
    return this.#save(step, stateDict, options, true);
  }

  /** Committed steps, ascending, read from storage. */
  async allSteps(): Promise<number[]> {
    return (await this.#open()).committedSteps();
  }

  async latestStep(): Promise<number | undefined> {
    return (await this.allSteps()).at(-1);
  }

  /** What `step` was saved with. */
  async metadata(step: number): Promise<StepMetadata> {
    checkStep(step);
    return (await this.#open()).metadata(step);
  }

  /**
   * Loads `step` into `target` in place (strict: every leaf the target asks for must be there;
   * a subtree like `{ model }` is fine). Without a target, resolves the whole state as host values.
   */
  restore(step: number, target: StateDict, options?: Pick<LoadOptions, "partial" | "signal">): Promise<LoadResult>;
  restore(step: number): Promise<StateDict>;
  async restore(step: number, target?: StateDict, options: Pick<LoadOptions, "partial" | "signal"> = {}): Promise<LoadResult | StateDict> {
    checkStep(step);
    this.#throwBackgroundError();
    const store = await this.#open();
    await store.requireCommitted(step);
    const where = { ...this.#options.load, ...options, storage: store.storage, path: stepDir(step) };
    return target === undefined ? load(where) : load(target, where);
  }

  /** Deletes a step: un-committed first, so a crash midway leaves no half-deleted committed step. */
  async delete(step: number): Promise<void> {
    checkStep(step);
    this.#checkWritable("delete");
    await (await this.#open()).deleteStep(step);
  }

  /** Waits for every background upload and deletion, and rejects with a failure among them (once). */
  async join(): Promise<void> {
    await this.#drain();
    this.#throwBackgroundError();
  }

  /** Joins, removes the preemption handlers and releases storage and staging buffers. Unusable afterwards. */
  async close(): Promise<void> {
    if (this.#closed) return;
    for (const source of this.#preemptionSources) source.stop();
    try {
      await this.join();
    } finally {
      this.#closed = true;
      this.#events.clear();
      this.#pool.clear();
      if (this.#store && typeof this.#location === "string") await (await this.#store).storage.close();
    }
  }

  async #save(step: number, stateDict: StateDict, options: SaveStepOptions, background: boolean): Promise<boolean> {
    checkStep(step);
    this.#throwBackgroundError();
    const forPreemption = this.#preemptionPending();
    if (!(step % this.saveInterval === 0 || options.force || forPreemption)) return false;
    this.#checkWritable("save");
    const store = await this.#open();
    if (background) await this.#waitForRoom();
    else await this.#drain();
    this.#throwBackgroundError();
    if (this.#pending.has(step)) throw new CheckpointError("already_exists", `step ${step} is already being saved`, { context: { step } });
    if (await store.isCommitted(step)) {
      if (forPreemption && !options.overwrite) {
        this.#preemptionStep = step;
        return true;
      }
      if (!options.overwrite) {
        throw new CheckpointError("already_exists", `step ${step} is already committed under ${store.storage.root}; pass { overwrite: true } to replace it`, { context: { step } });
      }
      await store.deleteStep(step);
    }
    const savedAt = new Date(this.#now()).toISOString();
    const metadata = { step, savedAt, metrics: options.metrics ?? {}, metadata: options.metadata ?? {} };
    const where = { ...this.#options.save, storage: store.storage, path: stepDir(step), metadata };
    if (!background) {
      this.#committed(store, step, savedAt, metadata.metrics, await save(stateDict, where));
    } else {
      const { staged, done } = await asyncSave(stateDict, {
        ...where,
        staging: this.#options.staging ?? "copy",
        pool: this.#pool,
        schedule: (upload) => this.#uploads.add(upload),
      });
      const info = await staged;
      this.#events.emit("staged", { step, bytes: info.bytes, seconds: info.seconds });
      const settled = done.then(
        (result) => this.#committed(store, step, savedAt, metadata.metrics, result),
        (error: unknown) => {
          this.#backgroundError ??= error;
          this.#events.emit("error", { step, error });
        },
      );
      this.#pending.set(step, settled);
      void settled.finally(() => this.#pending.delete(step));
      if (forPreemption) {
        await settled;
        this.#throwBackgroundError();
      }
    }
    if (forPreemption) this.#preemptionStep = step;
    return true;
  }

  #committed(store: StepStore, step: number, savedAt: string, metrics: Readonly<Record<string, number>>, result: SaveResult): void {
    store.remember({ step, time: Date.parse(savedAt), metrics });
    this.#events.emit("committed", { step, bytes: result.bytes, seconds: result.seconds });
    this.#background = this.#background
      .then(() => store.applyRetention(this.#options, this.#options.leftoverAgeMs ?? 24 * 3600 * 1000, this.#now(), new Set(this.#pending.keys())))
      .then(
        () => undefined,
        (error: unknown) => {
          this.#backgroundError ??= error;
          this.#events.emit("error", { error });
        },
      );
  }

  #onPreemption(reason: string): void {
    if (this.#preemptionNotice !== undefined) return;
    // With several ranks, the distributed process group agrees on the step; alone, the next save is it.
    this.#preemptionNotice = reason;
    this.#events.emit("preemption", { reason });
  }

  #preemptionPending(): boolean {
    return this.#preemptionNotice !== undefined && this.#preemptionStep === undefined;
  }

  async #waitForRoom(): Promise<void> {
    const max = this.#options.maxPendingAsync ?? 1;
    while (this.#pending.size >= max) await Promise.race(this.#pending.values());
  }

  async #drain(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all(this.#pending.values());
    let background: Promise<void>;
    do {
      background = this.#background;
      await background;
    } while (background !== this.#background);
  }

  #now(): number {
    return (this.#options.now ?? Date.now)();
  }

  #open(): Promise<StepStore> {
    if (this.#closed) return Promise.reject(new CheckpointError("invalid_argument", "the CheckpointManager is closed"));
    this.#store ??= (typeof this.#location === "string" ? openStorage(this.#location, this.#options.storageOptions) : Promise.resolve(this.#location)).then(
      (storage) => new StepStore(storage),
    );
    return this.#store;
  }

  #checkWritable(what: string): void {
    if (this.#options.readOnly) throw new CheckpointError("invalid_argument", `this CheckpointManager is read-only; it cannot ${what}`);
  }

  #throwBackgroundError(): void {
    if (this.#backgroundError === undefined) return;
    const error = this.#backgroundError;
    this.#backgroundError = undefined;
    throw error;
  }
}
