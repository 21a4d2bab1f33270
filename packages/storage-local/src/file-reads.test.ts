// Found by attack30: a 3 GiB metadata.json (a sparse file, nothing on disk) read whole aborted the
// process: node's fs asserts on a read length past 2³¹−1. Every call asks for at most 1 GiB.
import { describe, expect, it } from "vitest";
import { readRange, readScattered } from "./file-reads.js";
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

describe("readScattered", () => {
  it("fills thousands of parts through readv calls that stop at 1,024 parts and mid-part", async () => {
    const file = Uint8Array.from({ length: 40_100 }, (_, i) => (i * 7) % 251);
    const parts = Array.from({ length: 10_000 }, (_, i) => new Uint8Array(i % 5 === 4 ? 0 : 5));
    const counts: number[] = [];
    // Like libuv: at most 1,024 buffers a call, and here also at most 3,001 bytes, so calls end inside a part.
    const handle = {
      readv: async (buffers: readonly Uint8Array[], position: number) => {
        counts.push(buffers.length);
        let at = position;
        for (const buffer of buffers.slice(0, 1024)) {
          const n = Math.min(buffer.byteLength, 3001 - (at - position), file.byteLength - at);
          if (n <= 0) break;
          buffer.set(file.subarray(at, at + n));
          at += n;
        }
        return { bytesRead: at - position };
      },
    } as unknown as FileHandleLike;
    const got = await readScattered(handle, 100, parts);
    expect(got).toBe(8_000 * 5);
    expect(Math.max(...counts)).toBeLessThanOrEqual(1024);
    const joined = new Uint8Array(got);
    let at = 0;
    for (const part of parts) joined.set(part, (at += part.byteLength) - part.byteLength);
    expect(joined).toEqual(file.subarray(100));
  });
});
