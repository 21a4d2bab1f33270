import { arrayConstructorFor, byteSize } from "../state/dtypes.js";
import { yieldToEventLoop } from "#platform/runtime.js";
import { throwIfAborted } from "../errors.js";
import { type Leaf, type StagedPlace, tensorBytes } from "../state/leaf.js";
import type { StagingPool } from "./staging-pool.js";
import type { HostTensor } from "../state/tensors.js";
import {
  type Cloneable,
  type StagingLayout,
  type StagingStrategy,
  heldByReference,
  stagingPlan,
} from "./staging-plan.js";

/** A snapshot of a state dict's leaves that training can no longer change. */
export interface StagedLeaves {
  readonly leaves: Leaf[];
  /** Bytes of tensors and blobs copied into staging buffers. */
  readonly copiedBytes: number;
  /** Seconds this thread spent copying them (the memcpy alone, not reading tensors or waiting between pieces). */
  readonly copySeconds: number;
  /** Gives the buffers back to the pool and drops the tensor clones; call once the upload has ended. */
  release(): void;
  /** Drops the tensor clones alone, freeing their (device) memory, once nothing will read them (their bytes were copied). */
  dropReferences(): void;
}

/**
 * Snapshots leaves for a background save. Tensor values are read through `data()`, the path a
 * GPU backend needs; nothing assumes they are already on the host.
 *
 * With `layout` (the default planner's), copies are staged as the data files will be laid out:
 * each file's header and items back to back in one page-aligned segment, from which the upload
 * writes the file without copying it again (file:// writes it past the page cache, straight
 * from the segment). Leaves in no such segment get buffers of their own.
 */
export async function stageLeaves(
  leaves: readonly Leaf[],
  strategy: StagingStrategy,
  pool: StagingPool,
  signal?: AbortSignal,
  layout?: StagingLayout,
): Promise<StagedLeaves> {
  return (await stage(leaves, strategy, pool, { signal, layout }))!;
}

/**
 * Copies leaves held by reference into the pool in the background, as copy staging would have,
 * a slice per event-loop turn (see PACE_SHARE), so a training loop that yields once per step
 * loses only a share of each step to it. Undefined, copying nothing, when the copies do not fit
 * the pool's budget beside the buffers in use now.
 */
export function copyInBackground(
  leaves: readonly Leaf[],
  pool: StagingPool,
  signal?: AbortSignal,
  layout?: StagingLayout,
): Promise<StagedLeaves | undefined> {
  return stage(leaves, "copy", pool, { signal, layout, paced: true });
}

/**
 * A background copy works, in each event-loop turn, for this share of the time the thread spent
 * elsewhere (training) since its last turn, then yields: about 11 ms of a 110 ms step. On an
 * idle loop turns follow at once, so it copies at nearly full speed.
 */
const PACE_SHARE = 0.1;
/** A background copy checks the time after each piece of this many bytes (well under a ms). */
const PACE_PIECE = 4 << 20;

/** Yields to the event loop whenever this turn's share of work is done. */
class Pace {
  #until = 0;

  /** Yields, then sets this turn's share from how long the thread was away. */
  async yield(): Promise<void> {
    const yielded = performance.now();
    await yieldToEventLoop();
    const resumed = performance.now();
    this.#until = resumed + (resumed - yielded) * PACE_SHARE;
  }

