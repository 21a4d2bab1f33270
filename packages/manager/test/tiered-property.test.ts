// Issue 30: a seeded property test of tiered managers, in the spirit of incremental-gc.test.ts.
// Random sessions of saves (some incremental, some after a rollback, some while tier 1 is down),
// other runs' and damaged copies planted on tier 1, and SIGKILLed saving processes. After every
// operation: every step either tier lists restores with bytes that were saved for that step
// number (on tier 0, the latest save's), and every step's latest save still has a good copy on
// some tier (no tier deleted its last one). Tier 1's first listing is held past listingWaitMs in
// some sessions: latestStep() then refuses, or (told to) names tier 0's newest, never an older one.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { CheckpointError, type StorageAdapter, isCheckpointError, openStorage, save } from "@cairn/core";
import { killTypeScript } from "@cairn/core/testing";
import { OutageStorage } from "../src/testing/outage-storage.js";
import { Gate } from "../src/testing/gated-storage.js";
import { StepStore } from "../src/steps/step-store.js";
import { afterAll, describe, expect, it } from "vitest";
import { random } from "../src/testing/seeded-random.js";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import { smallState } from "../src/testing/small-state.js";
import { listedValues } from "../src/testing/step-values.js";

const child = fileURLToPath(new URL("./fixtures/tiered-property-child.ts", import.meta.url));
const SEEDS = (process.env.CAIRN_TIERED_SEEDS ?? "31,32").split(",").map(Number);
const OPERATIONS = 16;
const fast = { baseDelayMs: 20, maxDelayMs: 100 };
const dirs: string[] = [];

/**
 * The manager's `latestStep()`, checked: never older than the newest step committed on either
 * tier (`on`), unless told to leave out a tier whose listing is late (then tier 0's newest); a
 * refusal only while that listing is held, after which the newest is named.
 */
async function latestStep(
  mgr: CheckpointManager,
  on: readonly [StorageAdapter, StorageAdapter],
  stalled: Gate | undefined,
  leaveOut: boolean,
  what: string,
): Promise<number> {
  const [on0, on1] = await Promise.all(on.map((storage) => new StepStore(storage).committedSteps()));
  const newest = Math.max(0, ...on0!, ...(leaveOut ? [] : on1!));
  const latest = await mgr.latestStep().catch(async (error: unknown) => {
    expect(stalled !== undefined && !leaveOut && isCheckpointError(error, "storage"), `${what}: ${error}`).toBe(true);
    stalled!.release();
    await stalled!.passed;
    return mgr.latestStep();
  });
  stalled?.release();
  expect(latest ?? 0, `${what}: latestStep() named ${latest} while step ${newest} is committed`).toBe(newest);
  return latest ?? 0;
}
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

