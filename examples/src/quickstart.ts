// The README's complete example: train a small tfjs model, checkpoint it every 20 steps into
// ./quickstart-checkpoints, and resume from the latest checkpoint when run again.
import * as tf from "@tensorflow/tfjs";
import { CheckpointManager } from "@cairn/manager";
import { getStateDict, primeOptimizer, setStateDict } from "@cairn/tfjs";

const root = process.argv[2] ?? "quickstart-checkpoints"; // a directory, or any URL: memory://, s3://, gs://
const steps = 100;
tf.enableProdMode(); // silences tfjs's warnings, among them its "install tfjs-node" banner

const model = tf.sequential({
  layers: [tf.layers.dense({ units: 1, inputShape: [2], kernelInitializer: tf.initializers.zeros() })],
});
const optimizer = tf.train.adam(0.05);
const x = tf.tensor2d([
  [0, 1],
  [1, 0],
  [1, 1],
  [2, 1],
]);
const y = tf.tensor2d([[1], [2], [3], [5]]); // y = 2·x₀ + x₁

const manager = new CheckpointManager(root, 20, { maxToKeep: 2 });
let start = 0;
const latest = await manager.latestStep();
if (latest !== undefined) {
  await primeOptimizer(optimizer, model); // tfjs creates optimizer state lazily: make it exist first
  const state = await getStateDict(model, optimizer);
  await manager.restore(latest, state); // filled in place, every block checked
  await setStateDict(model, optimizer, state);
  start = latest + 1;
  console.log(`resumed from step ${latest}`);
}

for (let step = start; step < steps; step++) {
  const loss = optimizer.minimize(() => tf.losses.meanSquaredError(y, model.predict(x) as tf.Tensor), true)!;
  if (manager.shouldSave(step)) {
    const saved = await manager.save(step, await getStateDict(model, optimizer), {
      metrics: { loss: (await loss.data())[0]! },
    });
    if (saved) console.log(`step ${step}: loss ${(await loss.data())[0]!.toFixed(4)}, checkpoint committed`);
  }
  loss.dispose();
}
console.log(`checkpoints: ${(await manager.allSteps()).join(", ")}`);
await manager.close();
