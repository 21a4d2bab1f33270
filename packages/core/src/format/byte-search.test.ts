import { describe, expect, it } from "vitest";
import { seededRandom } from "../testing/seeded-random.js";
import { indexOfByte } from "./byte-search.js";
import { indexOfByte as indexOfByteInBrowser } from "./byte-search.browser.js";

describe("indexOfByte", () => {
  it("finds the first byte in [from, to) alike in Node and in the browser build (seeded)", () => {
    const random = seededRandom(347);
    for (let round = 0; round < 2000; round++) {
      const bytes = Uint8Array.from({ length: Math.floor(random() * 300) }, () => Math.floor(random() * 4) + 0x20);
      // A view into a bigger buffer: offsets are the view's own.
      const view = new Uint8Array(bytes.byteLength + 16).subarray(8, 8 + bytes.byteLength);
      view.set(bytes);
      const byte = 0x20 + Math.floor(random() * 5);
      const from = Math.floor(random() * (bytes.byteLength + 2));
      const to = Math.min(bytes.byteLength, Math.floor(random() * (bytes.byteLength + 2)));
      let expected = from;
      while (expected < to && bytes[expected] !== byte) expected++;
      if (expected >= to) expected = -1;
      expect(indexOfByte(view, byte, from, to)).toBe(expected);
      expect(indexOfByteInBrowser(view, byte, from, to)).toBe(expected);
    }
  });
});
