import type { StepStore } from "../steps/step-store.js";

/** `CheckpointManager`'s `incremental` option: `true`, or how often a full save breaks the references. */
export type IncrementalOption = boolean | { readonly fullEvery?: number };

/**
 * Which committed step an incremental save references (docs/incremental.md): the step this
 * manager committed last, while it is still committed; none (a full save) for the first save, when
 * that step is gone, known damaged, or failed a save that used it, and every `fullEvery`-th save.
 * A base is busy while a save uses it, so retention leaves it alone until that save commits or fails.
 */
export class IncrementalBases {
  readonly #fullEvery: number | undefined;
  readonly #enabled: boolean;
  #last: number | undefined;
  /** Incremental saves committed since the last full one. */
  #sinceFull = 0;
  readonly #held = new Map<number, number>();
  /** Called once a base is no longer held by any save. */
  readonly #freed = new Map<number, (() => void)[]>();
  /** Bases a save failed with: never chosen again (until saved anew), so one bad base cannot fail every later save. */
  readonly #refused = new Set<number>();
  readonly #isDamaged: (step: number) => boolean;

  /** `isDamaged`: whether a step was found damaged (by a restore or `latestStep({ verified })`). */
  constructor(option: IncrementalOption | undefined, isDamaged: (step: number) => boolean = () => false) {
    this.#enabled = option !== undefined && option !== false;
    this.#fullEvery = typeof option === "object" ? option.fullEvery : undefined;
    this.#isDamaged = isDamaged;
  }

  /** The base for a save of `step` (undefined: save in full), held busy until `release` is called. */
  async choose(step: number, store: StepStore): Promise<{ base: number | undefined; release: () => void }> {
    const none = { base: undefined, release: () => undefined };
    if (!this.#enabled) return none;
    this.#last ??= await store.latestStep();
    const base = this.#last;
    if (base === undefined || base === step || this.#refused.has(base) || this.#isDamaged(base)) return none;
    if (this.#fullEvery !== undefined && this.#sinceFull + 1 >= this.#fullEvery) return none;
    this.#held.set(base, (this.#held.get(base) ?? 0) + 1);
    const release = (): void => {
      const left = this.#held.get(base)! - 1;
      if (left > 0) this.#held.set(base, left);
      else {
        this.#held.delete(base);
        for (const resolve of this.#freed.get(base) ?? []) resolve();
        this.#freed.delete(base);
      }
    };
    // Held first, then checked: a retention pass deleting it now, or done with it, makes this a full save.
    if (store.isDeleting(base) || !(await store.isCommitted(base))) {
      release();
      return none;
    }
    return { base, release };
  }

  /** A save of `step` committed; `incremental` says whether it references another step's files. */
  committed(step: number, incremental: boolean): void {
    this.#last = step;
    this.#refused.delete(step);
    this.#sinceFull = incremental ? this.#sinceFull + 1 : 0;
  }

  /** A save that referenced `base` failed (the base may be damaged or unreadable): later saves do not use it. */
  failed(base: number): void {
    this.#refused.add(base);
    if (this.#last === base) this.#last = undefined;
  }

  /**
   * `step` is about to be deleted (or saved again over): no save takes it as its base from now on
   * (until it is saved anew), and this resolves once no save in flight uses it.
   */
  async deleting(step: number): Promise<void> {
    this.failed(step);
    if (!this.#held.has(step)) return;
    await new Promise<void>((resolve) => this.#freed.set(step, [...(this.#freed.get(step) ?? []), resolve]));
  }

  /** Whether a save in flight references `step`: retention must not delete it. */
  isBusy(step: number): boolean {
    return this.#held.has(step);
  }
}
