import { existsSync } from "node:fs";
import { mkdir, readFile, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type HostTensor, hostTensor, load, readMetadata } from "@cairn/core";
import { convertFloats, encodeSafetensorsIndex, shardFileName } from "@cairn/core/format";
import { CheckpointManager } from "@cairn/manager";
import { describe, expect, it } from "vitest";
import { cairn, gridBoxes, jsonLines, pattern, tempDir, withStorage, writeShardedCheckpoint } from "./helpers.js";
import { readSafetensorsSpec, writeSafetensorsSpec } from "./safetensors-reader.js";

interface SpecTensor {
  name: string;
  dtype: string;
  shape: number[];
  bytes: Uint8Array;
}

/** A Hugging Face layout in `dir`, written from the spec: the shards, then the index mapping each tensor to its shard. */
async function writeLayout(dir: string, shards: readonly SpecTensor[][], index?: unknown): Promise<void> {
  await mkdir(dir, { recursive: true });
  const weightMap = new Map<string, string>();
  let total = 0;
  for (const [i, tensors] of shards.entries()) {
    const name = shardFileName(i + 1, shards.length);
    await writeFile(join(dir, name), writeSafetensorsSpec(tensors, { format: "pt" }));
    for (const t of tensors) {
      weightMap.set(t.name, name);
      total += t.bytes.length;
    }
  }
  await writeFile(
    join(dir, "model.safetensors.index.json"),
    index === undefined ? encodeSafetensorsIndex(total, weightMap) : JSON.stringify(index),
  );
}

const SHARDS: SpecTensor[][] = [
  [
    { name: "model.layers.0.weight", dtype: "F32", shape: [4, 3], bytes: pattern(48, 1) },
    { name: "model.layers.0.bias", dtype: "BF16", shape: [3], bytes: pattern(6, 2) },
  ],
  [{ name: "lm_head.weight", dtype: "I64", shape: [2, 2], bytes: pattern(32, 3) }],
];

function bytesOf(t: HostTensor): Uint8Array {
  return new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
}

