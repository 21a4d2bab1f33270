import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { killTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { random } from "../src/testing/seeded-random.js";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import { sameState } from "../src/testing/index.js";
import { stateOf } from "./fixtures/crash-child.js";

const child = fileURLToPath(new URL("./fixtures/crash-child.ts", import.meta.url));
// Five of each staging × moment pair; the seed changes every run, so runs add up.
const KILLS = 20;
let dir: string;
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("crash consistency", () => {
  it(
    `after each of ${KILLS} SIGKILLs at random moments, only complete steps are listed and each restores bit-exactly`,
    { timeout: 300_000 },
    async () => {
      dir = await mkdtemp(join(tmpdir(), "cairn-crash-"));
      const root = `file://${dir}/run`;
      const seed = Number(process.env.CAIRN_CRASH_SEED ?? Date.now() % 1e9);
      const next = random(seed);
      let restored = 0;
      let latest = -1;
      for (let kill = 0; kill < KILLS; kill++) {
        // Each pair of children with copy staging, the next pair with reference staging (whose held tfjs tensors are copied in the background).
        // The kill comes after "ready" (about to save: anywhere from its first save on, while its upload worker starts)
        // or "committed" (its first checkpoint is in: among later saves, whatever the worker took to start).
        await killTypeScript(child, [root, kill % 4 < 2 ? "copy" : "reference"], {
          after: kill % 2 === 0 ? "ready" : "committed",
          waitMs: Math.floor(next() * 400),
        });
        const manager = new CheckpointManager(root, 1, { checkpointOnPreemption: false, readOnly: true });
        const steps = await manager.allSteps();
        for (const step of steps) {
          const back = await manager.restore(step);
          expect(sameState(back, stateOf(step)), `step ${step} after kill ${kill} (seed ${seed})`).toBe(true);
          restored++;
        }
        latest = Math.max(latest, steps.at(-1) ?? -1);
        await manager.close();
      }
      // The loop made progress across restarts (every other child committed at least once), and restores really happened.
      expect(latest, `seed ${seed}`).toBeGreaterThan(KILLS / 2);
      expect(restored).toBeGreaterThan(KILLS);
    },
  );
});