describe("tiered managers under saves, rollbacks, planted copies, outages and kills (property)", () => {
  for (const seed of SEEDS) {
    it(
      `seed ${seed}: after each of ${OPERATIONS} random operations every listed copy holds its step's bytes, and no last good copy is gone`,
      {
        timeout: 300_000,
      },
      async () => {
        const next = random(seed);
        const stalls = random(seed + 7919);
        const pick = (n: number): number => Math.floor(next() * n);
        const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-property-"));
        dirs.push(dir);
        const [local, bucket] = [pathToFileURL(join(dir, "local")).href, pathToFileURL(join(dir, "bucket")).href];
        const t0 = await openStorage(local);
        const t1 = await openStorage(bucket);
        /** Per step: the values any save (or planted copy) gave it since it was last overwritten. */
        const allowed = new Map<number, Set<number>>();
        /** Per step: the value of its latest save by a manager of this run. */
        const current = new Map<number, number>();
        const log: string[] = [];
        let generation = 1;
        /** Whether another run or a killed process wrote tier 1 since the last session. */
        let written = false;
        const allow = (step: number, value: number, reset = false): void => {
          const set = reset ? new Set<number>() : (allowed.get(step) ?? new Set<number>());
          set.add(value);
          allowed.set(step, set);
        };
        const newest = (): number => Math.max(0, ...allowed.keys());
        try {
          for (let op = 0; op < OPERATIONS; op++) {
            const roll = next();
            generation++;
            if (roll < 0.5) {
              const bucketNow = new OutageStorage(t1);
              // Drawn from their own stream (the seeds' other operations stay what they were), and
              // always after another writer reached tier 1: it may then hold a step tier 0 lacks.
              const stalled = stalls() < 0.5 || written ? new Gate(bucketNow, "list") : undefined;
              const leaveOut = stalled !== undefined && stalls() < 0.3;
              written = false;
              const mgr = new CheckpointManager([t0, stalled ?? bucketNow], 1, {
                checkpointOnPreemption: false,
                tiers: [{ maxToKeep: 1 + pick(3) }],
                ...(next() < 0.4 ? { incremental: true } : {}),
                replication: {
                  retry: fast,
                  ...(stalled ? { listingWaitMs: 50 } : {}),
                  ...(leaveOut ? { unlistedTiers: "leaveOut" as const } : {}),
                },
              });
              mgr.on("error", () => undefined);
              const outage = next() < 0.3;
              const downAt = outage ? pick(3) : -1;
              let start =
                (await latestStep(mgr, [t0, t1], stalled, leaveOut, `seed ${seed}, after ${log.join("; ")}`)) + 1;
              if (stalled) log.push(`tier 1 listed late${leaveOut ? " (leaveOut)" : ""}`);
              let overwrite = false;
              if (start > 3 && next() < 0.3) {
                const back = 1 + pick(start - 2);
                const restored = (await mgr.restore(back).catch((error: unknown) => {
                  // A step whose one copy is a damaged one planted on tier 1 (the saves of it were killed) cannot be restored.
                  if (allowed.get(back)?.size === 0 && error instanceof CheckpointError && error.code === "corrupt")
                    return undefined;
                  throw error;
                })) as { step: number } | undefined;
                if (restored)
                  expect(
                    allowed.get(back)?.has(restored.step),
                    `seed ${seed}: restore(${back}) after ${log.join("; ")}`,
                  ).toBe(true);
                overwrite = next() < 0.6;
                start = back + 1;
                log.push(`rollback to ${back}${overwrite ? " with overwrite" : ""}`);
              }
              const saves = 1 + pick(3);
              for (let i = 0; i < saves; i++) {
                if (i === downAt) bucketNow.down = true;
                const step = start + i;
                const value = generation * 1000 + step;
                const saving =
                  next() < 0.5
                    ? mgr.save(step, smallState(value), { overwrite })
                    : mgr.saveAsync(step, smallState(value), { overwrite });
                const ok = await saving.then(
                  () => true,
                  (error: unknown) => {
                    if (!(error instanceof CheckpointError && error.code === "already_exists")) throw error;
                    return false;
                  },
                );
                if (ok) {
                  allow(step, value, overwrite);
                  current.set(step, value);
                }
                log.push(`${ok ? "saved" : "refused"} ${step}${bucketNow.down ? " (tier 1 down)" : ""}`);
              }
              if (outage && next() < 0.5) bucketNow.down = false;
              await mgr.join().catch(() => undefined);
              await mgr.close({ timeoutMs: bucketNow.down ? 100 : 10_000 });
            } else if (roll < 0.75) {
              written = true;
              const step = newest() + 1 + pick(3);
              if (next() < 0.5) {
                const value = 900_000 + step;
                await save(smallState(value), { storage: t1, path: String(step) });
                allow(step, value);
                log.push(`another run's ${step} on tier 1`);
              } else {
                const scratch = await openStorage(`memory://tiered-property/${seed}-${op}`);
                await save(smallState(-1), { storage: scratch, path: "x" });
                const bytes = await scratch.read("x/metadata.json");
                await t1.write(`${step}/metadata.json`, bytes.subarray(0, bytes.length >> 1));
                await scratch.close();
                allowed.set(step, allowed.get(step) ?? new Set());
                log.push(`damaged ${step} on tier 1`);
              }
            } else {
              written = true;
              const from = newest() + 1;
              const count = 2 + pick(3);
              const waitMs = 300 + pick(1500);
              await killTypeScript(
                child,
                [local, bucket, String(from), String(count), String(generation), String(1 + pick(2))],
                { waitMs },
              );
              const [on0, on1] = [await listedValues(t0), await listedValues(t1)];
              for (let step = from; step < from + count; step++) {
                const value = generation * 1000 + step;
                if (on0.get(step) === value || on1.get(step) === value) {
                  allow(step, value);
                  current.set(step, value);
                }
              }
              log.push(`kill after ${waitMs} ms saving ${from}..${from + count - 1}`);
            }
            const what = `seed ${seed}, after ${log.join("; ")}`;
            const [on0, on1] = [await listedValues(t0), await listedValues(t1)];
            for (const [tier, copies] of [
              [0, on0],
              [1, on1],
            ] as const) {
              for (const [step, value] of copies) {
                expect(allowed.get(step)?.has(value), `${what}: tier ${tier} step ${step} holds ${value}`).toBe(true);
                if (tier === 0 && current.has(step))
                  expect(value, `${what}: tier 0 step ${step} is not its latest save`).toBe(current.get(step));
              }
            }
            for (const [step, value] of current)
              expect(
                on0.get(step) === value || on1.get(step) === value,
                `${what}: step ${step} (${value}) has no copy left`,
              ).toBe(true);
          }
        } finally {
          await Promise.all([t0.close(), t1.close()]);
        }
      },
    );
  }
});
