import { type IHasher, createCRC32 } from "hash-wasm";
import { crc32cJs } from "./crc32c-js.js";

export { crc32cJs } from "./crc32c-js.js";

/** CRC32C's reversed polynomial (Castagnoli), for hash-wasm (written out in `makeCrc32cJs`, which must stand alone). */
const POLYNOMIAL = 0x82f63b78;

let wasm: IHasher | undefined;
let loading: Promise<void> | undefined;

/** Below this many bytes a call into WebAssembly costs more than JavaScript's loop. */
const WASM_FROM = 256;

/**
 * CRC32C without native code: hash-wasm's WebAssembly once it has loaded (`loadPortableCrc32c`),
 * JavaScript before that, for short inputs, and to continue from a non-zero `initial`. Both give
 * the native digits (tested on the same vectors).
 */
export function portableCrc32c(bytes: Uint8Array, initial = 0): number {
  if (wasm === undefined || initial !== 0 || bytes.length < WASM_FROM) return crc32cJs(bytes, initial);
  wasm.init();
  wasm.update(bytes);
  const d = wasm.digest("binary");
  return ((d[0]! << 24) | (d[1]! << 16) | (d[2]! << 8) | d[3]!) >>> 0;
}

/** Starts compiling the WebAssembly (asynchronous, as browsers require); until it is ready `portableCrc32c` uses JavaScript. Never rejects: where WebAssembly is off, JavaScript stays. */
export function loadPortableCrc32c(): Promise<void> {
  return (loading ??= createCRC32(POLYNOMIAL).then(
    (hasher) => {
      wasm = hasher;
    },
    () => undefined,
  ));
}

/** Which code computes `portableCrc32c` now. */
export function portableCrc32cImplementation(): "wasm" | "js" {
  return wasm ? "wasm" : "js";
}
