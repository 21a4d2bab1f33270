// One run of the fit suite, in its own process:  fit-child.ts <plain | cairn> <root>
// A 64 MiB model (a 2048 → 8192 dense layer; 4 MiB in a quick run) trained with Adam by
// model.fitDataset for 3 epochs of 50 batches (2 of 10 in a quick run) on tfjs's wasm backend,
// after a warm-up epoch of 3 batches: `plain` alone, `cairn` through cairnCheckpoint saving every
// 50 batches (every 5 quick) to file://. Sends the training call's wall time and its main
// thread's CPU time, and for cairn the time close() then waited for the last upload.
// The wasm backend, because tfjs's cpu backend allocates a fresh array for every op's result: on
// this VM each 64 MiB of fresh memory costs about 0.3 s of page faults, 5 s per training step.
import * as tf from "@tensorflow/tfjs";
import "@tensorflow/tfjs-backend-wasm";
import { cairnCheckpoint } from "@cairn/tfjs";
import { measured } from "./process-stats.js";
import { quick, sendResult } from "./support.js";

const [mode, root] = process.argv.slice(2) as ["plain" | "cairn", string];
tf.enableProdMode();
await tf.setBackend("wasm");

const INPUTS = 2048;
const UNITS = quick ? 512 : 8192;
const BATCHES = quick ? 10 : 50;
const EPOCHS = quick ? 2 : 3;
const EVERY = quick ? 5 : 50;
const model = tf.sequential({
  layers: [tf.layers.dense({ units: UNITS, inputShape: [INPUTS], activation: "relu" }), tf.layers.dense({ units: 1 })],
});
model.compile({ optimizer: tf.train.adam(1e-4), loss: "meanSquaredError" });
const weightBytes = model.getWeights().reduce((n, w) => n + w.size * 4, 0);

const xs = tf.randomNormal([8, INPUTS], 0, 1, "float32", 1);
const ys = tf.randomNormal([8, 1], 0, 1, "float32", 2);
/** `batches` batches per pass, each a clone of the same tensors (fitDataset disposes what it trains on). */
const data = (batches: number): tf.data.Dataset<tf.TensorContainer> =>
  ({
    size: batches,
    iterator: async () => {
      let left = batches;
      return {
        next: async () =>
          left-- > 0 ? { done: false, value: { xs: xs.clone(), ys: ys.clone() } } : { done: true, value: undefined },
      };
    },
  }) as unknown as tf.data.Dataset<tf.TensorContainer>;

// Warm-up: kernels compiled, the wasm heap grown, the optimizer's slots created.
await model.fitDataset(data(3), { epochs: 1, verbose: 0 });

let closeSeconds = 0;
let saves = 0;
let spent;
if (mode === "plain") {
  spent = await measured(() => model.fitDataset(data(BATCHES), { epochs: EPOCHS, verbose: 0 }));
} else {
  const ckpt = await cairnCheckpoint(model, root, { every: EVERY, maxToKeep: 2, seed: 1, log: false });
  ckpt.manager.on("committed", () => saves++);
  spent = await measured(() => ckpt.fitDataset(data(BATCHES), { epochs: EPOCHS, verbose: 0 }));
  const closing = performance.now();
  await ckpt.close();
  closeSeconds = (performance.now() - closing) / 1000;
}
sendResult({
  seconds: spent.seconds,
  mainCpuSeconds: spent.mainOnCpuSeconds,
  mainWaitSeconds: spent.mainWaitSeconds,
  steps: EPOCHS * BATCHES,
  every: EVERY,
  weightBytes,
  closeSeconds,
  saves,
});
