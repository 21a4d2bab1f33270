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
  const view = patterned(3 * 8192 + 3 * 256 + 8 + 3).subarray(1);
  return (
    crc32c(view, 0) >>> 0 === 0x3b479f7c &&
    crc32c(view, 0xffffffff) >>> 0 === 0xf006b5fe &&
    crc32c(view, 0x1234567) >>> 0 === 0x8040ab97
  );
}

/** XXH3-128 (seed 0, canonical) of the first n bytes of `patterned(100003)`: xxhash-addon's and hash-wasm's digits. */
const XXH128 = [
  [0, "99aa06d3014798d86001c324468d497f"],
  [1, "2f4f4f34bf817ef970cb637dde9fbd5b"],
  [3, "391d1a990ad532735f06299247ebce1d"],
  [4, "7b035e0a4e7bb498ea622822fb9f6963"],
  [8, "b7761319d397bbade151794e733ab010"],
  [9, "fb919495ef8bb9e23ad498b0e53e1308"],
  [16, "f2ee91bda10fb53b5b2213fbfea10211"],
  [17, "1dd685cd9ed00a62a4d1ed67595f68b7"],
  [128, "3c2a5a53e900f02feea43c21e898173d"],
  [129, "b8ce2bde901ddb1d385fb1ad599fd573"],
  [240, "16941514b26ccafbf5492d81131a5dba"],
  [241, "17c3e5f9be55555d2dc5dd711028c489"],
  [1024, "d2ec8e1732380a1395d4c98730e836a3"],
  [1025, "9ee52e3a852b9b1ad0d49858fcc75784"],
  [4103, "1f78ac1338057c4097003857ffa24795"],
  [100003, "dfaa9f14c325cb7987db36056286d62e"],
];

/** `length` bytes that repeat every 251 (a prime) after one leading byte, so views of them from 1 are unaligned. */
function patterned(length) {
  const bytes = new Uint8Array(length + 1);
  for (let i = 0, x = 1; i < 251; i++) bytes[i] = (x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 24;
  for (let n = 251; n < bytes.length; n *= 2) bytes.copyWithin(n, 0, n);
  return bytes;
}

/**
 * Whether `regionChecksums` (the addon's CRC32Cs and XXH3-128s of many regions in one call) gives
 * XXH3-128's known digests on every length class of XXH3 (0, 1–3, 4–8, 9–16, 17–128, 129–240,
 * longer, several 1 KiB stripes blocks), each hashed at once and streamed over blocks of odd sizes,
 * and the same block CRC32Cs as `crc32c` (trusted by crc32cAgrees), with and without hashes.
 */
function regionChecksumsAgree(crc32c, regionChecksums) {
  const bytes = patterned(100003);
  const cases = [];
  for (const [n, hex] of XXH128) {
    cases.push([n, 1 << 20, hex]);
    if (n > 16) cases.push([n, n === 100003 ? 4097 : n > 1000 ? 1000 : 7, hex]);
  }
  const starts = Float64Array.from(cases, () => 1);
  const lengths = Float64Array.from(cases, ([n]) => n);
  const blockSizes = Float64Array.from(cases, ([, block]) => block);
  const want = [];
  for (const [n, block] of cases)
    for (let at = 0; at < n; at += block) want.push(crc32c(bytes.subarray(1 + at, 1 + Math.min(at + block, n))) >>> 0);
  const sums = new Uint32Array(want.length);
  const hashes = new Uint8Array(16 * cases.length);
  if (regionChecksums(bytes, starts, lengths, blockSizes, sums, hashes) !== want.length) return false;
  if (!want.every((sum, i) => sums[i] === sum)) return false;
  const hex = Array.from(hashes, (b) => b.toString(16).padStart(2, "0")).join("");
  if (!cases.every(([, , digest], i) => hex.slice(32 * i, 32 * i + 32) === digest)) return false;
  const alone = new Uint32Array(want.length);
  return (
    regionChecksums(bytes, starts, lengths, blockSizes, alone, undefined) === want.length &&
    want.every((sum, i) => alone[i] === sum)
  );
}

module.exports = { crc32cAgrees, regionChecksumsAgree };
