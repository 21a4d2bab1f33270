// CRC32C's fastest code on this platform, Node's side: @cairn/crc32c-native (three `crc32`
// instruction streams, compiled at install) where it built, else @node-rs/crc32's one stream.
// Imported as "#platform/format/crc32c-kernel.js"; the browser build gets crc32c-kernel.browser.ts.
import { createRequire } from "node:module";

/** Which CRC32C this process runs: our addon, @node-rs/crc32, or (in a browser) the portable one. */
export type Crc32cImplementation = "crc32c-native" | "node-rs" | "portable";

/** What a CRC32C module exports, @cairn/crc32c-native and @node-rs/crc32 alike. */
interface Crc32cModule {
  crc32c(bytes: Uint8Array, initial?: number): number;
  /** @cairn/crc32c-native's alone. */
  readBlockChecksums?: ReadBlockChecksums;
}

/**
 * Reads `into.byteLength` bytes of the open file `fd` from `position` (fewer at its end) on
 * libuv's threads, with the CRC32C of each `blockSize` bytes read into `sums`; resolves the bytes
 * read. With `dropCache`, the pages read leave the page cache as soon as they are hashed.
 */
export type ReadBlockChecksums = (
  fd: number,
  into: Uint8Array,
  position: number,
  blockSize: number,
  sums: Uint32Array,
  dropCache?: boolean,
) => Promise<number>;

export interface Crc32cKernelChoice {
  readonly implementation: Crc32cImplementation;
  readonly kernel: (bytes: Uint8Array, initial: number) => number;
  /** A module a worker thread `require`s for the same `crc32c(bytes, initial)`. */
  readonly workerModule: string;
  /** Where the addon loaded: a file read with its blocks' CRC32Cs computed on the reading thread. */
  readonly readBlockChecksums?: ReadBlockChecksums;
}

/**
 * Whether `kernel` gives the known CRC32Cs (the JavaScript one's, checked in crc32c-kernel-trust.test.ts)
 * of bytes that take every path of a three-stream kernel (an unaligned head, 3 × 8 KiB and 3 × 256 B
 * blocks, words, a tail), from several initial values: a stale, foreign or miscompiled addon must
 * not checksum every block wrongly. The bytes repeat every 251 (a prime), so no two streams see the
 * same block; made with `copyWithin` and compared with constants, the check costs no cold JavaScript loop.
 */
function kernelAgrees(kernel: (bytes: Uint8Array, initial: number) => number): boolean {
  const bytes = new Uint8Array(3 * 8192 + 3 * 256 + 8 + 3 + 1);
  for (let i = 0, x = 1; i < 251; i++) bytes[i] = (x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 24;
  for (let n = 251; n < bytes.length; n *= 2) bytes.copyWithin(n, 0, n);
  const view = bytes.subarray(1);
  return (
    kernel(view, 0) === 0x3b479f7c && kernel(view, 0xffffffff) === 0xf006b5fe && kernel(view, 0x1234567) === 0x8040ab97
  );
}

/**
 * @cairn/crc32c-native when `require` loads it (not installed, not built, or a CPU without CRC32C
 * instructions: it throws) and it agrees with the JavaScript CRC32C, else @node-rs/crc32. Both take
 * and return a finished CRC32C.
 */
export function chooseCrc32cKernel(require: NodeJS.Require): Crc32cKernelChoice {
  try {
    const workerModule = require.resolve("@cairn/crc32c-native");
    const { crc32c, readBlockChecksums } = require(workerModule) as Crc32cModule;
    if (!kernelAgrees(crc32c)) throw new Error("@cairn/crc32c-native disagrees with the JavaScript CRC32C");
    return { implementation: "crc32c-native", kernel: crc32c, workerModule, readBlockChecksums };
  } catch {
    const workerModule = require.resolve("@node-rs/crc32");
    const { crc32c } = require(workerModule) as Crc32cModule;
    return { implementation: "node-rs", kernel: (bytes, initial) => crc32c(bytes, initial) >>> 0, workerModule };
  }
}

const chosen = chooseCrc32cKernel(createRequire(import.meta.url));

export const CRC32C_IMPLEMENTATION: Crc32cImplementation = chosen.implementation;

/** The module the checksum workers load: the same CRC32C as this thread's. */
export const CRC32C_WORKER_MODULE: string = chosen.workerModule;

export const crc32cKernel: (bytes: Uint8Array, initial: number) => number = chosen.kernel;

/** Where @cairn/crc32c-native loaded: `ReadOptions.blockChecksums` for file reads, hashed on libuv's threads. */
export const readBlockChecksums: ReadBlockChecksums | undefined = chosen.readBlockChecksums;
