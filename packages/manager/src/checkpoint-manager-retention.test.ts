import { CheckpointError, openStorage } from "@cairn/core";
import { type DeleteOptions, type ObjectInfo, type WriteBody, type WriteOptions } from "@cairn/core/storage";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { afterEach, describe, expect, it, vi } from "vitest";
import { CheckpointManager } from "./checkpoint-manager.js";
import { objectNames as names, smallState as state } from "./testing/small-state.js";
import type { ManagerEvents } from "./events/manager-events.js";

let roots = 0;
const memoryRoot = (): string => `memory://manager-retention/${process.pid}-${roots++}`;

/** Refuses deletes of chosen paths, as a read-only or permission-restricted directory would, until told otherwise. */
class UndeletableStorage extends FaultyStorageAdapter {
  refuse: (path: string) => boolean = () => false;

  override async delete(path: string, options?: DeleteOptions): Promise<void> {
    if (this.refuse(path))
      throw new CheckpointError("permission_denied", `[${this.protocol}] deleting ${path}: permission denied`, {
        cause: new Error("EACCES"),
        context: { path },
      });
    return super.delete(path, options);
  }
}

/**
 * Makes a retention pass list the root while step 2's `save` is between its data files and its
 * commit: listing waits for step 2's data, and step 2's metadata.json waits for `beforeCommit`.
 */
class MidSaveListing extends FaultyStorageAdapter {
  beforeCommit: () => Promise<unknown> = async () => undefined;
  #dataWritten!: () => void;
  readonly #data = new Promise<void>((resolve) => (this.#dataWritten = resolve));

