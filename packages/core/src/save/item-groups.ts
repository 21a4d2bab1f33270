import type { WriteItem } from "../plan/save-planner.js";

/** Items are read and checksummed in groups of up to this many bytes (one item if larger). */
const GROUP_BYTES = 64 << 20;
/**
 * Runs of items smaller than this are copied into one buffer, so they go out in a single write:
 * on the main thread, where each write's completion may wait for a training step. Off it (the
 * upload worker) turns cost nothing, and the copy would only add memory traffic beside training.
 */
export const COALESCE_BELOW = 4 << 20;

/** Consecutive items of a file, each group at most GROUP_BYTES unless a single item is larger. */
export function groupItems(items: readonly WriteItem[]): number[][] {
  const groups: number[][] = [];
  let bytes = Infinity;
  items.forEach((item, i) => {
    if (bytes + item.byteLength > GROUP_BYTES) {
      groups.push([]);
      bytes = 0;
    }
    groups[groups.length - 1]!.push(i);
    bytes += item.byteLength;
  });
  return groups;
}

/** The parts' bytes one after another: the part itself when there is one. */
export function joinBytes(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const joined = new Uint8Array(parts.reduce((n, d) => n + d.byteLength, 0));
  let at = 0;
  for (const d of parts) {
    joined.set(d, at);
    at += d.byteLength;
  }
  return joined;
}

/** The group's bytes as few chunks: big items as they are, runs of small ones copied together (up to COALESCE_BELOW each). */
export function* coalesce(datas: readonly Uint8Array[]): Generator<Uint8Array> {
  let run: Uint8Array[] = [];
  let runBytes = 0;
  const flush = function* (): Generator<Uint8Array> {
    if (run.length > 0) yield joinBytes(run);
    run = [];
    runBytes = 0;
  };
  for (const data of datas) {
    if (data.byteLength >= COALESCE_BELOW) {
      yield* flush();
      yield data;
    } else {
      if (runBytes + data.byteLength > COALESCE_BELOW) yield* flush();
      run.push(data);
      runBytes += data.byteLength;
    }
  }
  yield* flush();
}
