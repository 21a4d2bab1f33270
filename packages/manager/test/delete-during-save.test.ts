// A deletion of a step started while a save of that step is being written (attack34b): the
// deletion listed the step's directory and swept the data files the save was writing, and the
// save then committed a metadata.json naming them: `save` resolved true for a step no load can
// read, and allSteps() listed it. Now one of the two runs after the other, and wins whole.
// Likewise a save of a step whose removal by retention is in flight (its metadata.json's delete
// request sent, not answered): the request landed after the new commit and deleted it.
import { type StorageAdapter, openStorage } from "@cairn/core";
import { afterEach, describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import { Gate, PathGate } from "../src/testing/gated-storage.js";
import { smallState as state } from "../src/testing/small-state.js";
import { listedValues } from "../src/testing/step-values.js";

let roots = 0;
const root = (): string => `memory://delete-during-save/${process.pid}-${roots++}`;
const releases: (() => void)[] = [];
afterEach(() => {
  for (const release of releases.splice(0)) release();
});

describe("delete(step) while a save of that step is written", () => {
  for (const overwrite of [false, true])
    it(`${overwrite ? "an overwrite" : "a new step"}: the step is whole or gone, and listed as it is`, async () => {
      const inner = await openStorage(root());
      if (overwrite) {
        const before = new CheckpointManager(inner, 1, { checkpointOnPreemption: false });
        await before.save(1, state(1));
        await before.close();
      }
      const gate = new Gate(inner, "commit");
      releases.push(() => gate.release());
      const mgr = new CheckpointManager(gate, 1, { checkpointOnPreemption: false });
      const errors: unknown[] = [];
      mgr.on("error", (e) => errors.push(e.error));
      // The save's commit is held: its data files are written, its metadata.json not yet.
      const saving = mgr.save(1, state(2), { overwrite });
      await gate.entered;
      const deleting = mgr.delete(1);
      await new Promise((resolve) => setTimeout(resolve, 20));
      gate.release();
      expect(await saving).toBe(true);
      await deleting;
      // The deletion came second: it waited for the save, then deleted the step whole.
      expect(await listedValues(inner)).toEqual(new Map());
      expect(await mgr.allSteps()).toEqual([]);
      await mgr.close();
      expect(errors).toEqual([]);
      await inner.close();
    });
});

/**
 * A manager keeping the two best steps by loss, over a storage whose first call on step 1's
 * metadata.json after `gate.arm()` is held until `gate.release()`; its errors collected.
 */
async function bestOfTwo(): Promise<{
  inner: StorageAdapter;
  gate: PathGate;
  mgr: CheckpointManager;
  errors: unknown[];
}> {
  const inner = await openStorage(root());
  const gate = new PathGate(inner, "1/metadata.json");
  releases.push(() => gate.release());
  const mgr = new CheckpointManager(gate, 1, {
    checkpointOnPreemption: false,
    maxToKeep: 2,
    bestFn: (m) => m.loss,
    bestMode: "min",
  });
  const errors: unknown[] = [];
  mgr.on("error", (e) => errors.push(e.error));
  return { inner, gate, mgr, errors };
}

describe("a save of a step retention is deleting", () => {
  it("commits after retention's removal of the older checkpoint ended, and keeps it", async () => {
    const { inner, gate, mgr, errors } = await bestOfTwo();
    await mgr.save(1, state(1), { metrics: { loss: 3 } });
    await mgr.save(2, state(2), { metrics: { loss: 2 } });
    gate.arm();
    await mgr.save(3, state(3), { metrics: { loss: 1 } });
    // Retention removes step 1, the worst: its metadata.json's deletion is held in flight.
    await gate.entered;
    // Step 1 saved again, now the best: retention keeps it.
    const saving = mgr.save(1, state(11), { metrics: { loss: 0.5 }, overwrite: true });
    await new Promise((resolve) => setTimeout(resolve, 20));
    gate.release();
    expect(await saving).toBe(true);
    expect(await mgr.join()).toEqual({ retentionFailures: [] });
    expect(await listedValues(inner)).toEqual(
      new Map([
        [1, 11],
        [3, 3],
      ]),
    );
    expect(await mgr.allSteps()).toEqual([1, 3]);
    await mgr.close();
    expect(errors).toEqual([]);
    await inner.close();
  });

  it("a pass that decided to delete the older checkpoint leaves the new one alone", async () => {
    const { inner, gate, mgr, errors } = await bestOfTwo();
    await mgr.save(5, state(5), { metrics: { loss: 0.1 } });
    await mgr.join();
    await mgr.save(1, state(1), { metrics: { loss: 3 } });
    gate.arm();
    await mgr.save(2, state(2), { metrics: { loss: 2 } });
    // Retention decided to remove step 1 and reads its metadata (which files it has) first: held.
    await gate.entered;
    expect(await mgr.save(1, state(11), { metrics: { loss: 0.5 }, overwrite: true })).toBe(true);
    gate.release();
    expect(await mgr.join()).toEqual({ retentionFailures: [] });
    expect(await listedValues(inner)).toEqual(
      new Map([
        [1, 11],
        [5, 5],
      ]),
    );
    await mgr.close();
    expect(errors).toEqual([]);
    await inner.close();
  });
});

describe("saves and deletions of one step called without waiting", () => {
  for (const tiers of [1, 2])
    it(`take effect in the order they were called (${tiers} ${tiers === 1 ? "tier" : "tiers"})`, async () => {
      const [a, b] = [await openStorage(root()), await openStorage(root())];
      const mgr = new CheckpointManager(tiers === 1 ? a : [a, b], 1, { checkpointOnPreemption: false });
      const errors: unknown[] = [];
      mgr.on("error", (e) => errors.push(e.error));
      // On the code before, the deletion ran first (the save was still opening storage) and step 1 stayed.
      const calls = [mgr.saveAsync(1, state(1)), mgr.delete(1)];
      await Promise.all(calls);
      expect(await mgr.allSteps()).toEqual([]);
      const again = [mgr.saveAsync(1, state(2)), mgr.delete(1), mgr.save(1, state(3))];
      await Promise.all(again);
      expect(await mgr.join()).toMatchObject({ retentionFailures: [] });
      expect(await mgr.allSteps()).toEqual([1]);
      expect(await listedValues(a)).toEqual(new Map([[1, 3]]));
      if (tiers === 2) expect(await listedValues(b)).toEqual(new Map([[1, 3]]));
      await mgr.close();
      expect(errors).toEqual([]);
      await Promise.all([a.close(), b.close()]);
    });
});
