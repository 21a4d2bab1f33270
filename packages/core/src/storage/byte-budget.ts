import { cancelledError } from "../errors.js";

/**
 * Bounds the bytes that transfers in flight hold at once, so the memory a save or load buffers
 * stays within `limit` however many reads or writes run. Waiters are served first come, first
 * served, so a large request is not overtaken forever by small ones; a request larger than the
 * whole budget waits until nothing is held, then runs alone.
 */
export class ByteBudget {
  readonly #limit: number;
  #available: number;
  readonly #waiting: { readonly bytes: number; readonly grant: () => void }[] = [];

  constructor(limit: number) {
    this.#limit = limit;
    this.#available = limit;
  }

  /**
   * Resolves with the release, once `bytes` fit beside what is held (call it once when done;
   * later calls do nothing). Rejects with `cancelled` if `signal` aborts first.
   */
  async acquire(bytes: number, signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) throw cancelledError(signal, "waiting for room in the transfer budget", null);
    const wanted = Math.min(Math.max(bytes, 0), this.#limit);
    if (this.#waiting.length === 0 && this.#available >= wanted) this.#available -= wanted;
    else {
      await new Promise<void>((resolve, reject) => {
        const waiter = {
          bytes: wanted,
          grant: () => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
          },
        };
        const onAbort = (): void => {
          const at = this.#waiting.indexOf(waiter);
          if (at >= 0) this.#waiting.splice(at, 1);
          // The head of the line left: those behind it may fit now.
          this.#grant();
          reject(cancelledError(signal!, "waiting for room in the transfer budget", null));
        };
        this.#waiting.push(waiter);
        signal?.addEventListener("abort", onAbort, { once: true });
      });
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#available += wanted;
      this.#grant();
    };
  }

  #grant(): void {
    while (this.#waiting.length > 0 && this.#available >= this.#waiting[0]!.bytes) {
      const next = this.#waiting.shift()!;
      this.#available -= next.bytes;
      next.grant();
    }
  }
}
