import {
  CheckpointError,
  type LoadOptions,
  type LoadResult,
  METADATA_FILE,
  type StateDict,
  type StorageAdapter,
  type StorageOptions,
  isCheckpointError,
  joinPath,
  knownProtocols,
  load,
  openStorage,
  readMetadata,
  save,
  storageUrl,
} from "@cairn/core";
import "@cairn/storage-local";
import { type RetentionOptions, type StepRecord, stepsToDelete } from "./retention-policy.js";
import { checkStep, parseStep, stepDir } from "./step-naming.js";
import { type CheckpointManagerOptions, checkOptions } from "./checkpoint-manager-options.js";

export type { CheckpointManagerOptions } from "./checkpoint-manager-options.js";

/** Per-call options of `save`. */
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

/** What a step was saved with. */
export interface StepMetadata {
  readonly step: number;
  /** ISO 8601 commit time. */
  readonly savedAt: string;
  readonly metrics: Readonly<Record<string, number>>;
  readonly metadata: Readonly<Record<string, unknown>>;
}

/**
 * Checkpoints a training loop, like torch_xla's and Orbax's `CheckpointManager`: call
 * `save(step, stateDict)` every step and it saves when `step % saveInterval === 0` (or when
 * forced), into `<root>/<step>/` in Cairn's format, then applies retention in the background.
 * `allSteps()` lists committed steps from storage, so a new process sees an old run;
 * `restore(step, target)` loads one in place.
 *
 * Call order: construct, any number of `save`/`restore`/queries, then `close()`. Methods
 * reject with `CheckpointError`: `invalid_argument` for bad input (nothing saved is touched),
 * `already_exists` for a committed step saved again without `overwrite`, `not_found` for a
 * step that does not exist, and a background failure (a retention deletion) once, on the
 * next call.
 */
