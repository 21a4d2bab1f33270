/**
 * Buffers known to start on a page boundary: staging segments, which are WebAssembly memories
 * (V8 maps those on page boundaries; Node gives no other way to align an ArrayBuffer). JavaScript
 * cannot see an address, so whoever allocates such a buffer says so here, per thread.
 */
const pageAligned = new WeakSet<ArrayBufferLike>();

/**
 * Shared memory of `bytes` bytes that starts on a page boundary (capacity rounded up to 64 KiB):
 * staging segments, and the aligned buffers file:// copies into for O_DIRECT. Needs
 * `pageAlignedAvailable`.
 */
export function pageAlignedSharedBytes(bytes: number): Uint8Array {
  const pages = Math.max(1, Math.ceil(bytes / WASM_PAGE));
  const buffer = new wasmApi!.Memory({ initial: pages, maximum: pages, shared: true }).buffer;
  pageAligned.add(buffer);
  return new Uint8Array(buffer, 0, bytes);
}

export function isPageAligned(buffer: ArrayBufferLike): boolean {
  return pageAligned.has(buffer);
}

const WASM_PAGE = 64 << 10;
/** The most one WebAssembly memory holds (65,536 pages). */
export const MAX_PAGE_ALIGNED_BYTES = 65_536 * WASM_PAGE;

/** The part of the WebAssembly API used here, typed for shared memory (lib.dom types it as plain). */
interface WasmMemoryApi {
  Memory: new (descriptor: { initial: number; maximum: number; shared: boolean }) => {
    readonly buffer: SharedArrayBuffer;
  };
}

const wasmApi = (globalThis as unknown as { WebAssembly?: WasmMemoryApi }).WebAssembly;

/** Whether page-aligned memory can be had: not where WebAssembly is off (node --jitless). */
export const pageAlignedAvailable = typeof wasmApi?.Memory === "function";

/**
 * Whether `buffer` is shared memory. Works where the global SharedArrayBuffer is hidden (a page
 * that is not cross-origin isolated still gets shared WebAssembly memories).
 */
export function isSharedMemory(buffer: ArrayBufferLike): buffer is SharedArrayBuffer {
  return Object.prototype.toString.call(buffer) === "[object SharedArrayBuffer]";
}

/** `size` bytes of shared memory where the platform offers it, else of plain memory (which only this thread uses). */
export function sharedBytes(size: number): Uint8Array {
  return new Uint8Array(typeof SharedArrayBuffer === "function" ? new SharedArrayBuffer(size) : new ArrayBuffer(size));
}
