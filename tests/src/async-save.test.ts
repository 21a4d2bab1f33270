import "@tensorflow/tfjs-backend-cpu";
import * as tf from "@tensorflow/tfjs-core";
import { type HostTensor, StagingPool, asyncSave, hostTensor, load, shardedTensor } from "@cairn/core";
import { beforeAll, describe, expect, it } from "vitest";
import { locations } from "./helpers.js";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

describe.each(["copy", "reference"] as const)("asyncSave with %s staging", (staging) => {
  it("saves the state as it was at the call, whatever training does once staged", async () => {
    const url = await locations.file();
    const v = tf.variable(tf.tensor1d([1, 2, 3]));
    const t = tf.tensor2d([
      [4, 5],
      [6, 7],
    ]);
    const host = hostTensor("float64", [3], Float64Array.of(8, 9, 10));
    const blob = Uint8Array.of(1, 1, 1);
    const { staged, done } = await asyncSave({ v, t, host, blob, step: 1 }, { checkpointId: url, staging });
    const info = await staged;
    // Everything changes or disappears as soon as staging is done.
    v.assign(tf.tensor1d([-1, -1, -1]));
    t.dispose();
    host.data.fill(-1);
    blob.fill(9);
    const result = await done;
    expect(result.entries).toBe(5);
    expect(info.bytes).toBe(staging === "copy" ? 12 + 16 + 24 + 3 : 24 + 3);
    const back = (await load(url)) as Record<string, HostTensor>;
    expect(back.v!.data).toEqual(Float32Array.of(1, 2, 3));
    expect(back.t!.data).toEqual(Float32Array.of(4, 5, 6, 7));
    expect(back.host!.data).toEqual(Float64Array.of(8, 9, 10));
    expect(back.blob).toEqual(Uint8Array.of(1, 1, 1));
    v.dispose();
  });

  it("saves the shapes as they were at the call, though training reshapes in place once staged", async () => {
    for (const where of ["file", "memory"] as const) {
      const url = await locations[where]();
      const host = hostTensor("float32", [2, 3], Float32Array.of(1, 2, 3, 4, 5, 6));
      const half = (row: number): HostTensor => hostTensor("int32", [1, 2], Int32Array.of(row, row));
      const sharded = shardedTensor(
        "int32",
        [2, 2],
        [
          { offsets: [0, 0], tensor: half(1) },
          { offsets: [1, 0], tensor: half(2) },
        ],
      );
      const { staged, done } = await asyncSave({ host, sharded }, { checkpointId: url, staging });
      await staged;
      // The same arrays, changed: a training loop that reuses its shape and offset arrays.
      (host.shape as number[]).splice(0, 2, 6);
      (sharded.shape as number[]).splice(0, 2, 4, 1);
      (sharded.shards[1]!.offsets as number[]).splice(0, 2, 0, 1);
      await done;
      const back = (await load(url)) as Record<string, HostTensor>;
      expect(back.host!.shape, where).toEqual([2, 3]);
      expect(back.sharded!.shape, where).toEqual([2, 2]);
      expect(back.sharded!.data, where).toEqual(Int32Array.of(1, 1, 2, 2));
    }
  });

  it("releases what it staged once done: buffers back to the pool, clones disposed", async () => {
    const pool = new StagingPool();
    const before = tf.memory().numTensors;
    const t = tf.ones([256]);
    for (let i = 0; i < 3; i++) {
      const { done } = await asyncSave(
        { t, h: hostTensor("int32", [64]) },
        { checkpointId: await locations.memory(), staging, pool },
      );
      await done;
      expect(pool.inUseBytes).toBe(0);
    }
    expect(pool.allocatedBytes).toBe(staging === "copy" ? 1024 + 256 : 256);
    t.dispose();
    expect(tf.memory().numTensors).toBe(before);
  });
});

describe("asyncSave failures", () => {
  it("rejects staged and done for bad input, writing nothing, without unhandled rejections", async () => {
    const url = await locations.memory();
    const { staged, done } = await asyncSave({ f: (() => 1) as never }, url);
    await expect(staged).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(done).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(load(url)).rejects.toMatchObject({ code: "not_found" });
  });

  it("refuses a state dict larger than the staging budget", async () => {
    const { staged } = await asyncSave(
      { t: hostTensor("float32", [1024]) },
      { checkpointId: await locations.memory(), pool: new StagingPool({ maxBytes: 1000 }) },
    );
    await expect(staged).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("staging budget"),
    });
  });
});

describe("StagingPool", () => {
  it("waits for buffers to come back when the budget is reached, and reuses them", async () => {
    const pool = new StagingPool({ maxBytes: 100 });
    const first = await pool.acquire([60]);
    let second: Uint8Array[] | undefined;
    const waiting = pool.acquire([60]).then((b) => (second = b));
    await new Promise((r) => setTimeout(r, 10));
    expect(second).toBeUndefined();
    pool.release(first);
    await waiting;
    expect(second![0]).toBe(first[0]);
    expect(pool.allocatedBytes).toBe(60);
    pool.release(second!);
    // A different size drops the unused buffer to stay within the budget.
    const third = await pool.acquire([80]);
    expect(pool.allocatedBytes).toBe(80);
    expect(third[0]!.buffer).toBeInstanceOf(SharedArrayBuffer);
  });
});

describe('asyncSave with freshPool: "save"', () => {
  it("writes the first save in place, resolving staged once committed, then prepares the pool", async () => {
    const url = await locations.file();
    const pool = new StagingPool();
    const host = hostTensor("float32", [1 << 18], new Float32Array(1 << 18).fill(4));
    const first = await asyncSave({ host }, { checkpointId: `${url}/0`, pool, freshPool: "save" });
    const info = await first.staged;
    expect(info.bytes).toBe(0);
    // The pool is readied after the call returns, not before: nothing allocated yet.
    expect(pool.fresh).toBe(false);
    expect(pool.allocatedBytes).toBe(0);
    // Staged means written: what the checkpoint holds is already fixed.
    host.data.fill(5);
    await first.done;
    await pool.prepared();
    expect(pool.fresh).toBe(false);
    const prepared = pool.allocatedBytes;
    expect(prepared).toBeGreaterThanOrEqual(1 << 20);
    const second = await asyncSave({ host }, { checkpointId: `${url}/1`, pool, freshPool: "save" });
    expect((await second.staged).bytes).toBe(1 << 20);
    host.data.fill(6);
    await second.done;
    expect(pool.allocatedBytes).toBe(prepared);
    const back0 = (await load(`${url}/0`)) as Record<string, HostTensor>;
    const back1 = (await load(`${url}/1`)) as Record<string, HostTensor>;
    expect([back0.host!.data[0], back1.host!.data[0]]).toEqual([4, 5]);
  });

  it('refuses a value other than "stage" or "save"', async () => {
    await expect(
      asyncSave({ a: 1 }, { checkpointId: await locations.memory(), freshPool: "later" as never }),
    ).rejects.toMatchObject({ code: "invalid_argument" });
  });
});
