import { describe, expect, it } from "vitest";
import { digestTable, rememberDigests } from "./chunk-digests.js";
import { joinBytes } from "./item-groups.js";

/** `count` digests of 16 bytes, digest k filled with `first + k`. */
const digestsFrom = (first: number, count: number): Uint8Array => {
  const bytes = new Uint8Array(16 * count);
  for (let k = 0; k < count; k++) bytes.fill(first + k, 16 * k, 16 * k + 16);
  return bytes;
};
const firstBytes = (table: Uint8Array | undefined): number[] => [...(table ?? [])].filter((_, i) => i % 16 === 0);

describe("chunk digests", () => {
  it("gives the chunks' digests in the order asked, across files and runs, skipping holes", () => {
    // Two files' chunks: 10..13, then 20..21.
    const chunks = new Array(6).fill(null);
    rememberDigests(chunks, joinBytes([digestsFrom(10, 4), digestsFrom(20, 2)]));
    const order = [5, undefined, 0, 1, 2, undefined, 4, 3];
    expect(firstBytes(digestTable(chunks, order))).toEqual([21, 10, 11, 12, 20, 13]);
    expect(new Set(digestTable(chunks, order)!.subarray(16, 32))).toEqual(new Set([10]));
  });

  it("gives none unless every chunk is asked for once, and the chunks are the ones remembered", () => {
    const chunks = [{}, {}];
    rememberDigests(chunks, digestsFrom(1, 2));
    expect(firstBytes(digestTable(chunks, [1, 0]))).toEqual([2, 1]);
    expect(digestTable(chunks, [1])).toBeUndefined();
    expect(digestTable(chunks, [0, 1, 1])).toBeUndefined();
    expect(digestTable([...chunks], [0, 1])).toBeUndefined();
    // Digests of another count than the chunks' are not kept.
    const other = [{}, {}, {}];
    rememberDigests(other, digestsFrom(1, 2));
    expect(digestTable(other, [0, 1, 2])).toBeUndefined();
  });
});
