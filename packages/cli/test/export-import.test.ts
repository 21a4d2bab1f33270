import { existsSync } from "node:fs";
import { readFile, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  type HostTensor,
  type StateDict,
  type StorageAdapter,
  DTYPE_NAMES,
  hostTensor,
  load,
  readMetadata,
  save,
  shardedTensor,
} from "@cairn/core";
import { safetensorsDType } from "@cairn/core/format";
import { describe, expect, it } from "vitest";
import {
  CheckpointReader,
  exportSafetensors,
  layoutEntries,
  readSafetensorsLayout,
  writeCheckpoint,
} from "@cairn/core/ops";
import {
  cairn,
  cairnProcess,
  gridBoxes,
  jsonLines,
  pattern,
  sliceBox,
  tempDir,
  withStorage,
  writeShardedCheckpoint,
} from "./helpers.js";
import { readSafetensorsSpec, writeSafetensorsSpec } from "./safetensors-reader.js";

/** A host tensor of `dtype` whose bytes are `pattern(…, seed)` (bools as 0/1). */
function tensorOf(dtype: (typeof DTYPE_NAMES)[number], shape: number[], seed: number): HostTensor {
  const t = hostTensor(dtype, shape);
  const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  bytes.set(pattern(bytes.length, seed));
  if (dtype === "bool") for (let i = 0; i < bytes.length; i++) bytes[i] = bytes[i]! & 1;
  return t;
}

function bytesOf(t: HostTensor): Uint8Array {
  return new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
}

