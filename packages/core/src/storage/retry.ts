import { CheckpointError, cancelledError, isTransient } from "../errors.js";

/** How transient storage failures are retried: exponential backoff with full jitter, bounded in count and time. */
export interface RetryPolicy {
  /** Attempts in all, the first included. */
  readonly maxAttempts: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  /** No new attempt starts after this long since the first. */
  readonly maxElapsedMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxAttempts: 6,
  baseDelayMs: 100,
  maxDelayMs: 5_000,
  maxElapsedMs: 120_000,
};

/** How a backoff grows: from `baseDelayMs`, doubling per failure, never past `maxDelayMs`. */
export type BackoffPolicy = Pick<RetryPolicy, "baseDelayMs" | "maxDelayMs">;

/**
 * How a delay is drawn below the backoff's ceiling: `full` anywhere in [0, ceiling) (callers
 * retrying at once spread out most), `equal` in [ceiling / 2, ceiling) (never sooner than half),
 * `none` the ceiling itself.
 */
export type Jitter = "full" | "equal" | "none";

/**
 * THE backoff: the wait after `failures` failures in a row (1 for the first), whose ceiling is
 * `baseDelayMs · 2^(failures − 1)` capped at `maxDelayMs`, drawn as `jitter` says; whole milliseconds.
 */
export function backoffDelay(
  failures: number,
  policy: BackoffPolicy,
  jitter: Jitter = "full",
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.min(Math.max(failures - 1, 0), 30));
  if (jitter === "none") return Math.floor(ceiling);
  return Math.floor(jitter === "full" ? random() * ceiling : ceiling / 2 + (random() * ceiling) / 2);
}

export interface RetryOptions {
  readonly policy?: Partial<RetryPolicy>;
  readonly signal?: AbortSignal;
  /** Injected so tests control time. */
  readonly sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly now?: () => number;
  /** Injected so tests control jitter; returns a number in [0, 1). */
  readonly random?: () => number;
  readonly onRetry?: (error: CheckpointError, attempt: number, delayMs: number) => void;
  /**
   * Marks the transient error that ends the retries permanent (`exhausted`). For adapters that
   * retry their own requests: core's retry around every adapter call then does not start the
   * whole sequence again, so one failure is tried as often as the adapter's policy says, not that times core's.
   */
  readonly exhaust?: boolean;
}

/**
 * The error to throw once retries are spent: the same failure marked permanent (`transient:
 * false`), naming the attempts, so a caller that also retries does not start over.
 */
export function exhausted(error: unknown, attempts: number): unknown {
  if (!isTransient(error)) return error;
  return new CheckpointError(
    error.code,
    `${error.message} (gave up after ${attempts} attempt${attempts === 1 ? "" : "s"})`,
    { cause: error.cause, context: { ...error.context, transient: false } },
  );
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(cancelledError(signal, "the wait", null));
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(cancelledError(signal!, "the wait", null));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Node socket and DNS error codes, as SDKs surface them in `error.code`: the network blinked,
 * the request may not have arrived or its answer was lost, so the same request may well
 * succeed again. Adapters classify these as transient.
 */
export const TRANSIENT_NETWORK_CODES: ReadonlySet<string> = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "ESOCKETTIMEDOUT",
  "EAI_AGAIN",
  "ENOTFOUND",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "ERR_STREAM_PREMATURE_CLOSE",
  "UND_ERR_SOCKET",
]);

/**
 * Runs `operation` until it succeeds, fails permanently, or the policy's bounds are reached;
 * the last error is rethrown as it was. Only idempotent operations belong here.
 */
export async function withRetry<T>(operation: (attempt: number) => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const policy = { ...DEFAULT_RETRY_POLICY, ...options.policy };
  const now = options.now ?? Date.now;
  const random = options.random ?? Math.random;
  const wait = options.sleep ?? sleep;
  const started = now();
  for (let attempt = 1; ; attempt++) {
    if (options.signal?.aborted) throw cancelledError(options.signal, "the operation", null);
    try {
      return await operation(attempt);
    } catch (error) {
      const giveUp = (): unknown => (options.exhaust ? exhausted(error, attempt) : error);
      if (!isTransient(error) || attempt >= policy.maxAttempts) throw giveUp();
      const delay = backoffDelay(attempt, policy, "full", random);
      if (now() - started + delay > policy.maxElapsedMs) throw giveUp();
      options.onRetry?.(error, attempt, delay);
      await wait(delay, options.signal);
    }
  }
}
