import {
  type ChunkMetadata,
  type CheckpointMetadata,
  type DataFileMetadata,
  type EntryMetadata,
  FORMAT_NAME,
  formatVersionOf,
} from "../format/metadata.js";
import type { GlobalSavePlan, SavePlan } from "../plan/save-planner.js";
import { type KeyPath, pathId } from "../state/state-dict.js";
import type { SaveOptions } from "./save-options.js";
import type { WrittenChunk } from "./write-data-file.js";
import { digestTable, spellOutHashes } from "./chunk-digests.js";

/** What one rank wrote: its data files' metadata, the chunks in them (and those it references), and its bytes. */
export interface WrittenFiles {
  readonly files: Record<string, DataFileMetadata>;
  readonly chunks: WrittenChunk[];
  readonly bytes: number;
}

/**
 * The metadata the coordinator commits, built from every rank's written files and the save's
 * plans; with its chunks' content hashes as bytes in entry order (`encodeMetadata`'s
 * `contentHashes`) where every chunk was hashed in this process, so none is parsed from hex.
 * Where that table is returned, chunks whose hashes were kept as bytes have no `hash` string:
 * the metadata is for `encodeMetadata` with the table. Otherwise every chunk has its string.
 */
export function buildMetadata(
  outcomes: readonly WrittenFiles[],
  plan: GlobalSavePlan,
  plans: readonly SavePlan[],
  options: Pick<SaveOptions, "metadata">,
  blockSize: number,
): { metadata: CheckpointMetadata; contentHashes?: Uint8Array } {
  const files = Object.create(null) as Record<string, DataFileMetadata>;
  for (const outcome of outcomes) Object.assign(files, outcome.files);
  const { entries, contentHashes } = buildEntries(outcomes, plan, plans);
  // Without the table the chunks need their hashes as strings, where a rank kept them as bytes.
  if (!contentHashes) for (const outcome of outcomes) spellOutHashes(outcome.chunks);
  const metadata: CheckpointMetadata = {
    format: FORMAT_NAME,
    version: formatVersionOf(files, entries, contentHashes),
    worldSize: outcomes.length,
    createdAt: new Date().toISOString(),
    checksum: { algorithm: "crc32c", blockSize },
    files,
    entries,
    user: options.metadata ?? {},
  };
  return contentHashes ? { metadata, contentHashes } : { metadata };
}

type BuiltEntry = EntryMetadata & { chunks?: ChunkMetadata[] };

/**
 * One entry per key, in the order the leaves stood in the state dicts (rank 0's first), so a
 * load without target rebuilds the same key order; each written chunk joins its key's entry.
 * Keys get a slot in that order, and each rank's leaves an array of slots, so a chunk finds its
 * entry by its item's leaf index instead of by a string id.
 */
function buildEntries(
  outcomes: readonly WrittenFiles[],
  plan: GlobalSavePlan,
  plans: readonly SavePlan[],
): { entries: EntryMetadata[]; contentHashes?: Uint8Array | undefined } {
  const distinct =
    plan.distinctKeys === true && outcomes.length === 1 && plans.length === 1
      ? entriesByLeaf(outcomes[0]!.chunks, plans[0]!)
      : undefined;
  if (distinct) return distinct;
  const slotOfId = new Map<string, number>();
  const keys: KeyPath[] = [];
  const entries: (BuiltEntry | undefined)[] = [];
  const slotOfKey = (key: KeyPath): number => {
    const id = pathId(key);
    let slot = slotOfId.get(id);
    if (slot === undefined) {
      slotOfId.set(id, (slot = keys.length));
      keys.push(key);
      entries.push(undefined);
    }
    return slot;
  };
  const slotsOfRank: Int32Array[] = [];
  for (const local of plans) {
    // The default planner lists items and values each in leaf order: merged, not sorted again.
    const items = inLeafOrder(local.items);
    const values = inLeafOrder(local.values);
    const slots = new Int32Array(Math.max(items.at(-1)?.leafIndex ?? -1, values.at(-1)?.leafIndex ?? -1) + 1).fill(-1);
    for (let i = 0, v = 0; i < items.length || v < values.length;) {
      const takeItem = v >= values.length || (i < items.length && items[i]!.leafIndex < values[v]!.leafIndex);
      const { leafIndex, key } = takeItem
        ? items[i++]!
        : { leafIndex: values[v]!.leafIndex, key: values[v++]!.entry.key };
      slots[leafIndex] = slotOfKey(key);
    }
    slotsOfRank[local.rank] = slots;
  }
  outcomes.forEach((outcome, rank) => {
    const slots = slotsOfRank[rank];
    for (const { item, chunk } of outcome.chunks) {
      const known = slots?.[item.leafIndex] ?? -1;
      // The leaf index is the writer's own; its key is checked, by identity when the plan is this process's.
      const slot =
        known >= 0 && (keys[known] === item.key || pathId(keys[known]!) === pathId(item.key))
          ? known
          : slotOfKey(item.key);
      let entry = entries[slot] as { chunks: ChunkMetadata[] } | undefined;
      if (!entry) {
        const base =
          item.kind === "tensor"
            ? {
                kind: "tensor" as const,
                key: item.key,
                dtype: item.dtype,
                shape: item.shape,
                chunks: [] as ChunkMetadata[],
              }
            : { kind: "bytes" as const, key: item.key, byteLength: item.byteLength, chunks: [] as ChunkMetadata[] };
        entries[slot] = base;
        entry = base;
      }
      entry.chunks.push(chunk);
    }
  });
  for (const value of plan.values) entries[slotOfKey(value.key)] = value;
  return { entries: entries.filter((entry): entry is BuiltEntry => entry !== undefined) };
}

/**
 * One rank whose items and values each have their own key (the planner checked): one entry per
 * leaf, in leaf order, with no key compared or hashed. Undefined if a chunk does not fit that
 * (another leaf's index, or a second chunk of one leaf), for the general path to sort out.
 */
function entriesByLeaf(
  chunks: readonly WrittenChunk[],
  plan: SavePlan,
): { entries: EntryMetadata[]; contentHashes: Uint8Array | undefined } | undefined {
  const byLeaf: (EntryMetadata | undefined)[] = [];
  /** The index in `chunks` of each leaf's chunk (so in entry order, with holes at values). */
  const chunkOfLeaf: (number | undefined)[] = [];
  for (let c = 0; c < chunks.length; c++) {
    const { item, chunk } = chunks[c]!;
    if (byLeaf[item.leafIndex] !== undefined) return undefined;
    byLeaf[item.leafIndex] =
      item.kind === "tensor"
        ? { kind: "tensor", key: item.key, dtype: item.dtype, shape: item.shape, chunks: [chunk] }
        : { kind: "bytes", key: item.key, byteLength: item.byteLength, chunks: [chunk] };
    chunkOfLeaf[item.leafIndex] = c;
  }
  for (const { leafIndex, entry } of plan.values) {
    if (byLeaf[leafIndex] !== undefined) return undefined;
    byLeaf[leafIndex] = entry;
  }
  return {
    entries: byLeaf.filter((entry): entry is EntryMetadata => entry !== undefined),
    contentHashes: digestTable(chunks, chunkOfLeaf),
  };
}

function inLeafOrder<T extends { readonly leafIndex: number }>(list: readonly T[]): readonly T[] {
  for (let i = 1; i < list.length; i++)
    if (list[i]!.leafIndex < list[i - 1]!.leafIndex) return [...list].sort((a, b) => a.leafIndex - b.leafIndex);
  return list;
}
