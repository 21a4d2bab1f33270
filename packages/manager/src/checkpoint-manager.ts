import {
  CheckpointError,
  type CoordinatedProcessGroup,
  isCheckpointError,
  type LoadResult,
  type ProcessGroup,
  type SaveResult,
  type StateDict,
  type StorageAdapter,
  SingleProcessGroup,
  load,
  save,
} from "@cairn/core";
import { checkDuration, longTimer } from "@cairn/core/storage";
import "@cairn/storage-local";
import {
  type CheckpointManagerOptions,
  type CloseOptions,
  checkManagerArguments,
} from "./checkpoint-manager-options.js";
import {
  type RestoreOptions,
  type SaveStepOptions,
  checkLatestOptions,
  checkListener,
  checkRestoreArguments,
  checkSaveStepOptions,
  checkStateDict,
} from "./arguments/manager-arguments.js";
import { ManagerEmitter, type ManagerEventName, type ManagerEvents } from "./events/manager-events.js";
import { platformPreemptionSources } from "#platform/preemption/preemption-defaults.js";
import { PreemptionWatch } from "./preemption/preemption-watch.js";
import { Replication } from "./tiers/replication.js";
import { DeletionPoster, type DeletionFollower, followDeletions } from "./tiers/rank-deletions.js";
import type { UnreplicatedStep } from "./tiers/replication-queue.js";
import { IncrementalBases } from "./pipeline/incremental-bases.js";
import { SavePipeline } from "./pipeline/save-pipeline.js";
import { checkStep, stepDir } from "./steps/step-naming.js";
import type { RetentionFailure, StepMetadata, StepStore } from "./steps/step-store.js";
import { Tier, type TierState } from "./tiers/tier.js";
import { tierConfigs } from "./tiers/tier-config.js";
import { allStepsOf, deleteEverywhere, latestStepOf, metadataOf, tierStates } from "./tiers/tiered-steps.js";
import { agreeOnSave, decideSave } from "./pipeline/save-decision.js";
import { FixedIntervalPolicy, type SaveDecisionPolicy } from "./pipeline/save-policy.js";
import { CHECKPOINT_ID_FIELD, OVERWRITE_FIELD, savedIdentity } from "./tiers/copy-identity.js";
import { restoreFromTiers } from "./tiers/tiered-restore.js";
import { Durability } from "./durability/durability.js";
import type { ManagerHealth } from "./durability/loss-budget.js";

export type {
  AsyncSaveOptions,
  CheckpointManagerOptions,
  CloseOptions,
  FlatManagerOptions,
  ManagerRetentionOptions,
  PreemptionOptions,
} from "./checkpoint-manager-options.js";
export type { RestoreOptions, SaveStepOptions } from "./arguments/manager-arguments.js";
export type { RetentionFailure, StepMetadata } from "./steps/step-store.js";
export type { TierState } from "./tiers/tier.js";
export type { UnreplicatedStep } from "./tiers/replication-queue.js";
export type { ManagerHealth } from "./durability/loss-budget.js";
export type { DurabilityOptions, OnExceeded } from "./durability/durability-options.js";

/** What `join()` and `close()` resolve with once every background upload and retention pass is done. */
export interface JoinResult {
  /**
   * Steps retention should have deleted but could not, as of its latest pass, each with the
   * error; `step` is undefined when a pass could not list the root. Every later pass retries
   * them; empty when retention is caught up.
   */
  readonly retentionFailures: readonly RetentionFailure[];
  /**
   * Tiered managers only: the copies to slower tiers not done, newest first, each with its latest
   * error (retried until `close()`, unless `permanent`). Empty when every tier holds what it takes.
   */
  readonly unreplicated?: readonly UnreplicatedStep[];
}

