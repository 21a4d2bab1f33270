import { MAX_TIMER_MS } from "@cairn/core/storage";
import { invalid } from "../arguments/manager-arguments.js";

/** What a manager does when more than its loss budget is at risk. */
export type OnExceeded = "warn" | "block" | "fail";

/**
 * The loss budget (a recovery point objective): how much training may be lost if the run died
 * now, measured from the newest step a save was started for to the newest step committed on
 * the last tier (the only tier, untiered). Exceeding it always emits `lossBudget`; `onExceeded`
 * says what the next `save`/`saveAsync` does: go on (`"warn"`, the default), wait until the
 * budget is met again (`"block"`), or throw (`"fail"`, code `storage`, the last error as cause).
 */
export interface DurabilityOptions {
  /** Training steps between the newest step saved and the newest durable one (an integer >= 0). */
  readonly maxStepsAtRisk?: number;
  /** Seconds since the oldest save that is not durable yet was started (a number > 0). */
  readonly maxSecondsAtRisk?: number;
  readonly onExceeded?: OnExceeded;
}

const KEYS: ReadonlySet<string> = new Set(["maxStepsAtRisk", "maxSecondsAtRisk", "onExceeded"]);

/** Refuses durability options of the wrong type or range, before any of them reaches a timer. */
export function checkDurabilityOptions(value: unknown): asserts value is DurabilityOptions | undefined {
  if (value === undefined) return;
  const name = "CheckpointManager option durability";
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw invalid(name, "an object { maxStepsAtRisk, maxSecondsAtRisk, onExceeded }", value);
  const options = value as Record<string, unknown>;
  for (const key of Object.keys(options))
    if (!KEYS.has(key)) throw invalid(`${name}.${key}`, "one of maxStepsAtRisk, maxSecondsAtRisk, onExceeded", key);
  const { maxStepsAtRisk: steps, maxSecondsAtRisk: seconds, onExceeded } = options;
  if (steps !== undefined && (typeof steps !== "number" || !Number.isSafeInteger(steps) || steps < 0))
    throw invalid(`${name}.maxStepsAtRisk`, "an integer >= 0", steps);
  // Seconds become a timer's ms: finite, positive, and within what a timer holds.
  if (
    seconds !== undefined &&
    (typeof seconds !== "number" || !(seconds > 0) || !Number.isFinite(seconds) || seconds * 1000 > MAX_TIMER_MS)
  )
    throw invalid(`${name}.maxSecondsAtRisk`, `a number of seconds > 0 and <= ${MAX_TIMER_MS / 1000}`, seconds);
  if (onExceeded !== undefined && onExceeded !== "warn" && onExceeded !== "block" && onExceeded !== "fail")
    throw invalid(`${name}.onExceeded`, '"warn", "block" or "fail"', onExceeded);
  if (onExceeded !== undefined && steps === undefined && seconds === undefined)
    throw invalid(`${name}.onExceeded`, "given with maxStepsAtRisk or maxSecondsAtRisk", onExceeded);
}
