import { constants } from "node:fs";
import { promises as nodeFs } from "node:fs";
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pageAlignedSharedBytes } from "@cairn/core/storage";
import { afterAll, describe, expect, it } from "vitest";
import { directIoAvailable } from "./direct-write.js";
import { FsStorageAdapter } from "./fs-storage-adapter.js";
import type { FileHandleLike, FsPromisesLike } from "./fs-like.js";

const roots: string[] = [];
afterAll(async () => {
  await Promise.all(roots.map((d) => rm(d, { recursive: true, force: true })));
});

const O_DIRECT = constants.O_DIRECT ?? 0;
const isDirect = (flags: string | number): boolean => typeof flags === "number" && (flags & O_DIRECT) !== 0;

interface Recorded {
  flags: (string | number)[];
  /** [position, length] of every write on a handle opened with O_DIRECT. */
  directWrites: [number, number][];
  /** The memory each direct write was made from. */
  sources: ArrayBufferLike[];
  open: number;
}

/** node:fs that records opens and direct writes, and can refuse O_DIRECT or fail the nth direct write like a kernel would. */
function recordingFs(
  faults: { refuseOpen?: boolean; refuseWrite?: boolean; failDirectWrite?: number; slowWrites?: boolean } = {},
): {
  fs: FsPromisesLike;
  rec: Recorded;
} {
  const base = nodeFs as unknown as FsPromisesLike;
  const rec: Recorded = { flags: [], directWrites: [], sources: [], open: 0 };
  let writesInOrder: Promise<void> = Promise.resolve();
  const fail = (code: string, message: string): Error => Object.assign(new Error(`${code}: ${message}`), { code });
  const fs: FsPromisesLike = {
    ...base,
    open: async (path, flags, mode) => {
      rec.flags.push(flags);
      const direct = isDirect(flags);
      if (direct && faults.refuseOpen) {
        // Linux creates the file, then refuses O_DIRECT.
        await (await base.open(path, (flags as number) & ~O_DIRECT, mode)).close();
        throw fail("EINVAL", "invalid argument, open");
      }
      const handle = await base.open(path, flags, mode);
      rec.open++;
      const wrapped: FileHandleLike = {
        read: (b, o, l, p) => handle.read(b, o, l, p),
        readv: (b, p) => handle.readv(b, p),
        truncate: (length) => handle.truncate(length),
        stat: () => handle.stat(),
        sync: () => handle.sync(),
        close: async () => {
          rec.open--;
          await handle.close();
        },
        write: async (buffer, offset, length, position) => {
          if (direct) {
            if (faults.refuseWrite) throw fail("EINVAL", "invalid argument, write");
            rec.directWrites.push([position ?? -1, length]);
            rec.sources.push(buffer.buffer);
            if (rec.directWrites.length === faults.failDirectWrite)
              throw fail("ENOSPC", "no space left on device, write");
          }
          // Slow writes: memory given back too early would be overwritten before it is written.
          // They finish in the order they started, so a buffered body's writes in flight settle
          // one by one and its mark moves more than once, however loaded the machine is.
          if (faults.slowWrites) {
            const written = writesInOrder.then(async () => {
              await new Promise((resolve) => setTimeout(resolve, 5));
              return handle.write(buffer, offset, length, position);
            });
            writesInOrder = written.then(
              () => undefined,
              () => undefined,
            );
            return written;
          }
          return handle.write(buffer, offset, length, position);
        },
      };
      return wrapped;
    },
  };
  return { fs, rec };
}

async function fixture(
  faults?: Parameters<typeof recordingFs>[0],
): Promise<{ storage: FsStorageAdapter; dir: string; rec: Recorded }> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-direct-"));
  roots.push(dir);
  const { fs, rec } = recordingFs(faults);
  return { storage: new FsStorageAdapter("file", dir, fs, dir, { syncDirectories: true, directIo: true }), dir, rec };
}

/** Deterministic bytes, so a part placed at the wrong offset shows. */
function pattern(length: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = x & 255;
  }
  return bytes;
}

