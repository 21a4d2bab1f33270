import { CheckpointError, type StorageAdapter, type StorageOptions, openStorage } from "@cairn/core";
import { longTimer } from "@cairn/core/storage";
import { RetentionRunner } from "../steps/retention-runner.js";
import type { RetentionFailure, SweptFile } from "../steps/step-store.js";
import { StepStore } from "../steps/step-store.js";
import type { TierConfig } from "./tier-config.js";
import { type CopyIdentity, identityOf } from "./copy-identity.js";

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
 * One location of a manager: its `StepStore` (opened on first use), whose index is this tier's
 * one index of steps (listed once, then kept up to date by this process's saves, copies and
 * deletions), and its own retention runner. Tier 0 is where saves commit; slower tiers receive
 * copies. The manager owns one per location; replication asks it whether it holds a replica.
 */
export class Tier {
  readonly config: TierConfig;
  readonly #options: TierSetup;
  #store: Promise<StepStore> | undefined;
  /** The latest listing's failure, if it failed (its outage was reported); undefined once one succeeds. */
  #listingFailure: unknown;
  /** The first listing's attempt, shared: decisions that need the index wait for it once. */
  #firstListing: Promise<boolean> | undefined;
  #opened: StepStore | undefined;
  #retention: RetentionRunner | undefined;
  /** Steps whose copy here is known readable, with which checkpoint it is: this process's save or copy, or a found copy checked by replication. */
  readonly #replicas = new Map<number, CopyIdentity>();

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

  /**
   * Reports a failure to list this tier (`report`), once per outage: later failures are quiet
   * until a listing succeeds again (`listingSucceeded`).
   */
  listingFailed(error: unknown, report: (error: unknown) => void): void {
    if (this.#listingFailure === undefined) report(error);
    this.#listingFailure = error ?? new Error("a listing failed with no reason");
  }

  listingSucceeded(): void {
    this.#listingFailure = undefined;
  }

  /** Why the latest listing of this tier failed; undefined when it succeeded (what this tier holds is known). */
  get listingFailure(): unknown {
    return this.#listingFailure;
  }

  /**
   * This tier's `answer`, or (a slower tier) a `timeout` failure once `listingWaitMs` passed
   * without it: a tier that hangs (a stuck mount, an adapter ignoring aborts) is treated like one
   * that fails, and its answer, when it comes, fills its index for later calls. Tier 0's is awaited whole.
   */
  answer<T>(answer: Promise<T>): Promise<T> {
    if (this.index === 0) return answer;
    answer.catch(() => undefined);
    const ms = this.config.listingWaitMs;
    let cancel = (): void => undefined;
    const expired = new Promise<never>((_, reject) => {
      const message = `tier ${this.index} (${this.#opened?.storage.root ?? "not opened"}) did not answer within ${ms} ms (replication.listingWaitMs)`;
      // Ref'd: a caller awaiting a tier that never answers still has a timer keeping the process up.
      cancel = longTimer(() => reject(new CheckpointError("timeout", message)), ms, { ref: true });
    });
    return Promise.race([answer, expired]).finally(cancel);
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
        identify: identityOf,
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

  /** Committed steps here whose metadata reads back (listing once). */
  async committedSteps(): Promise<number[]> {
    const steps = await (await this.open()).committedSteps();
    this.listingSucceeded();
    return steps;
  }

  /**
   * Waits for this tier's first listing (and the read of each step's metadata), started once and
   * shared; resolves whether the index is filled. A tier that cannot be listed resolves false:
   * the caller decides without it (and its listing is retried in the background).
   */
  async indexed(): Promise<boolean> {
    this.#firstListing ??= this.#firstListingWithin(this.config.listingWaitMs);
    return (await this.#firstListing) || this.#opened?.listed === true;
  }

  /** The first listing, or false once `ms` passed without it (it goes on; later decisions see it when done). */
  #firstListingWithin(ms: number): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const listed = this.committedSteps().then(
      () => true,
      () => false,
    );
    const waited = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    return Promise.race([listed, waited]).finally(() => clearTimeout(timer));
  }

  /**
   * Whether this tier holds the checkpoint `identity` as `step`: committed here by this process
   * (a save or copy) or found and checked readable by replication, with the same identity, and
   * still listed as that checkpoint; or deleted by this tier's retention after it arrived.
   * Anything else (not listed yet, only listed, absent, damaged, another checkpoint under that
   * number) is not a replica, and a faster tier keeps its copy.
   */
  holdsReplica(step: number, identity: CopyIdentity | undefined): boolean {
    const store = this.#opened;
    if (identity === undefined || store === undefined) return false;
    const listed = store.identityOf(step);
    if (listed !== this.#replicas.get(step)) this.#replicas.delete(step);
    return (listed === identity && this.#replicas.get(step) === identity) || store.retired(step, identity);
  }

  /** A step committed here by this process (a save or a copy), or found here and checked readable, with the files of other steps it references and which checkpoint it is. */
  committed(
    step: number,
    time: number,
    metrics: Readonly<Record<string, number>>,
    referenced: readonly string[],
    identity: CopyIdentity,
  ): void {
    this.#replicas.set(step, identity);
    this.#opened?.remember({ step, time, metrics }, referenced, identity);
  }

  /** Closes the storage if this tier opened it from a URL (a tier that failed to open has nothing to close). */
  async close(): Promise<void> {
    const store = typeof this.config.location === "string" ? await this.#store?.catch(() => undefined) : undefined;
    await store?.storage.close();
  }
}
