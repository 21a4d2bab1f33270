import { CheckpointError } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { SeededRandom, derivedSeed } from "./seeded-random.js";

describe("SeededRandom", () => {
  it("draws the same numbers from the same seed, others from another", () => {
    const draw = (seed: number): number[] => {
      const random = new SeededRandom(seed);
      return [random.next(), random.int32(), random.nextSeed(), ...random.permutation(10)];
    };
    expect(draw(5)).toEqual(draw(5));
    expect(draw(5)).not.toEqual(draw(6));
  });

  it("continues exactly from a saved state, in a new instance", () => {
    const random = new SeededRandom(42);
    for (let i = 0; i < 100; i++) random.next();
    const saved = structuredClone(random.stateDict());
    const expected = [random.next(), random.int32(), ...random.permutation(20)];
    const restored = new SeededRandom(1);
    restored.loadStateDict(saved);
    expect(restored.seed).toBe(42);
    expect([restored.next(), restored.int32(), ...restored.permutation(20)]).toEqual(expected);
  });

  it("permutes every index exactly once; seeds for tfjs are never 0", () => {
    const order = new SeededRandom(3).permutation(1000);
    expect([...order].sort((a, b) => a - b)).toEqual(Array.from({ length: 1000 }, (_, i) => i));
    const random = new SeededRandom(3);
    for (let i = 0; i < 1000; i++) expect(random.nextSeed()).toBeGreaterThan(0);
  });

  it.each([
    ["no state", {}],
    ["a short state", { seed: 1, alea: [1, 0.5, 0.5] }],
    ["a fraction out of range", { seed: 1, alea: [1, 0.5, 1.5, 0.5] }],
    ["a negative carry", { seed: 1, alea: [-1, 0.5, 0.5, 0.5] }],
    ["a text seed", { seed: "1", alea: [1, 0.5, 0.5, 0.5] }],
  ])("refuses %s as mismatch, changing nothing", (_, state) => {
    const random = new SeededRandom(9);
    const before = structuredClone(random.stateDict());
    expect(() => random.loadStateDict(state as never)).toThrow(CheckpointError);
    expect(random.stateDict()).toEqual(before);
  });

  it("refuses a seed that is not a safe integer", () => {
    expect(() => new SeededRandom(1.5)).toThrow("SeededRandom's seed must be a safe integer, got the number 1.5");
  });
});

describe("derivedSeed", () => {
  it("depends on every part, and only on them", () => {
    expect(derivedSeed(1, 2, 3)).toBe(derivedSeed(1, 2, 3));
    const seeds = new Set([derivedSeed(1, 2, 3), derivedSeed(1, 3, 2), derivedSeed(2, 2, 3), derivedSeed(1, 2)]);
    expect(seeds.size).toBe(4);
    for (const s of seeds) expect(s).toBeGreaterThan(0);
  });
});
