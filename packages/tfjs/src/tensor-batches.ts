import type * as tf from "@tensorflow/tfjs";
import { CheckpointError, tfjsModule } from "@cairn/core";
import type { DataIterator, SeekableDataset } from "./data-cursor.js";
import { invalid } from "./invalid-argument.js";
import { SeededRandom, derivedSeed } from "./seeded-random.js";

/** Inputs or targets as `model.fit` takes them: one tensor, one per input, or by input name. */
export type TensorsLike = tf.Tensor | readonly tf.Tensor[] | { readonly [name: string]: tf.Tensor };

export interface TensorBatchesOptions {
  /** Samples per batch (default 32, as `model.fit`); the last batch of a pass may be smaller. */
  readonly batchSize?: number;
  /** Visit the samples in a new seeded order every pass (default true), or in their order. */
  readonly shuffle?: boolean;
  /** The seed of the orders: pass n's order depends only on it and n. Required when shuffling. */
  readonly seed?: number;
}

/** The batches of one pass over tensors: what `model.fitDataset` takes. */
export type TensorBatch = { xs: TensorsLike; ys: TensorsLike };

export interface TensorBatches extends SeekableDataset<TensorBatch> {
  /** Batches per pass. */
  readonly size: number;
  /** Samples per pass: the first dimension of every tensor. */
  readonly samples: number;
  readonly batchSize: number;
  readonly shuffle: boolean;
}

function tensorsOf(value: TensorsLike): tf.Tensor[] {
  if (Array.isArray(value)) return value as tf.Tensor[];
  const single = value as Partial<tf.Tensor>;
  if (Array.isArray(single.shape)) return [value as tf.Tensor];
  return Object.values(value as Record<string, tf.Tensor>);
}

/** The same structure as `value`, each tensor replaced by `f` of it. */
export function mapTensors(value: TensorsLike, f: (t: tf.Tensor) => tf.Tensor): TensorsLike {
  if (Array.isArray(value)) return (value as tf.Tensor[]).map(f);
  if (Array.isArray((value as Partial<tf.Tensor>).shape)) return f(value as tf.Tensor);
  return Object.fromEntries(Object.entries(value as Record<string, tf.Tensor>).map(([k, t]) => [k, f(t)]));
}

/**
 * Batches of tensors held in memory (`model.fit`'s `x` and `y`), as a dataset that can open any
 * pass at any batch: pass n visits the samples in the order a SeededRandom seeded from
 * (seed, n) gives, so a resumed run reads exactly the batches an uninterrupted one would, without
 * reading the ones before. `tf.util.shuffle`, which `model.fit` uses, draws from `Math.random`
 * and cannot be seeded. Each batch is a new tensor (a gather of the rows), which the reader
 * disposes (fitDataset does); `xs` and `ys` stay the caller's.
 */
export function tensorBatches(xs: TensorsLike, ys: TensorsLike, options: TensorBatchesOptions = {}): TensorBatches {
  const all = [...tensorsOf(xs), ...tensorsOf(ys)];
  if (all.length === 0 || !all.every((t) => Array.isArray(t?.shape) && t.shape.length > 0))
    throw invalid("tensorBatches' xs and ys", "tensors (or arrays or maps of them) of rank ≥ 1", "something else");
  const samples = all[0]!.shape[0]!;
  const other = all.find((t) => t.shape[0] !== samples);
  if (other)
    throw new CheckpointError(
      "invalid_argument",
      `tensorBatches' tensors must all hold ${samples} samples (their first dimension); one has shape ${JSON.stringify(other.shape)}`,
    );
  const { batchSize = 32, shuffle = true, seed } = options;
  if (!Number.isSafeInteger(batchSize) || batchSize < 1)
    throw invalid("tensorBatches' batchSize", "an integer ≥ 1", batchSize);
  if (typeof shuffle !== "boolean") throw invalid("tensorBatches' shuffle", "true or false", shuffle);
  if (shuffle && (typeof seed !== "number" || !Number.isSafeInteger(seed)))
    throw invalid("tensorBatches' seed", "a safe integer (shuffle: true needs one)", seed);
  const size = Math.ceil(samples / batchSize);
  let calls = 0;

  const iteratorAt = async (index: number, skip: number): Promise<DataIterator<TensorBatch>> => {
    if (!Number.isSafeInteger(index) || index < 0 || !Number.isSafeInteger(skip) || skip < 0)
      throw invalid("tensorBatches' iteratorAt", "a pass and a batch index ≥ 0", { index, skip });
    const tfjs = (await tfjsModule()) as unknown as typeof tf;
    const order = shuffle ? new SeededRandom(derivedSeed(seed!, index)).permutation(samples) : undefined;
    let batch = skip;
    return {
      next: async () => {
        if (batch >= size) return { done: true, value: undefined };
        const start = batch * batchSize;
        const count = Math.min(batchSize, samples - start);
        batch++;
        if (!order)
          return {
            done: false,
            value: {
              xs: mapTensors(xs, (t) => t.slice(start, count)),
              ys: mapTensors(ys, (t) => t.slice(start, count)),
            },
          };
        const rows = tfjs.tensor1d(order.subarray(start, start + count), "int32");
        try {
          return {
            done: false,
            value: { xs: mapTensors(xs, (t) => tfjs.gather(t, rows)), ys: mapTensors(ys, (t) => tfjs.gather(t, rows)) },
          };
        } finally {
          rows.dispose();
        }
      },
    };
  };
  return { size, samples, batchSize, shuffle, iteratorAt, iterator: () => iteratorAt(calls++, 0) };
}
