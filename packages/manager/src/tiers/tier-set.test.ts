import { SingleProcessGroup, type StorageAdapter, isCheckpointError, openStorage, save } from "@cairn/core";
import { afterEach, describe, expect, it, vi } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import { ManagerEmitter, type ManagerEvents } from "../events/manager-events.js";
import { Gate } from "../testing/gated-storage.js";
import { OutageStorage } from "../testing/outage-storage.js";
import { smallState } from "../testing/small-state.js";
import type { UnlistedTiers } from "./tier-config.js";
import { TierSet } from "./tier-set.js";

let roots = 0;
const opened: CheckpointManager[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((m) => m.close().catch(() => undefined)));
});

async function outage(): Promise<OutageStorage> {
  return new OutageStorage(await openStorage(`memory://tier-set/${process.pid}-${roots++}`));
}

function manager(
  locations: StorageAdapter | StorageAdapter[],
  unlistedTiers?: UnlistedTiers,
): {
  mgr: CheckpointManager;
  errors: ManagerEvents["error"][];
} {
  const mgr = new CheckpointManager(locations, 1, {
    checkpointOnPreemption: false,
    replication: Array.isArray(locations) ? { retry: { baseDelayMs: 20, maxDelayMs: 100 }, unlistedTiers } : undefined,
  });
  opened.push(mgr);
  const errors: ManagerEvents["error"][] = [];
  mgr.on("error", (e) => errors.push(e));
  return { mgr, errors };
}

const codeOf = (error: unknown): string | undefined => (isCheckpointError(error) ? error.code : undefined);

/** One location is the tier set of one: each failure is heard once, thrown or reported, never both. */
describe("a tier set, of one location or several", () => {
  it("one location that cannot be listed: its failure is thrown, and nothing reported", async () => {
    const storage = await outage();
    const first = manager(storage).mgr;
    await first.save(1, smallState(1));
    await first.close();
    storage.down = true;
    const { mgr, errors } = manager(storage);
    await expect(mgr.allSteps()).rejects.toMatchObject({ code: "storage" });
    await expect(mgr.latestStep()).rejects.toMatchObject({ code: "storage" });
    await expect(mgr.metadata(1)).rejects.toMatchObject({ code: "storage" });
    await expect(mgr.restore(1)).rejects.toMatchObject({ code: "storage" });
    expect(errors).toEqual([]);
    storage.down = false;
    expect(await mgr.allSteps()).toEqual([1]);
  });

  it("two tiers: a restore one tier serves succeeds, a listing only when told to answer without the other; when neither can answer, tier 0's failure is thrown", async () => {
    const [t0, t1] = [await outage(), await outage()];
    const first = manager([t0, t1]).mgr;
    await first.save(1, smallState(1));
    expect((await first.close()).unreplicated).toEqual([]);
    t0.down = true;
    const { mgr, errors } = manager([t0, t1]);
    // Tier 0 may hold a newer step than tier 1's: no latest step is named from tier 1 alone.
    await expect(mgr.latestStep()).rejects.toMatchObject({ code: "storage", context: { path: t0.root } });
    expect(await mgr.restore(1)).toEqual(smallState(1));
    expect(errors.map((e) => [e.operation, e.tier])).toContainEqual(["listing", 0]);
    expect(await manager([t0, t1], "leaveOut").mgr.latestStep()).toBe(1);
    t1.down = true;
    const down = manager([t0, t1]);
    // Neither tier can say what it holds: what exists is unknown, not absent.
    await expect(down.mgr.latestStep()).rejects.toMatchObject({ code: "storage" });
    await expect(down.mgr.allSteps()).rejects.toMatchObject({ code: "storage" });
    await expect(down.mgr.restore(1)).rejects.toMatchObject({ code: "storage" });
    await expect(down.mgr.metadata(1)).rejects.toMatchObject({ code: "storage" });
    // Each tier's outage is reported once (tier 0's by the background discovery of copies to make), however often asked.
    const listing = down.errors.filter((e) => e.operation === "listing");
    expect(listing.map((e) => [e.tier, codeOf(e.error)]).sort()).toEqual([
      [0, "storage"],
      [1, "storage"],
    ]);
    expect(down.errors.filter((e) => e.operation === "restore")).toEqual([]);
  });
});

describe("deletions a discovery of missing copies passes over", () => {
  it("are remembered only while a discovery that began before them runs", async () => {
    const t0 = await openStorage(`memory://tier-set/${process.pid}-${roots++}`);
    const t1 = new Gate(await openStorage(`memory://tier-set/${process.pid}-${roots++}`), "list");
    for (let step = 1; step <= 20; step++) await save(smallState(step), { storage: t0, path: String(step) });
    const set = new TierSet({
      locations: [t0, t1],
      options: { replication: { retry: { baseDelayMs: 20, maxDelayMs: 100 } } },
      group: new SingleProcessGroup(),
      events: new ManagerEmitter(),
      now: Date.now,
      isSaving: () => false,
      holds: () => false,
    });
    const replication = set.replication!;
    try {
      // The first discovery waits on tier 1's listing: a deletion begun meanwhile must be passed over.
      await set.open();
      await t1.entered;
      const deleting = set.delete(1);
      await vi.waitFor(() => expect(replication.droppedSteps).toBe(1));
      t1.release();
      await deleting;
      await set.settled();
      expect(replication.droppedSteps).toBe(0);
      // With no discovery running, a long run's deletions leave nothing behind.
      for (let step = 2; step <= 20; step++) await set.delete(step);
      expect(replication.droppedSteps).toBe(0);
      expect(await set.allSteps()).toEqual([]);
    } finally {
      await set.close();
    }
  });
});
