// XXH3-128 in a browser: the portable WebAssembly (xxh128.ts adds the native addon in Node).
import { createXXHash128 } from "hash-wasm";
import { type Xxh128, portableXxh128 } from "./xxh128-portable.js";

export type { Xxh128, Xxh128Stream } from "./xxh128-portable.js";

let loaded: Promise<Xxh128> | undefined;

export function loadXxh128(): Promise<Xxh128> {
  return (loaded ??= portableXxh128(createXXHash128));
}
