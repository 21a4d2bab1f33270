import {
  CheckpointError,
  type CheckpointMetadata,
  type StorageAdapter,
  isCheckpointError,
  isGone,
  isInterrupted,
  isStorageFailure,
} from "@cairn/core";
import { joinPath } from "@cairn/core/storage";
import { METADATA_FILE, referencedFiles } from "@cairn/core/format";
import PQueue from "p-queue";
import { type RetentionOptions, type StepRecord, stepsToDelete } from "./retention-policy.js";
import { StepFiles } from "./step-files.js";
import { StepIndex } from "./step-index.js";
import { stepDir } from "./step-naming.js";
import { type StepMetadata, metricsOf, readStepMetadata, stepMetadataOf } from "./stored-values.js";
import { type RetentionFailure, type RetentionPass, StepSweeper, type SweptFile } from "./step-sweeper.js";

export type { StepMetadata } from "./stored-values.js";
export type { RetentionFailure, RetentionPass, SweptFile } from "./step-sweeper.js";

/** Called once per step whose metadata.json is present but unusable (damaged, foreign, a newer format); the step is skipped. */
export type DamagedStepListener = (step: number, error: CheckpointError) => void;

/** Metadata reads in flight at once when listing many steps. */
const READ_CONCURRENCY = 8;
/** Steps a retention pass deletes at once. */
const STEP_CONCURRENCY = 8;

/** Which checkpoint a committed step is, as the caller tells them apart (tiers/: copy identity); compared for equality only. */
export type StepIdentity = string;

export interface StepStoreOptions {
  /** How a step's identity is read from its metadata; without it, only steps given to `remember` have one. */
  readonly identify?: (metadata: CheckpointMetadata) => StepIdentity;
  /** Called once per step whose metadata.json is present but unusable; the step is skipped. */
  readonly onDamaged?: DamagedStepListener;
  /** The manager's clock, in ms since the epoch: when listings ran, for leftover sweeps (default `Date.now`). */
  readonly now?: () => number;
  /** Several ranks, each with its own tier 0: retention reads each step it deletes for every rank's files, and returns those it swept. */
  readonly sweepsByRank?: boolean;
}

/**
 * The steps under a manager's root: `<root>/<step>/`, committed once `metadata.json` exists.
 * Listing, un-committing deletion, retention and leftover cleanup live here, in one place that
 * ignores anything uncommitted. Which steps exist comes from a `StepIndex` (one listing, then
 * this process's own commits and deletions): `reload()` lists again. Another writer may delete
 * steps at any moment: a step that vanishes midway is treated as gone, never as a failure. A
 * step whose metadata is damaged is reported (once) and skipped: not listed, counted or deleted.
 * The manager opens one per root on first use and calls it in any order; `RetentionRunner` calls `retain`.
 */
export class StepStore {
  readonly storage: StorageAdapter;
  readonly #index: StepIndex;
  readonly #records = new Map<number, StepRecord>();
  readonly #damaged = new Map<number, CheckpointError>();
  /** Which checkpoint each committed step is (read with its record, or known from this process's save or copy). */
  readonly #identities = new Map<number, StepIdentity>();
  /** Steps this store's retention deleted, with what they were: they reached this tier and aged out. */
  readonly #retired = new Map<number, StepIdentity | undefined>();
  /** Which files of other steps the committed steps use: deletions keep those (mark and sweep). */
  readonly #files = new StepFiles();
  /** Deletes steps and sweeps their files: what no committed step uses, never a file a kept step references. */
  readonly #sweeper: StepSweeper;
  readonly #onDamaged: DamagedStepListener | undefined;
  readonly #now: () => number;
  readonly #openedAt: number;
  readonly #sweepsByRank: boolean;
  readonly #identify: ((metadata: CheckpointMetadata) => StepIdentity) | undefined;
  /** The listing whose leftovers a pass last looked at. */
  #sweptListing = 0;

  constructor(storage: StorageAdapter, options: StepStoreOptions = {}) {
    this.storage = storage;
    this.#index = new StepIndex(storage);
    this.#sweeper = new StepSweeper(storage, this.#index, this.#files, (step) => this.forget(step));
    this.#onDamaged = options.onDamaged;
    this.#now = options.now ?? Date.now;
    this.#openedAt = this.#now();
    this.#sweepsByRank = options.sweepsByRank ?? false;
    this.#identify = options.identify;
  }

