import { type IHasher, createCRC32 } from "hash-wasm";

/** CRC32C's reversed polynomial (Castagnoli). */
const POLYNOMIAL = 0x82f63b78;

/** Slicing-by-8 tables: table k maps a byte to its CRC shifted through k more zero bytes. */
const TABLES = (() => {
  const t = new Int32Array(8 * 256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLYNOMIAL : c >>> 1;
    t[n] = c;
  }
  for (let n = 0; n < 256; n++) {
    let c = t[n]!;
    for (let k = 1; k < 8; k++) {
      c = t[c & 0xff]! ^ (c >>> 8);
      t[k * 256 + n] = c;
    }
  }
  return t;
})();

/** CRC32C in plain JavaScript (slicing by 8), continuing from `initial`: runs anywhere, at about a third of WebAssembly's speed. */
export function crc32cJs(bytes: Uint8Array, initial = 0): number {
  const t = TABLES;
  let c = ~initial;
  let i = 0;
  const whole = bytes.length - (bytes.length & 7);
  for (; i < whole; i += 8) {
    c ^= bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24);
    c =
      t[1792 + (c & 0xff)]! ^
      t[1536 + ((c >>> 8) & 0xff)]! ^
      t[1280 + ((c >>> 16) & 0xff)]! ^
      t[1024 + (c >>> 24)]! ^
      t[768 + bytes[i + 4]!]! ^
      t[512 + bytes[i + 5]!]! ^
      t[256 + bytes[i + 6]!]! ^
      t[bytes[i + 7]!]!;
  }
  for (; i < bytes.length; i++) c = t[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8);
  return ~c >>> 0;
}

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
