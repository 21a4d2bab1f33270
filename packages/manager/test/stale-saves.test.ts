import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { type StateDict, hostTensor } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import type { CheckpointManagerOptions } from "../src/checkpoint-manager-options.js";

let n = 0;
const memoryRoot = (): string => `memory://stale-saves/${process.pid}-${n++}`;
const quiet: CheckpointManagerOptions = { checkpointOnPreemption: false };
const state = (v: number): StateDict => ({
  model: { w: hostTensor("float32", [1 << 16], new Float32Array(1 << 16).fill(v)) },
  b: hostTensor("int32", [64], new Int32Array(64).fill(v)),
});

async function staleOf(mgr: CheckpointManager, run: () => Promise<void>): Promise<number[][]> {
  const seen: number[][] = [];
  mgr.on("stale", (s) => seen.push([s.step, s.sameAs]));
  await run();
  await mgr.join();
  return seen;
}

describe("stale saves", { timeout: 120_000 }, () => {
  it("incremental: a save of unchanged weights is stale", async () => {
    const mgr = new CheckpointManager(memoryRoot(), 1, { ...quiet, incremental: true });
    const seen = await staleOf(mgr, async () => {
      await mgr.save(1, state(1));
      await mgr.save(2, state(1));
      await mgr.save(3, state(1));
    });
    expect(seen).toEqual([
      [2, 1],
      [3, 2],
    ]);
    await mgr.close();
  });

  it("file://, saveAsync through the upload worker: unchanged weights are stale", async () => {
    const dir = await mkdtemp(join(tmpdir(), "stale-saves-"));
    try {
      const mgr = new CheckpointManager(pathToFileURL(dir).href, 1, quiet);
      const seen = await staleOf(mgr, async () => {
        await mgr.saveAsync(1, state(1));
        await mgr.saveAsync(2, state(1));
        await mgr.saveAsync(3, state(3));
      });
      expect(seen).toEqual([[2, 1]]);
      await mgr.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("maxToKeep 1: the previous step deleted by retention before its read-back still counts", async () => {
    const mgr = new CheckpointManager(memoryRoot(), 1, { ...quiet, maxToKeep: 1 });
    const seen = await staleOf(mgr, async () => {
      for (let s = 1; s <= 6; s++) await mgr.save(s, state(1));
    });
    expect(seen).toEqual([2, 3, 4, 5, 6].map((s) => [s, s - 1]));
    await mgr.close();
  });

  it('restore("latest") without a target, then a save of what it returned: stale', async () => {
    const root = memoryRoot();
    const first = new CheckpointManager(root, 1, quiet);
    await first.save(3, state(3));
    await first.close();
    const mgr = new CheckpointManager(root, 1, quiet);
    const seen = await staleOf(mgr, async () => {
      const restored = await mgr.restore("latest");
      await mgr.save(4, restored);
    });
    expect(seen).toEqual([[4, 3]]);
    await mgr.close();
  });

  it("restore(step) without a target, then a save of what it returned: stale", async () => {
    const root = memoryRoot();
    const first = new CheckpointManager(root, 1, quiet);
    await first.save(3, state(3));
    await first.close();
    const mgr = new CheckpointManager(root, 1, quiet);
    const seen = await staleOf(mgr, async () => {
      const restored = await mgr.restore(3);
      await mgr.save(4, restored);
    });
    expect(seen).toEqual([[4, 3]]);
    await mgr.close();
  });

  it("a changed save is not stale: same bytes, another dtype", async () => {
    const mgr = new CheckpointManager(memoryRoot(), 1, quiet);
    const seen = await staleOf(mgr, async () => {
      await mgr.save(1, { w: hostTensor("float32", [1024], new Float32Array(1024)) });
      await mgr.save(2, { w: hostTensor("int32", [1024], new Int32Array(1024)) });
    });
    expect(seen).toEqual([]);
    await mgr.close();
  });
});
