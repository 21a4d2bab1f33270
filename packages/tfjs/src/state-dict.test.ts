import * as tf from "@tensorflow/tfjs";
import { CheckpointError, type StateDict, hostTensor } from "@cairn/core";
import { beforeAll, describe, expect, it } from "vitest";
import { getStateDict, primeOptimizer, setStateDict } from "./state-dict.js";

let model: tf.LayersModel;
beforeAll(async () => {
  await tf.setBackend("cpu");
  const m = tf.sequential();
  m.add(tf.layers.dense({ units: 1, inputShape: [2] }));
  model = m;
});

const any = (value: unknown): never => value as never;

async function thrown(call: () => Promise<unknown>): Promise<unknown> {
  try {
    await call();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe("tfjs state dict helpers", () => {
  it.each([
    [
      "getStateDict without a model",
      () => getStateDict(any(null)),
      "invalid_argument",
      "getStateDict's model must be a tfjs LayersModel, got null",
    ],
    [
      "getStateDict with a non-optimizer",
      () => getStateDict(model, any({})),
      "invalid_argument",
      "getStateDict's optimizer must be a tfjs Optimizer or undefined, got an object",
    ],
    [
      "setStateDict with a null state dict",
      () => setStateDict(model, undefined, any(null)),
      "invalid_argument",
      "got null",
    ],
    [
      "setStateDict with a number for model",
      () => setStateDict(model, undefined, { model: 5 }),
      "mismatch",
      "model in the state dict",
    ],
    [
      "primeOptimizer without an optimizer",
      () => primeOptimizer(any(undefined), model),
      "invalid_argument",
      "primeOptimizer's optimizer",
    ],
    [
      "primeOptimizer without a model",
      () => primeOptimizer(tf.train.sgd(0.1), any("m")),
      "invalid_argument",
      'got the string "m"',
    ],
  ])("%s is a coded error", async (_, call, code, fragment) => {
    const error = await thrown(call);
    expect(error).toBeInstanceOf(CheckpointError);
    expect(error).toMatchObject({ code, message: expect.stringContaining(fragment) });
  });

  it("refuses an optimizer state of the wrong shape (a foreign or damaged restore) with mismatch, before changing anything", async () => {
    const optimizer = tf.train.adam(0.01);
    await primeOptimizer(optimizer, model);
    const good = (await getStateDict(model, optimizer)) as { model: StateDict; optim: StateDict };
    const iterations = optimizer.iterations;
    const cases: [StateDict, string][] = [
      [{ ...good.optim, iterations: "7" }, "optim.iterations"],
      [{ ...good.optim, slots: [] }, "optim.slots"],
      [
        { ...good.optim, slots: { ...(good.optim.slots as StateDict), accumulatedFirstMoment: { 0: 1 } } },
        "optim.slots.accumulatedFirstMoment",
      ],
      [{ ...good.optim, scalars: {} }, "optim.scalars.accBeta1"],
    ];
    for (const [optim, key] of cases) {
      const error = await thrown(() => setStateDict(model, optimizer, { model: good.model, optim }));
      expect(error, key).toMatchObject({ code: "mismatch", context: { key } });
    }
    expect(optimizer.iterations).toBe(iterations);
    const before = await model.getWeights()[0]!.data();
    const error = await thrown(() =>
      setStateDict(model, optimizer, {
        model: { ...good.model, [Object.keys(good.model)[0]!]: hostTensor("float32", [2, 1]) },
        optim: { ...good.optim, scalars: {} },
      }),
    );
    expect(error).toMatchObject({ code: "mismatch" });
    expect(await model.getWeights()[0]!.data()).toEqual(before);
    const weight = Object.keys(good.model)[0]!;
    const bad = { ...good.model, [weight]: any({ dtype: "float32", shape: "2", data: new Float32Array(2) }) };
    expect(await thrown(() => setStateDict(model, undefined, { model: bad }))).toMatchObject({
      code: "invalid_argument",
    });
    await setStateDict(model, undefined, {
      model: { ...good.model, [weight]: hostTensor("float32", [2, 1], Float32Array.of(3, 4)) },
    });
    expect(Array.from(await model.getWeights()[0]!.data())).toEqual([3, 4]);
  });
});
