import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { type StorageAdapter, type StorageOptions, isCheckpointError, openStorage } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import type { CheckpointManagerOptions } from "../checkpoint-manager-options.js";
import type { OnExceeded } from "../durability/durability-options.js";
import type { ManagerEvents } from "../events/manager-events.js";
import { runState, sameState } from "./manager-run-suite.js";

/** The durable (last) tier under test, fresh for each test, with a way to take it down. */
export interface DurableTier {
  /** What the manager is given: a URL or an adapter. */
  readonly location: string | StorageAdapter;
  /** Storage on the same root that works during an outage, for damaging files and checking what is there. */
  readonly storage: StorageAdapter;
  /** Makes every request to the tier fail until `end()`. */
  readonly outage: { readonly start: () => void; readonly end: () => void };
}

export interface DurabilitySuiteOptions {
  readonly durable: () => Promise<DurableTier>;
  readonly storageOptions?: () => StorageOptions;
  readonly timeoutMs?: number;
}

/** Cuts the first data file of `step` to half its size: a truncated shard whose metadata still says it is whole. */
export async function truncateDataFile(storage: StorageAdapter, step: number): Promise<string> {
  for await (const object of storage.list(`${step}/`)) {
    const name = object.path.slice(object.path.lastIndexOf("/") + 1);
    if (name === "metadata.json") continue;
    const bytes = await storage.read(object.path);
    await storage.delete(object.path);
    await storage.write(object.path, bytes.subarray(0, bytes.byteLength >> 1));
    return name;
  }
  throw new Error(`step ${step} has no data file under ${storage.root}`);
}

