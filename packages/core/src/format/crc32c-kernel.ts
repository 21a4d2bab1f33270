// CRC32C's fastest code on this platform, Node's side: @cairn/crc32c-native (three `crc32`
// instruction streams, compiled at install) where it built, else @node-rs/crc32's one stream.
// Imported as "#platform/format/crc32c-kernel.js"; the browser build gets crc32c-kernel.browser.ts.
import { createRequire } from "node:module";
import type * as Trust from "@cairn/crc32c-native/agrees";

/** Which CRC32C this process runs: our addon, @node-rs/crc32, or (in a browser) the portable one. */
export type Crc32cImplementation = "crc32c-native" | "node-rs" | "portable";

/** What a CRC32C module exports, @cairn/crc32c-native and @node-rs/crc32 alike. */
interface Crc32cModule {
  crc32c(bytes: Uint8Array, initial?: number): number;
  /** @cairn/crc32c-native's alone. */
  readBlockChecksums?: ReadBlockChecksums;
  /** @cairn/crc32c-native's alone (since it hashes XXH3-128 too). */
  regionChecksums?: Trust.RegionChecksums;
  /** @cairn/crc32c-native's alone (since it is the one native module loaded anyway). */
  adviseHugePages?: AdviseHugePages;
  /** @cairn/crc32c-native's alone. */
  readThrough?: ReadThrough;
}

/**
 * Reads `into.byteLength` bytes of the open file `fd` from `position` (fewer at its end) on
 * libuv's threads, with the CRC32C of each `blockSize` bytes read into `sums`; resolves the bytes read.
 */
export type ReadBlockChecksums = (
  fd: number,
  into: Uint8Array,
  position: number,
  blockSize: number,
  sums: Uint32Array,
) => Promise<number>;

/**
 * Asks Linux to back the whole 2 MiB pages inside `bytes` (untouched memory) with transparent
 * huge pages; returns the offset in `bytes` of the first, or -1 where there is none or it cannot.
 */
export type AdviseHugePages = (bytes: Uint8Array) => number;

/**
 * Reads `buffer.byteLength` bytes of the open file `fd` from `position` (fewer at its end) into
 * `buffer` on libuv's threads, then copies the bytes read from `buffer[skip]` on into `into`, as
 * many as fit, on the same thread; resolves the bytes read into `buffer`.
 */
export type ReadThrough = (
  fd: number,
  buffer: Uint8Array,
  position: number,
  into: Uint8Array,
  skip: number,
) => Promise<number>;

export interface Crc32cKernelChoice {
  readonly implementation: Crc32cImplementation;
  readonly kernel: (bytes: Uint8Array, initial: number) => number;
  /** A module a worker thread `require`s for the same `crc32c(bytes, initial)`. */
  readonly workerModule: string;
  /** Where the addon loaded: a file read with its blocks' CRC32Cs computed on the reading thread. */
  readonly readBlockChecksums?: ReadBlockChecksums;
  /** Where the addon loaded and has it. */
  readonly adviseHugePages?: AdviseHugePages;
  /** Where the addon loaded and has it. */
  readonly readThrough?: ReadThrough;
  /**
   * Whether `workerModule` also exports a trusted `regionChecksums`: block CRC32Cs and XXH3-128s
   * of many regions in one native call (the checksum workers' path for whole chunks).
   */
  readonly regionChecksums: boolean;
}

/**
 * @cairn/crc32c-native when `require` loads it (not installed, not built, or a CPU without CRC32C
 * instructions: it throws) and it passes the package's trust check (`crc32cAgrees`), else @node-rs/crc32. Both take
 * and return a finished CRC32C.
 */
export function chooseCrc32cKernel(require: NodeJS.Require): Crc32cKernelChoice {
  try {
    const workerModule = require.resolve("@cairn/crc32c-native");
    const { crc32c, readBlockChecksums, regionChecksums, adviseHugePages, readThrough } = require(
      workerModule,
    ) as Crc32cModule;
    // The package's own checks, the ones its build ran: every path of the three-stream kernel, and
    // every length class of XXH3-128 (an addon built before regionChecksums still serves CRC32C).
    const { crc32cAgrees, regionChecksumsAgree } = require("@cairn/crc32c-native/agrees") as typeof Trust;
    if (!crc32cAgrees(crc32c)) throw new Error("@cairn/crc32c-native disagrees with CRC32C");
    const regions = regionChecksums !== undefined && regionChecksumsAgree(crc32c, regionChecksums);
    return {
      implementation: "crc32c-native",
      kernel: crc32c,
      workerModule,
      readBlockChecksums,
      ...(typeof adviseHugePages === "function" ? { adviseHugePages } : {}),
      ...(typeof readThrough === "function" ? { readThrough } : {}),
      regionChecksums: regions,
    };
  } catch {
    const workerModule = require.resolve("@node-rs/crc32");
    const { crc32c } = require(workerModule) as Crc32cModule;
    return {
      implementation: "node-rs",
      kernel: (bytes, initial) => crc32c(bytes, initial) >>> 0,
      workerModule,
      regionChecksums: false,
    };
  }
}

const chosen = chooseCrc32cKernel(createRequire(import.meta.url));

export const CRC32C_IMPLEMENTATION: Crc32cImplementation = chosen.implementation;

/** The module the checksum workers load: the same CRC32C as this thread's. */
export const CRC32C_WORKER_MODULE: string = chosen.workerModule;

/** Whether CRC32C_WORKER_MODULE's `regionChecksums` (CRC32Cs and XXH3-128s of many regions at once) is trusted. */
export const CRC32C_WORKER_REGIONS: boolean = chosen.regionChecksums;

export const crc32cKernel: (bytes: Uint8Array, initial: number) => number = chosen.kernel;

/** Where @cairn/crc32c-native loaded: `ReadOptions.blockChecksums` for file reads, hashed on libuv's threads. */
export const readBlockChecksums: ReadBlockChecksums | undefined = chosen.readBlockChecksums;

/** Where @cairn/crc32c-native loaded: huge pages for the buffers of direct reads (see `AdviseHugePages`). */
export const adviseHugePages: AdviseHugePages | undefined = chosen.adviseHugePages;

/** Where @cairn/crc32c-native loaded: a read through an aligned buffer, copied out on libuv's thread (see `ReadThrough`). */
export const readThrough: ReadThrough | undefined = chosen.readThrough;
