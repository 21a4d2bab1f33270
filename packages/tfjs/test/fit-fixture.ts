// The small training run the fit tests checkpoint, interrupt and resume, in this process and in
// children (fixtures/fit-run.ts): a seeded model with dropout and Adam, 160 samples in batches of
// 8 (20 batches per epoch), as a tf.data dataset with a seeded shuffle or as tensors for fit.
import * as tf from "@tensorflow/tfjs";
import { crc32c } from "@cairn/core/format";

export const SAMPLES = 160;
export const BATCH = 8;
export const BATCHES_PER_EPOCH = SAMPLES / BATCH;

/** Dense → Dropout → Dense with seeded initialisers and Adam: every random draw is seeded. */
export function fitModel(options: { hidden?: number; optimizer?: tf.Optimizer } = {}): tf.LayersModel {
  const model = tf.sequential({
    layers: [
      tf.layers.dense({
        units: options.hidden ?? 12,
        inputShape: [4],
        activation: "relu",
        kernelInitializer: tf.initializers.glorotUniform({ seed: 11 }),
      }),
      tf.layers.dropout({ rate: 0.25 }),
      tf.layers.dense({ units: 1, kernelInitializer: tf.initializers.glorotUniform({ seed: 12 }) }),
    ],
  });
  model.compile({ optimizer: options.optimizer ?? tf.train.adam(0.02), loss: "meanSquaredError" });
  return model;
}

/** y = x · w + noise, the same numbers in every process. */
export function fitTensors(): { xs: tf.Tensor2D; ys: tf.Tensor2D } {
  return tf.tidy(() => {
    const xs = tf.randomNormal([SAMPLES, 4], 0, 1, "float32", 21) as tf.Tensor2D;
    const ys = xs
      .matMul(tf.tensor2d([[1.5], [-2], [0.7], [3]]))
      .add(tf.randomNormal([SAMPLES, 1], 0, 0.1, "float32", 22)) as tf.Tensor2D;
    return { xs, ys };
  });
}

/** The samples as a tf.data dataset shuffled with a seed, in batches: a new dataset per call, as a new process builds. */
export async function fitDataset(): Promise<tf.data.Dataset<tf.TensorContainer>> {
  const { xs, ys } = fitTensors();
  const [x, y] = await Promise.all([xs.array(), ys.array()]);
  tf.dispose([xs, ys]);
  const rows = x.map((row, i) => ({ xs: row, ys: y[i]! }));
  return tf.data.array(rows).shuffle(SAMPLES, "fit-fixture").batch(BATCH) as tf.data.Dataset<tf.TensorContainer>;
}

/** The CRC32C of every weight, in the model's order, as hex. */
export async function weightCrcs(model: tf.LayersModel): Promise<string[]> {
  return Promise.all(
    model.getWeights().map(async (w) => {
      const data = await w.data();
      return crc32c(new Uint8Array(data.buffer, data.byteOffset, data.byteLength))
        .toString(16)
        .padStart(8, "0");
    }),
  );
}