/**
 * Checkpoints a training loop, like torch_xla's and Orbax's `CheckpointManager`: call
 * `save(step, stateDict)` or `saveAsync(step, stateDict)` every step and it saves when its
 * `SaveDecisionPolicy` says so (every `saveInterval`-th step for a number; or when forced, or
 * after a preemption notice), into
 * `<root>/<step>/` in Cairn's format, then applies retention in the background. The manager
 * lists its root once, when first needed (so a new process sees an old run), then keeps its
 * index of steps in memory: `allSteps()` and saves cost the same on 10 or 10,000 steps, and
 * `reload()` lists again for steps another process wrote. `restore(step, target)` loads one in place.
 *
 * Call order: construct, any number of saves, restores and queries, then `close()` (which
 * waits for background uploads and retention and removes the preemption handlers). Methods
 * throw `CheckpointError`: `invalid_argument` for bad arguments, with the offending value
 * (nothing saved is touched), `already_exists` for a committed step saved again without
 * `overwrite`, `not_found` for a missing step. A failed background upload is never silent: it
 * is emitted as `error` and rejects the next `save`, `saveAsync`, `restore`, `join` or `close`,
 * once. A step retention cannot delete fails nothing: it is emitted as `error` (operation
 * `"retention"`), listed in what `join()` and `close()` resolve, and retried by every later pass.
 *
 * Several managers may write under one root (a trainer and an evaluator): each sees the others'
 * steps after its `reload()` (and its leftover sweep, once per `leftoverAgeMs`), a step another one
 * deleted meanwhile counts as deleted, and a step whose metadata is damaged or foreign is
 * reported (`error`, operation `"listing"`) and skipped by listing and retention, never deleted.
 */
export class CheckpointManager {
  /** Which steps `save` saves: a number given as `saveInterval` is a `FixedIntervalPolicy`. */
  readonly savePolicy: SaveDecisionPolicy;
  readonly #options: CheckpointManagerOptions;
  readonly #events = new ManagerEmitter();
  readonly #pipeline: SavePipeline;
  readonly #group: CoordinatedProcessGroup;
  readonly #preemption: PreemptionWatch;
  /** The locations, fastest first: saves commit to tier 0, copies go down the list. One for an untiered manager. */
  readonly #tiers: Tier[];
  /** Tiered managers only. */
  readonly #replication: Replication | undefined;
  #discovery: Promise<void> | undefined;
  /** Several ranks, not rank 0: the deletions rank 0's tier 0 retention asks of this rank's tier 0. */
  #deletions: DeletionFollower | undefined;
  #deletionPoster: DeletionPoster | undefined;
  readonly #bases: IncrementalBases;
  readonly #durability: Durability;
  #closed: JoinResult | undefined;

