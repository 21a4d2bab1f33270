import type { CoordinatedProcessGroup, LoadResult, StateDict, StorageAdapter } from "@cairn/core";
import { SingleProcessGroup } from "@cairn/core";
import "@cairn/storage-local";
import type { CheckpointManagerOptions, CloseOptions } from "./checkpoint-manager-options.js";
import { checkCloseOptions, checkManagerArguments } from "./checkpoint-manager-options.js";
import type { LatestStepOptions, RestoreOptions, SaveStepOptions } from "./arguments/manager-arguments.js";
import { checkLatestOptions, checkListener, checkRestoreArguments } from "./arguments/manager-arguments.js";
import { checkSaveArguments, checkStateDict, checkWritable } from "./arguments/manager-arguments.js";
import { ManagerEmitter, type ManagerEventName, type ManagerEvents } from "./events/manager-events.js";
import { PreemptionWatch, watchedSources } from "./preemption/preemption-watch.js";
import { IncrementalBases } from "./pipeline/incremental-bases.js";
import { SavePipeline } from "./pipeline/save-pipeline.js";
import { FixedIntervalPolicy, type SaveDecisionPolicy } from "./pipeline/save-policy.js";
import { StepSaver } from "./pipeline/save-step.js";
import { checkStep } from "./steps/step-naming.js";
import type { StepMetadata } from "./steps/step-store.js";
import { type JoinResult, TierSet } from "./tiers/tier-set.js";
import { Durability } from "./durability/durability.js";
import type { ManagerHealth } from "./durability/loss-budget.js";
import { restoreStep } from "./durability/restore-step.js";
import type { TierState } from "./tiers/tier.js";

/**
 * Checkpoints a training loop, like torch_xla's and Orbax's `CheckpointManager`: call
 * `save(step, stateDict)` or `saveAsync(step, stateDict)` every step and it saves when its
 * `SaveDecisionPolicy` says so (a number: every `saveInterval`-th step), when forced, or after a
 * preemption notice, into `<root>/<step>/` in Cairn's format, then applies retention in the
 * background. The root is listed once, when first needed, and its index of steps kept in
 * memory; `reload()` lists again for steps another process wrote. Given several locations
 * (fastest first) it commits to the first and copies each step down the others (docs/tiers.md).
 *
 * Call order: construct, saves, restores and queries, then `close()`. Errors are `CheckpointError`s
 * with a code and the offending value; a failed background upload is emitted as `error` and,
 * unless transient (the run goes on within its loss budget), rejects the next call, once; a step retention cannot delete is reported and retried, never fatal.
 * Managers may share a root: damaged or foreign steps are reported (`"listing"`) and skipped.
 */
type Restored = LoadResult | StateDict;

export class CheckpointManager {
  /** Which steps `save` saves: a number given as `saveInterval` is a `FixedIntervalPolicy`. */
  readonly savePolicy: SaveDecisionPolicy;
  readonly #options: CheckpointManagerOptions;
  readonly #events = new ManagerEmitter();
  readonly #pipeline: SavePipeline;
  readonly #preemption: PreemptionWatch;
  readonly #tiers: TierSet;
  readonly #saver: StepSaver;
  readonly #durability: Durability;
  readonly #bases: IncrementalBases;
  #closed: JoinResult | undefined;

