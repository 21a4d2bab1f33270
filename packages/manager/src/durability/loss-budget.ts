import { CheckpointError, isCheckpointError, isPermanent } from "@cairn/core";
import { longTimer } from "@cairn/core/storage";
import type { ManagerEmitter, ManagerEvents } from "../events/manager-events.js";
import type { DurabilityOptions } from "./durability-options.js";

/** What `mgr.health()` returns: cheap (no I/O, a few small arrays), so a loop may call it every step. */
export interface ManagerHealth {
  /** The newest step a save was started for by this manager. */
  readonly newestSaved: number | undefined;
  /** The newest step this manager committed on the last tier (the only tier, untiered). */
  readonly newestDurable: number | undefined;
  /** Training steps from `newestDurable` to `newestSaved` (0 when every save is durable; see `DurabilityOptions`). */
  readonly stepsAtRisk: number;
  /** Seconds since the oldest save that is not durable yet was started (0 when none). */
  readonly secondsAtRisk: number;
  /** Whether the loss budget is exceeded now (false without `durability` limits). */
  readonly exceeded: boolean;
  /** The most recent `error` event (a save, copy, listing, retention or restore that failed), if any. */
  readonly lastError: ManagerEvents["error"] | undefined;
  readonly inFlight: {
    /** Saves started and not committed on tier 0 yet (a failed one stays at risk until a newer step is durable). */
    readonly saving: readonly number[];
    /** Tiered: steps committed on tier 0 and not yet on the last tier. */
    readonly copying: readonly number[];
  };
}

export interface LossBudgetSetup {
  readonly options: DurabilityOptions;
  readonly events: ManagerEmitter;
  readonly now: () => number;
  readonly saveInterval: number;
  /** The last tier's index: a step committed there (replicated, or committed when it is 0) is durable. */
  readonly lastTier: number;
}

/**
 * Whether a reported failure means its step can no longer become durable: its save failed, or a
 * copy of it was given up on for good (its source damaged or gone, another checkpoint under that
 * number on the slower tier). Either releases the budget the same way; a copy failing during an
 * outage is retried, so its step stays in flight.
 */
function neverDurable(payload: ManagerEvents["error"]): boolean {
  return payload.operation === "save" || (payload.operation === "replication" && isPermanent(payload.error));
}

/**
 * Tracks what a run would lose if it died now: every step a save was started for and that is not
 * durable yet, from the manager's own events (`committed`, `replicated` to the last tier, `error`).
 * The face calls `beforeSave(step)` before each save and `stop()` on close.
 */
export class LossBudget {
  readonly #setup: LossBudgetSetup;
  /** Steps saved and not durable yet, with when their save started (ms of the manager's clock). */
  readonly #atRisk = new Map<number, number>();
  /** Steps saved and not yet committed on tier 0. */
  readonly #saving = new Set<number>();
  /** Steps whose save failed: at risk, but nothing in flight will make them durable. */
  readonly #failed = new Set<number>();
  /** Whether `"fail"` threw since the budget was last met. */
  #thrown = false;
  #newestSaved: number | undefined;
  #newestDurable: number | undefined;
  /** Steps this manager made durable (since the last rollback), so a damaged newest one gives way to the one before. */
  readonly #durableSteps = new Set<number>();
  #lastError: ManagerEvents["error"] | undefined;
  #exceeded = false;
  #waiters = new Set<{ resolve: () => void; reject: (error: unknown) => void }>();
  #cancelTimer: (() => void) | undefined;
  #stopped = false;

  constructor(setup: LossBudgetSetup) {
    this.#setup = setup;
    const { events, lastTier } = setup;
    events.watch("committed", ({ step }) => {
      this.#saving.delete(step);
      if (lastTier === 0) this.#durable(step);
    });
    events.watch("replicated", ({ step, tier }) => {
      if (tier === lastTier) this.#durable(step);
    });
    events.watch("error", (payload) => {
      this.#lastError = payload;
      // A copy given up on releases only a step this manager's saves put at risk: one of an earlier run was never counted.
      const counted = payload.operation === "save" || this.#atRisk.has(payload.step ?? NaN);
      if (payload.step !== undefined && counted && neverDurable(payload)) this.#failedSave(payload.step);
    });
  }

