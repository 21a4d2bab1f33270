// Block CRC32Cs and content hashes computed on the calling thread, in slices between which the
// event loop runs: Node's path for bytes not in shared memory, and a browser's path for all bytes.
import { bytesToHex, hexToBytes } from "#platform/format/byte-text.js";
import { type Xxh128Stream, loadXxh128 } from "#platform/format/xxh128.js";
import { yieldToEventLoop } from "#platform/runtime.js";
import { crc32c } from "../format/crc32c.js";

/** Block CRC32Cs of buffers, each buffer's XXH3-128 too when asked for (32 hex digits each). */
export interface BlockChecksums {
  readonly sums: number[][];
  readonly hashes?: string[];
}

/** Block CRC32Cs of regions of one memory, all in a row, and each region's XXH3-128 (16 bytes each) when asked for. */
export interface RegionChecksums {
  readonly sums: Uint32Array;
  readonly hashes?: Uint8Array;
}

/**
 * Regions that are pieces of chunks hashed over several calls: region i is a piece of stream
 * `streamIds[i]` (0: a whole chunk), `flags[i]` 1 on its first piece (the stream starts) and 2 on
 * its last (its digest is returned in that region's place). Pieces of a stream come in order,
 * each cut on its block size; only the last piece's digest is meaningful. Calls with the same
 * `affinity` are hashed in order, by one thread.
 */
export interface RegionPieces {
  readonly streamIds: Float64Array;
  readonly flags: Uint8Array;
  readonly affinity: number;
}

/** `count` digests of 16 bytes as hex strings (slices of one string: no copy each). */
export function hexDigests(bytes: Uint8Array, count: number): string[] {
  const hex = bytesToHex(bytes.subarray(0, 16 * count));
  const out = new Array<string>(count);
  for (let k = 0; k < count; k++) out[k] = hex.slice(32 * k, 32 * k + 32);
  return out;
}

/** Whether saves compute content hashes by default; off only to measure what they cost (`setContentHashing`). */
let contentHashing = true;

/**
 * For benchmarks: while false, saves compute block CRC32Cs alone and write chunks without content
 * hashes (format 2.0 / 2.1), as Cairn did before 2.2. Exported by `@cairn/core/testing` only.
 */
export function setContentHashing(enabled: boolean): void {
  contentHashing = enabled;
}

export function contentHashingOn(): boolean {
  return contentHashing;
}

/** Bytes of a chunk hashed between two XXH3 calls: many small blocks, few calls, all in L2 cache. */
const SPAN_BYTES = 256 << 10;

/** Counts bytes hashed and yields to the event loop after every `sliceBytes` of them. */
class Slices {
  #since = 0;
  constructor(readonly sliceBytes: number) {}

  async done(bytes: number): Promise<void> {
    this.#since += bytes;
    if (this.#since < this.sliceBytes) return;
    this.#since = 0;
    await yieldToEventLoop();
  }
}

/** The block checksums of several buffers (each with its own block size), and each one's XXH3-128 with `withHashes`. */
export async function checksumsHere(
  parts: readonly Uint8Array[],
  blockSizes: readonly number[],
  withHashes: boolean,
  sliceBytes: number,
): Promise<BlockChecksums> {
  const xxh = withHashes ? await loadXxh128() : undefined;
  const slices = new Slices(sliceBytes);
  const all: number[][] = [];
  const hashes: string[] = [];
  for (const [i, bytes] of parts.entries()) {
    const blockSize = blockSizes[i]!;
    const sums: number[] = [];
    // A buffer of one block is hashed as it is: a view per 1 KiB tensor costs more than its hash.
    if (bytes.byteLength <= blockSize) {
      if (bytes.byteLength > 0) sums.push(crc32c(bytes));
      if (xxh) hashes.push(xxh.hash(bytes));
      await slices.done(bytes.byteLength);
    } else {
      const stream = await xxh?.stream();
      // Spans of whole blocks, each CRC'd block by block, then fed to XXH3 at once while still in
      // cache: per 1 KiB block, an XXH3 call and an await cost more than the block's CRC32C.
      const span = blockSize * Math.max(1, Math.floor(SPAN_BYTES / blockSize));
      for (let start = 0; start < bytes.byteLength; start += span) {
        const end = Math.min(start + span, bytes.byteLength);
        for (let at = start; at < end; at += blockSize)
          sums.push(crc32c(bytes.subarray(at, Math.min(at + blockSize, end))));
        stream?.update(bytes.subarray(start, end));
        await slices.done(end - start);
      }
      if (stream) hashes.push(stream.digest());
    }
    all.push(sums);
  }
  return xxh ? { sums: all, hashes } : { sums: all };
}

/** Streams of chunks hashed piece by piece on this thread (`RegionPieces`), by stream id. */
const openStreams = new Map<number, Xxh128Stream | undefined>();

/**
 * Region i: `lengths[i]` bytes of `memory` from `starts[i]`, in blocks of `blockSizes[i]`; every
 * region's sums in order. With `pieces`, regions may be pieces of chunks (`RegionPieces`).
 */
export async function regionChecksumsHere(
  memory: ArrayBufferLike,
  starts: Float64Array,
  lengths: Float64Array,
  blockSizes: Float64Array,
  withHashes: boolean,
  sliceBytes: number,
  pieces?: RegionPieces,
): Promise<RegionChecksums> {
  const bytes = new Uint8Array(memory);
  const parts = Array.from(starts, (start, i) => bytes.subarray(start, start + lengths[i]!));
  if (!pieces) {
    const { sums, hashes } = await checksumsHere(parts, Array.from(blockSizes), withHashes, sliceBytes);
    const flat = Uint32Array.from(sums.flat());
    if (!hashes) return { sums: flat };
    return { sums: flat, hashes: hexToBytes(hashes.join("")) };
  }
  const xxh = withHashes ? await loadXxh128() : undefined;
  const slices = new Slices(sliceBytes);
  const sums: number[] = [];
  const hashes = new Uint8Array(16 * parts.length);
  for (const [i, part] of parts.entries()) {
    const id = pieces.streamIds[i]!;
    const flags = pieces.flags[i]!;
    if (id === 0) {
      const one = await checksumsHere([part], [blockSizes[i]!], withHashes, sliceBytes);
      for (const sum of one.sums[0]!) sums.push(sum);
      if (one.hashes) hashes.set(hexToBytes(one.hashes[0]!), 16 * i);
      continue;
    }
    if (flags & 1) openStreams.set(id, await xxh?.stream());
    if (!openStreams.has(id)) throw new Error(`piece of an unknown stream ${id}`);
    const stream = openStreams.get(id);
    for (let at = 0; at < part.byteLength; at += blockSizes[i]!) {
      const block = part.subarray(at, Math.min(at + blockSizes[i]!, part.byteLength));
      sums.push(crc32c(block));
      stream?.update(block);
      await slices.done(block.byteLength);
    }
    if (flags & 2) {
      if (stream) hashes.set(hexToBytes(stream.digest()), 16 * i);
      openStreams.delete(id);
    }
  }
  return xxh ? { sums: Uint32Array.from(sums), hashes } : { sums: Uint32Array.from(sums) };
}
