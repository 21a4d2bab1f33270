import type { CheckpointMetadata } from "./metadata.js";
import { loadXxh128 } from "#platform/format/xxh128.js";

/**
 * A checkpoint's fingerprint: the XXH3-128 of the content hashes (16 bytes each) of every chunk
 * of every tensor entry, in the order `metadata.json` lists them (docs/format.md, "Fingerprint").
 * Two checkpoints with equal fingerprints hold the same tensor bytes in the same chunks; bytes
 * blobs and values (a step counter, an RNG state) do not count. Undefined when a tensor chunk has
 * no content hash (a checkpoint written before format 2.2). Called by `cairn inspect` and `cairn ls`.
 */
export async function checkpointFingerprint(metadata: CheckpointMetadata): Promise<string | undefined> {
  const hashes: string[] = [];
  for (const entry of metadata.entries) {
    if (entry.kind !== "tensor") continue;
    for (const chunk of entry.chunks) {
      if (chunk.hash === undefined) return undefined;
      hashes.push(chunk.hash);
    }
  }
  const hex = hashes.join("");
  const bytes = new Uint8Array(hex.length / 2);
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return (await loadXxh128()).hash(bytes);
}
