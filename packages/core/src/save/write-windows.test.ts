import { describe, expect, it } from "vitest";
import type { SafetensorsLayout } from "../format/safetensors.js";
import type { WriteItem } from "../plan/save-planner.js";
import { seededRandom } from "../testing/seeded-random.js";
import { planWindows } from "./write-windows.js";

const PAGE = 4096;

describe("planWindows", () => {
  it("cuts a file into windows that send whole pages in order, and items into pieces on their blocks", () => {
    for (let seed = 1; seed <= 300; seed++) {
      const random = seededRandom(seed);
      const windowBytes = [64 << 10, 1 << 20, 8 << 20][seed % 3]!;
      const header = 8 + Math.floor(random() * (random() < 0.1 ? 3 * windowBytes : 5000));
      const lengths = Array.from({ length: Math.floor(random() * 40) }, () =>
        random() < 0.1 ? 0 : Math.floor(random() * (random() < 0.3 ? 4 * windowBytes : windowBytes / 8)),
      );
      const blockSizes = lengths.map(() => 2 ** (10 + Math.floor(random() * 15)));
      const offsets: number[] = [];
      let at = header;
      for (const length of lengths) {
        offsets.push(at);
        at += length;
      }
      const layout = { header: new Uint8Array(header), offsets, fileSize: at } as unknown as SafetensorsLayout;
      const items = lengths.map((byteLength) => ({ byteLength }) as WriteItem);
      const windows = planWindows(items, layout, blockSizes, windowBytes);

      let sent = 0;
      const covered = lengths.map(() => 0);
      for (const [k, w] of windows.entries()) {
        expect(w.start, `seed ${seed}`).toBe(sent);
        const last = k === windows.length - 1;
        if (last) expect(w.cut).toBe(layout.fileSize);
        else expect(w.cut % PAGE).toBe(0);
        expect(w.cut).toBeGreaterThanOrEqual(w.start);
        expect(w.end).toBeGreaterThanOrEqual(w.cut);
        sent = w.cut;
        for (const { item, from, to } of w.pieces) {
          // In order, back to back, inside the window's memory.
          expect(from).toBe(covered[item]);
          covered[item] = to;
          expect(offsets[item]! + from).toBeGreaterThanOrEqual(w.start);
          expect(offsets[item]! + to).toBeLessThanOrEqual(w.end);
          if (from > 0 || to < lengths[item]!) {
            // Only items bigger than a window are cut, on their block boundaries.
            expect(lengths[item]!).toBeGreaterThan(windowBytes - PAGE);
            expect(from % blockSizes[item]!).toBe(0);
            if (to < lengths[item]!) expect(to % blockSizes[item]!).toBe(0);
          }
        }
        // A window holds about windowBytes of items (and the page carried in), or one block of a bigger item.
        const itemBytes = w.pieces.reduce((n, p) => n + p.to - p.from, 0);
        const biggest = Math.max(0, ...w.pieces.map((p) => blockSizes[p.item]!));
        expect(itemBytes).toBeLessThanOrEqual(Math.max(windowBytes + PAGE, biggest));
        if (k > 0) expect(w.end - w.start).toBeLessThanOrEqual(Math.max(windowBytes, biggest) + PAGE);
      }
      expect(sent).toBe(layout.fileSize);
      expect(covered).toEqual(lengths);
    }
  });

  it("cuts a big item's file at multiples of the window where the header is under a page", () => {
    // As the local save's big tensors: a header of 128 bytes, then 1 MiB blocks. A write of a
    // window then starts on a multiple of 4 MiB, and its 4 MiB writes are one device request each.
    const MiB = 1 << 20;
    for (const header of [8, 128, PAGE - 8]) {
      const length = 64 * MiB + 3 * 1024;
      const layout = { header: new Uint8Array(header), offsets: [header], fileSize: header + length };
      const windows = planWindows(
        [{ byteLength: length } as WriteItem],
        layout as unknown as SafetensorsLayout,
        [MiB],
        8 * MiB,
      );
      expect(windows.length).toBeGreaterThanOrEqual(8);
      expect(windows.slice(0, 7).map((w) => w.cut)).toEqual(Array.from({ length: 7 }, (_, k) => (k + 1) * 8 * MiB));
      for (const w of windows) expect(w.end - w.start).toBeLessThanOrEqual(8 * MiB + PAGE);
    }
  });
});
