// Chunks' content hashes as the checksum workers return them (16 bytes each), carried to
// `metadata.json`'s table so the encoder need not parse each chunk's hex string back.

/**
 * A rank's written chunks' digests (its outcome's `chunks` array, chunk i's 16 bytes at 16 * i),
 * kept in this process only, and only when every chunk was hashed here: an outcome sent to
 * another rank carries the hex strings alone.
 */
const digestsOfChunks = new WeakMap<readonly unknown[], Uint8Array>();

export function rememberDigests(chunks: readonly unknown[], digests: Uint8Array): void {
  if (digests.length === 16 * chunks.length) digestsOfChunks.set(chunks, digests);
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
