import { crc32c as nativeCrc32c } from "@node-rs/crc32";
import { describe, expect, it } from "vitest";
import { makeCrc32cTables } from "./crc32c-js.js";
import { CRC32C_WASM_BYTES, CRC32C_WASM_SOURCE, makeCrc32cWasm } from "./crc32c-wasm.js";

/** Lengths around the 16-byte stride and the 1 MiB slice, at odd offsets. */
function vectors(): Uint8Array[] {
  const out: Uint8Array[] = [new Uint8Array(0), new TextEncoder().encode("123456789")];
  let x = 987;
  const random = (): number => (x = (x * 1103515245 + 12345) >>> 0) >>> 24;
  for (const length of [
    1,
    15,
    16,
    17,
    31,
    33,
    255,
    1000,
    4096,
    65_537,
    (1 << 20) - 1,
    1 << 20,
    (1 << 20) + 17,
    3 << 20,
  ]) {
    const bytes = new Uint8Array(length + 5);
    for (let i = 0; i < bytes.length; i++) bytes[i] = random();
    out.push(bytes.subarray(5), bytes.subarray(2, length + 2));
  }
  return out;
}

describe("the WebAssembly CRC32C", () => {
  it("gives the check value of the CRC-32C standard and matches the native one on the same vectors", () => {
    const crc32c = makeCrc32cWasm(CRC32C_WASM_BYTES, makeCrc32cTables())!;
    expect(crc32c(new TextEncoder().encode("123456789"))).toBe(0xe3069283);
    expect(vectors().map((v) => crc32c(v))).toEqual(vectors().map((v) => nativeCrc32c(v as Buffer) >>> 0));
  });

  it("continues from an initial value as the native one does, also made from its source text", () => {
    const fromText = new Function(`return (${CRC32C_WASM_SOURCE})`)() as typeof makeCrc32cWasm;
    const [a, b] = [vectors()[9]!, vectors()[20]!];
    const native = nativeCrc32c(b as Buffer, nativeCrc32c(a as Buffer)) >>> 0;
    for (const crc32c of [
      makeCrc32cWasm(CRC32C_WASM_BYTES, makeCrc32cTables())!,
      fromText(CRC32C_WASM_BYTES, makeCrc32cTables())!,
    ])
      expect(crc32c(b, crc32c(a))).toBe(native);
  });
});
