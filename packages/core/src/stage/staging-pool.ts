import { CheckpointError, throwIfAborted } from "../errors.js";
import { isPageAligned, pageAlignedSharedBytes, sharedBytes } from "../storage/page-aligned.js";
import { prefault } from "#platform/stage/prefault.js";
import { yieldToEventLoop } from "#platform/runtime.js";

export interface StagingPoolOptions {
  /** Most bytes of staging buffers held at once (default: unbounded). A save needing more is refused. */
  readonly maxBytes?: number;
}

/**
 * Reusable host buffers for staging, in shared memory so worker threads (the upload worker,
 * checksum workers) read them without a copy. Buffers are handed out per save and come back
 * when its upload ends; a later save of the same state reuses them, so steady-state training
 * allocates nothing for checkpoints. `prepare` allocates them ahead of the first save and makes
 * them resident from another thread, so even the first save copies at memcpy speed.
 * With `maxBytes`, a save waits until enough buffers come back.
 */
export class StagingPool {
  readonly #maxBytes: number;
  /** Free buffers by kind and size: `s<bytes>` shared, `p<bytes>` page-aligned shared. */
  readonly #free = new Map<string, Uint8Array[]>();
  #allocated = 0;
  #inUse = 0;
  readonly #waiting: (() => void)[] = [];
  /** Until it first allocates or prepares anything. */
  #fresh = true;
  /** Settles when every `prepare` so far is done; `acquire` waits for it rather than allocate a second set. */
  #preparing: Promise<void> = Promise.resolve();

  constructor(options: StagingPoolOptions = {}) {
    this.#maxBytes = options.maxBytes ?? Infinity;
  }

  /** The most bytes of buffers it may hold (`Infinity` without a budget). */
  get maxBytes(): number {
    return this.#maxBytes;
  }

  /** Bytes of buffers the pool holds, free or in use. */
  get allocatedBytes(): number {
    return this.#allocated;
  }

  get inUseBytes(): number {
    return this.#inUse;
  }

  /** Whether it has neither allocated nor prepared a buffer yet: a save staged now would copy into fresh memory. */
  get fresh(): boolean {
    return this.#fresh;
  }

  /**
   * Buffers of the given sizes, all at once (so two saves never each hold half of what they
   * need), in shared memory; those with `pageAligned[i]` start on a page boundary.
   */
  async acquire(
    sizes: readonly number[],
    signal?: AbortSignal,
    pageAligned: readonly boolean[] = [],
  ): Promise<Uint8Array[]> {
    const total = sizes.reduce((a, b) => a + b, 0);
    if (total > this.#maxBytes) {
      throw new CheckpointError(
        "invalid_argument",
        `staging this state dict needs ${total} bytes but the staging budget is ${this.#maxBytes}; raise stagingBudget or use staging "reference"`,
      );
    }
    await this.#preparing;
    for (;;) {
      throwIfAborted(signal, "staging");
      if (this.#inUse + total <= this.#maxBytes) return this.#takeAll(sizes, pageAligned);
      await new Promise<void>((resolve) => this.#waiting.push(resolve));
    }
  }

  /**
   * Makes buffers of these sizes ready for a later `acquire` of the same sizes: allocated, and
   * resident (touched by another thread), then left free in the pool. Does nothing when they
   * do not fit the budget beside the buffers in use now. Never rejects: it only saves time.
   */
  prepare(sizes: readonly number[], pageAligned: readonly boolean[] = []): Promise<void> {
    this.#fresh = false;
    const run = async (): Promise<void> => {
      // In a turn of its own: allocating and starting the prefault thread take milliseconds, which
      // whatever called this (a first saveAsync written in place, about to return) must not wait for.
      await yieldToEventLoop();
      if (this.#inUse + sizes.reduce((a, b) => a + b, 0) > this.#maxBytes) return;
      const buffers = this.#takeAll(sizes, pageAligned);
      try {
        await prefault(buffers);
      } catch {
        // Without the thread the buffers are still good; the first copy pays for the pages.
      } finally {
        this.release(buffers);
      }
    };
    this.#preparing = this.#preparing.then(run);
    return this.#preparing;
  }

  /** Settles once every `prepare` so far is done. */
  prepared(): Promise<void> {
    return this.#preparing;
  }

  release(buffers: readonly Uint8Array[]): void {
    for (const buffer of buffers) {
      this.#inUse -= buffer.byteLength;
      const key = keyOf(buffer.byteLength, isPageAligned(buffer.buffer));
      const list = this.#free.get(key) ?? [];
      list.push(buffer);
      this.#free.set(key, list);
    }
    for (const wake of this.#waiting.splice(0)) wake();
  }

  /** Drops every free buffer (for example after training ends). */
  clear(): void {
    for (const list of this.#free.values()) for (const b of list) this.#allocated -= b.byteLength;
    this.#free.clear();
  }

  /** Takes buffers of `sizes`, free ones first, dropping free ones it will not reuse to stay within the budget. */
  #takeAll(sizes: readonly number[], pageAligned: readonly boolean[]): Uint8Array[] {
    const total = sizes.reduce((a, b) => a + b, 0);
    const keys = sizes.map((size, i) => keyOf(size, pageAligned[i] === true));
    const wanted = new Map<string, number>();
    for (const key of keys) wanted.set(key, (wanted.get(key) ?? 0) + 1);
    let reusable = 0;
    for (const [key, count] of wanted) reusable += sizeOf(key) * Math.min(count, this.#free.get(key)?.length ?? 0);
    const over = this.#allocated + (total - reusable) - this.#maxBytes;
    if (over > 0) this.#dropFree(over, wanted);
    return keys.map((key) => this.#take(key));
  }

  /** Frees unused buffers this request will not reuse, until `bytes` are freed. */
  #dropFree(bytes: number, wanted: ReadonlyMap<string, number>): void {
    for (const [key, list] of this.#free) {
      while (list.length > (wanted.get(key) ?? 0) && bytes > 0) {
        list.pop();
        this.#allocated -= sizeOf(key);
        bytes -= sizeOf(key);
      }
      if (list.length === 0) this.#free.delete(key);
    }
  }

  #take(key: string): Uint8Array {
    const size = sizeOf(key);
    this.#inUse += size;
    const reused = this.#free.get(key)?.pop();
    if (reused) return reused;
    this.#fresh = false;
    this.#allocated += size;
    return key.startsWith("p") ? pageAlignedSharedBytes(size) : sharedBytes(size);
  }
}

/** A free-list key: `p<bytes>` for page-aligned buffers, `s<bytes>` for other shared ones. */
const keyOf = (bytes: number, pageAligned: boolean): string => `${pageAligned ? "p" : "s"}${bytes}`;
const sizeOf = (key: string): number => Number(key.slice(1));