export class CheckpointManager {
  readonly saveInterval: number;
  readonly #location: string | StorageAdapter;
  readonly #options: CheckpointManagerOptions;
  readonly #records = new Map<number, StepRecord>();
  #storage: Promise<StorageAdapter> | undefined;
  #background: Promise<void> = Promise.resolve();
  #backgroundError: unknown;
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
  }

  /** Whether `save(step)` would save: every `saveInterval` steps. */
  shouldSave(step: number): boolean {
    return checkStep(step) % this.saveInterval === 0;
  }

  /**
   * Saves `stateDict` as `step` if the interval says so or `force` is set; resolves whether it
   * did. Steps it skips cost no I/O (building the state dict does: guard with `shouldSave`).
   */
  async save(step: number, stateDict: StateDict, options: SaveStepOptions = {}): Promise<boolean> {
    checkStep(step);
    this.#throwBackgroundError();
    if (!this.shouldSave(step) && !options.force) return false;
    this.#checkWritable("save");
    const storage = await this.#open();
    if (await this.#isCommitted(storage, step)) {
      if (!options.overwrite) {
        throw new CheckpointError("already_exists", `step ${step} is already committed under ${storage.root}; pass { overwrite: true } to replace it`, {
          context: { step },
        });
      }
      await this.#deleteStep(storage, step);
    }
    const savedAt = new Date(this.#now()).toISOString();
    const user = { step, savedAt, metrics: options.metrics ?? {}, metadata: options.metadata ?? {} };
    await save(stateDict, { ...this.#options.save, storage, path: stepDir(step), metadata: user });
    this.#records.set(step, { step, time: Date.parse(savedAt), metrics: user.metrics });
    this.#runInBackground(() => this.#applyRetention(storage));
    return true;
  }

  /** Committed steps, ascending, read from storage. */
  async allSteps(): Promise<number[]> {
    const storage = await this.#open();
    const steps: number[] = [];
    for await (const object of storage.list("")) {
      const [dir, name, extra] = object.path.split("/");
      const step = parseStep(dir ?? "");
      if (step !== undefined && name === METADATA_FILE && extra === undefined) steps.push(step);
    }
    return steps.sort((a, b) => a - b);
  }

  async latestStep(): Promise<number | undefined> {
    return (await this.allSteps()).at(-1);
  }

  /** What `step` was saved with. */
  async metadata(step: number): Promise<StepMetadata> {
    checkStep(step);
    const storage = await this.#open();
    await this.#requireCommitted(storage, step);
    const user = (await readMetadata({ storage, path: stepDir(step) })).user as Partial<StepMetadata>;
    return { step, savedAt: user.savedAt ?? "", metrics: user.metrics ?? {}, metadata: user.metadata ?? {} };
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
    const storage = await this.#open();
    await this.#requireCommitted(storage, step);
    const where = { ...this.#options.load, ...options, storage, path: stepDir(step) };
    return target === undefined ? load(where) : load(target, where);
  }

  /** Deletes a step: un-committed first, so a crash midway leaves no half-deleted committed step. */
  async delete(step: number): Promise<void> {
    checkStep(step);
    this.#checkWritable("delete");
    await this.#deleteStep(await this.#open(), step);
  }

  /** Waits for background work (retention) and rejects with its failure, if any. */
  async join(): Promise<void> {
    await this.#background;
    this.#throwBackgroundError();
  }

  /** Joins, then releases the storage. The manager is unusable afterwards. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      await this.join();
    } finally {
      if (this.#storage && typeof this.#location === "string") await (await this.#storage).close();
    }
  }

  #now(): number {
    return (this.#options.now ?? Date.now)();
  }

  #open(): Promise<StorageAdapter> {
    if (this.#closed) return Promise.reject(new CheckpointError("invalid_argument", "the CheckpointManager is closed"));
    this.#storage ??= typeof this.#location === "string" ? openStorage(this.#location, this.#options.storageOptions as StorageOptions) : Promise.resolve(this.#location);
    return this.#storage;
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

  #runInBackground(task: () => Promise<void>): void {
    this.#background = this.#background.then(task).catch((error: unknown) => {
      this.#backgroundError ??= error;
    });
  }

  async #isCommitted(storage: StorageAdapter, step: number): Promise<boolean> {
    return (await storage.stat(joinPath(stepDir(step), METADATA_FILE))) !== null;
  }

  async #requireCommitted(storage: StorageAdapter, step: number): Promise<void> {
    if (await this.#isCommitted(storage, step)) return;
    const steps = await this.allSteps();
    throw new CheckpointError(
      "not_found",
      `step ${step} has no committed checkpoint under ${storage.root}; committed steps: ${steps.length ? steps.join(", ") : "none"}`,
      { context: { step } },
    );
  }

  async #deleteStep(storage: StorageAdapter, step: number): Promise<void> {
    const dir = stepDir(step);
    await storage.delete(joinPath(dir, METADATA_FILE));
    this.#records.delete(step);
    const rest: string[] = [];
    for await (const object of storage.list(`${dir}/`)) rest.push(object.path);
    await Promise.all(rest.map((path) => storage.delete(path)));
  }

  async #record(storage: StorageAdapter, step: number): Promise<StepRecord> {
    const cached = this.#records.get(step);
    if (cached) return cached;
    const metadata = await readMetadata({ storage, path: stepDir(step) });
    const user = metadata.user as Partial<StepMetadata>;
    const record = { step, time: Date.parse(user.savedAt ?? metadata.createdAt), metrics: user.metrics ?? {} };
    this.#records.set(step, record);
    return record;
  }

  /** Deletes what retention no longer keeps, and leftovers of saves that never committed once they are old enough. */
  async #applyRetention(storage: StorageAdapter): Promise<void> {
    const committed = new Set<number>();
    const leftovers = new Map<number, { paths: string[]; newest: number }>();
    for await (const object of storage.list("")) {
      const [dir, name] = object.path.split("/");
      const step = parseStep(dir ?? "");
      if (step === undefined || name === undefined) continue;
      if (name === METADATA_FILE) committed.add(step);
      const entry = leftovers.get(step) ?? { paths: [], newest: 0 };
      entry.paths.push(object.path);
      entry.newest = Math.max(entry.newest, object.modified?.getTime() ?? Infinity);
      leftovers.set(step, entry);
    }
    const retention: RetentionOptions = this.#options;
    const records = await Promise.all([...committed].map((step) => this.#record(storage, step)));
    for (const step of stepsToDelete(records, retention)) await this.#deleteStep(storage, step);
    const maxAge = this.#options.leftoverAgeMs ?? 24 * 60 * 60 * 1000;
    for (const [step, { paths, newest }] of leftovers) {
      if (committed.has(step) || this.#now() - newest < maxAge) continue;
      await Promise.all(paths.map((path) => storage.delete(path).catch((error: unknown) => {
        if (!isCheckpointError(error, "not_found")) throw error;
      })));
    }
  }
}
