import * as tf from "@tensorflow/tfjs";
import { rejection } from "@cairn/core/testing";
import { CheckpointManager } from "@cairn/manager";
import { beforeAll, describe, expect, it } from "vitest";
import { cairnCheckpoint, getStateDict } from "../src/index.js";
import { BATCH, fitModel, fitTensors, weightCrcs } from "./fit-fixture.js";
import { train } from "./fit-harness.js";

let roots = 0;
const root = (): string => `memory://fit-errors-${roots++}`;

beforeAll(async () => {
  tf.enableProdMode();
  await tf.setBackend("cpu");
});

/** A root holding one stopped fitDataset run of the fixture model (its newest step: 28). */
async function stoppedRun(mode: "fit" | "fitDataset" = "fitDataset"): Promise<string> {
  const where = root();
  await train(where, mode, { stopBefore: 27 });
  return where;
}

describe("a root of another model", () => {
  const cases: [string, () => tf.LayersModel, RegExp][] = [
    [
      "wider layers (mis-shaped weights)",
      () => fitModel({ hidden: 16 }),
      /mis-shaped model\.layers\.0\.kernel \(checkpoint float32 \[4,12\], here float32 \[4,16\]\), model\.layers\.0\.bias \(checkpoint float32 \[12\], here float32 \[16\]\), model\.layers\.2\.kernel/,
    ],
    [
      "a layer more (missing weights)",
      () => {
        const model = tf.sequential({
          layers: [
            tf.layers.dense({ units: 12, inputShape: [4], activation: "relu" }),
            tf.layers.dropout({ rate: 0.25 }),
            tf.layers.dense({ units: 1 }),
            tf.layers.dense({ units: 1 }),
          ],
        });
        model.compile({ optimizer: tf.train.adam(0.02), loss: "meanSquaredError" });
        return model;
      },
      /: missing model\.layers\.3\.kernel, model\.layers\.3\.bias\. /,
    ],
    [
      "a layer less (extra weights)",
      () => {
        const model = tf.sequential({
          layers: [tf.layers.dense({ units: 12, inputShape: [4] }), tf.layers.dropout({ rate: 0.25 })],
        });
        model.compile({ optimizer: tf.train.adam(0.02), loss: "meanSquaredError" });
        return model;
      },
      /: extra model\.layers\.2\.kernel, model\.layers\.2\.bias\. /,
    ],
  ];
  it.each(cases)("%s is refused naming the weights, and nothing is assigned", async (_, makeModel, message) => {
    const where = await stoppedRun();
    const model = makeModel();
    const before = await weightCrcs(model);
    const error = await rejection(train(where, "fitDataset", { model }));
    expect(error.code).toBe("mismatch");
    expect(error.message).toMatch(new RegExp(`^step 28 under ${where} is not a checkpoint of this model: `));
    expect(error.message).toMatch(message);
    expect(await weightCrcs(model)).toEqual(before);
  });

  it("another optimizer is refused before anything is assigned", async () => {
    const where = await stoppedRun();
    const model = fitModel({ optimizer: tf.train.sgd(0.1) });
    const before = await weightCrcs(model);
    const error = await rejection(train(where, "fitDataset", { model }));
    expect(error.code).toBe("mismatch");
    expect(error.message).toContain("holds Adam optimizer state, but the model is compiled with SGD");
    expect(await weightCrcs(model)).toEqual(before);
  });
});

