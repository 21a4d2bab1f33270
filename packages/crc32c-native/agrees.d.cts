/**
 * Whether `crc32c(bytes, initial)` gives CRC32C's known values on every path of a three-stream
 * kernel, chained from several initial values: the check both the build and @cairn/core run on the addon.
 */
export declare function crc32cAgrees(crc32c: (bytes: Uint8Array, initial: number) => number): boolean;
