// file:// reads asking for their blocks' CRC32Cs: hashed on libuv's threads by @cairn/crc32c-native,
// and a load trusting those sums only to compare them with the checkpoint's.
import { open, readdir, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { type StorageAdapter, load, openStorage, save } from "@cairn/core";
import { CRC32C_IMPLEMENTATION, blockChecksums } from "@cairn/core/format";
import type { ObjectReader, ReadOptions } from "@cairn/core/storage";
import { freshDirs } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import "./index.js";

/** CI=true (any value but "", "0", "false"): the addon must have built, instead of the test being skipped. */
const inCI = process.env.CI !== undefined && !["", "0", "false"].includes(process.env.CI);
const native = CRC32C_IMPLEMENTATION === "crc32c-native";

const freshDir = freshDirs("cairn-checksummed-");

/** Every read that asked for checksums, and the sums the adapter gave (undefined: none). */
type Seen = { asked: number; given: Uint32Array | undefined }[];

/** `storage` with its readers watched: which reads asked for block checksums, and what the adapter passed back. */
function watched(storage: StorageAdapter, seen: Seen): StorageAdapter {
  const openReader = storage.openReader!.bind(storage);
  return new Proxy(storage, {
    get(target, property, receiver) {
      if (property !== "openReader") {
        const value = Reflect.get(target, property, receiver) as unknown;
        // The adapter's private fields need the adapter itself as `this`.
        return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      }
      return async (path: string): Promise<ObjectReader> => {
        const reader = await openReader(path);
        return {
          ...reader,
          read: async (range, options?: ReadOptions) => {
            const request = options?.blockChecksums;
            if (!request) return reader.read(range, options);
            const row: Seen[number] = { asked: request.blockSize, given: undefined };
            seen.push(row);
            return reader.read(range, {
              ...options,
              blockChecksums: {
                blockSize: request.blockSize,
                onChecksums: (sums) => {
                  row.given = sums.slice();
                  request.onChecksums(sums);
                },
              },
            });
          },
        };
      };
    },
  });
}

describe.skipIf(!native && !inCI)(
  "file:// reads with block checksums (needs @cairn/crc32c-native: apt-get install gcc, then pnpm install)",
  () => {
    it("passes the CRC32C of exactly the blocks read, short at the end of the file, into the buffer given", async () => {
      const dir = await freshDir();
      const bytes = new Uint8Array(100_000);
      for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 2654435761) >>> 24;
      await writeFile(join(dir, "blob"), bytes);
      const storage = await openStorage(pathToFileURL(dir).href);
      const reader = await storage.openReader!("blob");
      try {
        for (const [offset, length, blockSize] of [
          [0, 100_000, 4096],
          [4096, 50_000, 1000],
          [90_000, 20_000, 4096], // past the end: 10,000 bytes, 3 blocks
          [100_000, 10, 16], // at the end: nothing
        ] as const) {
          let sums: Uint32Array | undefined;
          const into = new Uint8Array(length + 8);
          const got = await reader.read(
            { offset, length },
            { into, blockChecksums: { blockSize, onChecksums: (computed) => (sums = computed) } },
          );
          const wanted = bytes.subarray(offset, offset + length);
          expect(got.byteLength).toBe(wanted.byteLength);
          expect(got.buffer).toBe(into.buffer);
          expect(Buffer.compare(got, wanted)).toBe(0);
          expect(sums && [...sums], `${length} at ${offset}`).toEqual(blockChecksums(wanted, blockSize));
        }
        // The file cut short after the reader learned its size: the sums cover only the bytes that came.
        await truncate(join(dir, "blob"), 50_000);
        let sums: Uint32Array | undefined;
        const short = await reader.read(
          { offset: 40_000, length: 30_000 },
          { blockChecksums: { blockSize: 4096, onChecksums: (computed) => (sums = computed) } },
        );
        expect(short.byteLength).toBe(10_000);
        expect(sums && [...sums]).toEqual(blockChecksums(bytes.subarray(40_000, 50_000), 4096));
        // With a head (a header read with the range) the adapter leaves the hashing to core.
        let called = false;
        const head = new Uint8Array(8);
        const got = await reader.read(
          { offset: 0, length: 100 },
          { head, blockChecksums: { blockSize: 16, onChecksums: () => (called = true) } },
        );
        expect(Buffer.compare(head, bytes.subarray(0, 8))).toBe(0);
        expect(Buffer.compare(got, bytes.subarray(8, 100))).toBe(0);
        expect(called).toBe(false);
      } finally {
        await reader.close();
      }
      await storage.close?.();
    });

    it("loads verified with the adapter's sums, and refuses a damaged block as corrupt naming it", async () => {
      const dir = await freshDir();
      const data = new Float32Array(40 * 1024);
      for (let i = 0; i < data.length; i++) data[i] = Math.sin(i);
      const state = { w: { dtype: "float32" as const, shape: [data.length], data } };
      const url = pathToFileURL(dir).href;
      await save(state, { storage: await openStorage(url), path: "ck", blockSize: 4096 });

      const good: Seen = [];
      const loaded = await load({ storage: watched(await openStorage(url), good), path: "ck" });
      expect(
        Buffer.compare(Buffer.from((loaded.w as { data: Float32Array }).data.buffer), Buffer.from(data.buffer)),
      ).toBe(0);
      // The load asked for the blocks' sums and the adapter gave them: core compared those, hashing nothing itself.
      expect(good.length).toBeGreaterThan(0);
      const blockSize = good[0]!.asked;
      const blocks = Math.ceil(data.byteLength / blockSize);
      expect(good.every((read) => read.asked === blockSize && read.given?.length === blocks)).toBe(true);

      // One byte damaged on disk, in whichever block of the tensor the load checks it.
      const damagedAt = 17 * 4096 + 123;
      const file = (await readdir(join(dir, "ck"))).find((name) => name.endsWith(".safetensors"))!;
      const handle = await open(join(dir, "ck", file), "r+");
      try {
        const { size } = await handle.stat();
        const at = size - data.byteLength + damagedAt;
        const byte = new Uint8Array(1);
        await handle.read(byte, 0, 1, at);
        byte[0]! ^= 0x10;
        await handle.write(byte, 0, 1, at);
      } finally {
        await handle.close();
      }
      const damaged: Seen = [];
      const refused = load({ storage: watched(await openStorage(url), damaged), path: "ck" });
      await expect(refused).rejects.toMatchObject({
        code: "corrupt",
        message: expect.stringContaining(`(block ${Math.floor(damagedAt / blockSize)},`),
      });
      expect(damaged.some((read) => read.given?.length === blocks)).toBe(true);
    });
  },
);
