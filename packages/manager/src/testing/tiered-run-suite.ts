import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { StorageOptions } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import type { ManagerEvents } from "../events/manager-events.js";
import { runState, sameState } from "./manager-run-suite.js";

export interface TieredRunOptions {
  /** A fresh, empty root URL on the bucket for each test. */
  readonly url: () => string;
  readonly storageOptions?: () => StorageOptions;
  /** Makes every request to the bucket fail (503s through the test server's fault proxy) until `end()`. */
  readonly outage: { readonly start: () => void; readonly end: () => void };
  readonly timeoutMs?: number;
}

/**
 * A tiered CheckpointManager run: tier 0 on local disk, tier 1 on the bucket under test. Steps
 * reach the bucket; while it answers 503 saves go on, tier 0 holds what the bucket lacks and the
 * outage is reported once; when it is back the copies catch up, newest first; then tier 0 is
 * wiped (a new node) and a new manager finds and restores the newest step from the bucket.
 */
export function tieredRunSuite(name: string, options: TieredRunOptions): void {
  describe(`tiered CheckpointManager run: file:// then ${name}`, { timeout: options.timeoutMs ?? 180_000 }, () => {
    it("replicates to the bucket, rides out an outage, catches up, and restores from the bucket with tier 0 wiped", async () => {
      const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-run-"));
      const local = pathToFileURL(join(dir, "local")).href;
      const bucket = options.url();
      const storageOptions = options.storageOptions?.() ?? {};
      const tiered = {
        tiers: [{ maxToKeep: 2 }, { maxToKeep: 10 }],
        replication: { retry: { baseDelayMs: 50, maxDelayMs: 500 } },
        storageOptions,
        checkpointOnPreemption: false,
      };
      try {
        const mgr = new CheckpointManager([local, bucket], 1, tiered);
        const errors: ManagerEvents["error"][] = [];
        const replicated: ManagerEvents["replicated"][] = [];
        mgr.on("error", (e) => errors.push(e));
        mgr.on("replicated", (e) => replicated.push(e));
        for (let step = 0; step <= 2; step++)
          expect(step % 2 ? await mgr.saveAsync(step, runState(step)) : await mgr.save(step, runState(step))).toBe(
            true,
          );
        expect(await mgr.join()).toEqual({ retentionFailures: [], unreplicated: [] });
        expect(replicated.map((r) => r.step).sort()).toEqual([0, 1, 2]);

        options.outage.start();
        for (let step = 3; step <= 5; step++) expect(await mgr.save(step, runState(step))).toBe(true);
        const during = await mgr.join();
        expect(during.unreplicated?.map((u) => u.step)).toEqual([5, 4, 3]);
        expect(errors.filter((e) => e.operation === "replication")).toHaveLength(1);
        const states = await mgr.tiers();
        // maxToKeep 2 on tier 0, but 3 is held until the bucket has it, and 2 (the newest step
        // verified and on the bucket) while no newer one is there.
        expect(states[0]!.steps).toEqual([2, 3, 4, 5]);
        expect(states[1]!.pending).toEqual([5, 4, 3]);

        const before = replicated.length;
        options.outage.end();
        expect((await mgr.close({ timeoutMs: 120_000 })).unreplicated).toEqual([]);
        expect(replicated.slice(before).map((r) => r.step)).toEqual([5, 4, 3]);

        const bucketOnly = new CheckpointManager(bucket, 1, { readOnly: true, storageOptions });
        expect(await bucketOnly.allSteps()).toEqual([0, 1, 2, 3, 4, 5]);
        await bucketOnly.close();

        await rm(join(dir, "local"), { recursive: true });
        const next = new CheckpointManager([local, bucket], 1, tiered);
        expect(await next.latestStep()).toBe(5);
        expect(sameState(await next.restore(5), runState(5))).toBe(true);
        const target = runState(0);
        await next.restore(4, target);
        expect(sameState(target, runState(4))).toBe(true);
        expect((await next.close()).unreplicated).toEqual([]);
      } finally {
        options.outage.end();
        await rm(dir, { recursive: true, force: true });
      }
    });
  });
}
