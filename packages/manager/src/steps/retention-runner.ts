import type { RetentionOptions } from "./retention-policy.js";
import type { RetentionFailure, StepStore, SweptFile } from "./step-store.js";

export interface RetentionRunnerOptions {
  readonly store: StepStore;
  readonly retention: RetentionOptions;
  readonly leftoverAgeMs: number;
  readonly now: () => number;
  /** Whether a save of the step is in flight here, asked at each decision: such a step is never deleted. */
  readonly isBusy: (step: number) => boolean;
  /** Called when a step starts failing (once, until a pass deletes it or no longer needs to). */
  readonly report: (failure: RetentionFailure) => void;
  /** Called after each pass that deleted committed steps, with them and (with the store's `sweepsByRank`) every rank's files it swept. */
  readonly onDeleted?: (steps: number[], swept: SweptFile[]) => void;
}

/**
 * Runs a manager's retention passes one after another in the background. A deletion that fails
 * never fails a save: it is reported once, kept in `failures()` while it lasts, and tried again
 * by every later pass. Commits that ask while a pass is waiting share that pass.
 * The manager calls `schedule()` after each commit (rank 0), `settled()` before listing, `failures()` on join.
 */
export class RetentionRunner {
  readonly #options: RetentionRunnerOptions;
  #chain: Promise<number[]> = Promise.resolve([]);
  #queued: Promise<number[]> | undefined;
  /** Keyed by step; `undefined` when a pass could not list the root. */
  #failures = new Map<number | undefined, unknown>();
  #stopped = false;

  constructor(options: RetentionRunnerOptions) {
    this.#options = options;
  }

  /**
   * The manager closed: no pass starts, and a pass running deletes no further step (each
   * step's metadata.json is the decision's point of no return, asked per step). A deletion past
   * that point finishes, or is finished by a later manager's sweep.
   */
  stop(): void {
    this.#stopped = true;
  }

  /** Queues a pass after the current one; resolves when it ran with the steps it deleted (it never rejects). */
  schedule(): Promise<number[]> {
    if (this.#queued) return this.#queued;
    const pass = this.#chain.then(() => {
      this.#queued = undefined;
      return this.#run();
    });
    this.#queued = pass;
    this.#chain = pass;
    return pass;
  }

  /** Resolves once every pass scheduled so far has run. */
  async settled(): Promise<void> {
    await this.#chain;
  }

  /** What retention could not do, as of its latest pass, by step. */
  failures(): RetentionFailure[] {
    return [...this.#failures].map(([step, error]) => ({ step, error }));
  }

  async #run(): Promise<number[]> {
    if (this.#stopped) return [];
    const { store, retention, leftoverAgeMs, now } = this.#options;
    const isBusy = (step: number): boolean => this.#stopped || this.#options.isBusy(step);
    let next: Map<number | undefined, unknown>;
    let deleted: number[] = [];
    let swept: SweptFile[] = [];
    try {
      const pass = await store.retain(retention, leftoverAgeMs, now(), isBusy);
      next = new Map(pass.failures.map((f) => [f.step, f.error]));
      deleted = pass.deleted;
      swept = pass.swept;
    } catch (error) {
      // Listing failed: nothing is known about the steps, so their earlier failures stand.
      next = new Map(this.#failures);
      next.set(undefined, error);
    }
    // After close nobody listens: what a stopped pass could not do is the next manager's to find.
    if (!this.#stopped)
      for (const [step, error] of next) if (!this.#failures.has(step)) this.#options.report({ step, error });
    this.#failures = next;
    if (deleted.length > 0) this.#options.onDeleted?.(deleted, swept);
    return deleted;
  }
}
