import { describe, expect, it } from "vitest";
import { adviseHugePages } from "../format/crc32c.js";
import { giveBackWindowMemory, takeWindowMemory } from "./window-memory.js";

const MiB = 1 << 20;

describe("takeWindowMemory", () => {
  it("gives page-aligned memory from its buffer's 0 without huge pages", () => {
    const memory = takeWindowMemory(3 * MiB + 5, false);
    expect(memory.byteLength).toBe(3 * MiB + 5);
    expect(memory.byteOffset).toBe(0);
    giveBackWindowMemory(memory);
  });

  it.runIf(adviseHugePages !== undefined && process.platform === "linux")(
    "keeps a huge-page window's offset in its buffer when it is given back and taken again",
    () => {
      const memory = takeWindowMemory(8 * MiB + 4096, true);
      expect(memory.byteLength).toBe(8 * MiB + 4096);
      // The view starts at the buffer's first whole 2 MiB page, a page boundary within 2 MiB of its 0.
      expect(memory.byteOffset % 4096).toBe(0);
      expect(memory.byteOffset).toBeLessThan(2 * MiB);
      memory.fill(7, 0, 4096);
      giveBackWindowMemory(memory.subarray(0, 100));
      const again = takeWindowMemory(8 * MiB, true);
      expect(again.buffer).toBe(memory.buffer);
      expect(again.byteOffset).toBe(memory.byteOffset);
      expect(again[0]).toBe(7);
      giveBackWindowMemory(again);
    },
  );
});
