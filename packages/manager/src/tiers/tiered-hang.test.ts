// Found by attack30: a slower tier that stops answering (a stuck network mount, a storage that
// ignores aborts) held up a restore that tier 0 could serve, and close({ timeoutMs }) for ever.
import { openStorage } from "@cairn/core";
import type { ByteRange, ObjectInfo, ReadOptions, WriteBody, WriteOptions } from "@cairn/core/storage";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import type { ManagerEvents } from "../events/manager-events.js";
import { smallState as state } from "../testing/small-state.js";
import type { ReplicationOptions } from "./tier-config.js";

/** A storage whose every call never settles while `stuck`, whatever the abort signal says. */
class StuckStorage extends FaultyStorageAdapter {
  stuck = false;
  #wait(): Promise<void> {
    return this.stuck ? new Promise<never>(() => undefined) : Promise.resolve();
  }
  override async read(path: string, range?: ByteRange, options?: ReadOptions): Promise<Uint8Array> {
    await this.#wait();
    return super.read(path, range, options);
  }
  override async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    await this.#wait();
    return super.write(path, body, options);
  }
  override async stat(path: string): Promise<ObjectInfo | null> {
    await this.#wait();
    return super.stat(path);
  }
  override async *list(prefix: string): AsyncIterable<ObjectInfo> {
    await this.#wait();
    yield* super.list(prefix);
  }
}

/**
 * Tier 0 in memory and a tier 1 hung from the start, under a manager that waits 100 ms for a
 * slower tier's listing.
 */
async function hungFromTheStart(
  name: string,
  replication: ReplicationOptions = {},
): Promise<{ mgr: CheckpointManager; errors: ManagerEvents["error"][]; t1: StuckStorage }> {
  const t0 = await openStorage(`memory://tiered-hang/${process.pid}-${name}-0`);
  const t1 = new StuckStorage(await openStorage(`memory://tiered-hang/${process.pid}-${name}-1`));
  t1.stuck = true;
  const mgr = new CheckpointManager([t0, t1], 1, {
    checkpointOnPreemption: false,
    replication: { listingWaitMs: 100, retry: { baseDelayMs: 20, maxDelayMs: 100 }, ...replication },
  });
  const errors: ManagerEvents["error"][] = [];
  mgr.on("error", (e) => errors.push(e));
  return { mgr, errors, t1 };
}

/** What `promise` settled to within `ms`, or "pending". */
function within<T>(promise: Promise<T>, ms: number): Promise<T | "pending"> {
  return Promise.race([promise, new Promise<"pending">((r) => setTimeout(() => r("pending"), ms))]);
}

describe("a slower tier that hangs", () => {
  it("restore reads tier 0's copy, and close({ timeoutMs }) returns in time naming the copies left", async () => {
    let roots = 0;
    const t0 = await openStorage(`memory://tiered-hang/${process.pid}-${roots++}`);
    const t1 = new StuckStorage(await openStorage(`memory://tiered-hang/${process.pid}-${roots++}`));
    const mgr = new CheckpointManager([t0, t1], 1, {
      checkpointOnPreemption: false,
      replication: { retry: { baseDelayMs: 20, maxDelayMs: 100 } },
    });
    mgr.on("error", () => undefined);
    await mgr.save(1, state(1));
    t1.stuck = true;
    await mgr.save(2, state(2));
    expect(await within(mgr.restore(2), 5000)).toEqual(state(2));
    expect(
      await within(
        mgr.metadata(2).then((m) => m.step),
        5000,
      ),
    ).toBe(2);
    const closed = await within(mgr.close({ timeoutMs: 200 }), 5000);
    expect(closed).not.toBe("pending");
    expect(closed === "pending" ? [] : closed.unreplicated!.map((u) => u.step).sort()).toContain(2);
  });

  it("the first save of a process decides without a slower tier whose first listing hangs", async () => {
    const { mgr } = await hungFromTheStart("first");
    expect(await within(mgr.save(1, state(1)), 5000)).not.toBe("pending");
    expect(await within(mgr.save(2, state(2)), 5000)).not.toBe("pending");
    expect(await within(mgr.restore(1), 5000)).toEqual(state(1));
    const closed = await within(mgr.close({ timeoutMs: 200 }), 5000);
    expect(closed === "pending" ? "pending" : closed.unreplicated!.map((u) => u.step).sort()).toEqual([1, 2]);
  });

  it("allSteps, latestStep and restore('latest') refuse in time, naming a slower tier whose listing hangs; restore(step), tiers() and reload() answer", async () => {
    // attack34b: a bucket hung since the process started held every query that lists the tiers for good.
    // tiers34c: answering from tier 0 alone named a step older than one the hung tier may hold.
    const { mgr, errors, t1 } = await hungFromTheStart("queries");
    await mgr.save(1, state(1));
    await mgr.save(2, state(2));
    const refused = { code: "storage", context: { path: t1.root }, cause: { code: "timeout" } };
    await expect(within(mgr.allSteps(), 5000)).rejects.toMatchObject(refused);
    await expect(within(mgr.latestStep(), 5000)).rejects.toMatchObject(refused);
    await expect(within(mgr.latestStep({ verified: true }), 5000)).rejects.toMatchObject(refused);
    await expect(within(mgr.restore("latest", state(0)), 5000)).rejects.toMatchObject(refused);
    expect(await within(mgr.restore(2), 5000)).toEqual(state(2));
    const states = await within(mgr.tiers(), 5000);
    expect(states === "pending" ? "pending" : states.map((t) => [t.steps, t.listingFailure !== undefined])).toEqual([
      [[1, 2], false],
      [[], true],
    ]);
    expect(await within(mgr.reload(), 5000)).toBeUndefined();
    // The hung tier is reported once, as a listing that timed out.
    const listing = errors.filter((e) => e.tier === 1 && (e.error as { code?: string }).code === "timeout");
    expect(listing).toHaveLength(1);
    expect(await within(mgr.close({ timeoutMs: 200 }), 5000)).not.toBe("pending");
  });

  it("told to answer from the tiers that answered, allSteps, latestStep and restore('latest') answer from tier 0", async () => {
    const { mgr } = await hungFromTheStart("leave-out", { unlistedTiers: "leaveOut" });
    await mgr.save(1, state(1));
    await mgr.save(2, state(2));
    expect(await within(mgr.allSteps(), 5000)).toEqual([1, 2]);
    expect(await within(mgr.latestStep(), 5000)).toBe(2);
    expect(await within(mgr.latestStep({ verified: true }), 5000)).toBe(2);
    expect(
      await within(
        mgr.restore("latest", state(0)).then((r) => r.step),
        5000,
      ),
    ).toBe(2);
    expect(await within(mgr.close({ timeoutMs: 200 }), 5000)).not.toBe("pending");
  });

  it("refuses a listing wait that no timer can hold", () => {
    for (const listingWaitMs of [-1, Number.NaN, 2 ** 31, "5"])
      expect(
        () =>
          new CheckpointManager(["memory://tiered-hang/refused-0", "memory://tiered-hang/refused-1"], 1, {
            replication: { listingWaitMs },
          } as never),
      ).toThrow(/listingWaitMs/);
  });
});
