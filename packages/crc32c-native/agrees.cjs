"use strict";
/* global module */
// The one trust check of a CRC32C kernel, run by the build script on the addon it built and by
// @cairn/core on the addon it loads: a stale, foreign or miscompiled addon must not checksum every block wrongly.

/**
 * Whether `crc32c(bytes, initial)` gives the known CRC32Cs (CRC32C's own, checked in core's
 * crc32c-kernel-trust.test.ts against its JavaScript CRC32C) of bytes that take every path of a
 * three-stream kernel (an unaligned head, 3 × 8 KiB and 3 × 256 B blocks, words, a tail), from
 * several initial values, and CRC32C's check value of "123456789" in two chained calls. The bytes
 * repeat every 251 (a prime), so no two streams see the same block; made with `copyWithin` and
 * compared with constants, the check runs no cold JavaScript loop over them (0.06 ms).
 */
function crc32cAgrees(crc32c) {
  const digits = Uint8Array.from([0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39]);
  if (crc32c(digits.subarray(4), crc32c(digits.subarray(0, 4), 0)) >>> 0 !== 0xe3069283) return false;
  const bytes = new Uint8Array(3 * 8192 + 3 * 256 + 8 + 3 + 1);
  for (let i = 0, x = 1; i < 251; i++) bytes[i] = (x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 24;
  for (let n = 251; n < bytes.length; n *= 2) bytes.copyWithin(n, 0, n);
  const view = bytes.subarray(1);
  return (
    crc32c(view, 0) >>> 0 === 0x3b479f7c &&
    crc32c(view, 0xffffffff) >>> 0 === 0xf006b5fe &&
    crc32c(view, 0x1234567) >>> 0 === 0x8040ab97
  );
}

module.exports = { crc32cAgrees };
