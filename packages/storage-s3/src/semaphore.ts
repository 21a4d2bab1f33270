import { cancelledError } from "@cairn/core/storage";

/**
 * Bounds how many part-sized requests an adapter has in flight across all its calls, so the
 * memory a save or load buffers is at most `permits` × part size however many files core
 * writes or reads at once. Waiters are served first come, first served.
 */
export class Semaphore {
  #free: number;
  readonly #waiters: (() => void)[] = [];

  constructor(permits: number) {
    this.#free = permits;
  }

  /** Resolves with a release function once a permit is free; rejects with `cancelled` if `signal` aborts first. */
  async acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) throw cancelledError(signal, "waiting for a transfer slot", null);
    if (this.#free > 0) {
      this.#free--;
      return this.#releaser();
    }
    await new Promise<void>((resolve, reject) => {
      const grant = (): void => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = (): void => {
        const at = this.#waiters.indexOf(grant);
        if (at >= 0) this.#waiters.splice(at, 1);
        reject(cancelledError(signal!, "waiting for a transfer slot", null));
      };
      this.#waiters.push(grant);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
    return this.#releaser();
  }

  #releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#waiters.shift();
      // The permit passes straight to the next waiter, so a newcomer cannot overtake it.
      if (next) next();
      else this.#free++;
    };
  }
}
