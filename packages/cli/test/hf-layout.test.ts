import { existsSync } from "node:fs";
import { mkdir, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type HostTensor, load } from "@cairn/core";
import { encodeSafetensorsIndex, shardFileName } from "@cairn/core/format";
import { describe, expect, it } from "vitest";
import { cairn, jsonLines, pattern, tempDir } from "./helpers.js";
import { writeSafetensorsSpec } from "./safetensors-reader.js";

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
