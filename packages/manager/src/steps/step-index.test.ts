import { type StorageAdapter, openStorage } from "@cairn/core";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import { objectNames as names, smallState as state } from "../testing/small-state.js";

let roots = 0;
const memoryRoot = (): string => `memory://manager-step-index/${process.pid}-${roots++}`;

/** A root already holding steps 1..count, written by another manager. */
async function rootWith(count: number): Promise<StorageAdapter> {
  const inner = await openStorage(memoryRoot());
  const writer = new CheckpointManager(inner, 1, { checkpointOnPreemption: false });
  for (let step = 1; step <= count; step++) await writer.save(step, state(step));
  await writer.close();
  return inner;
}

describe("the manager's step index", () => {
  it.each([
    ["no retention option", {}, 30],
    ["maxToKeep", { maxToKeep: 3 }, 3],
  ])("lists a root of many steps once, whatever the number of saves (%s)", async (_, options, kept) => {
    const storage = new FaultyStorageAdapter(await rootWith(20));
    const mgr = new CheckpointManager(storage, 1, { ...options, checkpointOnPreemption: false });
    expect(await mgr.latestStep()).toBe(20);
    for (let step = 21; step <= 30; step++) {
      await mgr.save(step, state(step));
      expect(await mgr.latestStep()).toBe(step);
    }
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
    expect(storage.calls.list).toEqual([""]);
    const after = await new CheckpointManager(storage, 1, { readOnly: true }).allSteps();
    expect(after).toHaveLength(kept);
    expect(after.at(-1)).toBe(30);
  });

  it("lists nothing at all without a retention option when nobody asks for the steps", async () => {
    const storage = new FaultyStorageAdapter(await rootWith(20));
    const mgr = new CheckpointManager(storage, 1, { checkpointOnPreemption: false });
    for (let step = 21; step <= 25; step++) await mgr.save(step, state(step));
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
    expect(storage.calls.list).toEqual([]);
  });

  it("reads only the newest step's metadata for latestStep() on a new manager", async () => {
    const storage = new FaultyStorageAdapter(await rootWith(12));
    const mgr = new CheckpointManager(storage, 1, { readOnly: true });
    expect(await mgr.latestStep()).toBe(12);
    expect(storage.calls.read).toEqual(["12/metadata.json"]);
    await mgr.close();
  });

  it("sees what another manager committed or deleted only after reload()", async () => {
    const storage = await rootWith(2);
    const watcher = new CheckpointManager(storage, 1, { readOnly: true });
    const trainer = new CheckpointManager(storage, 1, { checkpointOnPreemption: false });
    expect(await watcher.allSteps()).toEqual([1, 2]);
    await trainer.save(3, state(3));
    await trainer.delete(1);
    expect(await watcher.allSteps()).toEqual([1, 2]);
    await watcher.reload();
    expect(await watcher.allSteps()).toEqual([2, 3]);
    expect(await watcher.latestStep()).toBe(3);
    await trainer.close();
    await watcher.close();
  });

  it("deletes, without listing, every file metadata.json names; a stray file is swept once it is old", async () => {
    const inner = await rootWith(0);
    const storage = new FaultyStorageAdapter(inner);
    let now = Date.now();
    const mgr = new CheckpointManager(storage, 1, {
      maxToKeep: 1,
      leftoverAgeMs: 60_000,
      now: () => now,
      checkpointOnPreemption: false,
    });
    await mgr.save(1, state(1));
    await mgr.join();
    // Left by an earlier attempt at step 1 that crashed: metadata.json does not name it.
    await inner.write("1/data-r0-0-0123456789ab.safetensors", new Uint8Array(8));
    await mgr.save(2, state(2));
    await mgr.join();
    expect(await names(inner, "1/")).toEqual(["1/data-r0-0-0123456789ab.safetensors"]);
    expect(storage.calls.list).toEqual([""]);
    now += 120_000;
    await mgr.save(3, state(3));
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
    // One sweep per leftoverAgeMs: it found the stray file, old by then, and deleted it.
    expect(storage.calls.list).toEqual(["", ""]);
    expect(await names(inner, "1/")).toEqual([]);
    expect(await names(inner, "2/")).toEqual([]);
  });

  it("retries a leftover it could not delete on every later pass, without listing again", async () => {
    const inner = await rootWith(0);
    await inner.write("2/data-r0-0-0123456789ab.safetensors", new Uint8Array(8));
    const storage = new FaultyStorageAdapter(inner, [{ operation: "delete", path: (p) => p.startsWith("2/") }]);
    const mgr = new CheckpointManager(storage, 1, {
      maxToKeep: 5,
      leftoverAgeMs: 1000,
      now: () => Date.now() + 3600_000,
      checkpointOnPreemption: false,
    });
    mgr.on("error", () => undefined);
    await mgr.save(3, state(3));
    expect((await mgr.join()).retentionFailures.map((f) => f.step)).toEqual([2]);
    await mgr.save(4, state(4));
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
    expect(await names(inner, "2/")).toEqual([]);
    expect(storage.calls.list).toEqual([""]);
  });

  it("deletes many steps in one pass, and a step that fails stops none of the others", async () => {
    const inner = await rootWith(40);
    const storage = new FaultyStorageAdapter(inner, [{ operation: "delete", path: (p) => p === "7/metadata.json" }]);
    const mgr = new CheckpointManager(storage, 1, { maxToKeep: 2, checkpointOnPreemption: false });
    mgr.on("error", () => undefined);
    await mgr.save(41, state(41));
    const { retentionFailures } = await mgr.join();
    expect(retentionFailures.map((f) => f.step)).toEqual([7]);
    expect(await mgr.allSteps()).toEqual([7, 40, 41]);
    await mgr.save(42, state(42));
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
    expect(await new CheckpointManager(inner, 1, { readOnly: true }).allSteps()).toEqual([41, 42]);
  });
});
