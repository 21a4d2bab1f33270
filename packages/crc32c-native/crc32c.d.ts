/**
 * CRC32C (Castagnoli) of `bytes` continuing from `initial` (a finished CRC32C; default 0), the
 * same pre- and post-inversion as `@node-rs/crc32`'s `crc32c`. Any TypedArray or DataView, with
 * its byte offset, including views of a SharedArrayBuffer (read in place). Loaded with `require`:
 * the addon is a `.node` file, which `import` cannot load.
 */
export declare function crc32c(bytes: ArrayBufferView, initial?: number): number;
