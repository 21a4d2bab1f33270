import "@tensorflow/tfjs-backend-cpu";
import * as tf from "@tensorflow/tfjs-core";
import { existsSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { BroadcastChannel } from "node:worker_threads";
import { type HostTensor, StagingPool, asyncSave, load } from "@cairn/core";
import { beforeAll, describe, expect, it } from "vitest";
import { STARTED_WRITES, openRecording } from "./fixtures/recording-file-storage.js";
import { tempDir } from "./helpers.js";
import { dataFileWrites, writesSoFar } from "./recorded-writes.js";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

/**
 * A tfjs-like float32 tensor of 1 Mi `values`, as reference staging holds it (by `clone()`):
 * `read` runs as its data is read (and may throw), `disposed` as a clone is disposed.
 */
function heldTensor(values: Float32Array, hooks: { read?: () => void; disposed?: () => void } = {}): unknown {
  const tensor = {
    shape: [1 << 20],
    dtype: "float32",
    data: async () => {
      hooks.read?.();
      return values;
    },
    clone: () => ({ ...tensor, dispose: () => hooks.disposed?.() }),
  };
  return tensor;
}

/** Four 4 MiB variables and a small one, each with its own values. */
function variables(): Record<string, tf.Variable> {
  return tf.tidy(() => {
    const out: Record<string, tf.Variable> = { small: tf.variable(tf.tensor1d([1, 2, 3])) };
    for (let i = 0; i < 4; i++) out[`v${i}`] = tf.variable(tf.fill([1 << 20], i + 0.5));
    return out;
  });
}

async function expectSaved(url: URL, want: Record<string, Float32Array>): Promise<void> {
  const back = (await load(url.href)) as Record<string, HostTensor>;
  for (const [key, values] of Object.entries(want))
    expect(Buffer.from(back[key]!.data.buffer).equals(Buffer.from(values.buffer)), key).toBe(true);
}

describe("reference staging on file://: held tensors are copied in the background, then written by the upload worker", () => {
  it("writes each data file from the worker in place, and saves the state as it was at the call", async () => {
    const url = new URL(`file://${await tempDir()}/ckpt`);
    const tensorsBefore = tf.memory().numTensors;
    const state = variables();
    const want = Object.fromEntries(Object.entries(state).map(([k, v]) => [k, v.dataSync() as Float32Array]));
    const before = writesSoFar();
    const { staged, done } = await asyncSave(state, {
      storage: openRecording(url),
      staging: "reference",
      concurrency: 2,
    });
    expect((await staged).bytes).toBe(0);
    // Training goes on at once: every variable gets new values, then all are disposed.
    for (const v of Object.values(state)) tf.tidy(() => v.assign(tf.zerosLike(v)));
    for (const v of Object.values(state)) v.dispose();
    // What the background copy took of this thread is reported with the result.
    expect((await done).backgroundCopySeconds).toBeGreaterThan(0);
    const writes = await dataFileWrites(before, 2);
    expect(writes.map((w) => [w.thread, w.pageAligned])).toEqual([
      ["worker", true],
      ["worker", true],
    ]);
    await expectSaved(url, want);
    // The clones that held the tensors are gone once the save is done.
    expect(tf.memory().numTensors).toBe(tensorsBefore);
  });

  it("drops the held tensors once they are copied, before the worker writes a byte", async () => {
    const url = new URL(`file://${await tempDir()}/ckpt`);
    let disposed = 0;
    const state: Record<string, unknown> = {};
    for (let i = 0; i < 4; i++)
      state[`t${i}`] = heldTensor(new Float32Array(1 << 20).fill(i), { disposed: () => disposed++ });
    const starts = new BroadcastChannel(STARTED_WRITES);
    // How many clones were gone when the worker announced its first data file.
    const atFirstWrite = new Promise<number>((resolve) => {
      starts.onmessage = (event) => {
        if ((event as { data: { path: string } }).data.path.endsWith(".safetensors")) resolve(disposed);
      };
    });
    try {
      const { done } = await asyncSave(state as never, { storage: openRecording(url), staging: "reference" });
      await done;
      expect(await atFirstWrite).toBe(4);
    } finally {
      starts.close();
    }
    expect(disposed).toBe(4);
  });

  it("copies a slice per event-loop turn, so a loop that yields once per step keeps stepping", async () => {
    const url = new URL(`file://${await tempDir()}/ckpt`);
    let step = 0;
    const readAt: number[] = [];
    // tfjs-like tensors that note the training step in which their data is read.
    const state: Record<string, unknown> = {};
    const want: Record<string, Float32Array> = {};
    for (let i = 0; i < 24; i++) {
      const values = new Float32Array(1 << 20).fill(i);
      want[`t${i}`] = values;
      state[`t${i}`] = heldTensor(values, { read: () => readAt.push(step) });
    }
    const { staged, done } = await asyncSave(state as never, { storage: openRecording(url), staging: "reference" });
    await staged;
    let finished = false;
    void done.then(() => (finished = true));
    const started = performance.now();
    // Training steps of 10 ms of work each, yielding once between steps.
    while (!finished) {
      const until = performance.now() + 10;
      while (performance.now() < until);
      step++;
      await new Promise((resolve) => setImmediate(resolve));
    }
    const elapsedMs = performance.now() - started;
    const { backgroundCopySeconds } = await done;
    expect(readAt).toHaveLength(24);
    // All 96 MiB in one turn would hold one step for the whole copy; here it is spread over several.
    expect(new Set(readAt).size).toBeGreaterThanOrEqual(3);
    // The reported copy time is this thread's copying alone: it fits in what the steps left of the time.
    expect(backgroundCopySeconds).toBeGreaterThan(0);
    expect(backgroundCopySeconds! * 1000).toBeLessThan(elapsedMs - 10 * step);
    await expectSaved(url, want);
  });

  it.each([
    ["at all", 1 << 20, 0],
    // The save's own copy of the host tensor (3 MiB) is held until it ends: waiting for room would never end.
    ["beside the buffers the save already holds", 20 << 20, 3 << 20],
  ])(
    "writes from the calling thread, as before, when the copies do not fit the staging budget %s",
    async (_, maxBytes, hostBytes) => {
      const url = new URL(`file://${await tempDir()}/ckpt`);
      const state: Record<string, tf.Variable | HostTensor> = variables();
      const want = Object.fromEntries(
        Object.entries(state).map(([k, v]) => [k, (v as tf.Variable).dataSync() as Float32Array]),
      );
      if (hostBytes > 0) {
        const host = new Float32Array(hostBytes / 4).fill(7);
        state.host = { dtype: "float32", shape: [host.length], data: host };
        want.host = host.slice();
      }
      const before = writesSoFar();
      const pool = new StagingPool({ maxBytes });
      const { done } = await asyncSave(state, {
        storage: openRecording(url),
        staging: "reference",
        concurrency: 2,
        pool,
      });
      // Nothing was copied in the background.
      expect((await done).backgroundCopySeconds).toBeUndefined();
      const writes = await dataFileWrites(before, 2);
      // From the calling thread: the variables' file through pooled page-aligned windows, as a
      // synchronous save on file://; a file of the save's own staged copies as it is (not copied again).
      expect(writes.map((w) => w.thread)).toEqual(["main", "main"]);
      expect(writes.map((w) => w.pageAligned).sort()).toEqual(hostBytes > 0 ? [false, true] : [true, true]);
      expect(pool.allocatedBytes).toBe(hostBytes);
      await expectSaved(url, want);
      for (const v of Object.values(state)) if (v instanceof tf.Variable) v.dispose();
    },
  );

  it.each([
    [
      "the caller's signal fires",
      "cancelled",
      /the save \(copying held tensors in the background\) was cancelled; nothing was committed/,
    ],
    ["a tensor cannot be read", "invalid_argument", /t4: reading the tfjs tensor failed: device lost/],
  ])("commits nothing and leaves no file when %s during the background copy", async (_, code, message) => {
    const url = new URL(`file://${await tempDir()}/ckpt`);
    const controller = new AbortController();
    let reads = 0;
    const state: Record<string, unknown> = {};
    // The fifth read, well into the copy, meets the failure.
    const read = (): void => {
      if (++reads !== 5) return;
      if (code === "cancelled") controller.abort(new Error("aborted by the test"));
      else throw new Error("device lost");
    };
    for (let i = 0; i < 8; i++) state[`t${i}`] = heldTensor(new Float32Array(1 << 20).fill(i), { read });
    const pool = new StagingPool();
    const { staged, done } = await asyncSave(state as never, {
      storage: openRecording(url),
      staging: "reference",
      signal: controller.signal,
      pool,
    });
    await staged;
    await expect(done).rejects.toMatchObject({ code, message: expect.stringMatching(message) });
    const dir = fileURLToPath(url);
    expect(existsSync(dir) ? readdirSync(dir) : []).toEqual([]);
    expect(pool.inUseBytes).toBe(0);
  });
});
