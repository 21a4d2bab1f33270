/**
 * Boxes are N-d rectangles of a tensor: `offsets` and `sizes` per dimension. Chunks of a
 * sharded tensor are boxes, and so are the pieces a rank asks for on load; resharding is the
 * overlap of the two, copied row by row between row-major buffers.
 */
export interface Box {
  readonly offsets: readonly number[];
  readonly sizes: readonly number[];
}

/** The overlap of two boxes, or `null` if they share no element. */
export function intersectBoxes(a: Box, b: Box): Box | null {
  const offsets: number[] = [];
  const sizes: number[] = [];
  for (let d = 0; d < a.offsets.length; d++) {
    const start = Math.max(a.offsets[d]!, b.offsets[d]!);
    const end = Math.min(a.offsets[d]! + a.sizes[d]!, b.offsets[d]! + b.sizes[d]!);
    if (end <= start) return null;
    offsets.push(start);
    sizes.push(end - start);
  }
  return { offsets, sizes };
}

/**
 * The contiguous runs ("rows") a box occupies inside two row-major buffers: `src` holds box
 * `srcBox` and `dst` holds box `dstBox`, and `region` lies inside both. Trailing dimensions
 * that `region` spans in full in both buffers are merged, so an identical layout is one run.
 */
export interface RowLayout {
  /** Element offsets of each run in the source and destination buffers, ascending in the source (never written to: layouts share them). */
  readonly src: Float64Array;
  readonly dst: Float64Array;
  /** Elements per run. */
  readonly run: number;
}

/** The one run at offset 0 of a layout whose three boxes are the same (read only, so shared). */
const AT_ORIGIN = Float64Array.of(0);

function sameBoxes(a: Box, b: Box): boolean {
  for (let d = 0; d < a.sizes.length; d++) if (a.sizes[d] !== b.sizes[d] || a.offsets[d] !== b.offsets[d]) return false;
  return a.sizes.length === b.sizes.length;
}

export function rowLayout(srcBox: Box, dstBox: Box, region: Box): RowLayout {
  const n = region.sizes.length;
  // A whole chunk into a whole tensor (most loads, one per tensor): one run, nothing to allocate.
  if (sameBoxes(region, srcBox) && sameBoxes(region, dstBox)) {
    let run = 1;
    for (let d = 0; d < n; d++) run *= region.sizes[d]!;
    return { src: AT_ORIGIN, dst: AT_ORIGIN, run };
  }
  // k: first dimension of the merged run; dimensions after k are spanned in full by region, src and dst.
  let k = n - 1;
  while (k > 0 && region.sizes[k] === srcBox.sizes[k] && region.sizes[k] === dstBox.sizes[k]) k--;
  if (n === 0) return { src: Float64Array.of(0), dst: Float64Array.of(0), run: 1 };
  let run = 1;
  for (let d = k; d < n; d++) run *= region.sizes[d]!;
  const srcStrides = strides(srcBox.sizes);
  const dstStrides = strides(dstBox.sizes);
  let rows = 1;
  for (let d = 0; d < k; d++) rows *= region.sizes[d]!;
  const src = new Float64Array(rows);
  const dst = new Float64Array(rows);
  const index = new Array<number>(k).fill(0);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    let t = 0;
    for (let d = 0; d < n; d++) {
      const at = region.offsets[d]! + (d < k ? index[d]! : 0);
      s += (at - srcBox.offsets[d]!) * srcStrides[d]!;
      t += (at - dstBox.offsets[d]!) * dstStrides[d]!;
    }
    src[r] = s;
    dst[r] = t;
    for (let d = k - 1; d >= 0; d--) {
      if (++index[d]! < region.sizes[d]!) break;
      index[d] = 0;
    }
  }
  return { src, dst, run };
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

/**
 * Copies the rows of `layout` from a piece of the source buffer into `dst`. The piece holds the
 * source's bytes `[pieceStart, pieceStart + piece.byteLength)`; only the parts of rows inside
 * it are copied, so a large chunk can be read and copied in several pieces.
 */
export function copyRows(
  layout: RowLayout,
  itemSize: number,
  piece: Uint8Array,
  pieceStart: number,
  dst: Uint8Array,
): void {
  const pieceEnd = pieceStart + piece.byteLength;
  const runBytes = layout.run * itemSize;
  for (let r = 0; r < layout.src.length; r++) {
    const rowStart = layout.src[r]! * itemSize;
    const rowEnd = rowStart + runBytes;
    if (rowEnd <= pieceStart) continue;
    if (rowStart >= pieceEnd) break;
    const from = Math.max(rowStart, pieceStart);
    const to = Math.min(rowEnd, pieceEnd);
    dst.set(piece.subarray(from - pieceStart, to - pieceStart), layout.dst[r]! * itemSize + (from - rowStart));
  }
}

/** The source byte range `[start, end)` the rows of `layout` span. */
export function rowSpan(layout: RowLayout, itemSize: number): { start: number; end: number } {
  if (layout.src.length === 0) return { start: 0, end: 0 };
  return { start: layout.src[0]! * itemSize, end: (layout.src[layout.src.length - 1]! + layout.run) * itemSize };
}
