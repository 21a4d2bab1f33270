import { crc32c as nativeCrc32c } from "@node-rs/crc32";

/**
 * CRC32C (Castagnoli), the checksum GCS and S3 verify server-side, computed by
 * @node-rs/crc32's SSE4.2/ARMv8 code so checksumming runs near memory speed.
 */
export function crc32c(bytes: Uint8Array, initial = 0): number {
  return nativeCrc32c(bytes as Buffer, initial) >>> 0;
}

/** CRC32C of each `blockSize` block of `bytes` (the last block may be shorter; none for empty input). */
export function blockChecksums(bytes: Uint8Array, blockSize: number): number[] {
  const sums: number[] = [];
  for (let start = 0; start < bytes.byteLength; start += blockSize) {
    sums.push(crc32c(bytes.subarray(start, Math.min(start + blockSize, bytes.byteLength))));
  }
  return sums;
}