describe("cairn import of a Hugging Face layout", () => {
  it("imports a sharded layout given as its directory or its index, bit-exact", async () => {
    const dir = await tempDir();
    await writeLayout(join(dir, "hf"), SHARDS);
    for (const [source, step] of [
      [join(dir, "hf"), "1"],
      [join(dir, "hf", "model.safetensors.index.json"), "2"],
    ] as const) {
      const run = await cairn(["import", source, join(dir, "root", step), "--json"]);
      expect(run.code, run.stderr).toBe(0);
      expect(jsonLines(run)[0]).toMatchObject({ entries: 3 });
      const state = (await load(join(dir, "root", step))) as {
        model: { layers: Record<string, Record<string, HostTensor>> };
        lm_head: { weight: HostTensor };
      };
      expect(bytesOf(state.model.layers["0"]!.weight!)).toEqual(SHARDS[0]![0]!.bytes);
      expect(state.model.layers["0"]!.bias!.dtype).toBe("bfloat16");
      expect(bytesOf(state.model.layers["0"]!.bias!)).toEqual(SHARDS[0]![1]!.bytes);
      expect(bytesOf(state.lm_head.weight)).toEqual(SHARDS[1]![0]!.bytes);
    }
  });

  it("refuses a hostile layout with exit 3 and one line, writing nothing", async () => {
    const dir = await tempDir();
    const mapped = (map: Record<string, string>, total = 86): unknown => ({
      metadata: { total_size: total },
      weight_map: map,
    });
    const good = {
      "model.layers.0.weight": shardFileName(1, 2),
      "model.layers.0.bias": shardFileName(1, 2),
      "lm_head.weight": shardFileName(2, 2),
    };
    const cases: [string, SpecTensor[][], unknown, RegExp][] = [
      [
        "outside",
        SHARDS,
        mapped({ ...good, "lm_head.weight": "../outside/model.safetensors" }),
        /which is not a \.safetensors file in the index's directory/,
      ],
      ["total", SHARDS, mapped(good, 87), /metadata\.total_size is 87 but the shards' tensors hold 86 bytes/],
      [
        "duplicate",
        [SHARDS[0]!, [...SHARDS[1]!, SHARDS[0]![0]!]],
        mapped(good, 134),
        /tensor "model\.layers\.0\.weight" is in both model-00001-of-00002\.safetensors and model-00002-of-00002\.safetensors/,
      ],
      [
        "disagree",
        SHARDS,
        mapped({ ...good, "model.layers.0.bias": shardFileName(2, 2) }),
        /model-00001-of-00002\.safetensors holds tensor "model\.layers\.0\.bias", which the index maps to model-00002-of-00002\.safetensors/,
      ],
    ];
    for (const [name, shards, index, message] of cases) {
      await writeLayout(join(dir, name), shards, index);
      const run = await cairn(["import", join(dir, name), join(dir, `ckpt-${name}`)]);
      expect(run.code, `${name}: ${run.stderr}`).toBe(3);
      expect(run.stderr).toMatch(message);
      expect(run.stderr.trim().split("\n")).toHaveLength(1);
      expect(existsSync(join(dir, `ckpt-${name}`)) ? await readdir(join(dir, `ckpt-${name}`)) : []).toEqual([]);
    }
  });
});

/** A layout read back with the spec reader alone: the index, and every tensor of every shard, checked against each other. */
async function readLayout(dir: string): Promise<{
  index: { metadata: { total_size: number }; weight_map: Record<string, string> };
  tensors: Map<string, { dtype: string; shape: number[]; bytes: Uint8Array }>;
}> {
  const index = JSON.parse(await readFile(join(dir, "model.safetensors.index.json"), "utf8")) as {
    metadata: { total_size: number };
    weight_map: Record<string, string>;
  };
  const tensors = new Map<string, { dtype: string; shape: number[]; bytes: Uint8Array }>();
  let total = 0;
  for (const shard of new Set(Object.values(index.weight_map))) {
    const file = readSafetensorsSpec(new Uint8Array(await readFile(join(dir, shard))));
    expect(file.metadata).toEqual({ format: "pt" });
    for (const [name, t] of file.tensors) {
      expect(index.weight_map[name], name).toBe(shard);
      expect(tensors.has(name), name).toBe(false);
      tensors.set(name, t);
      total += t.bytes.length;
    }
  }
  expect(Object.keys(index.weight_map).sort()).toEqual([...tensors.keys()].sort());
  expect(index.metadata.total_size).toBe(total);
  return { index, tensors };
}

/** The layout files in a directory. */
async function layoutFiles(dir: string): Promise<string[]> {
  return existsSync(dir) ? (await readdir(dir)).filter((f) => f.startsWith("model")).sort() : [];
}

const SHARDED = [
  { key: ["model", "w"], dtype: "float32", shape: [40, 30], splits: [1, 3] },
  { key: ["model", "emb"], dtype: "int32", shape: [17, 8], splits: [3, 1] },
  { key: ["model", "norm"], dtype: "float64", shape: [30], splits: [3] },
  { key: ["optim", "m"], dtype: "float32", shape: [40, 30], splits: [2, 2] },
] as const;

/** A checkpoint saved by 3 ranks, column-, row- and block-sharded, and each tensor's global bytes by dotted key. */
async function threeRanks(dir: string): Promise<Map<string, Uint8Array>> {
  const globals = new Map<string, Uint8Array>();
  await withStorage(`file://${dir}`, (storage) =>
    writeShardedCheckpoint(
      storage,
      SHARDED.map((t, i) => {
        const global = pattern(
          t.shape.reduce((a: number, b: number) => a * b, 1) * (t.dtype === "float64" ? 8 : 4),
          70 + i,
        );
        globals.set(t.key.join("."), global);
        return { key: t.key, dtype: t.dtype, shape: t.shape, global, boxes: gridBoxes(t.shape, t.splits) };
      }),
      { blockSize: 64, files: 3, user: { step: 9 } },
    ),
  );
  return globals;
}

describe("cairn export --hf", () => {
  it("writes a 3-rank sharded checkpoint as shards and an index that import and hf+ load read back bit-exact", async () => {
    const dir = await tempDir();
    const globals = await threeRanks(join(dir, "ckpt"));
    const run = await cairn([
      "export",
      join(dir, "ckpt"),
      join(dir, "hf"),
      "--hf",
      "--max-shard-size",
      "5KB",
      "--json",
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(jsonLines(run)[0]).toMatchObject({
      tensors: 4,
      totalSize: 40 * 30 * 4 * 2 + 17 * 8 * 4 + 30 * 8,
      files: [shardFileName(1, 3), shardFileName(2, 3), shardFileName(3, 3), "model.safetensors.index.json"],
    });
    const { index, tensors } = await readLayout(join(dir, "hf"));
    // Shards of at most 5 kB of tensors, in the checkpoint's order; the 4800-byte weights each fill one.
    expect(index.weight_map).toEqual({
      "model.w": shardFileName(1, 3),
      "model.emb": shardFileName(2, 3),
      "model.norm": shardFileName(2, 3),
      "optim.m": shardFileName(3, 3),
    });
    for (const [name, global] of globals) expect(tensors.get(name)?.bytes, name).toEqual(global);
    expect(tensors.get("model.w")).toMatchObject({ dtype: "F32", shape: [40, 30] });

    const back = await cairn(["import", join(dir, "hf"), join(dir, "back")]);
    expect(back.code, back.stderr).toBe(0);
    const imported = (await load(join(dir, "back"))) as Record<string, Record<string, HostTensor>>;
    const direct = (await load(`hf+file://${join(dir, "hf")}`)) as Record<string, Record<string, HostTensor>>;
    for (const state of [imported, direct]) {
      for (const [name, global] of globals) {
        const [a, b] = name.split(".") as [string, string];
        const t = state[a]![b]!;
        expect(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), name).toEqual(global);
      }
    }
  });

  it("selects with --keys, renames with --rename, converts with --dtype; layout options need --hf", async () => {
    const dir = await tempDir();
    const globals = await threeRanks(join(dir, "ckpt"));
    const run = await cairn([
      "export",
      join(dir, "ckpt"),
      join(dir, "hf"),
      "--hf",
      "--keys",
      "model",
      "--rename",
      "model.norm=final_norm",
      "--rename",
      "model.=transformer.",
      "--dtype",
      "bfloat16",
      "--json",
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(jsonLines(run)[0]).toMatchObject({
      tensors: 3,
      skipped: 1,
      files: [shardFileName(1, 1), "model.safetensors.index.json"],
    });
    const { tensors } = await readLayout(join(dir, "hf"));
    expect([...tensors.keys()]).toEqual(["transformer.w", "transformer.emb", "final_norm"]);
    expect(tensors.get("transformer.w")).toMatchObject({ dtype: "BF16", shape: [40, 30] });
    expect(tensors.get("transformer.w")!.bytes).toEqual(convertFloats(globals.get("model.w")!, "float32", "bfloat16"));
    expect(tensors.get("final_norm")!.bytes).toEqual(convertFloats(globals.get("model.norm")!, "float64", "bfloat16"));
    // Integers are not floating: they stay as they are.
    expect(tensors.get("transformer.emb")).toMatchObject({ dtype: "I32", bytes: globals.get("model.emb") });

    for (const [args, message] of [
      [["--keys", "model"], /--keys applies to a Hugging Face layout: add --hf/],
      [["--hf", "--dtype", "int8"], /--dtype takes float16, bfloat16, float32, float64/],
      [["--hf", "--max-shard-size", "5 parsecs"], /--max-shard-size takes a size like 5GB/],
      [["--hf", "--rename", "model"], /--rename takes FROM=TO/],
      [["--hf", "--names", "keras"], /--names takes a preset: tfjs/],
    ] as const) {
      const bad = await cairn(["export", join(dir, "ckpt"), join(dir, "other"), ...args]);
      expect(bad.code, bad.stderr).toBe(2);
      expect(bad.stderr).toMatch(message);
    }
    const clash = await cairn(["export", join(dir, "ckpt"), join(dir, "clash"), "--hf", "--rename", "optim.m=model.w"]);
    expect(clash.code).toBe(1);
    expect(clash.stderr).toMatch(/model\.w and optim\.m would both be named model\.w; rename one of them/);
    const none = await cairn(["export", join(dir, "ckpt"), join(dir, "none"), "--hf", "--keys", "nothing"]);
    expect(none.stderr).toMatch(/no tensor's key is or starts with nothing: nothing to export/);
    expect(await layoutFiles(join(dir, "clash"))).toEqual([]);
  });

  it("commits the index last: an existing layout needs --force, a damaged source leaves no layout, other files stay", async () => {
    const dir = await tempDir();
    await threeRanks(join(dir, "ckpt"));
    const out = join(dir, "hf");
    await mkdir(out);
    await writeFile(join(out, "config.json"), "{}");
    expect((await cairn(["export", join(dir, "ckpt"), out, "--hf", "--max-shard-size", "5KB"])).code).toBe(0);
    const first = await layoutFiles(out);
    expect(first).toHaveLength(4);

    const again = await cairn(["export", join(dir, "ckpt"), out, "--hf"]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(
      /already holds a safetensors layout \(model\.safetensors\.index\.json, model-00001-of-00003/,
    );
    expect(await layoutFiles(out)).toEqual(first);

    // --force replaces it: one shard now, the three old ones gone, config.json untouched.
    const forced = await cairn(["export", join(dir, "ckpt"), out, "--hf", "--force"]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(await layoutFiles(out)).toEqual([shardFileName(1, 1), "model.safetensors.index.json"]);
    expect(await readFile(join(out, "config.json"), "utf8")).toBe("{}");

    // A byte flipped in the last tensor's chunk: the export fails after writing shards, and removes them.
    const metadata = await readMetadata(join(dir, "ckpt"));
    const m = metadata.entries.find((e) => e.key.join(".") === "optim.m")!;
    if (m.kind !== "tensor") throw new Error("optim.m is a tensor");
    const chunk = m.chunks.at(-1)!;
    const bytes = await readFile(join(dir, "ckpt", chunk.file));
    bytes[chunk.byteOffset + 5]! ^= 0x01;
    await writeFile(join(dir, "ckpt", chunk.file), bytes);
    const damaged = await cairn(["export", join(dir, "ckpt"), join(dir, "fresh"), "--hf", "--max-shard-size", "5KB"]);
    expect(damaged.code).toBe(3);
    expect(damaged.stderr).toMatch(/checksum mismatch in .* for optim\.m/);
    expect(await layoutFiles(join(dir, "fresh"))).toEqual([]);
  });

  it("exports an incremental step, whose unchanged tensors are in its base's files", async () => {
    const root = join(await tempDir(), "run");
    const frozen = hostTensor("float32", [64, 16]);
    new Uint8Array(frozen.data.buffer).set(pattern(64 * 16 * 4, 5));
    const manager = new CheckpointManager(root, 1, { incremental: true, checkpointOnPreemption: false });
    for (const step of [1, 2]) {
      const trained = hostTensor("float32", [8]);
      new Uint8Array(trained.data.buffer).set(pattern(32, step));
      await manager.save(step, { model: { frozen, trained } });
    }
    await manager.close();
    expect(Object.values((await readMetadata(join(root, "2"))).files).some((f) => f.dir === "1")).toBe(true);
    const out = join(root, "..", "hf");
    const run = await cairn(["export", join(root, "2"), out, "--hf"]);
    expect(run.code, run.stderr).toBe(0);
    const { tensors } = await readLayout(out);
    expect(tensors.get("model.frozen")!.bytes).toEqual(new Uint8Array(frozen.data.buffer));
    expect(tensors.get("model.trained")!.bytes).toEqual(pattern(32, 2));
  });
});
