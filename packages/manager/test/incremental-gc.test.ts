import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type StorageAdapter, load, openStorage } from "@cairn/core";
import { FaultyStorageAdapter, killTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { random } from "../src/testing/seeded-random.js";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import { StepStore } from "../src/steps/step-store.js";
import { stepDir } from "../src/steps/step-naming.js";
import { sameState } from "../src/testing/index.js";
import { incrementalState } from "./fixtures/incremental-child.js";

const child = fileURLToPath(new URL("./fixtures/incremental-child.ts", import.meta.url));
const SEEDS = (process.env.CAIRN_INCREMENTAL_SEEDS ?? "11,12,13,14").split(",").map(Number);
const OPERATIONS = 24;
const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

/** Every committed step loads exactly as it was saved; resolves the steps. */
async function checkEveryStep(storage: StorageAdapter, what: string): Promise<number[]> {
  const steps = await new StepStore(storage).committedSteps();
  for (const step of steps) {
    const back = await load({ storage, path: stepDir(step) }).catch((error: unknown) => {
      throw new Error(`${what}: step ${step} of ${steps.join(",")} does not load: ${(error as Error).message}`);
    });
    expect(sameState(back, incrementalState(step)), `${what}: step ${step}`).toBe(true);
  }
  return steps;
}

describe("incremental steps under retention, gc, rm and kills (property)", () => {
  for (const seed of SEEDS) {
    it(
      `seed ${seed}: after each of ${OPERATIONS} random operations every committed step loads exactly as saved`,
      { timeout: 240_000 },
      async () => {
        const next = random(seed);
        const pick = (n: number): number => Math.floor(next() * n);
        const dir = await mkdtemp(join(tmpdir(), "cairn-incremental-gc-"));
        dirs.push(dir);
        const root = `file://${dir}/run`;
        const storage = await openStorage(root);
        const log: string[] = [];
        let kills = 0;
        let referencedSeen = 0;
        try {
          for (let op = 0; op < OPERATIONS; op++) {
            const roll = next();
            const latest = (await new StepStore(storage).latestStep()) ?? -1;
            if (roll < 0.45) {
              const maxToKeep = pick(4);
              const fullEvery = 2 + pick(4);
              const manager = new CheckpointManager(storage, 1, {
                maxToKeep,
                incremental: next() < 0.5 ? true : { fullEvery },
                leftoverAgeMs: 1,
                checkpointOnPreemption: false,
              });
              const saves = 1 + pick(3);
              for (let s = 1; s <= saves; s++) {
                const step = latest + s;
                await (next() < 0.5
                  ? manager.saveAsync(step, incrementalState(step))
                  : manager.save(step, incrementalState(step)));
              }
              await manager.close();
              log.push(`save ${saves} from ${latest + 1} keep ${maxToKeep}`);
            } else if (roll < 0.6) {
              const keep = 1 + pick(3);
              await new StepStore(storage).retain({ maxToKeep: keep }, 0, Date.now() + 1000, () => false);
              log.push(`gc keep ${keep}`);
            } else if (roll < 0.72) {
              const store = new StepStore(storage);
              const steps = await store.committedSteps();
              const step = steps[pick(steps.length)];
              if (step !== undefined) await store.deleteStep(step);
              log.push(`rm ${step}`);
            } else if (roll < 0.85) {
              // A deleter dies after a few deletions: its storage fails from then on and it is dropped.
              const nth = 1 + pick(4);
              const faulty = new FaultyStorageAdapter(storage, [{ operation: "delete", nth, times: 1000 }]);
              const store = new StepStore(faulty);
              const steps = await store.committedSteps();
              await (next() < 0.5
                ? store.retain({ maxToKeep: 1 }, 0, Date.now() + 1000, () => false)
                : store.deleteStep(steps[pick(steps.length)] ?? 0).catch(() => undefined));
              log.push(`deleter dies after ${nth - 1} deletions`);
            } else if (kills < 3) {
              kills++;
              const waitMs = 100 + pick(900);
              // Mid-save, mid-commit or mid-retention.
              await killTypeScript(child, [root, String(1 + pick(3)), String(2 + pick(3))], { waitMs });
              log.push(`kill after ${waitMs} ms`);
            }
            const steps = await checkEveryStep(storage, `seed ${seed}, after ${log.join("; ")}`);
            for (const step of steps) {
              const text = new TextDecoder().decode(await storage.read(`${stepDir(step)}/metadata.json`));
              if (text.includes('"dir":')) referencedSeen++;
            }
          }
        } finally {
          await storage.close();
        }
        // The run really made steps that reference others', or it tested nothing.
        expect(referencedSeen, `seed ${seed}: ${log.join("; ")}`).toBeGreaterThan(0);
      },
    );
  }
});
