import { describe, expect, it } from "vitest";
import { type DefaultSavePlannerOptions, DefaultSavePlanner } from "./default-save-planner.js";
import { flattenStateDict } from "../state/flatten.js";
import { hostTensor } from "../state/tensors.js";
import type { DataFilePlan } from "./save-planner.js";

async function planFiles(
  sizes: readonly number[],
  filesPerRank: number,
  options: DefaultSavePlannerOptions = { minFileBytes: 0 },
): Promise<readonly DataFilePlan[]> {
  const layers = sizes.map((n) => ({ w: hostTensor("uint8", [n], new Uint8Array(n)) }));
  const planner = new DefaultSavePlanner(options);
  const plan = planner.createGlobalPlan([planner.createLocalPlan(await flattenStateDict({ layers }), 0)], {
    attempt: "a1b2c3",
    filesPerRank,
  });
  return plan.files[0]!;
}

const bytesOf = (file: DataFilePlan): number => file.items.reduce((n, item) => n + item.byteLength, 0);

describe("DefaultSavePlanner's files", () => {
  it("puts runs of neighbouring small tensors in one file, not every fourth tensor", async () => {
    const files = await planFiles(new Array<number>(4096).fill(1024), 4);
    expect(files).toHaveLength(4);
    for (const file of files) {
      const breaks = file.items.filter(
        (item, i) => i > 0 && item.leafIndex !== file.items[i - 1]!.leafIndex + 1,
      ).length;
      // 4 MiB in runs of at most a sixteenth of a file's share: a few runs per file.
      expect(breaks).toBeLessThan(16);
      expect(file.items.map((item) => item.leafIndex)).toEqual(
        [...file.items.map((item) => item.leafIndex)].sort((a, b) => a - b),
      );
    }
    const sizes = files.map(bytesOf);
    expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(65_536);
  });

  it("plans every tensor once and balances large ones across files", async () => {
    const sizes = [8 << 20, 100, 3 << 20, 5 << 20, 7, 6 << 20, ...new Array<number>(300).fill(4096), 2 << 20];
    const files = await planFiles(sizes, 3);
    expect(files.flatMap((f) => f.items.map((item) => item.leafIndex)).sort((a, b) => a - b)).toEqual(
      sizes.map((_, i) => i),
    );
    const loads = files.map(bytesOf);
    expect(Math.max(...loads) - Math.min(...loads)).toBeLessThanOrEqual(2 << 20);
  });

  it("puts a small state in one file, and one more per 16 MiB up to filesPerRank", async () => {
    const count = async (sizes: readonly number[]): Promise<number> => (await planFiles(sizes, 4, {})).length;
    expect(await count(new Array<number>(1000).fill(1024))).toBe(1);
    expect(await count(new Array<number>(16).fill(1 << 20))).toBe(1);
    expect(await count([...new Array<number>(16).fill(1 << 20), 1])).toBe(2);
    expect(await count(new Array<number>(40).fill(1 << 20))).toBe(3);
    expect(await count(new Array<number>(100).fill(1 << 20))).toBe(4);
    expect((await planFiles(new Array<number>(100).fill(1 << 20), 4, { minFileBytes: 64 << 20 })).length).toBe(2);
  });

  it("refuses a minFileBytes that is not a whole number of bytes", () => {
    for (const minFileBytes of [-1, 0.5, Number.NaN, Infinity])
      expect(() => new DefaultSavePlanner({ minFileBytes })).toThrow(
        expect.objectContaining({ code: "invalid_argument" }),
      );
  });
});
