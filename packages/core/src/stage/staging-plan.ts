import { arrayConstructorFor, byteSize } from "../state/dtypes.js";
import type { Leaf, StagedPlace } from "../state/leaf.js";
import { MAX_PAGE_ALIGNED_BYTES, pageAlignedAvailable } from "../storage/page-aligned.js";
import type { SafetensorsLayout } from "../format/safetensors.js";
import { dataFileLayout } from "../plan/data-file-layout.js";
import type { SavePlanner, WriteItem } from "../plan/save-planner.js";
import type { TensorLike } from "../state/tensors.js";
import type { StagingPool } from "./staging-pool.js";

/**
 * How a background save snapshots tensors before `saveAsync` returns.
 * - `"copy"` (default): every tensor is read through `data()` and copied into host buffers from
 *   a pool kept between saves (bounded memory, like DCP's pinned-memory staging cache). Costs
 *   a device→host read and a memcpy before returning, and one copy of the state in host memory.
 * - `"reference"`: tfjs tensors are held by `clone()`, which shares their data without copying
 *   (a tfjs tensor's data never changes; `Variable.assign` swaps in new data), so returning is
 *   nearly instant; the device memory of every tensor stays alive until its bytes are read
 *   for the upload, and the device→host read happens in the background. Host tensors and blobs,
 *   being mutable, are copied as with `"copy"`. Where the upload worker can write the save, the
 *   held tensors are copied into the pool in the background, a slice per event-loop turn
 *   (`copyInBackground`), and dropped once copied, so host memory for one copy is needed during
 *   the upload after all; otherwise they are held until the upload ends.
 */
export type StagingStrategy = "copy" | "reference";

/** Who plans the save that follows, so copies can be staged laid out as its data files. */
export interface StagingLayout {
  /** The save's planner: its `rankFiles` says which files this rank writes (none: leaf by leaf). */
  readonly planner: SavePlanner;
  /**
   * Whether `planner` is the default one, whose files follow from the leaves' keys, dtypes and
   * shapes alone: the staging plan is then remembered between saves of leaves shaped alike.
   */
  readonly defaultPlanner: boolean;
  readonly rank: number;
  /** Data files per rank (`SaveOptions.concurrency`, default `DEFAULT_SAVE_CONCURRENCY`). */
  readonly filesPerRank: number;
}

/**
 * Files smaller than this are staged leaf by leaf: storage writes them through the page cache,
 * which gains nothing from their layout.
 */
const SEGMENT_MIN_BYTES = 1 << 20;

export interface Segment {
  readonly items: readonly WriteItem[];
  readonly layout: SafetensorsLayout;
}

/**
 * The data files the planner gives this rank if it writes every item it holds (always, with one
 * rank; with several, unless replicated items go to another rank), laid out as the save will
 * write them, as staging segments: those big enough to gain, small enough for one WebAssembly
 * memory, whose items are whole leaves, each once, at offsets that suit their typed arrays.
 */
function plannedSegments(leaves: readonly Leaf[], layout: StagingLayout): Segment[] {
  const { planner, rank, filesPerRank } = layout;
  if (!pageAlignedAvailable || planner.rankFiles === undefined) return [];
  const files = planner.rankFiles(planner.createLocalPlan(leaves, rank), { attempt: "staging", filesPerRank });
  const seen = new Set<number>();
  const wholeLeaf = (item: WriteItem): boolean => {
    const leaf = leaves[item.leafIndex];
    if (seen.has(item.leafIndex) || leaf === undefined || leaf.kind === "value") return false;
    seen.add(item.leafIndex);
    return item.byteLength === (leaf.kind === "bytes" ? leaf.data.byteLength : byteSize(leaf.dtype, leaf.shape));
  };
  return files
    .filter((items) => items.every(wholeLeaf))
    .map((items) => ({ items, layout: dataFileLayout(items).layout }))
    .filter(
      ({ items, layout }) =>
        layout.fileSize >= SEGMENT_MIN_BYTES &&
        layout.fileSize <= MAX_PAGE_ALIGNED_BYTES &&
        items.every(
          (item, i) =>
            layout.offsets[i]! % (item.kind === "tensor" ? arrayConstructorFor(item.dtype).BYTES_PER_ELEMENT : 1) === 0,
        ),
    );
}

export interface Cloneable extends TensorLike {
  clone(): TensorLike & { dispose(): void };
}

function cloneable(tensor: TensorLike): tensor is Cloneable {
  return typeof (tensor as Partial<Cloneable>).clone === "function";
}

/** Whether `strategy` holds `leaf` by a tfjs clone rather than copying it. */
export function heldByReference(leaf: Leaf, strategy: StagingStrategy): boolean {
  return (
    strategy === "reference" && leaf.kind === "tensor" && leaf.source.kind === "tfjs" && cloneable(leaf.source.tensor)
  );
}

/** Where a copied leaf's `bytes` go: buffer `buffer` of the staging at `offset`, and, in a segment, which of its file's items it is. */
export interface Slot {
  readonly buffer: number;
  readonly offset: number;
  readonly bytes: number;
  readonly place: StagedPlace | undefined;
}

