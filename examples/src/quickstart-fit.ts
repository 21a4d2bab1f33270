// The README's model.fit example, run by quickstart-fit.test.ts; the README shows it from the third line.
// Run it twice: the second run trains nothing and says so; stop the first (Ctrl-C) and it resumes.
import * as tf from "@tensorflow/tfjs";
import { cairnCheckpoint } from "@cairn/tfjs";
tf.enableProdMode(); // silences tfjs's warnings, among them its "install tfjs-node" banner

const model = tf.sequential({ layers: [tf.layers.dense({ units: 1, inputShape: [2] })] });
model.compile({ optimizer: tf.train.adam(0.05), loss: "meanSquaredError" });
const xs = tf.randomNormal([512, 2], 0, 1, "float32", 1);
const ys = xs.matMul(tf.tensor2d([[2], [1]])); // y = 2·x₀ + x₁

// Restores the root's newest step (weights, optimizer, data position) and trains on from the next batch.
const ckpt = await cairnCheckpoint(model, "fit-checkpoints", { every: "epoch", maxToKeep: 3, seed: 42 });
const history = await ckpt.fit(xs, ys, { epochs: 20, batchSize: 32, validationSplit: 0.1 });
console.log(`trained epochs ${history.epoch.join(", ") || "none"}; newest step ${ckpt.step}`);
await ckpt.close(); // SIGTERM or Ctrl-C: checkpointed after the batch in progress, then here
