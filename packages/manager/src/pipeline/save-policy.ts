import { invalid } from "../arguments/manager-arguments.js";

/**
 * Which steps a manager saves, like Orbax's `SaveDecisionPolicy`: asked once per `save`,
 * `saveAsync` and `shouldSave` call. A forced save and a preemption's save happen whatever it
 * says. It must answer the same on every rank for the same step.
 */
export interface SaveDecisionPolicy {
  shouldSave(step: number): boolean;
}

/** Saves every `interval`-th step (`step % interval === 0`): what a number given as `saveInterval` means. */
export class FixedIntervalPolicy implements SaveDecisionPolicy {
  readonly interval: number;

  constructor(interval: number) {
    if (typeof interval !== "number" || !Number.isSafeInteger(interval) || interval < 1)
      throw invalid("saveInterval", "an integer of at least 1", interval);
    this.interval = interval;
  }

  shouldSave(step: number): boolean {
    return step % this.interval === 0;
  }
}

/** Saves exactly the steps listed. */
export class SpecificStepsPolicy implements SaveDecisionPolicy {
  readonly #steps: ReadonlySet<number>;

  constructor(steps: Iterable<number>) {
    const list = typeof steps === "object" && steps !== null && Symbol.iterator in steps ? [...steps] : undefined;
    if (list === undefined || !list.every((s) => Number.isSafeInteger(s) && s >= 0))
      throw invalid("SpecificStepsPolicy steps", "an iterable of integers >= 0", steps);
    this.#steps = new Set(list);
  }

  shouldSave(step: number): boolean {
    return this.#steps.has(step);
  }
}

/** Saves a step when any of its policies would (an interval, plus a few steps of interest). */
export class AnySavePolicy implements SaveDecisionPolicy {
  readonly #policies: readonly SaveDecisionPolicy[];

  constructor(policies: readonly SaveDecisionPolicy[]) {
    if (!Array.isArray(policies) || !policies.every(isSaveDecisionPolicy))
      throw invalid("AnySavePolicy policies", "an array of SaveDecisionPolicy objects", policies);
    this.#policies = [...policies];
  }

  shouldSave(step: number): boolean {
    return this.#policies.some((p) => p.shouldSave(step));
  }
}

export function isSaveDecisionPolicy(value: unknown): value is SaveDecisionPolicy {
  return typeof value === "object" && value !== null && typeof (value as SaveDecisionPolicy).shouldSave === "function";
}

/** The policy a manager is constructed with: a number is a `FixedIntervalPolicy`. */
export function savePolicyOf(saveInterval: unknown): SaveDecisionPolicy {
  if (isSaveDecisionPolicy(saveInterval)) return saveInterval;
  if (typeof saveInterval !== "number" || !Number.isSafeInteger(saveInterval) || saveInterval < 1)
    throw invalid("saveInterval", "an integer of at least 1 or a SaveDecisionPolicy", saveInterval);
  return new FixedIntervalPolicy(saveInterval);
}
