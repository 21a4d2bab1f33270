import { mkdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  type HostTensor,
  type StateDict,
  asyncSave,
  hostTensor,
  load,
  readMetadata,
  save,
  shardedTensor,
} from "@cairn/core";
import { bytesOf, encodeSafetensorsIndex, layoutSafetensors, shardFileName } from "@cairn/core/format";
import { openStorage } from "@cairn/core/storage";
import { describe, expect, it } from "vitest";
import { sameBits, sampleTensor, tempDir } from "./helpers.js";

/** Writes `shards` (each a list of named host tensors) as a Hugging Face layout through `write`, the index last. */
async function writeLayout(
  write: (name: string, bytes: Uint8Array) => Promise<void>,
  shards: readonly Record<string, HostTensor>[],
): Promise<void> {
  const weightMap = new Map<string, string>();
  let total = 0;
  for (const [i, tensors] of shards.entries()) {
    const name = shardFileName(i + 1, shards.length);
    const list = Object.entries(tensors);
    const layout = layoutSafetensors(
      list.map(([n, t]) => ({ name: n, dtype: t.dtype, shape: t.shape, byteLength: t.data.byteLength })),
      { format: "pt" },
    );
    const file = new Uint8Array(layout.fileSize);
    file.set(layout.header);
    list.forEach(([n, t], j) => {
      file.set(bytesOf(t.data), layout.offsets[j]!);
      weightMap.set(n, name);
      total += t.data.byteLength;
    });
    await write(name, file);
  }
  await write("model.safetensors.index.json", encodeSafetensorsIndex(total, weightMap));
}

async function fileLayout(shards: readonly Record<string, HostTensor>[]): Promise<string> {
  const dir = join(await tempDir(), "model");
  await mkdir(dir);
  await writeLayout((name, bytes) => writeFile(join(dir, name), bytes), shards);
  return dir;
}

const weight = sampleTensor("float32", [64, 48], 1);
const bias = sampleTensor("bfloat16", [48], 2);
const embed = sampleTensor("int64", [10, 4], 3);
const SHARDS: Record<string, HostTensor>[] = [
  { "model.layers.0.weight": weight, "model.layers.0.bias": bias },
  { "model.embed": embed },
];

describe('load(target, "hf+<url>"): a Hugging Face layout loaded without importing it', () => {
  it("fills a target from the directory, its index, or hf+memory://, bit-exact", async () => {
    const dir = await fileLayout(SHARDS);
    const memory = `memory://hf-${process.pid}/model`;
    const storage = await openStorage(memory);
    await writeLayout((name, bytes) => storage.write(name, bytes), SHARDS);
    for (const url of [`hf+file://${dir}`, `hf+file://${dir}/model.safetensors.index.json`, `hf+${memory}`]) {
      const target = {
        model: {
          layers: { 0: { weight: hostTensor("float32", [64, 48]), bias: hostTensor("bfloat16", [48]) } },
          embed: hostTensor("int64", [10, 4]),
        },
      };
      const result = await load(target, url);
      expect(result.entries, url).toBe(3);
      expect(sameBits(target.model.layers[0].weight, weight), url).toBe(true);
      expect(sameBits(target.model.layers[0].bias, bias), url).toBe(true);
      expect(sameBits(target.model.embed, embed), url).toBe(true);
    }
    await storage.close();
    // Without a target: the whole layout, keyed by names split at dots.
    const whole = (await load(`hf+file://${dir}`)) as { model: { layers: Record<string, Record<string, HostTensor>> } };
    expect(sameBits(whole.model.layers["0"]!.weight!, weight)).toBe(true);
    const metadata = await readMetadata(`hf+file://${dir}`);
    expect(metadata.entries.map((e) => e.key)).toEqual([
      ["model", "layers", "0", "weight"],
      ["model", "layers", "0", "bias"],
      ["model", "embed"],
    ]);
  });

  it("reads only the ranges a target needs: a column slice of a weight reads its rows' slices and nothing else", async () => {
    const dir = await fileLayout(SHARDS);
    const columns = { offsets: [0, 16], sizes: [64, 8] };
    const slice = hostTensor("float32", columns.sizes);
    const result = await load(
      {
        model: {
          layers: { 0: { weight: shardedTensor("float32", [64, 48], [{ offsets: columns.offsets, tensor: slice }]) } },
        },
      },
      `hf+file://${dir}`,
    );
    for (let r = 0; r < 64; r++) {
      for (let c = 0; c < 8; c++) expect(Object.is(slice.data[r * 8 + c], weight.data[r * 48 + 16 + c])).toBe(true);
    }
    // The index, both shards' headers (read to check the layout, and the first shard's again before its data), and 64 × 8 floats.
    const headers = await Promise.all(
      [1, 2].map(async (i) => {
        const name = shardFileName(i, 2);
        const bytes = new Uint8Array(await readFile(join(dir, name)));
        return 8 + Number(new DataView(bytes.buffer).getBigUint64(0, true));
      }),
    );
    const index = (await stat(join(dir, "model.safetensors.index.json"))).size;
    expect(result.bytesRead).toBe(index + 8 + headers[0]! + 8 + headers[1]! + headers[0]! + 64 * 8 * 4);
  });

  it("is read-only: save and asyncSave refuse an hf+ location before writing anything", async () => {
    const dir = await fileLayout(SHARDS);
    const state: StateDict = { w: sampleTensor("float32", [4]) };
    await expect(save(state, `hf+file://${dir}/new`)).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("is read, never written"),
    });
    await expect(asyncSave(state, `hf+file://${dir}/new`)).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(load(`hf+file://${dir}/nothing`)).rejects.toMatchObject({ code: "not_found" });
  });
});
