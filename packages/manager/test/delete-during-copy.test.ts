// A step deleted while replication is busy with it must not come back on a slower tier, nor be
// reported as failing to replicate: a copy whose commit was already sent is waited for and
// cleared, and a discovery whose listing predates the deletion does not queue the step again.
// Nor may a background save (saveAsync) still uploading the step, or using it as its incremental
// base, bring it back or fail; nor a discovery listing while the deletion runs copy it again.
import { type StorageAdapter, openStorage } from "@cairn/core";
import { afterEach, describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import type { ManagerEvents } from "../src/events/manager-events.js";
import { Gate, PathGate } from "../src/testing/gated-storage.js";
import { objectNames, smallState as state } from "../src/testing/small-state.js";

let roots = 0;
const root = (): string => `memory://delete-during-copy/${process.pid}-${roots++}`;
const opened: CheckpointManager[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((m) => m.close().catch(() => undefined)));
});

function manager(tiers: StorageAdapter[], incremental = false): CheckpointManager {
  const replication = tiers.length > 1 ? { replication: { retry: { baseDelayMs: 20, maxDelayMs: 100 } } } : {};
  const mgr = new CheckpointManager(tiers.length > 1 ? tiers : tiers[0]!, 1, {
    checkpointOnPreemption: false,
    ...(incremental ? { incremental: true } : {}),
    ...replication,
  });
  opened.push(mgr);
  return mgr;
}

async function stepsOn(storage: StorageAdapter): Promise<number[]> {
  const names = await objectNames(storage);
  return names.filter((n) => n.endsWith("/metadata.json")).map((n) => Number(n.split("/")[0]));
}

function errorsOf(mgr: CheckpointManager): ManagerEvents["error"][] {
  const seen: ManagerEvents["error"][] = [];
  mgr.on("error", (e) => seen.push(e));
  return seen;
}

describe("a step deleted while replication is busy with it", () => {
  for (const slower of [1, 2])
    it(`leaves no replica on ${slower} slower tier(s) when the copy's commit was already sent`, async () => {
      const fastTier = await openStorage(root());
      const slowTier = new Gate(await openStorage(root()), "commit");
      const slowest = await Promise.all(Array.from({ length: slower - 1 }, () => openStorage(root())));
      const mgr = manager([fastTier, slowTier, ...slowest]);
      const errors = errorsOf(mgr);
      expect(await mgr.save(1, state(1))).toBe(true);
      await slowTier.entered;
      const deleting = mgr.delete(1);
      // The commit goes through after the deletion began: the copy's abort came too late to stop it.
      setTimeout(() => slowTier.release(), 50);
      await deleting;
      await slowTier.passed;
      expect(await mgr.join()).toEqual({ retentionFailures: [], unreplicated: [] });
      for (const tier of [fastTier, slowTier, ...slowest]) expect(await stepsOn(tier)).toEqual([]);
      expect(await mgr.allSteps()).toEqual([]);
      expect(errors).toEqual([]);
    });

  it("is not queued again by a discovery whose listing predates the deletion", async () => {
    const fastTier = await openStorage(root());
    // An earlier run committed step 1 on the fast tier and never copied it.
    const earlier = manager([fastTier]);
    expect(await earlier.save(1, state(1))).toBe(true);
    await earlier.close();
    const slowTier = new Gate(await openStorage(root()), "list");
    const mgr = manager([fastTier, slowTier]);
    const errors = errorsOf(mgr);
    const deleting = mgr.delete(1);
    await slowTier.entered;
    // The fast tier's copy goes first; the slow tier's deletion waits, as the discovery does, for its listing.
    while ((await stepsOn(fastTier)).length > 0) await new Promise((resolve) => setTimeout(resolve, 5));
    slowTier.release();
    await deleting;
    await slowTier.passed;
    expect(await mgr.join()).toEqual({ retentionFailures: [], unreplicated: [] });
    expect(await stepsOn(fastTier)).toEqual([]);
    expect(await stepsOn(slowTier)).toEqual([]);
    expect(errors).toEqual([]);
  });
});

describe("a step deleted while a background save is busy with it", () => {
  for (const count of [1, 2])
    it(`stays deleted when its own upload commits after the deletion began (${count} tier(s))`, async () => {
      const fastTier = new PathGate(await openStorage(root()), "1/metadata.json");
      const slower = await Promise.all(Array.from({ length: count - 1 }, () => openStorage(root())));
      const mgr = manager([fastTier, ...slower]);
      const errors = errorsOf(mgr);
      fastTier.arm();
      expect(await mgr.saveAsync(1, state(1))).toBe(true);
      await fastTier.entered;
      const deleting = mgr.delete(1);
      setTimeout(() => fastTier.release(), 50);
      await deleting;
      expect(await mgr.join()).toEqual({
        retentionFailures: [],
        ...(count > 1 ? { unreplicated: [] } : {}),
      });
      for (const tier of [fastTier, ...slower]) expect(await stepsOn(tier)).toEqual([]);
      expect(await mgr.allSteps()).toEqual([]);
      expect(errors).toEqual([]);
    });

  it("does not fail a background save that uses it as its incremental base", async () => {
    const fastTier = new PathGate(await openStorage(root()), "1/metadata.json");
    const slowTier = await openStorage(root());
    const mgr = manager([fastTier, slowTier], true);
    const errors = errorsOf(mgr);
    expect(await mgr.save(1, state(1))).toBe(true);
    await mgr.join();
    // The next read of step 1's metadata is the background save of step 2 reading its base.
    fastTier.arm();
    expect(await mgr.saveAsync(2, state(2))).toBe(true);
    await fastTier.entered;
    const deleting = mgr.delete(1);
    setTimeout(() => fastTier.release(), 50);
    await deleting;
    expect(await mgr.join()).toEqual({ retentionFailures: [], unreplicated: [] });
    expect(errors).toEqual([]);
    expect(await mgr.allSteps()).toEqual([2]);
    expect(await stepsOn(fastTier)).toEqual([2]);
    expect(await stepsOn(slowTier)).toEqual([2]);
    expect(await mgr.restore(2)).toMatchObject({ step: 2 });
  });
});

