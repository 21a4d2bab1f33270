import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { spawnTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/index.js";
import { runState, sameState } from "../src/testing/index.js";

const child = fileURLToPath(new URL("./fixtures/replication-child.ts", import.meta.url));
const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

/** Runs the child until it printed a line matching `until`, then SIGKILLs it; resolves everything it printed. */
function runUntil(args: string[], until: RegExp): Promise<string> {
  const proc = spawnTypeScript(child, args);
  let out = "";
  let err = "";
  proc.stderr?.on("data", (d: Buffer) => (err += d.toString()));
  return new Promise((resolve, reject) => {
    proc.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      // Both the stall and the commits it races with are in: kill it mid-copy.
      if (until.test(out) && /committed 3/.test(out)) proc.kill("SIGKILL");
    });
    proc.once("error", reject);
    proc.once("close", (code, signal) =>
      signal === "SIGKILL" ? resolve(out) : reject(new Error(`the child exited ${code}: ${err}`)),
    );
  });
}

describe("replication after a crash", () => {
  it(
    "a process SIGKILLed mid-copy leaves nothing listed on the bucket, and a new manager finishes the copies",
    { timeout: 120_000 },
    async () => {
      const dir = await mkdtemp(join(tmpdir(), "cairn-replication-crash-"));
      dirs.push(dir);
      const local = pathToFileURL(join(dir, "local")).href;
      const bucket = pathToFileURL(join(dir, "bucket")).href;
      const out = await runUntil([local, bucket], /stalled \d+\/.*\.safetensors/);
      expect(out).toMatch(/committed 3/);
      expect(out).not.toMatch(/replicated [23]/);

      // The half-written copies are not steps on the bucket.
      const before = new CheckpointManager(bucket, 1, { readOnly: true });
      const listed = await before.allSteps();
      expect(listed.every((s) => s === 1)).toBe(true);
      await before.close();

      const next = new CheckpointManager([local, bucket], 1, { checkpointOnPreemption: false });
      const replicated: number[] = [];
      next.on("replicated", ({ step }) => replicated.push(step));
      expect(await next.latestStep()).toBe(3);
      expect((await next.close({ timeoutMs: 60_000 })).unreplicated).toEqual([]);
      expect(replicated.sort()).toEqual([1, 2, 3].filter((s) => !listed.includes(s)));

      const after = new CheckpointManager(bucket, 1, { readOnly: true });
      expect(await after.allSteps()).toEqual([1, 2, 3]);
      for (const step of [1, 2, 3])
        expect(sameState(await after.restore(step), runState(step)), `step ${step}`).toBe(true);
      await after.close();
    },
  );
});
