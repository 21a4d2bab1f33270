import { describe, expect, it } from "vitest";
import { layoutSafetensors } from "../format/safetensors.js";
import { encodeSafetensorsIndex } from "../format/safetensors-index.js";
import { MapStorage } from "../../test/map-storage.js";
import { layoutMetadata, readSafetensorsLayout } from "./safetensors-layout.js";

/** A safetensors file of uint8 tensors, laid out by core. */
function shard(tensors: Record<string, number[]>): Uint8Array {
  const list = Object.entries(tensors);
  const layout = layoutSafetensors(
    list.map(([name, bytes]) => ({ name, dtype: "uint8", shape: [bytes.length], byteLength: bytes.length })),
    { format: "pt" },
  );
  const file = new Uint8Array(layout.fileSize);
  file.set(layout.header);
  list.forEach(([, bytes], i) => file.set(bytes, layout.offsets[i]!));
  return file;
}

const json = (value: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(value));

/** `dir/` holding two shards and their index: a.x and a.y in the first, b in the second. */
function sharded(storage: MapStorage, dir = "m"): void {
  storage.objects.set(`${dir}/model-00001-of-00002.safetensors`, shard({ "a.x": [1, 2], "a.y": [3] }));
  storage.objects.set(`${dir}/model-00002-of-00002.safetensors`, shard({ b: [4, 5, 6] }));
  storage.objects.set(
    `${dir}/model.safetensors.index.json`,
    encodeSafetensorsIndex(
      6,
      new Map([
        ["b", "model-00002-of-00002.safetensors"],
        ["a.x", "model-00001-of-00002.safetensors"],
        ["a.y", "model-00001-of-00002.safetensors"],
      ]),
    ),
  );
}

/** Replaces m/'s index with one mapping each tensor to shard number n of 2 (total_size 6). */
function reindex(storage: MapStorage, shards: Record<string, number>): void {
  const map = new Map(Object.entries(shards).map(([name, n]) => [name, `model-0000${n}-of-00002.safetensors`]));
  storage.objects.set("m/model.safetensors.index.json", encodeSafetensorsIndex(6, map));
}

