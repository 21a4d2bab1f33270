import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { hostTensor, openStorage } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { overwriteUncopiedStep, truncateDataFile } from "@cairn/manager/testing";
import { describe, expect, it } from "vitest";
import { cairn, jsonLines, tempDir } from "./helpers.js";

const state = (v: number) => ({ w: hostTensor("float32", [4096], new Float32Array(4096).fill(v)), step: v });

async function snapshot(dir: string): Promise<string> {
  const out: string[] = [];
  async function walk(d: string): Promise<void> {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else {
        const s = await stat(p);
        out.push(
          `${p} ${s.size} ${s.mtimeMs} ${createHash("sha1")
            .update(await readFile(p))
            .digest("hex")}`,
        );
      }
    }
  }
  await walk(dir);
  return out.sort().join("\n");
}

describe("cairn doctor", { timeout: 120_000 }, () => {
  it("a rollback overwrite of step 2 not yet copied: the bucket's step 2 is the OLD checkpoint, doctor calls it durable", async () => {
    const dir = await tempDir();
    const fast = join(dir, "fast");
    const slow = join(dir, "slow");
    // Roll back to 1 and save a new step 2 while the bucket is down; the process dies before the copy.
    const closed = await overwriteUncopiedStep(fast, pathToFileURL(slow).href, state);
    console.log("unreplicated", JSON.stringify(closed.unreplicated));
    const before = await snapshot(dir);
    const run = await cairn(["doctor", fast, slow, "--json"]);
    const report = jsonLines(run)[0] as { newestDurable: number | null; stepsAtRisk: number | null; steps: unknown };
    console.log("doctor exit", run.code, JSON.stringify(report));
    console.log((await cairn(["doctor", fast, slow])).stdout);
    expect(await snapshot(dir)).toBe(before);
    // Tier 1's step 2 is another checkpoint (the abandoned one): losing tier 0 restores the old weights.
    // Doctor must not count it as the durable copy of the newest step: 1 is the newest durable step.
    expect(report.newestDurable).toBe(1);
    expect(report.stepsAtRisk).toBe(1);
  });

  it("the same, and tier 0's new step 2 truncated: doctor exits 0 saying the newest step verifies", async () => {
    const dir = await tempDir();
    const fast = join(dir, "fast");
    const slow = join(dir, "slow");
    await overwriteUncopiedStep(fast, pathToFileURL(slow).href, state);
    const local = await openStorage(pathToFileURL(fast).href);
    await truncateDataFile(local, 2);
    await local.close();
    const run = await cairn(["doctor", fast, slow, "--json"]);
    console.log("doctor exit", run.code, run.stdout.slice(0, 3000));
    // Step 2 (the checkpoint tier 0 says it is: saved with overwrite after the bucket's) verifies nowhere.
    expect(run.code).toBe(3);
  });

  it("hostile metadata.json as the newest step (deep nesting, __proto__ keys): doctor reports it damaged, exit 3", async () => {
    const dir = await tempDir();
    const root = join(dir, "run");
    const mgr = new CheckpointManager(root, 1, { checkpointOnPreemption: false });
    await mgr.save(1, state(1));
    await mgr.close();
    for (const [step, body] of [
      [5, "[".repeat(200_000) + "]".repeat(200_000)],
      [6, `{"__proto__": {"polluted": true}, "formatVersion": "2.2", "entries": {"__proto__": []}}`],
      [7, `{"constructor": {"prototype": {"polluted": true}}}`],
    ] as const) {
      await mkdir(join(root, String(step)), { recursive: true });
      await writeFile(join(root, String(step), "metadata.json"), body);
    }
    const run = await cairn(["doctor", root, "--json"]);
    console.log("doctor exit", run.code, run.stdout.slice(0, 2000), run.stderr.slice(0, 2000));
    expect(run.code).toBe(3);
    const report = jsonLines(run)[0] as { newestStep: number; newestVerified: number };
    expect(report).toMatchObject({ newestStep: 7, newestVerified: 1 });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it("incremental: the base file of the newest step truncated: doctor says the newest step does not verify (exit 3)", async () => {
    const dir = await tempDir();
    const root = join(dir, "run");
    const two = (a: number, b: number) => ({
      a: hostTensor("float32", [4096], new Float32Array(4096).fill(a)),
      b: hostTensor("float32", [4096], new Float32Array(4096).fill(b)),
    });
    const mgr = new CheckpointManager(root, 1, { checkpointOnPreemption: false, incremental: true });
    await mgr.save(1, two(1, 1));
    await mgr.save(2, two(2, 1));
    await mgr.close();
    const storage = await openStorage(pathToFileURL(root).href);
    await truncateDataFile(storage, 1);
    await storage.close();
    const before = await snapshot(dir);
    const run = await cairn(["doctor", root, "--json"]);
    console.log("doctor exit", run.code, run.stdout.slice(0, 2500));
    expect(await snapshot(dir)).toBe(before);
    expect(run.code).toBe(3);
    expect(jsonLines(run)[0]).toMatchObject({ newestStep: 2, newestVerified: null, ok: false });
  });
});
