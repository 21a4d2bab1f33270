import { type Box, type RowLayout, rowLayout } from "../state/box.js";
import type { ChunkMetadata } from "../format/metadata.js";
import type { ReadItem } from "../plan/load-planner.js";
import type { KeyPath } from "../state/state-dict.js";

/** Largest piece of a chunk read straight into its destination (a multiple of any power-of-two block size). */
const DIRECT_READ_BYTES = 64 << 20;

/** Where a request's bytes go: a row-major host buffer holding `box` of the tensor, `itemSize` bytes an element. */
export interface ReadDestination {
  /** Its key, or key path, for errors (joined only when one names it). */
  readonly key: string | KeyPath;
  readonly box: Box;
  readonly buffer: Uint8Array;
  readonly itemSize: number;
}

/** A block-aligned slice of one chunk, and the read items it serves. */
export interface Piece {
  readonly chunk: ChunkMetadata;
  /** Absolute file offsets. */
  readonly start: number;
  readonly end: number;
  readonly consumers: readonly Consumer[];
}

/** One range read of a data file, covering neighbouring pieces. */
export interface RangeRead {
  readonly file: string;
  readonly start: number;
  end: number;
  readonly pieces: Piece[];
}

/**
 * Groups what each chunk must supply into block-aligned byte runs, row by row (so a column
 * slice reads only the blocks its rows touch, and every byte read can be verified), splits big
 * runs at the chunk's read size, and merges pieces of a file at most `gapBytes` apart into
 * single reads of at most `maxRead` bytes (a multiple of every chunk's block size).
 */
export function planRanges(
  items: readonly ReadItem[],
  destinations: readonly ReadDestination[],
  maxReadBytes: number,
  gapBytes: number,
): { ranges: RangeRead[]; maxRead: number } {
  // Who gets each chunk's bytes, and for chunks some item needs only part of, the block-aligned runs `[start, end, start, end…]` it needs.
  const byChunk = new Map<ChunkMetadata, Consumer[]>();
  let partRuns: Map<ChunkMetadata, number[]> | undefined;
  for (const item of items) {
    const destination = destinations[item.request]!;
    const { chunk } = item;
    const consumer = { item, layout: rowLayout(chunk, destination.box, item.region) };
    const consumers = byChunk.get(chunk);
    if (consumers) consumers.push(consumer);
    else byChunk.set(chunk, [consumer]);
    // The whole chunk (every unsharded tensor): one run, no row layout to compute.
    if (sameBox(item.region, chunk)) continue;
    partRuns ??= new Map();
    const runs = partRuns.get(chunk) ?? [];
    partRuns.set(chunk, runs);
    const source = rowLayout(chunk, chunk, item.region);
    const runBytes = source.run * destination.itemSize;
    for (let r = 0; r < source.src.length; r++) {
      const start = source.src[r]! * destination.itemSize;
      runs.push(
        Math.floor(start / chunk.blockSize) * chunk.blockSize,
        Math.min(chunk.byteLength, Math.ceil((start + runBytes) / chunk.blockSize) * chunk.blockSize),
      );
    }
  }
  // Pieces by file, each file's list in the order of its offsets (sorted only where the items were not).
  const byFile = new Map<string, Piece[]>();
  let maxRead = maxReadBytes;
  for (const [chunk, consumers] of byChunk) {
    const block = chunk.blockSize;
    const chunkRead = Math.max(block, Math.floor(maxReadBytes / block) * block);
    maxRead = Math.max(maxRead, chunkRead);
    // A chunk landing in one contiguous run of one destination is read straight into it, needing
    // no buffer: it can be read in bigger pieces, which the kernel serves as longer sequential reads.
    const direct = consumers.length === 1 && consumers[0]!.layout.src.length === 1;
    const step = direct ? Math.max(chunkRead, Math.floor(DIRECT_READ_BYTES / block) * block) : chunkRead;
    let pieces = byFile.get(chunk.file);
    if (!pieces) {
      pieces = [];
      byFile.set(chunk.file, pieces);
    }
    const part = partRuns?.get(chunk);
    if (part === undefined || consumers.some((c) => sameBox(c.item.region, chunk))) {
      pushPieces(pieces, chunk, consumers, 0, chunk.byteLength, step);
      continue;
    }
    const runs = mergedRuns(part, consumers.length > 1);
    for (let r = 0; r < runs.length; r += 2) pushPieces(pieces, chunk, consumers, runs[r]!, runs[r + 1]!, step);
  }
  const ranges: RangeRead[] = [];
  for (const file of [...byFile.keys()].sort()) {
    const pieces = byFile.get(file)!;
    if (!inOrder(pieces)) pieces.sort((a, b) => a.start - b.start);
    for (const piece of pieces) {
      const last = ranges[ranges.length - 1];
      if (
        last &&
        last.file === file &&
        piece.start >= last.end &&
        piece.start - last.end <= gapBytes &&
        piece.end - last.start <= maxRead
      ) {
        last.end = piece.end;
        last.pieces.push(piece);
      } else {
        ranges.push({ file, start: piece.start, end: piece.end, pieces: [piece] });
      }
    }
  }
  return { ranges, maxRead };
}