  /**
   * `location` is a URL, a path or a `StorageAdapter`; or an array of them, fastest first: a
   * tiered manager, which commits to the first and copies each step down the others in the
   * background (see `tiers` and `replication`, and docs/tiers.md).
   */
  constructor(
    location: string | StorageAdapter | readonly (string | StorageAdapter)[],
    saveInterval: number | SaveDecisionPolicy,
    given: CheckpointManagerOptions = {},
  ) {
    const { locations, options, policy } = checkManagerArguments(location, saveInterval, given);
    this.#group = (options.processGroup as CoordinatedProcessGroup | undefined) ?? new SingleProcessGroup();
    this.savePolicy = policy;
    this.#options = options;
    this.#bases = new IncrementalBases(options.incremental);
    // Several ranks with tiers: rank 0 alone decides retention, and sends each rank what to sweep of its tier 0.
    const multiRankTiers = locations.length > 1 && !options.readOnly && this.#group.worldSize > 1;
    this.#tiers = tierConfigs(locations, options).map(
      (config) =>
        new Tier({
          config,
          storageOptions: options.storageOptions,
          leftoverAgeMs: options.leftoverAgeMs ?? 24 * 3600 * 1000,
          now: () => this.#now(),
          isBusy: (tier, step) =>
            (tier === 0 && (this.#pipeline.isBusy(step) || this.#bases.isBusy(step))) ||
            (this.#replication?.isHeld(tier, step) ?? false) ||
            (this.#replication?.queue.has(step, tier) ?? false) ||
            this.#durability.holds(step),
          onDamaged: (tier, step, error) =>
            this.#events.report({ step, error, operation: "listing", ...(this.#tiered ? { tier } : {}) }),
          onRetentionFailure: (tier, { step, error }) =>
            this.#events.report({
              ...(step === undefined ? {} : { step }),
              error,
              operation: "retention",
              ...(this.#tiered ? { tier } : {}),
            }),
          // Several ranks, each with its own tier 0: rank 0's retention tells the others exactly which files to delete from theirs.
          onDeleted: (tier, steps, swept) => (tier === 0 ? this.#deletionPoster?.post(steps, swept) : undefined),
          sweepsByRank: multiRankTiers && this.#group.rank === 0,
          retains: !(multiRankTiers && this.#group.rank !== 0),
        }),
    );
    if (this.#tiers.length > 1 && !options.readOnly) {
      this.#replication = new Replication({
        tiers: this.#tiers,
        options: options.replication ?? {},
        events: this.#events,
        now: () => this.#now(),
        group: this.#group,
      });
      if (this.#group.worldSize > 1 && this.#group.rank === 0) this.#deletionPoster = new DeletionPoster(this.#group);
      if (this.#group.rank !== 0) this.#deletions = followDeletions(this.#group, this.#tiers[0]!, this.#events);
    }
    this.#durability = new Durability({
      tiers: this.#tiers,
      events: this.#events,
      group: this.#group,
      options: options.durability,
      now: () => this.#now(),
      saveInterval: this.saveInterval ?? 1,
    });
    this.#pipeline = new SavePipeline({
      ...options,
      location: locations[0]!,
      writable: !options.readOnly,
      events: this.#events,
    });
    const watched = (options.checkpointOnPreemption ?? true) && !options.readOnly;
    this.#preemption = new PreemptionWatch({
      group: this.#group,
      sources: watched ? [...platformPreemptionSources(options), ...(options.preemptionSources ?? [])] : [],
      events: this.#events,
    });
  }

  /** The interval a number given as `saveInterval` set; undefined with another policy. */
  get saveInterval(): number | undefined {
    return this.savePolicy instanceof FixedIntervalPolicy ? this.savePolicy.interval : undefined;
  }

  /**
   * Subscribes to `staged`, `committed`, `replicated`, `error`, `preemption`, `skipped`, `stale` or
   * `lossBudget` (see `ManagerEvents`); returns the unsubscribe function.
   */
  on<E extends ManagerEventName>(event: E, listener: (payload: ManagerEvents[E]) => void): () => void {
    checkListener(event, listener);
    return this.#events.on(event, listener);
  }

  /**
   * Whether `save(step)` would save: when the save policy says so, and once after a preemption
   * notice (with several ranks: at the agreed step, or when this call must join the agreement).
   */
  shouldSave(step: number): boolean {
    checkStep(step);
    this.#pipeline.startWorker();
    return this.savePolicy.shouldSave(step) || this.#preemption.mayBeDue(step);
  }

  /** True once a preemption notice arrived and its checkpoint is committed at `step` or before: stop training. */
  reachedPreemption(step: number): boolean {
    return this.#preemption.reached(checkStep(step));
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

  /**
   * Readies the staging memory that `saveAsync` of state dicts shaped like `stateDict` will use:
   * allocated now and made resident by another thread, so that even the first background save
   * blocks only for copying the state. Call it once before training (a `saveAsync` meanwhile
   * waits for it); it reads no tensor data and keeps nothing of the state dict.
   */
  async prepare(stateDict: StateDict): Promise<void> {
    checkStateDict(stateDict);
    this.#checkWritable("prepare saves");
    await this.#pipeline.prepare(stateDict, this.#options.save ?? {});
  }

  /**
   * Committed steps, ascending, once retention caught up with the saves so far (damaged steps are
   * left out): from the manager's index (the root is listed on first use), so steps another
   * process committed or deleted since show after `reload()`.
   */
  async allSteps(): Promise<number[]> {
    const store = await this.#open();
    if (this.#tiered) return allStepsOf(this.#tiers, this.#events, this.#group);
    await this.#tiers[0]!.retention?.settled();
    return store.committedSteps();
  }

  /**
   * The newest of `allSteps()`, reading the metadata of that step alone. With `verified`, the
   * newest step whose bytes pass a full `verify`, skipping damaged ones (`skipped` events); steps
   * this manager saved, restored or verified are not read again. To resume, `restore("latest", …)`
   * alone reads the step once.
   */
  async latestStep(
    options: { readonly verified?: boolean; readonly signal?: AbortSignal } = {},
  ): Promise<number | undefined> {
    checkLatestOptions(options);
    const store = await this.#open();
    if (options.verified) return this.#durability.latestVerified(options.signal);
    if (this.#tiered) return latestStepOf(this.#tiers, this.#events, this.#group);
    await this.#tiers[0]!.retention?.settled();
    return store.latestStep();
  }

  /**
   * Lists the root again, like Orbax's `reload()`: call it when another process (an evaluator
   * watching a trainer, a second writer) may have committed or deleted steps since this manager
   * listed. Local to this rank; waits for retention first.
   */
  async reload(): Promise<void> {
    await this.#open();
    await Promise.all(
      this.#tiers.map(async (tier) => {
        const store = await tier.open();
        await tier.retention?.settled();
        try {
          await store.reload();
          tier.listingSucceeded();
        } catch (error) {
          // A slower tier that cannot be listed is reported (once per outage), as listing does; tier 0's failure is thrown.
          if (tier.index === 0) throw error;
          tier.listingFailed(error, (e) => this.#events.report({ error: e, operation: "listing", tier: tier.index }));
        }
      }),
    );
    if (this.#replication) await this.#discover(true);
  }

  /** What `step` was saved with. */
  async metadata(step: number): Promise<StepMetadata> {
    checkStep(step);
    const store = await this.#open();
    return this.#tiered ? metadataOf(this.#tiers, this.#events, step) : store.metadata(step);
  }

  /**
   * Loads `step` into `target` in place (strict: every leaf the target asks for must be there;
   * a subtree like `{ model }` is fine). Without a target, resolves the whole state as host values.
   */
  restore(step: "latest", target: StateDict, options?: RestoreOptions): Promise<LoadResult & { readonly step: number }>;
  restore(step: number, target: StateDict, options?: RestoreOptions): Promise<LoadResult>;
  restore(step: number | "latest"): Promise<StateDict>;
  async restore(
    step: number | "latest",
    target?: StateDict,
    options: RestoreOptions = {},
  ): Promise<LoadResult | StateDict> {
    if (step !== "latest") checkStep(step);
    checkRestoreArguments(target, options);
    this.#pipeline.throwFailure();
    const store = await this.#open();
    const loadOptions = { ...this.#options.load, ...options, processGroup: this.#group };
    // The newest step whose bytes verify, step by step and tier by tier (durability/).
    if (step === "latest") {
      const latest = await this.#durability.restoreLatest(target, loadOptions);
      return target === undefined ? latest.result : { ...(latest.result as LoadResult), step: latest.step };
    }
    const restored = await this.#restoreStep(store, step, target, loadOptions);
    this.#durability.restored(step, target === undefined ? undefined : (restored as LoadResult));
    return restored;
  }

  async #restoreStep(
    store: StepStore,
    step: number,
    target: StateDict | undefined,
    options: RestoreOptions & { readonly processGroup: CoordinatedProcessGroup },
  ): Promise<LoadResult | StateDict> {
    if (this.#tiered) return restoreFromTiers(this.#tiers, this.#events, step, target, options);
    await store.requireCommitted(step);
    const where = { ...options, storage: store.storage, path: stepDir(step) };
    return target === undefined ? load(where) : load(target, where);
  }

  /** Deletes a step (from every tier): un-committed first, so a crash midway leaves no half-deleted committed step. */
  async delete(step: number): Promise<void> {
    checkStep(step);
    this.#checkWritable("delete");
    await this.#open();
    await deleteEverywhere(this.#tiers, this.#replication, step);
    this.#durability.forget(step);
  }

  /**
   * Waits for every background upload and retention pass. Rejects with a failed upload (once);
   * otherwise resolves what retention could not delete.
   */
  async join(): Promise<JoinResult> {
    await this.#pipeline.drain();
    await this.#discovery;
    await this.#replication?.queue.settled();
    await Promise.all(this.#tiers.map((tier) => tier.retention?.settled()));
    await this.#durability.settled();
    this.#pipeline.throwFailure();
    return this.#joinResult();
  }

  /**
   * The tiers' states: where each step lives, what is still to be copied, which tier is failing.
   * One tier for an untiered manager. Lists each tier once, when first needed.
   */
  async tiers(): Promise<TierState[]> {
    await this.#open();
    return tierStates(this.#tiers, this.#replication);
  }

  /**
   * What is at risk now: the steps and seconds between the newest save and the newest step
   * committed on the last tier, whether the loss budget is exceeded, the last error, and the
   * saves and copies in flight. No I/O: cheap enough to call every step.
   */
  health(): ManagerHealth {
    return this.#durability.health();
  }

  /**
   * Joins, removes the preemption handlers and releases storage and staging buffers. Unusable
   * afterwards; closing again resolves the same result. A tiered manager first waits for its
   * copies (see `timeoutMs`), then stops them and resolves what was not replicated.
   */
  async close(options: CloseOptions = {}): Promise<JoinResult> {
    if (this.#closed) return this.#closed;
    const timeoutMs = options.timeoutMs;
    if (timeoutMs !== undefined) checkDuration(timeoutMs, "close option timeoutMs", { infinite: true });
    this.#preemption.stop();
    let result: JoinResult = this.#joinResult();
    try {
      if (this.#replication && timeoutMs !== undefined) {
        // Tier 0's saves are waited for whole; the rest (listing, copies, retention) only until the deadline, even on a tier that hangs.
        await this.#pipeline.drain();
        let cancel = (): void => undefined;
        const expired = new Promise<void>((resolve) => (cancel = longTimer(resolve, timeoutMs, { ref: true })));
        const rest = (async () => {
          await this.join();
          await this.#replication?.queue.drained(timeoutMs);
          // The last copies freed holds: the passes they scheduled run before closing.
          await Promise.all(this.#tiers.map((tier) => tier.retention?.settled()));
        })();
        rest.catch(() => undefined);
        await Promise.race([rest, expired]).finally(cancel);
        this.#pipeline.throwFailure();
        result = this.#joinResult();
      } else result = await this.join();
      // Several ranks: the others keep joining rank 0's copies, and deleting what its retention did, until it is done.
      if (this.#replication && this.#group.worldSize > 1) {
        const posted = await this.#group.group("cairn/manager/close").broadcast(this.#deletionPoster?.posted, 0);
        await this.#deletions?.settled(typeof posted === "number" ? posted : 0, 10_000);
      }
      return result;
    } finally {
      this.#replication?.stop();
      this.#deletions?.stop();
      this.#durability.stop();
      this.#closed = result;
      this.#events.clear();
      this.#pipeline.clear();
      await Promise.all(this.#tiers.map((tier) => tier.close()));
    }
  }

  async #save(step: number, stateDict: StateDict, options: SaveStepOptions, background: boolean): Promise<boolean> {
    checkStep(step);
    checkStateDict(stateDict);
    checkSaveStepOptions(options);
    this.#pipeline.startWorker();
    this.#preemption.enter(step);
    this.#pipeline.throwFailure();
    const forPreemption = await this.#preemption.isDue(step);
    if (!(options.force || forPreemption || this.savePolicy.shouldSave(step))) return false;
    this.#checkWritable("save");
    const store = await this.#open();
    await (background ? this.#pipeline.waitForRoom() : this.#pipeline.drain());
    this.#pipeline.throwFailure();
    if (this.#pipeline.isPending(step))
      throw new CheckpointError("already_exists", `step ${step} is already being saved`, { context: { step } });
    const decision = await agreeOnSave(this.#group.group(`step/${step}`), () =>
      decideSave(this.#tiers, step, { overwrite: options.overwrite === true, forPreemption }),
    );
    if (decision.kind === "refuse")
      throw new CheckpointError("already_exists", decision.message, { context: { step } });
    if (decision.kind === "done") {
      this.#preemption.checkpointed(step);
      return true;
    }
    // The loss budget: warn, wait or fail while too much is not durable (durability/).
    await this.#durability.beforeSave(step);
    if (decision.replace && this.#group.rank === 0) await deleteEverywhere(this.#tiers, this.#replication, step, true);
    const savedAt = new Date(this.#now()).toISOString();
    const { checkpointId } = decision;
    const metadata = {
      step,
      savedAt,
      metrics: options.metrics ?? {},
      metadata: options.metadata ?? {},
      [CHECKPOINT_ID_FIELD]: checkpointId,
      // Its copies replace an older checkpoint under this number on a tier the save could not clear.
      ...(decision.replace ? { [OVERWRITE_FIELD]: true } : {}),
    };
    // Each step's collectives get their own tag: with several saves in flight they need no order between them.
    const group = this.#group.group(`step/${step}`);
    const { base, release } = await this.#bases.choose(step, store);
    const where = {
      ...this.#options.save,
      storage: store.storage,
      path: stepDir(step),
      metadata,
      processGroup: group,
      ...(base === undefined ? {} : { incremental: { base: stepDir(base) } }),
    };
    const committed = (result: SaveResult): Promise<void> =>
      this.#committed(store, step, savedAt, metadata.metrics, result, group, checkpointId);
    let releaseLater = false;
    try {
      await this.#pipeline.hold(step, async () => {
        if (!background)
          return committed(await save(stateDict, where).catch((error: unknown) => this.#lostRace(store, step, error)));
        const { settled } = await this.#pipeline.stage(step, stateDict, where, committed);
        // The base stays busy until the background save commits or fails.
        releaseLater = true;
        void settled.finally(release);
        if (forPreemption) {
          await settled;
          this.#pipeline.throwFailure();
        }
      });
    } finally {
      if (!releaseLater) release();
    }
    if (forPreemption) this.#preemption.checkpointed(step);
    return true;
  }

  /**
   * After a commit: alone, retention runs in the background. With several ranks, rank 0 applies
   * it and broadcasts the steps it deleted to every rank's index (a collective of the step's own
   * group), so when a save is done on any rank, `allSteps()` reads the same steps there as on
   * every other rank. A retention failure never fails the save (see `RetentionRunner`).
   */
  async #committed(
    store: StepStore,
    step: number,
    savedAt: string,
    metrics: Readonly<Record<string, number>>,
    result: SaveResult,
    group: ProcessGroup,
    checkpointId: string,
  ): Promise<void> {
    this.#tiers[0]!.committed(step, Date.parse(savedAt), metrics, result.referenced ?? [], savedIdentity(checkpointId));
    this.#bases.committed(step, (result.referenced?.length ?? 0) > 0);
    this.#events.emit("committed", {
      step,
      bytes: result.bytes,
      seconds: result.seconds,
      backgroundCopySeconds: result.backgroundCopySeconds ?? 0,
    });
    this.#replication?.committed(step, 0);
    const pass = this.#group.rank === 0 ? this.#tiers[0]!.retention?.schedule() : undefined;
    if (this.#group.worldSize === 1) return;
    await this.#pipeline.barrierAfter(pass, async () => {
      const deleted = await group.broadcast(pass === undefined ? undefined : await pass, 0);
      // Rank 0's message, yet checked: a rank trusts no value it did not make.
      if (this.#group.rank !== 0 && Array.isArray(deleted))
        for (const s of deleted) if (Number.isSafeInteger(s)) store.forget(s as number);
    });
  }

  /** A commit that lost to another writer shows the step is committed: the index lists it. */
  #lostRace(store: StepStore, step: number, error: unknown): never {
    if (isCheckpointError(error, "already_exists")) store.noteCommitted(step);
    throw error;
  }

  #now(): number {
    return (this.#options.now ?? Date.now)();
  }

  get #tiered(): boolean {
    return this.#tiers.length > 1;
  }

  /** Opens tier 0 (and, for a tiered manager, starts finding what earlier runs left unreplicated). */
  #open(): Promise<StepStore> {
    if (this.#closed) return Promise.reject(new CheckpointError("invalid_argument", "the CheckpointManager is closed"));
    if (this.#replication && !this.#discovery) void this.#discover(false);
    return this.#tiers[0]!.open();
  }

  /** Lists every tier and queues missing copies; listing failures are reported, never thrown. */
  #discover(again: boolean): Promise<void> {
    if (!this.#discovery || again) this.#discovery = this.#replication!.discover().catch(() => undefined);
    return this.#discovery;
  }

  #joinResult(): JoinResult {
    const retentionFailures = this.#tiers[0]!.retention?.failures() ?? [];
    return this.#tiered
      ? { retentionFailures, unreplicated: this.#replication?.unreplicated() ?? [] }
      : { retentionFailures };
  }

  #checkWritable(what: string): void {
    if (this.#options.readOnly)
      throw new CheckpointError("invalid_argument", `this CheckpointManager is read-only; it cannot ${what}`);
  }
}
