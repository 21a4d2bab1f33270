import type { Leaf } from "../state/leaf.js";
import type { KeyPath } from "../state/state-dict.js";
import type { PlannedValue, WriteItem } from "./save-planner.js";

/**
 * What a save plans from its state dict's structure alone (the items of its local plan, its
 * files' items, their safetensors layouts), kept for the next save of the same structure, as
 * DCP's `enable_plan_caching` keeps plans. A later save reuses it only when every leaf is, field
 * by field, what the cached items were planned from: an exact comparison, never a hash. Cached
 * items are frozen copies, so nothing the caller changes later can change them; checksums and
 * bytes are never cached. Design and costs: docs/benchmarks.md ("plan cache").
 */

/** One leaf's slot: the item planned from it, or the key of an inline value. */
type Slot = { readonly item: WriteItem } | { readonly valueKey: KeyPath };

/** A structure, its local plan's items, and what was derived from them. */
export interface CachedStructure {
  readonly rank: number;
  readonly minFileBytes: number;
  readonly slots: readonly Slot[];
  /** Frozen: the local plan's items, in leaf order. */
  readonly items: readonly WriteItem[];
  /** `onlyWholeDistinct` of these items and values, once asked. */
  distinct?: boolean;
  /** The files' items by `filesPerRank`, for a plan of this rank alone, each array frozen. */
  readonly files: Map<number, readonly (readonly WriteItem[])[]>;
}

/** The structures of the last few saves, most recent first. */
const recent: CachedStructure[] = [];
/** Two: a loop that alternates between two states (a model, then model and optimizer) keeps both. */
const KEPT = 2;
/** Which structure a frozen items array came from: a global plan trusts only arrays found here. */
const ofItems = new WeakMap<readonly WriteItem[], CachedStructure>();
/** File item arrays made frozen by this cache (content never changes): what layouts may be kept for. */
const frozenFiles = new WeakSet<readonly WriteItem[]>();

/** The cached structure `leaves` match exactly, for this rank and planner setting; moved to the front. */
export function cachedStructure(
  leaves: readonly Leaf[],
  rank: number,
  minFileBytes: number,
): CachedStructure | undefined {
  for (let i = 0; i < recent.length; i++) {
    const entry = recent[i]!;
    if (entry.rank !== rank || entry.minFileBytes !== minFileBytes || !matches(leaves, entry.slots)) continue;
    if (i > 0) {
      recent.splice(i, 1);
      recent.unshift(entry);
    }
    return entry;
  }
  return undefined;
}

/** Keeps the structure of a plan just made (`items` from `leaves`, `values` from the rest); returns its frozen items. */
export function keepStructure(
  leaves: readonly Leaf[],
  rank: number,
  minFileBytes: number,
  items: readonly WriteItem[],
  values: readonly PlannedValue[],
): CachedStructure {
  const slots = new Array<Slot>(leaves.length);
  const frozen = items.map((item) => {
    const copy = frozenItem(item);
    slots[item.leafIndex] = { item: copy };
    return copy;
  });
  for (const { leafIndex, entry } of values)
    slots[leafIndex] = { valueKey: Object.isFrozen(entry.key) ? entry.key : Object.freeze([...entry.key]) };
  const entry: CachedStructure = { rank, minFileBytes, slots, items: Object.freeze(frozen), files: new Map() };
  ofItems.set(entry.items, entry);
  recent.unshift(entry);
  recent.length = Math.min(recent.length, KEPT);
  return entry;
}

/** The cached structure whose frozen items these are, if any. */
export function structureOfItems(items: readonly WriteItem[]): CachedStructure | undefined {
  return ofItems.get(items);
}

/** Freezes a file's items array (of frozen items) and marks it as one whose layout may be kept. */
export function frozenFileItems(items: WriteItem[]): readonly WriteItem[] {
  Object.freeze(items);
  frozenFiles.add(items);
  return items;
}

/** Whether `items` is a file's items array this cache froze. */
export function isFrozenFileItems(items: readonly WriteItem[]): boolean {
  return frozenFiles.has(items);
}

/** Whether leaf `i` would get exactly the item (or value key) of slot `i`, for every leaf. */
function matches(leaves: readonly Leaf[], slots: readonly Slot[]): boolean {
  if (leaves.length !== slots.length) return false;
  for (let i = 0; i < leaves.length; i++) {
    const leaf = leaves[i]!;
    const slot = slots[i]!;
    if (leaf.kind === "value") {
      if (!("valueKey" in slot) || !samePath(slot.valueKey, leaf.path)) return false;
      continue;
    }
    if (!("item" in slot)) return false;
    const { item } = slot;
    if (item.leafIndex !== i || !samePath(item.key, leaf.path)) return false;
    if (leaf.kind === "bytes") {
      if (item.kind !== "bytes" || item.byteLength !== leaf.data.byteLength) return false;
      continue;
    }
    if (item.kind !== "tensor" || item.dtype !== leaf.dtype || !sameNumbers(item.chunk.sizes, leaf.shape)) return false;
    if (leaf.shard) {
      if (!sameNumbers(item.shape, leaf.shard.globalShape) || !sameNumbers(item.chunk.offsets, leaf.shard.offsets))
        return false;
    } else if (!sameNumbers(item.shape, leaf.shape) || !allZero(item.chunk.offsets, leaf.shape.length)) return false;
  }
  return true;
}

function samePath(a: KeyPath, b: KeyPath): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function sameNumbers(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function allZero(a: readonly number[], length: number): boolean {
  if (a.length !== length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== 0) return false;
  return true;
}

/** A deep, frozen copy of an item: later changes to the caller's arrays cannot reach it. */
function frozenItem(item: WriteItem): WriteItem {
  const copy: WriteItem = {
    leafIndex: item.leafIndex,
    // A frozen key (the walk's, state/flatten.ts) cannot change: kept as it is, the next save's leaves meet it by identity.
    key: Object.isFrozen(item.key) ? item.key : Object.freeze([...item.key]),
    ...(item.name === undefined ? {} : { name: item.name }),
    kind: item.kind,
    dtype: item.dtype,
    shape: Object.freeze([...item.shape]),
    chunk: Object.freeze({
      offsets: Object.freeze([...item.chunk.offsets]),
      sizes: Object.freeze([...item.chunk.sizes]),
    }),
    byteLength: item.byteLength,
  };
  return Object.freeze(copy);
}
