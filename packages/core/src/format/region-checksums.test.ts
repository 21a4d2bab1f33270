import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import type { RegionChecksums } from "@cairn/crc32c-native/agrees";
import { regionChecksumsAgree } from "@cairn/crc32c-native/agrees";
import { createXXHash128 } from "hash-wasm";
import { describe, expect, it } from "vitest";
import { WORKER_SOURCE, workerModules } from "../save/checksum-workers.js";
import { seededRandom } from "../testing/seeded-random.js";
import { crc32cJs } from "./crc32c-js.js";
import { CRC32C_WORKER_REGIONS, chooseCrc32cKernel } from "./crc32c-kernel.js";

// @cairn/crc32c-native's regionChecksums: the block CRC32Cs and XXH3-128 of many chunks in one
// native call (xxhash.h vendored). Its digests must be xxhash-addon's and hash-wasm's on every
// length, and an addon whose XXH3 is wrong must never be trusted with a chunk's content hash.

/** CI=true (any value but "", "0", "false"): the addon must have built, instead of the test being skipped. */
const inCI = process.env.CI !== undefined && !["", "0", "false"].includes(process.env.CI);
const require = createRequire(import.meta.url);
/** Outside CI, an addon built before regionChecksums existed (a checkout not reinstalled since) skips these. */
const nativeOnly = it.skipIf(!CRC32C_WORKER_REGIONS && !inCI);

/** The addon's function, where it loaded (the test above it fails under CI where it did not). */
function addonRegions(): RegionChecksums {
  return (require("@cairn/crc32c-native") as { regionChecksums: RegionChecksums }).regionChecksums;
}

/** xxhash-addon's one-shot XXH3-128 (an optional dependency: undefined where it did not install). */
function addonXxh128(): ((bytes: Uint8Array) => string) | undefined {
  try {
    const { XXHash128 } = require("xxhash-addon") as { XXHash128: { hash(bytes: Uint8Array): Buffer } };
    return (bytes) => XXHash128.hash(bytes).toString("hex");
  } catch {
    return undefined;
  }
}

/** regionChecksums in JavaScript (crc32cJs and hash-wasm): what the addon must give. */
async function referenceRegions(): Promise<RegionChecksums> {
  const h = await createXXHash128();
  return (bytes, starts, lengths, blockSizes, sums, hashes) => {
    let n = 0;
    for (let i = 0; i < starts.length; i++) {
      const region = bytes.subarray(starts[i]!, starts[i]! + lengths[i]!);
      for (let at = 0; at < region.length; at += blockSizes[i]!)
        sums[n++] = crc32cJs(region.subarray(at, Math.min(at + blockSizes[i]!, region.length)));
      if (hashes) {
        h.init();
        h.update(region);
        hashes.set(h.digest("binary"), 16 * i);
      }
    }
    return n;
  };
}

/** A loader whose @cairn/crc32c-native loads with a right CRC32C and the given regionChecksums. */
function loaderWith(regionChecksums: RegionChecksums): NodeJS.Require {
  const addon = "/installed/@cairn/crc32c-native/build/crc32c.node";
  const crc32c = (bytes: Uint8Array, initial = 0) => crc32cJs(bytes, initial);
  return Object.assign((id: string) => (id === addon ? { crc32c, regionChecksums } : (require(id) as unknown)), {
    resolve: (id: string) => (id === "@cairn/crc32c-native" ? addon : require.resolve(id)),
  }) as unknown as NodeJS.Require;
}

