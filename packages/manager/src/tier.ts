import type { CheckpointError, StorageAdapter, StorageOptions } from "@cairn/core";
import { openStorage } from "@cairn/core";
import { RetentionRunner } from "./retention-runner.js";
import type { RetentionFailure, SweptFile } from "./step-store.js";
import { StepStore } from "./step-store.js";
import type { TierConfig } from "./tier-config.js";

/** One tier's state as `mgr.tiers()` reports it. */
export interface TierState {
  readonly index: number;
  /** The tier's root, as its storage names it. */
  readonly root: string;
  /** Committed steps here, ascending, from this manager's index (listed once, then kept up to date). */
  readonly steps: readonly number[];
  /** Set when the tier could not be listed: `steps` is then what this manager committed or saw there. */
  readonly listingFailure?: unknown;
  /** Steps this tier should take but does not hold yet (queued, being copied, or waiting to retry), descending. */
  readonly pending: readonly number[];
  /** Set while copies into this tier fail: the latest error. Cleared by the next copy that succeeds. */
  readonly failing?: unknown;
  /** Steps retention could not delete here. */
  readonly retentionFailures: readonly RetentionFailure[];
}

export interface TierSetup {
  readonly config: TierConfig;
  readonly storageOptions: StorageOptions | undefined;
  readonly leftoverAgeMs: number;
  readonly now: () => number;
  /** Whether retention must leave `step` alone on this tier (a save or copy in flight, or a slower tier still lacking it). */
  readonly isBusy: (tier: number, step: number) => boolean;
  readonly onDamaged: (tier: number, step: number, error: CheckpointError) => void;
  readonly onRetentionFailure: (tier: number, failure: RetentionFailure) => void;
  /** After a retention pass here deleted committed steps, with every rank's files it swept (with `sweepsByRank`). */
  readonly onDeleted?: (tier: number, steps: number[], swept: SweptFile[]) => void;
  /** Several ranks, each with its own tier 0, on rank 0: tier 0's retention says which of every rank's files it swept. */
  readonly sweepsByRank?: boolean;
  /** Several ranks, not rank 0: this rank never runs retention (nor its leftover sweep) here; it deletes only what rank 0 sends. */
  readonly retains?: boolean;
}

/**
 * One location of a manager: its `StepStore` (opened on first use), its own retention runner,
 * and the steps known to have reached it. Tier 0 is where saves commit; slower tiers receive
 * copies. `reached` keeps a step after this tier's retention deleted it, so faster tiers stop
 * holding it. The manager owns one per location, the replication queue reads and fills them.
 */
export class Tier {
  readonly config: TierConfig;
  /** Steps committed here, by this process or found listed: never copied here again. */
  readonly reached = new Set<number>();
  readonly #options: TierSetup;
  #store: Promise<StepStore> | undefined;
  #opened: StepStore | undefined;
  #retention: RetentionRunner | undefined;

  constructor(options: TierSetup) {
    this.config = options.config;
    this.#options = options;
  }

  get index(): number {
    return this.config.index;
  }

  /** The store, once opened (undefined before `open()` resolved). */
  get opened(): StepStore | undefined {
    return this.#opened;
  }

  get retention(): RetentionRunner | undefined {
    return this.#retention;
  }

  /** Whether this tier takes `step` at all (`every`). */
  wants(step: number): boolean {
    return step % this.config.every === 0;
  }

  /** Opens the storage (a URL once; an adapter as given) and its step store. */
  open(): Promise<StepStore> {
    const { config, storageOptions, leftoverAgeMs, now } = this.#options;
    this.#store ??= (
      typeof config.location === "string"
        ? openStorage(config.location, storageOptions)
        : Promise.resolve(config.location)
    ).then((storage: StorageAdapter) => {
      const store = new StepStore(storage, {
        onDamaged: (step, error) => this.#options.onDamaged(this.index, step, error),
        now,
        sweepsByRank: this.#options.sweepsByRank === true && this.index === 0,
      });
      // A rank other than 0 sees no metadata on its own tier 0: a sweep there could take files committed steps use.
      if (this.#options.retains !== false) {
        this.#retention = new RetentionRunner({
          store,
          retention: config.retention,
          leftoverAgeMs,
          now,
          isBusy: (step) => this.#options.isBusy(this.index, step),
          report: (failure) => this.#options.onRetentionFailure(this.index, failure),
          onDeleted: (steps, swept) => this.#options.onDeleted?.(this.index, steps, swept),
        });
      }
      this.#opened = store;
      return store;
    });
    return this.#store;
  }

  /** Committed steps here (listing once), recorded as reached. */
  async committedSteps(): Promise<number[]> {
    const steps = await (await this.open()).committedSteps();
    for (const step of steps) this.reached.add(step);
    return steps;
  }

  /** A step committed here by this process (a save or a copy), with the files of other steps it references (an incremental save's). */
  committed(
    step: number,
    time: number,
    metrics: Readonly<Record<string, number>>,
    referenced: readonly string[] = [],
  ): void {
    this.reached.add(step);
    this.#opened?.remember({ step, time, metrics }, referenced);
  }

  /** Closes the storage if this tier opened it from a URL (a tier that failed to open has nothing to close). */
  async close(): Promise<void> {
    const store = typeof this.config.location === "string" ? await this.#store?.catch(() => undefined) : undefined;
    await store?.storage.close();
  }
}
