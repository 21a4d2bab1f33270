import { describe, expect, it } from "vitest";
import { loadXxh128 } from "./xxh128.js";
import { createXXHash128 } from "hash-wasm";
import { portableXxh128 } from "./xxh128-portable.js";

/** Deterministic bytes: no two lengths share a prefix pattern that could hide an off-by-one. */
function bytesOf(length: number, seed = 1): Uint8Array {
  const out = new Uint8Array(length);
  let x = seed * 2654435761;
  for (let i = 0; i < length; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

/** Every size class of XXH3-128 (≤16, ≤128, ≤240, one stripe block, many) and block edges. */
const LENGTHS = [
  0,
  1,
  3,
  4,
  8,
  9,
  16,
  17,
  100,
  128,
  129,
  200,
  240,
  241,
  1000,
  1023,
  1024,
  1025,
  4096,
  65539,
  (1 << 20) + 17,
];

describe("XXH3-128", () => {
  it("gives xxhsum -H2's digits", async () => {
    const xxh = await loadXxh128();
    expect(xxh.hash(new Uint8Array(0))).toBe("99aa06d3014798d86001c324468d497f");
    expect(xxh.hash(new TextEncoder().encode("hello"))).toBe("b5e9c1ad071b3e7fc779cfaa5e523818");
  });

  it("native and portable give the same digests, one-shot and streamed in any pieces", async () => {
    const native = await loadXxh128();
    const portable = await portableXxh128(createXXHash128);
    // On this machine the native module must load: a silent fallback would hide a packaging fault.
    expect(native.implementation).toBe("native");
    for (const length of LENGTHS) {
      const bytes = bytesOf(length, length);
      const want = portable.hash(bytes);
      expect(native.hash(bytes), `length ${length}`).toBe(want);
      const into = new Uint8Array(20);
      native.hashInto(bytes, into, 3);
      expect(Buffer.from(into.subarray(3, 19)).toString("hex")).toBe(want);
      portable.hashInto(bytes, into, 1);
      expect(Buffer.from(into.subarray(1, 17)).toString("hex")).toBe(want);
      for (const xxh of [native, portable]) {
        const stream = await xxh.stream();
        for (let at = 0; at < length; at += 1000) stream.update(bytes.subarray(at, Math.min(at + 1000, length)));
        expect(stream.digest(), `${xxh.implementation} streamed, length ${length}`).toBe(want);
        stream.update(bytes);
        expect(stream.digest(), "digest resets the stream").toBe(want);
      }
    }
  });
});
