import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openStorage } from "@cairn/core";
import { afterAll, describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import { smallState as state } from "../testing/small-state.js";

const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

describe("incremental bases (issue 30, item 4)", () => {
  for (const where of ["memory", "file"] as const) {
    it(`a base retention deleted means a full save, never a failed one (after a rollback, ${where}://)`, async () => {
      let root = `memory://incremental-bases/${process.pid}-${where}`;
      if (where === "file") {
        const dir = await mkdtemp(join(tmpdir(), "cairn-bases-"));
        dirs.push(dir);
        root = `file://${dir}`;
      }
      const storage = await openStorage(root);
      const before = new CheckpointManager(storage, 1, { checkpointOnPreemption: false });
      await before.save(1000, state(1000));
      await before.close();
      // Step 1000 stays the newest: retention deletes each new step right after it commits.
      const mgr = new CheckpointManager(storage, 1, { maxToKeep: 1, incremental: true, checkpointOnPreemption: false });
      const failures: unknown[] = [];
      for (let step = 1; step <= 30; step++) {
        const saving = step % 2 === 0 ? mgr.saveAsync(step, state(step)) : mgr.save(step, state(step));
        await saving.catch((error: unknown) => failures.push(error));
      }
      await mgr.join().catch((error: unknown) => failures.push(error));
      expect(failures).toEqual([]);
      expect((await mgr.allSteps()).at(-1)).toBe(1000);
      expect(await mgr.restore(1000)).toEqual(state(1000));
      await mgr.close();
      await storage.close();
    });
  }
});