  override async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    if (path === "2/metadata.json") await this.beforeCommit();
    await super.write(path, body, options);
    if (path.startsWith("2/data-")) this.#dataWritten();
  }

  override async *list(prefix: string): AsyncIterable<ObjectInfo> {
    if (prefix === "") await this.#data;
    yield* super.list(prefix);
  }
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe("CheckpointManager retention failures", () => {
  it.each(["save", "saveAsync"] as const)(
    "an undeletable old step fails no later %s: reported once, listed by join(), retried until it goes",
    async (method) => {
      const inner = await openStorage(memoryRoot());
      const storage = new UndeletableStorage(inner);
      storage.refuse = (path) => path.startsWith("1/");
      const mgr = new CheckpointManager(storage, 1, { maxToKeep: 2 });
      const errors: ManagerEvents["error"][] = [];
      mgr.on("error", (e) => errors.push(e));
      for (const step of [1, 2, 3, 4, 5]) expect(await mgr[method](step, state(step))).toBe(true);
      const { retentionFailures } = await mgr.join();
      expect(retentionFailures).toEqual([{ step: 1, error: expect.objectContaining({ code: "permission_denied" }) }]);
      expect(errors).toEqual([{ step: 1, operation: "retention", error: retentionFailures[0]!.error }]);
      expect((retentionFailures[0]!.error as Error).cause).toBeInstanceOf(Error);
      // maxToKeep still holds for every other step.
      expect(await mgr.allSteps()).toEqual([1, 4, 5]);

      storage.refuse = () => false;
      expect(await mgr[method](6, state(6))).toBe(true);
      expect(await mgr.close()).toEqual({ retentionFailures: [] });
      expect(await new CheckpointManager(inner, 1).allSteps()).toEqual([5, 6]);
      expect(await names(inner, "1/")).toEqual([]);
      expect(errors).toHaveLength(1);
    },
  );

  it("finishes a step whose metadata.json went but whose data files would not, whatever leftoverAgeMs says", async () => {
    const inner = await openStorage(memoryRoot());
    const storage = new UndeletableStorage(inner);
    storage.refuse = (path) => path.startsWith("1/") && path.includes("data-");
    const mgr = new CheckpointManager(storage, 1, { maxToKeep: 1, leftoverAgeMs: 3600_000 });
    mgr.on("error", () => undefined);
    await mgr.save(1, state(1));
    await mgr.save(2, state(2));
    expect((await mgr.join()).retentionFailures.map((f) => f.step)).toEqual([1]);
    expect(await mgr.allSteps()).toEqual([2]);
    expect((await names(inner, "1/")).length).toBeGreaterThan(0);
    storage.refuse = () => false;
    await mgr.save(3, state(3));
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
    expect(await names(inner, "1/")).toEqual([]);
    expect(await names(inner, "2/")).toEqual([]);
  });

  it("reports a pass that cannot list the root without a step, and saving goes on", async () => {
    const storage = new FaultyStorageAdapter(await openStorage(memoryRoot()));
    const mgr = new CheckpointManager(storage, 1, { maxToKeep: 1 });
    const errors: ManagerEvents["error"][] = [];
    mgr.on("error", (e) => errors.push(e));
    // The first two passes cannot list; each later pass tries again until one can.
    storage.addFault({ operation: "list", path: (prefix) => prefix === "", times: 2 });
    await mgr.save(1, state(1));
    await mgr.save(2, state(2));
    expect((await mgr.join()).retentionFailures).toEqual([
      { step: undefined, error: expect.objectContaining({ code: "storage" }) },
    ]);
    expect(errors.map((e) => [e.operation, e.step])).toEqual([["retention", undefined]]);
    await mgr.save(3, state(3));
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
  });

  it("warns through the process when a retention failure has no error listener", async () => {
    const warn = vi.spyOn(process, "emitWarning").mockImplementation(() => undefined);
    const storage = new UndeletableStorage(await openStorage(memoryRoot()));
    storage.refuse = (path) => path.startsWith("1/");
    const mgr = new CheckpointManager(storage, 1, { maxToKeep: 1 });
    await mgr.save(1, state(1));
    await mgr.save(2, state(2));
    await mgr.close();
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]![0])).toMatch(/retention of step 1 failed: .*permission denied/);
  });

  it("never deletes the files of a save in flight, even with every leftover old enough to go", async () => {
    const storage = new MidSaveListing(await openStorage(memoryRoot()));
    const mgr = new CheckpointManager(storage, 1, {
      maxToKeep: 1,
      leftoverAgeMs: 1000,
      now: () => Date.now() + 3600_000,
    });
    storage.beforeCommit = () => mgr.join();
    const errors: ManagerEvents["error"][] = [];
    mgr.on("error", (e) => errors.push(e));
    await mgr.save(1, state(1));
    await mgr.save(2, state(2));
    expect((await mgr.restore(2)).step).toBe(2);
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
    expect(errors).toEqual([]);
  });

  it("lists no more than maxToKeep steps as soon as a save resolves, without join()", async () => {
    const mgr = new CheckpointManager(memoryRoot(), 1, { maxToKeep: 2 });
    for (const step of [1, 2, 3, 4, 5]) {
      await mgr.save(step, state(step));
      expect(await mgr.allSteps()).toEqual([step - 1, step].filter((s) => s >= 1));
    }
    await mgr.close();
  });

  it("still rejects the next call once after a failed background upload, and says it was the save", async () => {
    const storage = new FaultyStorageAdapter(await openStorage(memoryRoot()), [
      { operation: "write", path: (p) => p.startsWith("2/data-") },
    ]);
    const mgr = new CheckpointManager(storage, 1, { maxToKeep: 1 });
    const errors: ManagerEvents["error"][] = [];
    mgr.on("error", (e) => errors.push(e));
    await mgr.saveAsync(1, state(1));
    await mgr.saveAsync(2, state(2));
    await expect(mgr.join()).rejects.toMatchObject({ code: "storage" });
    expect(errors.map((e) => [e.operation, e.step])).toEqual([["save", 2]]);
    expect(await mgr.join()).toEqual({ retentionFailures: [] });
    await mgr.close();
  });
});