/** A read item and where its rows go. */
interface Consumer {
  readonly item: ReadItem;
  readonly layout: RowLayout;
}

/** Pieces of at most `step` bytes covering `[start, end)` of `chunk`. */
function pushPieces(
  pieces: Piece[],
  chunk: ChunkMetadata,
  consumers: readonly Consumer[],
  start: number,
  end: number,
  step: number,
): void {
  for (let at = start; at < end; at += step)
    pieces.push({ chunk, start: chunk.byteOffset + at, end: chunk.byteOffset + Math.min(end, at + step), consumers });
}

function inOrder(pieces: readonly Piece[]): boolean {
  for (let i = 1; i < pieces.length; i++) if (pieces[i]!.start < pieces[i - 1]!.start) return false;
  return true;
}

function sameBox(a: Box, b: Box): boolean {
  for (let d = 0; d < a.sizes.length; d++) if (a.sizes[d] !== b.sizes[d] || a.offsets[d] !== b.offsets[d]) return false;
  return true;
}

/** Flat `[start, end, start, end…]` runs merged where they overlap or touch, in order (sorted first if `unsorted`), flat again. */
function mergedRuns(flat: readonly number[], unsorted: boolean): number[] {
  let runs: [number, number][] = [];
  for (let i = 0; i < flat.length; i += 2) runs.push([flat[i]!, flat[i + 1]!]);
  if (unsorted) runs = runs.sort((a, b) => a[0] - b[0]);
  const merged: number[] = [];
  for (const [start, end] of runs) {
    if (merged.length > 0 && start <= merged[merged.length - 1]!)
      merged[merged.length - 1] = Math.max(merged[merged.length - 1]!, end);
    else merged.push(start, end);
  }
  return merged;
}

/** The destination bytes a range can be read straight into: one piece, one consumer, landing in one contiguous run. */
export function directTarget(range: RangeRead, destinations: readonly ReadDestination[]): Uint8Array | undefined {
  return range.pieces.length === 1 ? pieceTarget(range.pieces[0]!, destinations) : undefined;
}

/** The destination bytes a piece can be read straight into: it has one consumer, and lands in one contiguous run of it. */
function pieceTarget(piece: Piece, destinations: readonly ReadDestination[]): Uint8Array | undefined {
  if (piece.consumers.length !== 1) return undefined;
  const { item, layout } = piece.consumers[0]!;
  if (layout.src.length !== 1) return undefined;
  const destination = destinations[item.request]!;
  const rowStart = layout.src[0]! * destination.itemSize;
  const rowEnd = rowStart + layout.run * destination.itemSize;
  const start = piece.start - item.chunk.byteOffset;
  const end = piece.end - item.chunk.byteOffset;
  if (start < rowStart || end > rowEnd) return undefined;
  const at = layout.dst[0]! * destination.itemSize + (start - rowStart);
  return destination.buffer.subarray(at, at + (end - start));
}

/** For a range of several pieces with no gaps between them, each piece's destination bytes, or undefined if any has none. */
export function scatterTargets(range: RangeRead, destinations: readonly ReadDestination[]): Uint8Array[] | undefined {
  if (range.pieces.length < 2) return undefined;
  const parts: Uint8Array[] = [];
  let end = range.start;
  for (const piece of range.pieces) {
    const part = piece.start === end ? pieceTarget(piece, destinations) : undefined;
    if (!part) return undefined;
    parts.push(part);
    end = piece.end;
  }
  return parts;
}
