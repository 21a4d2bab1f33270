import { pageAlignedSharedBytes } from "../storage/page-aligned.js";

/**
 * Page-aligned memories that files of small tensors are packed into (write-data-file.ts), kept
 * between saves: fresh memory costs a page fault per 4 KiB on first touch, which for 100k small
 * tensors cost more than copying them. Memories are sized in whole MiB so the next save's
 * files, of about the same sizes, fit; the pool keeps at most POOL_BYTES, and lets go of all of
 * them once no save has used it for IDLE_MS, so a process that stops saving gets its memory back.
 */
const GRAIN = 1 << 20;
const POOL_BYTES = 256 << 20;
const IDLE_MS = 30_000;

const free: Uint8Array[] = [];
let kept = 0;
let idle: ReturnType<typeof setTimeout> | undefined;

/** `bytes` of page-aligned memory, starting on a page boundary: a pooled one that fits (the smallest), or a new one. */
export function takePackingMemory(bytes: number): Uint8Array {
  let best = -1;
  for (let i = 0; i < free.length; i++) {
    if (free[i]!.byteLength >= bytes && (best < 0 || free[i]!.byteLength < free[best]!.byteLength)) best = i;
  }
  if (best < 0) return pageAlignedSharedBytes(Math.ceil(bytes / GRAIN) * GRAIN).subarray(0, bytes);
  const [memory] = free.splice(best, 1);
  kept -= memory!.byteLength;
  return memory!.subarray(0, bytes);
}

/** Gives memory from `takePackingMemory` back, once nothing reads it any more (its write settled). */
export function giveBackPackingMemory(memory: Uint8Array): void {
  const whole = new Uint8Array(memory.buffer, 0, Math.floor(memory.buffer.byteLength / GRAIN) * GRAIN);
  if (whole.byteLength === 0 || kept + whole.byteLength > POOL_BYTES) return;
  free.push(whole);
  kept += whole.byteLength;
  if (idle) clearTimeout(idle);
  idle = setTimeout(() => {
    free.length = 0;
    kept = 0;
  }, IDLE_MS);
  idle.unref();
}
