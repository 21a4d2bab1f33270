import { describe, expect, it } from "vitest";
import { parseSafetensorsHeader } from "../format/safetensors.js";
import { readMetadata } from "../load/read-metadata.js";
import { save } from "../save/save.js";
import { shardedTensor } from "../state/sharded-tensor.js";
import { hostTensor } from "../state/tensors.js";
import type { StorageAdapter } from "../storage/storage-adapter.js";
import { MapStorage } from "../../test/map-storage.js";
import { FaultyStorageAdapter } from "../testing/faulty-storage-adapter.js";
import { CheckpointReader } from "./checkpoint-reader.js";
import { exportSafetensorsLayout } from "./export-safetensors-layout.js";

/** Every write and delete through `storage`, in order, and the largest piece a streamed write was given. */
function recording(storage: MapStorage): { storage: StorageAdapter; log: string[]; largest: () => number } {
  const log: string[] = [];
  let largest = 0;
  return {
    log,
    largest: () => largest,
    storage: {
      protocol: storage.protocol,
      root: storage.root,
      read: (path, range) => storage.read(path, range),
      stat: (path) => storage.stat(path),
      list: (prefix) => storage.list(prefix),
      close: () => storage.close(),
      delete: async (path) => {
        log.push(`delete ${path}`);
        await storage.delete(path);
      },
      write: async (path, body, options) => {
        const pieces = async function* (): AsyncGenerator<Uint8Array> {
          for await (const piece of body instanceof Uint8Array ? [body] : body) {
            largest = Math.max(largest, piece.byteLength);
            yield piece;
          }
        };
        await storage.write(path, pieces(), options);
        log.push(`write ${path}`);
      },
    },
  };
}

/** The tensor `name` of a safetensors file held in `storage`. */
function tensorOf(storage: MapStorage, path: string, name: string): { shape: number[]; bytes: Uint8Array } {
  const file = storage.objects.get(path)!;
  const header = parseSafetensorsHeader(file);
  const t = header.tensors.get(name)!;
  const start = 8 + header.headerLength;
  return { shape: t.shape, bytes: file.subarray(start + t.dataOffsets[0], start + t.dataOffsets[1]) };
}

