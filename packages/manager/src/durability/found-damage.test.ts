import { type StorageAdapter, hostTensor, isCheckpointError, openStorage } from "@cairn/core";
import { rejection } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import type { CheckpointManagerOptions } from "../checkpoint-manager-options.js";
import { record, truncateDataFile } from "../testing/durability-suite.js";
import { OutageStorage } from "../testing/outage-storage.js";

let roots = 0;
const memoryRoot = (): string => `memory://found-damage/${process.pid}-${roots++}`;
const quiet: CheckpointManagerOptions = { checkpointOnPreemption: false };

function state(value: number): { w: ReturnType<typeof hostTensor>; step: number } {
  return { w: hostTensor("float32", [4096], new Float32Array(4096).fill(value)), step: value };
}

async function writeOver(storage: StorageAdapter, path: string, body: Uint8Array): Promise<void> {
  await storage.delete(path);
  await storage.write(path, body);
}

/** The ways a step's metadata.json is damaged: cut short, replaced by garbage, or another step's (a directory copied by hand). */
const DAMAGE = {
  truncated: async (storage: StorageAdapter, step: number) => {
    const path = `${step}/metadata.json`;
    const bytes = await storage.read(path);
    await writeOver(storage, path, bytes.subarray(0, bytes.byteLength >> 1));
  },
  garbage: (storage: StorageAdapter, step: number) =>
    writeOver(storage, `${step}/metadata.json`, new TextEncoder().encode("\u0000not json at all{")),
  "another step's": async (storage: StorageAdapter, step: number) => {
    // The whole directory of another step, under this step's name: its bytes verify, its weights are not this step's.
    const other = step === 1 ? 2 : 1;
    const objects: string[] = [];
    for await (const o of storage.list(`${step}/`)) objects.push(o.path);
    for (const path of objects) await storage.delete(path);
    for await (const o of storage.list(`${other}/`))
      await storage.write(`${step}/${o.path.slice(o.path.indexOf("/") + 1)}`, await storage.read(o.path));
  },
} as const;

describe("a step whose metadata.json is damaged is a candidate that failed verification", () => {
  for (const [how, damage] of Object.entries(DAMAGE)) {
    it(`${how}: restore('latest') skips it with an event naming metadata.json; every step so damaged is corrupt`, async () => {
      const root = memoryRoot();
      const mgr = new CheckpointManager(root, 1, quiet);
      for (let step = 1; step <= 3; step++) await mgr.save(step, state(step));
      await mgr.close();
      const storage = await openStorage(root);
      await damage(storage, 3);
      const next = new CheckpointManager(root, 1, quiet);
      next.on("error", () => undefined);
      const skipped = record(next, "skipped");
      const target = state(0);
      expect((await next.restore("latest", target)).step).toBe(2);
      expect(target.w.data[0]).toBe(2);
      expect(skipped.map((s) => [s.step, s.tier, s.file])).toEqual([[3, 0, "metadata.json"]]);
      expect(await next.latestStep({ verified: true })).toBe(2);
      await next.close();

      // Every step's metadata damaged: corrupt, listing each, not "nothing committed".
      for (const step of [1, 2]) await (how === "another step's" ? DAMAGE.garbage : damage)(storage, step);
      const last = new CheckpointManager(root, 1, quiet);
      last.on("error", () => undefined);
      const skippedLast = record(last, "skipped");
      const error = await rejection(last.restore("latest", state(0)));
      expect(isCheckpointError(error, "corrupt")).toBe(true);
      for (const step of [3, 2, 1]) expect(error.message).toContain(`step ${step} (`);
      expect(error.message).toContain("metadata.json");
      expect(skippedLast.map((s) => s.step)).toEqual([3, 2, 1]);
      expect(await last.latestStep({ verified: true })).toBeUndefined();
      await last.close();
      await storage.close();
    });
  }

  it("a restore of a step by number checks that its metadata is that step's", async () => {
    const root = memoryRoot();
    const mgr = new CheckpointManager(root, 1, quiet);
    for (let step = 1; step <= 2; step++) await mgr.save(step, state(step));
    await DAMAGE["another step's"](await openStorage(root), 2);
    const error = await rejection(mgr.restore(2, state(0)));
    expect(isCheckpointError(error, "corrupt")).toBe(true);
    expect(error.message).toMatch(/step 1/);
    await mgr.close();
  });
});

describe("a step found damaged is no longer verified anywhere", () => {
  it("latestStep, the retention guard and health() move back past a step a restore found damaged", async () => {
    const inner = await openStorage(memoryRoot());
    const bucket = new OutageStorage(inner);
    const local = await openStorage(memoryRoot());
    const mgr = new CheckpointManager([local, bucket], 1, {
      ...quiet,
      tiers: [{ maxToKeep: 2 }, { maxToKeep: 2 }],
      replication: { retry: { baseDelayMs: 20, maxDelayMs: 100 } },
    });
    mgr.on("error", () => undefined);
    await mgr.save(1, state(1));
    await mgr.save(2, state(2));
    await mgr.join();
    expect(await mgr.latestStep({ verified: true })).toBe(2);
    expect(mgr.health().newestDurable).toBe(2);
    // Step 2 goes bad on both tiers after this manager knew it good: a restore of it finds out.
    await truncateDataFile(local, 2);
    await truncateDataFile(inner, 2);
    expect(isCheckpointError(await rejection(mgr.restore(2, state(0))), "corrupt")).toBe(true);
    expect(await mgr.latestStep({ verified: true })).toBe(1);
    expect(mgr.health().newestDurable).toBe(1);
    expect(mgr.health().stepsAtRisk).toBe(1);
    // The bucket goes down: 3 is only on tier 0, so 1 (not the damaged 2) is the step tier 0 must keep.
    bucket.down = true;
    await mgr.save(3, state(3));
    await mgr.join();
    expect((await mgr.tiers())[0]!.steps).toEqual([1, 2, 3]);
    bucket.down = false;
    await mgr.close({ timeoutMs: 30_000 });
  });
});
