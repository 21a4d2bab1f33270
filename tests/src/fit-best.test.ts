// cairnCheckpoint's `best` through the manager's retention, and the metrics of fit's logs as
// `cairn ls` shows them: a fit run whose validation loss goes up and down keeps the steps with
// the lowest val_loss (and the newest), whatever their age.
import * as tf from "@tensorflow/tfjs";
import { runCli } from "@cairn/cli";
import { CheckpointManager } from "@cairn/manager";
import { cairnCheckpoint } from "@cairn/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { locations } from "./helpers.js";

beforeAll(async () => {
  tf.enableProdMode();
  await tf.setBackend("cpu");
});

/** 160 noisy samples of a linear function; a learning rate high enough that validation loss is not monotonic. */
function setup(): { model: tf.LayersModel; xs: tf.Tensor; ys: tf.Tensor } {
  const model = tf.sequential({
    layers: [
      tf.layers.dense({
        units: 12,
        inputShape: [4],
        activation: "relu",
        kernelInitializer: tf.initializers.glorotUniform({ seed: 11 }),
      }),
      tf.layers.dropout({ rate: 0.25 }),
      tf.layers.dense({ units: 1, kernelInitializer: tf.initializers.glorotUniform({ seed: 12 }) }),
    ],
  });
  model.compile({ optimizer: tf.train.adam(0.05), loss: "meanSquaredError" });
  const xs = tf.randomNormal([160, 4], 0, 1, "float32", 21);
  const ys = xs.matMul(tf.tensor2d([[1.5], [-2], [0.7], [3]])).add(tf.randomNormal([160, 1], 0, 0.1, "float32", 22));
  return { model, xs, ys };
}

async function cairnLs(root: string): Promise<string> {
  let stdout = "";
  const code = await runCli(["ls", root], {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: () => undefined },
  });
  expect(code).toBe(0);
  return stdout;
}

describe("fit with best: { monitor: 'val_loss' }", () => {
  it.each(["epoch", 5] as const)(
    "every %s: keeps the 3 steps of lowest val_loss and the newest; cairn ls shows their metrics",
    async (every) => {
      const root = await locations.memory();
      const { model, xs, ys } = setup();
      const ckpt = await cairnCheckpoint(model, root, {
        every,
        seed: 7,
        maxToKeep: 3,
        best: { monitor: "val_loss" },
        log: false,
      });
      const history = await ckpt.fit(xs, ys, { epochs: 8, batchSize: 8, validationSplit: 0.25, verbose: 0 });
      await ckpt.close();
      tf.dispose([xs, ys]);

      // 120 training samples: 15 batches an epoch, so epoch e ends at step 15 (e + 1).
      const valLoss = history.history.val_loss as number[];
      const byLoss = valLoss.map((loss, epoch) => ({ loss, step: 15 * (epoch + 1) })).sort((a, b) => a.loss - b.loss);
      const expected = [...new Set([...byLoss.slice(0, 3).map((s) => s.step), 120])].sort((a, b) => a - b);
      // Not what keeping the newest would keep: the test would catch a retention by age.
      expect(expected).not.toEqual([75, 90, 105, 120]);
      const manager = new CheckpointManager(root, 1, { readOnly: true });
      expect(await manager.allSteps()).toEqual(expected);
      for (const step of expected) {
        const { metrics } = await manager.metadata(step);
        expect(metrics.val_loss).toBe(valLoss[step / 15 - 1]);
        expect(metrics.loss).toBeGreaterThan(0);
      }
      await manager.close();

      const listing = await cairnLs(root);
      for (const step of expected) {
        const line = listing.split("\n").find((l) => l.trimStart().startsWith(`${step} `));
        expect(line, listing).toMatch(/loss=\d/);
        expect(line).toContain(`val_loss=${Number(valLoss[step / 15 - 1]!.toPrecision(6))}`);
      }
    },
    120_000,
  );
});
