// A data file copied, on the main thread, into reused page-aligned shared memory a window of a
// few MiB at a time, laid out as the file: file:// writes each window from there in place
// (O_DIRECT, no copy of its own) and the checksum workers hash it there on another core. Each
// byte is copied once; the window goes back to the pool once it is written and hashed (its last
// partial page, which the next window starts with, is copied out first). Windows of every file
// a process writes share one budget.
import { regionChecksumsAsync } from "#platform/save/checksum-workers.js";
import type { RegionChecksums } from "./checksums-here.js";
import { giveBackWindowMemory, takeWindowMemory } from "./window-memory.js";
import { ByteBudget } from "../storage/byte-budget.js";
import { CheckpointError, throwIfAborted } from "../errors.js";
import { type Leaf, tensorBytes } from "../state/leaf.js";
import { type TypedArray, bytesOf } from "../state/dtypes.js";
import { displayKey } from "../state/state-dict.js";
import type { SafetensorsLayout } from "../format/safetensors.js";
import type { WriteItem } from "../plan/save-planner.js";
import type { WriteOptions } from "../storage/storage-adapter.js";

/** File offsets of window boundaries are multiples of this (direct I/O's alignment). */
const PAGE = 4096;
/** Item bytes per window where the storage reports its progress (`StorageAdapter.reportsWritten`). */
export const WINDOW_BYTES = 8 << 20;
/**
 * Bytes of windows (`WINDOW_BYTES` and a page each) all files being written at once hold together: packed,
 * being hashed or written. File writes run on libuv's four threads, so at most four of a save's
 * writes run at a time: this keeps about two windows a file for a save's four files instead of
 * four, which still queues more 4 MiB writes than run, and halves the fresh memory a process's
 * first save touches (docs/benchmarks.md, local34e).
 */
const WINDOWS_IN_FLIGHT_BYTES = 8 * (WINDOW_BYTES + PAGE);
const windowBudget = new ByteBudget(WINDOWS_IN_FLIGHT_BYTES);
/** Packed bytes are sent to the checksum workers in batches of about this many, so hashing overlaps packing. */
const HASH_BATCH_BYTES = 4 << 20;

/** Bytes `from` to `to` of item `item`: a whole item, or (of an item larger than a window) a run of its blocks. */
interface Piece {
  readonly item: number;
  readonly from: number;
  readonly to: number;
}

/** A window of the file: memory offset 0 is file offset `start`; it holds the file up to `end`, and its part of the body ends at `cut`. */
interface WindowPlan {
  readonly start: number;
  readonly end: number;
  readonly cut: number;
  readonly pieces: readonly Piece[];
}

/**
 * The file cut into windows of about `windowBytes`, each starting where the one before stops
 * sending (a page boundary), so every window but the last goes out as whole pages. The header
 * is in the first. Items smaller than a window stay whole; bigger ones are cut on their block
 * boundaries, so each piece's block CRC32Cs are the item's.
 */
export function planWindows(
  items: readonly WriteItem[],
  layout: SafetensorsLayout,
  blockSizes: readonly number[],
  windowBytes: number,
): WindowPlan[] {
  const windows: WindowPlan[] = [];
  let start = 0;
  let end = layout.header.byteLength;
  let pieces: Piece[] = [];
  const close = (): void => {
    const cut = Math.floor(end / PAGE) * PAGE;
    windows.push({ start, end, cut, pieces });
    start = cut;
    pieces = [];
  };
  items.forEach((item, i) => {
    const length = item.byteLength;
    const blockSize = blockSizes[i]!;
    const split = length > windowBytes - PAGE;
    if (length === 0) pieces.push({ item: i, from: 0, to: 0 });
    for (let from = 0; from < length;) {
      const rest = length - from;
      // A big item's window holds windowBytes of blocks beside the carried partial page, so where
      // the header is under a page, its cuts fall on multiples of windowBytes (whole 4 MiB writes).
      const room = start + windowBytes - end + (split ? PAGE : 0);
      let take = rest <= room ? rest : split ? Math.floor(Math.max(0, room) / blockSize) * blockSize : 0;
      // An empty window always takes something: a small item whole, at least a block of a big one.
      if (take === 0 && pieces.length === 0) take = split ? Math.min(rest, blockSize) : rest;
      if (take > 0) {
        pieces.push({ item: i, from, to: from + take });
        end += take;
        from += take;
      }
      if (from < length) close();
    }
  });
  windows.push({ start, end, cut: layout.fileSize, pieces });
  return windows;
}

