import { setImmediate as nextTurn } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { blockChecksums } from "../format/crc32c.js";
import type { SafetensorsLayout } from "../format/safetensors.js";
import { loadXxh128 } from "../format/xxh128.js";
import type { WriteItem } from "../plan/save-planner.js";
import type { Leaf } from "../state/leaf.js";
import { seededRandom } from "../testing/seeded-random.js";
import { type WindowWrite, writeThroughWindows } from "./write-windows.js";

/**
 * A storage write that keeps up to 4 writes in flight, each finishing after a random number of
 * turns (so out of order), and reports as written only the bytes every earlier write put in
 * `out`: a window given back before its mark would be reused under a write still reading it.
 * The first attempt fails after `failAt` parts (never, if negative).
 */
function fakeWrite(out: Uint8Array, random: () => number, failAt: number, attempt: number): WindowWrite {
  return async (body, { onWritten }) => {
    const writes: Promise<number>[] = [];
    let told = 0;
    let at = 0;
    let parts = 0;
    try {
      for await (const part of body) {
        if (attempt === 1 && parts++ === failAt) throw new Error("transient");
        const start = at;
        const turns = Math.floor(random() * 4);
        writes.push(
          (async () => {
            for (let t = 0; t < turns; t++) await nextTurn();
            out.set(part, start);
            return start + part.byteLength;
          })(),
        );
        at += part.byteLength;
        if (writes.length - told > 3) onWritten?.(await writes[told++]!);
      }
    } finally {
      // A failed attempt, too, lets its writes settle before it returns.
      for (; told < writes.length; told++) onWritten?.(await writes[told]!);
    }
  };
}

describe("writeThroughWindows", () => {
  it("writes the file's bytes and each item's block CRC32Cs and hash, over seeded layouts, windows, retries", async () => {
    const xxh = await loadXxh128();
    let retried = 0;
    const one = async (seed: number): Promise<void> => {
      const random = seededRandom(seed);
      const count = Math.floor(random() * 30);
      // Windows of a few pages, some not a whole number of pages.
      const windowBytes = [8192, 12288, 16384, 10000, 4096 * 5 + 17][Math.floor(random() * 5)]!;
      // Now and then a header longer than a window.
      const headerBytes = 8 + 8 * Math.floor(random() * (random() < 0.2 ? 5000 : 200));
      const header = new Uint8Array(headerBytes).map(() => (random() * 256) | 0);
      const datas: Uint8Array[] = [];
      const blockSizes: number[] = [];
      const offsets: number[] = [];
      let end = headerBytes;
      for (let i = 0; i < count; i++) {
        const length = random() < 0.15 ? 0 : Math.floor(random() * (random() < 0.3 ? 60_000 : 3000));
        datas.push(new Uint8Array(length).map(() => (random() * 256) | 0));
        blockSizes.push(2 ** Math.floor(random() * 17));
        offsets.push(end);
        end += length;
      }
      const items = datas.map((d, i) => ({ leafIndex: i, byteLength: d.byteLength }) as WriteItem);
      const leaves = datas.map((data) => ({ kind: "bytes", path: [], data }) as Leaf);
      const layout: SafetensorsLayout = { header, offsets, fileSize: end };
      // Items whose checksums are known already are not hashed.
      const known = new Set(datas.map((_, i) => i).filter(() => random() < 0.2));
      const failAt = random() < 0.5 ? Math.floor(random() * 4) : -1;
      const out = new Uint8Array(end);
      let attempts = 0;
      const got = await writeThroughWindows(
        items,
        leaves,
        layout,
        blockSizes,
        windowBytes,
        (i) => !known.has(i),
        undefined,
        async (attempt) => {
          for (;;) {
            try {
              return await attempt(fakeWrite(out, random, failAt, ++attempts));
            } catch (e) {
              if (attempts > 3) throw e;
            }
          }
        },
      );
      const want = new Uint8Array(end);
      want.set(header, 0);
      datas.forEach((d, i) => want.set(d, offsets[i]!));
      expect(Buffer.compare(out, want), `bytes, seed ${seed}`).toBe(0);
      if (attempts > 1) retried++;
      for (let i = 0; i < count; i++) {
        if (known.has(i)) {
          expect(got.hashed[i], `not hashed, seed ${seed} item ${i}`).toBe(0);
          continue;
        }
        expect(got.sums[i], `sums, seed ${seed} item ${i}`).toEqual(blockChecksums(datas[i]!, blockSizes[i]!));
        expect(got.hashed[i], `hashed, seed ${seed} item ${i}`).toBe(1);
        expect(
          Buffer.from(got.digests.subarray(16 * i, 16 * i + 16)).toString("hex"),
          `hash, seed ${seed} item ${i}`,
        ).toBe(xxh.hash(datas[i]!));
      }
    };
    // Four files at once share the pool of windows (and the checksum workers).
    for (let seed = 1; seed <= 100; seed += 4) await Promise.all([0, 1, 2, 3].map((s) => one(seed + s)));
    // Files of several parts whose first attempt failed part way were written again.
    expect(retried).toBeGreaterThan(10);
  }, 120_000);
});
