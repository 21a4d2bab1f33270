import { readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { save } from "@cairn/core";
import { cairnIO, getStateDict } from "@cairn/tfjs";
import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { cairn, tempDir } from "./helpers.js";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

function smallModel(): tf.Sequential {
  const model = tf.sequential();
  model.add(tf.layers.dense({ units: 8, inputShape: [4], activation: "relu" }));
  model.add(tf.layers.batchNormalization());
  model.add(tf.layers.dense({ units: 3, activation: "softmax" }));
  model.compile({ optimizer: "adam", loss: "categoricalCrossentropy" });
  return model;
}

const input = (): tf.Tensor =>
  tf.tensor2d([
    [0.5, -1, 2, 0.25],
    [3, 0, -0.5, 1],
  ]);

async function weightsOf(model: tf.LayersModel): Promise<Float32Array[]> {
  return Promise.all(model.getWeights().map(async (w) => (await w.data()) as Float32Array));
}

/**
 * A model.json + weights exactly as tfjs writes them: `model.save(tf.io.http(url))` posts
 * tfjs's own model.json and weights, which a local server receives. With `shards`, the weights
 * are then cut into two files (not on a weight boundary, so a weight spans both) and the
 * manifest's paths say so, as the tfjs converter shards weights.
 */
async function tfjsFiles(model: tf.LayersModel, dir: string, shards: boolean): Promise<void> {
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (c: Buffer) => chunks.push(c));
    request.on("end", () => {
      void (async () => {
        const form = await new Response(Buffer.concat(chunks), {
          headers: { "content-type": request.headers["content-type"]! },
        }).formData();
        const json = JSON.parse(await (form.get("model.json") as Blob).text()) as tf.io.ModelJSON;
        const data = new Uint8Array(await (form.get("model.weights.bin") as Blob).arrayBuffer());
        if (shards) {
          const cut = Math.floor(data.byteLength / 2) + 1;
          await writeFile(join(dir, "group1-shard1of2.bin"), data.subarray(0, cut));
          await writeFile(join(dir, "group1-shard2of2.bin"), data.subarray(cut));
          json.weightsManifest[0]!.paths = ["group1-shard1of2.bin", "group1-shard2of2.bin"];
        } else {
          expect(json.weightsManifest[0]!.paths).toEqual(["./model.weights.bin"]);
          await writeFile(join(dir, "model.weights.bin"), data);
        }
        await writeFile(join(dir, "model.json"), JSON.stringify(json));
        response.end("{}");
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    await model.save(tf.io.http(`http://127.0.0.1:${(server.address() as AddressInfo).port}/upload`));
  } finally {
    server.close();
  }
}

/** Loads what `cairn to-tfjs` wrote, the way a tfjs app would read model.json and weights.bin. */
async function loadTfjsFiles(dir: string): Promise<tf.LayersModel> {
  const json = JSON.parse(await readFile(join(dir, "model.json"), "utf8")) as tf.io.ModelJSON;
  const group = json.weightsManifest[0]!;
  const weights = await readFile(join(dir, group.paths[0]!));
  return tf.loadLayersModel(
    tf.io.fromMemory({
      modelTopology: json.modelTopology,
      weightSpecs: group.weights,
      weightData: weights.buffer.slice(weights.byteOffset, weights.byteOffset + weights.byteLength),
    }),
  );
}

describe("cairn from-tfjs and to-tfjs", () => {
  it("a tfjs-written model.json → checkpoint → model.json + weights.bin, loading to the same model; cairnIO reads the checkpoint", async () => {
    const dir = await tempDir();
    const model = smallModel();
    await tfjsFiles(model, dir, false);
    const run = await cairn([
      "from-tfjs",
      join(dir, "model.json"),
      join(dir, "ckpt"),
      "--then",
      "verify",
      join(dir, "ckpt"),
      "--then",
      "to-tfjs",
      join(dir, "ckpt"),
      join(dir, "out"),
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/converted .*model\.json into .*ckpt: 8 weights/);
    const back = await loadTfjsFiles(join(dir, "out"));
    expect(await weightsOf(back)).toEqual(await weightsOf(model));
    expect(await (back.predict(input()) as tf.Tensor).data()).toEqual(
      await (model.predict(input()) as tf.Tensor).data(),
    );
    const viaIO = await tf.loadLayersModel(cairnIO(join(dir, "ckpt")));
    expect(await weightsOf(viaIO)).toEqual(await weightsOf(model));

    const again = await cairn(["to-tfjs", join(dir, "ckpt"), join(dir, "out")]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/out\/model\.json already exists; convert into an empty directory or delete it first/);
  });

  it("reads weights spanning two shard files", async () => {
    const dir = await tempDir();
    const model = smallModel();
    await tfjsFiles(model, dir, true);
    const run = await cairn(["from-tfjs", join(dir, "model.json"), `file://${dir}/ckpt`]);
    expect(run.code, run.stderr).toBe(0);
    expect(await weightsOf(await tf.loadLayersModel(cairnIO(join(dir, "ckpt"))))).toEqual(await weightsOf(model));
  });

  it("to-tfjs of a location without a checkpoint fails with exit 1", async () => {
    const dir = await tempDir();
    await writeFile(join(dir, "x.safetensors"), new Uint8Array(0));
    const run = await cairn(["to-tfjs", join(dir, "none"), join(dir, "out")]);
    expect(run.code).toBe(1);
  });

  it("refuses quantized weights, weight files of the wrong size and a checkpoint that holds no model", async () => {
    const dir = await tempDir();
    await writeFile(join(dir, "w.bin"), new Uint8Array(16));
    const manifest = (weights: object[]): string =>
      JSON.stringify({ modelTopology: {}, weightsManifest: [{ paths: ["w.bin"], weights }] });
    await writeFile(
      join(dir, "quantized.json"),
      manifest([{ name: "k", shape: [16], dtype: "float32", quantization: { dtype: "uint8", min: 0, scale: 1 } }]),
    );
    await writeFile(join(dir, "short.json"), manifest([{ name: "k", shape: [5], dtype: "float32" }]));
    const q = await cairn(["from-tfjs", join(dir, "quantized.json"), join(dir, "q")]);
    expect([q.code, q.stderr]).toEqual([1, expect.stringContaining("weight k is quantized (uint8)")]);
    const s = await cairn(["from-tfjs", join(dir, "short.json"), join(dir, "s")]);
    expect([s.code, s.stderr]).toEqual([
      3,
      expect.stringContaining("weight files w.bin hold 16 bytes, their weights need 20"),
    ]);
    await writeFile(
      join(dir, "plain.safetensors"),
      new Uint8Array([8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32]),
    );
    const n = await cairn([
      "import",
      join(dir, "plain.safetensors"),
      join(dir, "plain"),
      "--then",
      "to-tfjs",
      join(dir, "plain"),
      join(dir, "out"),
    ]);
    expect([n.code, n.stderr]).toEqual([
      1,
      expect.stringContaining(
        'holds no tfjs model (no user metadata "tfjs" with a modelTopology); save one with model.save(cairnIO(url)) or cairn from-tfjs',
      ),
    ]);
  });

  it("export --hf --names tfjs writes a model's weights under torch's names, kernels transposed", async () => {
    const dir = await tempDir();
    const model = smallModel();
    await save(await getStateDict(model, model.optimizer), join(dir, "ckpt"));
    const run = await cairn([
      "export",
      join(dir, "ckpt"),
      join(dir, "hf"),
      "--hf",
      "--keys",
      "model",
      "--names",
      "tfjs",
    ]);
    expect(run.code, run.stderr).toBe(0);
    const index = JSON.parse(await readFile(join(dir, "hf", "model.safetensors.index.json"), "utf8")) as {
      weight_map: Record<string, string>;
    };
    expect(Object.keys(index.weight_map)).toEqual([
      "model.layers.0.weight",
      "model.layers.0.bias",
      "model.layers.1.weight",
      "model.layers.1.bias",
      "model.layers.1.running_mean",
      "model.layers.1.running_var",
      "model.layers.2.weight",
      "model.layers.2.bias",
    ]);
  });
});
