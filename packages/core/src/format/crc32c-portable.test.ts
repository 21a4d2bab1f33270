import { crc32c as nativeCrc32c } from "@node-rs/crc32";
import { describe, expect, it } from "vitest";
import { CRC32C_JS_SOURCE, CRC32C_TABLES_SOURCE } from "./crc32c-js.js";
import { crc32cJs, loadPortableCrc32c, portableCrc32c, portableCrc32cImplementation } from "./crc32c-portable.js";

/** The same vectors for every implementation: lengths around the 8-byte stride and WebAssembly's threshold, odd offsets. */
function vectors(): Uint8Array[] {
  const out: Uint8Array[] = [new Uint8Array(0), new TextEncoder().encode("123456789")];
  let x = 12345;
  const random = (): number => (x = (x * 1103515245 + 12345) >>> 0) >>> 24;
  for (const length of [1, 7, 8, 9, 63, 255, 256, 257, 1000, 4096, 65_537, 1 << 20]) {
    const bytes = new Uint8Array(length + 3);
    for (let i = 0; i < bytes.length; i++) bytes[i] = random();
    out.push(bytes.subarray(3));
  }
  return out;
}

describe("the portable CRC32C", () => {
  it("gives the check value of the CRC-32C standard", () => {
    expect(crc32cJs(new TextEncoder().encode("123456789"))).toBe(0xe3069283);
  });

  it("matches the native one on the same vectors, in JavaScript and in WebAssembly", async () => {
    const expected = vectors().map((v) => nativeCrc32c(v as Buffer) >>> 0);
    expect(vectors().map((v) => crc32cJs(v))).toEqual(expected);
    await loadPortableCrc32c();
    expect(portableCrc32cImplementation()).toBe("wasm");
    expect(vectors().map((v) => portableCrc32c(v))).toEqual(expected);
  });

  it("takes inputs of any length at any offset, even those ending before a 4-byte boundary", () => {
    const memory = new Uint8Array(64).map((_, i) => (i * 37) ^ 0x5a);
    for (let offset = 0; offset < 8; offset++)
      for (let length = 0; length <= 40; length++) {
        const bytes = memory.subarray(offset, offset + length);
        expect(crc32cJs(bytes), `${length} bytes at ${offset}`).toBe(nativeCrc32c(bytes as Buffer) >>> 0);
      }
  });

  it("continues from an initial value as the native one does", async () => {
    await loadPortableCrc32c();
    const [a, b] = [vectors()[8]!, vectors()[12]!];
    const native = nativeCrc32c(b as Buffer, nativeCrc32c(a as Buffer));
    expect(portableCrc32c(b, portableCrc32c(a))).toBe(native >>> 0);
    expect(crc32cJs(b, crc32cJs(a))).toBe(native >>> 0);
  });
});

describe("the portable CRC32C's source text", () => {
  it("makes the same function in another realm, where nothing of this module exists", () => {
    const made = new Function(
      `"use strict"; return (${CRC32C_JS_SOURCE})((${CRC32C_TABLES_SOURCE})());`,
    )() as typeof crc32cJs;
    expect(vectors().map((v) => made(v))).toEqual(vectors().map((v) => nativeCrc32c(v as Buffer) >>> 0));
  });
});
