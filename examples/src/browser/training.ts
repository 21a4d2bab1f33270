// A small tfjs model trained in a page (or in Node), the same way on every backend: seeded data,
// initialisers and batch order, the data position part of the state, so a run resumed from a
// checkpoint ends with the same weights as one that never stopped. Shared by the browser demo,
// the webgl device tests and the webgl benchmark.
import * as tf from "@tensorflow/tfjs";
import { type StateDict, type TfjsModule, registerTfjs } from "@cairn/core";
import { crc32c } from "@cairn/core/format";
import type { CheckpointManager } from "@cairn/manager";
import { DataCursor, type TensorBatch, getStateDict, primeOptimizer, setStateDict, tensorBatches } from "@cairn/tfjs";

// A bundled page cannot import tfjs by name: Cairn (and @cairn/tfjs) use this one.
registerTfjs(tf as unknown as TfjsModule);

export interface TrainingShape {
  /** Features per sample (default 8). */
  readonly inputs?: number;
  /** Widths of the hidden dense layers (default [32]). */
  readonly hidden?: readonly number[];
  /** Samples in the data set (default 512) and per batch (default 64). */
  readonly samples?: number;
  readonly batch?: number;
}

// Seeds must be non-zero: tfjs's random ops treat 0 as "use Math.random".
const SEED = { data: 1, noise: 2, target: 3, layers: 10, shuffle: 1000 };

/** The backend asked for, made current; resolves the one in use (tfjs may refuse it: the caller checks). */
export async function useBackend(name: string): Promise<string> {
  await tf.setBackend(name).catch(() => false);
  await tf.ready();
  return tf.getBackend();
}

/** One model, its Adam optimizer and the cursor over its seeded batches. */
export class Training {
  readonly model: tf.Sequential;
  readonly optimizer: tf.AdamOptimizer;
  readonly data: DataCursor<TensorBatch>;
  readonly #tensors: tf.Tensor[];

  constructor(shape: TrainingShape = {}) {
    const inputs = shape.inputs ?? 8;
    const samples = shape.samples ?? 512;
    const [xs, ys] = tf.tidy(() => {
      const x = tf.randomNormal([samples, inputs], 0, 1, "float32", SEED.data);
      const w = tf.randomNormal([inputs, 1], 0, 1, "float32", SEED.target);
      const y = x
        .matMul(w)
        .add(0.3)
        .add(tf.randomNormal([samples, 1], 0, 0.05, "float32", SEED.noise));
      return [x, y];
    });
    this.#tensors = [xs, ys];
    this.data = new DataCursor(tensorBatches(xs, ys, { batchSize: shape.batch ?? 64, seed: SEED.shuffle }));
    const widths = shape.hidden ?? [32];
    this.model = tf.sequential({
      layers: [
        ...widths.map((units, i) =>
          tf.layers.dense({
            units,
            activation: "relu",
            ...(i === 0 ? { inputShape: [inputs] } : {}),
            kernelInitializer: tf.initializers.glorotUniform({ seed: SEED.layers + i }),
          }),
        ),
        tf.layers.dense({
          units: 1,
          kernelInitializer: tf.initializers.glorotUniform({ seed: SEED.layers + widths.length }),
        }),
      ],
    });
    this.optimizer = tf.train.adam(0.01);
  }

  /** One optimizer step on the next batch; resolves its loss (reading it waits for the device). */
  async step(): Promise<number> {
    const { xs, ys } = (await this.data.next()).value as { xs: tf.Tensor; ys: tf.Tensor };
    const loss = this.optimizer.minimize(
      () => tf.losses.meanSquaredError(ys, this.model.predict(xs) as tf.Tensor) as tf.Scalar,
      true,
    )!;
    const value = (await loss.data())[0]!;
    tf.dispose([xs, ys, loss]);
    return value;
  }

  /** What a checkpoint holds: model, optimizer (its live variables) and data position. */
  async stateDict(): Promise<StateDict> {
    return { ...(await getStateDict(this.model, this.optimizer)), data: this.data };
  }

  /**
   * Restores `step` into this run: the optimizer's lazily made slots made first (so they exist to
   * be filled), then the weights, slots and data position loaded in place, and the optimizer's
   * iteration count and beta powers set from what was loaded.
   */
  async restore(manager: CheckpointManager, step: number): Promise<void> {
    await primeOptimizer(this.optimizer, this.model);
    const state = await this.stateDict();
    await manager.restore(step, state);
    await setStateDict(this.model, this.optimizer, state);
  }

  /** CRC32C of the model's weights, in layer order (what the demo prints last). */
  async weightsChecksum(): Promise<string> {
    return checksumOf(this.model.getWeights());
  }

  /** CRC32C of every tensor of the state (weights, the optimizer's slots and beta powers) and its iteration count. */
  async stateChecksum(): Promise<string> {
    const state = await getStateDict(this.model, this.optimizer);
    return `${await checksumOf(tensorsIn(state))}:${this.optimizer.iterations}`;
  }

  dispose(): void {
    this.model.dispose();
    this.optimizer.dispose();
    tf.dispose(this.#tensors);
  }
}

/** The tensors of a state dict, depth first in key order. */
function tensorsIn(value: unknown): tf.Tensor[] {
  if (value instanceof tf.Tensor) return [value];
  if (typeof value !== "object" || value === null) return [];
  return Object.keys(value)
    .sort()
    .flatMap((key) => tensorsIn((value as Record<string, unknown>)[key]));
}

async function checksumOf(tensors: readonly tf.Tensor[]): Promise<string> {
  let crc = 0;
  for (const t of tensors) {
    const data = await t.data();
    crc = crc32c(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), crc);
  }
  return crc.toString(16).padStart(8, "0");
}
