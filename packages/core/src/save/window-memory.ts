// The write windows' memory (write-windows.ts): page-aligned shared memory kept between saves,
// in transparent huge pages where Linux and @cairn/crc32c-native allow. Imports format/, storage/.
import { adviseHugePages } from "../format/crc32c.js";
import { pageAlignedSharedBytes } from "../storage/page-aligned.js";
import { MemoryPool, giveBackReusableMemory, takeReusableMemory } from "../storage/reusable-memory.js";

/** A transparent huge page (x86-64, aarch64 with 4 KiB pages). */
const HUGE_PAGE = 2 << 20;
/** Views are sized in whole MiB, so the next save's windows, of about the same sizes, fit. */
const GRAIN = 1 << 20;
/** Huge-page windows kept for the next save: the window budget's worth, and a little more. */
const pool = new MemoryPool(96 << 20);

/**
 * Each huge-page view handed out, by its buffer: the view starts at the buffer's first whole
 * huge page, so its byteOffset is rarely 0, and whoever uses `.buffer` must add it.
 */
const views = new WeakMap<ArrayBufferLike, Uint8Array>();

/**
 * Page-aligned shared memory of `bytes` for a window that file:// writes with O_DIRECT: in huge
 * pages where they can be had, so its writes reach the device in requests of up to
 * `max_sectors_kb` (4 KiB pages cap one at `max_segments` pages: 1 MiB on a virtio disk). Such
 * memory starts past its buffer's byte 0: index the buffer from `byteOffset`, never from 0.
 * Without huge pages, the pool's page-aligned memory (byteOffset 0). Contents are arbitrary.
 */
export function takeWindowMemory(bytes: number, hugePages: boolean): Uint8Array {
  if (!hugePages || !adviseHugePages) return takeReusableMemory(bytes, true);
  const kept = pool.take(bytes);
  if (kept) return kept.subarray(0, bytes);
  const size = Math.ceil(bytes / GRAIN) * GRAIN;
  const huge = Math.floor(size / HUGE_PAGE) * HUGE_PAGE;
  if (huge === 0) return takeReusableMemory(bytes, true);
  // A huge page's worth more than the view, untouched, so its huge pages fit wherever the buffer
  // starts; advised are the huge pages alone, so a window's last partial page (under a MiB of
  // 4 KiB pages past them) does not cost a 2 MiB page of its own.
  const whole = pageAlignedSharedBytes(size + HUGE_PAGE);
  const at = adviseHugePages(whole.subarray(0, huge + HUGE_PAGE - 1));
  if (at < 0) return takeReusableMemory(bytes, true);
  const view = whole.subarray(at, at + size);
  views.set(view.buffer, view);
  return view.subarray(0, bytes);
}

/** Gives memory from `takeWindowMemory` back, once nothing reads or writes it any more. */
export function giveBackWindowMemory(memory: Uint8Array): void {
  const view = views.get(memory.buffer);
  if (!view) {
    giveBackReusableMemory(memory);
    return;
  }
  pool.keep(view);
}
