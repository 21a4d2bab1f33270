import { describe, expect, it } from "vitest";
import { crc32c } from "./crc32c.js";
import { crc32cCombine, crc32cCombiner } from "./crc32c-combine.js";
import { seededRandom } from "../testing/seeded-random.js";

function randomBytes(length: number, seed: number): Uint8Array {
  let x = seed >>> 0;
  const bytes = new Uint8Array(length);
  for (let i = 0; i < length; i++) bytes[i] = (x = (x * 1103515245 + 12345) >>> 0) >>> 24;
  return bytes;
}

describe("crc32cCombine", () => {
  it("gives the CRC32C of the concatenation over seeded random splits", () => {
    for (let seed = 1; seed <= 200; seed++) {
      const length = (seed * 7919) % 70_000;
      const bytes = randomBytes(length, seed);
      const cut = length === 0 ? 0 : (seed * 104_729) % (length + 1);
      const a = bytes.subarray(0, cut);
      const b = bytes.subarray(cut);
      expect(crc32cCombine(crc32c(a), crc32c(b), b.byteLength)).toBe(crc32c(bytes));
    }
  });

  it("leaves the first CRC as it is when the second part is empty", () => {
    const a = randomBytes(100, 9);
    expect(crc32cCombine(crc32c(a), crc32c(new Uint8Array(0)), 0)).toBe(crc32c(a));
  });

  it("a fixed-length combiner agrees with the general one over a run of blocks", () => {
    for (const blockSize of [1, 3, 1024, 4096, 65_536]) {
      const combine = crc32cCombiner(blockSize);
      const bytes = randomBytes(blockSize * 9, blockSize);
      let run = crc32c(bytes.subarray(0, blockSize));
      for (let at = blockSize; at < bytes.byteLength; at += blockSize) {
        const sum = crc32c(bytes.subarray(at, at + blockSize));
        expect(combine(run, sum)).toBe(crc32cCombine(run, sum, blockSize));
        run = combine(run, sum);
      }
      expect(run).toBe(crc32c(bytes));
    }
  });

  it("moves a CRC past lengths of 512 MiB and more: past A then B is past A + B, for seeded lengths to 2^45", () => {
    // Past `n` bytes of zeros: crc32cCombine(crc, 0, n). Its factors come from x^(2^k) for each bit k + 3 of n.
    const random = seededRandom(45);
    for (let k = 0; k < 40; k++) {
      const a = Math.floor(random() * 2 ** (20 + (k % 26)));
      const b = Math.floor(random() * 2 ** 45);
      const crc = Math.floor(random() * 2 ** 32);
      expect(crc32cCombine(crc32cCombine(crc, 0, a), 0, b), `${a} + ${b}`).toBe(crc32cCombine(crc, 0, a + b));
    }
    // 2^29 bytes (bit 32 of the length in bits) against 2^28 twice.
    expect(crc32cCombine(123456789, 0, 2 ** 29)).toBe(crc32cCombine(crc32cCombine(123456789, 0, 2 ** 28), 0, 2 ** 28));
  });

  it("gives the CRC32C of the whole from any seeded random cut, with a combiner made for the second part's length", () => {
    for (let seed = 1; seed <= 100; seed++) {
      const random = seededRandom(seed);
      const bytes = new Uint8Array(Math.floor(random() * 20_000));
      for (let i = 0; i < bytes.length; i++) bytes[i] = random() * 256;
      const cut = Math.floor(random() * (bytes.length + 1));
      const [a, b] = [bytes.subarray(0, cut), bytes.subarray(cut)];
      expect(crc32cCombiner(b.byteLength)(crc32c(a), crc32c(b)), `seed ${seed}`).toBe(crc32c(bytes));
    }
  });
});
