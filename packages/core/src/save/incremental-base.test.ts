import { describe, expect, it, vi } from "vitest";
import type * as ChecksumWorkers from "./checksum-workers.js";

/** Bytes handed to the checksum workers: an incremental save must hash each tensor once. */
const hashed = vi.hoisted(() => ({ bytes: 0 }));
vi.mock("./checksum-workers.js", async (original) => {
  const real = await original<typeof ChecksumWorkers>();
  return {
    ...real,
    blockChecksumsAsync: (parts: readonly Uint8Array[], blockSizes: readonly number[], withHashes?: boolean) => {
      for (const part of parts) hashed.bytes += part.byteLength;
      return real.blockChecksumsAsync(parts, blockSizes, withHashes);
    },
  };
});
import { load } from "../load/load.js";
import { readMetadata } from "../load/read-metadata.js";
import { blockChecksums, crc32c } from "../format/crc32c.js";
import type { TensorEntry } from "../format/metadata.js";
import { copyCheckpoint } from "../ops/copy-checkpoint.js";
import { verifyCheckpoint } from "../ops/verify-checkpoint.js";
import { CheckpointReader } from "../ops/checkpoint-reader.js";
import { save } from "./save.js";
import { DefaultSavePlanner } from "../plan/default-save-planner.js";
import { shardedTensor } from "../state/sharded-tensor.js";
import { hostTensor } from "../state/tensors.js";
import type { WriteBody, WriteOptions } from "../storage/storage-adapter.js";
import { MapStorage } from "../../test/map-storage.js";

/** MapStorage counting the bytes written into data files (what an incremental save must keep small). */
class CountingStorage extends MapStorage {
  dataBytes = 0;
  dataFiles: string[] = [];

  override async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    await super.write(path, body, options);
    if (path.endsWith(".safetensors")) {
      this.dataBytes += this.objects.get(path)!.byteLength;
      this.dataFiles.push(path);
    }
  }

  reset(): void {
    this.dataBytes = 0;
    this.dataFiles = [];
  }
}

function filled(dtype: "float32", shape: number[], seed: number) {
  const t = hostTensor(dtype, shape);
  t.data.forEach((_, i) => (t.data[i] = seed + i));
  return t;
}

/**
 * `bytes` with a few of the first 64 bits of `[from, from + length)` flipped so that the CRC32C of
 * that range stays the same: CRC32C is affine, so the flips whose CRC differences XOR to zero
 * are found by Gaussian elimination over GF(2) (33 candidates already guarantee some).
 */
function crc32cCollision(bytes: Uint8Array, from: number, length: number): Uint8Array {
  const block = bytes.subarray(from, from + length);
  const original = crc32c(block);
  /** Reduced CRC differences with distinct leading bits, largest first, and the flips making each. */
  const basis: { vector: number; bits: number[] }[] = [];
  for (let bit = 0; bit < 64; bit++) {
    const flipped = block.slice();
    flipped[bit >> 3]! ^= 1 << (bit & 7);
    let vector = (crc32c(flipped) ^ original) >>> 0;
    let bits = [bit];
    for (const b of basis) {
      if ((vector ^ b.vector) >>> 0 < vector) {
        vector = (vector ^ b.vector) >>> 0;
        bits = bits.filter((i) => !b.bits.includes(i)).concat(b.bits.filter((i) => !bits.includes(i)));
      }
    }
    if (vector === 0) {
      const out = bytes.slice();
      for (const i of bits) out[from + (i >> 3)]! ^= 1 << (i & 7);
      return out;
    }
    basis.push({ vector, bits });
    basis.sort((a, b) => b.vector - a.vector);
  }
  throw new Error("no CRC32C collision among 64 bit flips (impossible: the space has 32 dimensions)");
}

/** A state of a large frozen tensor, a small trained one, an opaque blob and a value. */
function state(seed: number) {
  return {
    frozen: filled("float32", [256, 256], 1),
    trained: filled("float32", [64, 64], seed),
    rng: Uint8Array.of(1, 2, 3),
    step: seed,
  };
}