describe("a root of another run's data", () => {
  it("fit on a fitDataset root, and a fit of other batches, are refused", async () => {
    const datasetRoot = await stoppedRun("fitDataset");
    let error = await rejection(train(datasetRoot, "fit"));
    expect(error.code).toBe("mismatch");
    expect(error.message).toBe(
      `step 28 under ${datasetRoot} holds the data position of another run (fitDataset with passes to the end of the data), not of this call (fit over 160 samples in batches of 8, shuffled): its batches cannot be skipped exactly; use another root or the same data settings`,
    );
    const fitRoot = await stoppedRun("fit");
    error = await rejection(train(fitRoot, "fit", { args: { batchSize: 16 } }));
    expect(error.message).toContain("another run (fit over 160 samples in batches of 8, shuffled)");
    error = await rejection(train(fitRoot, "fit", { args: { shuffle: false } }));
    expect(error.message).toContain("not of this call (fit over 160 samples in batches of 8, in order)");
    error = await rejection(train(fitRoot, "fit", { args: { validationSplit: 0.5 } }));
    expect(error.message).toContain("not of this call (fit over 80 samples in batches of 8, shuffled)");
  });

  it("another seed is refused", async () => {
    const where = await stoppedRun();
    const error = await rejection(train(where, "fitDataset", { seed: 8 }));
    expect(error.message).toContain(`holds a run with seed 7, not 8`);
  });

  it("a root written by a hand-written loop holds no data position", async () => {
    const where = root();
    const model = fitModel();
    const manager = new CheckpointManager(where, 1);
    await manager.save(5, await getStateDict(model, model.optimizer));
    await manager.close();
    const error = await rejection(train(where, "fitDataset"));
    expect(error.code).toBe("mismatch");
    expect(error.message).toContain(`step 5 under ${where} has no fit entry`);
  });

  it("a fit entry of another layout names the keys", async () => {
    const where = root();
    const model = fitModel();
    const manager = new CheckpointManager(where, 1);
    await manager.save(5, { ...(await getStateDict(model, model.optimizer)), fit: { format: 1, step: 5, cursor: 3 } });
    await manager.close();
    const error = await rejection(train(where, "fitDataset"));
    expect(error.message).toMatch(
      /holds a fit entry of another layout \(missing fit\.kind, fit\.epoch, .*; unexpected fit\.cursor\)/,
    );
  });

  it("a dataset shorter than the saved position is refused when it runs out", async () => {
    const where = await stoppedRun();
    const model = fitModel();
    const ckpt = await cairnCheckpoint(model, where, { seed: 7, log: false });
    const { xs, ys } = fitTensors();
    const short = tf.data
      .zip({ xs: tf.data.array(xs.unstack()), ys: tf.data.array(ys.unstack()) })
      .take(40)
      .batch(BATCH);
    const error = await rejection(ckpt.fitDataset(short, { epochs: 3, verbose: 0 }));
    expect(error.code).toBe("mismatch");
    expect(error.message).toContain(
      "pass 2 over the dataset ended after 5 elements, but the saved position is 8 elements into it",
    );
    await ckpt.close();
    tf.dispose([xs, ys]);
  });
});

describe("bad arguments", () => {
  it.each([0, -1, 1.5, "batch", Number.NaN, null, { batches: 5 }])("every: %j is refused", async (every) => {
    const error = await rejection(cairnCheckpoint(fitModel(), root(), { every: every as never }));
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toMatch(
      /^cairnCheckpoint option every must be a positive integer \(batches\) or "epoch", got /,
    );
  });

  it("readOnly and processGroup are refused", async () => {
    for (const option of [{ readOnly: true }, { processGroup: {} }]) {
      const error = await rejection(cairnCheckpoint(fitModel(), root(), option as never));
      expect(error.message).toMatch(
        /^cairnCheckpoint option (readOnly|processGroup) must be undefined: a fit run trains in one process and saves/,
      );
    }
  });

  it("best needs maxToKeep and a metric name", async () => {
    let error = await rejection(cairnCheckpoint(fitModel(), root(), { best: { monitor: "val_loss" } }));
    expect(error.message).toContain("give maxToKeep too");
    error = await rejection(cairnCheckpoint(fitModel(), root(), { maxToKeep: 2, best: { monitor: "" } }));
    expect(error.message).toContain("cairnCheckpoint option best must be { monitor: a metric name, mode? }");
    error = await rejection(
      cairnCheckpoint(fitModel(), root(), { maxToKeep: 2, best: { monitor: "loss", mode: "lowest" as never } }),
    );
    expect(error.message).toContain('best.mode must be "min", "max" or "auto"');
  });

  it("fit arguments it cannot honour, and an uncompiled model, are refused", async () => {
    const ckpt = await cairnCheckpoint(fitModel(), root(), { log: false });
    const { xs, ys } = fitTensors();
    for (const [args, message] of [
      [{ initialEpoch: 1 }, "fit's initialEpoch must be undefined: the checkpoint decides where training resumes"],
      [{ sampleWeight: xs }, "fit's sampleWeight must be undefined"],
      [{ validationSplit: 1 }, "fit's validationSplit must be a number in [0, 1)"],
      [{ epochs: 0 }, "fit's epochs must be a positive integer"],
    ] as const) {
      const error = await rejection(ckpt.fit(xs, ys, args as tf.ModelFitArgs));
      expect(error.message).toContain(message);
    }
    const error = await rejection(ckpt.fitDataset(tf.data.array([1]), { epochs: 1, initialEpoch: 0 }));
    expect(error.message).toContain("fitDataset's initialEpoch must be undefined");
    await ckpt.close();
    const uncompiled = tf.sequential({ layers: [tf.layers.dense({ units: 1, inputShape: [4] })] });
    const bare = await cairnCheckpoint(uncompiled, root(), { log: false });
    expect((await rejection(bare.fit(xs, ys))).message).toContain("compile the model");
    await bare.close();
    tf.dispose([xs, ys]);
  });
});
