// A deletion of a step started while a save of that step is being written (attack34b): the
// deletion listed the step's directory and swept the data files the save was writing, and the
// save then committed a metadata.json naming them: `save` resolved true for a step no load can
// read, and allSteps() listed it. Now one of the two runs after the other, and wins whole.
import { openStorage } from "@cairn/core";
import { afterEach, describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import { Gate } from "../src/testing/gated-storage.js";
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