type TypedArrayType = {
  new (buffer: ArrayBufferLike, offset: number, length: number): TypedArray;
  readonly BYTES_PER_ELEMENT: number;
};
/** The built-in typed arrays by prototype: copying one into a view of its own type copies its bytes as they are. */
const ELEMENT_TYPES = new Map<object, TypedArrayType>(
  [
    Int8Array,
    Uint8Array,
    Int16Array,
    Uint16Array,
    Int32Array,
    Uint32Array,
    Float32Array,
    Float64Array,
    BigInt64Array,
    BigUint64Array,
  ].map((type) => [type.prototype, type as unknown as TypedArrayType]),
);

/** An item's bytes: a view where they are on the host (no promise per tensor), else read from tfjs; checked against the plan's size. */
export function itemBytes(item: WriteItem, leaf: Leaf): Uint8Array | Promise<Uint8Array> {
  if (leaf.kind === "bytes") return sized(item, leaf.data);
  if (leaf.kind !== "tensor") return sized(item, undefined);
  if (leaf.source.kind === "host") return sized(item, bytesOf(leaf.source.tensor.data));
  return tensorBytes(leaf).then((data) => sized(item, data));
}

function sized(item: WriteItem, data: Uint8Array | undefined): Uint8Array {
  if (!data || data.byteLength !== item.byteLength) {
    throw new CheckpointError(
      "invalid_argument",
      `state dict key ${displayKey(item.key)} changed size while it was being saved`,
      { context: { key: displayKey(item.key) } },
    );
  }
  return data;
}

/**
 * What a windowed write computed: each item's block CRC32Cs and (unless hashing is off) content
 * hash, for items not `known`. The hashes stay bytes: a hex string per item kept alive through the
 * save cost it a scavenge or two at 100k items (docs/benchmarks.md, hash34e).
 */
export interface WindowedChecksums {
  readonly sums: (readonly number[] | undefined)[];
  /** 1 where item i was hashed (its digest is in `digests`), 0 where not (known, or hashing off). */
  readonly hashed: Uint8Array;
  /** Item i's content hash as bytes at 16 * i; where it has none, zeros. */
  readonly digests: Uint8Array;
}

/** A window's memory while an attempt uses it: given back (and its budget freed) once written and hashed. */
interface Held {
  readonly memory: Uint8Array;
  readonly holds: Set<"written" | "hashed">;
  readonly release: () => void;
}

function drop(held: Held, what: "written" | "hashed"): void {
  if (held.holds.delete(what) && held.holds.size === 0) {
    giveBackWindowMemory(held.memory);
    held.release();
  }
}

/** One attempt at the storage's write of a body, told where to report its progress. */
export type WindowWrite = (body: AsyncIterable<Uint8Array>, progress: Pick<WriteOptions, "onWritten">) => Promise<void>;

let nextStream = 1;
let nextAffinity = 0;

/**
 * Writes one data file through windows (see the top of this file). `write` is one attempt at
 * the storage's write of the body it is given, with `onWritten` for its progress; it is called
 * again for a retry, which packs the file again. Resolves once the write succeeded and every
 * window is back in the pool; `todo` says which items to hash (the others' checksums are known).
 */
