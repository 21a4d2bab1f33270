import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type HostTensor, type StateDict, type StorageAdapter, hostTensor, openStorage } from "@cairn/core";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { CheckpointManager } from "./checkpoint-manager.js";

const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

let roots = 0;
const ROOTS = {
  memory: async () => `memory://manager-tests/${process.pid}-${roots++}`,
  file: async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-manager-"));
    dirs.push(dir);
    return `file://${dir}/run`;
  },
};

function state(value: number): StateDict {
  return { model: { w: hostTensor("float32", [4], Float32Array.of(value, value, value, value)) }, step: value };
}

async function names(storage: StorageAdapter, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for await (const o of storage.list(prefix)) out.push(o.path);
  return out.sort();
}

describe.each(Object.keys(ROOTS) as (keyof typeof ROOTS)[])("CheckpointManager on %s://", (kind) => {
  it("saves on the interval, when forced, and lists committed steps from storage", async () => {
    const root = await ROOTS[kind]();
    const mgr = new CheckpointManager(root, 10);
    const taken: number[] = [];
    for (let step = 0; step <= 35; step++) if (await mgr.save(step, state(step))) taken.push(step);
    expect(taken).toEqual([0, 10, 20, 30]);
    expect(await mgr.save(37, state(37), { force: true })).toBe(true);
    expect(await mgr.allSteps()).toEqual([0, 10, 20, 30, 37]);
    expect(await mgr.latestStep()).toBe(37);
    await mgr.close();

    const again = new CheckpointManager(root, 10);
    expect(await again.allSteps()).toEqual([0, 10, 20, 30, 37]);
    const target = state(0);
    await again.restore(20, target);
    expect((target.model as { w: HostTensor }).w.data).toEqual(Float32Array.of(20, 20, 20, 20));
    expect(target.step).toBe(20);
    await again.close();
  });

  it("does no I/O on steps it skips", async () => {
    const inner = await openStorage(await ROOTS[kind]());
    const storage = new FaultyStorageAdapter(inner);
    const mgr = new CheckpointManager(storage, 100);
    for (let step = 1; step < 100; step++) expect(await mgr.save(step, state(step))).toBe(false);
    expect(Object.values(storage.calls).flat()).toEqual([]);
    await mgr.close();
  });

  it("stores metadata and metrics and returns them, and restores the whole state or a subtree", async () => {
    const mgr = new CheckpointManager(await ROOTS[kind](), 1, { now: () => Date.parse("2026-11-21T10:00:00Z") });
    await mgr.save(
      5,
      { ...state(5), optim: { m: hostTensor("float64", [2], Float64Array.of(1, 2)) } },
      { metrics: { loss: 0.25 }, metadata: { run: "a" } },
    );
    expect(await mgr.metadata(5)).toEqual({
      step: 5,
      savedAt: "2026-11-21T10:00:00.000Z",
      metrics: { loss: 0.25 },
      metadata: { run: "a" },
    });
    const whole = await mgr.restore(5);
    expect((whole.optim as { m: HostTensor }).m.data).toEqual(Float64Array.of(1, 2));
    const subtree = { model: { w: hostTensor("float32", [4]) } };
    await mgr.restore(5, subtree);
    expect(subtree.model.w.data).toEqual(Float32Array.of(5, 5, 5, 5));
    await mgr.close();
  });

  it("refuses to save a committed step again unless told to overwrite, which un-commits it first", async () => {
    const root = await ROOTS[kind]();
    const mgr = new CheckpointManager(root, 1);
    await mgr.save(3, state(1));
    await expect(mgr.save(3, state(2))).rejects.toMatchObject({
      code: "already_exists",
      message: expect.stringContaining("overwrite: true"),
    });
    const t = state(0);
    await mgr.restore(3, t);
    expect(t.step).toBe(1);
    await mgr.save(3, state(2), { overwrite: true });
    await mgr.restore(3, t);
    expect(t.step).toBe(2);
    const storage = await openStorage(root);
    expect((await names(storage, "3/")).filter((n) => n.endsWith(".safetensors")).length).toBeGreaterThan(0);
    const files = Object.keys(
      (await import("@cairn/core/format")).parseMetadata(await storage.read("3/metadata.json"), "m").files,
    );
    expect((await names(storage, "3/")).filter((n) => n !== "3/metadata.json")).toEqual(
      files.map((f) => `3/${f}`).sort(),
    );
    await mgr.close();
  });

  it("lets only one of two managers commit the same step", async () => {
    const root = await ROOTS[kind]();
    const a = new CheckpointManager(root, 1);
    const b = new CheckpointManager(root, 1);
    const results = await Promise.allSettled([a.save(8, state(1)), b.save(8, state(2))]);
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    expect((results.find((r) => r.status === "rejected") as PromiseRejectedResult).reason).toMatchObject({
      code: "already_exists",
    });
    expect(await a.allSteps()).toEqual([8]);
    await a.close();
    await b.close();
  });

  it("keeps the newest maxToKeep steps, in the background, never blocking the next save on deletions", async () => {
    const mgr = new CheckpointManager(await ROOTS[kind](), 1, { maxToKeep: 2 });
    for (const step of [1, 2, 3, 4, 5]) await mgr.save(step, state(step));
    await mgr.join();
    expect(await mgr.allSteps()).toEqual([4, 5]);
    await mgr.close();
  });

  it("mixes keepPeriod, keepTimeInterval and best-by-metric retention", async () => {
    let now = 0;
    const mgr = new CheckpointManager(await ROOTS[kind](), 1, {
      maxToKeep: 1,
      keepPeriod: 4,
      keepTimeInterval: 10_000,
      bestFn: (m) => m.accuracy,
      now: () => now,
    });
    const accuracy: Record<number, number> = { 1: 0.1, 2: 0.9, 3: 0.2, 5: 0.3, 6: 0.4, 7: 0.5 };
    for (const step of [1, 2, 3, 4, 5, 6, 7]) {
      now = step * 3000; // one step per 3 s: steps 1, 5 open a new 10 s interval (t=3 s, t=15 s)
      await mgr.save(step, state(step), { metrics: step === 4 ? {} : { accuracy: accuracy[step]! } });
    }
    await mgr.join();
    // 2: best accuracy; 4: keepPeriod and has no metric; 1 and 5: keepTimeInterval; 7: newest.
    expect(await mgr.allSteps()).toEqual([1, 2, 4, 5, 7]);
    await mgr.close();
  });

  it("is read-only when asked: lists and restores, refuses save and delete", async () => {
    const root = await ROOTS[kind]();
    const writer = new CheckpointManager(root, 1);
    await writer.save(1, state(1));
    await writer.close();
    const reader = new CheckpointManager(root, 1, { readOnly: true });
    await expect(reader.save(2, state(2))).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("read-only"),
    });
    await expect(reader.delete(1)).rejects.toMatchObject({ code: "invalid_argument" });
    expect(await reader.allSteps()).toEqual([1]);
    expect((await reader.restore(1)).step as number).toBe(1);
    await reader.close();
  });

  it("never lists or restores a crashed save's leftovers, and deletes them only once they are old", async () => {
    const root = await ROOTS[kind]();
    const storage = await openStorage(root);
    let now = Date.now();
    const mgr = new CheckpointManager(root, 1, { leftoverAgeMs: 60_000, now: () => now });
    await mgr.save(1, state(1));
    await storage.write("2/data-r0-0-0123456789ab.safetensors", new Uint8Array(100));
    expect(await mgr.allSteps()).toEqual([1]);
    await expect(mgr.restore(2, state(0))).rejects.toMatchObject({
      code: "not_found",
      message: expect.stringContaining("committed steps: 1"),
    });
    await mgr.save(3, state(3));
    await mgr.join();
    expect(await names(storage, "2/")).toEqual(["2/data-r0-0-0123456789ab.safetensors"]);
    now += 120_000;
    await mgr.save(4, state(4));
    await mgr.join();
    expect(await names(storage, "2/")).toEqual([]);
    expect(await mgr.allSteps()).toEqual([1, 3, 4]);
    await mgr.close();
  });

  it("deletes a step by un-committing it first", async () => {
    const root = await ROOTS[kind]();
    const inner = await openStorage(root);
    const storage = new FaultyStorageAdapter(inner);
    const mgr = new CheckpointManager(storage, 1);
    await mgr.save(1, state(1));
    await mgr.save(2, state(2));
    await mgr.delete(1);
    expect(storage.calls.delete[0]).toBe("1/metadata.json");
    expect(await names(inner, "1/")).toEqual([]);
    expect(await mgr.allSteps()).toEqual([2]);
    await mgr.close();
  });

  it("refuses bad input clearly and leaves what was saved intact", async () => {
    const root = await ROOTS[kind]();
    const mgr = new CheckpointManager(root, 1);
    await mgr.save(1, state(1));
    for (const step of [1.5, -1, Number.MAX_SAFE_INTEGER + 1, NaN, "3" as unknown as number]) {
      await expect(mgr.save(step, state(9))).rejects.toMatchObject({
        code: "invalid_argument",
        message: expect.stringContaining("step must be a non-negative integer"),
      });
      await expect(mgr.restore(step, state(9))).rejects.toMatchObject({ code: "invalid_argument" });
    }
    await expect(mgr.save(2, { bad: () => 1 } as unknown as StateDict)).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("bad"),
    });
    await expect(
      mgr.save(2, { t: { dtype: "float32", shape: [3], data: new Float32Array(2) } } as unknown as StateDict),
    ).rejects.toMatchObject({ code: "invalid_argument" });
    expect(await mgr.allSteps()).toEqual([1]);
    const t = state(0);
    await mgr.restore(1, t);
    expect(t.step).toBe(1);
    await mgr.close();
  });
});