describe("export and import", () => {
  it("export → import → export is bit-exact, every dtype, blobs, values and odd keys included, through the bin", async () => {
    const dir = await tempDir();
    const state: StateDict = {
      model: Object.fromEntries(DTYPE_NAMES.map((dtype, i) => [dtype, tensorOf(dtype, [3, 5 + i], i + 1)])),
      "dotted.key": { "ünï/cödé": tensorOf("float32", [4], 99) },
      layers: [tensorOf("int32", [2, 2], 7), { w: tensorOf("float64", [], 8) }],
      empty: tensorOf("float32", [0, 3], 9),
      rng: pattern(33, 5),
      step: 1200,
      values: { nan: NaN, negZero: -0, inf: -Infinity, s: "text", n: null, b: true, obj: {}, arr: [] },
    };
    const ckpt = join(dir, "ckpt");
    await save(state, { checkpointId: ckpt, metadata: { step: 1200, metrics: { loss: 0.125 } }, blockSize: 64 });
    const out = join(dir, "out.safetensors");
    const run = await cairnProcess([
      "export",
      ckpt,
      out,
      "--then",
      "import",
      out,
      join(dir, "back"),
      "--then",
      "export",
      join(dir, "back"),
      join(dir, "again.safetensors"),
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toBe("");
    expect(run.stdout).toContain("exported");
    expect(run.stdout).toContain("imported");

    const first = await readFile(out);
    expect(Buffer.compare(first, await readFile(join(dir, "again.safetensors")))).toBe(0);

    const original = await readMetadata(ckpt);
    const back = await readMetadata(join(dir, "back"));
    const shape = (m: typeof original): unknown[] =>
      m.entries.map((e) =>
        e.kind === "value"
          ? e
          : {
              kind: e.kind,
              key: e.key,
              ...(e.kind === "tensor" ? { dtype: e.dtype, shape: e.shape } : { byteLength: e.byteLength }),
            },
      );
    expect(shape(back)).toEqual(shape(original));
    expect(back.user).toEqual(original.user);
    const a = (await load(ckpt)) as Record<string, unknown>;
    const b = (await load(join(dir, "back"))) as Record<string, unknown>;
    const model = (s: Record<string, unknown>): Record<string, HostTensor> => s.model as Record<string, HostTensor>;
    for (const dtype of DTYPE_NAMES) expect(bytesOf(model(b)[dtype]!)).toEqual(bytesOf(model(a)[dtype]!));
    expect(b.rng).toEqual(a.rng);
    expect(Object.is((b.values as Record<string, number>).negZero, -0)).toBe(true);
    expect((b.values as Record<string, number>).nan).toBeNaN();
    expect(b.values).toEqual(a.values);
    expect(bytesOf((b.layers as [HostTensor, { w: HostTensor }])[1].w)).toEqual(
      bytesOf((a.layers as [HostTensor, { w: HostTensor }])[1].w),
    );

    // The exported file, read by a reader written from the spec alone.
    const spec = readSafetensorsSpec(new Uint8Array(first));
    expect(spec.metadata?.format).toBe("pt");
    for (const dtype of DTYPE_NAMES) {
      const t = spec.tensors.get(`model.${dtype}`)!;
      expect(t.dtype).toBe(safetensorsDType(dtype));
      expect(t.shape).toEqual(model(a)[dtype]!.shape);
      expect(t.bytes).toEqual(bytesOf(model(a)[dtype]!));
    }
    expect(spec.tensors.get("rng")).toMatchObject({ dtype: "U8", shape: [33] });
    expect(spec.tensors.get("layers.1.w")).toMatchObject({ dtype: "F64", shape: [] });
    expect(spec.tensors.get("empty")).toMatchObject({ shape: [0, 3], bytes: new Uint8Array(0) });
    expect(spec.tensors.get("dotted.key.ünï/cödé")!.bytes).toEqual(
      bytesOf((state["dotted.key"] as Record<string, HostTensor>)["ünï/cödé"]!),
    );
  });

  const sharded = [
    { key: ["rows"], dtype: "float32", shape: [13, 7], splits: [3, 1] },
    { key: ["columns"], dtype: "int16", shape: [6, 10], splits: [1, 4] },
    { key: ["blocks"], dtype: "float64", shape: [5, 4, 3], splits: [2, 2, 2] },
    { key: ["flat"], dtype: "uint8", shape: [1000], splits: [5] },
    { key: ["scalar"], dtype: "int64", shape: [], splits: [] },
  ] as const;

  async function shardedCheckpoint(url: string): Promise<Map<string, Uint8Array>> {
    const globals = new Map<string, Uint8Array>();
    await withStorage(url, (storage) =>
      writeShardedCheckpoint(
        storage,
        sharded.map((t, i) => {
          const size = { float32: 4, int16: 2, float64: 8, uint8: 1, int64: 8 }[t.dtype];
          const global = pattern(t.shape.reduce((a: number, b: number) => a * b, 1) * size, 50 + i);
          globals.set(t.key[0], global);
          return { key: t.key, dtype: t.dtype, shape: t.shape, global, boxes: gridBoxes(t.shape, t.splits) };
        }),
        { blockSize: 64, files: 3, user: { step: 7 } },
      ),
    );
    return globals;
  }

  it("exports a checkpoint sharded by rows, columns and blocks as whole row-major tensors (bin, then in pieces of 40 bytes)", async () => {
    const dir = await tempDir();
    const globals = await shardedCheckpoint(`file://${dir}/sharded`);
    const run = await cairnProcess([
      "verify",
      join(dir, "sharded"),
      "--json",
      "--then",
      "export",
      join(dir, "sharded"),
      join(dir, "whole.safetensors"),
      "--json",
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(jsonLines(run)[1]).toMatchObject({ tensors: sharded.length });
    const check = (file: Uint8Array): void => {
      const { tensors } = readSafetensorsSpec(file);
      for (const t of sharded) {
        expect(tensors.get(t.key[0])!.shape).toEqual(t.shape);
        expect(tensors.get(t.key[0])!.bytes).toEqual(globals.get(t.key[0]));
      }
    };
    check(new Uint8Array(await readFile(join(dir, "whole.safetensors"))));

    // Small pieces: every piece is assembled from several chunks and block-aligned reads.
    await withStorage(`file://${dir}/sharded`, async (storage) => {
      const metadata = await readMetadata({ storage, path: "" });
      let reads = 0;
      const reader = new CheckpointReader(storage, "", metadata, { onRead: () => reads++ });
      try {
        await withStorage(`file://${dir}`, (out) =>
          exportSafetensors(reader, { storage: out, name: "pieces.safetensors" }, { readBytes: 40 }),
        );
      } finally {
        await reader.close();
      }
      expect(reads).toBeGreaterThan(20);
    });
    check(new Uint8Array(await readFile(join(dir, "pieces.safetensors"))));
  });

  it("exports a checkpoint saved by core's save with column- and block-sharded tensors as whole tensors", async () => {
    const dir = await tempDir();
    const shape = [9, 10];
    const global = pattern(9 * 10 * 4, 77);
    const shards = (boxes: ReturnType<typeof gridBoxes>) =>
      boxes.map((box) => {
        const t = hostTensor("float32", box.sizes);
        new Uint8Array(t.data.buffer).set(sliceBox(global, shape, 4, box));
        return { offsets: box.offsets, tensor: t };
      });
    await save(
      {
        columns: shardedTensor("float32", shape, shards(gridBoxes(shape, [1, 3]))),
        blocks: shardedTensor("float32", shape, shards(gridBoxes(shape, [2, 2]))),
      },
      { checkpointId: join(dir, "ckpt"), blockSize: 32 },
    );
    const metadata = await readMetadata(join(dir, "ckpt"));
    expect(metadata.entries.map((e) => (e.kind === "value" ? 0 : e.chunks.length))).toEqual([3, 4]);
    const run = await cairn(["export", join(dir, "ckpt"), join(dir, "out.safetensors")]);
    expect(run.code, run.stderr).toBe(0);
    const { tensors } = readSafetensorsSpec(new Uint8Array(await readFile(join(dir, "out.safetensors"))));
    expect(tensors.get("columns")).toMatchObject({ dtype: "F32", shape, bytes: global });
    expect(tensors.get("blocks")).toMatchObject({ dtype: "F32", shape, bytes: global });
  });

  it("refuses to export a sharded checkpoint with a flipped byte: exit 3, the key named, no file written", async () => {
    const dir = await tempDir();
    await shardedCheckpoint(`file://${dir}/sharded`);
    const metadata = await readMetadata(join(dir, "sharded"));
    const entry = metadata.entries.find((e) => e.key[0] === "columns")!;
    if (entry.kind !== "tensor") throw new Error("columns is a tensor");
    const chunk = entry.chunks[2]!;
    const path = join(dir, "sharded", chunk.file);
    const bytes = await readFile(path);
    bytes[chunk.byteOffset + 3]! ^= 0x10;
    await writeFile(path, bytes);
    const run = await cairn(["export", join(dir, "sharded"), join(dir, "out.safetensors")]);
    expect(run.code).toBe(3);
    expect(run.stderr).toMatch(/^cairn export: checksum mismatch in .* for columns/);
    expect(run.stderr.trim().split("\n")).toHaveLength(1);
    expect((await readdir(dir)).filter((f) => f.includes("out"))).toEqual([]);
  });

  it("streams: export and import never read or write more than a piece (plus two checksum blocks) at once", async () => {
    const url = `memory://stream-${process.pid}`;
    const t = hostTensor("float32", [1024, 1024]);
    new Uint8Array(t.data.buffer).set(pattern(4 << 20, 11));
    await save({ big: t }, { checkpointId: `${url}/ckpt`, blockSize: 64 << 10 });
    const largest = { read: 0, write: 0 };
    /** The memory adapter, recording the largest range read and the largest piece of a streamed write. */
    const recording = (storage: StorageAdapter): StorageAdapter => ({
      protocol: storage.protocol,
      root: storage.root,
      read: async (path, range, options) => {
        const data = await storage.read(path, range, options);
        largest.read = Math.max(largest.read, data.byteLength);
        return data;
      },
      write: (path, body, options) => {
        if (body instanceof Uint8Array) return storage.write(path, body, options);
        return storage.write(
          path,
          (async function* () {
            for await (const piece of body) {
              largest.write = Math.max(largest.write, piece.byteLength);
              yield piece;
            }
          })(),
          options,
        );
      },
      stat: (path) => storage.stat(path),
      list: (prefix) => storage.list(prefix),
      delete: (path) => storage.delete(path),
      close: () => storage.close(),
    });
    await withStorage(`${url}/ckpt`, async (source) => {
      const reader = new CheckpointReader(recording(source), "", await readMetadata({ storage: source, path: "" }));
      try {
        await withStorage(url, (out) =>
          exportSafetensors(reader, { storage: recording(out), name: "big.safetensors" }, { readBytes: 256 << 10 }),
        );
      } finally {
        await reader.close();
      }
    });
    expect(largest.read).toBeLessThanOrEqual((256 + 2 * 64) << 10);
    expect(largest.write).toBeLessThanOrEqual(256 << 10);
    largest.read = largest.write = 0;
    await withStorage(url, async (storage) => {
      const layout = await readSafetensorsLayout(recording(storage), "big.safetensors", "big.safetensors");
      await writeCheckpoint(recording(storage), "again", layoutEntries(recording(storage), layout), {
        user: layout.user,
        readBytes: 256 << 10,
        blockSize: 64 << 10,
      });
    });
    expect(largest.read).toBeLessThanOrEqual(256 << 10);
    expect(largest.write).toBeLessThanOrEqual(256 << 10);
    const back = (await load(`${url}/again`)) as { big: HostTensor };
    expect(Buffer.compare(bytesOf(back.big), bytesOf(t))).toBe(0);
  });

  it("imports a foreign safetensors file with dotted torch names as nested keys", async () => {
    const dir = await tempDir();
    const weight = pattern(4 * 6, 3);
    const bias = pattern(2 * 3, 4);
    const file = writeSafetensorsSpec(
      [
        { name: "model.layers.0.weight", dtype: "F32", shape: [2, 3], bytes: weight },
        { name: "model.layers.0.bias", dtype: "BF16", shape: [3], bytes: bias },
      ],
      { format: "pt" },
    );
    await writeFile(join(dir, "foreign.safetensors"), file);
    const run = await cairn([
      "import",
      join(dir, "foreign.safetensors"),
      join(dir, "ckpt"),
      "--json",
      "--then",
      "inspect",
      join(dir, "ckpt"),
      "--json",
    ]);
    expect(run.code, run.stderr).toBe(0);
    const inspected = jsonLines(run)[1] as { entries: { key: unknown[]; dtype: string; shape: number[] }[] };
    expect(inspected.entries.map((e) => [e.key, e.dtype, e.shape])).toEqual([
      [["model", "layers", "0", "weight"], "float32", [2, 3]],
      [["model", "layers", "0", "bias"], "bfloat16", [3]],
    ]);
    const state = (await load(join(dir, "ckpt"))) as { model: { layers: Record<string, Record<string, HostTensor>> } };
    expect(bytesOf(state.model.layers["0"]!.weight!)).toEqual(weight);
    expect(bytesOf(state.model.layers["0"]!.bias!)).toEqual(bias);
  });

  it("refuses bad safetensors files with one clear line and the right exit code, committing nothing", async () => {
    const dir = await tempDir();
    const at = (name: string): string => join(dir, name);
    await writeFile(at("garbage.safetensors"), pattern(100, 1));
    await writeFile(
      at("fp8.safetensors"),
      writeSafetensorsSpec([{ name: "x", dtype: "F8_E4M3", shape: [4], bytes: pattern(4) }]),
    );
    const good = writeSafetensorsSpec([{ name: "x", dtype: "F32", shape: [16], bytes: pattern(64) }]);
    await writeFile(at("truncated.safetensors"), good.subarray(0, good.length - 5));
    await writeFile(
      at("clash.safetensors"),
      writeSafetensorsSpec([
        { name: "a", dtype: "U8", shape: [1], bytes: pattern(1) },
        { name: "a.b", dtype: "U8", shape: [1], bytes: pattern(1) },
      ]),
    );
    await writeFile(at("good.safetensors"), good);
    const cases: [string, number, RegExp][] = [
      ["garbage", 3, /not a valid safetensors file/],
      ["fp8", 1, /dtype F8_E4M3, which Cairn does not store; supported: /],
      ["truncated", 3, /describes \d+ bytes but the file holds \d+/],
      ["clash", 1, /a and a\.b cannot both be keys/],
      ["missing", 1, /does not exist/],
    ];
    for (const [name, code, message] of cases) {
      const run = await cairn(["import", at(`${name}.safetensors`), at(`ckpt-${name}`)]);
      expect(run.code, `${name}: ${run.stderr}`).toBe(code);
      expect(run.stderr).toMatch(message);
      expect(run.stderr.trim().split("\n")).toHaveLength(1);
      const left = existsSync(at(`ckpt-${name}`)) ? await readdir(at(`ckpt-${name}`)) : [];
      expect(left.filter((n) => n.endsWith(".safetensors") || n === "metadata.json")).toEqual([]);
    }
    const twice = await cairn([
      "import",
      at("good.safetensors"),
      at("ckpt"),
      "--then",
      "import",
      at("good.safetensors"),
      at("ckpt"),
    ]);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toMatch(
      /^cairn import: a checkpoint is already committed at file:\/\/.*ckpt; choose a new location/,
    );
  });
});
