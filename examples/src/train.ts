// A tfjs training loop that checkpoints with Cairn and resumes where it stopped.
//   pnpm demo [--path <url or dir>] [--steps N] [--interval N]
// Defaults: ./checkpoints, 300 steps, a checkpoint every 50. Run it twice: the second run
// resumes from the latest committed step. Checkpoints are saved in the background
// (saveAsync); on SIGTERM (a spot or preemptible machine going away, or Ctrl-\ kill) the next
// step is checkpointed and the run stops cleanly. Any registered URL works as --path
// (memory://, file://, and s3:// or gs:// with their storage package installed).
import { parseArgs } from "node:util";
import * as tf from "@tensorflow/tfjs";
import { crc32c } from "@cairn/core/format";
import { CheckpointManager } from "@cairn/manager";
import { getStateDict, primeOptimizer, setStateDict } from "@cairn/tfjs";

const argv = process.argv.slice(2);
const { values } = parseArgs({
  // `pnpm demo -- --steps 10` passes the "--" through.
  args: argv[0] === "--" ? argv.slice(1) : argv,
  options: {
    path: { type: "string", default: "checkpoints" },
    steps: { type: "string", default: "300" },
    interval: { type: "string", default: "50" },
  },
});
const totalSteps = Number(values.steps);
const interval = Number(values.interval);
if (!Number.isSafeInteger(totalSteps) || totalSteps < 1 || !Number.isSafeInteger(interval) || interval < 1) {
  console.error("--steps and --interval take positive integers");
  process.exit(2);
}

await tf.setBackend("cpu");

// y = x · w + 0.3 with some noise: a model small enough to train in seconds.
const trueWeights = tf.tensor2d([[1.5], [-2], [0.7], [3]]);
function batch(step: number): { x: tf.Tensor; y: tf.Tensor } {
  return tf.tidy(() => {
    const x = tf.randomNormal([64, 4], 0, 1, "float32", step);
    const y = x.matMul(trueWeights).add(0.3).add(tf.randomNormal([64, 1], 0, 0.05, "float32", step + 1e6));
    return { x, y };
  });
}

const model = tf.sequential({
  layers: [
    tf.layers.dense({ units: 16, inputShape: [4], activation: "relu", kernelInitializer: tf.initializers.glorotUniform({ seed: 7 }) }),
    tf.layers.dense({ units: 1, kernelInitializer: tf.initializers.glorotUniform({ seed: 8 }) }),
  ],
});
const optimizer = tf.train.adam(0.01);
const manager = new CheckpointManager(values.path!, interval, { maxToKeep: 3 });
manager.on("preemption", ({ reason }) => console.log(`preemption notice (${reason}): checkpointing at the next step`));

/** A fingerprint of the weights, printed when stopping and resuming so the two can be compared. */
async function weightsCrc(): Promise<string> {
  let crc = 0;
  for (const w of model.getWeights()) crc = crc32c(new Uint8Array((await w.data()).buffer), crc);
  return crc.toString(16).padStart(8, "0");
}

let start = 0;
const latest = await manager.latestStep();
if (latest !== undefined) {
  await primeOptimizer(optimizer, model); // optimizer state is created lazily: make it exist, then overwrite it
  const state = await getStateDict(model, optimizer);
  await manager.restore(latest, state);
  await setStateDict(model, optimizer, state);
  start = latest + 1;
  const { metrics } = await manager.metadata(latest);
  console.log(`resumed from step ${latest} in ${values.path} (loss then ${metrics.loss?.toFixed(5)}), weights crc ${await weightsCrc()}`);
} else {
  console.log(`no checkpoint in ${values.path}: training from scratch`);
}
if (start >= totalSteps) console.log(`already trained ${totalSteps} steps; pass --steps to train further`);

for (let step = start; step < totalSteps; step++) {
  const { x, y } = batch(step);
  const loss = optimizer.minimize(() => tf.losses.meanSquaredError(y, model.predict(x) as tf.Tensor) as tf.Scalar, true)!;
  const value = (await loss.data())[0]!;
  tf.dispose([x, y, loss]);
  const last = step === totalSteps - 1;
  if (manager.shouldSave(step) || last) {
    // Resolves once the state is staged; the upload goes on while training continues.
    await manager.saveAsync(step, await getStateDict(model, optimizer), { force: last, metrics: { loss: value } });
    console.log(`step ${step}: loss ${value.toFixed(5)}, checkpoint staged`);
  }
  if (manager.reachedPreemption(step)) {
    console.log(`preempted: checkpoint committed at step ${step}, weights crc ${await weightsCrc()}`);
    break;
  }
}
await manager.close(); // waits for background uploads
console.log(`checkpoints kept: ${(await new CheckpointManager(values.path!, interval, { readOnly: true }).allSteps()).join(", ")}`);
