import { EventEmitter } from "node:events";
import { mkdtemp, readdir, rm, writeFile, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { CheckpointError, type StorageAdapter, openStorage } from "@cairn/core";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { OutageStorage } from "../testing/outage-storage.js";
import { afterEach, describe, expect, it, vi } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import type { ManagerEvents } from "../events/manager-events.js";
import { objectNames, smallState as state } from "../testing/small-state.js";

let roots = 0;
const memoryRoot = (): string => `memory://tiered/${process.pid}-${roots++}`;
const fast = { baseDelayMs: 20, maxDelayMs: 100 };
const opened: CheckpointManager[] = [];
const dirs: string[] = [];

afterEach(async () => {
  await Promise.all(opened.splice(0).map((m) => m.close().catch(() => undefined)));
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

function manager(...args: ConstructorParameters<typeof CheckpointManager>): CheckpointManager {
  const mgr = new CheckpointManager(args[0], args[1], { checkpointOnPreemption: false, ...args[2] });
  opened.push(mgr);
  return mgr;
}

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-tiers-"));
  dirs.push(dir);
  return dir;
}

async function outage(): Promise<OutageStorage> {
  return new OutageStorage(await openStorage(memoryRoot()));
}

function record<E extends keyof ManagerEvents>(mgr: CheckpointManager, event: E): ManagerEvents[E][] {
  const seen: ManagerEvents[E][] = [];
  mgr.on(event, (payload) => seen.push(payload));
  return seen;
}

async function stepsOn(storage: StorageAdapter): Promise<number[]> {
  const names = await objectNames(storage);
  return names
    .filter((n) => n.endsWith("/metadata.json"))
    .map((n) => Number(n.split("/")[0]))
    .sort((a, b) => a - b);
}

describe("CheckpointManager over tiers", () => {
  it("commits to tier 0, copies each step to tier 1 in the background, and lists and restores across both", async () => {
    const [t0, t1] = [await openStorage(memoryRoot()), await openStorage(memoryRoot())];
    const mgr = manager([t0, t1], 10, { replication: { retry: fast } });
    const replicated = record(mgr, "replicated");
    for (let step = 0; step <= 30; step += 10)
      expect(step % 20 === 0 ? await mgr.save(step, state(step)) : await mgr.saveAsync(step, state(step))).toBe(true);
    const result = await mgr.join();
    expect(result).toEqual({ retentionFailures: [], unreplicated: [] });
    expect(await stepsOn(t0)).toEqual([0, 10, 20, 30]);
    expect(await stepsOn(t1)).toEqual([0, 10, 20, 30]);
    expect(replicated.map((r) => [r.step, r.tier])).toEqual(
      expect.arrayContaining([
        [0, 1],
        [10, 1],
        [20, 1],
        [30, 1],
      ]),
    );
    for (const r of replicated) expect(r.sinceCommit).toBeGreaterThanOrEqual(0);
    expect(await mgr.allSteps()).toEqual([0, 10, 20, 30]);
    expect(await mgr.latestStep()).toBe(30);
    expect(await mgr.restore(20)).toEqual(state(20));
    const tiers = await mgr.tiers();
    expect(tiers.map((t) => [t.index, t.steps, t.pending])).toEqual([
      [0, [0, 10, 20, 30], []],
      [1, [0, 10, 20, 30], []],
    ]);
    // The copy on tier 1 alone is a whole checkpoint: a plain manager over it restores every step.
    const alone = manager(t1, 10, { readOnly: true });
    expect(await alone.restore(30)).toEqual(state(30));
  });

  it("keeps retention per tier, and tier 1 takes only every k-th step", async () => {
    const [t0, t1] = [await openStorage(memoryRoot()), await openStorage(memoryRoot())];
    const mgr = manager([t0, t1], 1, {
      tiers: [{ maxToKeep: 2 }, { every: 2, maxToKeep: 2, keepPeriod: 4 }],
      replication: { retry: fast },
    });
    for (let step = 0; step <= 9; step++) await mgr.save(step, state(step));
    await mgr.join();
    expect(await stepsOn(t0)).toEqual([8, 9]);
    // Even steps only: the newest two (6, 8) and every 4th.
    expect(await stepsOn(t1)).toEqual([0, 4, 6, 8]);
    expect(await mgr.allSteps()).toEqual([0, 4, 6, 8, 9]);
  });

  it("copies down three tiers, the third taking every 2nd step, reading each copy back with readBack; restores from the third alone", async () => {
    const [t0, t1, t2] = [
      await openStorage(memoryRoot()),
      await openStorage(memoryRoot()),
      new FaultyStorageAdapter(await openStorage(memoryRoot())),
    ];
    const mgr = manager([t0, t1, t2], 1, {
      tiers: [{ maxToKeep: 1 }, { maxToKeep: 2 }, { every: 2 }],
      replication: { retry: fast, readBack: true },
    });
    const replicated = record(mgr, "replicated");
    for (let step = 1; step <= 4; step++) await mgr.save(step, state(step));
    await mgr.join();
    expect(
      replicated
        .filter((r) => r.tier === 2)
        .map((r) => r.step)
        .sort(),
    ).toEqual([2, 4]);
    expect(await stepsOn(t0)).toEqual([4]);
    expect(await stepsOn(t1)).toEqual([3, 4]);
    expect(await stepsOn(t2)).toEqual([2, 4]);
    // Read back: each copy's data files were read from tier 2 after they were written.
    expect(t2.calls.read.filter((p) => p.endsWith(".safetensors")).length).toBeGreaterThanOrEqual(2);
    expect(await mgr.allSteps()).toEqual([2, 3, 4]);
    for (const step of [3, 4]) for (const t of [t0, t1]) await t.delete(`${step}/metadata.json`).catch(() => undefined);
    expect(await mgr.restore(4)).toEqual(state(4));
    expect(await mgr.restore(2)).toEqual(state(2));
  });

  it("holds steps on tier 0 while tier 1 is down, reports the outage once, and catches up newest first when it is back", async () => {
    const t0 = await openStorage(memoryRoot());
    const t1 = await outage();
    const mgr = manager([t0, t1], 1, { tiers: [{ maxToKeep: 1 }], replication: { retry: fast } });
    const errors = record(mgr, "error");
    const replicated = record(mgr, "replicated");
    await mgr.save(0, state(0));
    await mgr.join();
    t1.down = true;
    for (let step = 1; step <= 4; step++) expect(await mgr.save(step, state(step))).toBe(true);
    const during = await mgr.join();
    expect(during.unreplicated?.map((u) => u.step)).toEqual([4, 3, 2, 1]);
    expect(during.unreplicated?.every((u) => u.tier === 1 && u.error instanceof CheckpointError && !u.permanent)).toBe(
      true,
    );
    // Nothing tier 1 lacks is deleted from tier 0, whatever maxToKeep says; nor is 0, the newest
    // step verified and on tier 1, while newer ones are not there (the durability guard).
    expect(await stepsOn(t0)).toEqual([0, 1, 2, 3, 4]);
    // Retried with backoff, and reported once for the whole outage.
    await vi.waitFor(() => expect(t1.refused).toBeGreaterThan(4), { timeout: 5_000 });
    expect(errors.filter((e) => e.operation === "replication")).toHaveLength(1);
    expect(errors[0]).toMatchObject({ operation: "replication", tier: 1 });
    expect((await mgr.tiers())[1]!.failing).toBeInstanceOf(CheckpointError);
    t1.down = false;
    const done = replicated.length;
    const after = await mgr.close({ timeoutMs: 10_000 });
    expect(after.unreplicated).toEqual([]);
    expect(replicated.slice(done).map((r) => r.step)[0]).toBe(4);
    expect(await stepsOn(t1)).toEqual([0, 1, 2, 3, 4]);
    expect(await stepsOn(t0)).toEqual([4]);
  });

  it("with deleteUnreplicated, tier 0's retention deletes steps tier 1 lacks", async () => {
    const t0 = await openStorage(memoryRoot());
    const t1 = await outage();
    t1.down = true;
    const mgr = manager([t0, t1], 1, {
      tiers: [{ maxToKeep: 1 }],
      replication: { retry: fast, deleteUnreplicated: true },
    });
    mgr.on("error", () => undefined);
    for (let step = 0; step <= 3; step++) await mgr.save(step, state(step));
    await mgr.join();
    expect(await stepsOn(t0)).toEqual([3]);
  });

  it("close({ timeoutMs }) gives up on a tier that stays down and resolves what was not replicated", async () => {
    const t1 = await outage();
    t1.down = true;
    const mgr = manager([memoryRoot(), t1], 1, { replication: { retry: fast } });
    mgr.on("error", () => undefined);
    await mgr.save(5, state(5));
    await mgr.saveAsync(6, state(6));
    const result = await mgr.close({ timeoutMs: 200 });
    expect(result.unreplicated?.map((u) => [u.step, u.tier])).toEqual([
      [6, 1],
      [5, 1],
    ]);
    expect(await mgr.close()).toBe(result);
  });

  it("restores from the fastest tier that holds the step whole: damaged or missing on tier 0, it reads tier 1", async () => {
    const dir = await tempDir();
    const t1 = await openStorage(memoryRoot());
    const mgr = manager([pathToFileURL(join(dir, "local")).href, t1], 1, { replication: { retry: fast } });
    const errors = record(mgr, "error");
    for (let step = 1; step <= 2; step++) await mgr.save(step, state(step));
    await mgr.join();
    const file = (await readdir(join(dir, "local", "1"))).find((n) => n.endsWith(".safetensors"))!;
    const bytes = await readFile(join(dir, "local", "1", file));
    bytes[bytes.length - 1]! ^= 0xff;
    await writeFile(join(dir, "local", "1", file), bytes);
    expect(await mgr.restore(1)).toEqual(state(1));
    expect(errors).toEqual([
      expect.objectContaining({
        step: 1,
        operation: "restore",
        tier: 0,
        error: expect.objectContaining({ code: "corrupt" }),
      }),
    ]);
    await rm(join(dir, "local", "2"), { recursive: true });
    const target = state(0);
    await mgr.restore(2, target);
    expect(target).toEqual(state(2));
    await expect(mgr.restore(3)).rejects.toMatchObject({
      code: "not_found",
      message: expect.stringContaining("committed steps: 1, 2"),
    });
  });

  it("on a new node with tier 0 wiped, finds the newest step on tier 1 and restores it from there", async () => {
    const dir = await tempDir();
    const local = pathToFileURL(join(dir, "local")).href;
    const bucket = memoryRoot();
    const first = manager([local, bucket], 1, { replication: { retry: fast } });
    for (let step = 0; step <= 3; step++) await first.save(step, state(step));
    await first.close();
    await rm(join(dir, "local"), { recursive: true });
    const next = manager([local, bucket], 1, { replication: { retry: fast } });
    expect(await next.latestStep()).toBe(3);
    expect(await next.allSteps()).toEqual([0, 1, 2, 3]);
    expect(await next.restore(3)).toEqual(state(3));
    expect(await next.metadata(2)).toMatchObject({ step: 2 });
  });

  it("never copies a damaged step: the copy fails for good, is reported, and tier 1 lists nothing", async () => {
    const t0 = await openStorage(memoryRoot());
    const t1 = await openStorage(memoryRoot());
    const damaging = new FaultyStorageAdapter(t0);
    const mgr = manager([damaging, t1], 1, { replication: { retry: fast } });
    const errors = record(mgr, "error");
    // The copy reads the data file damaged: its CRCs do not match.
    const flip = (data: Uint8Array): Uint8Array => Uint8Array.from(data, (b, i) => (i === 0 ? b ^ 1 : b));
    const read = damaging.read.bind(damaging);
    damaging.read = async (path, range, options) =>
      path.endsWith(".safetensors") && range ? flip(await read(path, range, options)) : read(path, range, options);
    await mgr.save(7, state(7));
    const result = await mgr.join();
    expect(result.unreplicated).toEqual([
      expect.objectContaining({
        step: 7,
        tier: 1,
        permanent: true,
        error: expect.objectContaining({ code: "corrupt" }),
      }),
    ]);
    expect(errors).toEqual([expect.objectContaining({ step: 7, operation: "replication", tier: 1 })]);
    expect(await stepsOn(t1)).toEqual([]);
    expect(await objectNames(t1)).toEqual([]);
  });

  it("a new manager copies what an earlier one left unreplicated, once the tier it could not list is back", async () => {
    const t0 = memoryRoot();
    const t1 = await outage();
    t1.down = true;
    const first = manager([t0, t1], 1, { replication: { retry: fast } });
    first.on("error", () => undefined);
    for (let step = 0; step <= 2; step++) await first.save(step, state(step));
    expect((await first.close({ timeoutMs: 0 })).unreplicated).toHaveLength(3);
    const next = manager([t0, t1], 1, { replication: { retry: fast } });
    const errors = record(next, "error");
    const replicated = record(next, "replicated");
    // Tier 1 cannot be listed: it may hold a newer step, so no latest step is named; the failure is reported.
    await expect(next.latestStep()).rejects.toMatchObject({ code: "storage", context: { path: t1.root } });
    expect(errors.some((e) => e.operation === "listing" && e.tier === 1)).toBe(true);
    t1.down = false;
    await vi.waitFor(() => expect(replicated).toHaveLength(3), { timeout: 5_000 });
    expect((await next.join()).unreplicated).toEqual([]);
    expect(replicated.map((r) => r.step).sort()).toEqual([0, 1, 2]);
    expect(await stepsOn(t1)).toEqual([0, 1, 2]);
  });

  it("puts the preemption checkpoint on tier 0 and copies it before older steps", async () => {
    const signals = new EventEmitter();
    const t1 = await outage();
    const mgr = manager([memoryRoot(), t1], 100, {
      signalTarget: signals,
      checkpointOnPreemption: true,
      replication: { retry: fast },
    });
    mgr.on("error", () => undefined);
    const replicated = record(mgr, "replicated");
    t1.down = true;
    await mgr.save(100, state(100));
    await mgr.save(200, state(200));
    signals.emit("SIGTERM", "SIGTERM");
    expect(await mgr.saveAsync(237, state(237))).toBe(true);
    expect(mgr.reachedPreemption(237)).toBe(true);
    expect((await mgr.tiers())[0]!.steps).toEqual([100, 200, 237]);
    t1.down = false;
    expect((await mgr.close({ timeoutMs: 10_000 })).unreplicated).toEqual([]);
    expect(replicated.map((r) => r.step)).toEqual([237, 200, 100]);
  });

  it("refuses to save a step a slower tier holds, unless overwrite, which replaces it on every tier", async () => {
    const [t0, t1] = [await openStorage(memoryRoot()), await openStorage(memoryRoot())];
    const mgr = manager([t0, t1], 1, { replication: { retry: fast } });
    await mgr.save(1, state(1));
    await mgr.join();
    await t0.delete("1/metadata.json");
    await expect(mgr.save(1, state(2))).rejects.toMatchObject({ code: "already_exists" });
    await mgr.save(1, state(3), { overwrite: true });
    await mgr.join();
    expect(await mgr.restore(1)).toEqual(state(3));
    const bucket = manager(t1, 1, { readOnly: true });
    expect(await bucket.restore(1)).toEqual(state(3));
  });

  it("checks its tier options", () => {
    expect(() => new CheckpointManager("memory://x", 1, { tiers: [{ maxToKeep: 1 }] })).toThrow(
      /given only with several locations/,
    );
    expect(() => new CheckpointManager(["memory://a", "memory://b"], 1, { tiers: [{ every: 2 }] })).toThrow(
      /tier 0 takes every save/,
    );
    expect(() => new CheckpointManager(["memory://a", "memory://b"], 1, { tiers: [{}, {}, {}] })).toThrow(/at most 2/);
    expect(() => new CheckpointManager(["memory://a", "memory://a"], 1)).toThrow(/distinct/);
    expect(() => new CheckpointManager([], 1)).toThrow(/non-empty/);
    expect(() => new CheckpointManager(["memory://a", 3 as never], 1)).toThrow(/checkpoint location 1/);
    expect(
      () => new CheckpointManager(["memory://a", "memory://b"], 1, { replication: { retry: { baseDelayMs: 0 } } }),
    ).toThrow(/baseDelayMs/);
    expect(() => new CheckpointManager(["memory://a", "memory://b"], 1, { tiers: [undefined, { every: 0 }] })).toThrow(
      /every/,
    );
  });
});

describe("durations that reach a timer (issue 30, item 6)", () => {
  it("close({ timeoutMs: Infinity }) waits for the copies instead of giving up at once", async () => {
    const t1 = await outage();
    t1.down = true;
    const mgr = manager([memoryRoot(), t1], 1, { replication: { retry: fast } });
    mgr.on("error", () => undefined);
    await mgr.save(1, state(1));
    setTimeout(() => (t1.down = false), 300);
    const result = await mgr.close({ timeoutMs: Infinity });
    expect(result.unreplicated).toEqual([]);
    expect(await stepsOn(t1)).toEqual([1]);
  });

  it("refuses durations a timer cannot hold, and negative or non-numeric ones", async () => {
    const mgr = manager([memoryRoot(), memoryRoot()], 1);
    for (const timeoutMs of [-1, Number.NaN, "5" as never])
      await expect(mgr.close({ timeoutMs })).rejects.toMatchObject({ code: "invalid_argument" });
    for (const baseDelayMs of [2 ** 31, Infinity])
      expect(
        () => new CheckpointManager(["memory://a", "memory://b"], 1, { replication: { retry: { baseDelayMs } } }),
      ).toThrow(/baseDelayMs must be a number of ms from 1 to 2147483647/);
  });
});

describe("listing outages (issue 30, item 12)", () => {
  it("reports a tier that cannot be listed once per outage, however often it is asked and retried", async () => {
    const t1 = await outage();
    t1.down = true;
    const mgr = manager([memoryRoot(), t1], 1, { replication: { retry: fast, unlistedTiers: "leaveOut" } });
    const errors = record(mgr, "error");
    await mgr.save(1, state(1));
    for (let i = 0; i < 5; i++) expect(await mgr.latestStep()).toBe(1);
    for (let i = 0; i < 3; i++) expect(await mgr.allSteps()).toEqual([1]);
    // Discovery retries the listing with its backoff meanwhile.
    await new Promise((r) => setTimeout(r, 300));
    expect(errors.filter((e) => e.operation === "listing")).toHaveLength(1);
    t1.down = false;
    await mgr.reload();
    t1.down = true;
    await mgr.reload();
    expect(await mgr.latestStep()).toBe(1);
    expect(errors.filter((e) => e.operation === "listing")).toHaveLength(2);
    t1.down = false;
  });
});