describe("the addon's regionChecksums", () => {
  nativeOnly(
    "is trusted and hashes the checksum workers' whole chunks (CI fails without it; else: pnpm install)",
    async () => {
      expect(CRC32C_WORKER_REGIONS).toBe(true);
      expect(workerModules().regions).toBe(true);
      const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: workerModules() });
      try {
        const info = new Promise((resolve, reject) => {
          worker.once("message", resolve);
          worker.once("error", reject);
        });
        worker.postMessage({ id: 1, info: true });
        expect(await info).toMatchObject({ native: true });
      } finally {
        await worker.terminate();
      }
    },
  );

  nativeOnly(
    "gives xxhash-addon's and hash-wasm's XXH3-128 of every length 0..4096, whole and streamed (seeded)",
    async () => {
      const regions = addonRegions();
      const reference = await referenceRegions();
      const other = addonXxh128();
      const random = seededRandom(3401);
      const count = 4097;
      const bytes = new Uint8Array(count + 4096 + 64);
      for (let i = 0; i < bytes.length; i++) bytes[i] = (random() * 256) | 0;
      // Region n: n bytes from a random (mostly unaligned) start; whole in one block, or streamed in blocks of 1..n.
      const starts = Float64Array.from({ length: count }, () => Math.floor(random() * 64));
      const lengths = Float64Array.from({ length: count }, (_, n) => n);
      for (const streamed of [false, true]) {
        const blockSizes = Float64Array.from(lengths, (n) =>
          streamed ? 1 + Math.floor(random() * Math.max(1, n)) : 1 << 20,
        );
        const blocks = Array.from(lengths, (n, i) => Math.ceil(n / blockSizes[i]!)).reduce((a, b) => a + b, 0);
        const [sums, want] = [new Uint32Array(blocks), new Uint32Array(blocks)];
        const [hashes, wantHashes] = [new Uint8Array(16 * count), new Uint8Array(16 * count)];
        expect(regions(bytes, starts, lengths, blockSizes, sums, hashes)).toBe(blocks);
        reference(bytes, starts, lengths, blockSizes, want, wantHashes);
        expect(Buffer.from(sums.buffer).equals(Buffer.from(want.buffer)), "block CRC32Cs").toBe(true);
        for (let n = 0; n < count; n++) {
          const digest = Buffer.from(hashes.subarray(16 * n, 16 * n + 16)).toString("hex");
          expect(digest, `${n} bytes, streamed ${streamed}`).toBe(
            Buffer.from(wantHashes.subarray(16 * n, 16 * n + 16)).toString("hex"),
          );
          if (other && n % 7 === 0) expect(digest).toBe(other(bytes.subarray(starts[n]!, starts[n]! + n)));
        }
      }
    },
  );

  nativeOnly("gives the same digests of large chunks, at once and in blocks of several sizes (seeded)", async () => {
    const regions = addonRegions();
    const reference = await referenceRegions();
    const other = addonXxh128();
    const random = seededRandom(3402);
    const memory = new SharedArrayBuffer((5 << 20) + 64);
    const bytes = new Uint8Array(memory);
    for (let i = 0; i < bytes.length; i += 4) bytes[i] = (random() * 256) | 0;
    const cases = [
      [3, (1 << 20) + 17, 1 << 20],
      [5, 5 << 20, 4097],
      [0, (3 << 20) + 1, 65536],
      [1, 2 << 20, 8 << 20],
    ];
    const starts = Float64Array.from(cases, ([start]) => start!);
    const lengths = Float64Array.from(cases, ([, length]) => length!);
    const blockSizes = Float64Array.from(cases, ([, , block]) => block!);
    const blocks = cases.reduce((n, [, length, block]) => n + Math.ceil(length! / block!), 0);
    const [sums, want] = [new Uint32Array(blocks), new Uint32Array(blocks)];
    const [hashes, wantHashes] = [new Uint8Array(16 * cases.length), new Uint8Array(16 * cases.length)];
    expect(regions(bytes, starts, lengths, blockSizes, sums, hashes)).toBe(blocks);
    reference(bytes, starts, lengths, blockSizes, want, wantHashes);
    expect([...sums]).toEqual([...want]);
    expect(Buffer.from(hashes).toString("hex")).toBe(Buffer.from(wantHashes).toString("hex"));
    if (other)
      for (const [i, [start, length]] of cases.entries())
        expect(Buffer.from(hashes.subarray(16 * i, 16 * i + 16)).toString("hex")).toBe(
          other(bytes.subarray(start!, start! + length!)),
        );
  });

  nativeOnly("refuses regions outside the bytes and outputs too short, writing nothing", () => {
    const regions = addonRegions();
    const bytes = new Uint8Array(100).fill(7);
    const one = (x: number) => Float64Array.of(x);
    const sums = new Uint32Array(4).fill(9);
    const hashes = new Uint8Array(32).fill(9);
    const refused: [Float64Array, Float64Array, Float64Array, Uint32Array, Uint8Array | undefined][] = [
      [Float64Array.of(0, 90), Float64Array.of(10, 11), Float64Array.of(64, 64), sums, hashes], // past the end
      [one(-1), one(10), one(64), sums, hashes],
      [one(0.5), one(10), one(64), sums, hashes],
      [one(0), one(10), one(0), sums, hashes], // a block size of 0
      [one(0), one(100), one(20), sums, hashes], // 5 blocks, 4 places
      [Float64Array.of(0, 10, 20), Float64Array.of(1, 1, 1), Float64Array.of(8, 8, 8), sums, hashes], // 3 hashes, 2 places
    ];
    for (const [starts, lengths, blockSizes, s, h] of refused) {
      expect(() => regions(bytes, starts, lengths, blockSizes, s, h)).toThrow(RangeError);
      expect([...sums].every((x) => x === 9) && hashes.every((x) => x === 9)).toBe(true);
    }
    expect(() => regions(bytes, one(0), Float64Array.of(1, 2), one(8), sums, hashes)).toThrow(TypeError);
    expect(() => regions(bytes, [0] as unknown as Float64Array, one(1), one(8), sums, hashes)).toThrow(TypeError);
    expect(() => regions(bytes, one(0), one(1), one(8), sums, new Uint32Array(4) as never)).toThrow(TypeError);
    expect(regions(bytes, one(100), one(0), one(8), sums, hashes)).toBe(0);
  });
});

