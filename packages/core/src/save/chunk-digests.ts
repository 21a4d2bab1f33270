// Chunks' content hashes as the checksum workers return them (16 bytes each), carried to
// `metadata.json`'s table so that a save makes no hex string per chunk (at 100k chunks the
// strings, alive until the save ends, cost it a scavenge or two: docs/benchmarks.md, hash34e)
// and the encoder parses none back. Chunks whose hashes are kept so have no `hash` string until
// something needs one (`spellOutHashes`).
import type { ChunkMetadata } from "../format/metadata.js";
import { hexDigests } from "./checksums-here.js";

/**
 * A rank's written chunks' digests (its outcome's `chunks` array, chunk i's 16 bytes at 16 * i),
 * kept in this process only, and only when every chunk was hashed here: an outcome sent to
 * another rank carries the hex strings alone (spelled out before it goes).
 */
const digestsOfChunks = new WeakMap<readonly unknown[], Uint8Array>();

/** Keeps `digests` as the hashes of `chunks`; false (nothing kept) unless there are 16 bytes a chunk. */
export function rememberDigests(chunks: readonly unknown[], digests: Uint8Array): boolean {
  if (digests.length !== 16 * chunks.length) return false;
  digestsOfChunks.set(chunks, digests);
  return true;
}

/**
 * Gives every chunk that has no `hash` string its digest's 32 hex digits: chunk i's from
 * `digests` at 16 * i, by default those remembered for `chunks` (nothing to do if none were).
 */
export function spellOutHashes(
  chunks: readonly { readonly chunk: ChunkMetadata }[],
  digests: Uint8Array | undefined = digestsOfChunks.get(chunks),
): void {
  if (!digests) return;
  let hex: string[] | undefined;
  for (let i = 0; i < chunks.length; i++) {
    const chunk = chunks[i]!.chunk as { hash?: string };
    if (chunk.hash !== undefined) continue;
    hex ??= hexDigests(digests, chunks.length);
    chunk.hash = hex[i];
  }
}

/**
 * The content hash table of `metadata.json` (16 bytes a chunk, in the order the entries list
 * them): the digests of `chunks[order[k]]` for each k where `order` has one, or undefined unless
 * they were remembered (the encoder then parses the chunks' hex strings).
 */
export function digestTable(
  chunks: readonly unknown[],
  order: readonly (number | undefined)[],
): Uint8Array | undefined {
  const digests = digestsOfChunks.get(chunks);
  if (!digests) return undefined;
  const table = new Uint8Array(digests.length);
  let to = 0;
  // Entry order is mostly chunk order: one copy per run of chunks in a row.
  for (let k = 0; k < order.length;) {
    const first = order[k];
    if (first === undefined) {
      k++;
      continue;
    }
    let run = 1;
    while (k + run < order.length && order[k + run] === first + run) run++;
    if (to + 16 * run > table.length) return undefined;
    table.set(digests.subarray(16 * first, 16 * (first + run)), to);
    to += 16 * run;
    k += run;
  }
  return to === table.length ? table : undefined;
}
