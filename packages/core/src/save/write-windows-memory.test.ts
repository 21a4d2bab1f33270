// When a window's memory goes back to the pool after a failure: only once nothing reads it.
import { afterEach, describe, expect, it, vi } from "vitest";
import type { RegionChecksums } from "./checksums-here.js";
import type { SafetensorsLayout } from "../format/safetensors.js";
import type { WriteItem } from "../plan/save-planner.js";
import type { Leaf } from "../state/leaf.js";
import type * as WindowMemory from "./window-memory.js";

/** Each posted batch's settling, in order: a test decides when and how each one ends. */
const batches: { resolve: (r: RegionChecksums) => void; reject: (e: unknown) => void; lengths: Float64Array }[] = [];
/** Memories given back, with whether every batch had settled by then. */
const givenBack: { memory: Uint8Array; batchesPending: number }[] = [];
let pending = 0;

vi.mock("#platform/save/checksum-workers.js", () => ({
  hexDigests: () => [],
  regionChecksumsAsync: (_memory: SharedArrayBuffer, _starts: Float64Array, lengths: Float64Array) => {
    pending++;
    return new Promise<RegionChecksums>((resolve, reject) => {
      const settle =
        <T>(f: (v: T) => void) =>
        (v: T) => {
          pending--;
          f(v);
        };
      batches.push({ resolve: settle(resolve), reject: settle(reject), lengths });
    });
  },
}));
vi.mock("./window-memory.js", async (original) => {
  const real = await original<typeof WindowMemory>();
  return {
    ...real,
    giveBackWindowMemory: (memory: Uint8Array) => {
      givenBack.push({ memory, batchesPending: pending });
      real.giveBackWindowMemory(memory);
    },
  };
});

const { writeThroughWindows } = await import("./write-windows.js");

const MiB = 1 << 20;
const BLOCK = MiB;

/** A file of byte items of these lengths (the header 8 bytes), and leaves holding `actual` bytes each. */
function file(lengths: readonly number[], actual = lengths) {
  const items = lengths.map(
    (byteLength, i) =>
      ({
        leafIndex: i,
        key: [`item${i}`],
        kind: "bytes",
        dtype: "uint8",
        shape: [byteLength],
        chunk: { offsets: [0], sizes: [byteLength] },
        byteLength,
      }) as WriteItem,
  );
  const leaves = actual.map((n, i) => ({ kind: "bytes", path: [`item${i}`], data: new Uint8Array(n) }) as Leaf);
  const offsets: number[] = [];
  let at = 8;
  for (const n of lengths) {
    offsets.push(at);
    at += n;
  }
  const layout = { header: new Uint8Array(8), offsets, fileSize: at } as unknown as SafetensorsLayout;
  return { items, leaves, layout, blockSizes: lengths.map(() => BLOCK) };
}

/** One attempt through windows of 8 MiB, by a storage that reads the whole body, then reports it written. */
function writeOnce({ items, leaves, layout, blockSizes }: ReturnType<typeof file>) {
  const writing = writeThroughWindows(
    items,
    leaves,
    layout,
    blockSizes,
    8 * MiB,
    () => true,
    undefined,
    (attempt) =>
      attempt(async (body, { onWritten }) => {
        let bytes = 0;
        for await (const part of body) bytes += part.byteLength;
        onWritten?.(bytes);
      }),
  );
  writing.catch(() => undefined);
  return writing;
}

/** Lets posted promises and their handlers run. */
const turns = async (n = 20): Promise<void> => {
  for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
};

afterEach(() => {
  batches.length = 0;
  givenBack.length = 0;
  pending = 0;
});

describe("writeThroughWindows' memory after a failure", () => {
  it("gives a window back only once every batch hashing it settled, though one failed", async () => {
    // One window of 6 MiB of items: hashed in two batches (about 4 MiB each).
    const writing = writeOnce(file([3 * MiB, 2 * MiB, MiB]));
    await turns();
    expect(batches).toHaveLength(2);
    batches[0]!.reject(new Error("worker failed"));
    await turns();
    // The second batch still reads the window: it must not be in the pool yet.
    expect(givenBack.map((g) => g.batchesPending)).toEqual([]);
    batches[1]!.resolve({ sums: new Uint32Array(1) });
    await expect(writing).rejects.toThrow("worker failed");
    expect(givenBack).toHaveLength(1);
    expect(givenBack[0]!.batchesPending).toBe(0);
  });

  it("gives a window back when packing it failed, once its posted batches settled", async () => {
    // The first item (5 MiB) is posted for hashing; the second changed size while being saved.
    const writing = writeOnce(file([5 * MiB, MiB], [5 * MiB, 2 * MiB]));
    await turns();
    expect(batches).toHaveLength(1);
    expect(givenBack).toEqual([]);
    batches[0]!.resolve({ sums: new Uint32Array(5) });
    await expect(writing).rejects.toMatchObject({ code: "invalid_argument" });
    expect(givenBack).toHaveLength(1);
    expect(givenBack[0]!.batchesPending).toBe(0);
  });
});
