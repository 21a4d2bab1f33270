import { describe, expect, it } from "vitest";
import type { CheckpointError } from "../errors.js";
import { blockChecksums } from "../format/crc32c.js";
import type { ChunkMetadata } from "../format/metadata.js";
import { checkBlocks } from "./check-bytes.js";

function random(seed: number): () => number {
  let x = seed >>> 0;
  return () => (x = (x * 1103515245 + 12345) >>> 0) / 2 ** 32;
}

function chunkOf(bytes: Uint8Array, blockSize: number): ChunkMetadata {
  const crc = blockChecksums(bytes, blockSize);
  return {
    offsets: [0],
    sizes: [bytes.byteLength],
    file: "data-0.safetensors",
    tensorName: "t",
    byteOffset: 64,
    byteLength: bytes.byteLength,
    blockSize,
    crc32c: crc,
  };
}

function failure(run: () => void): CheckpointError | undefined {
  try {
    run();
  } catch (error) {
    return error as CheckpointError;
  }
  return undefined;
}

describe("checkBlocks", () => {
  // Small blocks are checked as one run against their sums combined: the run must pass exactly
  // when every block does, and a failure must still name the first damaged block.
  it("passes intact reads and names the first damaged block, over seeded reads of small and large blocks", () => {
    for (let seed = 1; seed <= 120; seed++) {
      const r = random(seed);
      const blockSize = 2 ** (10 + Math.floor(r() * 8)); // 1 KiB .. 128 KiB
      const blocks = 1 + Math.floor(r() * 40);
      const bytes = new Uint8Array(blocks * blockSize - Math.floor(r() * (blockSize - 1)));
      for (let i = 0; i < bytes.length; i++) bytes[i] = r() * 256;
      const chunk = chunkOf(bytes, blockSize);
      const firstBlock = Math.floor(r() * blocks);
      const data = bytes.slice(firstBlock * blockSize);
      expect(failure(() => checkBlocks(chunk, "t", firstBlock * blockSize, data))).toBeUndefined();

      const damaged = new Set<number>();
      for (let n = 1 + Math.floor(r() * 3); n > 0; n--) {
        const at = Math.floor(r() * data.byteLength);
        data[at] = data[at]! ^ (1 + Math.floor(r() * 255));
        damaged.add(firstBlock + Math.floor(at / blockSize));
      }
      const error = failure(() => checkBlocks(chunk, "t", firstBlock * blockSize, data));
      expect(error?.code).toBe("corrupt");
      expect(error?.message).toContain(`(block ${Math.min(...damaged)},`);
    }
  });

  it("refuses a read whose stored sum of one block is wrong, naming that block", () => {
    const bytes = new Uint8Array(1024 * 16).map((_, i) => i * 7);
    const chunk = chunkOf(bytes, 1024);
    const wrong = { ...chunk, crc32c: chunk.crc32c.map((sum, i) => (i === 11 ? (sum ^ 4) >>> 0 : sum)) };
    expect(failure(() => checkBlocks(wrong, "t", 0, bytes))?.message).toContain("(block 11,");
  });

  it("refuses a read past the blocks the chunk has sums for", () => {
    const bytes = new Uint8Array(1024 * 4).map((_, i) => i);
    const chunk = chunkOf(bytes.subarray(0, 1024 * 3), 1024);
    expect(failure(() => checkBlocks(chunk, "t", 0, bytes))?.code).toBe("corrupt");
  });
});
