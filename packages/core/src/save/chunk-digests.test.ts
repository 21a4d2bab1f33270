import { describe, expect, it } from "vitest";
import { appendDigests, digestTable, emptyDigests, rememberDigests } from "./chunk-digests.js";

/** `count` digests of 16 bytes, digest k filled with `first + k`. */
const batch = (first: number, count: number): Uint8Array => {
  const bytes = new Uint8Array(16 * count);
  for (let k = 0; k < count; k++) bytes.fill(first + k, 16 * k, 16 * k + 16);
  return bytes;
};

describe("chunk digests", () => {
  it("gives the digests of the chunks in the order asked, across batches and runs", () => {
    // Chunks 0..2 from one batch, 3..4 from another (its digests 1 and 0), chunk 5 from the first again.
    const a = batch(10, 4);
    const b = batch(20, 2);
    const digests = emptyDigests(0);
    appendDigests(digests, { tables: [a, a, a], at: [0, 1, 2] }, 3);
    appendDigests(digests, { tables: [b, b, a], at: [1, 0, 3] }, 3);
    const chunks = new Array(6).fill(null);
    rememberDigests(chunks, digests);
    const table = digestTable(chunks, [5, 0, 1, 2, 4, 3, 1]);
    expect([...table!].filter((_, i) => i % 16 === 0)).toEqual([13, 10, 11, 12, 20, 21, 11]);
    expect(new Set(table!.subarray(16, 32))).toEqual(new Set([10]));
  });

  it("gives none when a chunk was not hashed here, or the chunks are not the ones remembered", () => {
    const digests = emptyDigests(0);
    appendDigests(digests, undefined, 1);
    appendDigests(digests, { tables: [batch(1, 1)], at: [0] }, 1);
    const chunks = [{}, {}];
    rememberDigests(chunks, digests);
    expect(digestTable(chunks, [1])).toBeDefined();
    expect(digestTable(chunks, [1, 0])).toBeUndefined();
    expect(digestTable([...chunks], [1])).toBeUndefined();
  });
});
