import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hostTensor, readMetadata, save } from "@cairn/core";
import * as tf from "@tensorflow/tfjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cairnIO } from "./cairn-io.js";

let dir: string;
beforeAll(async () => {
  await tf.setBackend("cpu");
  dir = await mkdtemp(join(tmpdir(), "cairn-tfjs-"));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

function smallModel(): tf.Sequential {
  const layers = [
    tf.layers.dense({ units: 5, inputShape: [3], activation: "tanh" }),
    tf.layers.batchNormalization(),
    tf.layers.dense({ units: 2 }),
  ];
  const model = tf.sequential({ layers });
  model.compile({ optimizer: "sgd", loss: "meanSquaredError" });
  return model;
}

const weightsOf = (model: tf.LayersModel): Promise<Float32Array[]> =>
  Promise.all(model.getWeights().map((w) => w.data() as Promise<Float32Array>));
const predict = (model: tf.LayersModel): Promise<Float32Array> =>
  (
    model.predict(
      tf.tensor2d([
        [0.5, -1, 2],
        [3, 0, -0.5],
      ]),
    ) as tf.Tensor
  ).data() as Promise<Float32Array>;

describe("cairnIO", () => {
  for (const scheme of ["memory", "file"] as const) {
    it(`model.save(cairnIO(${scheme}://…)) then tf.loadLayersModel(cairnIO(…)) gives the same weights and predictions`, async () => {
      const url = scheme === "memory" ? `memory://tfjs-${process.pid}/model` : `file://${dir}/model`;
      const model = smallModel();
      const result = await model.save(cairnIO(url));
      expect(result.modelArtifactsInfo.weightDataBytes).toBe((3 * 5 + 5 + 4 * 5 + 5 * 2 + 2) * 4);
      const metadata = await readMetadata(url);
      expect(metadata.entries.map((e) => e.key)).toEqual(model.weights.map((w) => ["weights", w.name]));
      expect(metadata.user).toMatchObject({
        tfjs: { format: "layers-model", modelTopology: { class_name: "Sequential" } },
      });
      const loaded = await tf.loadLayersModel(cairnIO(url));
      expect(await weightsOf(loaded)).toEqual(await weightsOf(model));
      expect(await predict(loaded)).toEqual(await predict(model));
      await expect(model.save(cairnIO(url))).rejects.toMatchObject({ code: "already_exists" });
    });
  }

  it("loading a checkpoint without a tfjs model says how to make one", async () => {
    const url = `file://${dir}/plain`;
    await save({ w: hostTensor("float32", [2]) }, url);
    await expect(tf.loadLayersModel(cairnIO(url))).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("holds no tfjs model"),
    });
  });
});
