import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { LayerSeeds } from "./layer-seeds.js";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

/** The dropout mask a training call of `model` applies to ones. */
async function mask(model: tf.LayersModel): Promise<number[]> {
  const dropout = model.layers[1]!;
  const out = tf.tidy(() => dropout.apply(tf.ones([1, 32]), { training: true }) as tf.Tensor);
  const values = Array.from(await out.data());
  out.dispose();
  return values;
}

describe("LayerSeeds", () => {
  it("gives Dropout a mask per step, the same for the same step, and puts its own seed back", async () => {
    const model = tf.sequential({
      layers: [tf.layers.dense({ units: 32, inputShape: [4] }), tf.layers.dropout({ rate: 0.5, seed: 3 })],
    });
    const own = await mask(model);
    expect(await mask(model)).toEqual(own); // tfjs: a seeded Dropout repeats its mask on every call
    const seeds = new LayerSeeds(model);
    seeds.apply(7, 1);
    const first = await mask(model);
    seeds.apply(7, 2);
    const second = await mask(model);
    expect(second).not.toEqual(first);
    seeds.apply(7, 1);
    expect(await mask(model)).toEqual(first);
    seeds.apply(8, 1);
    expect(await mask(model)).not.toEqual(first);
    seeds.restore();
    expect(await mask(model)).toEqual(own);
    expect(seeds.unseedable).toEqual([]);
  });

  it("names the layers that draw from Math.random, nested ones too", () => {
    const inner = tf.sequential({
      layers: [tf.layers.gaussianNoise({ stddev: 0.1, inputShape: [4], name: "noise" })],
    });
    const model = tf.sequential({
      layers: [
        inner,
        tf.layers.dense({ units: 4 }),
        tf.layers.reshape({ targetShape: [2, 2] }),
        tf.layers.lstm({ units: 2, dropout: 0.2, name: "lstm" }),
        tf.layers.dropout({ rate: 0.2 }),
      ],
    });
    expect(new LayerSeeds(model).unseedable).toEqual(["noise (GaussianNoise)", "lstm (LSTM)"]);
  });
});
