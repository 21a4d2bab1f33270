import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeChecksums, encodeChecksums } from "./checksum-blocks.js";

const ALPHABET = new Set(new TextEncoder().encode("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"));
const uint32s = fc.array(fc.integer({ min: 0, max: 0xffffffff }), { maxLength: 70 });

describe("decodeChecksums", () => {
  it("gives back what encodeChecksums wrote, from anywhere in a larger text", () => {
    fc.assert(
      fc.property(uint32s, fc.nat(20), (sums, margin) => {
        const text = new TextEncoder().encode(encodeChecksums(sums));
        const padded = new Uint8Array(text.byteLength + 2 * margin).fill(0x22);
        padded.set(text, margin);
        expect(decodeChecksums(padded, sums.length, margin, margin + text.byteLength)).toEqual(sums);
      }),
      { numRuns: 1000, seed: 34 },
    );
  });

  it("refuses any byte outside the base64 alphabet, wherever it stands, and a wrong length", () => {
    fc.assert(
      fc.property(uint32s, fc.nat(), fc.integer({ min: 0, max: 255 }), (sums, at, byte) => {
        const text = new TextEncoder().encode(encodeChecksums(sums));
        fc.pre(text.byteLength > 0 && !ALPHABET.has(byte));
        const i = at % text.byteLength;
        fc.pre(!(byte === 0x3d && text[i] === 0x3d));
        const damaged = text.slice();
        damaged[i] = byte;
        expect(decodeChecksums(damaged, sums.length)).toBeUndefined();
        expect(decodeChecksums(text, sums.length + 1)).toBeUndefined();
      }),
      { numRuns: 2000, seed: 34 },
    );
  });
});
