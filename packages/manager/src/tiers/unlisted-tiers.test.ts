// tiers34c: a slower tier whose listing did not answer in time was left out of latestStep() and
// restore("latest"): with an empty tier 0 a run started over, with a stale one it resumed from it.
import { type StorageAdapter, openStorage } from "@cairn/core";
import { afterEach, describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import { Gate } from "../testing/gated-storage.js";
import { OutageStorage } from "../testing/outage-storage.js";
import { smallState as state } from "../testing/small-state.js";
import type { UnlistedTiers } from "./tier-config.js";

let roots = 0;
const opened: CheckpointManager[] = [];
afterEach(() => Promise.all(opened.splice(0).map((m) => m.close({ timeoutMs: 100 }).catch(() => undefined))));

const memory = (): Promise<StorageAdapter> => openStorage(`memory://unlisted-tiers/${process.pid}-${roots++}`);

/** Saves `steps` under `storage` alone, as an earlier run (or another machine) did. */
async function saved(storage: StorageAdapter, steps: readonly number[]): Promise<StorageAdapter> {
  const mgr = new CheckpointManager(storage, 1, { checkpointOnPreemption: false });
  for (const step of steps) await mgr.save(step, state(step));
  await mgr.close();
  return storage;
}

/** A manager over `t0` and `t1` behind a gate holding its first listing, waiting 50 ms for a slower tier's listing. */
function gated(
  t0: StorageAdapter,
  t1: StorageAdapter,
  options: { unlistedTiers?: UnlistedTiers; maxToKeep?: number } = {},
): { mgr: CheckpointManager; gate: Gate } {
  const gate = new Gate(t1, "list");
  const mgr = new CheckpointManager([t0, gate], 1, {
    checkpointOnPreemption: false,
    ...(options.maxToKeep === undefined ? {} : { tiers: [{ maxToKeep: options.maxToKeep }] }),
    replication: {
      listingWaitMs: 50,
      retry: { baseDelayMs: 20, maxDelayMs: 100 },
      ...(options.unlistedTiers ? { unlistedTiers: options.unlistedTiers } : {}),
    },
  });
  mgr.on("error", () => undefined);
  opened.push(mgr);
  return { mgr, gate };
}

/** What a query refuses with while tier `root`'s listing has not answered within `listingWaitMs`. */
const refusedFor = (root: string): object => ({
  code: "storage",
  context: { path: root, transient: true },
  cause: { code: "timeout" },
});

describe("a tier whose listing did not answer in time", () => {
  it("an empty tier 0 and a slow tier 1: no latest step is named until tier 1 answers, then its newest", async () => {
    const t1 = await saved(await memory(), [1, 2, 3]);
    const { mgr, gate } = gated(await memory(), t1);
    const refused = refusedFor(t1.root);
    await expect(mgr.latestStep()).rejects.toMatchObject(refused);
    await expect(mgr.allSteps()).rejects.toMatchObject(refused);
    await expect(mgr.latestStep({ verified: true })).rejects.toMatchObject(refused);
    await expect(mgr.restore("latest", state(0))).rejects.toMatchObject(refused);
    gate.release();
    await gate.passed;
    expect(await mgr.latestStep()).toBe(3);
    expect(await mgr.allSteps()).toEqual([1, 2, 3]);
    expect((await mgr.restore("latest", state(0))).step).toBe(3);
  });

  it("a stale tier 0 and a hung tier 1: no stale step is named; restore(step) of tier 0's step reads it", async () => {
    const t0 = await saved(await memory(), [5]);
    const t1 = await saved(await memory(), [5, 10]);
    const { mgr } = gated(t0, t1);
    const refused = refusedFor(t1.root);
    await expect(mgr.latestStep()).rejects.toMatchObject(refused);
    await expect(mgr.restore("latest", state(0))).rejects.toMatchObject(refused);
    await expect(mgr.latestStep()).rejects.toThrow(/may hold a step newer than step 5.*unlistedTiers/);
    expect(await mgr.restore(5)).toEqual(state(5));
  });

  it('with unlistedTiers: "leaveOut", the tiers that answered name the latest step', async () => {
    const t0 = await saved(await memory(), [5]);
    const t1 = await saved(await memory(), [5, 10]);
    const { mgr } = gated(t0, t1, { unlistedTiers: "leaveOut" });
    expect(await mgr.latestStep()).toBe(5);
    expect(await mgr.allSteps()).toEqual([5]);
    expect((await mgr.restore("latest", state(0))).step).toBe(5);
    const empty = gated(await memory(), t1, { unlistedTiers: "leaveOut" }).mgr;
    expect(await empty.latestStep()).toBe(undefined);
  });

  it("saves while tier 1's listing is held: tier 0's retention keeps what tier 1 lacks, and every copy is made", async () => {
    const t0 = await memory();
    const t1 = await saved(await memory(), [1]);
    const { mgr, gate } = gated(t0, t1, { maxToKeep: 1 });
    for (const step of [2, 3, 4]) await mgr.save(step, state(step));
    gate.release();
    await mgr.join();
    const bucket = new CheckpointManager(t1, 1, { readOnly: true });
    opened.push(bucket);
    expect(await bucket.allSteps()).toEqual([1, 2, 3, 4]);
    expect(await mgr.allSteps()).toEqual([1, 2, 3, 4]);
    expect((await mgr.tiers())[0]!.steps).toEqual([4]);
  });

  it("metadata(step) of a step only a tier that is down may hold: that tier's failure, not not_found", async () => {
    const t1 = new OutageStorage(await saved(await memory(), [3]));
    t1.down = true;
    const { mgr } = gated(await memory(), t1);
    await expect(mgr.metadata(3)).rejects.toMatchObject({ code: "storage", message: /the bucket is down/ });
    await expect(mgr.restore(3)).rejects.toMatchObject({ code: "storage" });
    t1.down = false;
    expect((await mgr.metadata(3)).step).toBe(3);
  });

  it("checks unlistedTiers", () => {
    expect(
      () =>
        new CheckpointManager(["memory://unlisted-tiers/a", "memory://unlisted-tiers/b"], 1, {
          replication: { unlistedTiers: "skip" as never },
        }),
    ).toThrow(/unlistedTiers must be "refuse" or "leaveOut"/);
  });
});
