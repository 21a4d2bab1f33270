import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import { smallState } from "../testing/small-state.js";
import { AnySavePolicy, FixedIntervalPolicy, SpecificStepsPolicy } from "./save-policy.js";

let roots = 0;
const root = (): string => `memory://save-policy-tests/${process.pid}-${roots++}`;

async function savedSteps(mgr: CheckpointManager, upTo: number): Promise<{ said: number[]; saved: number[] }> {
  const said: number[] = [];
  const saved: number[] = [];
  for (let step = 0; step <= upTo; step++) {
    if (mgr.shouldSave(step)) said.push(step);
    if (await mgr.save(step, smallState(step))) saved.push(step);
  }
  return { said, saved };
}

describe("SaveDecisionPolicy", () => {
  it("a number is a FixedIntervalPolicy: shouldSave and save agree", async () => {
    const mgr = new CheckpointManager(root(), 4);
    expect(mgr.savePolicy).toBeInstanceOf(FixedIntervalPolicy);
    expect(mgr.saveInterval).toBe(4);
    expect(await savedSteps(mgr, 9)).toEqual({ said: [0, 4, 8], saved: [0, 4, 8] });
    await mgr.close();
  });

  it("saves the steps a SpecificStepsPolicy lists, and those any policy of an AnySavePolicy says", async () => {
    const specific = new CheckpointManager(root(), new SpecificStepsPolicy([3, 7]));
    expect(specific.saveInterval).toBeUndefined();
    expect(await savedSteps(specific, 9)).toEqual({ said: [3, 7], saved: [3, 7] });
    await specific.close();
    const any = new CheckpointManager(
      root(),
      new AnySavePolicy([new FixedIntervalPolicy(5), new SpecificStepsPolicy([2])]),
    );
    expect(await savedSteps(any, 10)).toEqual({ said: [0, 2, 5, 10], saved: [0, 2, 5, 10] });
    await any.close();
  });

  it("a user's policy is asked, and force saves whatever it says", async () => {
    const asked: number[] = [];
    const mgr = new CheckpointManager(root(), {
      shouldSave: (step: number) => {
        asked.push(step);
        return false;
      },
    });
    expect(await mgr.save(1, smallState(1))).toBe(false);
    expect(await mgr.save(2, smallState(2), { force: true })).toBe(true);
    expect(asked).toEqual([1]);
    expect(await mgr.allSteps()).toEqual([2]);
    await mgr.close();
  });

  it("refuses what is not a policy, with the value", () => {
    expect(() => new CheckpointManager(root(), { shouldSave: 1 } as never)).toThrow(/saveInterval must be/);
    expect(() => new SpecificStepsPolicy([1, -2])).toThrow(/an iterable of integers >= 0/);
    expect(() => new AnySavePolicy([{} as never])).toThrow(/SaveDecisionPolicy objects/);
  });
});

describe("grouped options", () => {
  it("retention.maxToKeep keeps as maxToKeep does", async () => {
    const grouped = new CheckpointManager(root(), 1, { retention: { maxToKeep: 2 } });
    const flat = new CheckpointManager(root(), 1, { maxToKeep: 2 });
    for (const mgr of [grouped, flat]) {
      for (let step = 0; step < 5; step++) await mgr.save(step, smallState(step));
      await mgr.join();
      expect(await mgr.allSteps()).toEqual([3, 4]);
      await mgr.close();
    }
  });

  it("async and preemption groups reach their parts; a group that is not an object is refused", async () => {
    const signals: string[] = [];
    const target = {
      on: (signal: string) => void signals.push(signal),
      off: () => undefined,
    };
    const mgr = new CheckpointManager(root(), 1, {
      async: { maxPending: 2, staging: "copy" },
      preemption: { signals: ["SIGUSR2"], signalTarget: target as never },
    });
    mgr.shouldSave(0);
    expect(await mgr.saveAsync(0, smallState(0))).toBe(true);
    await mgr.join();
    expect(signals).toContain("SIGUSR2");
    await mgr.close();
    expect(() => new CheckpointManager(root(), 1, { async: 3 as never })).toThrow(/option async must be an object/);
  });

  it("a value given under both spellings is refused unless they agree", () => {
    expect(() => new CheckpointManager(root(), 1, { maxToKeep: 2, retention: { maxToKeep: 3 } })).toThrow(
      /retention\.maxToKeep must be given once \(its alias maxToKeep is given too\), got the number 3/,
    );
    expect(() => new CheckpointManager(root(), 1, { maxToKeep: 2, retention: { maxToKeep: 2 } })).not.toThrow();
    expect(() => new CheckpointManager(root(), 1, { retention: { maxToKeep: -1 } })).toThrow(/maxToKeep must be/);
  });
});
