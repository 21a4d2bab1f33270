// CRC32C in a browser: the portable code (WebAssembly once compiled, JavaScript until then).
import { loadPortableCrc32c, portableCrc32c } from "./crc32c-portable.js";

export type Crc32cImplementation = "crc32c-native" | "node-rs" | "portable";

export const CRC32C_IMPLEMENTATION: Crc32cImplementation = "portable";

/** No worker thread loads a CRC32C module in a browser. */
export const CRC32C_WORKER_MODULE: undefined = undefined;

export const CRC32C_WORKER_REGIONS = false;

void loadPortableCrc32c();

export const crc32cKernel: (bytes: Uint8Array, initial: number) => number = portableCrc32c;

/** No file descriptors in a browser. */
export const readBlockChecksums: undefined = undefined;

/** No memory advice in a browser. */
export const adviseHugePages: undefined = undefined;

/** No file descriptors in a browser. */
export const readThrough: undefined = undefined;
