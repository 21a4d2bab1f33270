import { describe, expect, it } from "vitest";
import { seededRandom } from "../testing/seeded-random.js";
import { DefaultSavePlanner } from "../plan/default-save-planner.js";
import { flattenStateDict } from "../state/flatten.js";
import type { StateDict } from "../state/state-dict.js";
import { hostTensor } from "../state/tensors.js";
import type { TensorLike } from "../state/tensors.js";
import { type StagingLayout, type StagingStrategy, stagingPlan } from "./staging-plan.js";
import { StagingPool } from "./staging-pool.js";

/** A tfjs-like tensor that reference staging can clone. */
function tfjsLike(length: number): TensorLike & { clone(): TensorLike & { dispose(): void } } {
  const tensor = {
    shape: [length],
    dtype: "float32",
    data: async () => new Float32Array(length),
    clone: () => ({ ...tensor, dispose: () => undefined }),
  };
  return tensor;
}

interface Spec {
  kind: "host" | "tfjs" | "blob" | "value" | "shard";
  dtype: "float32" | "int32" | "uint8";
  length: number;
  value: number;
}

function stateOf(specs: ReadonlyMap<string, Spec>): StateDict {
  const state: StateDict = {};
  for (const [key, s] of specs) {
    if (s.kind === "value") state[key] = s.value;
    else if (s.kind === "blob") state[key] = new Uint8Array(s.length);
    else if (s.kind === "tfjs") state[key] = tfjsLike(s.length);
    else if (s.kind === "shard")
      state[key] = {
        globalShape: [s.length * 4],
        dtype: "float32",
        chunks: [{ offsets: [s.value * s.length], data: hostTensor("float32", [s.length]) }],
      };
    else state[key] = hostTensor(s.dtype, [s.length]);
  }
  return state;
}

describe("stagingPlan", () => {
  it("reuses the pool's last plan exactly when every leaf's key, kind, dtype and shape match (seeded)", async () => {
    for (let seed = 1; seed <= 12; seed++) {
      const next = seededRandom(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!;
      const length = (): number => pick([0, 3, 1000, 1 << 18, (1 << 19) + 5]);
      const spec = (): Spec => ({
        kind: pick(["host", "host", "tfjs", "blob", "value", "shard"] as const),
        dtype: pick(["float32", "int32", "uint8"] as const),
        length: length(),
        value: Math.floor(next() * 4),
      });
      const specs = new Map<string, Spec>();
      for (let i = 0; i < 6; i++) specs.set(`k${i}`, spec());
      const pool = new StagingPool();
      let strategy: StagingStrategy = "copy";
      // Files of any size, so the number of files per rank shows in the plan.
      const planner = new DefaultSavePlanner({ minFileBytes: 0 });
      let layout: StagingLayout = { planner, defaultPlanner: true, rank: 0, filesPerRank: 2 };
      let previous: ReturnType<typeof stagingPlan> | undefined;
      for (let op = 0; op < 40; op++) {
        const keys = [...specs.keys()];
        const key = pick(keys);
        const s = specs.get(key)!;
        const change = pick([
          "none",
          "value",
          "length",
          "dtype",
          "kind",
          "rename",
          "add",
          "remove",
          "strategy",
          "files",
          "shard",
        ] as const);
        // Whether the plan may be the last one: nothing it reads changed.
        let same = true;
        if (change === "value" && s.kind === "value") s.value++;
        else if (change === "length") {
          const before = s.length;
          s.length = length();
          same = s.kind === "value" || s.length === before;
        } else if (change === "dtype" && (s.kind === "host" || s.kind === "blob")) {
          const before = s.dtype;
          s.dtype = pick(["float32", "int32", "uint8"] as const);
          same = s.kind === "blob" || s.dtype === before;
        } else if (change === "kind") {
          const before = s.kind;
          s.kind = pick(["host", "tfjs", "blob", "value", "shard"] as const);
          same = s.kind === before;
        } else if (change === "rename") {
          specs.delete(key);
          specs.set(`${key}x`, s);
          same = false;
        } else if (change === "add") {
          specs.set(`n${op}`, spec());
          same = false;
        } else if (change === "remove" && keys.length > 1) {
          specs.delete(key);
          same = false;
        } else if (change === "strategy") {
          const before = strategy;
          strategy = pick(["copy", "reference"] as const);
          same = strategy === before;
        } else if (change === "files") {
          const before = layout.filesPerRank;
          layout = { ...layout, filesPerRank: pick([1, 2, 4]) };
          same = layout.filesPerRank === before;
        } else if (change === "shard" && s.kind === "shard") {
          s.value = (s.value + 1) % 4;
          same = false;
        }
        const leaves = await flattenStateDict(stateOf(specs));
        const plan = stagingPlan(leaves, strategy, layout, pool);
        const where = `seed ${seed}, op ${op} (${change} ${key})`;
        expect(plan, where).toEqual(stagingPlan(leaves, strategy, layout, new StagingPool()));
        if (same && previous !== undefined) expect(plan === previous, where).toBe(true);
        previous = plan;
      }
    }
  });

  it("plans again every time for a planner of the caller's, whose files may follow more than shapes", async () => {
    const leaves = await flattenStateDict({ a: hostTensor("float32", [1 << 19]), b: hostTensor("float32", [1 << 19]) });
    const pool = new StagingPool();
    const layout = {
      planner: new DefaultSavePlanner({ minFileBytes: 0 }),
      defaultPlanner: false,
      rank: 0,
      filesPerRank: 2,
    };
    const first = stagingPlan(leaves, "copy", layout, pool);
    expect(first.segments).toHaveLength(2);
    expect(stagingPlan(leaves, "copy", layout, pool)).not.toBe(first);
  });
});
