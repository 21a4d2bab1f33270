import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeChecksums, encodeChecksums, lazyChecksums } from "./checksum-blocks.js";

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

describe("lazyChecksums", () => {
  it("decodes any run of sums as the whole decodes them, and refuses a forged character only in a run that holds it", () => {
    fc.assert(
      fc.property(uint32s, fc.nat(80), fc.nat(80), fc.nat(200), (sums, a, b, forgedAt) => {
        const text = new TextEncoder().encode(encodeChecksums(sums));
        const [first, end] = [Math.min(a, b), Math.max(a, b)];
        const { sums: part, offset } = lazyChecksums(text, sums.length, () => new Error("refused")).range(first, end);
        for (let i = first; i < Math.min(end, sums.length); i++) expect(part[i - offset]).toBe(sums[i]);
        if (text.byteLength === 0) return;
        // "-" is outside the alphabet: a run of sums is refused only if its characters hold it.
        const at = forgedAt % text.byteLength;
        const forged = text.slice();
        forged[at] = 0x2d;
        const lazy = lazyChecksums(forged, sums.length, () => new Error("refused"));
        expect(() => lazy.all()).toThrow("refused");
        const group = Math.floor(at / 16);
        const [from, to] = [Math.floor(first / 3), Math.ceil(Math.min(end, sums.length) / 3)];
        const holds = group >= from && group < to;
        if (holds) expect(() => lazy.range(first, end)).toThrow("refused");
        else {
          const read = lazy.range(first, end);
          for (let i = first; i < Math.min(end, sums.length); i++) expect(read.sums[i - read.offset]).toBe(sums[i]);
        }
      }),
      { numRuns: 2000, seed: 348 },
    );
  });
});
