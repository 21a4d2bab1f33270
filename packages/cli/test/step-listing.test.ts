import { join } from "node:path";
import { type StorageAdapter, hostTensor, openStorage, readMetadata } from "@cairn/core";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { CheckpointManager } from "@cairn/manager";
import { describe, expect, it } from "vitest";
import { StepListingCache, listSteps, mergeTiers } from "../src/steps.js";
import { cairn, jsonLines, tempDir } from "./helpers.js";

/** Steps 1, 2, 3 of an incremental run (2 and 3 reference step 1's "frozen"), each with a loss. */
async function incrementalRoot(): Promise<string> {
  const root = join(await tempDir(), "run");
  const manager = new CheckpointManager(root, 1, { incremental: true, checkpointOnPreemption: false });
  const frozen = hostTensor("float32", [1024], new Float32Array(1024).fill(3));
  for (const step of [1, 2, 3]) {
    const trained = hostTensor("float32", [16], new Float32Array(16).fill(step));
    await manager.save(step, { frozen, trained }, { metrics: { loss: 1 / step } });
  }
  await manager.close();
  return root;
}

/** Counts reads of metadata.json through an adapter (one that fails nothing). */
function counting(storage: StorageAdapter): { storage: FaultyStorageAdapter; reads: () => number } {
  const wrapped = new FaultyStorageAdapter(storage);
  return { storage: wrapped, reads: () => wrapped.calls.read.filter((p) => p.endsWith("metadata.json")).length };
}

describe("the step listing (cairn ls, cairn ui)", () => {
  it("gives an incremental step's referenced bytes beside its written ones, and each step's save duration", async () => {
    const root = await incrementalRoot();
    const run = await cairn(["ls", root, "--json"]);
    expect(run.code, run.stderr).toBe(0);
    const steps = jsonLines(run)[0]!.steps as Record<string, unknown>[];
    const first = await readMetadata(join(root, "1"));
    const third = await readMetadata(join(root, "3"));
    const referenced = Object.values(third.files)
      .filter((f) => f.dir === "1")
      .reduce((n, f) => n + f.size, 0);
    expect(referenced).toBeGreaterThan(4096);
    expect(steps[0]!.referencedBytes).toBeUndefined();
    expect(steps[2]!.referencedBytes).toBe(referenced);
    // Written: step 3's own data files and its metadata.json, never the 4 KiB it references.
    expect(steps[2]!.bytes as number).toBeLessThan(referenced);
    for (const [i, metadata] of [first, third].entries()) {
      const expected = (Date.parse(metadata.createdAt) - Date.parse(metadata.user.savedAt as string)) / 1000;
      expect(steps[i * 2]!.saveSeconds).toBe(expected);
    }
    expect(steps.map((s) => s.metrics)).toEqual([{ loss: 1 }, { loss: 0.5 }, { loss: 1 / 3 }]);
  });

  it("with a cache, a listing reads again only the metadata.json that changed", async () => {
    const root = await incrementalRoot();
    const { storage, reads } = counting(await openStorage(root));
    const cache = new StepListingCache();
    const first = await listSteps(storage, cache);
    expect(reads()).toBe(3);
    expect(await listSteps(storage, cache)).toEqual(first);
    expect(reads()).toBe(3);
    const manager = new CheckpointManager(root, 1, { incremental: true, checkpointOnPreemption: false });
    await manager.save(4, { trained: hostTensor("float32", [2]) }, { metrics: { loss: 0.25 } });
    await manager.close();
    const again = await listSteps(storage, cache);
    expect(reads()).toBe(4);
    expect(again.steps.map((s) => s.step)).toEqual([1, 2, 3, 4]);
    expect(again.steps[3]!.metrics).toEqual({ loss: 0.25 });
    await storage.close();
  });

  it("merges tiers: one row per step, its figures from the first tier holding it committed", () => {
    const listing = (step: number, committed: boolean, bytes: number) => ({
      step,
      committed,
      objects: 1,
      bytes,
      metrics: {},
    });
    const merged = mergeTiers([
      { steps: [listing(1, false, 10), listing(2, true, 20)] },
      { steps: [listing(1, true, 11), listing(3, true, 30)] },
    ]);
    expect(merged.map((r) => [r.step, r.states, r.tier, r.listing.bytes])).toEqual([
      [1, ["uncommitted", "committed"], 1, 11],
      [2, ["committed", undefined], 0, 20],
      [3, [undefined, "committed"], 1, 30],
    ]);
  });
});
