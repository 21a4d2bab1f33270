import { CheckpointError, hostTensor, openStorage, readMetadata } from "@cairn/core";
import { FaultyStorageAdapter, rejection } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import type { CheckpointManagerOptions } from "../checkpoint-manager-options.js";
import { record, truncateDataFile } from "../testing/durability-suite.js";
import { smallState } from "../testing/small-state.js";

let roots = 0;
const memoryRoot = (): string => `memory://durability-unit/${process.pid}-${roots++}`;
const quiet: CheckpointManagerOptions = { checkpointOnPreemption: false };

/** A state with a 64 KiB tensor (so a step has a data file worth truncating) whose contents are `value`. */
function state(value: number): { w: ReturnType<typeof hostTensor>; step: number } {
  return { w: hostTensor("float32", [16384], new Float32Array(16384).fill(value)), step: value };
}

describe("durability options", () => {
  it.each([
    ["not an object", 1],
    ["an array", []],
    ["a negative maxStepsAtRisk", { maxStepsAtRisk: -1 }],
    ["a fractional maxStepsAtRisk", { maxStepsAtRisk: 1.5 }],
    ["a zero maxSecondsAtRisk", { maxSecondsAtRisk: 0 }],
    ["a NaN maxSecondsAtRisk", { maxSecondsAtRisk: Number.NaN }],
    ["an infinite maxSecondsAtRisk", { maxSecondsAtRisk: Infinity }],
    ["a maxSecondsAtRisk past what a timer holds", { maxSecondsAtRisk: 3e6 }],
    ["a string maxSecondsAtRisk", { maxSecondsAtRisk: "10" }],
    ["an unknown onExceeded", { maxStepsAtRisk: 1, onExceeded: "panic" }],
    ["onExceeded without a limit", { onExceeded: "block" }],
    ["a misspelt key", { maxStepAtRisk: 1 }],
  ])("refuses %s before touching storage", (_, durability) => {
    expect(() => new CheckpointManager(memoryRoot(), 1, { durability } as CheckpointManagerOptions)).toThrow(
      /durability/,
    );
  });

  it("refuses bad latestStep options and unknown restore step names", async () => {
    const mgr = new CheckpointManager(memoryRoot(), 1, quiet);
    expect((await rejection(mgr.latestStep({ verified: "yes" } as never))).code).toBe("invalid_argument");
    expect((await rejection(mgr.restore("newest" as never, smallState(0)))).code).toBe("invalid_argument");
    await mgr.close();
  });
});

describe("newest verified step, untiered", () => {
  it("restore('latest') passes over a truncated newest step, naming the file, and resolves the step it read", async () => {
    const root = memoryRoot();
    const mgr = new CheckpointManager(root, 1, quiet);
    for (let step = 1; step <= 3; step++) await mgr.save(step, state(step));
    await mgr.close();
    const storage = await openStorage(root);
    const file = await truncateDataFile(storage, 3);
    const next = new CheckpointManager(root, 1, quiet);
    const skipped = record(next, "skipped");
    const target = state(0);
    const restored = await next.restore("latest", target);
    expect(restored.step).toBe(2);
    expect(target.w.data[0]).toBe(2);
    expect(skipped).toEqual([expect.objectContaining({ step: 3, tier: 0, file })]);
    expect(skipped[0]!.reason).toContain(file);
    // Without a target: the whole state of the newest good step.
    expect((await next.restore("latest")).step).toBe(2);
    expect(skipped).toHaveLength(1);
    await next.close();
  });

  it("throws what is not damage (a target that does not match) instead of falling back", async () => {
    const root = memoryRoot();
    const mgr = new CheckpointManager(root, 1, quiet);
    await mgr.save(1, state(1));
    await mgr.save(2, state(2));
    const error = await rejection(mgr.restore("latest", { w: hostTensor("float32", [3]) }));
    expect(error.code).toBe("mismatch");
    await mgr.close();
  });

  it("an empty root has no latest step: not_found", async () => {
    const mgr = new CheckpointManager(memoryRoot(), 1, quiet);
    expect((await rejection(mgr.restore("latest", state(0)))).code).toBe("not_found");
    expect(await mgr.latestStep({ verified: true })).toBeUndefined();
    await mgr.close();
  });
});

