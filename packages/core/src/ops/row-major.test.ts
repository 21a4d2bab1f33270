import { describe, expect, it } from "vitest";
import { copyRows, intersectBoxes, rowLayout, rowSpan } from "../state/box.js";
import { permuteDims, rangeBoxes } from "./row-major.js";

function numel(sizes: readonly number[]): number {
  return sizes.reduce((a, b) => a * b, 1);
}

/** Row-major flat indices of every element of a box, in order. */
function flatIndices(
  shape: readonly number[],
  box: { offsets: readonly number[]; sizes: readonly number[] },
): number[] {
  const out: number[] = [];
  for (let i = 0; i < numel(box.sizes); i++) {
    let rest = i;
    const index: number[] = [];
    for (let d = box.sizes.length - 1; d >= 0; d--) {
      index[d] = (rest % box.sizes[d]!) + box.offsets[d]!;
      rest = Math.floor(rest / box.sizes[d]!);
    }
    let flat = 0;
    for (let d = 0; d < shape.length; d++) flat = flat * shape[d]! + index[d]!;
    out.push(flat);
  }
  return out;
}

describe("rangeBoxes", () => {
  const shapes = [[7], [3, 5], [2, 3, 4], [4, 1, 3, 2], [1, 1, 6]];
  for (const shape of shapes) {
    it(`covers every element range of ${JSON.stringify(shape)} exactly, in order, with contiguous boxes`, () => {
      const n = numel(shape);
      for (let start = 0; start < n; start++) {
        for (let end = start + 1; end <= n; end++) {
          const boxes = rangeBoxes(shape, start, end);
          const covered = boxes.flatMap((b) => flatIndices(shape, b));
          expect(covered).toEqual(Array.from({ length: end - start }, (_, i) => start + i));
          expect(boxes.length).toBeLessThanOrEqual(2 * shape.length);
        }
      }
    });
  }

  it("gives nothing for an empty range and one box for a scalar", () => {
    expect(rangeBoxes([3, 4], 5, 5)).toEqual([]);
    expect(rangeBoxes([], 0, 1)).toEqual([{ offsets: [], sizes: [] }]);
  });
});

describe("copying a region as the reader does: only the chunk's span read, then core's copyRows", () => {
  it("copies the overlap of two boxes between row-major buffers like an element-by-element copy", () => {
    const shape = [5, 6, 4];
    const src = { offsets: [1, 2, 0], sizes: [3, 4, 4] };
    const dst = { offsets: [0, 3, 1], sizes: [5, 3, 2] };
    const region = intersectBoxes(src, dst)!;
    expect(region).toEqual({ offsets: [1, 3, 1], sizes: [3, 3, 2] });
    const item = 2;
    const srcBytes = new Uint8Array(numel(src.sizes) * item).map((_, i) => i % 251);
    const layout = rowLayout(src, dst, region);
    const span = rowSpan(layout, item);
    const dstBytes = new Uint8Array(numel(dst.sizes) * item);
    copyRows(layout, item, srcBytes.subarray(span.start, span.end), span.start, dstBytes);
    const expected = new Uint8Array(dstBytes.length);
    const srcFlat = flatIndices(shape, src);
    const dstFlat = flatIndices(shape, dst);
    for (const g of flatIndices(shape, region)) {
      const s = srcFlat.indexOf(g);
      const d = dstFlat.indexOf(g);
      expected.set(srcBytes.subarray(s * item, s * item + item), d * item);
    }
    expect(dstBytes).toEqual(expected);
  });

  it("finds no overlap between disjoint boxes", () => {
    expect(intersectBoxes({ offsets: [0, 0], sizes: [2, 2] }, { offsets: [2, 0], sizes: [2, 2] })).toBeNull();
  });
});

describe("permuteDims", () => {
  it("reorders dimensions as numpy's transpose does, for every element size, aligned or not", () => {
    const cases: [number[], number[]][] = [
      [
        [3, 5],
        [1, 0],
      ],
      [
        [2, 3, 4],
        [2, 1, 0],
      ],
      [
        [2, 3, 4, 5],
        [3, 2, 0, 1],
      ],
      [
        [4, 1, 3],
        [0, 1, 2],
      ],
      [[6], [0]],
      [
        [0, 3],
        [1, 0],
      ],
    ];
    for (const [sizes, permutation] of cases) {
      for (const itemSize of [1, 2, 4, 8]) {
        for (const offset of [0, 1]) {
          const count = numel(sizes);
          const backing = new Uint8Array(count * itemSize + offset);
          for (let i = 0; i < backing.length; i++) backing[i] = (i * 37 + 11) & 0xff;
          const bytes = backing.subarray(offset);
          const out = permuteDims(bytes, sizes, permutation, itemSize);
          // Element at output index j (row-major over the permuted sizes) is the input at the permuted index.
          const outSizes = permutation.map((p) => sizes[p]!);
          for (let j = 0; j < count; j++) {
            const outIndex: number[] = [];
            let rest = j;
            for (let d = outSizes.length - 1; d >= 0; d--) {
              outIndex[d] = rest % outSizes[d]!;
              rest = Math.floor(rest / outSizes[d]!);
            }
            const inIndex: number[] = [];
            permutation.forEach((p, d) => (inIndex[p] = outIndex[d]!));
            let flat = 0;
            for (let d = 0; d < sizes.length; d++) flat = flat * sizes[d]! + inIndex[d]!;
            expect(
              out.subarray(j * itemSize, (j + 1) * itemSize),
              JSON.stringify({ sizes, permutation, itemSize, j }),
            ).toEqual(bytes.subarray(flat * itemSize, (flat + 1) * itemSize));
          }
        }
      }
    }
  });
});
