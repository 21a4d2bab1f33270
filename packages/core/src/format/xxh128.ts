import { type Xxh128, portableXxh128 } from "./xxh128-portable.js";

export type { Xxh128, Xxh128Stream } from "./xxh128-portable.js";

interface NativeXxh128 {
  new (seed: Uint8Array): { update(bytes: Uint8Array): void; digest(): Buffer; reset(): void };
  hash(bytes: Uint8Array): Buffer;
}

/** Seed 0, as xxhash-addon takes it (8 bytes: a 64-bit seed). */
const SEED = new Uint8Array(8);

let loaded: Promise<Xxh128> | undefined;

/**
 * XXH3-128 for this process: xxhash-addon's native code (AVX2 where the CPU has it, about 4× the
 * WebAssembly's speed) when its prebuilt binary loads, else the portable WebAssembly one. Both
 * give the same digits (tested); the browser build maps this file to the portable one.
 */
export function loadXxh128(): Promise<Xxh128> {
  return (loaded ??= loadNative().then(
    // Imported when needed: the module carries every hash-wasm binary (270 KB), only this one is used.
    async (native) => native ?? portableXxh128((await import("hash-wasm")).createXXHash128),
  ));
}

async function loadNative(): Promise<Xxh128 | undefined> {
  let XXHash128: NativeXxh128;
  try {
    const module = (await import("xxhash-addon")) as unknown as { default: { XXHash128: NativeXxh128 } };
    XXHash128 = module.default.XXHash128;
    XXHash128.hash(SEED);
  } catch {
    return undefined;
  }
  return {
    implementation: "native",
    hash: (bytes) => XXHash128.hash(bytes).toString("hex"),
    hashInto: (bytes, out, at) => out.set(XXHash128.hash(bytes), at),
    stream() {
      const state = new XXHash128(SEED);
      return Promise.resolve({
        update: (bytes: Uint8Array) => state.update(bytes),
        digest() {
          const hex = state.digest().toString("hex");
          state.reset();
          return hex;
        },
      });
    },
  };
}
