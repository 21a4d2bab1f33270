import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { seededRandom } from "../testing/seeded-random.js";
import { crc32cJs } from "./crc32c-js.js";
import { CRC32C_IMPLEMENTATION, readBlockChecksums, readThrough } from "./crc32c-kernel.js";

/** CI=true (any value but "", "0", "false"): the addon must have built, instead of the test being skipped. */
const inCI = process.env.CI !== undefined && !["", "0", "false"].includes(process.env.CI);
const native = CRC32C_IMPLEMENTATION === "crc32c-native";

/** The CRC32C of each `blockSize` bytes of `bytes`, block by block in JavaScript. */
function expectedSums(bytes: Uint8Array, blockSize: number): number[] {
  const sums: number[] = [];
  for (let at = 0; at < bytes.byteLength; at += blockSize) sums.push(crc32cJs(bytes.subarray(at, at + blockSize)));
  return sums;
}

describe.skipIf(!native && !inCI)(
  "@cairn/crc32c-native's readBlockChecksums (needs the addon: apt-get install gcc, then pnpm install)",
  () => {
    let dir = "";
    let file = "";
    let fd = -1;
    let content = new Uint8Array(0);
    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), "cairn-crc32c-read-"));
      file = join(dir, "data");
      const random = seededRandom(3434);
      // Past 2 × 256 KiB (the addon's read step), so reads and blocks straddle its steps.
      content = new Uint8Array(700_001);
      for (let i = 0; i < content.length; i++) content[i] = random() * 256;
      writeFileSync(file, content);
      fd = openSync(file, "r");
    });
    afterAll(() => {
      if (fd >= 0) closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    });

    it("is there wherever the addon is", () => {
      expect(readBlockChecksums).toBeTypeOf("function");
    });

    it("reads and checksums seeded random ranges, block sizes and view offsets, short at the end of the file", async () => {
      const read = readBlockChecksums!;
      const random = seededRandom(34);
      const memory = new ArrayBuffer(800_000);
      for (let k = 0; k < 150; k++) {
        const position = Math.floor(random() ** 2 * (content.length + 1000));
        const length = Math.floor(random() * Math.min(memory.byteLength - 64, 600_000));
        const offset = Math.floor(random() * 64);
        // Tiny blocks only over short reads: the JavaScript CRC32C checking them costs a call per block.
        const sizes = length < 20_000 ? [1, 7, 4096, 262_145] : [4096, 65_536, 262_144, 262_145, 1 << 20];
        const blockSize = sizes[Math.floor(random() * sizes.length)]!;
        const into = new Uint8Array(memory, offset, length);
        into.fill(0xa5);
        const sums = new Uint32Array(Math.ceil(length / blockSize) + 1).fill(0xdeadbeef);
        const got = await read(fd, into, position, blockSize, sums);
        const wanted = content.subarray(Math.min(position, content.length), position + length);
        const what = `${length} bytes at ${position} into offset ${offset} in ${blockSize}-byte blocks`;
        expect(got, what).toBe(wanted.byteLength);
        expect(Buffer.compare(into.subarray(0, got), wanted), what).toBe(0);
        // Past the bytes read: nothing written, in the view or the sums.
        expect(
          into.subarray(got).every((byte) => byte === 0xa5),
          what,
        ).toBe(true);
        const blocks = Math.ceil(got / blockSize);
        expect([...sums.subarray(0, blocks)], what).toEqual(expectedSums(wanted, blockSize));
        expect(
          sums.subarray(blocks).every((sum) => sum === 0xdeadbeef),
          what,
        ).toBe(true);
      }
    });

    it("rejects a bad descriptor as fs does, with EBADF", async () => {
      const closed = openSync(file, "r");
      closeSync(closed);
      await expect(readBlockChecksums!(closed, new Uint8Array(10), 0, 4, new Uint32Array(3))).rejects.toMatchObject({
        code: "EBADF",
        errno: -9,
        syscall: "read",
      });
      // A directory: EISDIR, an Error like fs's.
      const directory = openSync(dir, "r");
      try {
        const failed = await readBlockChecksums!(directory, new Uint8Array(10), 0, 4, new Uint32Array(3)).catch(
          (error: unknown) => error,
        );
        expect(failed).toBeInstanceOf(Error);
        expect(failed).toMatchObject({ code: "EISDIR" });
      } finally {
        closeSync(directory);
      }
    });

    it("refuses arguments it cannot use, before reading anything", () => {
      const read = readBlockChecksums! as unknown as (...args: unknown[]) => Promise<number>;
      const into = new Uint8Array(100);
      const sums = new Uint32Array(10);
      for (const bad of [-1, 1.5, "3", undefined, 2 ** 31, Number.NaN])
        expect(() => read(bad, into, 0, 10, sums)).toThrow(TypeError);
      for (const bad of [new Uint16Array(50), new ArrayBuffer(100), new DataView(new ArrayBuffer(100)), [1, 2], null])
        expect(() => read(fd, bad, 0, 10, sums)).toThrow(TypeError);
      for (const bad of [-1, 0.5, 2 ** 53, Number.POSITIVE_INFINITY, "0"])
        expect(() => read(fd, into, bad, 10, sums)).toThrow(TypeError);
      expect(() => read(fd, into, 2 ** 53 - 50, 10, sums)).toThrow(TypeError);
      for (const bad of [0, -4, 1.5, Number.NaN, "10"]) expect(() => read(fd, into, 0, bad, sums)).toThrow(TypeError);
      for (const bad of [new Int32Array(10), new Uint8Array(40), undefined])
        expect(() => read(fd, into, 0, 10, bad)).toThrow(TypeError);
      expect(() => read(fd, into, 0, 10, new Uint32Array(9))).toThrow(RangeError);
      expect(() => read(fd, into, 0, 11, new Uint32Array(9))).toThrow(RangeError);
      expect(() => read(fd, into)).toThrow(TypeError);
      // Enough places for the blocks, and an empty read: fine.
      return Promise.all([
        expect(read(fd, into, 0, 11, new Uint32Array(10))).resolves.toBe(100),
        expect(read(fd, new Uint8Array(0), 0, 1, new Uint32Array(0))).resolves.toBe(0),
      ]);
    });
    it("reads through a buffer and copies from `skip` on into a view, seeded ranges, short at the end of the file", async () => {
      const through = readThrough!;
      expect(through).toBeTypeOf("function");
      const random = seededRandom(3401);
      for (let k = 0; k < 120; k++) {
        const position = Math.floor(random() ** 2 * (content.length + 1000));
        const length = Math.floor(random() * 300_000);
        const skip = Math.floor(random() * (length + 1));
        const intoLength = Math.floor(random() * (length - skip + 200));
        const buffer = new Uint8Array(new ArrayBuffer(length + 7), Math.floor(random() * 7), length).fill(0x5a);
        const into = new Uint8Array(new ArrayBuffer(intoLength + 9), Math.floor(random() * 9), intoLength).fill(0xa5);
        const got = await through(fd, buffer, position, into, skip);
        const wanted = content.subarray(Math.min(position, content.length), position + length);
        const what = `${length} bytes at ${position}, ${intoLength} copied from ${skip}`;
        expect(got, what).toBe(wanted.byteLength);
        expect(Buffer.compare(buffer.subarray(0, got), wanted), what).toBe(0);
        const copied = Math.max(0, Math.min(intoLength, got - skip));
        expect(Buffer.compare(into.subarray(0, copied), wanted.subarray(skip, skip + copied)), what).toBe(0);
        // Past the bytes copied: nothing written.
        expect(
          into.subarray(copied).every((byte) => byte === 0xa5),
          what,
        ).toBe(true);
      }
    });

    it("reads through a buffer: rejects as fs does, refuses arguments it cannot use", async () => {
      const through = readThrough! as unknown as (...args: unknown[]) => Promise<number>;
      const closed = openSync(file, "r");
      closeSync(closed);
      await expect(through(closed, new Uint8Array(10), 0, new Uint8Array(10), 0)).rejects.toMatchObject({
        code: "EBADF",
        syscall: "read",
      });
      const buffer = new Uint8Array(100);
      const into = new Uint8Array(100);
      for (const bad of [-1, 1.5, "3", undefined, 2 ** 31])
        expect(() => through(bad, buffer, 0, into, 0)).toThrow(TypeError);
      for (const bad of [new Uint16Array(50), new ArrayBuffer(100), null]) {
        expect(() => through(fd, bad, 0, into, 0)).toThrow(TypeError);
        expect(() => through(fd, buffer, 0, bad, 0)).toThrow(TypeError);
      }
      for (const bad of [-1, 0.5, 2 ** 53, "0"]) expect(() => through(fd, buffer, bad, into, 0)).toThrow(TypeError);
      for (const bad of [-1, 0.5, "0"]) expect(() => through(fd, buffer, 0, into, bad)).toThrow(TypeError);
      expect(() => through(fd, buffer, 0, into, 101)).toThrow(RangeError);
      await expect(through(fd, buffer, 0, into, 100)).resolves.toBe(100);
    });
  },
);
