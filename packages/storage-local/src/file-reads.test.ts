// Found by attack30: a 3 GiB metadata.json (a sparse file, nothing on disk) read whole aborted the
// process: node's fs asserts on a read length past 2³¹−1. Every call asks for at most 1 GiB.
import { describe, expect, it } from "vitest";
import { readRange } from "./file-reads.js";
import type { FileHandleLike } from "./fs-like.js";

describe("readRange", () => {
  it("reads a file larger than 2³¹−1 bytes in calls node's fs accepts", async () => {
    const size = 3 * 2 ** 30;
    const lengths: number[] = [];
    // Nothing is written into the target: its pages stay untouched, so the test costs no memory.
    const handle = {
      read: async (_buffer: Uint8Array, _offset: number, length: number) => {
        lengths.push(length);
        return { bytesRead: length };
      },
    } as unknown as FileHandleLike;
    const bytes = await readRange(handle, size, undefined, undefined);
    expect(bytes.byteLength).toBe(size);
    expect(Math.max(...lengths)).toBeLessThanOrEqual(2 ** 31 - 1);
    expect(lengths.reduce((a, b) => a + b, 0)).toBe(size);
  });
});
