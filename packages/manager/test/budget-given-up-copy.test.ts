import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { isCheckpointError, openStorage } from "@cairn/core";
import { describe, expect, it, vi } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import { runState } from "../src/testing/manager-run-suite.js";
import { truncateDataFile } from "../src/testing/durability-suite.js";
import { OutageStorage } from "../src/testing/outage-storage.js";

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const within = <T>(p: Promise<T>, ms: number): Promise<T | "pending"> =>
  Promise.race([p, sleep(ms).then(() => "pending" as const)]);
let n = 0;

async function roots() {
  const dir = await mkdtemp(join(tmpdir(), "budget-"));
  const local = pathToFileURL(join(dir, "local")).href;
  const durableUrl = `memory://budget-budget/${process.pid}-${n++}`;
  return { dir, local, durableUrl, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

const quiet = { checkpointOnPreemption: false, replication: { retry: { baseDelayMs: 20, maxDelayMs: 200 } } } as const;

describe("the loss budget and a copy that can never succeed", { timeout: 120_000 }, () => {
  for (const onExceeded of ["block", "fail"] as const)
    it(`${onExceeded}: step 2 damaged on tier 0 before its copy (bucket briefly down); saves 3 and 4 must go`, async () => {
      const { local, durableUrl, cleanup } = await roots();
      try {
        const outage = new OutageStorage(await openStorage(durableUrl));
        const mgr = new CheckpointManager([local, outage], 1, {
          ...quiet,
          durability: { maxStepsAtRisk: 0, onExceeded },
        });
        mgr.on("error", () => undefined);
        await mgr.save(1, runState(1));
        await mgr.join();
        outage.down = true;
        await mgr.save(2, runState(2));
        const localStorage = await openStorage(local);
        await truncateDataFile(localStorage, 2);
        outage.down = false;
        // Once the bucket is back, the copy of 2 finds it damaged and is given up on (permanent).
        await vi.waitFor(() => expect(mgr.health().inFlight.copying).toEqual([]), { timeout: 20_000, interval: 20 });
        console.log(
          "health",
          JSON.stringify({ ...mgr.health(), lastError: (mgr.health().lastError?.error as Error)?.message }),
        );
        console.log("tiers", JSON.stringify(await mgr.tiers()));
        // The copy of 2 was given up on (permanent): nothing is in flight for it.
        const copying = mgr.health().inFlight.copying;
        const outcomes: string[] = [];
        for (const step of [3, 4])
          outcomes.push(
            await within(
              mgr.save(step, runState(step)).then(
                () => "saved",
                (e: unknown) => (isCheckpointError(e) ? e.code : String(e)),
              ),
              20_000,
            ),
          );
        console.log(onExceeded, "copying after the give-up:", copying, "saves 3, 4:", outcomes);
        // As for a failed save: "block" lets the next save go at once, "fail" throws once, then lets it go.
        expect(outcomes[0]).not.toBe("pending");
        expect(outcomes[1]).toBe("saved");
        expect(copying).toEqual([]);
        await within(mgr.close({ timeoutMs: 5_000 }), 20_000);
        await localStorage.close();
      } finally {
        await cleanup();
      }
    });
});
