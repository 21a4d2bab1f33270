// A tfjs training loop that checkpoints with Cairn and resumes where it stopped.
//   pnpm demo [--path <url or dir>] [--steps N] [--interval N] [--keep N]
// Defaults: ./checkpoints, 300 steps, a checkpoint every 50, the newest 3 kept. Everything random is
// seeded and the position in the data is part of each checkpoint, so a run stopped (Ctrl-C,
// SIGTERM) and run again ends with the same final weights as one uninterrupted run: compare the
// crc32c it prints last. (model.fit and fitDataset users: see fit.ts, which does all of this
// through cairnCheckpoint.)
// Any registered URL works as --path (memory://, file://, s3:// or gs:// with their package).
import { parseArgs } from "node:util";
import * as tf from "@tensorflow/tfjs";
import { crc32c } from "@cairn/core/format";
import { CheckpointManager } from "@cairn/manager";
import { DataCursor, getStateDict, primeOptimizer, setStateDict, tensorBatches } from "@cairn/tfjs";

const argv = process.argv.slice(2);
const { values } = parseArgs({
  // `pnpm demo -- --steps 10` passes the "--" through.
  args: argv[0] === "--" ? argv.slice(1) : argv,
  options: {
    path: { type: "string", default: "checkpoints" },
    steps: { type: "string", default: "300" },
    interval: { type: "string", default: "50" },
    keep: { type: "string", default: "3" },
  },
});
const path = values.path!;
const totalSteps = Number(values.steps);
const interval = Number(values.interval);
const keep = Number(values.keep);
if (![totalSteps, interval, keep].every((n) => Number.isSafeInteger(n) && n >= 1)) {
  console.error("--steps, --interval and --keep take positive integers");
  process.exit(2);
}

// Production mode only silences tfjs's warnings, among them the "install tfjs-node" banner.
tf.enableProdMode();
await tf.setBackend("cpu");

// Seeds must be non-zero: tfjs's randomNormal treats a seed of 0 as "use Math.random".
const SEED = { data: 1, noise: 2, hidden: 3, output: 4, shuffle: 1000 };
const SAMPLES = 1024;
const BATCH = 64;

// y = x · w + 0.3 with some noise: a fixed data set, small enough to train on in seconds.
const [xs, ys] = tf.tidy(() => {
  const x = tf.randomNormal([SAMPLES, 4], 0, 1, "float32", SEED.data);
  const y = x
    .matMul(tf.tensor2d([[1.5], [-2], [0.7], [3]]))
    .add(0.3)
    .add(tf.randomNormal([SAMPLES, 1], 0, 0.05, "float32", SEED.noise));
  return [x, y];
});

// Each epoch visits the samples in its own seeded order (tensorBatches), and the cursor over those
// batches is part of every checkpoint (a Stateful): a resumed run reads on from the next batch.
const data = new DataCursor(tensorBatches(xs, ys, { batchSize: BATCH, seed: SEED.shuffle }));

// Kernels get seeded initialisers; biases start at zero (the default), so nothing else is random.
const model = tf.sequential({
  layers: [
    tf.layers.dense({
      units: 16,
      inputShape: [4],
      activation: "relu",
      kernelInitializer: tf.initializers.glorotUniform({ seed: SEED.hidden }),
    }),
    tf.layers.dense({ units: 1, kernelInitializer: tf.initializers.glorotUniform({ seed: SEED.output }) }),
  ],
});
const optimizer = tf.train.adam(0.01);
// SIGINT (Ctrl-C) and SIGTERM (kill, a preemptible machine going away) checkpoint the next step and stop.
const manager = new CheckpointManager(path, interval, { maxToKeep: keep, preemptionSignals: ["SIGINT", "SIGTERM"] });
const losses = new Map<number, number>();
manager.on("committed", ({ step, seconds }) => {
  console.log(`committed step ${step}  loss ${losses.get(step)?.toPrecision(4)}  ${seconds.toFixed(2)} s`);
  losses.delete(step);
});
manager.on("preemption", ({ reason }) => console.log(`${reason}: checkpointing the next step, then stopping`));

/** A fingerprint of the weights: equal after an interrupted and an uninterrupted run of the same steps. */
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
  await manager.restore(latest, { ...state, data }); // the data cursor restores itself
  await setStateDict(model, optimizer, state);
  start = latest + 1;
  console.log(`resumed from step ${latest} in ${path}`);
}
if (start >= totalSteps) console.log(`already trained ${start} steps; pass a larger --steps to train further`);

let lastTrained = start - 1;
let stoppedAt: number | undefined;
for (let step = start; step < totalSteps; step++) {
  const { xs: x, ys: y } = (await data.next()).value as { xs: tf.Tensor; ys: tf.Tensor };
  const loss = optimizer.minimize(
    () => tf.losses.meanSquaredError(y, model.predict(x) as tf.Tensor) as tf.Scalar,
    true,
  )!;
  const value = (await loss.data())[0]!;
  tf.dispose([x, y, loss]);
  lastTrained = step;
  const last = step === totalSteps - 1;
  if (manager.shouldSave(step) || last) {
    losses.set(step, value);
    // Resolves once the state is staged; the upload goes on while training continues.
    await manager.saveAsync(
      step,
      { ...(await getStateDict(model, optimizer)), data },
      { force: last, metrics: { loss: value } },
    );
  }
  if (manager.reachedPreemption(step)) {
    stoppedAt = step;
    break;
  }
}
await manager.close(); // waits for background uploads
if (stoppedAt !== undefined) console.log(`stopped at step ${stoppedAt}; run again to resume`);
else console.log(`final weights crc32c ${await weightsCrc()} (steps 0–${lastTrained})`);
