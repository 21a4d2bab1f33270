import * as tf from "@tensorflow/tfjs";
import { type HostTensor, load, readMetadata, save } from "@cairn/core";
import { CheckpointReader, exportSafetensorsLayout } from "@cairn/core/ops";
import { openStorage } from "@cairn/core/storage";
import { beforeAll, describe, expect, it } from "vitest";
import { getStateDict } from "./state-dict.js";
import { torchStyleNames } from "./torch-names.js";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

describe("torchStyleNames", () => {
  it("names a getStateDict model's layers as torch does, kernels in torch's order, and leaves unclear layers alone", async () => {
    const model = tf.sequential();
    model.add(tf.layers.embedding({ inputDim: 10, outputDim: 4, inputLength: 6 }));
    model.add(tf.layers.conv1d({ filters: 3, kernelSize: 2 }));
    model.add(tf.layers.batchNormalization());
    model.add(tf.layers.lstm({ units: 2 }));
    model.add(tf.layers.dense({ units: 5 }));
    const optimizer = tf.train.adam();
    const url = `memory://torch-names-${process.pid}/ckpt`;
    await save(await getStateDict(model, optimizer), url);
    const storage = await openStorage(`memory://torch-names-${process.pid}`);
    const reader = new CheckpointReader(storage, "ckpt", await readMetadata(url));
    await exportSafetensorsLayout(
      reader,
      { storage, dir: "hf", where: "hf" },
      { keys: ["model"], names: torchStyleNames },
    );
    await reader.close();
    const exported = (await load(`hf+memory://torch-names-${process.pid}/hf`)) as Record<string, unknown>;
    const layers = (exported.model as { layers: Record<string, Record<string, HostTensor>> }).layers;
    const shapes = Object.fromEntries(
      Object.entries(layers).map(([n, weights]) => [
        n,
        Object.fromEntries(Object.entries(weights).map(([w, t]) => [w, t.shape])),
      ]),
    );
    expect(shapes).toEqual({
      "0": { weight: [10, 4] },
      "1": { weight: [3, 4, 2], bias: [3] },
      "2": { weight: [3], bias: [3], running_mean: [3], running_var: [3] },
      // The LSTM's weights keep their tfjs names and layout: torch splits its biases and orders its gates otherwise.
      "3": { kernel: [3, 8], recurrent_kernel: [2, 8], bias: [8] },
      "4": { weight: [5, 2], bias: [5] },
    });
    expect(Object.keys(exported)).toEqual(["model"]);
    const kernel = (await model.layers[4]!.getWeights()[0]!.array()) as number[][];
    const weight = layers["4"]!.weight!;
    for (let o = 0; o < 5; o++)
      for (let i = 0; i < 2; i++) expect(weight.data[o * 2 + i]).toBe(Math.fround(kernel[i]![o]!));
    await storage.close();
  });
});
