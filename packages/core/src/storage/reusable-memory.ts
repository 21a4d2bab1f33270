import { isPageAligned, pageAlignedSharedBytes } from "./page-aligned.js";

/**
 * Memory kept between saves and loads, for the process: files of small tensors are packed into
 * it (save/write-data-file.ts) and reads that cannot land in their destination are staged in it
 * (load/read-ranges.ts). Fresh memory costs a page fault per 4 KiB on first touch, which for
 * 100k small tensors cost more than copying them, and memory given back can cost that again.
 * Memories are page-aligned where asked for, sized in whole MiB so the next call's
 * buffers, of about the same sizes, fit; the pool keeps at most POOL_BYTES, and lets go of all
 * of them once nothing was kept for IDLE_MS, so a process that stops saving gets its memory back.
 */
const GRAIN = 1 << 20;
const POOL_BYTES = 256 << 20;
const IDLE_MS = 30_000;

/** Memories kept for reuse, at most `limit` bytes, all let go once none was kept for IDLE_MS. */
export class MemoryPool {
  readonly #free: Uint8Array[] = [];
  #kept = 0;
  #idle: ReturnType<typeof setTimeout> | undefined;

  constructor(readonly limit: number) {}

  /** The smallest kept memory of at least `bytes` that `fits`, taken out of the pool (whole). */
  take(bytes: number, fits?: (memory: Uint8Array) => boolean): Uint8Array | undefined {
    const free = this.#free;
    let best = -1;
    for (let i = 0; i < free.length; i++) {
      const ok = free[i]!.byteLength >= bytes && (fits === undefined || fits(free[i]!));
      if (ok && (best < 0 || free[i]!.byteLength < free[best]!.byteLength)) best = i;
    }
    if (best < 0) return undefined;
    const [memory] = free.splice(best, 1);
    this.#kept -= memory!.byteLength;
    return memory;
  }

  /** Keeps `memory` for a later `take`, unless it is empty or would pass the limit. */
  keep(memory: Uint8Array): void {
    if (memory.byteLength === 0 || this.#kept + memory.byteLength > this.limit) return;
    this.#free.push(memory);
    this.#kept += memory.byteLength;
    if (this.#idle) clearTimeout(this.#idle);
    this.#idle = setTimeout(() => {
      this.#free.length = 0;
      this.#kept = 0;
    }, IDLE_MS);
    // Node's timers can be told not to keep the process alive; a browser's are plain numbers.
    (this.#idle as { unref?: () => void }).unref?.();
  }
}

const pool = new MemoryPool(POOL_BYTES);

/**
 * `bytes` of memory, a pooled one that fits (the smallest) or a new one. With `pageAligned`
 * (needs `pageAlignedAvailable`), page-aligned shared memory, as O_DIRECT writes need; without,
 * any memory, ordinary where it is new (a browser page that is not cross-origin isolated has no
 * shared memory). Its contents are whatever was left there.
 */
export function takeReusableMemory(bytes: number, pageAligned = false): Uint8Array {
  const kept = pool.take(bytes, pageAligned ? (memory) => isPageAligned(memory.buffer) : undefined);
  if (kept) return kept.subarray(0, bytes);
  const size = Math.max(GRAIN, Math.ceil(bytes / GRAIN) * GRAIN);
  return (pageAligned ? pageAlignedSharedBytes(size) : new Uint8Array(size)).subarray(0, bytes);
}

/** Gives memory from `takeReusableMemory` back, once nothing reads or writes it any more. */
export function giveBackReusableMemory(memory: Uint8Array): void {
  pool.keep(new Uint8Array(memory.buffer, 0, Math.floor(memory.buffer.byteLength / GRAIN) * GRAIN));
}
