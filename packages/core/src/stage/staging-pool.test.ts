import { describe, expect, it } from "vitest";
import { flattenStateDict } from "../state/flatten.js";
import { hostTensor } from "../state/tensors.js";
import { prepareStaging, stageLeaves } from "./staging.js";
import { StagingPool } from "./staging-pool.js";
import { DefaultSavePlanner } from "../plan/default-save-planner.js";

describe("StagingPool.prepare", () => {
  it("readies buffers that a later acquire of the same sizes takes without allocating", async () => {
    const pool = new StagingPool();
    await pool.prepare([1 << 20, 100], [true, false]);
    expect(pool.allocatedBytes).toBe((1 << 20) + 100);
    expect(pool.inUseBytes).toBe(0);
    const buffers = await pool.acquire([1 << 20, 100], undefined, [true, false]);
    expect(pool.allocatedBytes).toBe((1 << 20) + 100);
    expect(buffers.map((b) => b.byteLength)).toEqual([1 << 20, 100]);
  });

  it("leaves the bytes of reused buffers as they were", async () => {
    const pool = new StagingPool();
    const [buffer] = await pool.acquire([3 * 4096 + 5]);
    buffer!.forEach((_, i) => (buffer![i] = (i * 7) & 0xff));
    pool.release([buffer!]);
    await pool.prepare([3 * 4096 + 5]);
    const [again] = await pool.acquire([3 * 4096 + 5]);
    expect(again).toBe(buffer);
    expect(again!.every((v, i) => v === ((i * 7) & 0xff))).toBe(true);
  });

  it("readies nothing when the sizes do not fit the budget beside the buffers in use", async () => {
    const pool = new StagingPool({ maxBytes: 100 });
    const held = await pool.acquire([60]);
    await pool.prepare([60]);
    expect(pool.allocatedBytes).toBe(60);
    pool.release(held);
    await pool.prepare([200]);
    expect(pool.allocatedBytes).toBe(60);
  });

  it("makes an acquire that comes meanwhile wait for it and take what it readied", async () => {
    const pool = new StagingPool();
    const prepared = pool.prepare([1 << 20], [true]);
    const buffers = await pool.acquire([1 << 20], undefined, [true]);
    await prepared;
    expect(pool.allocatedBytes).toBe(1 << 20);
    expect(pool.inUseBytes).toBe(1 << 20);
    pool.release(buffers);
  });
});

describe("prepareStaging", () => {
  it("readies exactly the buffers stageLeaves then takes, in the planned files' layout", async () => {
    const state = {
      big: hostTensor("float32", [1 << 19], new Float32Array(1 << 19).fill(1.5)),
      small: hostTensor(
        "int32",
        [10],
        Int32Array.from({ length: 10 }, (_, i) => i),
      ),
      blob: new Uint8Array([1, 2, 3]),
      step: 7,
    };
    const pool = new StagingPool();
    const leaves = await flattenStateDict(state);
    const layout = { planner: new DefaultSavePlanner(), defaultPlanner: true, rank: 0, filesPerRank: 2 };
    await prepareStaging(leaves, "copy", pool, layout);
    const allocated = pool.allocatedBytes;
    expect(allocated).toBeGreaterThan(1 << 21);
    const staged = await stageLeaves(leaves, "copy", pool, undefined, layout);
    expect(pool.allocatedBytes).toBe(allocated);
    expect(pool.inUseBytes).toBe(allocated);
    const big = staged.leaves.find((leaf) => leaf.path[0] === "big");
    expect(
      big?.kind === "tensor" && big.source.kind === "host"
        ? Array.from((big.source.tensor.data as Float32Array).subarray(0, 3))
        : undefined,
    ).toEqual([1.5, 1.5, 1.5]);
    staged.release();
  });
});
