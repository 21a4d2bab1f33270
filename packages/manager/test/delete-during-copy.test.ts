// A step deleted while replication is busy with it must not come back on a slower tier, nor be
// reported as failing to replicate: a copy whose commit was already sent is waited for and
// cleared, and a discovery whose listing predates the deletion does not queue the step again.
import { type StorageAdapter, openStorage } from "@cairn/core";
import type { ObjectInfo, WriteBody, WriteOptions } from "@cairn/core/storage";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import type { ManagerEvents } from "../src/events/manager-events.js";
import { objectNames, smallState as state } from "../src/testing/small-state.js";

/**
 * Holds the first write of a `metadata.json` (a copy's commit) or the first listing until
 * `release()`. A held write then completes whatever its signal says: a request the server already
 * has is not undone by an abort.
 */
class Gate extends FaultyStorageAdapter {
  #held = false;
  #release: () => void = () => undefined;
  #entered: () => void = () => undefined;
  #passed: () => void = () => undefined;
  /** Resolves once a call is held. */
  readonly entered = new Promise<void>((resolve) => (this.#entered = resolve));
  /** Resolves once the held call has gone through (or failed). */
  readonly passed = new Promise<void>((resolve) => (this.#passed = resolve));
  readonly #opened = new Promise<void>((resolve) => (this.#release = resolve));

  constructor(
    inner: StorageAdapter,
    readonly holds: "commit" | "list",
  ) {
    super(inner);
  }

  release(): void {
    this.#release();
  }

  /** Whether this call is the one held. */
  #hold(what: "commit" | "list"): boolean {
    if (this.#held || what !== this.holds) return false;
    this.#held = true;
    this.#entered();
    return true;
  }

  override async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    if (!path.endsWith("metadata.json") || !this.#hold("commit")) return super.write(path, body, options);
    await this.#opened;
    try {
      return await super.write(path, body, { ...options, signal: undefined });
    } finally {
      this.#passed();
    }
  }

  override async *list(prefix: string): AsyncIterable<ObjectInfo> {
    if (!this.#hold("list")) return yield* super.list(prefix);
    await this.#opened;
    try {
      yield* super.list(prefix);
    } finally {
      this.#passed();
    }
  }
}

let roots = 0;
const root = (): string => `memory://delete-during-copy/${process.pid}-${roots++}`;
const opened: CheckpointManager[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((m) => m.close().catch(() => undefined)));
});

function manager(tiers: StorageAdapter[]): CheckpointManager {
  const replication = tiers.length > 1 ? { replication: { retry: { baseDelayMs: 20, maxDelayMs: 100 } } } : {};
  const mgr = new CheckpointManager(tiers.length > 1 ? tiers : tiers[0]!, 1, {
    checkpointOnPreemption: false,
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
