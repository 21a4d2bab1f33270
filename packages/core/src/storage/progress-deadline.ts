import { longTimer } from "./timers.js";
import { CheckpointError, type CheckpointErrorContext } from "../errors.js";

/** How long a storage request may go without progress (a byte sent or received, an answer) before it is aborted. */
export const DEFAULT_PROGRESS_TIMEOUT_MS = 30_000;

export interface ProgressDeadlineOptions {
  /** The caller's signal: aborting it aborts the deadline's signal too, with the caller's reason. */
  readonly signal?: AbortSignal;
  /** Names the request in the error, with the adapter's prefix: "[gs] read gs://bucket/object". */
  readonly what?: string;
  /** Put into the error's context (path, protocol); `transient` is always true. */
  readonly context?: CheckpointErrorContext;
  /** Injected so tests control time: a monotonic clock in milliseconds. */
  readonly now?: () => number;
  /** Injected so tests control time: runs `callback` after `ms`, returns a function that cancels it. */
  readonly setTimer?: (callback: () => void, ms: number) => () => void;
}

/**
 * A deadline for progress on one storage request. The adapter passes `signal` to the request
 * (or destroys its stream when it fires), calls `touch()` on every chunk sent or received, and
 * `clear()` once the request settled. When nothing was touched for `ms`, `signal` aborts with
 * `error` as its reason and `expired` turns true; the adapter then throws `error`.
 */
export interface ProgressDeadline {
  readonly signal: AbortSignal;
  /** True once the deadline fired for lack of progress (not when the caller's signal aborted). */
  readonly expired: boolean;
  /**
   * What to throw when `expired`: a `storage` error marked transient, so core's retry policy
   * (`isTransient`) retries a stalled request like a reset one.
   */
  readonly error: CheckpointError;
  touch(): void;
  /** Stops the timer and lets go of the caller's signal; the request settled. */
  clear(): void;
}

/**
 * Starts a deadline that fires after `ms` without a `touch()`. `ms` is `Infinity` for none (the
 * signal then aborts only with the caller's). One timer per request, re-armed lazily when it
 * fires, so `touch()` on each of thousands of chunks costs a clock read and no timer churn.
 */
export function progressDeadline(ms: number, options: ProgressDeadlineOptions = {}): ProgressDeadline {
  if (!(ms > 0)) {
    throw new CheckpointError(
      "invalid_argument",
      `a progress timeout must be a positive number of milliseconds (or Infinity for none), not ${String(ms)}`,
      {
        ...(options.context ? { context: options.context } : {}),
      },
    );
  }
  const now = options.now ?? (() => performance.now());
  // A deadline never keeps the process alive by itself: the request it watches does, while it lasts.
  const setTimer = options.setTimer ?? longTimer;
  const controller = new AbortController();
  const what = options.what ?? "a storage request";
  const error = new CheckpointError(
    "storage",
    `${what} made no progress for ${ms} ms and was aborted (a stalled or cut connection); if the network is this slow, raise the adapter's progressTimeoutMs`,
    { context: { ...options.context, transient: true } },
  );
  let last = now();
  let expired = false;
  let cancel: (() => void) | undefined;
  const outer = options.signal;
  const onOuterAbort = (): void => {
    clear();
    controller.abort(outer?.reason);
  };
  const check = (): void => {
    const idle = now() - last;
    if (idle < ms) {
      cancel = setTimer(check, ms - idle);
      return;
    }
    cancel = undefined;
    expired = true;
    outer?.removeEventListener("abort", onOuterAbort);
    controller.abort(error);
  };
  function clear(): void {
    cancel?.();
    cancel = undefined;
    outer?.removeEventListener("abort", onOuterAbort);
  }
  if (outer?.aborted) controller.abort(outer.reason);
  else {
    outer?.addEventListener("abort", onOuterAbort, { once: true });
    if (Number.isFinite(ms)) cancel = setTimer(check, ms);
  }
  return {
    signal: controller.signal,
    get expired() {
      return expired;
    },
    error,
    touch: () => {
      last = now();
    },
    clear,
  };
}

/**
 * Yields `source`'s chunks, touching `deadline` for each: wrap an upload body in it, so each
 * chunk the client takes to send is progress.
 */
export async function* touching<T>(
  source: AsyncIterable<T> | Iterable<T>,
  deadline: Pick<ProgressDeadline, "touch">,
): AsyncGenerator<T> {
  for await (const chunk of source) {
    deadline.touch();
    yield chunk;
  }
}
