import type { Box } from "./box.js";

/** Simple ways to shard a tensor across ranks, for examples, tests and benchmarks (real models shard as their parallelism dictates). */
export type Layout = "rows" | "cols" | "blocks";

/** `total` split into `parts` uneven pieces: the first ones a little bigger, as a real sharder leaves them. */
export function splitUneven(total: number, parts: number): { start: number; size: number }[] {
  const base = Math.floor(total / parts);
  const extra = total % parts;
  let start = 0;
  return Array.from({ length: parts }, (_, i) => {
    const size = base + (i < extra ? 1 : 0);
    const piece = { start, size };
    start += size;
    return piece;
  });
}

/**
 * The boxes of `shape` a rank holds. `rows` and `cols` split dimension 0 or 1 (1-D tensors:
 * dimension 0) unevenly; `blocks` cuts a grid of at least 2×2 uneven blocks and deals them to
 * ranks in turn, so a rank may hold several disjoint blocks.
 */
export function layoutBoxes(layout: Layout, rank: number, worldSize: number, shape: readonly number[]): Box[] {
  const dim = layout === "cols" && shape.length > 1 ? 1 : 0;
  if (layout !== "blocks" || shape.length < 2) {
    const piece = splitUneven(shape[dim]!, worldSize)[rank]!;
    if (piece.size === 0) return [];
    return [
      {
        offsets: shape.map((_, d) => (d === dim ? piece.start : 0)),
        sizes: shape.map((s, d) => (d === dim ? piece.size : s)),
      },
    ];
  }
  const gridRows = splitUneven(shape[0]!, Math.max(2, Math.ceil(Math.sqrt(worldSize))) + 1);
  const gridCols = splitUneven(shape[1]!, Math.max(2, Math.ceil(worldSize / 2)));
  const boxes: Box[] = [];
  let index = 0;
  for (const r of gridRows) {
    for (const c of gridCols) {
      if (index++ % worldSize !== rank || r.size === 0 || c.size === 0) continue;
      boxes.push({
        offsets: [r.start, c.start, ...shape.slice(2).map(() => 0)],
        sizes: [r.size, c.size, ...shape.slice(2)],
      });
    }
  }
  return boxes;
}