describe("stale saves", () => {
  it("warns when a save holds the same weights as the step before it, saved or restored", async () => {
    const root = memoryRoot();
    const mgr = new CheckpointManager(root, 1, quiet);
    const stale = record(mgr, "stale");
    await mgr.save(1, state(1));
    await mgr.save(2, state(1));
    await mgr.saveAsync(3, state(3));
    await mgr.join();
    expect(stale).toEqual([
      { step: 2, sameAs: 1, message: "step 2 holds the same weights as step 1: is training still updating them?" },
    ]);
    await mgr.close();

    // A resumed run whose first save equals what it restored.
    const next = new CheckpointManager(root, 1, quiet);
    const staleNext = record(next, "stale");
    const target = state(0);
    expect((await next.restore("latest", target)).step).toBe(3);
    await next.save(4, target);
    await next.save(5, state(5));
    await next.join();
    expect(staleNext.map((s) => [s.step, s.sameAs])).toEqual([[4, 3]]);
    await next.close();
  });
});

describe("health()", () => {
  it("says what is at risk untiered: nothing once committed, and the save in flight meanwhile", async () => {
    const mgr = new CheckpointManager(memoryRoot(), 10, { ...quiet, durability: { maxStepsAtRisk: 100 } });
    expect(mgr.health()).toEqual({
      newestSaved: undefined,
      newestDurable: undefined,
      stepsAtRisk: 0,
      secondsAtRisk: 0,
      exceeded: false,
      lastError: undefined,
      inFlight: { saving: [], copying: [] },
    });
    const saving = mgr.saveAsync(10, state(10));
    await saving;
    await mgr.join();
    expect(mgr.health()).toMatchObject({ newestSaved: 10, newestDurable: 10, stepsAtRisk: 0, exceeded: false });
    expect(mgr.health().inFlight).toEqual({ saving: [], copying: [] });
    await mgr.close();
  });
});

describe("transient failures", () => {
  it("a background save failing transiently is retried per file, reported once, and the run goes on", async () => {
    const inner = await openStorage(memoryRoot());
    let attempts = 0;
    const storage = new FaultyStorageAdapter(inner, [
      {
        operation: "write",
        path: (p) => p.startsWith("2/data-"),
        times: Infinity,
        error: () => {
          attempts++;
          return new CheckpointError("storage", "the bucket blinked (injected)", { context: { transient: true } });
        },
      },
    ]);
    const mgr = new CheckpointManager(storage, 1, {
      ...quiet,
      save: { retry: { maxAttempts: 3, baseDelayMs: 1, maxDelayMs: 2 } },
    });
    const errors = record(mgr, "error");
    await mgr.saveAsync(1, state(1));
    await mgr.saveAsync(2, state(2));
    await mgr.join();
    // Core's retry of the file, up to its limit; then one report, no rejection.
    expect(attempts).toBe(3);
    expect(errors.map((e) => [e.operation, e.step])).toEqual([["save", 2]]);
    expect(mgr.health()).toMatchObject({ newestSaved: 2, newestDurable: 1, stepsAtRisk: 1 });
    expect(mgr.health().lastError?.step).toBe(2);
    expect(await mgr.saveAsync(3, state(3))).toBe(true);
    await mgr.join();
    expect(mgr.health()).toMatchObject({ newestDurable: 3, stepsAtRisk: 0 });
    expect(await mgr.allSteps()).toEqual([1, 3]);
    await mgr.close();
  });
});

