import { isPageAligned, pageAlignedSharedBytes } from "./page-aligned.js";

/**
 * Memory kept between saves and loads, for the process: files of small tensors are packed into
 * it (save/write-data-file.ts) and reads that cannot land in their destination are staged in it
 * (load/read-ranges.ts). Fresh memory costs a page fault per 4 KiB on first touch, which for
 * 100k small tensors cost more than copying them, and memory given back can cost that again.
 * Memories are page-aligned where asked for, sized in whole MiB so the next call's
 * buffers, of about the same sizes, fit; the pool keeps at most POOL_BYTES, and lets go of all
 * of them once nothing has used it for IDLE_MS, so a process that stops saving gets its memory back.
 */
const GRAIN = 1 << 20;
const POOL_BYTES = 256 << 20;
const IDLE_MS = 30_000;

const free: Uint8Array[] = [];
let kept = 0;
let idle: ReturnType<typeof setTimeout> | undefined;

/**
 * `bytes` of memory, a pooled one that fits (the smallest) or a new one. With `pageAligned`
 * (needs `pageAlignedAvailable`), page-aligned shared memory, as O_DIRECT writes need; without,
 * any memory, ordinary where it is new (a browser page that is not cross-origin isolated has no
 * shared memory). Its contents are whatever was left there.
 */
export function takeReusableMemory(bytes: number, pageAligned = false): Uint8Array {
  let best = -1;
  for (let i = 0; i < free.length; i++) {
    const fits = free[i]!.byteLength >= bytes && (!pageAligned || isPageAligned(free[i]!.buffer));
    if (fits && (best < 0 || free[i]!.byteLength < free[best]!.byteLength)) best = i;
  }
  if (best < 0) {
    const size = Math.max(GRAIN, Math.ceil(bytes / GRAIN) * GRAIN);
    return (pageAligned ? pageAlignedSharedBytes(size) : new Uint8Array(size)).subarray(0, bytes);
  }
  const [memory] = free.splice(best, 1);
  kept -= memory!.byteLength;
  return memory!.subarray(0, bytes);
}

/** Gives memory from `takeReusableMemory` back, once nothing reads or writes it any more. */
export function giveBackReusableMemory(memory: Uint8Array): void {
  const whole = new Uint8Array(memory.buffer, 0, Math.floor(memory.buffer.byteLength / GRAIN) * GRAIN);
  if (whole.byteLength === 0 || kept + whole.byteLength > POOL_BYTES) return;
  free.push(whole);
  kept += whole.byteLength;
  if (idle) clearTimeout(idle);
  idle = setTimeout(() => {
    free.length = 0;
    kept = 0;
  }, IDLE_MS);
  // Node's timers can be told not to keep the process alive; a browser's are plain numbers.
  (idle as { unref?: () => void }).unref?.();
}
