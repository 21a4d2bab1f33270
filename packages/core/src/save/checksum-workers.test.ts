import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { isCheckpointError } from "../errors.js";
import { blockChecksums } from "../format/crc32c.js";
import { loadXxh128 } from "../format/xxh128.js";
import { Worker } from "node:worker_threads";
import { WORKER_SOURCE, blockChecksumsAsync, regionChecksumsAsync, workerModules } from "./checksum-workers.js";

describe("checksum workers", () => {
  it("the checksum workers hash each part and region in the pass that CRCs its blocks", async () => {
    const xxh = await loadXxh128();
    const sizes = [0, 5, 1024, 2048, 2049, 3000, 65539, (1 << 20) + 17];
    const memory = new SharedArrayBuffer(sizes.reduce((n, s) => n + s, 0));
    const parts: Uint8Array[] = [];
    let at = 0;
    for (const size of sizes) {
      const part = new Uint8Array(memory, at, size);
      part.set(randomBytes(size));
      parts.push(part);
      at += size;
    }
    const blocks = sizes.map(() => 1024);
    const shared = await blockChecksumsAsync(parts, blocks);
    const unshared = await blockChecksumsAsync(
      parts.map((p) => p.slice()),
      blocks,
    );
    for (const [i, part] of parts.entries()) {
      expect(shared.sums[i]).toEqual(blockChecksums(part, 1024));
      expect(shared.hashes![i]).toBe(xxh.hash(part));
      expect(unshared.sums[i]).toEqual(blockChecksums(part, 1024));
      expect(unshared.hashes![i]).toBe(xxh.hash(part));
    }
    expect((await blockChecksumsAsync(parts, blocks, false)).hashes).toBeUndefined();
    const starts = Float64Array.from(parts, (p) => p.byteOffset);
    const regions = await regionChecksumsAsync(memory, starts, Float64Array.from(sizes), Float64Array.from(blocks));
    expect(Array.from(regions.sums)).toEqual(parts.flatMap((p) => blockChecksums(p, 1024)));
    for (const [i, part] of parts.entries())
      expect(Buffer.from(regions.hashes!.subarray(16 * i, 16 * i + 16)).toString("hex")).toBe(xxh.hash(part));
  });

  it("small chunks hashed through the lean WebAssembly path give the one-at-a-time digests (seeded)", async () => {
    const xxh = await loadXxh128();
    // Every XXH3 length class (0, 1–3, 4–8, 9–16, 17–128, 129–240, longer) and sizes around the paths' limits.
    const edges = [0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 2048, 2049, 4095, 4096, 4097];
    let seed = 34;
    const next = (): number => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
    const sizes = [...edges, ...Array.from({ length: 300 }, () => next() % 5000)];
    const memory = new SharedArrayBuffer(sizes.reduce((n, s) => n + s, 0));
    const bytes = new Uint8Array(memory);
    for (let i = 0; i < bytes.length; i++) bytes[i] = next() >>> 24;
    const starts = new Float64Array(sizes.length);
    for (let i = 1; i < sizes.length; i++) starts[i] = starts[i - 1]! + sizes[i - 1]!;
    const workers = [true, false].map(
      // Not the addon's regionChecksums, which would hash these whole chunks instead.
      (lean) => new Worker(WORKER_SOURCE, { eval: true, workerData: { ...workerModules(), regions: false, lean } }),
    );
    const ask = <T>(worker: Worker, message: Record<string, unknown>): Promise<T> =>
      new Promise<T>((resolve, reject) => {
        worker.once("message", resolve);
        worker.once("error", reject);
        worker.postMessage({ id: 1, ...message });
      });
    try {
      expect(await ask(workers[0]!, { info: true })).toMatchObject({ lean: true, native: false });
      expect(await ask(workers[1]!, { info: true })).toMatchObject({ lean: false, native: false });
      const [lean, wrapped] = await Promise.all(
        workers.map((worker) =>
          ask<{ hashes: Uint8Array }>(worker, {
            regions: {
              buffer: memory,
              starts,
              lengths: Float64Array.from(sizes),
              blockSizes: new Float64Array(sizes.length).fill(1 << 20),
              count: sizes.filter((s) => s > 0).length,
            },
            withHashes: true,
          }),
        ),
      );
      for (const [i, size] of sizes.entries()) {
        const one = xxh.hash(bytes.subarray(starts[i]!, starts[i]! + size));
        expect(Buffer.from(lean!.hashes.subarray(16 * i, 16 * i + 16)).toString("hex"), `size ${size}`).toBe(one);
        expect(Buffer.from(wrapped!.hashes.subarray(16 * i, 16 * i + 16)).toString("hex"), `size ${size}`).toBe(one);
      }
    } finally {
      await Promise.all(workers.map((w) => w.terminate()));
    }
  });

  it("a worker where xxhash-addon does not load hashes with hash-wasm, to the same digests", async () => {
    const xxh = await loadXxh128();
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { ...workerModules(), regions: false, xxhashAddon: "/nonexistent/xxhash-addon" },
    });
    try {
      const sizes = [0, 7, 1024, 4096, 70_000];
      const memory = new SharedArrayBuffer(sizes.reduce((n, s) => n + s, 0));
      let at = 0;
      const parts = sizes.map((size) => {
        const part = new Uint8Array(memory, at, size);
        part.set(randomBytes(size));
        at += size;
        return { buffer: memory, offset: part.byteOffset, length: size, blockSize: 1024, part };
      });
      const reply = new Promise<{ sums: number[][]; hashes: Uint8Array }>((resolve, reject) => {
        worker.once("message", resolve);
        worker.once("error", reject);
      });
      worker.postMessage({ id: 1, parts: parts.map(({ part: _, ...p }) => p), withHashes: true });
      const { sums, hashes } = await reply;
      for (const [i, { part }] of parts.entries()) {
        expect(sums[i]).toEqual(blockChecksums(part, 1024));
        expect(Buffer.from(hashes.subarray(16 * i, 16 * i + 16)).toString("hex")).toBe(xxh.hash(part));
      }
    } finally {
      await worker.terminate();
    }
  });

  it("parts of several memories in one message get their own sums and digests, natively or not", async () => {
    const xxh = await loadXxh128();
    const memories = [new SharedArrayBuffer(300_000), new SharedArrayBuffer(300_000)];
    for (const memory of memories) new Uint8Array(memory).set(randomBytes(memory.byteLength));
    // Runs of parts of one memory, then the other, then the first again; empty, small and multi-block parts.
    const layout: [number, number, number, number][] = [
      [0, 0, 0, 1024],
      [0, 5, 1024, 1024],
      [0, 2000, 70_000, 4096],
      [1, 3, 1, 1024],
      [1, 9000, 1024, 1 << 20],
      [0, 100_000, 200_000, 65536],
      [0, 17, 3000, 1024],
    ];
    const parts = layout.map(([m, offset, length, blockSize]) => ({
      buffer: memories[m]!,
      offset,
      length,
      blockSize,
    }));
    for (const regions of [true, false]) {
      const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { ...workerModules(), regions } });
      try {
        const reply = new Promise<{ sums: number[][]; hashes: Uint8Array }>((resolve, reject) => {
          worker.once("message", resolve);
          worker.once("error", reject);
        });
        worker.postMessage({ id: 1, parts, withHashes: true });
        const { sums, hashes } = await reply;
        for (const [i, { buffer, offset, length, blockSize }] of parts.entries()) {
          const part = new Uint8Array(buffer, offset, length);
          expect(sums[i], `part ${i}, regions ${regions}`).toEqual(blockChecksums(part, blockSize));
          expect(Buffer.from(hashes.subarray(16 * i, 16 * i + 16)).toString("hex")).toBe(xxh.hash(part));
        }
      } finally {
        await worker.terminate();
      }
    }
  });

  it("a job that fails in a worker fails alone: the others in flight, and later ones, are answered", async () => {
    const size = 4 << 20;
    const memory = new SharedArrayBuffer(16 * size);
    const bytes = new Uint8Array(memory);
    bytes.set(randomBytes(size));
    for (let k = 1; k < 16; k++) bytes.copyWithin(k * size, 0, size);
    const expected = blockChecksums(bytes.subarray(0, size), 1 << 20);
    const one = (k: number): Promise<number[]> =>
      regionChecksumsAsync(
        memory,
        Float64Array.of(k * size),
        Float64Array.of(size),
        Float64Array.of(1 << 20),
        true,
      ).then((r) => Array.from(r.sums));
    // For each worker, a last piece of a chunk it never began; then jobs queued behind it on every worker.
    const bad = Array.from({ length: 4 }, (_, affinity) =>
      regionChecksumsAsync(memory, Float64Array.of(0), Float64Array.of(1024), Float64Array.of(1024), true, {
        streamIds: Float64Array.of(987_654_321 + affinity),
        flags: Uint8Array.of(2),
        affinity,
      }).then(
        () => undefined,
        (error: unknown) => error,
      ),
    );
    const good = Array.from({ length: 16 }, (_, k) => one(k));
    for (const sums of await Promise.all(good)) expect(sums).toEqual(expected);
    for (const error of await Promise.all(bad)) {
      expect(isCheckpointError(error, "storage"), String(error)).toBe(true);
      expect(String((error as Error).message)).toContain("unknown stream");
    }
    // The workers that failed a job still serve.
    for (const sums of await Promise.all(Array.from({ length: 8 }, (_, k) => one(k)))) expect(sums).toEqual(expected);
  });
});
