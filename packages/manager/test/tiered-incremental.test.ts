import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type StateDict, hostTensor, load, openStorage, readMetadata } from "@cairn/core";
import { afterAll, describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import { sameState } from "../src/testing/index.js";

const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

/** A frozen 256 KiB tensor and a small trained one. */
function state(step: number): StateDict {
  return {
    frozen: hostTensor("float32", [65536], new Float32Array(65536).fill(3)),
    trained: hostTensor("float32", [256], new Float32Array(256).fill(step)),
    step,
  };
}

async function fileRoot(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-tiered-incremental-"));
  dirs.push(dir);
  return dir;
}

const FROZEN_BYTES = 65536 * 4;

describe("incremental steps over two tiers", () => {
  it("the slower tier's copy references its own copy of the base; its retention keeps what a kept copy uses", async () => {
    const dir = await fileRoot();
    const t0 = `file://${dir}/fast`;
    const t1 = await openStorage(`memory://tiered-incremental/${process.pid}-a`);
    const mgr = new CheckpointManager([t0, t1], 1, {
      incremental: true,
      checkpointOnPreemption: false,
      tiers: [{ maxToKeep: 2 }, { maxToKeep: 2 }],
    });
    const replicated: { step: number; bytes: number }[] = [];
    mgr.on("replicated", (r) => replicated.push(r));
    for (let step = 1; step <= 5; step++)
      await (step % 2 === 0 ? mgr.saveAsync(step, state(step)) : mgr.save(step, state(step)));
    expect((await mgr.close()).retentionFailures).toEqual([]);
    // After the first copy, only the changed tensor crosses to the slower tier.
    for (const r of replicated) {
      if (r.step === 1) expect(r.bytes).toBeGreaterThan(FROZEN_BYTES);
      else expect(r.bytes, `step ${r.step}`).toBeLessThan(4096);
    }
    expect(replicated.map((r) => r.step).sort()).toEqual([1, 2, 3, 4, 5]);
    for (const step of [4, 5]) {
      const metadata = await readMetadata({ storage: t1, path: String(step) });
      expect(metadata.version).toBe("2.2");
      expect(Object.values(metadata.files).some((f) => f.dir !== undefined)).toBe(true);
      expect(sameState(await load({ storage: t1, path: String(step) }), state(step))).toBe(true);
    }
    // Tier 0 gone: tier 1 restores alone, its steps referencing only its own files.
    await rm(join(dir, "fast"), { recursive: true, force: true });
    const after = new CheckpointManager([t0, t1], 1, { readOnly: true });
    expect(await after.allSteps()).toEqual([4, 5]);
    expect(sameState(await after.restore(4), state(4))).toBe(true);
    await after.close();
    await t1.close();
  });

  it("with replication.incremental false, the slower tier gets whole copies that need nothing else", async () => {
    const dir = await fileRoot();
    const t0 = `file://${dir}/fast`;
    const t1 = await openStorage(`memory://tiered-incremental/${process.pid}-b`);
    const mgr = new CheckpointManager([t0, t1], 1, {
      incremental: true,
      maxToKeep: 2,
      checkpointOnPreemption: false,
      tiers: [{ maxToKeep: 2 }, { maxToKeep: 0 }],
      replication: { incremental: false },
    });
    for (let step = 1; step <= 5; step++)
      await (step % 2 === 0 ? mgr.saveAsync(step, state(step)) : mgr.save(step, state(step)));
    const result = await mgr.close();
    expect(result.retentionFailures).toEqual([]);
    // Tier 0: the last two steps, incremental, loading whole though steps 1..3 are gone.
    for (const step of [4, 5]) {
      const metadata = await readMetadata(`${t0}/${step}`);
      expect(metadata.version).toBe("2.2");
      expect(Object.values(metadata.files).some((f) => f.dir !== undefined)).toBe(true);
      expect(sameState(await load(`${t0}/${step}`), state(step))).toBe(true);
    }
    // Tier 1: every step, each materialized: no file is referenced elsewhere.
    for (let step = 1; step <= 5; step++) {
      const metadata = await readMetadata({ storage: t1, path: String(step) });
      expect(
        Object.values(metadata.files).every((f) => f.dir === undefined),
        `step ${step}`,
      ).toBe(true);
      expect(sameState(await load({ storage: t1, path: String(step) }), state(step))).toBe(true);
    }
    await rm(join(dir, "fast"), { recursive: true, force: true });
    const after = new CheckpointManager([t0, t1], 1, { readOnly: true });
    expect(sameState(await after.restore(3), state(3))).toBe(true);
    await after.close();
    await t1.close();
  });

  // Found by attack30: a damaged copy of the base on the slower tier failed every later copy for good.
  for (const damage of ["missing", "truncated"] as const)
    it(`a copy of the base on the slower tier with its frozen file ${damage} is copied past, never referenced`, async () => {
      const t0 = await openStorage(`memory://tiered-incremental/${process.pid}-damaged-${damage}-0`);
      const t1 = await openStorage(`memory://tiered-incremental/${process.pid}-damaged-${damage}-1`);
      const mgr = new CheckpointManager([t0, t1], 1, { incremental: true, checkpointOnPreemption: false });
      await mgr.save(1, state(1));
      expect((await mgr.join()).unreplicated).toEqual([]);
      let frozen = "";
      for await (const o of t1.list("1/")) if (o.size > FROZEN_BYTES) frozen = o.path;
      const bytes = await t1.read(frozen);
      await t1.delete(frozen);
      if (damage === "truncated") await t1.write(frozen, bytes.subarray(0, 100));
      await mgr.save(2, state(2));
      await mgr.save(3, state(3));
      expect((await mgr.close()).unreplicated).toEqual([]);
      for (const step of [2, 3])
        expect(sameState(await load({ storage: t1, path: String(step) }), state(step)), `step ${step}`).toBe(true);
      await Promise.all([t0.close(), t1.close()]);
    });
});