describe("CheckpointManager construction", () => {
  it.each([
    [0, {}, /saveInterval must be an integer of at least 1/],
    [1.5, {}, /saveInterval/],
    [1, { maxToKeep: -1 }, /maxToKeep must be an integer >= 0/],
    [1, { maxToKeep: "3" }, /maxToKeep/],
    [1, { keepPeriod: 0 }, /keepPeriod must be an integer >= 1/],
    [1, { keepTimeInterval: -5 }, /keepTimeInterval must be a positive number of ms/],
    [1, { bestFn: "loss" }, /bestFn must be a function/],
    [1, { bestMode: "max" }, /bestMode must be given together with bestFn/],
    [1, { bestFn: () => 1, bestMode: "largest" }, /bestMode must be "max" or "min"/],
    [1, { readOnly: "yes" }, /readOnly must be a boolean/],
    [1, { uploadWorker: "no" }, /uploadWorker must be a boolean/],
    [1, { save: { blockSize: 0 } }, /option save\.blockSize must be a positive whole number/],
    [1, { save: 4 }, /option save must be an object/],
  ])("rejects saveInterval %s with options %j", (interval, options, message) => {
    expect(() => new CheckpointManager("memory://x/y", interval, options as never)).toThrow(
      expect.objectContaining({ code: "invalid_argument", message: expect.stringMatching(message) }),
    );
  });

  it("rejects an unknown URL protocol at once, naming the known ones", () => {
    expect(() => new CheckpointManager("ftp://host/run", 1)).toThrow(
      expect.objectContaining({
        code: "unsupported_protocol",
        message: expect.stringMatching(/ftp:\/\/.*known: .*file.*gs.*memory.*s3/),
      }),
    );
  });
});
