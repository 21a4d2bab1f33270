import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { SeededRandom } from "../src/index.js";
import { BATCHES_PER_EPOCH } from "./fit-fixture.js";
import { type FitMode, type TrainResult, train } from "./fit-harness.js";

const EPOCHS = 3;
const TOTAL = EPOCHS * BATCHES_PER_EPOCH;
const SEEDS = (process.env.CAIRN_FIT_SEEDS ?? "1,2").split(",").map(Number);
let roots = 0;
const root = (): string => `memory://fit-resume-${roots++}`;

beforeAll(async () => {
  tf.enableProdMode();
  await tf.setBackend("cpu");
});

/** Trains to the end through the given stops, each a new call (a new process's model and dataset); resolves the last call. */
async function stopAndResume(
  mode: FitMode,
  stops: readonly number[],
  every: number | "epoch",
): Promise<{ last: TrainResult; runs: TrainResult[] }> {
  const where = root();
  const runs: TrainResult[] = [];
  for (const stopBefore of stops) {
    const run = await train(where, mode, { stopBefore, every, maxToKeep: 2 });
    expect(run.preempted, `stop before batch ${stopBefore}`).toBe(true);
    // The notice arrived before the batch: it is trained, checkpointed and the run stops.
    expect(run.step).toBe(stopBefore + 1);
    expect(run.committed).toContain(stopBefore + 1);
    runs.push(run);
  }
  const last = await train(where, mode, { every, maxToKeep: 2 });
  expect(last.preempted).toBe(false);
  expect(last.step).toBe(TOTAL);
  runs.push(last);
  return { last, runs };
}

describe.each(["fitDataset", "fit"] as const)("%s stopped and resumed", (mode) => {
  let straight: TrainResult;
  beforeAll(async () => {
    straight = await train(root(), mode, {});
    expect(straight.step).toBe(TOTAL);
    expect(straight.history.epoch).toEqual([0, 1, 2]);
  });

  it("in the middle of epoch 2 ends with the weights of an uninterrupted run, bit for bit", async () => {
    const { last, runs } = await stopAndResume(mode, [BATCHES_PER_EPOCH + 7], "epoch");
    expect(runs[0]!.history.epoch).toEqual([0, 1]);
    expect(last.history.epoch).toEqual([1, 2]);
    expect(last.logs[0]).toMatch(
      /^resumed from step 28 under memory:\/\/fit-resume-\d+ \(epoch 2 of 3, 8 batches into it\)$/,
    );
    expect(last.crcs).toEqual(straight.crcs);
    // Not by accident: the run stopped with other weights.
    expect(runs[0]!.crcs).not.toEqual(straight.crcs);
  });

  it("at an epoch boundary, and at the very last batch", async () => {
    const { last } = await stopAndResume(mode, [BATCHES_PER_EPOCH - 1, 2 * BATCHES_PER_EPOCH - 1, TOTAL - 1], 5);
    expect(last.crcs).toEqual(straight.crcs);
  });

  for (const seed of SEEDS) {
    it(`seed ${seed}: any stops, any save interval, the same final weights (property)`, async () => {
      const random = new SeededRandom(seed);
      const count = 1 + Math.floor(random.next() * 3);
      const stops = [...new Set(Array.from({ length: count }, () => Math.floor(random.next() * TOTAL)))].sort(
        (a, b) => a - b,
      );
      const every = random.next() < 0.3 ? "epoch" : 1 + Math.floor(random.next() * 25);
      const { last } = await stopAndResume(mode, stops, every);
      expect(last.crcs, `stops ${stops.join(",")} every ${every}`).toEqual(straight.crcs);
    });
  }

  it("a finished run's root trains nothing more, says so, and restores the final weights", async () => {
    const where = root();
    const first = await train(where, mode, {});
    expect(first.crcs).toEqual(straight.crcs);
    const again = await train(where, mode, {});
    expect(again.history.epoch).toEqual([]);
    expect(again.committed).toEqual([]);
    expect(again.logs).toEqual([
      expect.stringMatching(
        /^training under memory:\/\/fit-resume-\d+ already finished step 60 \(3 of 3 epochs done\): nothing to train/,
      ),
    ]);
    expect(again.crcs).toEqual(straight.crcs);
    // Asked for more epochs, it trains on from the end.
    const more = await train(where, mode, { epochs: 4 });
    expect(more.history.epoch).toEqual([3]);
    expect(more.step).toBe(TOTAL + BATCHES_PER_EPOCH);
    const longer = await train(root(), mode, { epochs: 4 });
    expect(more.crcs).toEqual(longer.crcs);
  });

  it("beside tfjs's own callbacks: an early stop marks the run finished", async () => {
    const where = root();
    const early = (): tf.Callback[] => [tf.callbacks.earlyStopping({ monitor: "loss", minDelta: 1e9, patience: 0 })];
    const stopped = await train(where, mode, { args: { callbacks: early() } });
    expect(stopped.history.epoch).toEqual([0, 1]);
    expect(stopped.committed).toEqual([20, 40]);
    const again = await train(where, mode, { args: { callbacks: early() } });
    expect(again.logs[0]).toMatch(/already finished step 40 \(2 of 3 epochs done\): nothing to train/);
  });
});
