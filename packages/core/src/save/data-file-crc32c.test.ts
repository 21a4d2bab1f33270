import { describe, expect, it } from "vitest";
import { blockChecksums, crc32c } from "../format/crc32c.js";
import { seededRandom } from "../testing/seeded-random.js";
import { DataFileCrc32c } from "./data-file-crc32c.js";

/** A data file of random shape: a header, then items back to back, each with its block size, in runs (groups). */
function randomFile(seed: number) {
  const random = seededRandom(seed);
  const int = (n: number): number => Math.floor(random() * n);
  const headerLength = 8 + 8 * int(40);
  const count = 1 + int(12);
  const lengths = Array.from({ length: count }, () => (int(5) === 0 ? 0 : int(4) === 0 ? 1 + int(50) : int(40_000)));
  const blockSizes = lengths.map(() => 2 ** (4 + int(10)));
  const offsets: number[] = [];
  let size = headerLength;
  for (const length of lengths) {
    offsets.push(size);
    size += length;
  }
  const bytes = new Uint8Array(size);
  for (let i = 0; i < size; i++) bytes[i] = int(256);
  const groups: number[][] = [];
  for (let i = 0; i < count; i++) {
    if (groups.length === 0 || int(3) === 0) groups.push([]);
    groups[groups.length - 1]!.push(i);
  }
  return { random, int, bytes, offsets, lengths, blockSizes, groups };
}

describe("DataFileCrc32c: a range's CRC32C from the items' block sums", () => {
  it("equals the CRC32C of the range's bytes, for seeded random files, groups and ranges", async () => {
    for (let seed = 1; seed <= 150; seed++) {
      const { int, bytes, offsets, lengths, blockSizes, groups } = randomFile(seed);
      const sums = new DataFileCrc32c({ offsets, items: lengths.map((byteLength) => ({ byteLength })), blockSizes });
      for (const group of groups) {
        // Some groups never register (the range reads their bytes), the rest resolve late, as hashing does.
        if (int(5) === 0) continue;
        const groupSums = group.map((i) =>
          blockChecksums(bytes.subarray(offsets[i]!, offsets[i]! + lengths[i]!), blockSizes[i]!),
        );
        sums.add(group, new Promise((resolve) => setTimeout(() => resolve(groupSums), int(3))));
      }
      for (let r = 0; r < 12; r++) {
        const a = int(bytes.byteLength + 1);
        const b = int(bytes.byteLength + 1);
        const [start, end] = r === 0 ? [0, bytes.byteLength] : [Math.min(a, b), Math.max(a, b)];
        const range = bytes.subarray(start, end);
        expect(await sums.of(range, start), `seed ${seed}, range ${start}-${end}`).toBe(crc32c(range));
      }
    }
  });

  it("cuts a file into parts whose CRC32Cs are each right, as an upload asks for them", async () => {
    const { bytes, offsets, lengths, blockSizes, groups } = randomFile(9001);
    const sums = new DataFileCrc32c({ offsets, items: lengths.map((byteLength) => ({ byteLength })), blockSizes });
    for (const group of groups)
      sums.add(
        group,
        Promise.resolve(
          group.map((i) => blockChecksums(bytes.subarray(offsets[i]!, offsets[i]! + lengths[i]!), blockSizes[i]!)),
        ),
      );
    for (const part of [1000, 4096, 5000]) {
      for (let at = 0; at < bytes.byteLength; at += part) {
        const range = bytes.subarray(at, at + part);
        expect(await sums.of(range, at)).toBe(crc32c(range));
      }
    }
  });

  it("gives a CRC32C the storage refuses when the memory changed after it was hashed", async () => {
    const bytes = new Uint8Array(10_000).fill(3);
    const sums = new DataFileCrc32c({ offsets: [16], items: [{ byteLength: 9984 }], blockSizes: [1024] });
    sums.add([0], Promise.resolve([blockChecksums(bytes.subarray(16), 1024)]));
    bytes[5000] = 4;
    expect(await sums.of(bytes, 0)).not.toBe(crc32c(bytes));
  });

  it("rejects as the hashing did; a reset forgets the last attempt's groups", async () => {
    const bytes = new Uint8Array(4096).fill(1);
    const sums = new DataFileCrc32c({ offsets: [0], items: [{ byteLength: 4096 }], blockSizes: [1024] });
    sums.add([0], Promise.reject(new Error("hashing failed")));
    await expect(sums.of(bytes, 0)).rejects.toThrow("hashing failed");
    sums.reset();
    expect(await sums.of(bytes, 0)).toBe(crc32c(bytes));
  });
});