describe("readSafetensorsLayout", () => {
  it("reads a sharded layout from its directory or its index: tensors keyed by dotted names, shard by shard", async () => {
    const storage = new MapStorage();
    sharded(storage);
    for (const path of ["m", "m/model.safetensors.index.json"]) {
      const layout = await readSafetensorsLayout(storage, path, `map://${path}`);
      expect(layout.dir).toBe("m");
      expect([...layout.files.keys()]).toEqual([
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
      ]);
      expect(layout.entries.map((e) => [e.key, e.kind !== "value" && e.file])).toEqual([
        [["a", "x"], "model-00001-of-00002.safetensors"],
        [["a", "y"], "model-00001-of-00002.safetensors"],
        [["b"], "model-00002-of-00002.safetensors"],
      ]);
    }
    // As metadata: each tensor one whole chunk where its file holds it, with no checksums.
    const metadata = layoutMetadata(await readSafetensorsLayout(storage, "m", "map://m"));
    const b = metadata.entries[2]!;
    expect(b.kind === "tensor" && b.chunks).toEqual([
      expect.objectContaining({ file: "model-00002-of-00002.safetensors", byteLength: 3, blockSize: 1, crc32c: [] }),
    ]);
    const bytes = storage.objects.get("m/model-00002-of-00002.safetensors")!;
    expect([...bytes.subarray(b.kind === "tensor" ? b.chunks[0]!.byteOffset : 0).subarray(0, 3)]).toEqual([4, 5, 6]);
  });

  it("reads a directory holding only model.safetensors, and says when a directory holds no layout", async () => {
    const storage = new MapStorage();
    storage.objects.set("one/model.safetensors", shard({ "w.0": [7] }));
    const layout = await readSafetensorsLayout(storage, "one", "map://one");
    expect(layout.entries.map((e) => e.key)).toEqual([["w", "0"]]);
    await expect(readSafetensorsLayout(storage, "none", "map://none")).rejects.toMatchObject({
      code: "not_found",
      message: expect.stringContaining("holds neither model.safetensors.index.json nor model.safetensors"),
    });
  });

  const hostile: [string, (storage: MapStorage) => void, RegExp][] = [
    [
      "an index naming a file outside its directory",
      (s) =>
        s.objects.set(
          "m/model.safetensors.index.json",
          json({ weight_map: { b: "../x/model-00002-of-00002.safetensors" } }),
        ),
      /maps to "\.\.\/x\/model-00002-of-00002\.safetensors", which is not a \.safetensors file in the index's directory/,
    ],
    [
      "an index naming an absolute path",
      (s) => s.objects.set("m/model.safetensors.index.json", json({ weight_map: { b: "/etc/model.safetensors" } })),
      /which is not a \.safetensors file in the index's directory/,
    ],
    [
      "an index naming a file that is not safetensors",
      (s) => s.objects.set("m/model.safetensors.index.json", json({ weight_map: { b: "metadata.json" } })),
      /which is not a \.safetensors file in the index's directory/,
    ],
    [
      "an index naming a shard that does not exist",
      (s) => s.objects.delete("m/model-00002-of-00002.safetensors"),
      /the index names the shard model-00002-of-00002\.safetensors, which does not exist/,
    ],
    [
      "a shard holding a tensor the index maps to another shard",
      (s) => reindex(s, { "a.x": 1, "a.y": 2, b: 2 }),
      /model-00001-of-00002\.safetensors holds tensor "a\.y", which the index maps to model-00002-of-00002\.safetensors/,
    ],
    [
      "a shard holding a tensor the index does not name",
      (s) => s.objects.set("m/model-00002-of-00002.safetensors", shard({ b: [4, 5, 6], extra: [] })),
      /model-00002-of-00002\.safetensors holds tensor "extra", which the index does not name/,
    ],
    [
      "an index mapping a tensor to a shard that lacks it",
      (s) => s.objects.set("m/model-00002-of-00002.safetensors", shard({ c: [4, 5, 6] })),
      /model-00002-of-00002\.safetensors holds tensor "c", which the index does not name/,
    ],
    [
      "an index naming a tensor no shard holds",
      (s) => reindex(s, { "a.x": 1, "a.y": 1, b: 2, gone: 2 }),
      /the index maps tensor "gone" to model-00002-of-00002\.safetensors, which does not hold it/,
    ],
    [
      "one tensor name in two shards",
      (s) => s.objects.set("m/model-00002-of-00002.safetensors", shard({ b: [4, 5, 6], "a.x": [1, 2] })),
      /tensor "a\.x" is in both model-00001-of-00002\.safetensors and model-00002-of-00002\.safetensors/,
    ],
    [
      "a total_size that does not match the tensors",
      (s) => {
        const index = JSON.parse(new TextDecoder().decode(s.objects.get("m/model.safetensors.index.json"))) as {
          metadata: { total_size: number };
        };
        index.metadata.total_size = 7;
        s.objects.set("m/model.safetensors.index.json", json(index));
      },
      /metadata\.total_size is 7 but the shards' tensors hold 6 bytes/,
    ],
    [
      "a total_size that is not a byte count",
      (s) => s.objects.set("m/model.safetensors.index.json", json({ metadata: { total_size: -1 }, weight_map: {} })),
      /metadata\.total_size -1 is not a byte count/,
    ],
    [
      "an index that is not JSON",
      (s) => s.objects.set("m/model.safetensors.index.json", new TextEncoder().encode("{weight_map")),
      /is not a valid safetensors index: it is not UTF-8 JSON/,
    ],
    [
      "an index without a weight map",
      (s) => s.objects.set("m/model.safetensors.index.json", json({ weight_map: ["model.safetensors"] })),
      /has no "weight_map" object/,
    ],
    [
      "a weight map whose shard is not a name",
      (s) => s.objects.set("m/model.safetensors.index.json", json({ weight_map: { b: 3 } })),
      /tensor "b" maps to 3, not a file name/,
    ],
  ];

  it.each(hostile)("refuses %s as corrupt", async (_name, damage, message) => {
    const storage = new MapStorage();
    sharded(storage);
    damage(storage);
    const reads = storage.reads.length;
    await expect(readSafetensorsLayout(storage, "m", "map://m")).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringMatching(message),
    });
    // Only headers were read, never a tensor's bytes.
    for (const read of storage.reads.slice(reads)) expect(read.offset).toBe(0);
  });

  it("refuses tensor names that would reach a prototype, or hold one another, as invalid_argument", async () => {
    const storage = new MapStorage();
    storage.objects.set("p/model.safetensors", shard({ "__proto__.x": [1] }));
    await expect(readSafetensorsLayout(storage, "p", "map://p")).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("__proto__"),
    });
    storage.objects.set("c/model-00001-of-00002.safetensors", shard({ a: [1] }));
    storage.objects.set("c/model-00002-of-00002.safetensors", shard({ "a.b": [2] }));
    storage.objects.set(
      "c/model.safetensors.index.json",
      json({ weight_map: { a: "model-00001-of-00002.safetensors", "a.b": "model-00002-of-00002.safetensors" } }),
    );
    await expect(readSafetensorsLayout(storage, "c", "map://c")).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("a and a.b cannot both be keys"),
    });
  });
});
