import { describe, expect, it, vi } from "vitest";
import type * as ChecksumWorkers from "./checksum-workers.js";

/** Bytes handed to the checksum workers: an incremental save must hash each tensor once. */
const hashed = vi.hoisted(() => ({ bytes: 0 }));
vi.mock("./checksum-workers.js", async (original) => {
  const real = await original<typeof ChecksumWorkers>();
  return {
    ...real,
    blockChecksumsAsync: (parts: readonly Uint8Array[], blockSizes: readonly number[]) => {
      for (const part of parts) hashed.bytes += part.byteLength;
      return real.blockChecksumsAsync(parts, blockSizes);
    },
  };
});
import { load, readMetadata } from "../load/load.js";
import { copyCheckpoint } from "../ops/copy-checkpoint.js";
import { verifyCheckpoint } from "../ops/verify-checkpoint.js";
import { CheckpointReader } from "../ops/checkpoint-reader.js";
import { save } from "./save.js";
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
    expect(metadata.version).toBe("2.1");
    expect(Object.values(metadata.files).filter((f) => f.dir === "1").length).toBeGreaterThan(0);
    expect(Object.values(metadata.files).filter((f) => f.dir === undefined)).toHaveLength(1);
    expect(await load({ storage, path: "run/2" })).toEqual(state(2));
    expect(await load({ storage, path: "run/1" })).toEqual(state(1));
  });

  it("hashes every tensor once: the CRCs compared with the base's are the ones written", async () => {
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
    expect((await readMetadata({ storage, path: "2" })).version).toBe("2.0");
    storage.reset();
    await save(changed, { storage, path: "3", incremental: { base: "2" } });
    expect(storage.dataFiles).toEqual([]);
    expect(await load({ storage, path: "3" })).toEqual(changed);
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
    await save(state(1), { storage, path: "1" });
    await save(state(2), { storage, path: "2", incremental: { base: "1" } });
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
    expect(copy.metadata.version).toBe("2.0");
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