// Found by attack32: a save that failed with nothing else in flight left the budget exceeded for
// good; "block" then waited for ever and "fail" refused every later save, storage healthy again.
describe("the loss budget after a failed save", () => {
  /** Storage whose writes under the given steps' folders fail for good. */
  async function failingOn(steps: readonly number[]): Promise<FaultyStorageAdapter> {
    return new FaultyStorageAdapter(await openStorage(memoryRoot()), [
      {
        operation: "write",
        path: (p: string) => steps.some((s) => p.startsWith(`${s}/`)),
        times: Infinity,
        error: () => new CheckpointError("storage", "down (injected)", { context: { transient: false } }),
      },
    ]);
  }
  const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
  /** What `promise` settled to within `ms`, or "pending". */
  const within = <T>(promise: Promise<T>, ms: number): Promise<T | "pending"> =>
    Promise.race([promise, sleep(ms).then(() => "pending" as const)]);

  async function failedSecond(onExceeded: "block" | "fail"): Promise<CheckpointManager> {
    const mgr = new CheckpointManager(await failingOn([2]), 1, {
      ...quiet,
      durability: { maxSecondsAtRisk: 0.1, onExceeded },
    });
    mgr.on("error", () => undefined);
    await mgr.save(1, state(1));
    await mgr.saveAsync(2, state(2));
    await mgr.join().catch(() => undefined);
    await sleep(300);
    expect(mgr.health()).toMatchObject({ exceeded: true, inFlight: { saving: [], copying: [] } });
    return mgr;
  }

  it('"block" lets the next save go when nothing in flight could meet the budget', async () => {
    const mgr = await failedSecond("block");
    expect(await within(mgr.save(3, state(3)), 5000)).toBe(true);
    expect(mgr.health()).toMatchObject({ exceeded: false, newestDurable: 3, stepsAtRisk: 0 });
    expect(await mgr.allSteps()).toEqual([1, 3]);
    await mgr.close();
  });

  it('"fail" throws once, then the next save may meet the budget again', async () => {
    const mgr = await failedSecond("fail");
    expect((await rejection(mgr.save(3, state(3)))).code).toBe("storage");
    await mgr.save(4, state(4));
    expect(mgr.health()).toMatchObject({ exceeded: false, newestDurable: 4 });
    expect(await mgr.allSteps()).toEqual([1, 4]);
    await mgr.close();
  });

  it("a rollback past a failed step leaves it out of what is at risk", async () => {
    const mgr = new CheckpointManager(await failingOn([10]), 1, {
      ...quiet,
      durability: { maxSecondsAtRisk: 0.2, onExceeded: "fail" },
    });
    mgr.on("error", () => undefined);
    await mgr.save(5, state(5));
    await mgr.saveAsync(10, state(10));
    await mgr.join().catch(() => undefined);
    await mgr.restore(5);
    for (const step of [6, 7, 8, 9]) {
      await mgr.save(step, state(step));
      await sleep(150);
    }
    expect(mgr.health()).toMatchObject({ exceeded: false, newestDurable: 9, stepsAtRisk: 0 });
    await mgr.close();
  });
});

// Found by attack32: a partial restore of "latest" read only the intact part of a damaged step
// and counted the whole step as verified, so latestStep({ verified: true }) named it.
describe("a partial restore of the latest step", () => {
  it("does not vouch for the bytes it did not read", async () => {
    const storage = await openStorage(memoryRoot());
    const saved = new CheckpointManager(storage, 1, quiet);
    const two = (v: number) => ({
      a: hostTensor("float32", [4096], new Float32Array(4096).fill(v)),
      b: hostTensor("float32", [4096], new Float32Array(4096).fill(-v)),
    });
    for (const step of [1, 2, 3]) await saved.save(step, two(step));
    await saved.close();
    // Flip a byte of b in step 3.
    const metadata = await readMetadata({ storage, path: "3" });
    const chunk = metadata.entries.find((e) => e.key.join(".") === "b" && e.kind === "tensor");
    if (chunk?.kind !== "tensor") throw new Error("no tensor b in step 3");
    const { file, byteOffset } = chunk.chunks[0]!;
    const bytes = new Uint8Array(await storage.read(`3/${file}`));
    bytes[byteOffset + 8]! ^= 0xff;
    await storage.delete(`3/${file}`);
    await storage.write(`3/${file}`, bytes);

    const mgr = new CheckpointManager(storage, 1, quiet);
    mgr.on("error", () => undefined);
    const target = { a: hostTensor("float32", [4096], new Float32Array(4096)) };
    const restored = await mgr.restore("latest", target, { partial: true });
    expect((restored as { step: number }).step).toBe(3);
    expect(await mgr.latestStep({ verified: true })).toBe(2);
    await mgr.close();
  });
});