export async function writeThroughWindows(
  items: readonly WriteItem[],
  leaves: readonly Leaf[],
  layout: SafetensorsLayout,
  blockSizes: readonly number[],
  windowBytes: number,
  todo: (item: number) => boolean,
  signal: AbortSignal | undefined,
  /** Runs `attempt` (with retries): each attempt calls `write` once. */
  attempts: (attempt: (write: WindowWrite) => Promise<void>) => Promise<void>,
  /**
   * Called once, as soon as an attempt has hashed every window, usually while the write is still
   * going: what the save's metadata needs, so it can be encoded beside the write. Should a retry
   * then hash other bytes (the state changed), the write rejects.
   */
  onHashed?: (checksums: WindowedChecksums) => void,
): Promise<WindowedChecksums> {
  const windows = planWindows(items, layout, blockSizes, windowBytes);
  // file://'s windows share the budget; one window of a whole packed file (other storages) does not.
  const budgeted = windowBytes <= WINDOW_BYTES;
  // One worker hashes all of a file's windows, in order: a big item's pieces continue one stream.
  const affinity = nextAffinity++;
  /** Every packing and hashing of every attempt: all settle before the memory goes back. */
  const started: Promise<unknown>[] = [];
  let hashing: Promise<{ window: number; regions: Piece[]; result: RegionChecksums }[]>[] = [];
  /** The current attempt's checksums, once it has packed its last window. */
  let attemptHashed: Promise<WindowedChecksums> | undefined;
  /** What `onHashed` was given (the first attempt to hash every window): a later attempt must hash the same. */
  let published: WindowedChecksums | undefined;
  const collect = (results: { regions: Piece[]; result: RegionChecksums }[]): WindowedChecksums => {
    const sums: (number[] | undefined)[] = new Array(items.length);
    const hashed = new Uint8Array(items.length);
    const digests = new Uint8Array(16 * items.length);
    for (const { regions, result } of results) {
      const got = result.hashes;
      let at = 0;
      // Digests of items in a row at regions in a row (a batch of whole items) are copied as one run.
      let runItem = 0;
      let runRegion = 0;
      let run = 0;
      const flush = (): void => {
        if (run === 0 || !got) return;
        digests.set(got.subarray(16 * runRegion, 16 * (runRegion + run)), 16 * runItem);
        hashed.fill(1, runItem, runItem + run);
        run = 0;
      };
      for (let r = 0; r < regions.length; r++) {
        const { item, from, to } = regions[r]!;
        const count = Math.ceil((to - from) / blockSizes[item]!);
        const own = sums[item];
        if (own) for (let c = 0; c < count; c++) own.push(result.sums[at++]!);
        else {
          // Of the length it needs: a first push would reserve 17 elements, for a sum or two.
          const exact = new Array<number>(count);
          for (let c = 0; c < count; c++) exact[c] = result.sums[at++]!;
          sums[item] = exact;
        }
        if (to !== items[item]!.byteLength || !got) continue;
        if (run > 0 && item === runItem + run && r === runRegion + run) run++;
        else {
          flush();
          runItem = item;
          runRegion = r;
          run = 1;
        }
      }
      flush();
    }
    return { sums, hashed, digests };
  };
  const publish = (checksums: WindowedChecksums): void => {
    if (published) return;
    published = checksums;
    onHashed?.(checksums);
  };

  const attempt = async (write: WindowWrite): Promise<void> => {
    const held: Held[] = [];
    /** Each packed window's bytes past its cut. */
    const tails: Uint8Array[] = [];
    const packing: Promise<unknown>[] = [];
    const streams = new Map<number, number>();
    let ended = false;
    let released = 0;
    hashing = [];
    attemptHashed = undefined;
    const onWritten = (bytes: number): void => {
      while (!ended && released < held.length && windows[released]!.cut <= bytes) drop(held[released++]!, "written");
    };

    /** Copies window k in (the tail of window k - 1, then its pieces), hashing it in batches as it goes. */
    const pack = async (k: number): Promise<Held> => {
      throwIfAborted(signal, "the save");
      const plan = windows[k]!;
      // Waits for nothing held: a window never waits for another of its file to be packed.
      const release = budgeted ? await windowBudget.acquire(plan.end - plan.start, signal) : () => undefined;
      // file://'s windows in huge pages where there are any: such memory starts past its buffer's 0.
      const memory = takeWindowMemory(plan.end - plan.start, budgeted);
      const window: Held = { memory, holds: new Set(["written", "hashed"]), release };
      held[k] = window;
      const batches: Promise<{ window: number; regions: Piece[]; result: RegionChecksums }>[] = [];
      // Whatever happens, the window is hashed no more once every batch posted for it settled (not at the first failure).
      const hashedAll = (): void => {
        const settled = Promise.allSettled(batches).then(() => drop(window, "hashed"));
        started.push(settled);
      };
      try {
        memory.set(k === 0 ? layout.header : tails[k - 1]!, 0);
        let batch: Piece[] = [];
        let batchBytes = 0;
        const post = (): void => {
          const regions = batch;
          batch = [];
          batchBytes = 0;
          const starts = new Float64Array(regions.length);
          const lengths = new Float64Array(regions.length);
          const sizes = new Float64Array(regions.length);
          const streamIds = new Float64Array(regions.length);
          const flags = new Uint8Array(regions.length);
          let pieces = false;
          regions.forEach(({ item, from, to }, r) => {
            starts[r] = memory.byteOffset + layout.offsets[item]! + from - plan.start;
            lengths[r] = to - from;
            sizes[r] = blockSizes[item]!;
            const length = items[item]!.byteLength;
            if (from === 0 && to === length) return;
            pieces = true;
            if (from === 0) streams.set(item, nextStream++);
            streamIds[r] = streams.get(item)!;
            flags[r] = (from === 0 ? 1 : 0) | (to === length ? 2 : 0);
          });
          const result = regionChecksumsAsync(
            memory.buffer as SharedArrayBuffer,
            starts,
            lengths,
            sizes,
            undefined,
            pieces ? { streamIds, flags, affinity } : undefined,
          ).then((r) => ({ window: k, regions, result: r }));
          result.catch(() => undefined);
          batches.push(result);
        };
        const views = new Map<TypedArrayType, TypedArray>();
        let current: { item: number; data: Uint8Array } | undefined;
        // An index loop: run before V8 optimizes it, a for-of makes an iterator result per piece.
        for (let p = 0; p < plan.pieces.length; p++) {
          const piece = plan.pieces[p]!;
          const item = items[piece.item]!;
          const leaf = leaves[item.leafIndex]!;
          const at = layout.offsets[piece.item]! + piece.from - plan.start;
          const whole = piece.from === 0 && piece.to === item.byteLength;
          // A whole host tensor is copied by its own element type, without a byte view made for it.
          const typed =
            whole && leaf.kind === "tensor" && leaf.source.kind === "host" ? leaf.source.tensor.data : undefined;
          const type =
            typed && typed.byteLength === item.byteLength ? ELEMENT_TYPES.get(Object.getPrototypeOf(typed)) : undefined;
          // The view starts at the window's byteOffset (not its buffer's 0), which only suits every type at a multiple of 8.
          if (type && memory.byteOffset % 8 === 0 && at % type.BYTES_PER_ELEMENT === 0) {
            let view = views.get(type);
            if (!view)
              views.set(
                type,
                (view = new type(
                  memory.buffer,
                  memory.byteOffset,
                  Math.floor(memory.byteLength / type.BYTES_PER_ELEMENT),
                )),
              );
            view.set(typed as never, at / type.BYTES_PER_ELEMENT);
          } else {
            // A big item's pieces come one after another: its bytes are read (from tfjs, maybe) once.
            if (current?.item !== piece.item) {
              const data = itemBytes(item, leaf);
              current = { item: piece.item, data: data instanceof Promise ? await data : data };
            }
            memory.set(whole ? current.data : current.data.subarray(piece.from, piece.to), at);
          }
          if (todo(piece.item)) {
            batch.push(piece);
            batchBytes += piece.to - piece.from;
            if (batchBytes >= HASH_BATCH_BYTES) post();
          }
        }
        if (batch.length > 0) post();
        // The partial page past the cut, which window k + 1 starts with: under a page, copied out.
        if (k + 1 < windows.length) tails[k] = memory.slice(plan.cut - plan.start, plan.end - plan.start);
      } catch (error) {
        hashedAll();
        throw error;
      }
      const hashed = Promise.all(batches);
      hashed.catch(() => undefined);
      hashing[k] = hashed;
      hashedAll();
      // The last window packed: this attempt's checksums are all on their way.
      if (k === windows.length - 1) {
        attemptHashed = Promise.all(hashing).then((results) => collect(results.flat()));
        attemptHashed.then(publish, () => undefined);
      }
      return window;
    };

    const track = <T>(promise: Promise<T>): Promise<T> => {
      packing.push(promise);
      started.push(promise);
      promise.catch(() => undefined);
      return promise;
    };
    const body = async function* (): AsyncGenerator<Uint8Array> {
      let next = track(pack(0));
      for (let k = 0; k < windows.length; k++) {
        const window = await next;
        if (k + 1 < windows.length) {
          // The next window is packed beside this one's write, once the one before this is hashed:
          // that bounds the memory packed ahead of its hashing.
          const before = k >= 1 ? hashing[k - 1] : undefined;
          next = track(before ? before.then(() => pack(k + 1)) : pack(k + 1));
        }
        const plan = windows[k]!;
        if (plan.cut > plan.start) yield window.memory.subarray(0, plan.cut - plan.start);
      }
    };
    try {
      await write(body(), { onWritten });
    } finally {
      // The write settled, so the storage reads none of it any more; nor may a window still be packed.
      ended = true;
      await Promise.allSettled(packing);
      for (const window of held) if (window) drop(window, "written");
    }
  };

  try {
    await attempts(attempt);
    // Set: the attempt that succeeded packed every window.
    const final = await attemptHashed!;
    if (published && published !== final && !sameChecksums(published, final))
      throw new CheckpointError(
        "invalid_argument",
        "the state dict changed while it was being saved: a data file written again after a failed write hashed differently; nothing was committed",
      );
    publish(final);
    return published ?? final;
  } finally {
    await Promise.allSettled(started);
  }
}

function sameChecksums(a: WindowedChecksums, b: WindowedChecksums): boolean {
  if (a.sums.length !== b.sums.length) return false;
  for (let i = 0; i < a.sums.length; i++) {
    const x = a.sums[i];
    const y = b.sums[i];
    if (a.hashed[i] !== b.hashed[i] || x?.length !== y?.length) return false;
    if (x && y && x.some((sum, j) => sum !== y[j])) return false;
  }
  for (let k = 0; k < a.digests.length; k++) if (a.digests[k] !== b.digests[k]) return false;
  return true;
}
