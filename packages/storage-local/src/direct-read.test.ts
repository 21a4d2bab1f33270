import { constants, openSync, closeSync, promises as nodeFs, readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { adviseHugePages, readThrough } from "@cairn/core/format";
import { DirectReads, directBuffer } from "./direct-read.js";
import type { FsPromisesLike } from "./fs-like.js";

const MiB = 1 << 20;
let dir: string;
let path: string;
const data = new Uint8Array(20 * MiB + 1234);
for (let i = 0; i < data.length; i++) data[i] = (i * 31 + (i >> 12)) & 0xff;

/** Whether this directory's file system takes O_DIRECT opens (tmpfs does not). */
function directSupported(file: string): boolean {
  try {
    closeSync(openSync(file, constants.O_RDONLY | constants.O_DIRECT!));
    return true;
  } catch {
    return false;
  }
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-direct-read-"));
  path = join(dir, "data");
  await writeFile(path, data);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** CI=true (any value but "", "0", "false"): the addon must have built, instead of the test being skipped. */
const inCI = process.env.CI !== undefined && !["", "0", "false"].includes(process.env.CI);

/** Whether Linux gives transparent huge pages to memory that asks (THP "always" or "madvise"). */
function hugePagesOffered(): boolean {
  try {
    return /\[(always|madvise)\]/.test(readFileSync("/sys/kernel/mm/transparent_hugepage/enabled", "latin1"));
  } catch {
    return false;
  }
}

/** KiB of this process's anonymous memory in transparent huge pages. */
function anonHugeKiB(): number {
  return Number(/^AnonHugePages:\s+(\d+) kB$/m.exec(readFileSync("/proc/self/smaps_rollup", "latin1"))![1]);
}

describe("DirectReads", () => {
  it.skipIf(!hugePagesOffered() || (adviseHugePages === undefined && !inCI))(
    "reads into buffers in transparent huge pages, so requests reach the device whole (needs the addon: apt-get install gcc, then pnpm install)",
    () => {
      const before = anonHugeKiB();
      const buffer = directBuffer();
      expect(buffer.byteLength).toBeGreaterThanOrEqual(8 * MiB);
      buffer.fill(1);
      // Its 8 MiB are four whole huge pages: 4 KiB pages would leave the count where it was.
      expect(anonHugeKiB() - before).toBeGreaterThanOrEqual(8 * 1024);
    },
  );

  it("reads unaligned ranges past the page cache, across its buffers and up to the end of the file", async () => {
    const opened: (string | number)[] = [];
    const fs: FsPromisesLike = {
      ...(nodeFs as unknown as FsPromisesLike),
      open: (p, flags, mode) => (opened.push(flags), (nodeFs as unknown as FsPromisesLike).open(p, flags, mode)),
    };
    const handle = await nodeFs.open(path, "r");
    const probes: number[] = [];
    const reads = new DirectReads(fs, path, handle.fd, (_, position) => (probes.push(position), false));
    try {
      const ranges: [number, number][] = [
        [12_345, 3 * MiB],
        [4096, 8 * MiB],
        [1, 8 * MiB + 5000],
        [19 * MiB - 333, 5 * MiB],
        [0, 20 * MiB + 1234],
      ];
      const direct = directSupported(path);
      for (const [offset, length] of ranges) {
        const into = new Uint8Array(length + 10);
        const got = await reads.read(data.byteLength, { offset, length }, { into });
        if (!direct) {
          expect(got).toBeUndefined();
          continue;
        }
        expect(got).toBeDefined();
        expect(Buffer.from(got!).equals(data.subarray(offset, offset + length))).toBe(true);
        expect(got!.buffer).toBe(into.buffer);
      }
      // Probed once, at the first big range's last page; a direct descriptor opened once.
      expect(probes).toEqual([12_345 + 3 * MiB - 4096]);
      expect(opened.filter((f) => typeof f === "number" && (f & constants.O_DIRECT!) !== 0)).toHaveLength(1);
    } finally {
      await reads.close();
      await handle.close();
    }
  });

  it.skipIf(readThrough === undefined && !inCI)(
    "copies a direct read into its view on libuv's threads, not the calling thread (needs the addon: apt-get install gcc, then pnpm install)",
    async () => {
      const handle = await nodeFs.open(path, "r");
      const reads = new DirectReads(nodeFs as unknown as FsPromisesLike, path, handle.fd, () => false);
      const set = vi.spyOn(Uint8Array.prototype, "set");
      try {
        const into = new Uint8Array(17 * MiB);
        const got = await reads.read(data.byteLength, { offset: 777, length: 17 * MiB }, { into });
        if (!directSupported(path)) return;
        // Only copies into this read's view count: the worker's own traffic may call `set` meanwhile.
        const intoView = set.mock.contexts.filter((view) => (view as Uint8Array | undefined)?.buffer === into.buffer);
        expect(intoView.length, "copies into the view on the calling thread").toBe(0);
        expect(got!.buffer).toBe(into.buffer);
        expect(Buffer.from(got!).equals(data.subarray(777, 777 + 17 * MiB))).toBe(true);
      } finally {
        set.mockRestore();
        await reads.close();
        await handle.close();
      }
    },
  );

  it("reads a range scattered into several buffers past the page cache, up to the end of the file", async () => {
    const handle = await nodeFs.open(path, "r");
    const reads = new DirectReads(nodeFs as unknown as FsPromisesLike, path, handle.fd, () => false);
    try {
      const parts = [
        new Uint8Array(5),
        new Uint8Array(0),
        new Uint8Array(3 * MiB + 17),
        new Uint8Array(9 * MiB),
        new Uint8Array(MiB),
      ];
      const offset = 8 * MiB + 3;
      const got = await reads.readScattered(data.byteLength, offset, parts);
      if (!directSupported(path)) {
        expect(got).toBeUndefined();
        return;
      }
      const expected = data.subarray(offset);
      expect(got).toBe(expected.byteLength);
      expect(Buffer.from(Buffer.concat(parts).subarray(0, got)).equals(expected)).toBe(true);
    } finally {
      await reads.close();
      await handle.close();
    }
  });

  it("leaves small reads, reads with a head, and cached files to the page cache", async () => {
    const handle = await nodeFs.open(path, "r");
    let cached = true;
    const reads = new DirectReads(nodeFs as unknown as FsPromisesLike, path, handle.fd, () => cached);
    try {
      expect(await reads.read(data.byteLength, { offset: 0, length: MiB - 1 }, {})).toBeUndefined();
      expect(
        await reads.read(data.byteLength, { offset: 0, length: 4 * MiB }, { head: new Uint8Array(10) }),
      ).toBeUndefined();
      expect(await reads.read(data.byteLength, { offset: 0, length: 4 * MiB }, {})).toBeUndefined();
      // The answer of the first probe holds for the file.
      cached = false;
      expect(await reads.read(data.byteLength, { offset: 0, length: 4 * MiB }, {})).toBeUndefined();
    } finally {
      await reads.close();
      await handle.close();
    }
  });
});
