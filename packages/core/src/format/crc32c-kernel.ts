// CRC32C's fastest code on this platform, Node's side: @cairn/crc32c-native (three `crc32`
// instruction streams, compiled at install) where it built, else @node-rs/crc32's one stream.
// Imported as "#platform/format/crc32c-kernel.js"; the browser build gets crc32c-kernel.browser.ts.
import { createRequire } from "node:module";

/** Which CRC32C this process runs: our addon, @node-rs/crc32, or (in a browser) the portable one. */
export type Crc32cImplementation = "crc32c-native" | "node-rs" | "portable";

/** What a CRC32C module exports, @cairn/crc32c-native and @node-rs/crc32 alike. */
interface Crc32cModule {
  crc32c(bytes: Uint8Array, initial?: number): number;
}

export interface Crc32cKernelChoice {
  readonly implementation: Crc32cImplementation;
  readonly kernel: (bytes: Uint8Array, initial: number) => number;
  /** A module a worker thread `require`s for the same `crc32c(bytes, initial)`. */
  readonly workerModule: string;
}

/**
 * @cairn/crc32c-native when `require` loads it (not installed, not built, or a CPU without CRC32C
 * instructions: it throws), else @node-rs/crc32. Both take and return a finished CRC32C.
 */
export function chooseCrc32cKernel(require: NodeJS.Require): Crc32cKernelChoice {
  try {
    const workerModule = require.resolve("@cairn/crc32c-native");
    const { crc32c } = require(workerModule) as Crc32cModule;
    return { implementation: "crc32c-native", kernel: crc32c, workerModule };
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
