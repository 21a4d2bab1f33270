import { describe, expect, it } from "vitest";
import { type StepRecord, stepsToDelete } from "./retention-policy.js";

const records = (steps: number[], metrics: (s: number) => Record<string, number> = () => ({})): StepRecord[] =>
  steps.map((step) => ({ step, time: step * 1000, metrics: metrics(step) }));

describe("retention", () => {
  it("keeps everything when maxToKeep is unset or 0, whatever else is set", () => {
    expect(stepsToDelete(records([1, 2, 3]), {})).toEqual([]);
    expect(stepsToDelete(records([1, 2, 3]), { maxToKeep: 0, keepPeriod: 2 })).toEqual([]);
  });

  it("keeps the newest maxToKeep steps", () => {
    expect(stepsToDelete(records([40, 10, 30, 20, 50]), { maxToKeep: 2 })).toEqual([10, 20, 30]);
  });

  it("also keeps every keepPeriod-th step", () => {
    expect(stepsToDelete(records([10, 20, 30, 40, 50, 60]), { maxToKeep: 1, keepPeriod: 20 })).toEqual([10, 30, 50]);
  });

  it("also keeps one step per keepTimeInterval of wall time", () => {
    // times are step * 1000 ms: keep 1 (t=1s), then the first at or after t=4s, and so on.
    expect(stepsToDelete(records([1, 2, 3, 4, 5, 6, 7, 8, 9]), { maxToKeep: 1, keepTimeInterval: 3000 })).toEqual([
      2, 3, 5, 6, 8,
    ]);
  });

  it("keeps the best steps by metric (max or min), those without the metric, and the newest", () => {
    const losses: Record<number, number> = { 10: 5, 20: 1, 40: 9, 50: 3 };
    const loss = (s: number): Record<string, number> => (s in losses ? { loss: losses[s]! } : {});
    const min = stepsToDelete(records([10, 20, 30, 40, 50], loss), {
      maxToKeep: 2,
      bestFn: (m) => m.loss,
      bestMode: "min",
    });
    // losses 10:5, 20:1, 30:-, 40:9, 50:3 → best two by min: 20, 50; 30 has no metric; 50 is newest.
    expect(min).toEqual([10, 40]);
    const max = stepsToDelete(records([10, 20, 30, 40, 50], loss), { maxToKeep: 1, bestFn: (m) => m.loss });
    expect(max).toEqual([10, 20]);
  });

  it("mixes policies: a step is kept if any keeps it", () => {
    const acc = (s: number): Record<string, number> => ({ acc: s === 20 ? 0.99 : 0.5 });
    expect(
      stepsToDelete(records([10, 20, 30, 40, 50, 60], acc), { maxToKeep: 1, bestFn: (m) => m.acc, keepPeriod: 30 }),
    ).toEqual([10, 40, 50]);
  });
});
