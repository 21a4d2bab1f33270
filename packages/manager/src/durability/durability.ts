import type { CoordinatedProcessGroup, LoadResult, StateDict } from "@cairn/core";
import type { ManagerEmitter } from "../events/manager-events.js";
import type { Tier } from "../tiers/tier.js";
import type { restoreFromTiers } from "../tiers/tiered-restore.js";
import type { DurabilityOptions } from "./durability-options.js";
import { LossBudget, type ManagerHealth } from "./loss-budget.js";
import { latestVerifiedStep, restoreNewestVerified, restoreVerifying } from "./newest-verified.js";
import { StaleCheck } from "./stale-check.js";
import { VerifiedSteps } from "./verified-steps.js";

export interface DurabilitySetup {
  readonly tiers: readonly Tier[];
  readonly events: ManagerEmitter;
  readonly group: CoordinatedProcessGroup;
  readonly options: DurabilityOptions | undefined;
  readonly now: () => number;
  readonly saveInterval: number;
}

type RestoreOptions = Parameters<typeof restoreFromTiers>[4] & { readonly processGroup: CoordinatedProcessGroup };

/**
 * A manager's durability contract in one place (docs/reliability.md, "Durability"): the newest
 * verified step, the retention guard, the loss budget and `health()`, and the stale-save check.
 * It follows the manager's own events; the face calls `beforeSave`, asks `holds` in retention's
 * busy check, and routes `restore("latest")`, `latestStep({ verified })`, `health()` and close here.
 */
export class Durability {
  readonly #setup: DurabilitySetup;
  readonly #verified: VerifiedSteps;
  readonly #budget: LossBudget;
  readonly #stale: StaleCheck;

  constructor(setup: DurabilitySetup) {
    this.#setup = setup;
    const { tiers, events, group } = setup;
    const lastTier = tiers.length - 1;
    this.#budget = new LossBudget({ ...setup, options: setup.options ?? {}, lastTier });
    this.#verified = new VerifiedSteps(tiers, (step) => this.#budget.damaged(step));
    this.#stale = new StaleCheck(events);
    events.watch("committed", ({ step }) => {
      this.#verified.good(step);
      // Rank 0 reads the commit back for the stale check; the others' tier 0 may hold only their own files.
      const storage = tiers[0]!.opened?.storage;
      if (group.rank === 0 && storage) this.#stale.committed(step, storage);
    });
    events.watch("replicated", ({ step, tier }) => {
      if (tier === lastTier) this.#verified.durable(step);
    });
  }

  /** Retention's guard: the newest known-good durable step stays while a newer one is not both. */
  holds(step: number): boolean {
    return this.#verified.holds(step);
  }

  /** A step deleted on purpose (`delete`, a replacing save) is forgotten. */
  forget(step: number): void {
    this.#verified.forget(step);
  }

  /** Whether `step` was found damaged (every copy) and not saved again since. */
  isDamaged(step: number): boolean {
    return this.#verified.damage(step) !== undefined;
  }

  /** Before a save of `step` (decided, so it goes ahead): what was known of an older checkpoint under its number (an overwrite) no longer holds. */
  async beforeSave(step: number): Promise<void> {
    await this.#budget.beforeSave(step);
    this.#verified.forget(step);
  }

  /** A save thrown to its caller, at whatever stage: counted once in `health()` and the loss budget. */
  saveFailed(step: number, error: unknown): void {
    this.#budget.saveFailed(step, error);
  }

  health(): ManagerHealth {
    return this.#budget.health();
  }

  async restoreLatest(
    target: StateDict | undefined,
    options: RestoreOptions,
  ): Promise<{ readonly step: number; readonly result: LoadResult | StateDict }> {
    const restored = await restoreNewestVerified(this.#newest(), target, options);
    this.#restored(restored.step, target, restored.result);
    return restored;
  }

  /**
   * A restore by number: once every entry was read (so checked) the step is known good, and the
   * next save is compared with it; a step whose every copy is damaged is known damaged.
   */
  async restore(step: number, target: StateDict | undefined, options: RestoreOptions): Promise<LoadResult | StateDict> {
    const { result, vouched } = await restoreVerifying(this.#newest(), step, target, options);
    if (vouched) this.#restored(step, target, result);
    return result;
  }

  /** A step restored whole: the next save is compared with it (a targetless restore's metadata read from the fastest tier listing it, else tier 0). */
  #restored(step: number, target: StateDict | undefined, result: LoadResult | StateDict): void {
    if (target !== undefined) return this.#stale.restored(step, (result as LoadResult).metadata);
    const { tiers } = this.#setup;
    const storage = (tiers.find((t) => t.opened?.lists(step)) ?? tiers[0])?.opened?.storage;
    if (this.#setup.group.rank === 0 && storage) this.#stale.restoredFrom(step, storage);
  }

  latestVerified(signal: AbortSignal | undefined): Promise<number | undefined> {
    return latestVerifiedStep(this.#newest(), signal);
  }

  /** Waits for the stale checks of the commits so far. */
  settled(): Promise<void> {
    return this.#stale.settled();
  }

  stop(): void {
    this.#budget.stop();
  }

  #newest(): {
    tiers: readonly Tier[];
    events: ManagerEmitter;
    group: CoordinatedProcessGroup;
    verified: VerifiedSteps;
  } {
    const { tiers, events, group } = this.#setup;
    return { tiers, events, group, verified: this.#verified };
  }
}
