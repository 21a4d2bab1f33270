import { arrayConstructorFor, bytesOf } from "../state/dtypes.js";
import { yieldToEventLoop } from "#platform/runtime.js";
import { copyBytes } from "#platform/stage/copy-bytes.js";
import { throwIfAborted } from "../errors.js";
import { type Leaf, disposedBeforeSaved, invalid, readFailed, whereKey } from "../state/leaf.js";
import type { StagingPool } from "./staging-pool.js";
import { type HostTensor, type TensorLike, checkHostData } from "../state/tensors.js";
import {
  type Cloneable,
  type Slot,
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
  /**
   * Seconds this thread spent copying them in the background (`copyInBackground`: the memcpy alone,
   * not reading tensors or waiting between pieces); 0 for `stageLeaves`, whose copies are not timed.
   */
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
 * Copies `source` into `target` at `offset`, in pieces between which `pace` yields; returns the
 * milliseconds this thread spent copying (not waiting between pieces).
 */
async function copyInto(target: Uint8Array, offset: number, source: Uint8Array, pace: Pace): Promise<number> {
  let ms = 0;
  for (let at = 0; at < source.byteLength; at += PACE_PIECE) {
    const started = performance.now();
    copyBytes(target, offset + at, source.subarray(at, at + PACE_PIECE));
    ms += performance.now() - started;
    await pace.tick();
  }
  return ms;
}

/** A tfjs read that failed: kept as a value, so a read started ahead and never awaited rejects nothing. */
class ReadFailure {
  constructor(readonly cause: unknown) {}
}

type ReadResult = ArrayBufferView | ReadFailure;

/** Starts reading a tfjs tensor's values through `data()`, the path a device backend needs; never rejects. */
function startRead(tensor: TensorLike): Promise<ReadResult> {
  if (tensor.isDisposed === true) return Promise.resolve(new ReadFailure(DISPOSED));
  try {
    // Promise.resolve returns a native promise itself; a tensor-like whose data() returns values works too.
    return Promise.resolve(tensor.data()).then(undefined, (cause: unknown) => new ReadFailure(cause));
  } catch (cause) {
    return Promise.resolve(new ReadFailure(cause));
  }
}

const DISPOSED = Symbol("disposed");

/** The bytes a read of `leaf` gave, checked against its dtype and shape; throws what the read failed with. */
function checkedBytes(leaf: Extract<Leaf, { kind: "tensor" }>, read: ReadResult): Uint8Array {
  if (read instanceof ReadFailure) {
    if (read.cause === DISPOSED) throw disposedBeforeSaved(leaf.path);
    throw readFailed(leaf.path, read.cause);
  }
  checkHostData(leaf.dtype, leaf.shape, read, whereKey(leaf.path));
  return bytesOf(read);
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

/** The next leaf from `from` on that a copy reads through `data()`; none when the next copied tensor is a host tensor. */
function nextRead(
  leaves: readonly Leaf[],
  from: number,
  strategy: StagingStrategy,
): { readonly index: number; readonly tensor: TensorLike } | undefined {
  for (let index = from; index < leaves.length; index++) {
    const leaf = leaves[index]!;
    if (leaf.kind !== "tensor" || heldByReference(leaf, strategy)) continue;
    return leaf.source.kind === "tfjs" ? { index, tensor: leaf.source.tensor } : undefined;
  }
  return undefined;
}

/** Where the plan puts a leaf's bytes; never past its place (a blob resized meanwhile would overwrite its neighbours). */
function slotFor(slots: readonly (Slot | undefined)[], leaf: Leaf, index: number, bytes: Uint8Array): Slot {
  const slot = slots[index]!;
  if (bytes.byteLength !== slot.bytes)
    throw invalid(leaf.path, `its data changed size while being staged (${slot.bytes} bytes, now ${bytes.byteLength})`);
  return slot;
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
  const { segments, slots, sizes, copiedBytes } = stagingPlan(leaves, strategy, layout, pool);
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
    let copyMs = 0;
    /**
     * The tfjs tensor read ahead (its `data()` started while the one before is copied: a device
     * backend downloads it meanwhile); at most one.
     */
    let aheadIndex = -1;
    let aheadRead: Promise<ReadResult> | undefined;
    const staged: Leaf[] = [];
    // The loop calls no closure made per call: V8's optimized code for it would hold that closure
    // weakly, be thrown away once it dies, and be compiled again, on another core, every save.
    for (let index = 0; index < leaves.length; index++) {
      const leaf = leaves[index]!;
      throwIfAborted(signal, pace ? "the save (copying held tensors in the background)" : "staging");
      if (leaf.kind === "value") {
        staged.push(leaf);
      } else if (leaf.kind === "bytes") {
        const slot = slotFor(slots, leaf, index, leaf.data);
        const buffer = buffers[slot.buffer]!;
        if (pace) copyMs += await copyInto(buffer, slot.offset, leaf.data, pace);
        else copyBytes(buffer, slot.offset, leaf.data);
        const data = buffer.subarray(slot.offset, slot.offset + leaf.data.byteLength);
        staged.push({ kind: "bytes", path: leaf.path, data, staged: slot.place });
      } else if (heldByReference(leaf, strategy)) {
        const clone = (leaf.source.tensor as Cloneable).clone();
        clones.push(clone);
        staged.push({ ...leaf, source: { kind: "tfjs", tensor: clone }, staged: undefined });
      } else {
        let bytes: Uint8Array;
        if (leaf.source.kind === "host") bytes = bytesOf(leaf.source.tensor.data);
        else {
          const read = aheadIndex === index ? aheadRead! : startRead(leaf.source.tensor);
          const next = nextRead(leaves, index + 1, strategy);
          if (next !== undefined && next.index !== aheadIndex) {
            aheadIndex = next.index;
            aheadRead = startRead(next.tensor);
          }
          bytes = checkedBytes(leaf, await read);
        }
        // One copy into the target (libc's memcpy or `set`: copy-bytes.ts) and no promise unless
        // paced: with thousands of small tensors, each allocation per leaf shows in the time a save blocks.
        const slot = slotFor(slots, leaf, index, bytes);
        const buffer = buffers[slot.buffer]!;
        if (pace) copyMs += await copyInto(buffer, slot.offset, bytes, pace);
        else copyBytes(buffer, slot.offset, bytes);
        const array = arrayConstructorFor(leaf.dtype);
        const data = new array(
          buffer.buffer,
          buffer.byteOffset + slot.offset,
          bytes.byteLength / array.BYTES_PER_ELEMENT,
        );
        // Built field by field: a spread of the leaf costs several times more.
        staged.push({
          kind: "tensor",
          path: leaf.path,
          dtype: leaf.dtype,
          shape: leaf.shape,
          source: { kind: "host", tensor: { dtype: leaf.dtype, shape: leaf.shape, data } as HostTensor },
          shard: leaf.shard,
          staged: slot.place,
        });
      }
    }
    return { leaves: staged, copiedBytes, copySeconds: copyMs / 1000, release, dropReferences };
  } catch (error) {
    release();
    throw error;
  }
}