  /**
   * A save of `step` thrown to its caller, at whatever stage (opening, listing, deciding, the
   * budget's own refusal, writing): counted as a failed save, as a failure reported in the
   * background is, and its error is the last one. A failure already heard (a background one
   * rethrown by the next call) is not heard twice; a refusal of a step that exists or is being
   * saved (`already_exists`) loses nothing.
   */
  saveFailed(step: number, error: unknown): void {
    if (this.#lastError?.error !== error) this.#lastError = { step, error, operation: "save" };
    if (!isCheckpointError(error, "already_exists")) this.#failedSave(step);
  }

  /**
   * Before a save of `step`: with `onExceeded: "block"` waits while the budget is exceeded, with
   * `"fail"` throws; then counts `step` as at risk until it (or a newer step) is durable.
   */
  async beforeSave(step: number): Promise<void> {
    this.#evaluate();
    const mode = this.#setup.options.onExceeded ?? "warn";
    // With nothing in flight that could make a step durable (its saves failed), only this save
    // can meet the budget again: "block" lets it go, "fail" throws once for that and then lets it go.
    if (this.#exceeded && mode === "fail" && (this.#pending() || !this.#thrown)) {
      this.#thrown = true;
      throw this.#exceededError(step);
    }
    while (this.#exceeded && mode === "block" && this.#pending() && !this.#stopped) {
      await new Promise<void>((resolve, reject) => this.#waiters.add({ resolve, reject }));
      this.#evaluate();
    }
    if (this.#stopped) return;
    // A rollback: the durable steps past this one belong to an abandoned timeline, and so do the
    // steps at risk past it (a save that failed there will never be durable, nor needs to be).
    // The durable steps before it still are: the newest of them is the newest durable step.
    if (this.#newestDurable !== undefined && step <= this.#newestDurable) {
      this.#newestDurable = undefined;
      for (const s of [...this.#durableSteps])
        if (s >= step) this.#durableSteps.delete(s);
        else if (this.#newestDurable === undefined || s > this.#newestDurable) this.#newestDurable = s;
    }
    for (const s of [...this.#atRisk.keys()]) if (s > step) this.#forget(s);
    this.#failed.delete(step);
    this.#newestSaved = step;
    this.#atRisk.delete(step);
    this.#atRisk.set(step, this.#setup.now());
    this.#saving.add(step);
    this.#evaluate();
  }

  health(): ManagerHealth {
    const { stepsAtRisk, secondsAtRisk } = this.#measure();
    const copying = [...this.#atRisk.keys()].filter((s) => !this.#saving.has(s) && !this.#failed.has(s));
    return {
      newestSaved: this.#newestSaved,
      newestDurable: this.#newestDurable,
      stepsAtRisk,
      secondsAtRisk,
      exceeded: this.#exceeded,
      lastError: this.#lastError,
      inFlight: { saving: [...this.#saving], copying: this.#setup.lastTier === 0 ? [] : copying },
    };
  }

  /** On close: saves waiting for the budget are released with `cancelled`; the timer goes. */
  stop(): void {
    this.#stopped = true;
    this.#cancelTimer?.();
    const error = new CheckpointError(
      "cancelled",
      "the CheckpointManager closed while a save waited for its loss budget",
    );
    for (const waiter of this.#waiters) waiter.reject(error);
    this.#waiters.clear();
  }

  /**
   * A step found damaged on every tier: no longer durable. If it was the newest durable step, the
   * one before it is, and the damaged step is at risk (lost, with nothing in flight to mend it).
   */
  damaged(step: number): void {
    if (!this.#durableSteps.delete(step) || step !== this.#newestDurable) return;
    this.#newestDurable = undefined;
    for (const s of this.#durableSteps)
      if (this.#newestDurable === undefined || s > this.#newestDurable) this.#newestDurable = s;
    this.#atRisk.set(step, this.#setup.now());
    this.#failed.add(step);
    this.#evaluate();
  }

  #durable(step: number): void {
    this.#durableSteps.add(step);
    if (this.#newestDurable === undefined || step > this.#newestDurable) this.#newestDurable = step;
    // What is older than a durable step is no longer at risk: a resume starts from the newest durable step.
    for (const s of [...this.#atRisk.keys()]) if (s <= step) this.#forget(s);
    this.#evaluate();
  }

  /** `step`'s save failed or its copy was given up on: at risk, with nothing in flight to make it durable (unless a newer step is durable already). */
  #failedSave(step: number): void {
    if (this.#stopped || (this.#newestDurable !== undefined && step <= this.#newestDurable)) return;
    if (!this.#atRisk.has(step)) this.#atRisk.set(step, this.#setup.now());
    if (this.#newestSaved === undefined || step > this.#newestSaved) this.#newestSaved = step;
    this.#saving.delete(step);
    this.#failed.add(step);
    // A save waiting for the budget may now be the only way to meet it: it looks again.
    this.#wake();
    this.#evaluate();
  }

  #wake(): void {
    for (const waiter of this.#waiters) waiter.resolve();
    this.#waiters.clear();
  }

  #forget(step: number): void {
    this.#atRisk.delete(step);
    this.#failed.delete(step);
  }

  /** Whether a step at risk is still being saved or copied (so waiting can meet the budget). */
  #pending(): boolean {
    for (const s of this.#atRisk.keys()) if (!this.#failed.has(s)) return true;
    return false;
  }

  #measure(): { stepsAtRisk: number; secondsAtRisk: number; oldest: number | undefined } {
    if (this.#atRisk.size === 0) return { stepsAtRisk: 0, secondsAtRisk: 0, oldest: undefined };
    let newest = -Infinity;
    let lowest = Infinity;
    let oldest = Infinity;
    for (const [step, at] of this.#atRisk) {
      newest = Math.max(newest, step);
      lowest = Math.min(lowest, step);
      oldest = Math.min(oldest, at);
    }
    // Before any step is durable, the first save counts one interval at risk.
    const base = this.#newestDurable ?? lowest - this.#setup.saveInterval;
    return {
      stepsAtRisk: Math.max(0, newest - base),
      secondsAtRisk: Math.max(0, (this.#setup.now() - oldest) / 1000),
      oldest,
    };
  }

  /** Recomputes whether the budget is exceeded, emits `lossBudget` on a change, wakes waiters once met, and arms the seconds timer. */
  #evaluate(): void {
    const { maxStepsAtRisk, maxSecondsAtRisk } = this.#setup.options;
    if (maxStepsAtRisk === undefined && maxSecondsAtRisk === undefined) return;
    const { stepsAtRisk, secondsAtRisk, oldest } = this.#measure();
    const exceeded =
      (maxStepsAtRisk !== undefined && stepsAtRisk > maxStepsAtRisk) ||
      (maxSecondsAtRisk !== undefined && secondsAtRisk > maxSecondsAtRisk);
    if (exceeded !== this.#exceeded) {
      this.#exceeded = exceeded;
      if (!exceeded) this.#thrown = false;
      this.#setup.events.emit("lossBudget", {
        exceeded,
        stepsAtRisk,
        secondsAtRisk,
        newestDurable: this.#newestDurable,
      });
    }
    if (!exceeded) this.#wake();
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    // Seconds at risk grow with no event: a timer notices the moment they pass the budget.
    if (!exceeded && !this.#stopped && maxSecondsAtRisk !== undefined && oldest !== undefined) {
      const left = oldest + maxSecondsAtRisk * 1000 - this.#setup.now();
      this.#cancelTimer = longTimer(() => this.#evaluate(), Math.max(0, left) + 1);
    }
  }

  #exceededError(step: number): CheckpointError {
    const { stepsAtRisk, secondsAtRisk } = this.#measure();
    const { maxStepsAtRisk, maxSecondsAtRisk } = this.#setup.options;
    const last = this.#lastError;
    const limits = [
      maxStepsAtRisk === undefined ? "" : `${stepsAtRisk} steps (budget ${maxStepsAtRisk})`,
      maxSecondsAtRisk === undefined ? "" : `${secondsAtRisk.toFixed(1)} s (budget ${maxSecondsAtRisk} s)`,
    ].filter(Boolean);
    return new CheckpointError(
      "storage",
      `the loss budget is exceeded: ${limits.join(" and ")} are not durable yet (newest durable step: ${this.#newestDurable ?? "none"}); step ${step} is not saved` +
        (last ? `; the last failure: ${last.operation}${last.step === undefined ? "" : ` of step ${last.step}`}` : ""),
      { context: { step, transient: true }, ...(last ? { cause: last.error } : {}) },
    );
  }
}
