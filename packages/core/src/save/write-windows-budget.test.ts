// How much window memory the files written at once hold together: one budget for all of them.
import { describe, expect, it, vi } from "vitest";
import type { RegionChecksums } from "./checksums-here.js";
import type { SafetensorsLayout } from "../format/safetensors.js";
import type { WriteItem } from "../plan/save-planner.js";
import type { Leaf } from "../state/leaf.js";
import type * as WindowMemory from "./window-memory.js";

const MiB = 1 << 20;
const BLOCK = MiB;

/** Bytes of window memory taken and not given back (by memory), and the most there were at once. */
const taken = new Map<ArrayBufferLike, number>();
let held = 0;
let peak = 0;

vi.mock("#platform/save/checksum-workers.js", () => ({
  hexDigests: () => [],
  // Each region's block sums, after a turn (a worker answers later).
  regionChecksumsAsync: async (_memory: SharedArrayBuffer, _starts: Float64Array, lengths: Float64Array) => {
    await new Promise((resolve) => setImmediate(resolve));
    let blocks = 0;
    for (const length of lengths) blocks += Math.ceil(length / BLOCK);
    return { sums: new Uint32Array(blocks).fill(7) } satisfies RegionChecksums;
  },
}));
vi.mock("./window-memory.js", async (original) => {
  const real = await original<typeof WindowMemory>();
  return {
    ...real,
    takeWindowMemory: (bytes: number, hugePages: boolean) => {
      const memory = real.takeWindowMemory(bytes, hugePages);
      taken.set(memory.buffer, bytes);
      peak = Math.max(peak, (held += bytes));
      return memory;
    },
    giveBackWindowMemory: (memory: Uint8Array) => {
      held -= taken.get(memory.buffer)!;
      taken.delete(memory.buffer);
      real.giveBackWindowMemory(memory);
    },
  };
});

const { WINDOW_BYTES, writeThroughWindows } = await import("./write-windows.js");

/** A file of `count` byte items of `bytes` each (the header 8 bytes). */
function file(count: number, bytes: number) {
  const items = Array.from(
    { length: count },
    (_, i) =>
      ({
        leafIndex: i,
        key: [`item${i}`],
        kind: "bytes",
        dtype: "uint8",
        shape: [bytes],
        chunk: { offsets: [0], sizes: [bytes] },
        byteLength: bytes,
      }) as WriteItem,
  );
  const leaves = items.map((_, i) => ({ kind: "bytes", path: [`item${i}`], data: new Uint8Array(bytes) }) as Leaf);
  const offsets = items.map((_, i) => 8 + i * bytes);
  const layout = { header: new Uint8Array(8), offsets, fileSize: 8 + count * bytes } as unknown as SafetensorsLayout;
  return { items, leaves, layout, blockSizes: items.map(() => BLOCK) };
}

/**
 * Writes a file as file:// does: up to four parts in flight, each done a few turns later, the
 * bytes before the oldest one still running reported written.
 */
async function writeFile({ items, leaves, layout, blockSizes }: ReturnType<typeof file>, windowBytes: number) {
  return writeThroughWindows(
    items,
    leaves,
    layout,
    blockSizes,
    windowBytes,
    () => true,
    undefined,
    (attempt) =>
      attempt(async (body, { onWritten }) => {
        const running: { at: number; done: boolean; write: Promise<void> }[] = [];
        let pulled = 0;
        const report = (): void => {
          while (running[0]?.done) running.shift();
          onWritten?.(running[0] ? running[0].at : pulled);
        };
        for await (const part of body) {
          const end = pulled + part.byteLength;
          const entry = { at: pulled, done: false, write: Promise.resolve() };
          entry.write = (async () => {
            for (let i = 0; i < 3 + (end % 5); i++) await new Promise((resolve) => setImmediate(resolve));
            entry.done = true;
            report();
          })();
          running.push(entry);
          pulled = end;
          if (running.length >= 4) await running[0]!.write;
        }
        await Promise.all(running.map((r) => r.write));
        report();
      }),
  );
}

describe("writeThroughWindows' shared budget", () => {
  it("keeps the windows of many files written at once within one budget, and finishes them all", async () => {
    held = 0;
    peak = 0;
    // Twelve files of 24 MiB at once, each in three or four windows: more files than the budget has windows.
    const files = Array.from({ length: 12 }, () => file(24, MiB));
    const results = await Promise.all(files.map((f) => writeFile(f, WINDOW_BYTES)));
    for (const { sums } of results) expect(sums.map((s) => s?.length)).toEqual(new Array(24).fill(1));
    expect(held).toBe(0);
    // Without the budget each file held two windows or more: over 100 MiB.
    expect(peak).toBeLessThanOrEqual(8 * (WINDOW_BYTES + 4096));
    expect(peak).toBeGreaterThan(WINDOW_BYTES);
  });

  it("leaves a whole packed file's single window (another storage's) outside the budget", async () => {
    held = 0;
    peak = 0;
    // Three files of 40 MiB, each one window of 64 MiB: together more than the budget, all at once.
    const files = Array.from({ length: 3 }, () => file(40, MiB));
    await Promise.all(files.map((f) => writeFile(f, 64 * MiB)));
    expect(peak).toBe(3 * (8 + 40 * MiB));
  });
});
