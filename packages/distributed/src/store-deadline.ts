import { CheckpointError } from "@cairn/core";
import { longTimer } from "@cairn/core/storage";

/** How long any store call (etcd, Redis, the TCP store; setup and teardown too) may go unanswered. */
export const STORE_DEADLINE_MS = 10_000;

/**
 * Settles with `call`, or rejects with a `process_group` error once `ms` pass without an
 * answer (beyond `extraMs`, a wait's own timeout): a store that stops answering (SIGSTOP, a
 * partition) fails the call instead of hanging it. What a late answer makes (a watch, a
 * subscription) is handed to `late` to release.
 */
export function withDeadline<T>(
  what: string,
  call: Promise<T>,
  options: {
    readonly extraMs?: number;
    readonly late?: (value: T) => void;
    /** Called when the deadline passes: the store is not answering. */
    readonly onExpired?: () => void;
  } = {},
): Promise<T> {
  const ms = STORE_DEADLINE_MS + (options.extraMs ?? 0);
  return new Promise<T>((resolve, reject) => {
    let expired = false;
    const cancel = longTimer(() => {
      expired = true;
      options.onExpired?.();
      reject(
        new CheckpointError(
          "process_group",
          `${what}: no answer within ${Math.round(ms / 100) / 10} s (the store is stopped, overloaded or unreachable)`,
        ),
      );
    }, ms);
    call.then(
      (value) => {
        cancel();
        if (expired) options.late?.(value);
        else resolve(value);
      },
      (error: unknown) => {
        cancel();
        if (!expired) reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });
}
