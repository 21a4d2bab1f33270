import * as tf from "@tensorflow/tfjs";
import { CheckpointError } from "@cairn/core";
import { beforeAll, describe, expect, it } from "vitest";
import { DataCursor, type DatasetLike } from "./data-cursor.js";
import { type TensorBatch, tensorBatches } from "./tensor-batches.js";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

/** Numbers 0–9 shuffled with a seed, in batches of 3: tf.data's own shuffle, which reseeds per pass. */
function numbers(): tf.data.Dataset<number[]> {
  return tf.data
    .array(Array.from({ length: 10 }, (_, i) => i))
    .shuffle(10, "cursor")
    .batch(3)
    .map((t) => (t as tf.Tensor).arraySync() as number[]) as tf.data.Dataset<number[]>;
}

async function take<T>(cursor: DataCursor<T>, n: number): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < n; i++) out.push((await cursor.next()).value);
  return out;
}

describe("DataCursor over a tf.data dataset", () => {
  it("continues, after a restore into a new cursor and dataset, with the elements an uninterrupted one reads", async () => {
    const all = await take(new DataCursor(numbers()), 14);
    // Passes of 4 batches, each in its own order.
    expect(all.slice(0, 4)).not.toEqual(all.slice(4, 8));
    for (const stop of [1, 4, 5, 9, 13]) {
      const first = new DataCursor(numbers());
      expect(await take(first, stop)).toEqual(all.slice(0, stop));
      const saved = structuredClone(first.stateDict());
      const second = new DataCursor(numbers());
      second.loadStateDict(saved);
      expect(await take(second, 14 - stop), `stopped after ${stop}`).toEqual(all.slice(stop));
    }
  });

  it("tells where each element sits, and where it stands", async () => {
    const cursor = new DataCursor(numbers());
    const seen = [];
    for (let i = 0; i < 6; i++) {
      const { iteration, index } = await cursor.next();
      seen.push([iteration, index]);
    }
    expect(seen).toEqual([
      [0, 0],
      [0, 1],
      [0, 2],
      [0, 3],
      [1, 0],
      [1, 1],
    ]);
    expect(cursor.position).toEqual({ iterations: 2, taken: 2, open: true });
  });

  it("as fitDataset's dataset: an unread iterator costs nothing, the next takes up the open pass", async () => {
    const all = await take(new DataCursor(numbers()), 8);
    const cursor = new DataCursor(numbers());
    cursor.loadStateDict({ iterations: 1, taken: 2, open: true });
    const dataset = cursor.dataset();
    expect(dataset.size).toBe(4);
    await dataset.iterator(); // fitDataset's first, never read
    const pass = await dataset.iterator();
    const rest: number[][] = [];
    for (let r = await pass.next(); !r.done; r = await pass.next()) rest.push(r.value);
    expect(rest).toEqual(all.slice(2, 4));
    expect(cursor.position).toEqual({ iterations: 1, taken: 4, open: false });
    const next = await (await dataset.iterator()).next();
    expect(next.value).toEqual(all[4]);
  });

  it("refuses to go back to a pass a dataset already began, and data that ends before the position", async () => {
    const dataset = numbers();
    const cursor = new DataCursor(dataset);
    await take(cursor, 6);
    cursor.loadStateDict({ iterations: 1, taken: 1, open: true });
    await expect(cursor.next()).rejects.toThrow("build the dataset again to resume there");
    const short = new DataCursor(numbers());
    short.loadStateDict({ iterations: 2, taken: 7, open: true });
    const error = await short.next().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CheckpointError);
    expect((error as CheckpointError).code).toBe("mismatch");
    expect((error as CheckpointError).message).toBe(
      "pass 2 over the dataset ended after 4 elements, but the saved position is 7 elements into it: this is not the data the run was checkpointed with, or its shuffle is not seeded",
    );
  });

  it.each([
    { iterations: -1, taken: 0, open: false },
    { iterations: 0, taken: 1, open: false },
    { iterations: 0, taken: 0, open: true },
    { iterations: 1.5, taken: 0, open: true },
    { iterations: 1, taken: 0, open: "yes" },
    {},
  ])("refuses the position %j as mismatch", (position) => {
    expect(() => new DataCursor(numbers()).loadStateDict(position as never)).toThrow(/is not a data position/);
  });

  it("refuses a dataset that is not one, and one that is empty", async () => {
    expect(() => new DataCursor({} as DatasetLike<number>)).toThrow(
      "DataCursor's dataset must be a tf.data.Dataset or an object with iterator(), got an object",
    );
    const empty = new DataCursor(tf.data.array<number>([]));
    await expect(empty.next()).rejects.toThrow("yielded no elements in a whole pass");
  });
});

describe("DataCursor over tensorBatches", () => {
  it("reaches a position without reading what comes before, and reads what an uninterrupted cursor reads", async () => {
    const xs = tf.range(0, 10).reshape([10, 1]);
    const ys = tf.range(100, 110).reshape([10, 1]);
    const batches = tensorBatches(xs, ys, { batchSize: 4, seed: 3 });
    expect(batches).toMatchObject({ size: 3, samples: 10, batchSize: 4, shuffle: true });
    const rows = async (cursor: DataCursor<{ xs: unknown; ys: unknown }>, n: number): Promise<number[][]> => {
      const out: number[][] = [];
      for (let i = 0; i < n; i++) {
        const { value } = await cursor.next();
        out.push(Array.from(await (value.xs as tf.Tensor).data()));
        expect(Array.from(await (value.ys as tf.Tensor).data())).toEqual(out.at(-1)!.map((x) => x + 100));
        tf.dispose(value as never);
      }
      return out;
    };
    const all = await rows(new DataCursor(batches), 7);
    expect(
      all
        .slice(0, 3)
        .flat()
        .sort((a, b) => a - b),
    ).toEqual(Array.from({ length: 10 }, (_, i) => i));
    expect(all[0]).not.toEqual(all[3]);
    const reads: [number, number][] = [];
    const seekable = {
      ...batches,
      iterator: () => Promise.reject(new Error("a seekable dataset is never replayed")),
      iteratorAt: (index: number, skip: number) => {
        reads.push([index, skip]);
        return batches.iteratorAt(index, skip);
      },
    };
    const seeking = new DataCursor<TensorBatch>(seekable);
    seeking.loadStateDict({ iterations: 2, taken: 1, open: true });
    expect(await rows(seeking, 3)).toEqual(all.slice(4, 7));
    expect(reads).toEqual([
      [1, 1],
      [2, 0],
    ]);
    tf.dispose([xs, ys]);
  });

  it("in order without shuffle; refuses tensors of unequal samples and a shuffle without a seed", () => {
    const xs = tf.zeros([6, 2]);
    expect(() => tensorBatches(xs, tf.zeros([5, 1]), { shuffle: false })).toThrow(
      "tensorBatches' tensors must all hold 6 samples (their first dimension); one has shape [5,1]",
    );
    expect(() => tensorBatches(xs, tf.zeros([6, 1]))).toThrow(
      "tensorBatches' seed must be a safe integer (shuffle: true needs one)",
    );
    expect(() => tensorBatches(xs, tf.zeros([6, 1]), { batchSize: 0, seed: 1 })).toThrow(
      "tensorBatches' batchSize must be an integer ≥ 1",
    );
    tf.dispose(xs);
  });
});
