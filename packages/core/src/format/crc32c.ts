import { crc32cKernel } from "#platform/format/crc32c-kernel.js";

export {
  type Crc32cImplementation,
  CRC32C_IMPLEMENTATION,
  CRC32C_WORKER_MODULE,
  CRC32C_WORKER_REGIONS,
  type ReadBlockChecksums,
  readBlockChecksums,
  type AdviseHugePages,
  adviseHugePages,
  type ReadThrough,
  readThrough,
} from "#platform/format/crc32c-kernel.js";

/**
 * CRC32C (Castagnoli), the checksum GCS and S3 verify server-side: native SSE4.2/ARMv8 code in
 * Node (`CRC32C_IMPLEMENTATION` says whose), so checksumming runs near memory speed; WebAssembly
 * or JavaScript in a browser.
 */
export function crc32c(bytes: Uint8Array, initial = 0): number {
  return crc32cKernel(bytes, initial);
}

/** CRC32C of each `blockSize` block of `bytes` (the last block may be shorter; none for empty input). */
export function blockChecksums(bytes: Uint8Array, blockSize: number): number[] {
  const sums: number[] = [];
  for (let start = 0; start < bytes.byteLength; start += blockSize) {
    sums.push(crc32c(bytes.subarray(start, Math.min(start + blockSize, bytes.byteLength))));
  }
  return sums;
}
