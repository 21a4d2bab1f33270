// Issue 30, items 1 and 2: a copy on a slower tier counts as a step's replica only when it is
// readable and the same checkpoint; a step number a slower tier holds is refused without
// overwrite, whatever the order of calls.
import { type StorageAdapter, openStorage, save } from "@cairn/core";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { OutageStorage } from "../testing/outage-storage.js";
import { afterEach, describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import { smallState as state } from "../testing/small-state.js";

let roots = 0;
const memoryRoot = (): string => `memory://tiered-identity/${process.pid}-${roots++}`;
const fast = { baseDelayMs: 20, maxDelayMs: 100 };
const opened: CheckpointManager[] = [];

afterEach(async () => {
  await Promise.all(opened.splice(0).map((m) => m.close().catch(() => undefined)));
});

function manager(...args: ConstructorParameters<typeof CheckpointManager>): CheckpointManager {
  const mgr = new CheckpointManager(args[0], args[1], { checkpointOnPreemption: false, ...args[2] });
  opened.push(mgr);
  return mgr;
}

/** Steps `from..to` of another run (values offset by 1000), committed under `storage` by core's plain save. */
async function otherRun(storage: StorageAdapter, from: number, to: number): Promise<void> {
  for (let step = from; step <= to; step++) await save(state(1000 + step), { storage, path: String(step) });
}

async function truncatedMetadata(storage: StorageAdapter, step: number): Promise<void> {
  const scratch = await openStorage(memoryRoot());
  await save(state(-1), { storage: scratch, path: "x" });
  const bytes = await scratch.read("x/metadata.json");
  await storage.write(`${step}/metadata.json`, bytes.subarray(0, bytes.length >> 1));
}

describe("a copy on a slower tier counts only when it is this step's checkpoint and readable", () => {
  it("a damaged copy already there is never taken as the replica: tier 0 keeps the step, which restores", async () => {
    const [t0, t1] = [await openStorage(memoryRoot()), await openStorage(memoryRoot())];
    const mgr = manager([t0, t1], 1, { tiers: [{ maxToKeep: 1 }], replication: { retry: fast } });
    const errors: unknown[] = [];
    mgr.on("error", (e) => errors.push(e));
    expect(await mgr.latestStep()).toBeUndefined();
    // An earlier, interrupted attempt left a truncated metadata.json on the durable tier after this manager listed it.
    await truncatedMetadata(t1, 2);
    await mgr.save(2, state(2));
    await mgr.save(3, state(3));
    const result = await mgr.close();
    expect(result.unreplicated).toEqual([
      expect.objectContaining({
        step: 2,
        tier: 1,
        permanent: true,
        error: expect.objectContaining({ code: "mismatch" }),
      }),
    ]);
    expect(errors).toContainEqual(expect.objectContaining({ step: 2, operation: "replication", tier: 1 }));
    const again = manager([t0, t1], 1, { tiers: [{ maxToKeep: 1 }], replication: { retry: fast } });
    again.on("error", () => undefined);
    expect(await again.restore(2)).toEqual(state(2));
    expect(await again.restore(3)).toEqual(state(3));
  });

  it("refuses a step whose damaged copy a slower tier lists, and replaces it with overwrite", async () => {
    const [t0, t1] = [await openStorage(memoryRoot()), await openStorage(memoryRoot())];
    await truncatedMetadata(t1, 2);
    const mgr = manager([t0, t1], 1, { tiers: [{ maxToKeep: 1 }], replication: { retry: fast } });
    mgr.on("error", () => undefined);
    await expect(mgr.save(2, state(2))).rejects.toMatchObject({
      code: "already_exists",
      message: expect.stringContaining("on tier 1"),
    });
    await mgr.save(2, state(2), { overwrite: true });
    await mgr.save(3, state(3));
    expect((await mgr.close()).unreplicated).toEqual([]);
    const bucket = manager(t1, 1, { readOnly: true });
    expect(await bucket.restore(2)).toEqual(state(2));
  });

  it("refuses, as its first call, a step number another run committed on the durable tier", async () => {
    const [t0, t1] = [await openStorage(memoryRoot()), await openStorage(memoryRoot())];
    await otherRun(t1, 1, 30);
    const mgr = manager([t0, t1], 1, { tiers: [{ maxToKeep: 1 }], replication: { retry: fast } });
    await expect(mgr.save(30, state(30))).rejects.toMatchObject({ code: "already_exists" });
    await mgr.save(31, state(31));
    await mgr.close();
    const bucket = manager(t1, 1, { readOnly: true });
    expect(await bucket.restore(30)).toEqual(state(1030));
    expect(await bucket.restore(31)).toEqual(state(31));
  });

  it("a step saved while the durable tier could not be listed is never replaced by, nor deleted for, another run's copy", async () => {
    const t0 = await openStorage(memoryRoot());
    const t1 = new OutageStorage(await openStorage(memoryRoot()));
    await otherRun(t1, 29, 30);
    t1.down = true;
    const mgr = manager([t0, t1], 1, { tiers: [{ maxToKeep: 1 }], replication: { retry: fast } });
    mgr.on("error", () => undefined);
    await mgr.save(30, state(30));
    await mgr.save(31, state(31));
    t1.down = false;
    const result = await mgr.close({ timeoutMs: 10_000 });
    expect(result.unreplicated).toEqual([
      expect.objectContaining({
        step: 30,
        tier: 1,
        permanent: true,
        error: expect.objectContaining({ code: "mismatch" }),
      }),
    ]);
    const again = manager([t0, t1], 1, { readOnly: true });
    expect(await again.restore(30)).toEqual(state(30));
    expect(await again.restore(31)).toEqual(state(31));
  });

  it("after a rollback every step number the durable tier holds is refused alike, and overwrite replaces each", async () => {
    const [t0, t1] = [await openStorage(memoryRoot()), await openStorage(memoryRoot())];
    await otherRun(t1, 1, 40);
    const mgr = manager([t0, t1], 1, { replication: { retry: fast } });
    expect(await mgr.latestStep()).toBe(40);
    expect(await mgr.restore(30)).toEqual(state(1030));
    for (let step = 31; step <= 34; step++)
      await expect(mgr.save(step, state(step))).rejects.toMatchObject({ code: "already_exists" });
    for (let step = 31; step <= 34; step++) await mgr.save(step, state(step), { overwrite: true });
    expect((await mgr.close()).unreplicated).toEqual([]);
    const bucket = manager(t1, 1, { readOnly: true });
    for (let step = 31; step <= 34; step++) expect(await bucket.restore(step)).toEqual(state(step));
    expect(await bucket.restore(35)).toEqual(state(1035));
  });

  // Found by attack30: a listed copy of this very checkpoint counted before its files were checked.
  for (const damage of ["missing", "truncated", "flipped"] as const)
    it(`a copy of this checkpoint found with a data file ${damage} is not the replica${damage === "flipped" ? " with readBack" : ""}: tier 0 keeps the step`, async () => {
      const [t0, t1] = [await openStorage(memoryRoot()), await openStorage(memoryRoot())];
      const first = manager([t0, t1], 1, { replication: { retry: fast } });
      await first.save(1, state(1));
      expect((await first.close()).unreplicated).toEqual([]);
      let file = "";
      for await (const o of t1.list("1/")) if (!o.path.endsWith("metadata.json")) file = o.path;
      const bytes = await t1.read(file);
      await t1.delete(file);
      if (damage === "truncated") await t1.write(file, bytes.subarray(0, bytes.length - 1));
      if (damage === "flipped")
        await t1.write(
          file,
          bytes.map((b, i) => (i === bytes.length - 1 ? b ^ 1 : b)),
        );
      const next = manager([t0, t1], 1, { tiers: [{ maxToKeep: 1 }], replication: { retry: fast, readBack: true } });
      next.on("error", () => undefined);
      await next.save(2, state(2));
      await next.save(3, state(3));
      expect((await next.close()).unreplicated).toEqual([
        expect.objectContaining({
          step: 1,
          tier: 1,
          permanent: true,
          error: expect.objectContaining({ code: "mismatch" }),
        }),
      ]);
      expect(await manager(t0, 1, { readOnly: true }).restore(1)).toEqual(state(1));
    });

  // Found by attack30: the overwrite's intent lived only in the process that saved it.
  for (const found of ["older", "newer"] as const)
    it(`an overwrite the durable tier missed (down until the process ended) replaces an ${found === "older" ? "older checkpoint there from a later process" : "older one only: a newer one there stays"}`, async () => {
      const t0 = await openStorage(memoryRoot());
      const t1 = new OutageStorage(await openStorage(memoryRoot()));
      const first = manager([t0, t1], 1, { replication: { retry: fast } });
      for (let step = 1; step <= 5; step++) await first.save(step, state(step));
      expect((await first.close()).unreplicated).toEqual([]);
      t1.down = true;
      const rollback = manager([t0, t1], 1, { replication: { retry: fast } });
      rollback.on("error", () => undefined);
      expect(await rollback.restore(3)).toEqual(state(3));
      await rollback.save(4, state(104), { overwrite: true });
      await rollback.save(5, state(105), { overwrite: true });
      expect((await rollback.close({ timeoutMs: 100 })).unreplicated).toHaveLength(2);
      t1.down = false;
      if (found === "newer") {
        await new Promise((r) => setTimeout(r, 5));
        await t1.delete("5/metadata.json");
        await save(state(905), { storage: t1, path: "5" });
      }
      const next = manager([t0, t1], 1, { replication: { retry: fast } });
      next.on("error", () => undefined);
      await next.save(6, state(106));
      expect((await next.close()).unreplicated).toEqual(
        found === "older" ? [] : [expect.objectContaining({ step: 5, permanent: true })],
      );
      const bucket = manager(t1, 1, { readOnly: true });
      expect(await bucket.restore(4)).toEqual(state(104));
      expect(await bucket.restore(5)).toEqual(state(found === "older" ? 105 : 905));
    });

  // Found by attack30: the running copy of the old save failed (its files deleted) and was taken as the new save's copy.
  it("an overwrite while the step's earlier copy is running replicates the new save", async () => {
    const t0 = await openStorage(memoryRoot());
    const bucket = await openStorage(memoryRoot());
    const slow = new FaultyStorageAdapter(bucket);
    const write = slow.write.bind(slow);
    slow.write = async (...args) => {
      await new Promise((r) => setTimeout(r, 50));
      return write(...args);
    };
    const mgr = manager([t0, slow], 1, { tiers: [{ maxToKeep: 1 }], replication: { retry: fast } });
    const errors: unknown[] = [];
    mgr.on("error", (e) => errors.push(e));
    await mgr.save(5, state(5));
    await new Promise((r) => setTimeout(r, 25));
    await mgr.save(5, state(105), { overwrite: true });
    await mgr.save(6, state(106));
    expect((await mgr.close()).unreplicated).toEqual([]);
    expect(errors).toEqual([]);
    expect(await manager(bucket, 1, { readOnly: true }).restore(5)).toEqual(state(105));
  });

  it("delete(step) while its copy is running: nothing reaches the slower tier, and nothing is reported unreplicated", async () => {
    const t0 = await openStorage(memoryRoot());
    const bucket = await openStorage(memoryRoot());
    const slow = new FaultyStorageAdapter(bucket);
    const write = slow.write.bind(slow);
    slow.write = async (...args) => {
      await new Promise((r) => setTimeout(r, 50));
      return write(...args);
    };
    const mgr = manager([t0, slow], 1, { replication: { retry: fast } });
    const errors: unknown[] = [];
    mgr.on("error", (e) => errors.push(e));
    await mgr.save(5, state(5));
    await new Promise((r) => setTimeout(r, 25));
    await mgr.delete(5);
    expect((await mgr.close()).unreplicated).toEqual([]);
    expect(errors).toEqual([]);
    expect(await manager(bucket, 1, { readOnly: true }).allSteps()).toEqual([]);
  });

  it("a copy an earlier process made, found there, counts: tier 0 may then delete the step", async () => {
    const [t0, t1] = [await openStorage(memoryRoot()), await openStorage(memoryRoot())];
    const first = manager([t0, t1], 1, { replication: { retry: fast } });
    await first.save(1, state(1));
    await first.close();
    // The next process has not seen tier 1's copy: its own copy finds it there already.
    const next = manager([t0, t1], 1, { tiers: [{ maxToKeep: 1 }], replication: { retry: fast } });
    await next.save(2, state(2));
    expect((await next.join()).unreplicated).toEqual([]);
    expect((await next.tiers())[0]!.steps).toEqual([2]);
    expect(await next.restore(1)).toEqual(state(1));
  });
});
