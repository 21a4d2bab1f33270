import { FORMAT_MAJOR, FORMAT_NAME } from "../format/metadata.js";
import { tensorName } from "../format/naming.js";
import { chunkBlockSize } from "../format/checksum-blocks.js";
import { crc32c } from "../format/crc32c.js";
import { type SafetensorsLayout, layoutNamedSafetensors, uniqueTensorNames } from "../format/safetensors.js";
import { isFrozenFileItems } from "./save-plan-cache.js";
import type { WriteItem } from "./save-planner.js";

/**
 * A data file's tensor names and safetensors layout (header bytes, each item's offset), from its
 * items alone. `distinctNames`: the planner found every dotted key distinct (`distinctKeys`), so
 * the names are unique as they are.
 */
export function dataFileLayout(
  items: readonly WriteItem[],
  distinctNames = false,
): { names: string[]; layout: SafetensorsLayout } {
  const named = items.map((item) => tensorName(item.key, item.shape, item.chunk, item.name));
  const names = distinctNames ? named : uniqueTensorNames(named);
  const layout = layoutNamedSafetensors(names, items, (item) => item.chunk.sizes, {
    format: `${FORMAT_NAME}/${FORMAT_MAJOR}`,
  });
  return { names, layout };
}

/** What a writer needs of a data file's layout, all derived from its items, the names' rule and the block size. */
export interface DataFileShape {
  readonly names: readonly string[];
  readonly layout: SafetensorsLayout;
  readonly headerCrc32c: number;
  /** Each item's checksum block size. */
  readonly blockSizes: readonly number[];
  /** The header's bytes are kept for later saves: a writer must not hand them to anything that may change them. */
  readonly shared: boolean;
}

/** Layouts of the plan cache's frozen file item arrays, by names' rule and block size. */
const kept = new WeakMap<readonly WriteItem[], Map<string, DataFileShape>>();

/**
 * `dataFileLayout` with its header's CRC32C and the items' block sizes; kept for a file whose
 * items array the plan cache froze (save-plan-cache.ts), so a later save of the same structure
 * finds them instead of making them again.
 */
export function dataFileShape(items: readonly WriteItem[], distinctNames: boolean, blockSize: number): DataFileShape {
  const cacheable = isFrozenFileItems(items);
  const id = `${distinctNames ? 1 : 0}/${blockSize}`;
  const found = cacheable ? kept.get(items)?.get(id) : undefined;
  if (found) return found;
  const { names, layout } = dataFileLayout(items, distinctNames);
  const shape: DataFileShape = {
    names: cacheable ? Object.freeze(names) : names,
    layout: cacheable ? Object.freeze({ ...layout, offsets: Object.freeze([...layout.offsets]) }) : layout,
    headerCrc32c: crc32c(layout.header),
    blockSizes: items.map((item) => chunkBlockSize(item.dtype, item.chunk.sizes, blockSize)),
    shared: cacheable,
  };
  if (cacheable) {
    Object.freeze(shape.blockSizes);
    let byId = kept.get(items);
    if (!byId) kept.set(items, (byId = new Map()));
    byId.set(id, shape);
  }
  return shape;
}
