/**
 * Whether `crc32c(bytes, initial)` gives CRC32C's known values on every path of a three-stream
 * kernel, chained from several initial values: the check both the build and @cairn/core run on the addon.
 */
export declare function crc32cAgrees(crc32c: (bytes: Uint8Array, initial: number) => number): boolean;
/**
 * Whether `regionChecksums` gives XXH3-128's known digests on every length class of XXH3, hashed
 * at once and streamed over blocks, and `crc32c`'s block CRC32Cs, with and without hashes.
 */
export declare function regionChecksumsAgree(
  crc32c: (bytes: Uint8Array, initial: number) => number,
  regionChecksums: RegionChecksums,
): boolean;
/** @cairn/crc32c-native's `regionChecksums`. */
export type RegionChecksums = (
  bytes: Uint8Array,
  starts: Float64Array,
  lengths: Float64Array,
  blockSizes: Float64Array,
  sums: Uint32Array,
  hashes?: Uint8Array,
) => number;
