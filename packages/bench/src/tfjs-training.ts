// The tfjs training state and loop the async-training and copy-staging suites save from: a
// state dict of three tensors of a quarter each and 2,000 small ones, and a small dense model
// trained with Adam on the cpu backend.
import * as tf from "@tensorflow/tfjs";

const MiB = 1 << 20;

/** A quarter of the state: 256 MiB, or 4 MiB in a quick run. */
export const QUARTER = process.env.CAIRN_BENCH_QUICK === "1" ? 4 * MiB : 256 * MiB;

/** Three variables of `quarter` bytes and 2,000 sharing another quarter, on the cpu backend. */
export async function trainingState(quarter = QUARTER): Promise<{ state: Record<string, tf.Tensor>; bytes: number }> {
  await tf.setBackend("cpu");
  const state: Record<string, tf.Tensor> = {};
  for (let i = 0; i < 3; i++) state[`large${i}`] = tf.variable(tf.fill([quarter / 4], i + 0.5));
  for (let i = 0; i < 2000; i++) state[`small${i}`] = tf.variable(tf.fill([Math.floor(quarter / 2000 / 4)], i));
  return { state, bytes: Object.values(state).reduce((n, t) => n + t.size * 4, 0) };
}

/** One step of a small training loop (256 → 256 → 1 dense layers, Adam, a 256-row batch). */
export function trainer(): () => void {
  const model = tf.sequential({
    layers: [tf.layers.dense({ units: 256, inputShape: [256], activation: "relu" }), tf.layers.dense({ units: 1 })],
  });
  const optimizer = tf.train.adam(0.001);
  const x = tf.randomNormal([256, 256]);
  const y = tf.randomNormal([256, 1]);
  return () => {
    const loss = optimizer.minimize(
      () => tf.losses.meanSquaredError(y, model.predict(x) as tf.Tensor) as tf.Scalar,
      true,
    );
    if (loss) loss.dispose();
  };
}
