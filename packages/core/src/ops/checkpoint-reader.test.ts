import { describe, expect, it } from "vitest";
import { readMetadata } from "../load/read-metadata.js";
import { save } from "../save/save.js";
import { bytesOf } from "../state/dtypes.js";
import { shardedTensor } from "../state/sharded-tensor.js";
import { hostTensor } from "../state/tensors.js";
import { MapStorage } from "../../test/map-storage.js";
import type { ObjectReader } from "../storage/storage-adapter.js";
import { CheckpointReader } from "./checkpoint-reader.js";

/** A 6×10 float32 tensor of distinct values, saved as three column blocks (blocks of 32 bytes). */
async function columnSharded(): Promise<{ storage: MapStorage; global: Uint8Array }> {
  const storage = new MapStorage();
  const global = hostTensor("float32", [6, 10]);
  global.data.forEach((_, i) => (global.data[i] = i));
  const columns = [0, 3, 7, 10];
  const shards = columns.slice(0, -1).map((from, c) => {
    const width = columns[c + 1]! - from;
    const shard = hostTensor("float32", [6, width]);
    for (let r = 0; r < 6; r++) for (let j = 0; j < width; j++) shard.data[r * width + j] = r * 10 + from + j;
    return { offsets: [0, from], tensor: shard };
  });
  await save({ w: shardedTensor("float32", [6, 10], shards), v: global }, { storage, path: "ckpt", blockSize: 32 });
  return { storage, global: bytesOf(global.data) };
}

describe("CheckpointReader", () => {
  it("reads any element-aligned range of a column-sharded tensor in global row-major order", async () => {
    const { storage, global } = await columnSharded();
    const metadata = await readMetadata({ storage, path: "ckpt" });
    const entry = metadata.entries.find((e) => e.key[0] === "w")!;
    if (entry.kind === "value") throw new Error("w is a tensor");
    const tensor = new CheckpointReader(storage, "ckpt", metadata).tensor(entry);
    expect(tensor).toMatchObject({ kind: "tensor", dtype: "float32", shape: [6, 10], byteLength: 240 });
    for (const [offset, length] of [
      [0, 240],
      [4, 8],
      [36, 100],
      [236, 4],
      [40, 40],
    ] as const) {
      expect(await tensor.read(offset, length), `${offset}+${length}`).toEqual(
        global.subarray(offset, offset + length),
      );
    }
  });

  it("checks each data file's size and header once, however many ranges it reads", async () => {
    const { storage } = await columnSharded();
    const metadata = await readMetadata({ storage, path: "ckpt" });
    const reader = new CheckpointReader(storage, "ckpt", metadata);
    storage.reads.length = 0;
    for (const entry of metadata.entries) {
      if (entry.kind === "value") continue;
      const tensor = reader.tensor(entry);
      for (let at = 0; at < tensor.byteLength; at += 40) await tensor.read(at, 40);
    }
    const headerReads = storage.reads.filter((r) => r.offset === 0);
    expect(headerReads.map((r) => r.path).sort()).toEqual(
      Object.keys(metadata.files)
        .map((f) => `ckpt/${f}`)
        .sort(),
    );
  });

  it("opens each data file once for all its reads, with no stat, until close", async () => {
    const { storage, global } = await columnSharded();
    const metadata = await readMetadata({ storage, path: "ckpt" });
    const opened: string[] = [];
    let open = 0;
    let stats = 0;
    const held = Object.assign(Object.create(storage) as MapStorage, {
      stat: async () => {
        stats++;
        return null;
      },
      openReader: async (path: string): Promise<ObjectReader> => {
        opened.push(path);
        open++;
        const bytes = storage.objects.get(path)!;
        return {
          size: bytes.byteLength,
          read: async (range) => storage.read(path, range),
          close: async () => void open--,
        };
      },
    });
    const reader = new CheckpointReader(held, "ckpt", metadata);
    const entry = metadata.entries.find((e) => e.key[0] === "w")!;
    if (entry.kind === "value") throw new Error("w is a tensor");
    const tensor = reader.tensor(entry);
    for (let at = 0; at < 240; at += 40) expect(await tensor.read(at, 40)).toEqual(global.subarray(at, at + 40));
    expect(opened.sort()).toEqual([...new Set(entry.chunks.map((c) => `ckpt/${c.file}`))].sort());
    expect(stats).toBe(0);
    expect(open).toBe(opened.length);
    await reader.close();
    expect(open).toBe(0);
  });

  it("a flipped byte is corrupt, naming the file and the key", async () => {
    const { storage } = await columnSharded();
    const metadata = await readMetadata({ storage, path: "ckpt" });
    const entry = metadata.entries.find((e) => e.key[0] === "w")!;
    if (entry.kind === "value") throw new Error("w is a tensor");
    const chunk = entry.chunks[1]!;
    storage.objects.get(`ckpt/${chunk.file}`)![chunk.byteOffset + 5]! ^= 0x01;
    await expect(new CheckpointReader(storage, "ckpt", metadata).tensor(entry).read(0, 240)).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringContaining(`checksum mismatch in ${chunk.file} for w`),
    });
  });
});
