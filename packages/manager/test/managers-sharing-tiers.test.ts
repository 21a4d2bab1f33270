// Two managers on the same tiers one after the other, as a process that closes one with
// close({ timeoutMs }) and opens the next does: the closed one deletes nothing once close has
// returned, and the next one's copy of a step that was deleted from the faster tier while it ran,
// once the slower tier holds it, is not a failure.
import { type StorageAdapter, openStorage } from "@cairn/core";
import type { DeleteOptions } from "@cairn/core/storage";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import { removeSteps } from "../src/steps/step-cleanup.js";
import { Gate, PathGate } from "../src/testing/gated-storage.js";
import { objectNames, smallState as state } from "../src/testing/small-state.js";

/** Records every path deleted through it. */
class Deletions extends FaultyStorageAdapter {
  readonly paths: string[] = [];
  override async delete(path: string, options?: DeleteOptions): Promise<void> {
    this.paths.push(path);
    return super.delete(path, options);
  }
}

let roots = 0;
const root = (): string => `memory://managers-sharing-tiers/${process.pid}-${roots++}`;
const opened: CheckpointManager[] = [];
const storages: StorageAdapter[] = [];
/** Gates a failed test left shut. */
const releases: (() => void)[] = [];
afterEach(async () => {
  for (const release of releases.splice(0)) release();
  await Promise.all(opened.splice(0).map((m) => m.close().catch(() => undefined)));
  await Promise.all(storages.splice(0).map((s) => s.close()));
});

async function storage(): Promise<StorageAdapter> {
  const s = await openStorage(root());
  storages.push(s);
  return s;
}

function manager(tiers: StorageAdapter[], maxToKeep?: number): CheckpointManager {
  const mgr = new CheckpointManager(tiers.length > 1 ? tiers : tiers[0]!, 1, {
    checkpointOnPreemption: false,
    ...(maxToKeep === undefined ? {} : { tiers: [{ maxToKeep }] }),
    ...(tiers.length > 1 ? { replication: { retry: { baseDelayMs: 20, maxDelayMs: 100 } } } : {}),
  });
  opened.push(mgr);
  return mgr;
}

async function stepsOn(s: StorageAdapter): Promise<number[]> {
  const names = await objectNames(s);
  return [...new Set(names.filter((n) => n.endsWith("/metadata.json")).map((n) => Number(n.split("/")[0])))].sort();
}

describe("managers sharing tiers", () => {
  it("a manager closed with { timeoutMs } deletes nothing after close returned", async () => {
    const [a, b] = [await storage(), await storage()];
    const deletions = new Deletions(a);
    // Tier 0's first listing is held: the retention pass the saves start waits on it.
    const fast = new Gate(deletions, "list");
    releases.push(() => fast.release());
    const mgr = manager([fast, b], 1);
    await mgr.save(1, state(1));
    await mgr.save(2, state(2));
    await fast.entered;
    // Both steps reach tier 1 meanwhile: once the listing comes back, tier 0's retention may take step 1.
    for (let i = 0; i < 200 && (await stepsOn(b)).length < 2; i++) await new Promise((r) => setTimeout(r, 5));
    expect(await stepsOn(b)).toEqual([1, 2]);
    await mgr.close({ timeoutMs: 20 });
    const before = deletions.paths.length;
    fast.release();
    await fast.passed;
    await new Promise((r) => setTimeout(r, 100));
    expect(deletions.paths.slice(before)).toEqual([]);
    expect(await stepsOn(a)).toEqual([1, 2]);
    // The next manager's retention takes it.
    const next = manager([a, b], 1);
    expect(await next.join()).toEqual({ retentionFailures: [], unreplicated: [] });
    await next.save(3, state(3));
    await next.join();
    expect(await stepsOn(a)).toEqual([3]);
    expect(await stepsOn(b)).toEqual([1, 2, 3]);
  });

  it("a copy whose source another manager deleted while it ran, once the slower tier holds it, is no failure", async () => {
    const [a, b] = [await storage(), await storage()];
    const first = manager([a]);
    await first.save(1, state(1));
    await first.close();
    const data = (await objectNames(a, "1/")).find((n) => !n.endsWith("metadata.json"))!;
    // The next manager's copy of step 1 is held at its first read of a data file.
    const gated = new PathGate(a, data);
    gated.arm();
    releases.push(() => gated.release());
    const next = manager([gated, b]);
    const errors: unknown[] = [];
    next.on("error", (e) => errors.push(e.error));
    const replicated: number[] = [];
    next.on("replicated", (e) => replicated.push(e.step));
    void next.reload();
    await gated.entered;
    // Meanwhile another manager copies step 1 to tier 1, and step 1 leaves tier 0.
    const other = manager([a, b]);
    await other.reload();
    await other.join();
    expect(await stepsOn(b)).toEqual([1]);
    await other.close();
    expect((await removeSteps(a, [1])).deleted).toEqual([1]);
    gated.release();
    expect(await next.join()).toEqual({ retentionFailures: [], unreplicated: [] });
    expect(errors).toEqual([]);
    expect(replicated).toEqual([]);
    expect(await stepsOn(b)).toEqual([1]);
    expect(await next.metadata(1)).toMatchObject({ step: 1 });
  });
});