describe("exportSafetensorsLayout", () => {
  it("writes shards, then the index; with force deletes the old layout's index first; a piece at a time", async () => {
    const storage = new MapStorage();
    const w = hostTensor("float32", [256, 64]);
    w.data.forEach((_, i) => (w.data[i] = i));
    await save({ a: w, b: hostTensor("int8", [1000]), rng: new Uint8Array(9), step: 3 }, { storage, path: "ckpt" });
    const reader = new CheckpointReader(storage, "ckpt", await readMetadata({ storage, path: "ckpt" }));
    const first = recording(storage);
    const result = await exportSafetensorsLayout(
      reader,
      { storage: first.storage, dir: "out", where: "map://out" },
      { maxShardBytes: 65536, readBytes: 4096 },
    );
    expect(result).toMatchObject({ tensors: 2, totalSize: 65536 + 1000, skipped: 2 });
    // The shards (written at once, finishing in any order), then the index.
    expect(first.log.slice(0, 2).sort()).toEqual([
      "write out/model-00001-of-00002.safetensors",
      "write out/model-00002-of-00002.safetensors",
    ]);
    expect(first.log[2]).toBe("write out/model.safetensors.index.json");
    expect(first.largest()).toBeLessThanOrEqual(4096);
    await expect(exportSafetensorsLayout(reader, { storage, dir: "out", where: "map://out" })).rejects.toMatchObject({
      code: "already_exists",
    });
    const second = recording(storage);
    await exportSafetensorsLayout(reader, { storage: second.storage, dir: "out", where: "map://out" }, { force: true });
    expect(second.log).toEqual([
      "delete out/model.safetensors.index.json",
      "delete out/model-00001-of-00002.safetensors",
      "delete out/model-00002-of-00002.safetensors",
      "write out/model-00001-of-00001.safetensors",
      "write out/model.safetensors.index.json",
    ]);
    await reader.close();
  });

  it("reorders dimensions a preset asks for, band by band, from a column-sharded tensor, and converts dtypes", async () => {
    const storage = new MapStorage();
    const [rows, cols] = [37, 12];
    const value = (r: number, c: number): number => r * 100 + c;
    const shards = [0, 5, 9].map((start, i, starts) => {
      const width = (starts[i + 1] ?? cols) - start;
      const t = hostTensor("float32", [rows, width]);
      for (let r = 0; r < rows; r++) for (let c = 0; c < width; c++) t.data[r * width + c] = value(r, start + c);
      return { offsets: [0, start], tensor: t };
    });
    await save({ kernel: shardedTensor("float32", [rows, cols], shards) }, { storage, path: "ckpt", blockSize: 64 });
    const reader = new CheckpointReader(storage, "ckpt", await readMetadata({ storage, path: "ckpt" }));
    const out = recording(storage);
    await exportSafetensorsLayout(
      reader,
      { storage: out.storage, dir: "out", where: "map://out" },
      { names: (ts) => ts.map(() => ({ name: "weight", permutation: [1, 0] })), readBytes: 200, dtype: "float64" },
    );
    const written = tensorOf(storage, "out/model-00001-of-00001.safetensors", "weight");
    expect(written.shape).toEqual([cols, rows]);
    const doubles = new Float64Array(written.bytes.slice().buffer);
    for (let c = 0; c < cols; c++) for (let r = 0; r < rows; r++) expect(doubles[c * rows + r]).toBe(value(r, c));
    // Bands of whole output rows, each within the read size (as float32) or one row: converted to float64, twice that.
    expect(out.largest()).toBeLessThanOrEqual(2 * Math.max(200, rows * 4));
    await expect(
      exportSafetensorsLayout(
        reader,
        { storage, dir: "bad", where: "map://bad" },
        {
          names: (ts) => ts.map(() => ({ name: "w", permutation: [0, 0] })),
        },
      ),
    ).rejects.toMatchObject({ code: "invalid_argument", message: expect.stringContaining("does not reorder") });
    await reader.close();
  });

  it("reads each tensor's bytes once: a column-sharded tensor in row-aligned pieces reads its bytes, no more", async () => {
    const storage = new MapStorage();
    const [rows, cols] = [64, 96];
    const cuts = [0, 32, 64, 96];
    const shards = cuts.slice(0, -1).map((start, i) => {
      const t = hostTensor("float32", [rows, cuts[i + 1]! - start]);
      t.data.forEach((_, j) => (t.data[j] = start * 1000 + j));
      return { offsets: [0, start], tensor: t };
    });
    await save({ w: shardedTensor("float32", [rows, cols], shards) }, { storage, path: "ckpt", blockSize: 1024 });
    const reader = new CheckpointReader(storage, "ckpt", await readMetadata({ storage, path: "ckpt" }));
    const before = storage.reads.length;
    // Pieces of 8 rows (3 KiB): each chunk's rows in a piece are 1 KiB, one whole checksum block.
    await exportSafetensorsLayout(reader, { storage, dir: "out", where: "map://out" }, { readBytes: 8 * cols * 4 });
    await reader.close();
    // Every read past a file's header is tensor data: together exactly the tensor's bytes, none twice.
    const data = storage.reads.slice(before).filter((r) => r.path.startsWith("ckpt/") && r.offset > 0);
    expect(data.reduce((n, r) => n + r.length, 0)).toBe(rows * cols * 4);
    expect(new Set(data.map((r) => `${r.path}@${r.offset}`)).size).toBe(data.length);
  });

  it("a shard that fails stops the others and removes every shard written: no layout, no index", async () => {
    const storage = new MapStorage();
    const state = Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`t${i}`, hostTensor("float32", [1024])]));
    await save(state, { storage, path: "ckpt" });
    const reader = new CheckpointReader(storage, "ckpt", await readMetadata({ storage, path: "ckpt" }));
    for (const failing of ["model-00001-of-00003", "model-00003-of-00003", "model.safetensors.index"]) {
      const faulty = new FaultyStorageAdapter(storage, [{ operation: "write", path: (p) => p.includes(failing) }]);
      await expect(
        exportSafetensorsLayout(reader, { storage: faulty, dir: "out", where: "map://out" }, { maxShardBytes: 8192 }),
      ).rejects.toThrow(/injected/);
      expect(
        [...storage.objects.keys()].filter((k) => k.startsWith("out/")),
        failing,
      ).toEqual([]);
    }
    await reader.close();
  });
});
