import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { type HostTensor, hostTensor, isCheckpointError, openStorage } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import { truncateDataFile } from "../src/testing/durability-suite.js";

const quiet = { checkpointOnPreemption: false } as const;
const state = (a: number, b: number) => ({
  a: hostTensor("float32", [8192], new Float32Array(8192).fill(a)),
  b: hostTensor("float32", [8192], new Float32Array(8192).fill(b)),
});

describe("incremental steps whose base is damaged", { timeout: 120_000 }, () => {
  it("latestStep({verified}) and restore('latest') pass over a step whose base file is truncated", async () => {
    const dir = await mkdtemp(join(tmpdir(), "incr-damaged-"));
    try {
      const root = pathToFileURL(dir).href;
      const mgr = new CheckpointManager(root, 1, { ...quiet, incremental: true });
      await mgr.save(1, state(1, 1));
      await mgr.save(2, state(2, 2));
      await mgr.save(3, state(3, 2)); // b unchanged: 3 references 2's file for b
      await mgr.close();
      const storage = await openStorage(root);
      await truncateDataFile(storage, 2);
      await storage.close();
      const next = new CheckpointManager(root, 1, { ...quiet, incremental: true });
      const skipped: string[] = [];
      next.on("skipped", (s) => skipped.push(`${s.step}/${s.tier} ${s.file}: ${s.reason}`));
      const verified = await next.latestStep({ verified: true });
      const target = state(0, 0);
      const restored = await next.restore("latest", target).then(
        (r) => `step ${r.step}`,
        (e: unknown) => (isCheckpointError(e) ? e.code : String(e)),
      );
      console.log(
        "verified",
        verified,
        "restored",
        restored,
        "a,b =",
        (target.a as HostTensor).data[0],
        (target.b as HostTensor).data[0],
      );
      console.log("skipped", skipped);
      // Then a new incremental save on top: it must not reference the damaged base.
      const attempts: string[] = [];
      for (const step of [4, 5, 6])
        attempts.push(
          await next.save(step, state(step, 2)).then(
            () => `${step} saved`,
            (e: unknown) => `${step} ${isCheckpointError(e) ? e.code : String(e)}`,
          ),
        );
      console.log(
        "saves after the restore:",
        attempts,
        "health",
        JSON.stringify({ ...next.health(), lastError: undefined }),
      );
      await next.close();
      const check = new CheckpointManager(root, 1, quiet);
      const t4 = state(0, 0);
      const r4 = await check.restore(6, t4).then(
        () => "ok",
        (e: unknown) => (isCheckpointError(e) ? e.code : String(e)),
      );
      console.log("restore 4:", r4);
      await check.close();
      expect(verified).toBe(1);
      expect(restored).toBe("step 1");
      expect(attempts).toEqual(["4 saved", "5 saved", "6 saved"]);
      expect(r4).toBe("ok");
    } finally {
      await rm(dir, { recursive: true, force: true, maxRetries: 5 });
    }
  });

  it("same manager: its base truncated after commit, the next saves are full ones, never failed ones", async () => {
    const dir = await mkdtemp(join(tmpdir(), "incr-damaged-"));
    try {
      const root = pathToFileURL(dir).href;
      const mgr = new CheckpointManager(root, 1, { ...quiet, incremental: true });
      await mgr.save(1, state(1, 1));
      await mgr.save(2, state(2, 2));
      const storage = await openStorage(root);
      await truncateDataFile(storage, 2);
      await storage.close();
      const attempts: string[] = [];
      for (const step of [3, 4, 5])
        attempts.push(
          await mgr.save(step, state(step, 2)).then(
            () => `${step} saved`,
            (e: unknown) => `${step} ${isCheckpointError(e) ? e.code : String(e)}`,
          ),
        );
      console.log("same manager, saves after the base was damaged:", attempts);
      await mgr.close();
      expect(attempts).toEqual(["3 saved", "4 saved", "5 saved"]);
    } finally {
      await rm(dir, { recursive: true, force: true, maxRetries: 5 });
    }
  });
});