  async tick(): Promise<void> {
    if (performance.now() >= this.#until) await this.yield();
  }
}

/**
 * Copies `source` into `target`, in pieces between which `pace` may yield; returns the
 * milliseconds this thread spent copying (not waiting between pieces).
 */
async function copyInto(target: Uint8Array, source: Uint8Array, pace: Pace | undefined): Promise<number> {
  let ms = 0;
  for (let at = 0; at < source.byteLength; at += pace ? PACE_PIECE : source.byteLength) {
    const started = performance.now();
    target.set(pace ? source.subarray(at, at + PACE_PIECE) : source, at);
    ms += performance.now() - started;
    await pace?.tick();
  }
  return ms;
}

/**
 * Readies in `pool` the buffers a later `stageLeaves` of leaves shaped like these will take
 * (same strategy and layout): allocated now and made resident by another thread, so that save
 * pays no page faults. Reads no tensor data and holds no leaf.
 */
export function prepareStaging(
  leaves: readonly Leaf[],
  strategy: StagingStrategy,
  pool: StagingPool,
  layout?: StagingLayout,
): Promise<void> {
  const { segments, sizes } = stagingPlan(leaves, strategy, layout, pool);
  return pool.prepare(
    sizes,
    segments.map(() => true),
  );
}

async function stage(
  leaves: readonly Leaf[],
  strategy: StagingStrategy,
  pool: StagingPool,
  options: { signal?: AbortSignal; layout?: StagingLayout; paced?: boolean },
): Promise<StagedLeaves | undefined> {
  const { signal, layout } = options;
  const pace = options.paced === true ? new Pace() : undefined;
  // Background work starts in a turn of its own: working out the layout of thousands of tensors
  // takes milliseconds, which must not hold up whatever the caller does next (saveAsync's return).
  await pace?.yield();
  const { segments, placed, sizes, copiedBytes } = stagingPlan(leaves, strategy, layout, pool);
  const byReference = (leaf: Leaf): boolean => heldByReference(leaf, strategy);
  // Never waits for buffers: those it would wait for may be held by this very save, or by saves queued behind it.
  if (options.paced === true && pool.inUseBytes + sizes.reduce((a, b) => a + b, 0) > pool.maxBytes) return undefined;
  const buffers = await pool.acquire(
    sizes,
    signal,
    segments.map(() => true),
  );
  const clones: { dispose(): void }[] = [];
  const dropReferences = (): void => {
    for (const clone of clones.splice(0)) clone.dispose();
  };
  const release = (): void => {
    pool.release(buffers);
    dropReferences();
  };
  try {
    segments.forEach((s, k) => buffers[k]!.set(s.layout.header));
    let next = segments.length;
    let copyMs = 0;
    /** The staging buffer for a leaf of `bytes` bytes: its place in a segment, or a buffer of its own. */
    const target = (index: number, bytes: number): Uint8Array => {
      const place = placed.get(index);
      return place ? buffers[place.segment]!.subarray(place.offset, place.offset + bytes) : buffers[next++]!;
    };
    /** A staged leaf's place in its planned file, which the write takes as the file's memory (none: its own buffer). */
    const placeOf = (index: number): StagedPlace | undefined => {
      const place = placed.get(index);
      return place && { segment: place.segment, index: place.index, count: place.count };
    };
    /**
     * tfjs tensors' bytes, the next one's `data()` started while this one is copied: a device
     * backend downloads it meanwhile, and at most one tensor is read ahead.
     */
    const reads = new Map<number, Promise<Uint8Array>>();
    const readAhead = (from: number): void => {
      let next = from;
      while (next < leaves.length && (leaves[next]!.kind !== "tensor" || byReference(leaves[next]!))) next++;
      const leaf = leaves[next];
      if (leaf?.kind !== "tensor" || leaf.source.kind !== "tfjs" || reads.has(next)) return;
      const read = tensorBytes(leaf);
      // Awaited in its turn; handled now, so a staging that fails first leaves no unhandled rejection.
      read.catch(() => undefined);
      reads.set(next, read);
    };
    const staged: Leaf[] = [];
    for (const [index, leaf] of leaves.entries()) {
      throwIfAborted(signal, pace ? "the save (copying held tensors in the background)" : "staging");
      if (leaf.kind === "value") {
        staged.push(leaf);
      } else if (leaf.kind === "bytes") {
        const buffer = target(index, leaf.data.byteLength);
        copyMs += await copyInto(buffer, leaf.data, pace);
        staged.push({ kind: "bytes", path: leaf.path, data: buffer, staged: placeOf(index) });
      } else if (byReference(leaf)) {
        const clone = (leaf.source.tensor as Cloneable).clone();
        clones.push(clone);
        staged.push({ ...leaf, source: { kind: "tfjs", tensor: clone }, staged: undefined });
      } else {
        const buffer = target(index, byteSize(leaf.dtype, leaf.shape));
        const bytes = reads.get(index) ?? tensorBytes(leaf);
        reads.delete(index);
        readAhead(index + 1);
        copyMs += await copyInto(buffer, await bytes, pace);
        const data = new (arrayConstructorFor(leaf.dtype))(
          buffer.buffer,
          buffer.byteOffset,
          buffer.byteLength / arrayConstructorFor(leaf.dtype).BYTES_PER_ELEMENT,
        );
        const tensor = { dtype: leaf.dtype, shape: leaf.shape, data } as HostTensor;
        staged.push({ ...leaf, source: { kind: "host", tensor }, staged: placeOf(index) });
      }
    }
    return { leaves: staged, copiedBytes, copySeconds: copyMs / 1000, release, dropReferences };
  } catch (error) {
    release();
    throw error;
  }
}