/** Parts of awkward sizes: a small header-like part, then pieces that straddle the 4 MiB buffers. */
function parts(total: number): Uint8Array[] {
  const whole = pattern(total, total);
  const sizes = [137, 4093, (3 << 20) + 5, 1, (2 << 20) - 3, 65_536];
  const out: Uint8Array[] = [];
  for (let at = 0, k = 0; at < total; k++) {
    const n = Math.min(sizes[k % sizes.length]!, total - at);
    out.push(whole.slice(at, at + n));
    at += n;
  }
  return out;
}

async function* stream(chunks: readonly Uint8Array[]): AsyncGenerator<Uint8Array> {
  for (const chunk of chunks) yield chunk;
}

const joined = (chunks: readonly Uint8Array[]): Buffer => Buffer.concat(chunks);

describe("file:// direct writes", () => {
  it("is available on Linux", () => {
    expect(directIoAvailable).toBe(process.platform === "linux");
  });

  it("writes a big object with O_DIRECT in aligned blocks, every byte in place, the file cut to the body's length", async () => {
    const { storage, dir, rec } = await fixture();
    const body = parts((9 << 20) + 12_345);
    await storage.write("data.safetensors", stream(body), { size: (9 << 20) + 12_345 });
    const written = await readFile(join(dir, "data.safetensors"));
    expect(written.byteLength).toBe((9 << 20) + 12_345);
    expect(written.equals(joined(body))).toBe(true);
    expect(rec.flags.filter(isDirect)).toHaveLength(1);
    expect(rec.directWrites.length).toBeGreaterThanOrEqual(3);
    for (const [position, length] of rec.directWrites) expect([position % 4096, length % 4096]).toEqual([0, 0]);
    // No fallback: the real file system took every direct write.
    expect(rec.flags).not.toContain("r+");
    expect(await readdir(dir)).toEqual(["data.safetensors"]);
    expect(rec.open).toBe(0);
  });

  it("writes a body of unknown size directly, and one of an exact multiple of the block without padding", async () => {
    const { storage, dir, rec } = await fixture();
    const exact = parts(8 << 20);
    await storage.write("exact", stream(exact));
    expect((await readFile(join(dir, "exact"))).equals(joined(exact))).toBe(true);
    expect(rec.flags.filter(isDirect)).toHaveLength(1);
    expect(rec.directWrites.reduce((n, [, length]) => n + length, 0)).toBe(8 << 20);
  });

  it.each([true, false])(
    "with pageAligned %s, writes page-aligned parts straight from the body's memory, and copies the rest",
    async (pageAligned) => {
      const { storage, dir, rec } = await fixture();
      // A page-aligned body as core's staging lays one out: a WebAssembly memory, file offset = memory offset.
      const memory = pageAlignedSharedBytes(16 << 20);
      const size = (10 << 20) + 5000;
      memory.set(pattern(size, 11));
      // Parts: one of 5 MiB + 100 from the start (5 MiB in place, the 100-byte tail copied), one
      // starting off a page (copied), one from a page boundary once the copies are flushed.
      const cuts = [0, (5 << 20) + 100, 9 << 20, size];
      const body = cuts.slice(1).map((end, k) => memory.subarray(cuts[k]!, end));
      await storage.write("data.safetensors", stream(body), { size, pageAligned });
      expect((await readFile(join(dir, "data.safetensors"))).equals(memory.subarray(0, size))).toBe(true);
      const inPlace = rec.directWrites.filter((_, k) => rec.sources[k] === memory.buffer);
      // The last part: its whole pages in place, its last 904 bytes copied and padded.
      expect(inPlace).toEqual(
        pageAligned
          ? [
              [0, 4 << 20],
              [4 << 20, 1 << 20],
              [9 << 20, (1 << 20) + 4096],
            ]
          : [],
      );
      for (const [position, length] of rec.directWrites) expect([position % 4096, length % 4096]).toEqual([0, 0]);
      expect(rec.directWrites.reduce((n, [, length]) => n + length, 0)).toBe(Math.ceil(size / 4096) * 4096);
      expect(rec.open).toBe(0);
    },
  );

  it.each([
    ["direct, in place", true, true],
    ["direct, copied", true, false],
    ["buffered", false, true],
  ])(
    "%s: reports how much of the body it is done with, in order, never before it is written",
    async (_, directIo, pageAligned) => {
      const dir = await mkdtemp(join(tmpdir(), "cairn-direct-"));
      roots.push(dir);
      const { fs } = recordingFs({ slowWrites: true });
      const storage = new FsStorageAdapter("file", dir, fs, dir, { syncDirectories: true, directIo });
      const size = (13 << 20) + 5000;
      const memory = pageAlignedSharedBytes(size);
      const expected = pattern(size, 5);
      memory.set(expected);
      // Whole pages per part, as core's windows are cut, then a tail.
      const cuts = [0, 3 << 20, (3 << 20) + 4096, 8 << 20, 12 << 20, size];
      const body = cuts.slice(1).map((end, k) => memory.subarray(cuts[k]!, end));
      const marks: number[] = [];
      await storage.write("data", stream(body), {
        size,
        pageAligned,
        // What the storage is done with may change at once: scribbled over here.
        onWritten: (bytes) => {
          marks.push(bytes);
          memory.fill(0xee, 0, bytes);
        },
      });
      expect((await readFile(join(dir, "data"))).equals(expected)).toBe(true);
      expect(marks.length).toBeGreaterThan(1);
      expect(marks).toEqual([...new Set(marks)].sort((a, b) => a - b));
      expect(marks.at(-1)).toBe(size);
    },
  );

  it("writes small objects (metadata.json) through the page cache", async () => {
    const { storage, dir, rec } = await fixture();
    await storage.write("metadata.json", pattern(1000, 7), { ifAbsent: true });
    expect(rec.flags).toEqual(["wx", "r"]);
    expect((await readFile(join(dir, "metadata.json"))).equals(pattern(1000, 7))).toBe(true);
  });

  it.each([
    ["at open", { refuseOpen: true }, (5 << 20) + 7],
    ["on the first write", { refuseWrite: true }, (6 << 20) + 4097],
  ])(
    "falls back to buffered writes where the file system refuses O_DIRECT %s, and does not ask again",
    async (_, faults, size) => {
      const { storage, dir, rec } = await fixture(faults);
      const body = parts(size);
      await storage.write("a", stream(body));
      await storage.write("b", stream(body));
      expect((await readFile(join(dir, "a"))).equals(joined(body))).toBe(true);
      expect((await readFile(join(dir, "b"))).equals(joined(body))).toBe(true);
      expect(rec.flags.filter(isDirect)).toHaveLength(1);
      expect((await readdir(dir)).sort()).toEqual(["a", "b"]);
      expect(rec.open).toBe(0);
    },
  );

  it("rejects when a direct write fails mid-file, leaving no object, no temp file and no open descriptor", async () => {
    const { storage, dir, rec } = await fixture({ failDirectWrite: 2 });
    // Parts arrive slowly, so the failed write is not awaited until long after it failed.
    async function* slowly(): AsyncGenerator<Uint8Array> {
      for (const part of parts(20 << 20)) {
        await new Promise((resolve) => setTimeout(resolve, 5));
        yield part;
      }
    }
    await expect(storage.write("a", slowly())).rejects.toMatchObject({
      code: "no_space",
      message: expect.stringContaining("no space left"),
      cause: { code: "ENOSPC" },
    });
    expect(await readdir(dir)).toEqual([]);
    expect(rec.open).toBe(0);
  });

  it("stops on abort between parts, leaving nothing", async () => {
    const { storage, dir, rec } = await fixture();
    const controller = new AbortController();
    async function* aborting(): AsyncGenerator<Uint8Array> {
      for (const [k, part] of parts(12 << 20).entries()) {
        if (k === 4) controller.abort(new Error("preempted"));
        yield part;
      }
    }
    await expect(storage.write("a", aborting(), { signal: controller.signal })).rejects.toMatchObject({
      code: "cancelled",
    });
    expect(await readdir(dir)).toEqual([]);
    expect(rec.open).toBe(0);
  });
});
