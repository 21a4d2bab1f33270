import { CheckpointError, describeValue } from "@cairn/core";

/**
 * Steps live in directories named by the plain decimal step (`<root>/100/`), as torch_xla and
 * Orbax name them. Only canonical decimals are steps: `007`, `1e3` or `-1` are someone else's.
 */
export function stepDir(step: number): string {
  return String(step);
}

export function parseStep(name: string): number | undefined {
  if (!/^(0|[1-9][0-9]*)$/.test(name)) return undefined;
  const step = Number(name);
  return Number.isSafeInteger(step) ? step : undefined;
}

/** Steps are non-negative safe integers; anything else is `invalid_argument`. */
export function checkStep(step: unknown, what = "step"): number {
  if (typeof step !== "number" || !Number.isSafeInteger(step) || step < 0) {
    throw new CheckpointError(
      "invalid_argument",
      `${what} must be a non-negative integer no larger than ${Number.MAX_SAFE_INTEGER}, got ${describeValue(step)}`,
    );
  }
  return step;
}
