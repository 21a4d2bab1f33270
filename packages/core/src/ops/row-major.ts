import type { Box } from "../state/box.js";
import { numel } from "../state/dtypes.js";

/**
 * Streaming a tensor in global row-major order out of chunks saved in any layout (rows,
 * columns, blocks): a byte range of the global tensor is a few boxes, each filled from the
 * chunks it overlaps with core's box arithmetic (`intersectBoxes`, `rowLayout`, `copyRows`).
 * Used by `CheckpointReader`; throws nothing.
 */

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
      if (b > a)
        boxes.push({
          offsets: [...prefix, a, ...dims.slice(1).map(() => 0)],
          sizes: [...prefix.map(() => 1), b - a, ...dims.slice(1)],
        });
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

/**
 * The elements of a row-major array of `sizes` (`itemSize` bytes each) with its dimensions
 * reordered: dimension `i` of the result is dimension `permutation[i]` of the input, as numpy's
 * `transpose(permutation)` (a Keras kernel `[in, out]` as torch's `[out, in]`: `[1, 0]`). Bytes
 * are copied as they are, NaN payloads included.
 */
export function permuteDims(
  bytes: Uint8Array,
  sizes: readonly number[],
  permutation: readonly number[],
  itemSize: number,
): Uint8Array {
  const rank = sizes.length;
  const strides = sizes.map((_, d) => numel(sizes.slice(d + 1)));
  const outSizes = permutation.map((p) => sizes[p]!);
  const outStrides = permutation.map((p) => strides[p]!);
  const count = numel(sizes);
  const out = new Uint8Array(bytes.byteLength);
  // Whole elements move as one or two words (unless the input is not aligned for them).
  const unit = Math.min(itemSize, 4);
  const words = itemSize / unit;
  const source = bytes.byteOffset % unit === 0 && itemSize % unit === 0 ? wordsOf(bytes, unit) : undefined;
  const target = wordsOf(out, unit);
  const index = new Array<number>(rank).fill(0);
  let from = 0;
  for (let i = 0; i < count; i++) {
    if (source) {
      for (let w = 0; w < words; w++) target[i * words + w] = source[from * words + w]!;
    } else {
      out.set(bytes.subarray(from * itemSize, (from + 1) * itemSize), i * itemSize);
    }
    // Next output index, row-major, and the input element it comes from.
    for (let d = rank - 1; d >= 0; d--) {
      from += outStrides[d]!;
      if (++index[d]! < outSizes[d]!) break;
      from -= outStrides[d]! * outSizes[d]!;
      index[d] = 0;
    }
  }
  return out;
}

function wordsOf(bytes: Uint8Array, unit: number): Uint8Array | Uint16Array | Uint32Array {
  if (unit === 1) return bytes;
  return unit === 2
    ? new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2)
    : new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
}