  /** `location` is a URL, a path or a `StorageAdapter`; or an array of them, fastest first (tiers, docs/tiers.md). */
  constructor(
    location: string | StorageAdapter | readonly (string | StorageAdapter)[],
    saveInterval: number | SaveDecisionPolicy,
    given: CheckpointManagerOptions = {},
  ) {
    const { locations, options, policy } = checkManagerArguments(location, saveInterval, given);
    const group = (options.processGroup as CoordinatedProcessGroup | undefined) ?? new SingleProcessGroup();
    const now = (): number => (options.now ?? Date.now)();
    this.savePolicy = policy;
    this.#options = options;
    const bases = new IncrementalBases(options.incremental, (step) => this.#durability.isDamaged(step));
    this.#bases = bases;
    const events = this.#events;
    const isSaving = (step: number): boolean => this.#pipeline.isBusy(step) || bases.isBusy(step);
    const holds = (step: number): boolean => this.#durability.holds(step);
    this.#tiers = new TierSet({ locations, options, group, events, now, isSaving, holds });
    const durable = { tiers: this.#tiers.all, events, group, options: options.durability, now };
    this.#durability = new Durability({ ...durable, saveInterval: this.saveInterval ?? 1 });
    this.#pipeline = new SavePipeline({ ...options, location: locations[0]!, writable: !options.readOnly, events });
    const beforeSave = (step: number): Promise<void> => this.#durability.beforeSave(step);
    const parts = { tiers: this.#tiers, pipeline: this.#pipeline, bases, group, events, now, beforeSave };
    this.#saver = new StepSaver({ ...parts, save: options.save });
    this.#preemption = new PreemptionWatch({ group, sources: watchedSources(options), events });
  }

  /** The interval a number given as `saveInterval` set; undefined with another policy. */
  get saveInterval(): number | undefined {
    return this.savePolicy instanceof FixedIntervalPolicy ? this.savePolicy.interval : undefined;
  }

  /** Subscribes to an event of `ManagerEvents` (`committed`, `error`, `lossBudget`, ...); returns the unsubscribe function. */
  on<E extends ManagerEventName>(event: E, listener: (payload: ManagerEvents[E]) => void): () => void {
    checkListener(event, listener);
    return this.#events.on(event, listener);
  }

  /** Whether `save(step)` would save: as the policy says, and once after a preemption notice (with several ranks, at the agreed step). */
  shouldSave(step: number): boolean {
    checkStep(step);
    this.#pipeline.startWorker();
    return this.savePolicy.shouldSave(step) || this.#preemption.mayBeDue(step);
  }

  /** True once a preemption notice arrived and its checkpoint is committed at `step` or before: stop training. */
  reachedPreemption(step: number): boolean {
    return this.#preemption.reached(checkStep(step));
  }

  /** Saves `stateDict` as `step` if the policy says so (or `force`, or a preemption notice), once committed; resolves whether it saved. */
  async save(step: number, stateDict: StateDict, options: SaveStepOptions = {}): Promise<boolean> {
    return this.#save(step, stateDict, options, false);
  }

  /**
   * Like `save`, but resolves once the state is staged into host memory the manager owns (then
   * training may change every tensor); the upload goes on in the background, at most
   * `async.maxPending` at once. After a preemption notice it waits until the step is committed.
   */
  async saveAsync(step: number, stateDict: StateDict, options: SaveStepOptions = {}): Promise<boolean> {
    return this.#save(step, stateDict, options, true);
  }

  /** Readies (allocates and makes resident, off the training thread) the staging memory `saveAsync` of such state dicts uses. */
  async prepare(stateDict: StateDict): Promise<void> {
    checkStateDict(stateDict);
    checkWritable(this.#options.readOnly, "prepare saves");
    await this.#pipeline.prepare(stateDict, this.#options.save ?? {});
  }

  /**
   * Committed steps on any location, ascending, once retention caught up (damaged steps left
   * out); see `reload()`. Throws `storage` while a location cannot be listed (it may hold newer
   * steps), unless `replication.unlistedTiers` is `"leaveOut"`; so do `latestStep` and `restore("latest")`.
   */
  allSteps(): Promise<number[]> {
    return this.#tiers.allSteps();
  }

  /**
   * The newest of `allSteps()`, reading the metadata of that step alone. With `verified`, the
   * newest step whose bytes pass a full `verify`, skipping damaged ones (`skipped` events).
   */
  async latestStep(options: LatestStepOptions = {}): Promise<number | undefined> {
    checkLatestOptions(options);
    await this.#tiers.open();
    return options.verified ? this.#durability.latestVerified(options.signal) : this.#tiers.latestStep();
  }

  /** Lists every location again, like Orbax's `reload()`, for steps another process committed or deleted since. */
  reload(): Promise<void> {
    return this.#tiers.reload();
  }

  /** What `step` was saved with. */
  async metadata(step: number): Promise<StepMetadata> {
    checkStep(step);
    return this.#tiers.metadata(step);
  }

  /**
   * Loads `step` into `target` in place (strict: every leaf the target asks for must be there;
   * a subtree like `{ model }` is fine); without a target, resolves the whole state as host values.
   * `"latest"`: the newest step whose bytes verify, falling back step by step and tier by tier.
   */
  restore(step: "latest", target: StateDict, options?: RestoreOptions): Promise<LoadResult & { readonly step: number }>;
  restore(step: number, target: StateDict, options?: RestoreOptions): Promise<LoadResult>;
  restore(step: number | "latest"): Promise<StateDict>;
  async restore(step: number | "latest", target?: StateDict, options: RestoreOptions = {}): Promise<Restored> {
    if (step !== "latest") checkStep(step);
    checkRestoreArguments(target, options);
    this.#pipeline.throwFailure();
    return restoreStep(this.#tiers, this.#durability, step, target, { ...this.#options.load, ...options });
  }

  /**
   * Deletes a step from every location: un-committed first, so a crash midway leaves no half-deleted committed step.
   * Background saves end first, and those using it as their base: one still uploading the step would commit it after, one using it as a base would fail.
   */
  async delete(step: number): Promise<void> {
    checkStep(step);
    checkWritable(this.#options.readOnly, "delete");
    // After the saves of this step called before, before those called after: its files are never swept while a save writes them.
    await this.#pipeline.exclusive(step, async () => {
      await this.#pipeline.drain();
      await this.#bases.deleting(step);
      await this.#tiers.delete(step);
      this.#durability.forget(step);
    });
  }

  /** Waits for every background upload, copy and retention pass; rejects with a failed upload (once). */
  async join(): Promise<JoinResult> {
    await this.#pipeline.drain();
    await this.#tiers.settled();
    await this.#durability.settled();
    this.#pipeline.throwFailure();
    return this.#tiers.result();
  }

  /** Each location's state: where each step lives, what is still to be copied, which is failing. */
  tiers(): Promise<TierState[]> {
    return this.#tiers.states();
  }

  /** What is at risk now (steps and seconds not yet on the last tier, the loss budget); no I/O. */
  health(): ManagerHealth {
    return this.#durability.health();
  }

  /** Joins (copies to slower tiers for up to `timeoutMs`), removes preemption handlers, releases everything; idempotent. */
  async close(options: CloseOptions = {}): Promise<JoinResult> {
    if (this.#closed) return this.#closed;
    const timeoutMs = checkCloseOptions(options);
    this.#preemption.stop();
    let result: JoinResult = this.#tiers.result();
    try {
      result = await this.#tiers.settleForClose(timeoutMs, this.#pipeline, () => this.join());
      await this.#tiers.followRankZero();
      return result;
    } finally {
      this.#durability.stop();
      this.#closed = result;
      this.#events.clear();
      this.#pipeline.clear();
      await this.#tiers.close();
    }
  }

  async #save(step: number, stateDict: StateDict, options: SaveStepOptions, background: boolean): Promise<boolean> {
    checkStep(step);
    checkSaveArguments(stateDict, options);
    this.#pipeline.startWorker();
    this.#preemption.enter(step);
    this.#pipeline.throwFailure();
    // Taken at the call: saves and deletions of one step take effect in the order they were called.
    return this.#pipeline.exclusive(step, () => this.#saveInTurn(step, stateDict, options, background));
  }

  async #saveInTurn(
    step: number,
    stateDict: StateDict,
    options: SaveStepOptions,
    background: boolean,
  ): Promise<boolean> {
    const forPreemption = await this.#preemption.isDue(step);
    if (!(options.force || forPreemption || this.savePolicy.shouldSave(step))) return false;
    checkWritable(this.#options.readOnly, "save");
    try {
      await this.#saver.save(step, stateDict, options, { background, forPreemption });
    } catch (error) {
      this.#durability.saveFailed(step, error);
      throw error;
    }
    if (forPreemption) this.#preemption.checkpointed(step);
    return true;
  }
}
