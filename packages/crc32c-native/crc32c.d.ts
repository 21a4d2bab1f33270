import type { RegionChecksums } from "./agrees.cjs";

/**
 * CRC32C (Castagnoli) of `bytes` continuing from `initial` (a finished CRC32C; default 0), the
 * same pre- and post-inversion as `@node-rs/crc32`'s `crc32c`. Any TypedArray or DataView, with
 * its byte offset, including views of a SharedArrayBuffer (read in place). Loaded with `require`:
 * the addon is a `.node` file, which `import` cannot load.
 */
export declare function crc32c(bytes: ArrayBufferView, initial?: number): number;
/**
 * On libuv's threadpool (as `fs.read`): reads `into.byteLength` bytes of the open file `fd` from
 * `position` (fewer at the end of the file) into `into`, and writes the CRC32C of each `blockSize`
 * bytes read to `sums` (the last block possibly shorter) while they are in the cache; resolves
 * how many bytes it read. Rejects as `fs` does (`code`, `errno`, `syscall`); throws a TypeError or
 * RangeError for arguments it cannot use (`sums` too short for `into`'s blocks).
 */
export declare function readBlockChecksums(
  fd: number,
  into: Uint8Array,
  position: number,
  blockSize: number,
  sums: Uint32Array,
): Promise<number>;
/**
 * The CRC32C of every block of many regions of `bytes` and each region's XXH3-128, in one call:
 * region i is `lengths[i]` bytes from `starts[i]`, in blocks of `blockSizes[i]` (the last one
 * possibly shorter). Writes every region's block CRC32Cs to `sums` in order and, with `hashes`,
 * region i's XXH3-128 (seed 0, the canonical big-endian 16 bytes `xxhsum -H2` prints) to
 * `hashes[16 i, 16 i + 16)`; returns how many sums it wrote. Views of a SharedArrayBuffer are read
 * in place. Throws a RangeError, having written nothing, for a region outside `bytes` or outputs too short.
 */
export declare const regionChecksums: RegionChecksums;
/**
 * Asks Linux to back the whole 2 MiB pages inside `bytes` with transparent huge pages (`madvise`
 * `MADV_HUGEPAGE`; pages already touched stay as they are) and returns the offset in `bytes` of the
 * first of them, or -1 where there is none or it cannot (not Linux, huge pages off). An `O_DIRECT`
 * read into huge pages reaches the device in requests of up to `max_sectors_kb`, where 4 KiB pages
 * cap a request at `max_segments` pages. Throws a TypeError for anything but a Uint8Array.
 */
export declare function adviseHugePages(bytes: Uint8Array): number;
/**
 * On libuv's threadpool (as `fs.read`): reads `buffer.byteLength` bytes of the open file `fd` from
 * `position` (fewer at the end of the file) into `buffer`, then copies the bytes read from
 * `buffer[skip]` on into `into`, as many as fit; resolves how many bytes it read into `buffer`.
 * For `O_DIRECT` reads through an aligned buffer: the copy runs on the thread that read. Rejects as
 * `fs` does; throws a TypeError or RangeError for arguments it cannot use (`skip` past `buffer`).
 */
export declare function readThrough(
  fd: number,
  buffer: Uint8Array,
  position: number,
  into: Uint8Array,
  skip: number,
): Promise<number>;
