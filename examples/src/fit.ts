// model.fitDataset checkpointed with Cairn: stop it, run it again, and it goes on from the next batch.
//   pnpm demo:fit [--path <url or dir>] [--epochs N] [--every N | epoch]
// Defaults: ./fit-checkpoints, 5 epochs of 32 batches, a checkpoint every 50 batches (and at the
// end). The data's shuffle, the initial weights and the dropout masks are seeded, so a run stopped
// (Ctrl-C, SIGTERM) and run again ends with the same weights as one uninterrupted run: compare the
// crc32c it prints last. Run it again when it is done: it trains nothing and says so.
import { parseArgs } from "node:util";
import * as tf from "@tensorflow/tfjs";
import { crc32c } from "@cairn/core/format";
import { cairnCheckpoint } from "@cairn/tfjs";

const argv = process.argv.slice(2);
const { values } = parseArgs({
  // `pnpm demo:fit -- --epochs 2` passes the "--" through.
  args: argv[0] === "--" ? argv.slice(1) : argv,
  options: {
    path: { type: "string", default: "fit-checkpoints" },
    epochs: { type: "string", default: "5" },
    every: { type: "string", default: "50" },
  },
});
const epochs = Number(values.epochs);
const every = values.every === "epoch" ? "epoch" : Number(values.every);
if (!Number.isSafeInteger(epochs) || epochs < 1 || (every !== "epoch" && !(Number.isSafeInteger(every) && every > 0))) {
  console.error("--epochs takes a positive integer, --every a positive integer or epoch");
  process.exit(2);
}

// Production mode only silences tfjs's warnings, among them the "install tfjs-node" banner.
tf.enableProdMode();
await tf.setBackend("cpu");

// 1,000 samples of y = x · w + 0.3 + noise, 20 % held out for validation, in a seeded order each epoch.
const SAMPLES = 1000;
const [xs, ys] = tf.tidy(() => {
  const x = tf.randomNormal([SAMPLES, 4], 0, 1, "float32", 1);
  const y = x
    .matMul(tf.tensor2d([[1.5], [-2], [0.7], [3]]))
    .add(0.3)
    .add(tf.randomNormal([SAMPLES, 1], 0, 0.05, "float32", 2));
  return [x, y];
});
const TRAIN = 800;
const [x, y] = (await Promise.all([xs.slice(0, TRAIN).array(), ys.slice(0, TRAIN).array()])) as [
  number[][],
  number[][],
];
const data = tf.data
  .array(x.map((row, i) => ({ xs: row, ys: y[i]! })))
  .shuffle(TRAIN, "demo")
  .batch(25);
const validation: [tf.Tensor, tf.Tensor] = [xs.slice(TRAIN), ys.slice(TRAIN)];

const model = tf.sequential({
  layers: [
    tf.layers.dense({
      units: 32,
      inputShape: [4],
      activation: "relu",
      kernelInitializer: tf.initializers.glorotUniform({ seed: 3 }),
    }),
    tf.layers.dropout({ rate: 0.1 }),
    tf.layers.dense({ units: 1, kernelInitializer: tf.initializers.glorotUniform({ seed: 4 }) }),
  ],
});
model.compile({ optimizer: tf.train.adam(0.01), loss: "meanSquaredError" });

// SIGINT (Ctrl-C) and SIGTERM checkpoint after the batch in progress and stop training.
const ckpt = await cairnCheckpoint(model, values.path!, { every, maxToKeep: 3, seed: 5, log: (l) => console.log(l) });

// The loss of each step, to print with its commit: per batch, and the epoch's (with val_loss) at an epoch's end.
const metrics = new Map<number, string>();
const show = (logs: tf.Logs | undefined): string =>
  Object.entries(logs ?? {})
    .filter(([k]) => k.includes("loss"))
    .map(([k, v]) => `${k} ${v.toPrecision(4)}`)
    .join("  ");
ckpt.manager.on("committed", ({ step, seconds }) => {
  console.log(`committed step ${step}  ${metrics.get(step) ?? ""}  ${seconds.toFixed(2)} s`);
  metrics.delete(step);
});
const history = await ckpt.fitDataset(data, {
  epochs,
  validationData: validation,
  verbose: 0,
  callbacks: {
    // The checkpoint's own callback runs after these, so the batch being finished is step + 1.
    onBatchEnd: async (_, logs) => void metrics.set(ckpt.step! + 1, show(logs)),
    onEpochEnd: async (_, logs) => void metrics.set(ckpt.step!, show(logs)),
  },
});
await ckpt.close(); // waits for the uploads in flight
tf.dispose([xs, ys, ...validation]);

if (!ckpt.preempted) {
  let crc = 0;
  for (const w of model.getWeights()) crc = crc32c(new Uint8Array((await w.data()).buffer), crc);
  const trained = history.epoch.length > 0 ? ` (epochs ${history.epoch[0]! + 1}–${history.epoch.at(-1)! + 1})` : "";
  console.log(`final weights crc32c ${crc.toString(16).padStart(8, "0")} after step ${ckpt.step}${trained}`);
}
