import { describe, expect, it } from "vitest";
import { blockChecksums } from "../format/crc32c.js";
import { loadXxh128 } from "#platform/format/xxh128.js";
import { seededRandom } from "../testing/seeded-random.js";
import { checksumsHere } from "./checksums-here.js";

describe("checksumsHere", () => {
  it("gives each block's CRC32C and the whole chunk's XXH3-128, however blocks and spans fall", async () => {
    const xxh = await loadXxh128();
    const random = seededRandom(34);
    for (const [length, blockSize] of [
      [3 * (1 << 20) + 5, 1024],
      [(256 << 10) * 2, 1024],
      [1 << 20, 3000],
      [700_001, 1 << 20],
      [5, 1024],
    ] as const) {
      const bytes = new Uint8Array(length);
      for (let i = 0; i < length; i++) bytes[i] = random() * 256;
      const { sums, hashes } = await checksumsHere([bytes], [blockSize], true, 1 << 20);
      expect(sums[0], `${length} in ${blockSize}`).toEqual(blockChecksums(bytes, blockSize));
      expect(hashes![0], `${length} in ${blockSize}`).toBe(xxh.hash(bytes));
    }
  });
});
