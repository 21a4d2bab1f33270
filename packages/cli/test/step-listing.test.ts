import { join } from "node:path";
import { hostTensor, readMetadata } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { describe, expect, it } from "vitest";
import { cairn, jsonLines, tempDir } from "./helpers.js";

/** Steps 1, 2, 3 of an incremental run (2 and 3 reference step 1's "frozen"), each with a loss. */
async function incrementalRoot(): Promise<string> {
  const root = join(await tempDir(), "run");
  const manager = new CheckpointManager(root, 1, { incremental: true, checkpointOnPreemption: false });
  const frozen = hostTensor("float32", [1024], new Float32Array(1024).fill(3));
  for (const step of [1, 2, 3]) {
    const trained = hostTensor("float32", [16], new Float32Array(16).fill(step));
    await manager.save(step, { frozen, trained }, { metrics: { loss: 1 / step } });
  }
  await manager.close();
  return root;
}

describe("the step listing (cairn ls, cairn ui)", () => {
  it("gives an incremental step's referenced bytes beside its written ones, and each step's save duration", async () => {
    const root = await incrementalRoot();
    const run = await cairn(["ls", root, "--json"]);
    expect(run.code, run.stderr).toBe(0);
    const steps = jsonLines(run)[0]!.steps as Record<string, unknown>[];
    const first = await readMetadata(join(root, "1"));
    const third = await readMetadata(join(root, "3"));
    // Of step 1's file, step 3 uses its header and the frozen tensor (4 KiB).
    const [file] = Object.values(third.files).filter((f) => f.dir === "1");
    const referenced = 8 + file!.headerLength + 4096;
    expect(steps[0]!.referencedBytes).toBe(0);
    expect(steps[2]!.referencedBytes).toBe(referenced);
    // Written: step 3's own data files and its metadata.json, never the 4 KiB it references.
    expect(steps[2]!.bytes as number).toBeLessThan(referenced);
    for (const [i, metadata] of [first, third].entries()) {
      const expected = (Date.parse(metadata.createdAt) - Date.parse(metadata.user.savedAt as string)) / 1000;
      expect(steps[i * 2]!.saveSeconds).toBe(expected);
    }
    expect(steps.map((s) => s.metrics)).toEqual([{ loss: 1 }, { loss: 0.5 }, { loss: 1 / 3 }]);
  });
});
