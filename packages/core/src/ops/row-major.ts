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