export interface StagingPlan {
  readonly segments: readonly Segment[];
  /** Leaf index → where its copy goes (none: a value, or a tensor held by reference). */
  readonly slots: readonly (Slot | undefined)[];
  /** The buffers to acquire: one per segment, then one per copied leaf in no segment, in leaf order. */
  readonly sizes: readonly number[];
  readonly copiedBytes: number;
}

function planStaging(
  leaves: readonly Leaf[],
  strategy: StagingStrategy,
  layout: StagingLayout | undefined,
): StagingPlan {
  const segments = layout && strategy === "copy" ? plannedSegments(leaves, layout) : [];
  const slots: (Slot | undefined)[] = new Array<Slot | undefined>(leaves.length).fill(undefined);
  segments.forEach(({ items, layout }, segment) =>
    items.forEach((item, index) => {
      const place = { segment, index, count: items.length };
      slots[item.leafIndex] = { buffer: segment, offset: layout.offsets[index]!, bytes: item.byteLength, place };
    }),
  );
  const sizes = segments.map((s) => s.layout.fileSize);
  let copiedBytes = 0;
  leaves.forEach((leaf, index) => {
    if (leaf.kind === "value" || heldByReference(leaf, strategy)) return;
    const bytes = leaf.kind === "bytes" ? leaf.data.byteLength : byteSize(leaf.dtype, leaf.shape);
    copiedBytes += bytes;
    if (slots[index] === undefined) {
      slots[index] = { buffer: sizes.length, offset: 0, bytes, place: undefined };
      sizes.push(bytes);
    }
  });
  return { segments, slots, sizes, copiedBytes };
}

/** What a staging plan reads of a leaf: everything but its values (and a JSON value's content). */
interface LeafShape {
  readonly kind: Leaf["kind"];
  readonly path: readonly (string | number)[];
  readonly dtype?: string;
  readonly shape?: readonly number[];
  readonly globalShape?: readonly number[];
  readonly offsets?: readonly number[];
  readonly byteLength?: number;
  readonly byReference: boolean;
}

function shapeOf(leaf: Leaf, strategy: StagingStrategy): LeafShape {
  const byReference = heldByReference(leaf, strategy);
  if (leaf.kind === "value") return { kind: leaf.kind, path: leaf.path, byReference };
  if (leaf.kind === "bytes") return { kind: leaf.kind, path: leaf.path, byteLength: leaf.data.byteLength, byReference };
  return {
    kind: leaf.kind,
    path: leaf.path,
    dtype: leaf.dtype,
    shape: leaf.shape,
    globalShape: leaf.shard?.globalShape,
    offsets: leaf.shard?.offsets,
    byReference,
  };
}

const sameList = <T>(a: readonly T[] | undefined, b: readonly T[] | undefined): boolean =>
  a === b || (a !== undefined && b !== undefined && a.length === b.length && a.every((x, i) => x === b[i]));

function sameShape(leaf: Leaf, shape: LeafShape, strategy: StagingStrategy): boolean {
  if (leaf.kind !== shape.kind || !sameList(leaf.path, shape.path)) return false;
  if (heldByReference(leaf, strategy) !== shape.byReference) return false;
  if (leaf.kind === "value") return true;
  if (leaf.kind === "bytes") return leaf.data.byteLength === shape.byteLength;
  return (
    leaf.dtype === shape.dtype &&
    sameList(leaf.shape, shape.shape) &&
    sameList(leaf.shard?.globalShape, shape.globalShape) &&
    sameList(leaf.shard?.offsets, shape.offsets)
  );
}

interface Remembered {
  readonly strategy: StagingStrategy;
  readonly rank: number | undefined;
  readonly filesPerRank: number | undefined;
  readonly shapes: readonly LeafShape[];
  readonly plan: StagingPlan;
}

/** Per pool, the last staging plan made with the default planner (or none), and the leaves' shapes it was made for. */
const remembered = new WeakMap<StagingPool, Remembered>();

/**
 * Which staging buffers snapshotting `leaves` takes from `pool`, and where each leaf goes. A
 * training job saves the same shapes every time: the plan made for the last save through this
 * pool is reused when every leaf has the same key, kind, dtype and shape (working it out again
 * for thousands of tensors would cost milliseconds of the caller's time per save). The plan
 * holds keys, never a leaf's data.
 */
export function stagingPlan(
  leaves: readonly Leaf[],
  strategy: StagingStrategy,
  layout: StagingLayout | undefined,
  pool: StagingPool,
): StagingPlan {
  if (layout !== undefined && !layout.defaultPlanner) return planStaging(leaves, strategy, layout);
  const last = remembered.get(pool);
  if (
    last !== undefined &&
    last.strategy === strategy &&
    last.rank === layout?.rank &&
    last.filesPerRank === layout?.filesPerRank &&
    last.shapes.length === leaves.length &&
    leaves.every((leaf, i) => sameShape(leaf, last.shapes[i]!, strategy))
  )
    return last.plan;
  const plan = planStaging(leaves, strategy, layout);
  remembered.set(pool, {
    strategy,
    rank: layout?.rank,
    filesPerRank: layout?.filesPerRank,
    shapes: leaves.map((leaf) => shapeOf(leaf, strategy)),
    plan,
  });
  return plan;
}
