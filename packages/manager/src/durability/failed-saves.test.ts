import { CheckpointError, hostTensor, openStorage } from "@cairn/core";
import { FaultyStorageAdapter, rejection } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import type { CheckpointManagerOptions } from "../checkpoint-manager-options.js";
import { OutageStorage } from "../testing/outage-storage.js";

let roots = 0;
const memoryRoot = (): string => `memory://failed-saves/${process.pid}-${roots++}`;
const quiet: CheckpointManagerOptions = { checkpointOnPreemption: false };

function state(value: number): { w: ReturnType<typeof hostTensor>; step: number } {
  return { w: hostTensor("float32", [1024], new Float32Array(1024).fill(value)), step: value };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
/** What `promise` settled to within `ms`, or "pending". */
const within = <T>(promise: Promise<T>, ms: number): Promise<T | "pending"> =>
  Promise.race([promise, sleep(ms).then(() => "pending" as const)]);

/** Storage whose writes under `step`'s folder are denied for good. */
async function deniedUnder(step: number): Promise<FaultyStorageAdapter> {
  return new FaultyStorageAdapter(await openStorage(memoryRoot()), [
    {
      operation: "write",
      path: (p: string) => p.startsWith(`${step}/`),
      times: Infinity,
      error: () => new CheckpointError("storage", "denied (injected)", { context: { transient: false } }),
    },
  ]);
}

// Found by an outside attack: a save that failed before the loss budget heard of it (opening,
// listing, deciding), or a foreground save thrown to its caller, was missing from health().
describe("every failed save counts in health() and the loss budget, once", () => {
  it("a save whose listing fails before anything is written: at risk, and the last error", async () => {
    const outage = new OutageStorage(await openStorage(memoryRoot()));
    const mgr = new CheckpointManager(outage, 1, { ...quiet, durability: { maxStepsAtRisk: 1 } });
    await mgr.save(1, state(1));
    outage.down = true;
    const error = await rejection(mgr.save(2, state(2)));
    expect(mgr.health()).toMatchObject({ newestSaved: 2, newestDurable: 1, stepsAtRisk: 1, exceeded: false });
    expect(mgr.health().lastError).toEqual({ step: 2, error, operation: "save" });
    expect(mgr.health().inFlight).toEqual({ saving: [], copying: [] });
    await rejection(mgr.saveAsync(3, state(3)));
    expect(mgr.health()).toMatchObject({ newestSaved: 3, stepsAtRisk: 2, exceeded: true });
    outage.down = false;
    await mgr.save(4, state(4));
    expect(mgr.health()).toMatchObject({ newestDurable: 4, stepsAtRisk: 0, exceeded: false });
    await mgr.close();
  });

  it('a foreground save failing while written is no longer "saving": "block" does not wait for it for ever', async () => {
    const storage = await deniedUnder(2);
    const mgr = new CheckpointManager(storage, 1, {
      ...quiet,
      durability: { maxStepsAtRisk: 0, onExceeded: "block" },
    });
    await mgr.save(1, state(1));
    const error = await rejection(mgr.save(2, state(2)));
    expect(mgr.health()).toMatchObject({ newestSaved: 2, newestDurable: 1, stepsAtRisk: 1, exceeded: true });
    expect(mgr.health().inFlight.saving).toEqual([]);
    expect(mgr.health().lastError).toEqual({ step: 2, error, operation: "save" });
    // Nothing in flight can meet the budget: the next save goes at once.
    expect(await within(mgr.save(3, state(3)), 10_000)).toBe(true);
    expect(mgr.health()).toMatchObject({ newestDurable: 3, stepsAtRisk: 0, exceeded: false });
    await mgr.close();
  });

  it("a background failure rethrown by the next call is one error, not two; a refused duplicate loses nothing", async () => {
    const storage = await deniedUnder(2);
    const mgr = new CheckpointManager(storage, 1, quiet);
    const errors: unknown[] = [];
    mgr.on("error", (e) => errors.push(e.error));
    await mgr.save(1, state(1));
    await mgr.saveAsync(2, state(2));
    await mgr.join().catch(() => undefined);
    expect(errors).toHaveLength(1);
    expect(mgr.health().lastError).toMatchObject({ step: 2, operation: "save", error: errors[0] });
    // join() threw it once already; a committed step refused again is the caller's mistake, not a loss.
    expect((await rejection(mgr.save(1, state(1), { force: true }))).code).toBe("already_exists");
    expect(mgr.health()).toMatchObject({ newestSaved: 2, stepsAtRisk: 1 });
    await mgr.save(3, state(3));
    expect(mgr.health()).toMatchObject({ newestDurable: 3, stepsAtRisk: 0 });
    await mgr.close();
  });
});
