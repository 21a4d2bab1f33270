import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { blockChecksums } from "../format/crc32c.js";
import { loadXxh128 } from "../format/xxh128.js";
import { blockChecksumsAsync, regionChecksumsAsync } from "./checksum-workers.js";

describe("checksum workers", () => {
  it("the checksum workers hash each part and region in the pass that CRCs its blocks", async () => {
    const xxh = await loadXxh128();
    const sizes = [0, 5, 1024, 2048, 2049, 3000, 65539, (1 << 20) + 17];
    const memory = new SharedArrayBuffer(sizes.reduce((n, s) => n + s, 0));
    const parts: Uint8Array[] = [];
    let at = 0;
    for (const size of sizes) {
      const part = new Uint8Array(memory, at, size);
      part.set(randomBytes(size));
      parts.push(part);
      at += size;
    }
    const blocks = sizes.map(() => 1024);
    const shared = await blockChecksumsAsync(parts, blocks);
    const unshared = await blockChecksumsAsync(
      parts.map((p) => p.slice()),
      blocks,
    );
    for (const [i, part] of parts.entries()) {
      expect(shared.sums[i]).toEqual(blockChecksums(part, 1024));
      expect(shared.hashes![i]).toBe(xxh.hash(part));
      expect(unshared.sums[i]).toEqual(blockChecksums(part, 1024));
      expect(unshared.hashes![i]).toBe(xxh.hash(part));
    }
    expect((await blockChecksumsAsync(parts, blocks, false)).hashes).toBeUndefined();
    const starts = Float64Array.from(parts, (p) => p.byteOffset);
    const regions = await regionChecksumsAsync(memory, starts, Float64Array.from(sizes), Float64Array.from(blocks));
    expect(Array.from(regions.sums)).toEqual(parts.flatMap((p) => blockChecksums(p, 1024)));
    for (const [i, part] of parts.entries())
      expect(Buffer.from(regions.hashes!.subarray(16 * i, 16 * i + 16)).toString("hex")).toBe(xxh.hash(part));
  });
});