  /** Committed steps whose metadata reads back, ascending. Steps deleted meanwhile and damaged ones are left out. */
  async committedSteps(): Promise<number[]> {
    await this.#load();
    const steps = this.#index.steps();
    await this.#readRecords(steps.filter((step) => !this.#records.has(step) && !this.#damaged.has(step)));
    return steps.filter((step) => this.#records.has(step));
  }

  /**
   * Listed steps whose metadata.json is present but unusable (damaged, another step's, a newer
   * format), ascending, as `committedSteps()` last found them: candidates that failed to verify.
   */
  damagedSteps(): number[] {
    return [...this.#damaged.keys()].filter((step) => this.#index.has(step)).sort((a, b) => a - b);
  }

  /** The newest committed step whose metadata reads back: reads metadata only from the newest step down to the first usable one. */
  async latestStep(): Promise<number | undefined> {
    await this.#load();
    const steps = this.#index.steps();
    for (let i = steps.length - 1; i >= 0; i--) if (await this.#record(steps[i]!)) return steps[i];
    return undefined;
  }

  /** Lists the root again, for steps other processes committed or deleted since this store listed it. */
  async reload(): Promise<void> {
    await this.#index.refresh(this.#now());
    this.#forgetUnlisted();
  }

  async isCommitted(step: number): Promise<boolean> {
    return (await this.storage.stat(joinPath(stepDir(step), METADATA_FILE))) !== null;
  }

  async requireCommitted(step: number): Promise<void> {
    if (await this.isCommitted(step)) return;
    const steps = await this.committedSteps();
    throw new CheckpointError(
      "not_found",
      `step ${step} has no committed checkpoint under ${this.storage.root}; committed steps: ${steps.length ? steps.join(", ") : "none"}`,
      { context: { step } },
    );
  }

  /**
   * A step this process committed, with what retention needs of it, the files of other steps it
   * references (an incremental save's `referenced`) and which checkpoint it is.
   */
  remember(record: StepRecord, referenced: readonly string[], identity: StepIdentity): void {
    this.#records.set(record.step, record);
    this.#committedElsewhere(record.step);
    this.#files.set(record.step, referenced);
    this.#identities.set(record.step, identity);
  }

  /** Whether the root was listed at least once: until then only this process's own commits are known. */
  get listed(): boolean {
    return this.#index.listedAt !== undefined;
  }

  /** Whether the index lists `step` committed (its metadata may still be damaged); false before the first listing. */
  lists(step: number): boolean {
    return this.#index.has(step);
  }

  /** Steps known committed without listing again: the latest listing's, and this process's own commits since. */
  knownSteps(): number[] {
    return [...new Set([...this.#index.steps(), ...this.#identities.keys()])].sort((a, b) => a - b);
  }

  /**
   * Steps whose directory holds data files `rank` wrote but no metadata.json, at the latest
   * listing: with a tier 0 per rank, a rank other than 0 holds its files of committed steps so.
   */
  filesOfRank(rank: number): number[] {
    const prefix = `data-r${rank}-`;
    return this.#index
      .leftovers()
      .filter(([, { paths }]) => paths.some((p) => p.slice(p.indexOf("/") + 1).startsWith(prefix)))
      .map(([step]) => step);
  }

  /** Which checkpoint `step` is here, once its metadata was read (or this process committed it); undefined otherwise. */
  identityOf(step: number): StepIdentity | undefined {
    return this.#identities.get(step);
  }

  /** Whether this store's retention deleted `step` as the checkpoint `identity`: it reached here and aged out. */
  retired(step: number, identity: StepIdentity): boolean {
    return this.#retired.has(step) && this.#retired.get(step) === identity;
  }

  /** A step found committed by someone else (a lost commit race): listed from now on, its metadata read when needed. */
  noteCommitted(step: number): void {
    if (!this.#records.has(step)) this.#committedElsewhere(step);
  }

  /** A step another rank deleted (rank 0's retention): no longer listed here. */
  forget(step: number): void {
    this.#records.delete(step);
    this.#identities.delete(step);
    this.#damaged.delete(step);
    if (!this.#sweeper.uncommitting.has(step)) this.#files.forget(step);
    this.#index.removed(step);
  }

  /** What `step` was saved with; stored values are copied into null-prototype objects. */
  async metadata(step: number): Promise<StepMetadata> {
    await this.requireCommitted(step);
    return stepMetadataOf(step, await readStepMetadata(this.storage, step));
  }

  /**
   * Deletes a step, its metadata.json first: a crash midway leaves an uncommitted leftover, never
   * a damaged committed step. Its other objects are those the latest listing found or, with
   * `listed` false, those its metadata names (no listing: a stray object left is swept as a
   * leftover later). Objects already gone are fine; a failure is thrown after every object was
   * tried, and the next retention pass finishes the step.
   */
  async deleteStep(step: number, listed = true, keepFiles?: () => boolean): Promise<void> {
    // Mark: every listed step's references are known before anything is swept (each step's metadata is read once, then cached).
    await this.#markAll();
    await this.#sweeper.delete(step, listed, false, undefined, keepFiles);
  }

  /** Resolves once no deletion here is removing `step`'s metadata.json: a save of the step commits only after. */
  uncommitted(step: number): Promise<void> {
    return this.#sweeper.uncommitted(step);
  }

  /** Whether a deletion of `step` has begun un-committing it: a save must not take it as its base. */
  isDeleting(step: number): boolean {
    return this.#sweeper.isDeleting(step);
  }

  /**
   * Deletes the committed steps retention no longer keeps (the first time, after one listing;
   * without `maxToKeep`, none and no listing), finishes steps this store left half-deleted, and
   * deletes the leftovers of saves that never committed found by a listing no pass looked at yet,
   * once their newest object is older than `leftoverAgeMs` (so a save still running elsewhere is
   * never touched). Once per `leftoverAgeMs` it lists the root again for them. Steps `isBusy`
   * names (saves in flight here, asked at each decision) are left alone. A step that fails is
   * recorded and the pass goes on with the others; a failed listing is thrown.
   */
  async retain(
    options: RetentionOptions,
    leftoverAgeMs: number,
    now: number,
    isBusy: (step: number) => boolean,
  ): Promise<RetentionPass> {
    if (now - (this.#index.listedAt ?? this.#openedAt) >= leftoverAgeMs) await this.reload();
    const failures: RetentionFailure[] = [];
    const deleted: number[] = [];
    const swept: SweptFile[] = [];
    const queue = new PQueue({ concurrency: STEP_CONCURRENCY });
    const attempt = (step: number, work: () => Promise<void>): Promise<void> =>
      queue.add(async () => {
        try {
          await work();
        } catch (error) {
          failures.push({ step, error });
        }
      });
    const work: Promise<void>[] = [];
    for (const step of this.#sweeper.uncommitting)
      if (!isBusy(step)) work.push(attempt(step, () => this.#sweeper.finishUncommit(step)));
    for (const [step, paths] of this.#sweeper.unfinished) {
      // A step saved anew since is no longer this store's to finish.
      if (this.#index.has(step) || isBusy(step)) this.#sweeper.unfinished.delete(step);
      else work.push(attempt(step, () => this.#sweeper.finishUnfinished(step, paths)));
    }
    if ((options.maxToKeep ?? 0) > 0) {
      await this.#load();
      const steps = this.#index.steps();
      const unread = await this.#readRecords(
        steps.filter((step) => !this.#records.has(step) && !this.#damaged.has(step)),
        true,
      );
      for (const failure of unread) failures.push(failure);
      const records = steps.flatMap((step) => this.#records.get(step) ?? []);
      // A step whose metadata could not be read may reference any file: this pass deletes nothing (its next one will).
      for (const step of unread.length > 0 ? [] : stepsToDelete(records, options)) {
        // Which checkpoint retention decided to delete: one saved or copied anew under the number since is not it.
        const identity = this.#identities.get(step);
        if (!isBusy(step) && !this.#sweeper.unfinished.has(step) && !this.#sweeper.uncommitting.has(step))
          work.push(
            attempt(step, async () => {
              // Every listed step was read (marked) above: no pass over them per deletion.
              // Busy is asked again in the turn the metadata goes: a save taking it as base meanwhile keeps it.
              const gone = await this.#sweeper.delete(
                step,
                false,
                this.#sweepsByRank,
                () => !isBusy(step) && this.#index.has(step) && this.#identities.get(step) === identity,
              );
              if (gone === undefined) return;
              for (const path of gone) swept.push(path);
              this.#retired.set(step, identity);
              deleted.push(step);
            }),
          );
      }
    }
    if (this.#index.listings !== this.#sweptListing) {
      const old = this.#index
        .leftovers()
        .filter(
          ([step, { newest }]) =>
            !isBusy(step) &&
            !this.#sweeper.unfinished.has(step) &&
            !this.#sweeper.uncommitting.has(step) &&
            now - newest >= leftoverAgeMs,
        );
      // Leftovers may hold files a committed incremental step uses (a deleted base's): every step is marked before any is swept.
      const marked = old.length > 0 ? await this.#markAll(true) : [];
      for (const failure of marked) failures.push(failure);
      if (marked.length === 0) this.#sweptListing = this.#index.listings;
      for (const [step, { paths }] of marked.length > 0 ? [] : old) {
        const sweep = this.#files.sweepable(paths);
        // Until every object is gone, every later pass tries again, without a listing.
        work.push(attempt(step, () => this.#sweeper.finish(step, sweep, sweep.length === paths.length)));
      }
    }
    await Promise.all(work);
    deleted.sort((a, b) => a - b);
    return { deleted, failures: failures.sort((a, b) => (a.step ?? -1) - (b.step ?? -1)), swept };
  }

  /** Reads the records (and so the references) of every listed step not read yet; with `collect`, failures are returned instead of thrown. */
  async #markAll(collect = false): Promise<RetentionFailure[]> {
    await this.#load();
    return this.#readRecords(
      this.#index.steps().filter((step) => !this.#records.has(step) && !this.#damaged.has(step)),
      collect,
    );
  }

  #committedElsewhere(step: number): void {
    // Committed anew: its earlier un-commit is moot (the new commit's directory fsync made it durable).
    this.#sweeper.uncommitting.delete(step);
    this.#damaged.delete(step);
    this.#retired.delete(step);
    this.#sweeper.unfinished.delete(step);
    this.#index.added(step);
  }

  async #load(): Promise<void> {
    const before = this.#index.listedAt;
    await this.#index.load(this.#now());
    if (this.#index.listedAt !== before) this.#forgetUnlisted();
  }

  /** Drops what is known of steps no longer committed (deleted by anyone), so the caches only hold listed steps. */
  #forgetUnlisted(): void {
    for (const step of this.#records.keys()) if (!this.#index.has(step)) this.#records.delete(step);
    for (const step of this.#identities.keys()) if (!this.#index.has(step)) this.#identities.delete(step);
    for (const step of this.#damaged.keys()) if (!this.#index.has(step)) this.#damaged.delete(step);
    for (const step of this.#files.steps())
      if (!this.#index.has(step) && !this.#sweeper.uncommitting.has(step)) this.#files.forget(step);
  }

  /**
   * Reads (into the cache) the records of `steps` not read yet, a few at a time. A storage failure
   * is thrown, or with `collect` returned per step while the others go on.
   */
  async #readRecords(steps: readonly number[], collect = false): Promise<RetentionFailure[]> {
    if (steps.length === 0) return [];
    const failures: RetentionFailure[] = [];
    const queue = new PQueue({ concurrency: READ_CONCURRENCY });
    await Promise.all(
      steps.map((step) =>
        queue.add(async () => {
          try {
            await this.#record(step);
          } catch (error) {
            if (!collect) throw error;
            failures.push({ step, error });
          }
        }),
      ),
    );
    return failures;
  }

  /**
   * What retention knows of a committed step, read once and cached. Undefined for a step that
   * vanished since it was listed, or whose metadata is damaged (reported once); storage failures are thrown.
   */
  async #record(step: number): Promise<StepRecord | undefined> {
    const cached = this.#records.get(step);
    if (cached) return cached;
    if (this.#damaged.has(step)) return undefined;
    let metadata: CheckpointMetadata;
    try {
      metadata = await readStepMetadata(this.storage, step);
    } catch (error) {
      if (isGone(error)) {
        this.#index.removed(step);
        return undefined;
      }
      // Storage failed, not the step (or the read was stopped): the answer is unknown, so the caller hears of it.
      if (isStorageFailure(error) || isInterrupted(error)) throw error;
      // A newer format may use files this Cairn cannot see: deleters keep every data file while it is committed.
      if (isCheckpointError(error, "unsupported_version")) this.#files.setUnknown(step);
      const damaged = isCheckpointError(error)
        ? error
        : new CheckpointError(
            "corrupt",
            `step ${step} under ${this.storage.root} has metadata that cannot be read; it is skipped`,
            { cause: error, context: { step } },
          );
      // Two reads of one step can race (a listing and a latestStep): it is reported once.
      if (!this.#damaged.has(step)) this.#onDamaged?.(step, damaged);
      this.#damaged.set(step, damaged);
      return undefined;
    }
    const user = metadata.user;
    const saved = typeof user.savedAt === "string" ? Date.parse(user.savedAt) : NaN;
    const created = Date.parse(metadata.createdAt);
    const record = {
      step,
      time: Number.isFinite(saved) ? saved : Number.isFinite(created) ? created : 0,
      metrics: metricsOf(user.metrics),
    };
    this.#records.set(step, record);
    this.#files.set(step, referencedFiles(metadata));
    if (this.#identify) this.#identities.set(step, this.#identify(metadata));
    return record;
  }
}
