// Chunks' content hashes as the checksum workers return them (16 bytes each, one buffer per batch),
// carried to `metadata.json`'s table so the encoder need not parse each chunk's hex string back.

/** Item i's XXH3-128 is the 16 bytes of `tables[i]` at `16 * at[i]`; `tables[i]` is undefined if it was not hashed here. */
export interface ChunkDigests {
  readonly tables: (Uint8Array | undefined)[];
  readonly at: number[];
}

export function emptyDigests(count: number): ChunkDigests {
  return { tables: new Array<Uint8Array | undefined>(count), at: new Array<number>(count).fill(0) };
}

/** Appends `from`'s `count` items (none hashed here when `from` is undefined) to `to`. */
export function appendDigests(to: ChunkDigests, from: ChunkDigests | undefined, count: number): void {
  for (let i = 0; i < count; i++) {
    to.tables.push(from?.tables[i]);
    to.at.push(from?.at[i] ?? 0);
  }
}

/**
 * The digests of a rank's written chunks (its outcome's `chunks` array, index for index), kept in
 * this process only: an outcome sent to another rank carries the hex strings alone.
 */
const digestsOfChunks = new WeakMap<readonly unknown[], ChunkDigests>();

export function rememberDigests(chunks: readonly unknown[], digests: ChunkDigests): void {
  digestsOfChunks.set(chunks, digests);
}

/**
 * The content hash table of `metadata.json` (16 bytes a chunk, in the order the entries list
 * them): the digests of `chunks[order[k]]` for each k, or undefined unless every one was hashed
 * in this process (the encoder then parses the chunks' hex strings).
 */
export function digestTable(chunks: readonly unknown[], order: ArrayLike<number>): Uint8Array | undefined {
  const digests = digestsOfChunks.get(chunks);
  if (!digests) return undefined;
  const { tables, at } = digests;
  const table = new Uint8Array(16 * order.length);
  // Chunks in entry order are mostly runs of one batch's digests in a row: one copy a run.
  for (let k = 0; k < order.length;) {
    const from = tables[order[k]!];
    if (from === undefined) return undefined;
    const first = at[order[k]!]!;
    let run = 1;
    while (k + run < order.length && tables[order[k + run]!] === from && at[order[k + run]!] === first + run) run++;
    table.set(from.subarray(16 * first, 16 * (first + run)), 16 * k);
    k += run;
  }
  return table;
}
