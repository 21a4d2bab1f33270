import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CheckpointError, hostTensor, openStorage } from "@cairn/core";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import { examineTiers } from "./tier-examination.js";

const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

describe("examineTiers", () => {
  it("a copy storage cannot read is unverified with its error, not damaged and not thrown; the others are examined", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-examine-"));
    dirs.push(dir);
    const root = join(dir, "run");
    const mgr = new CheckpointManager(root, 1, { checkpointOnPreemption: false });
    for (const step of [1, 2, 3])
      await mgr.save(step, { w: hostTensor("float32", [256], new Float32Array(256).fill(step)) });
    await mgr.close();
    const storage = await openStorage(root);
    const failing = new FaultyStorageAdapter(storage, [
      {
        operation: "read",
        times: 1000,
        path: (p) => p.startsWith("3/data-"),
        error: () => new CheckpointError("permission_denied", "[file] reading step 3's data: EACCES"),
      },
    ]);
    const x = await examineTiers([failing]);
    await storage.close();
    expect(x.steps.map((s) => [s.step, s.verified])).toEqual([
      [1, true],
      [2, true],
      [3, false],
    ]);
    const copy = x.steps[2]!.tiers[0]!;
    expect(copy.error?.code).toBe("permission_denied");
    expect(copy.verified).toBeUndefined();
    expect(x).toMatchObject({ newestStep: 3, newestVerified: 2, newestDurable: 2, stepsAtRisk: 1 });
  });
});