describe("incremental save", () => {
  it("writes only the changed tensor and references the base's bytes for the rest", async () => {
    const storage = new CountingStorage();
    await save(state(1), { storage, path: "run/1" });
    expect(storage.dataBytes).toBeGreaterThan(256 * 256 * 4);
    storage.reset();
    const result = await save(state(2), { storage, path: "run/2", incremental: { base: "1" } });
    // The trained tensor (16 KiB) and a header; the frozen 256 KiB and the unchanged blob are not written again.
    expect(storage.dataBytes).toBeGreaterThanOrEqual(64 * 64 * 4);
    expect(storage.dataBytes).toBeLessThan(64 * 64 * 4 + 1024);
    expect(result.bytes).toBe(storage.dataBytes);
    const metadata = await readMetadata({ storage, path: "run/2" });
    expect(metadata.version).toBe("2.2");
    expect(Object.values(metadata.files).filter((f) => f.dir === "1").length).toBeGreaterThan(0);
    expect(Object.values(metadata.files).filter((f) => f.dir === undefined)).toHaveLength(1);
    expect(await load({ storage, path: "run/2" })).toEqual(state(2));
    expect(await load({ storage, path: "run/1" })).toEqual(state(1));
  });

  it("hashes every tensor once: the hashes and CRCs compared with the base's are the ones written", async () => {
    const storage = new CountingStorage();
    await save(state(1), { storage, path: "1" });
    hashed.bytes = 0;
    await save(state(2), { storage, path: "2", incremental: { base: "1" } });
    expect(hashed.bytes).toBe(256 * 256 * 4 + 64 * 64 * 4 + 3);
  });

  it("writes every tensor when everything changed, and nothing when nothing did", async () => {
    const storage = new CountingStorage();
    await save(state(1), { storage, path: "1" });
    const full = storage.dataBytes;
    storage.reset();
    const changed = { ...state(3), frozen: filled("float32", [256, 256], 7), rng: Uint8Array.of(9) };
    await save(changed, { storage, path: "2", incremental: { base: "1" } });
    expect(storage.dataBytes).toBeGreaterThanOrEqual(full - 8);
    expect(Object.values((await readMetadata({ storage, path: "2" })).files).every((f) => f.dir === undefined)).toBe(
      true,
    );
    storage.reset();
    await save(changed, { storage, path: "3", incremental: { base: "2" } });
    expect(storage.dataFiles).toEqual([]);
    expect(await load({ storage, path: "3" })).toEqual(changed);
  });

  it("writes a chunk whose every block CRC32C equals the base's but whose bytes differ", async () => {
    const storage = new CountingStorage();
    const before = filled("float32", [1024], 3);
    await save({ w: before }, { storage, path: "1" });
    const chunk = (await readMetadata({ storage, path: "1" })).entries[0] as TensorEntry;
    expect(chunk.chunks[0]!.crc32c).toHaveLength(4);
    // Block 2 of 4 (1 KiB blocks) changed with its CRC32C kept: every block's CRC matches the base's.
    const bytes = crc32cCollision(new Uint8Array(before.data.buffer), 2048, 1024);
    const after = hostTensor("float32", [1024], new Float32Array(bytes.buffer));
    expect(blockChecksums(bytes, 1024)).toEqual(chunk.chunks[0]!.crc32c);
    expect(after.data).not.toEqual(before.data);
    storage.reset();
    await save({ w: after }, { storage, path: "2", incremental: { base: "1" } });
    expect(storage.dataBytes).toBeGreaterThanOrEqual(4096);
    expect(await load({ storage, path: "2" })).toEqual({ w: after });
  });

  it("rewrites a tensor whose dtype, shape or box changed though its bytes did not", async () => {
    const storage = new CountingStorage();
    await save({ w: filled("float32", [8, 8], 0) }, { storage, path: "1" });
    storage.reset();
    const reshaped = { w: { ...filled("float32", [8, 8], 0), shape: [4, 16] } };
    await save(reshaped, { storage, path: "2", incremental: { base: "1" } });
    expect(storage.dataBytes).toBeGreaterThanOrEqual(256);
    expect((await load({ storage, path: "2" })) as unknown).toEqual(reshaped);
  });

  it("references unchanged shards of a sharded tensor and writes the changed one", async () => {
    const storage = new CountingStorage();
    const sharded = (seed: number) =>
      shardedTensor(
        "float32",
        [64, 64],
        [
          { offsets: [0, 0], tensor: filled("float32", [32, 64], 0) },
          { offsets: [32, 0], tensor: filled("float32", [32, 64], seed) },
        ],
      );
    await save({ w: sharded(1) }, { storage, path: "1", blockSize: 1024 });
    storage.reset();
    await save({ w: sharded(2) }, { storage, path: "2", blockSize: 1024, incremental: { base: "1" } });
    expect(storage.dataBytes).toBeGreaterThanOrEqual(32 * 64 * 4);
    expect(storage.dataBytes).toBeLessThan(32 * 64 * 4 + 1024);
    const target = { w: hostTensor("float32", [64, 64]) };
    await load(target, { storage, path: "2" });
    expect(target.w.data.subarray(32 * 64)).toEqual(filled("float32", [32, 64], 2).data);
    expect(target.w.data.subarray(0, 32 * 64)).toEqual(filled("float32", [32, 64], 0).data);
  });

  it("keeps chains one hop: a file the base referenced is referenced where it really is", async () => {
    const storage = new CountingStorage();
    await save(state(1), { storage, path: "r/1" });
    await save(state(2), { storage, path: "r/2", incremental: { base: "1" } });
    await save(state(3), { storage, path: "r/3", incremental: { base: "2" } });
    const dirs = Object.values((await readMetadata({ storage, path: "r/3" })).files).map((f) => f.dir);
    expect(dirs).toContain("1");
    expect(dirs).not.toContain("2");
    expect(await load({ storage, path: "r/3" })).toEqual(state(3));
  });

  it("detects a flipped bit in the base's file when loading the newer step", async () => {
    const storage = new CountingStorage();
    // A file per tensor, so the unchanged one's file is the base's, shared whole.
    const planner = new DefaultSavePlanner({ minFileBytes: 0 });
    await save(state(1), { storage, path: "1", planner });
    await save(state(2), { storage, path: "2", incremental: { base: "1" }, planner });
    const shared = Object.entries((await readMetadata({ storage, path: "2" })).files).find(
      ([, f]) => f.dir === "1",
    )![0];
    const bytes = storage.objects.get(`1/${shared}`)!;
    bytes[bytes.byteLength - 100]! ^= 4;
    await expect(load({ storage, path: "2" })).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringContaining("checksum mismatch"),
    });
    const report = await verifyCheckpoint(storage, "2", await readMetadata({ storage, path: "2" }));
    expect(report.damagedKeys).toContain("frozen");
  });

  it("refuses a base that is not a committed sibling, or whose files are gone, committing nothing", async () => {
    const storage = new CountingStorage();
    await save(state(1), { storage, path: "1" });
    await expect(save(state(2), { storage, path: "2", incremental: { base: "9" } })).rejects.toMatchObject({
      code: "not_found",
    });
    await expect(save(state(2), { storage, path: "2", incremental: { base: "../1" } })).rejects.toMatchObject({
      code: "invalid_argument",
    });
    await expect(save(state(2), { storage, path: "2", incremental: { base: "2" } })).rejects.toMatchObject({
      code: "invalid_argument",
    });
    await expect(save(state(2), { storage, path: "", incremental: { base: "1" } })).rejects.toMatchObject({
      code: "invalid_argument",
    });
    for (const path of [...storage.objects.keys()])
      if (path.startsWith("1/") && path.endsWith(".safetensors")) storage.objects.delete(path);
    await expect(save(state(2), { storage, path: "2", incremental: { base: "1" } })).rejects.toMatchObject({
      code: "not_found",
      message: expect.stringContaining("gone"),
    });
    expect(storage.objects.has("2/metadata.json")).toBe(false);
  });

  it("is read, verified and copied through the one path rule; a copy holds every byte itself", async () => {
    const storage = new CountingStorage();
    await save(state(1), { storage, path: "1" });
    await save(state(2), { storage, path: "2", incremental: { base: "1" } });
    const metadata = await readMetadata({ storage, path: "2" });
    expect((await verifyCheckpoint(storage, "2", metadata)).damaged).toEqual([]);
    const reader = new CheckpointReader(storage, "2", metadata);
    const frozen = metadata.entries.find((e) => e.key[0] === "frozen")!;
    expect(frozen.kind).toBe("tensor");
    const bytes = await reader.tensor(frozen as Extract<typeof frozen, { kind: "tensor" }>).read(0, 16);
    await reader.close();
    expect(new Float32Array(bytes.slice().buffer)).toEqual(Float32Array.of(1, 2, 3, 4));
    const copy = await copyCheckpoint(
      { storage, dir: "2", metadata, where: "map://2" },
      { storage, dir: "copy", where: "map://copy" },
    );
    expect(copy.metadata.version).toBe("2.2");
    expect(Object.values(copy.metadata.files).every((f) => f.dir === undefined)).toBe(true);
    for (const path of [...storage.objects.keys()]) if (path.startsWith("1/")) storage.objects.delete(path);
    expect(await load({ storage, path: "copy" })).toEqual(state(2));
    await expect(load({ storage, path: "2" })).rejects.toMatchObject({ code: "corrupt" });
  });

  it("keeps files a sibling references when a checkpoint is replaced with force", async () => {
    const storage = new CountingStorage();
    await save(state(1), { storage, path: "1" });
    await save(state(2), { storage, path: "2", incremental: { base: "1" } });
    await save(state(5), { storage, path: "5" });
    await copyCheckpoint(
      { storage, dir: "5", metadata: await readMetadata({ storage, path: "5" }), where: "map://5" },
      { storage, dir: "1", where: "map://1" },
      { force: true },
    );
    expect(await load({ storage, path: "1" })).toEqual(state(5));
    expect(await load({ storage, path: "2" })).toEqual(state(2));
  });
});