/** The payloads of every `event` the manager emits from now on, in order. */
export function record<E extends keyof ManagerEvents>(mgr: CheckpointManager, event: E): ManagerEvents[E][] {
  const seen: ManagerEvents[E][] = [];
  mgr.on(event, (payload) => seen.push(payload));
  return seen;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function until(check: () => boolean, what: string, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/**
 * The durability contract (docs/reliability.md, "Durability") on a real file:// tier 0 and the
 * durable tier under test: restore("latest") falls back past damaged steps naming the file, every
 * step damaged is `corrupt` listing each, retention keeps the newest verified step while newer
 * ones are not durable, and the loss budget under each `onExceeded` while the tier is down.
 */
export function durabilitySuite(name: string, options: DurabilitySuiteOptions): void {
  describe(`durability: file:// then ${name}`, { timeout: options.timeoutMs ?? 120_000 }, () => {
    async function setup(extra: CheckpointManagerOptions = {}) {
      const dir = await mkdtemp(join(tmpdir(), "cairn-durability-"));
      const local = pathToFileURL(join(dir, "local")).href;
      const durable = await options.durable();
      const settings: CheckpointManagerOptions = {
        replication: { retry: { baseDelayMs: 20, maxDelayMs: 200 } },
        storageOptions: options.storageOptions?.() ?? {},
        checkpointOnPreemption: false,
        ...extra,
      };
      const open = (more: CheckpointManagerOptions = {}): CheckpointManager => {
        const mgr = new CheckpointManager([local, durable.location], 1, { ...settings, ...more });
        // Copies of damaged steps and outages fail on purpose here; health().lastError still sees them.
        mgr.on("error", () => undefined);
        return mgr;
      };
      const localStorage = await openStorage(local);
      const cleanup = async () => {
        durable.outage.end();
        await localStorage.close();
        await rm(dir, { recursive: true, force: true });
      };
      return { dir, local, durable, open, localStorage, cleanup };
    }

    it("restore('latest') falls back past damaged steps, tier by tier, naming each file; all damaged is corrupt", async () => {
      const { durable, open, localStorage, cleanup } = await setup();
      try {
        const mgr = open();
        for (let step = 1; step <= 4; step++) await mgr.save(step, runState(step));
        expect((await mgr.close()).unreplicated).toEqual([]);

        // Newest truncated on both tiers: the previous step is restored, the event names the file.
        const file4 = await truncateDataFile(localStorage, 4);
        const file4Durable = await truncateDataFile(durable.storage, 4);
        const a = open();
        const skipped = record(a, "skipped");
        expect(await a.latestStep({ verified: true })).toBe(3);
        expect(skipped.map((s) => [s.step, s.tier, s.file])).toEqual([
          [4, 0, file4],
          [4, 1, file4Durable],
        ]);
        const target = runState(0);
        const restored = await a.restore("latest", target);
        expect(restored.step).toBe(3);
        expect(sameState(target, runState(3))).toBe(true);
        // 3 verified already and 4 known damaged: nothing is reported twice.
        expect(skipped).toHaveLength(2);
        await a.close();

        // The newest two damaged: the third.
        await truncateDataFile(localStorage, 3);
        await truncateDataFile(durable.storage, 3);
        const b = open();
        const skippedB = record(b, "skipped");
        const third = await b.restore("latest", runState(0));
        expect(third.step).toBe(2);
        expect([...new Set(skippedB.map((s) => s.step))]).toEqual([4, 3]);
        expect(skippedB.every((s) => /size|short|truncat|bytes/i.test(s.reason))).toBe(true);
        await b.close();

        // Every step damaged: corrupt, listing each.
        for (const step of [2, 1]) {
          await truncateDataFile(localStorage, step);
          await truncateDataFile(durable.storage, step);
        }
        const c = open();
        const error = await c.restore("latest", runState(0)).catch((e: unknown) => e);
        expect(isCheckpointError(error, "corrupt")).toBe(true);
        for (const step of [4, 3, 2, 1]) expect((error as Error).message).toContain(`step ${step} (`);
        expect(await c.latestStep({ verified: true })).toBeUndefined();
        await c.close();
      } finally {
        await cleanup();
      }
    });

    it("never lets retention delete the newest verified step while a newer one is damaged or not durable", async () => {
      const { durable, open, localStorage, cleanup } = await setup({ tiers: [{ maxToKeep: 1 }, { maxToKeep: 1 }] });
      try {
        const mgr = open();
        await mgr.save(1, runState(1));
        await mgr.join();
        durable.outage.start();
        await mgr.save(2, runState(2));
        await mgr.save(3, runState(3));
        await mgr.join();
        // 1 is the newest step both verified and durable: tier 0 keeps it while 2 and 3 are only there.
        expect((await mgr.tiers())[0]!.steps).toEqual([1, 2, 3]);
        expect(mgr.health().newestDurable).toBe(1);
        // The newest step is damaged on tier 0 before the bucket returns: its copy fails, 2's succeeds.
        await truncateDataFile(localStorage, 3);
        durable.outage.end();
        await mgr.close({ timeoutMs: 30_000 });
        const onDurable = new CheckpointManager(durable.location, 1, {
          readOnly: true,
          storageOptions: options.storageOptions?.() ?? {},
        });
        // 2 reached the bucket and verified; 3 never became durable, so 2 stays whatever maxToKeep says.
        expect(await onDurable.allSteps()).toContain(2);
        const target = runState(0);
        const restored = await onDurable.restore("latest", target);
        expect(restored.step).toBe(2);
        expect(sameState(target, runState(2))).toBe(true);
        await onDurable.close();
      } finally {
        await cleanup();
      }
    });

    for (const onExceeded of ["warn", "block", "fail"] as const satisfies readonly OnExceeded[]) {
      it(`with the bucket down longer than maxSecondsAtRisk, onExceeded "${onExceeded}": the loop sees it, nothing is lost`, async () => {
        const { durable, open, cleanup } = await setup({ durability: { maxSecondsAtRisk: 0.3, onExceeded } });
        try {
          const mgr = open();
          const budget = record(mgr, "lossBudget");
          expect(await mgr.save(1, runState(1))).toBe(true);
          await mgr.join();
          await until(() => !mgr.health().exceeded, "step 1 to be durable");
          expect(mgr.health()).toMatchObject({ newestDurable: 1, stepsAtRisk: 0, exceeded: false });
          // A loaded machine may take longer than the budget to copy step 1: what counts starts here.
          budget.length = 0;
          durable.outage.start();
          expect(await mgr.saveAsync(2, runState(2))).toBe(true);
          await until(() => mgr.health().exceeded, "the budget to be exceeded");
          expect(budget.map((b) => b.exceeded)).toEqual([true]);
          expect(mgr.health()).toMatchObject({ newestSaved: 2, newestDurable: 1, stepsAtRisk: 1 });
          // The budget is time: on a loaded machine it can run out before the adapter gives up its retries.
          await until(() => mgr.health().lastError?.operation === "replication", "the failed copy to be reported");
          const saved: number[] = [1, 2];
          let ended = false;
          if (onExceeded === "warn") {
            expect(await mgr.saveAsync(3, runState(3))).toBe(true);
            saved.push(3);
            durable.outage.end();
          } else if (onExceeded === "block") {
            setTimeout(() => {
              ended = true;
              durable.outage.end();
            }, 300);
            expect(await mgr.saveAsync(3, runState(3))).toBe(true);
            // It waited until the bucket was back and step 2 durable.
            expect(ended).toBe(true);
            expect(mgr.health().newestDurable).toBeGreaterThanOrEqual(2);
            saved.push(3);
          } else {
            const error = await mgr.saveAsync(3, runState(3)).catch((e: unknown) => e);
            expect(isCheckpointError(error, "storage")).toBe(true);
            expect((error as Error).message).toMatch(/loss budget is exceeded/);
            durable.outage.end();
            await until(() => !mgr.health().exceeded, "the budget to be met again");
            expect(await mgr.saveAsync(4, runState(4))).toBe(true);
            saved.push(4);
          }
          expect((await mgr.close({ timeoutMs: 60_000 })).unreplicated).toEqual([]);
          expect(budget.at(-1)?.exceeded).toBe(false);
          const onDurable = new CheckpointManager(durable.location, 1, {
            readOnly: true,
            storageOptions: options.storageOptions?.() ?? {},
          });
          expect(await onDurable.allSteps()).toEqual(saved);
          for (const step of saved) expect(sameState(await onDurable.restore(step), runState(step))).toBe(true);
          await onDurable.close();
        } finally {
          await cleanup();
        }
      });
    }
  });
}
