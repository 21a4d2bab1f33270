// Block checksums in a browser: on the calling thread, in slices between which the page's event
// loop runs (docs/browser.md says why, with the measurement against a Web Worker).
import {
  type BlockChecksums,
  type RegionChecksums,
  type RegionPieces,
  checksumsHere,
  contentHashingOn,
  regionChecksumsHere,
} from "./checksums-here.js";

export {
  type BlockChecksums,
  type RegionChecksums,
  type RegionPieces,
  hexDigests,
  setContentHashing,
} from "./checksums-here.js";

/** Bytes hashed between two yields: about 10 ms of WebAssembly, short enough for a page to stay responsive. */
const SLICE_BYTES = 4 << 20;

/** Nothing to start: a page hashes on its own thread. */
export function startChecksumWorkers(): void {}

export function blockChecksumsAsync(
  parts: readonly Uint8Array[],
  blockSizes: readonly number[],
  withHashes = contentHashingOn(),
): Promise<BlockChecksums> {
  return checksumsHere(parts, blockSizes, withHashes, SLICE_BYTES);
}

export function regionChecksumsAsync(
  memory: SharedArrayBuffer,
  starts: Float64Array,
  lengths: Float64Array,
  blockSizes: Float64Array,
  withHashes = contentHashingOn(),
  pieces?: RegionPieces,
): Promise<RegionChecksums> {
  return regionChecksumsHere(memory, starts, lengths, blockSizes, withHashes, SLICE_BYTES, pieces);
}