describe("trusting an addon's regionChecksums", () => {
  it("the package's check accepts a right one and refuses one wrong on any path", async () => {
    const right = await referenceRegions();
    expect(regionChecksumsAgree(crc32cJs, right)).toBe(true);
    const wrongWhenStreamed: RegionChecksums = (bytes, starts, lengths, blockSizes, sums, hashes) => {
      const n = right(bytes, starts, lengths, blockSizes, sums, hashes);
      lengths.forEach((length, i) => {
        if (hashes && length > blockSizes[i]!) hashes[16 * i + 15]! ^= 1;
      });
      return n;
    };
    const wrongOnLong: RegionChecksums = (bytes, starts, lengths, blockSizes, sums, hashes) => {
      const n = right(bytes, starts, lengths, blockSizes, sums, hashes);
      lengths.forEach((length, i) => {
        if (hashes && length > 4096) hashes[16 * i]! ^= 0x80;
      });
      return n;
    };
    const wrongSum: RegionChecksums = (...args) => {
      const n = right(...args);
      args[4][n - 1]! ^= 1;
      return n;
    };
    const wrongWithoutHashes: RegionChecksums = (bytes, starts, lengths, blockSizes, sums, hashes) =>
      hashes ? right(bytes, starts, lengths, blockSizes, sums, hashes) : 0;
    const littleEndian: RegionChecksums = (bytes, starts, lengths, blockSizes, sums, hashes) => {
      const n = right(bytes, starts, lengths, blockSizes, sums, hashes);
      for (let i = 0; hashes && i < starts.length; i++) hashes.subarray(16 * i, 16 * i + 16).reverse();
      return n;
    };
    for (const wrong of [wrongWhenStreamed, wrongOnLong, wrongSum, wrongWithoutHashes, littleEndian])
      expect(regionChecksumsAgree(crc32cJs, wrong)).toBe(false);
  });

  it("core keeps the addon's CRC32C but hashes in the workers' own code when its XXH3 is wrong", async () => {
    const right = await referenceRegions();
    const kept = chooseCrc32cKernel(loaderWith(right));
    expect(kept).toMatchObject({ implementation: "crc32c-native", regionChecksums: true });
    const wrong: RegionChecksums = (bytes, starts, lengths, blockSizes, sums, hashes) => {
      const n = right(bytes, starts, lengths, blockSizes, sums, hashes);
      if (hashes) hashes[0]! ^= 1;
      return n;
    };
    expect(chooseCrc32cKernel(loaderWith(wrong))).toMatchObject({
      implementation: "crc32c-native",
      regionChecksums: false,
    });
    // An addon built before regionChecksums existed.
    expect(chooseCrc32cKernel(loaderWith(undefined as never))).toMatchObject({
      implementation: "crc32c-native",
      regionChecksums: false,
    });
  });
});
