import { describe, expect, it } from "vitest";
import { type Box, copyRows, intersectBoxes, rowLayout, rowSpan } from "./box.js";

function strides(sizes: readonly number[]): number[] {
  const out: number[] = [];
  let s = 1;
  for (let d = sizes.length - 1; d >= 0; d--) {
    out[d] = s;
    s *= sizes[d]!;
  }
  return out;
}

/** Element-by-element reference copy of `region` from a buffer holding `src` into one holding `dst`. */
function naiveCopy(src: Box, srcData: Uint8Array, dst: Box, dstData: Uint8Array, region: Box): void {
  const n = region.sizes.length;
  const total = region.sizes.reduce((a, b) => a * b, 1);
  const ss = strides(src.sizes);
  const ds = strides(dst.sizes);
  for (let i = 0; i < total; i++) {
    let rest = i;
    let s = 0;
    let t = 0;
    for (let d = n - 1; d >= 0; d--) {
      const at = region.offsets[d]! + (rest % region.sizes[d]!);
      rest = Math.floor(rest / region.sizes[d]!);
      s += (at - src.offsets[d]!) * ss[d]!;
      t += (at - dst.offsets[d]!) * ds[d]!;
    }
    dstData[t] = srcData[s]!;
  }
}

function random(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    return x / 2 ** 31;
  };
}

describe("boxes", () => {
  it("intersects boxes and finds none for disjoint or touching ones", () => {
    expect(intersectBoxes({ offsets: [0, 0], sizes: [4, 4] }, { offsets: [2, 3], sizes: [4, 4] })).toEqual({
      offsets: [2, 3],
      sizes: [2, 1],
    });
    expect(intersectBoxes({ offsets: [0], sizes: [4] }, { offsets: [4], sizes: [4] })).toBeNull();
    expect(intersectBoxes({ offsets: [], sizes: [] }, { offsets: [], sizes: [] })).toEqual({ offsets: [], sizes: [] });
  });

  it("merges an identical layout into a single run", () => {
    const box = { offsets: [0, 0, 0], sizes: [3, 4, 5] };
    const layout = rowLayout(box, box, box);
    expect(layout.src.length).toBe(1);
    expect(layout.run).toBe(60);
  });

  it("copies any region between any two layouts, in arbitrary pieces, like an element-wise copy", () => {
    const next = random(42);
    const int = (n: number): number => Math.floor(next() * n);
    for (let trial = 0; trial < 300; trial++) {
      const rank = 1 + int(4);
      const shape = Array.from({ length: rank }, () => 1 + int(6));
      const pick = (): Box => {
        const offsets = shape.map((s) => int(s));
        return { offsets, sizes: offsets.map((o, d) => 1 + int(shape[d]! - o)) };
      };
      const src = pick();
      const dst = pick();
      const region = intersectBoxes(src, dst);
      if (!region) continue;
      const item = 1 + int(3);
      const count = (b: Box): number => b.sizes.reduce((a, c) => a * c, 1) * item;
      const srcData = Uint8Array.from({ length: count(src) }, () => int(256));
      const expected = new Uint8Array(count(dst));
      // Reference: copy each element's `item` bytes via a widened view.
      for (let k = 0; k < item; k++) {
        const s1 = srcData.filter((_, i) => i % item === k);
        const d1 = new Uint8Array(count(dst) / item);
        naiveCopy(src, s1, dst, d1, region);
        d1.forEach((v, i) => (expected[i * item + k] = v));
      }
      const mask = new Uint8Array(count(dst) / item);
      naiveCopy(src, new Uint8Array(count(src) / item).fill(1), dst, mask, region);
      const got = new Uint8Array(count(dst));
      const layout = rowLayout(src, dst, region);
      const span = rowSpan(layout, item);
      const pieceSize = 1 + int(count(src));
      for (let at = span.start; at < span.end; at += pieceSize) {
        copyRows(layout, item, srcData.subarray(at, Math.min(at + pieceSize, span.end)), at, got);
      }
      for (let i = 0; i < got.length; i++) {
        if (mask[Math.floor(i / item)] === 1) expect(got[i]).toBe(expected[i]);
        else expect(got[i]).toBe(0);
      }
    }
  });
});
