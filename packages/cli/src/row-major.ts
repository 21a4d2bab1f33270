import type { Box } from "@cairn/core";

/**
 * Box arithmetic for streaming a tensor in global row-major order out of chunks saved in any
 * layout (rows, columns, blocks): a byte range of the global tensor is a few boxes, each box
 * is filled from the chunks it overlaps, and rows are copied between row-major buffers.
 */

function numel(sizes: readonly number[]): number {
  let n = 1;
  for (const s of sizes) n *= s;
  return n;
}

/**
 * The boxes that elements `[start, end)` of a row-major tensor of `shape` make up, in order;
 * each is contiguous in the tensor (fixed leading indices, a range in one dimension, every
 * trailing dimension whole), so they are at most two per dimension.
 */
export function rangeBoxes(shape: readonly number[], start: number, end: number): Box[] {
  const boxes: Box[] = [];
  if (end <= start) return boxes;
  const walk = (prefix: number[], dims: readonly number[], from: number, to: number): void => {
    if (dims.length === 0) {
      boxes.push({ offsets: prefix, sizes: prefix.map(() => 1) });
      return;
    }
    const inner = numel(dims.slice(1));
    const first = Math.floor(from / inner);
    const last = Math.floor((to - 1) / inner);
    const whole = (a: number, b: number): void => {
      if (b > a) boxes.push({ offsets: [...prefix, a, ...dims.slice(1).map(() => 0)], sizes: [...prefix.map(() => 1), b - a, ...dims.slice(1)] });
    };
    if (first === last) {
      if (from % inner === 0 && to - from === inner) whole(first, first + 1);
      else walk([...prefix, first], dims.slice(1), from - first * inner, to - first * inner);
      return;
    }
    let a = first;
    if (from % inner !== 0) {
      walk([...prefix, first], dims.slice(1), from - first * inner, inner);
      a = first + 1;
    }
    const tailPartial = to % inner !== 0;
    whole(a, tailPartial ? last : last + 1);
    if (tailPartial) walk([...prefix, last], dims.slice(1), 0, to - last * inner);
  };
  walk([], shape, start, end);
  return boxes;
}

/** The overlap of two boxes, or `undefined` if they share no element. */
export function overlap(a: Box, b: Box): Box | undefined {
  const offsets: number[] = [];
  const sizes: number[] = [];
  for (let d = 0; d < a.offsets.length; d++) {
    const start = Math.max(a.offsets[d]!, b.offsets[d]!);
    const end = Math.min(a.offsets[d]! + a.sizes[d]!, b.offsets[d]! + b.sizes[d]!);
    if (end <= start) return undefined;
    offsets.push(start);
    sizes.push(end - start);
  }
  return { offsets, sizes };
}

function strides(sizes: readonly number[]): number[] {
  const out = new Array<number>(sizes.length);
  let s = 1;
  for (let d = sizes.length - 1; d >= 0; d--) {
    out[d] = s;
    s *= sizes[d]!;
  }
  return out;
}

/** Element offset of `region`'s first element inside a row-major buffer holding `box`. */
function offsetIn(box: Box, region: Box): number {
  const st = strides(box.sizes);
  let at = 0;
  for (let d = 0; d < box.sizes.length; d++) at += (region.offsets[d]! - box.offsets[d]!) * st[d]!;
  return at;
}

/**
 * The element span `[start, end)` that `region` occupies in a row-major buffer holding `box`:
 * the bytes to read from a chunk to get the region (everything between its first and last element).
 */
export function spanIn(box: Box, region: Box): { start: number; end: number } {
  const last: Box = { offsets: region.offsets.map((o, d) => o + region.sizes[d]! - 1), sizes: region.sizes.map(() => 1) };
  return { start: offsetIn(box, region), end: offsetIn(box, last) + 1 };
}

/**
 * Copies `region` from `src` (a row-major buffer holding box `srcBox`, starting at element
 * `srcStart` of it) into `dst` (holding `dstBox`), `itemSize` bytes an element. Trailing
 * dimensions spanned whole by the region in both buffers are copied as one run.
 */
export function copyRegion(src: Uint8Array, srcBox: Box, srcStart: number, dst: Uint8Array, dstBox: Box, region: Box, itemSize: number): void {
  const n = region.sizes.length;
  if (n === 0) {
    dst.set(src.subarray(0, itemSize), 0);
    return;
  }
  let k = n - 1;
  while (k > 0 && region.sizes[k] === srcBox.sizes[k] && region.sizes[k] === dstBox.sizes[k]) k--;
  let run = 1;
  for (let d = k; d < n; d++) run *= region.sizes[d]!;
  const srcStrides = strides(srcBox.sizes);
  const dstStrides = strides(dstBox.sizes);
  const s0 = offsetIn(srcBox, region) - srcStart;
  const d0 = offsetIn(dstBox, region);
  const index = new Array<number>(k).fill(0);
  let rows = 1;
  for (let d = 0; d < k; d++) rows *= region.sizes[d]!;
  const bytes = run * itemSize;
  for (let r = 0; r < rows; r++) {
    let s = s0;
    let t = d0;
    for (let d = 0; d < k; d++) {
      s += index[d]! * srcStrides[d]!;
      t += index[d]! * dstStrides[d]!;
    }
    dst.set(src.subarray(s * itemSize, s * itemSize + bytes), t * itemSize);
    for (let d = k - 1; d >= 0; d--) {
      if (++index[d]! < region.sizes[d]!) break;
      index[d] = 0;
    }
  }
}
