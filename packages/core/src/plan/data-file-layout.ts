import { FORMAT_MAJOR, FORMAT_NAME } from "../format/metadata.js";
import { tensorName } from "../format/naming.js";
import { type SafetensorsLayout, layoutNamedSafetensors, uniqueTensorNames } from "../format/safetensors.js";
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
