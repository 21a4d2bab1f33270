import { CheckpointError } from "../errors.js";
import type { WriteItem } from "../plan/save-planner.js";
import { type Leaf, hostDataOf } from "../state/leaf.js";
import { displayKey } from "../state/state-dict.js";

/**
 * Throws `corrupt` when an item's block CRC32Cs, computed as its file is written, differ from
 * those its staged copy had once staged (`Leaf.stagedSums`): the copy changed in between (a
 * staging buffer reused too early), and writing it would commit bytes that were never the state.
 * Items whose sums were taken with another block size, or that are part of a leaf, are not compared.
 */
export function checkStagedSums(
  items: readonly WriteItem[],
  group: readonly number[],
  leaves: readonly Leaf[],
  blockSizes: readonly number[],
  sums: readonly (readonly number[])[],
): void {
  group.forEach((i, k) => {
    const item = items[i]!;
    const leaf = leaves[item.leafIndex];
    const staged = leaf === undefined || leaf.kind === "value" ? undefined : leaf.stagedSums;
    const written = sums[k];
    if (!staged || !written || staged.blockSize !== blockSizes[k] || staged.sums.length !== written.length) return;
    if (hostDataOf(leaf!)?.byteLength !== item.byteLength) return;
    for (let b = 0; b < written.length; b++) {
      if (written[b] === staged.sums[b]) continue;
      const key = displayKey(item.key);
      throw new CheckpointError(
        "corrupt",
        `state dict key ${key}: its staged copy changed between staging and writing (block ${b} of ${written.length}, ${staged.blockSize} bytes each); a staging buffer was reused while the save still needed it, and nothing was committed`,
        { context: { key } },
      );
    }
  });
}
