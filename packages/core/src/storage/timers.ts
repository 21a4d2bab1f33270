import { unrefTimer } from "#platform/runtime.js";
import { CheckpointError, describeValue } from "../errors.js";

/** Node's timers hold at most 2³¹−1 ms: a longer delay fires after 1 ms (TimeoutOverflowWarning). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `callback` once `ms` have passed, however long that is (`Infinity`: never), by chaining
 * timers Node can hold. The timer does not keep the process alive unless `ref`. Returns the cancel.
 */
export function longTimer(callback: () => void, ms: number, options: { readonly ref?: boolean } = {}): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const due = performance.now() + ms;
  const arm = (): void => {
    if (!Number.isFinite(due)) return;
    const left = due - performance.now();
    if (left > MAX_TIMER_MS) timer = setTimeout(arm, MAX_TIMER_MS);
    else timer = setTimeout(callback, Math.max(0, left));
    if (!options.ref) unrefTimer(timer);
  };
  arm();
  return () => clearTimeout(timer);
}

/**
 * Checks a user-given duration in ms before it reaches a timer or a deadline: a number, at least
 * `min` (default 0), finite unless `infinite` (then `Infinity` means no limit), and at most `max`
 * when given. Throws `invalid_argument` naming `what` and the value.
 */
export function checkDuration(
  value: unknown,
  what: string,
  options: { readonly min?: number; readonly max?: number; readonly infinite?: boolean } = {},
): asserts value is number {
  const min = options.min ?? 0;
  const ok =
    typeof value === "number" &&
    value >= min &&
    (Number.isFinite(value) ? options.max === undefined || value <= options.max : options.infinite === true);
  if (!ok) {
    const range = `${options.max === undefined ? `>= ${min}` : `from ${min} to ${options.max}`}${options.infinite ? ", or Infinity for no limit" : ""}`;
    throw new CheckpointError(
      "invalid_argument",
      `${what} must be a number of ms ${range}, got ${describeValue(value)}`,
    );
  }
}
