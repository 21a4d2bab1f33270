import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { random } from "./seeded-random.js";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import { sameState } from "../src/testing/index.js";
import { stateOf } from "./fixtures/crash-child.js";

const child = fileURLToPath(new URL("./fixtures/crash-child.ts", import.meta.url));
const KILLS = 32;
let dir: string;
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/**
 * Kills a saving child (with the given staging) `waitMs` after it prints `after`: "ready" (about to save: the kill may
 * land anywhere from its first save on, while its upload worker starts) or "committed" (its
 * first checkpoint is in: the kill lands among later saves, whatever the worker took to start).
 */
async function killAtRandom(
  root: string,
  waitMs: number,
  after: "ready" | "committed",
  staging: "copy" | "reference",
): Promise<void> {
  const proc = spawnTypeScript(child, [root, staging]);
  let stderr = "";
  let stdout = "";
  proc.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  await new Promise<void>((resolve, reject) => {
    proc.stdout?.on("data", (d: Buffer) => {
      stdout += d.toString();
      if (stdout.includes(`${after}\n`)) resolve();
    });
    proc.once("exit", (code) => reject(new Error(`the saving child exited early (${code}): ${stderr}`)));
  });
  await new Promise((r) => setTimeout(r, waitMs));
  const exited = new Promise((r) => proc.once("exit", r));
  proc.kill("SIGKILL");
  await exited;
}

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
        await killAtRandom(
          root,
          Math.floor(next() * 400),
          kill % 2 === 0 ? "ready" : "committed",
          kill % 4 < 2 ? "copy" : "reference",
        );
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
