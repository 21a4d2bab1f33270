import { join } from "node:path";
import { hostTensor } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { describe, expect, it } from "vitest";
import { cairn, jsonLines, tempDir } from "./helpers.js";

/** A manager root of incremental steps 1 and 2: "frozen" never changes, "w" changes in two elements, "bad" holds a NaN. */
async function run(): Promise<string> {
  const root = join(await tempDir(), "run");
  const manager = new CheckpointManager(root, 1, { incremental: true, checkpointOnPreemption: false });
  const frozen = hostTensor(
    "float32",
    [256],
    Float32Array.from({ length: 256 }, (_, i) => i),
  );
  const w1 = [1, -2, 3, 4.5, 0, 8];
  const w2 = [1, -2, 3.5, 4.5, 0, 2];
  for (const [step, w] of [
    [1, w1],
    [2, w2],
  ] as const) {
    await manager.save(step, {
      frozen,
      w: hostTensor("float32", [2, 3], new Float32Array(w)),
      bad: hostTensor("float32", [3], new Float32Array([1, NaN, 3])),
    });
  }
  await manager.close();
  return root;
}

describe("cairn stats", () => {
  it("prints each tensor's figures; --json has them in full, NaN counted apart and marked in the table", async () => {
    const root = await run();
    const json = await cairn(["stats", join(root, "2"), "w", "bad", "--json"]);
    expect(json.code, json.stderr).toBe(0);
    const [result] = jsonLines(json);
    const tensors = result!.tensors as Record<string, unknown>[];
    const w = [1, -2, 3.5, 4.5, 0, 2];
    const mean = w.reduce((a, b) => a + b) / w.length;
    const std = Math.sqrt(w.reduce((a, b) => a + (b - mean) ** 2, 0) / w.length);
    expect(tensors.map((t) => t.name)).toEqual(["w", "bad"]);
    expect(tensors[0]).toMatchObject({ dtype: "float32", shape: [2, 3], min: -2, max: 4.5, nan: 0 });
    expect(tensors[0]!.mean as number).toBeCloseTo(mean, 12);
    expect(tensors[0]!.std as number).toBeCloseTo(std, 12);
    expect(tensors[1]).toMatchObject({ nan: 1, min: 1, max: 3, mean: 2 });
    const text = await cairn(["stats", join(root, "2"), "--bins", "4"]);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^! bad\s+float32/m);
    expect(text.stdout).toMatch(/^w\s+float32\s+\[2,3\]\s+-2\s+4\.5/m);
    expect((await cairn(["stats", join(root, "2"), "--bins", "x"])).code).toBe(2);
    const missing = await cairn(["stats", join(root, "2"), "nope"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("frozen");
  });
});

describe("cairn diff", () => {
  it("lists exactly the changed tensors; the referenced one is identical by reference", async () => {
    const root = await run();
    const json = await cairn(["diff", join(root, "1"), join(root, "2"), "--json"]);
    expect(json.code, json.stderr).toBe(0);
    const [result] = jsonLines(json);
    expect(result).toMatchObject({ identical: 2, changed: 1, added: 0, removed: 0 });
    const entries = result!.entries as Record<string, unknown>[];
    expect(entries.filter((e) => e.status === "changed").map((e) => e.name)).toEqual(["w"]);
    expect(entries.find((e) => e.name === "w")).toMatchObject({
      changedElements: 2,
      maxAbsChange: 6,
      maxRelChange: 0.75,
    });
    expect(entries.find((e) => e.name === "frozen")).toMatchObject({ status: "identical", by: "reference" });
    const text = await cairn(["diff", join(root, "1"), join(root, "2")]);
    expect(text.stdout).toMatch(/^w\s+changed\s+2 of 6 elements, max abs 6, max rel 0\.75$/m);
    expect(text.stdout).toMatch(/^1 changed, 0 added, 0 removed, 2 identical \(\d by reference/m);
  });
});
