import { arrayConstructorFor, byteSize } from "./dtypes.js";
import { CheckpointError, throwIfAborted } from "./errors.js";
import { type Leaf, tensorBytes } from "./flatten.js";
import type { HostTensor, TensorLike } from "./state-dict.js";

/**
 * How a background save snapshots tensors before `saveAsync` returns.
 * - `"copy"` (default): every tensor is read through `data()` and copied into host buffers from
 *   a pool kept between saves (bounded memory, like DCP's pinned-memory staging cache). Costs
 *   a device→host read and a memcpy before returning, and one copy of the state in host memory.
 * - `"reference"`: tfjs tensors are held by `clone()`, which shares their data without copying
 *   (a tfjs tensor's data never changes; `Variable.assign` swaps in new data), so returning is
 *   nearly instant; the device memory of every tensor stays alive until it is written, and the
 *   device→host read happens during the upload. Host tensors and blobs, being mutable, are
 *   copied as with `"copy"`.
 */
export type StagingStrategy = "copy" | "reference";

export interface StagingPoolOptions {
  /** Most bytes of staging buffers held at once (default: unbounded). A save needing more is refused. */
  readonly maxBytes?: number;
}

/**
 * Reusable host buffers for staging, in shared memory so worker threads (the upload worker,
 * checksum workers) read them without a copy. Buffers are handed out per save and come back
 * when its upload ends; a later save of the same state reuses them, so steady-state training
 * allocates nothing for checkpoints.
 * With `maxBytes`, a save waits until enough buffers come back.
 */
export class StagingPool {
  readonly #maxBytes: number;
  readonly #free = new Map<number, Uint8Array[]>();
  #allocated = 0;
  #inUse = 0;
  readonly #waiting: (() => void)[] = [];

  constructor(options: StagingPoolOptions = {}) {
    this.#maxBytes = options.maxBytes ?? Infinity;
  }

  /** Bytes of buffers the pool holds, free or in use. */
  get allocatedBytes(): number {
    return this.#allocated;
  }

  get inUseBytes(): number {
    return this.#inUse;
  }

  /** Buffers of the given sizes, all at once (so two saves never each hold half of what they need). */
  async acquire(sizes: readonly number[], signal?: AbortSignal): Promise<Uint8Array[]> {
    const total = sizes.reduce((a, b) => a + b, 0);
    if (total > this.#maxBytes) {
      throw new CheckpointError(
        "invalid_argument",
        `staging this state dict needs ${total} bytes but the staging budget is ${this.#maxBytes}; raise stagingBudget or use staging "reference"`,
      );
    }
    for (;;) {
      throwIfAborted(signal, "staging");
      if (this.#inUse + total <= this.#maxBytes) {
        const wanted = new Map<number, number>();
        for (const size of sizes) wanted.set(size, (wanted.get(size) ?? 0) + 1);
        let reusable = 0;
        for (const [size, count] of wanted) reusable += size * Math.min(count, this.#free.get(size)?.length ?? 0);
        const over = this.#allocated + (total - reusable) - this.#maxBytes;
        if (over > 0) this.#dropFree(over, wanted);
        return sizes.map((size) => this.#take(size));
      }
      await new Promise<void>((resolve) => this.#waiting.push(resolve));
    }
  }

  release(buffers: readonly Uint8Array[]): void {
    for (const buffer of buffers) {
      this.#inUse -= buffer.byteLength;
      const list = this.#free.get(buffer.byteLength) ?? [];
      list.push(buffer);
      this.#free.set(buffer.byteLength, list);
    }
    for (const wake of this.#waiting.splice(0)) wake();
  }

  /** Drops every free buffer (for example after training ends). */
  clear(): void {
    for (const list of this.#free.values()) for (const b of list) this.#allocated -= b.byteLength;
    this.#free.clear();
  }

  /** Frees unused buffers this request will not reuse, until `bytes` are freed. */
  #dropFree(bytes: number, wanted: ReadonlyMap<number, number>): void {
    for (const [size, list] of this.#free) {
      while (list.length > (wanted.get(size) ?? 0) && bytes > 0) {
        list.pop();
        this.#allocated -= size;
        bytes -= size;
      }
      if (list.length === 0) this.#free.delete(size);
    }
  }

  #take(size: number): Uint8Array {
    this.#inUse += size;
    const reused = this.#free.get(size)?.pop();
    if (reused) return reused;
    this.#allocated += size;
    return new Uint8Array(new SharedArrayBuffer(size));
  }
}

/** A snapshot of a state dict's leaves that training can no longer change. */
export interface StagedLeaves {
  readonly leaves: Leaf[];
  /** Bytes copied into staging buffers. */
  readonly copiedBytes: number;
  /** Gives the buffers back to the pool and drops the tensor clones; call once the upload has ended. */
  release(): void;
}

interface Cloneable extends TensorLike {
  clone(): TensorLike & { dispose(): void };
}

function cloneable(tensor: TensorLike): tensor is Cloneable {
  return typeof (tensor as Partial<Cloneable>).clone === "function";
}

/**
 * Snapshots leaves for a background save. Tensor values are read through `data()`, the path a
 * GPU backend needs; nothing assumes they are already on the host.
 */
export async function stageLeaves(leaves: readonly Leaf[], strategy: StagingStrategy, pool: StagingPool, signal?: AbortSignal): Promise<StagedLeaves> {
  const byReference = (leaf: Leaf): boolean => strategy === "reference" && leaf.kind === "tensor" && leaf.source.kind === "tfjs" && cloneable(leaf.source.tensor);
  const sizes: number[] = [];
  for (const leaf of leaves) {
    if (leaf.kind === "tensor" && !byReference(leaf)) sizes.push(byteSize(leaf.dtype, leaf.shape));
    else if (leaf.kind === "bytes") sizes.push(leaf.data.byteLength);
  }
  const buffers = await pool.acquire(sizes, signal);
  const clones: { dispose(): void }[] = [];
  const release = (): void => {
    pool.release(buffers);
    for (const clone of clones.splice(0)) clone.dispose();
  };
  try {
    let next = 0;
    const staged: Leaf[] = [];
    for (const leaf of leaves) {
      throwIfAborted(signal, "staging");
      if (leaf.kind === "value") {
        staged.push(leaf);
      } else if (leaf.kind === "bytes") {
        const buffer = buffers[next++]!;
        buffer.set(leaf.data);
        staged.push({ kind: "bytes", path: leaf.path, data: buffer });
      } else if (byReference(leaf)) {
        const clone = (leaf.source.tensor as Cloneable).clone();
        clones.push(clone);
        staged.push({ ...leaf, source: { kind: "tfjs", tensor: clone } });
      } else {
        const buffer = buffers[next++]!;
        buffer.set(await tensorBytes(leaf));
        const data = new (arrayConstructorFor(leaf.dtype))(buffer.buffer, buffer.byteOffset, buffer.byteLength / arrayConstructorFor(leaf.dtype).BYTES_PER_ELEMENT);
        const tensor = { dtype: leaf.dtype, shape: leaf.shape, data } as HostTensor;
        staged.push({ ...leaf, source: { kind: "host", tensor } });
      }
    }
    return { leaves: staged, copiedBytes: sizes.reduce((a, b) => a + b, 0), release };
  } catch (error) {
    release();
    throw error;
  }
}