describe("a step whose deletion is running", () => {
  it("is not taken as the base of a background save begun meanwhile", async () => {
    const fastTier = new PathGate(await openStorage(root()), "1/metadata.json", "readIncrementalBase");
    const slowTier = new PathGate(await openStorage(root()), "1/metadata.json");
    const mgr = manager([fastTier, slowTier], true);
    const errors = errorsOf(mgr);
    // Step 1's copy to the slow tier is held at its commit: the deletion waits for it.
    slowTier.arm();
    expect(await mgr.save(1, state(1))).toBe(true);
    await slowTier.entered;
    const deleting = mgr.delete(1);
    await new Promise((resolve) => setTimeout(resolve, 20));
    // A background save begun now must not reference step 1; if it did, its read of step 1 is held until step 1 is gone.
    fastTier.arm();
    expect(await mgr.saveAsync(2, state(2))).toBe(true);
    slowTier.release();
    while ((await stepsOn(fastTier)).includes(1)) await new Promise((resolve) => setTimeout(resolve, 5));
    fastTier.release();
    await deleting;
    expect(await mgr.join()).toEqual({ retentionFailures: [], unreplicated: [] });
    expect(errors).toEqual([]);
    expect(await stepsOn(fastTier)).toEqual([2]);
    expect(await stepsOn(slowTier)).toEqual([2]);
    expect(await mgr.restore(2)).toMatchObject({ step: 2 });
  });

  it("is not copied again by a discovery that lists it meanwhile", async () => {
    const fastTier = new PathGate(await openStorage(root()), "1/metadata.json");
    // An earlier run committed step 1 on the fast tier alone.
    const earlier = manager([fastTier]);
    expect(await earlier.save(1, state(1))).toBe(true);
    await earlier.close();
    const slowTier = new PathGate(await openStorage(root()), "1/metadata.json");
    const mgr = manager([fastTier, slowTier]);
    const errors = errorsOf(mgr);
    const replicated: number[] = [];
    mgr.on("replicated", (e) => replicated.push(e.step));
    // The discovery on opening copies step 1; that copy's commit is held on the slow tier.
    slowTier.arm();
    await mgr.allSteps();
    await slowTier.entered;
    // The deletion waits for that copy, and its un-commit of step 1 on the fast tier is held.
    fastTier.arm();
    const deleting = mgr.delete(1);
    slowTier.release();
    await fastTier.entered;
    // A discovery now (a reload, or the one retried after an outage) still lists step 1 on the fast tier.
    await mgr.reload();
    fastTier.release();
    await deleting;
    expect(await mgr.join()).toEqual({ retentionFailures: [], unreplicated: [] });
    expect(await stepsOn(fastTier)).toEqual([]);
    expect(await stepsOn(slowTier)).toEqual([]);
    expect(await mgr.allSteps()).toEqual([]);
    expect(replicated).toEqual([]);
    expect(errors).toEqual([]);
  });
});

describe("a step another manager deletes on the faster tier", () => {
  it("is not reported unreplicable when the slower tier already holds it", async () => {
    const inner = await openStorage(root());
    const slowTier = await openStorage(root());
    // An earlier run copied step 1 to the slow tier; this process has not seen that copy yet.
    const earlier = manager([inner, slowTier]);
    expect(await earlier.save(1, state(1))).toBe(true);
    expect(await earlier.close()).toEqual({ retentionFailures: [], unreplicated: [] });
    const fastTier = new PathGate(inner, "1/metadata.json", "Replication.#copy");
    fastTier.holdsStat = true;
    fastTier.arm();
    const mgr = manager([fastTier, slowTier]);
    const errors = errorsOf(mgr);
    // The discovery queues a check of step 1's copy; its look at the fast tier is held.
    void mgr.allSteps();
    await fastTier.entered;
    const other = manager([inner]);
    await other.delete(1);
    fastTier.release();
    expect(await mgr.join()).toEqual({ retentionFailures: [], unreplicated: [] });
    expect(errors).toEqual([]);
    expect(await stepsOn(slowTier)).toEqual([1]);
    expect(await mgr.restore(1)).toMatchObject({ step: 1 });
  });
});
