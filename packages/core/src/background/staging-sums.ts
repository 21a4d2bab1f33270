import { blockChecksumsAsync } from "#platform/save/checksum-workers.js";
import { chunkBlockSize } from "../format/checksum-blocks.js";
import { type Leaf, hostDataOf } from "../state/leaf.js";

/** For tests: runs on the staged leaves once their sums are taken, before the upload writes them. */
let stagedHook: ((leaves: readonly Leaf[]) => void | Promise<void>) | undefined;

/**
 * For tests: `hook` sees every background save's staged leaves after their sums were taken and
 * before they are written (to change a staged copy, as a buffer reused too early would). Exported
 * by `@cairn/core/testing` only; `undefined` removes it.
 */
export function setStagedHook(hook: ((leaves: readonly Leaf[]) => void | Promise<void>) | undefined): void {
  stagedHook = hook;
}

/**
 * The staged leaves, each copy carrying the block CRC32Cs of its bytes as staged (`Leaf.stagedSums`),
 * with the block size the write will choose for it: the write compares the sums it computes with
 * them. Hashed on the checksum workers where the copies are in shared memory (without content
 * hashes), or in place on the upload worker, which takes the sums as its job arrives so that it
 * never waits for the calling thread (a copy that already has sums keeps them).
 */
export async function withStagingSums(leaves: readonly Leaf[], maxBlockSize: number): Promise<readonly Leaf[]> {
  const indexes: number[] = [];
  const parts: Uint8Array[] = [];
  const blockSizes: number[] = [];
  leaves.forEach((leaf, index) => {
    const data = hostDataOf(leaf);
    if (leaf.kind === "value" || leaf.stagedSums !== undefined || data === undefined || data.byteLength === 0) return;
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    indexes.push(index);
    parts.push(bytes);
    blockSizes.push(
      leaf.kind === "bytes"
        ? chunkBlockSize("uint8", [bytes.byteLength], maxBlockSize)
        : chunkBlockSize(leaf.dtype, leaf.shape, maxBlockSize),
    );
  });
  if (parts.length > 0) {
    const { sums } = await blockChecksumsAsync(parts, blockSizes, false);
    const withSums = [...leaves];
    indexes.forEach((index, k) => {
      withSums[index] = { ...leaves[index]!, stagedSums: { blockSize: blockSizes[k]!, sums: sums[k]! } } as Leaf;
    });
    leaves = withSums;
  }
  return leaves;
}

/** Whether a test hook waits for the staged leaves (`setStagedHook`). */
export function hasStagedHook(): boolean {
  return stagedHook !== undefined;
}

/** Runs the test hook, if any, on leaves whose sums were taken. */
export async function runStagedHook(leaves: readonly Leaf[]): Promise<void> {
  await stagedHook?.(leaves);
}
