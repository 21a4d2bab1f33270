import "@tensorflow/tfjs-backend-cpu";
import * as tf from "@tensorflow/tfjs-core";
import { type HostTensor, type StateDict, type TensorLike, load, save } from "@cairn/core";
import { beforeAll, describe, expect, it } from "vitest";
import { locations } from "./helpers.js";

beforeAll(async () => {
  await tf.setBackend("cpu");
  await tf.ready();
});

/**
 * A tensor whose values live "on a device": only the async `data()` path works, as with the
 * webgl or node-gpu backends, so the test fails if Cairn ever reads tensors synchronously.
 */
function deviceTensor(values: Float32Array, shape: number[]): TensorLike & { reads: number } {
  const t = {
    shape,
    dtype: "float32",
    reads: 0,
    isDisposed: false,
    async data() {
      t.reads++;
      await new Promise((r) => setTimeout(r, 1));
      return values.slice();
    },
    dataSync(): never {
      throw new Error("dataSync on a device tensor stalls the GPU");
    },
  };
  return t;
}

describe("tfjs tensors and variables", () => {
  it("saves tfjs tensors through data() and assigns variables in place on load", async () => {
    const url = await locations.memory();
    const w = tf.variable(
      tf.tensor2d([
        [1, 2],
        [3, 4],
      ]),
      true,
      "w",
    );
    const steps = tf.variable(tf.scalar(7, "int32"), false, "steps");
    const mask = tf.tensor1d([true, false, true], "bool");
    const device = deviceTensor(Float32Array.of(0.5, -0.5, 1.5), [3]);
    await save({ model: { w, mask }, steps, device }, url);
    expect(device.reads).toBe(1);

    const w2 = tf.variable(tf.zeros([2, 2]), true, "w2");
    const steps2 = tf.variable(tf.scalar(0, "int32"), false, "steps2");
    const mask2 = tf.tensor1d([false, false, false], "bool");
    const target: StateDict = { model: { w: w2, mask: mask2 }, steps: steps2, device: tf.zeros([3]) };
    const before = tf.memory().numTensors;
    await load(target, url);
    expect(await w2.data()).toEqual(Float32Array.of(1, 2, 3, 4));
    expect(await steps2.data()).toEqual(Int32Array.of(7));
    // Immutable tensors are replaced in their parent; variables keep their identity.
    expect((target.model as StateDict).w).toBe(w2);
    const newMask = (target.model as StateDict).mask as tf.Tensor;
    expect(newMask).not.toBe(mask2);
    expect(Array.from(await newMask.data())).toEqual([1, 0, 1]);
    expect(await (target.device as tf.Tensor).data()).toEqual(Float32Array.of(0.5, -0.5, 1.5));
    // Two new tensors (the replacements); the temporaries assigned to variables were disposed.
    expect(tf.memory().numTensors - before).toBe(2);
  });

  it("loads a tfjs checkpoint into host tensors and host checkpoints into tfjs variables", async () => {
    const url = await locations.memory();
    await save({ w: tf.tensor1d([1, 2, 3]) }, url);
    const back = (await load(url)) as { w: HostTensor };
    expect(back.w).toEqual({ dtype: "float32", shape: [3], data: Float32Array.of(1, 2, 3) });
    const v = tf.variable(tf.zeros([3]));
    await load({ w: v }, url);
    expect(await v.data()).toEqual(Float32Array.of(1, 2, 3));
  });

  it("refuses to load into a tfjs tensor of another dtype or shape", async () => {
    const url = await locations.memory();
    await save({ w: tf.tensor1d([1, 2, 3]) }, url);
    await expect(load({ w: tf.variable(tf.zeros([3], "int32")) }, url)).rejects.toMatchObject({ code: "mismatch" });
    await expect(load({ w: tf.variable(tf.zeros([4])) }, url)).rejects.toMatchObject({ code: "mismatch" });
  });
});
