import { type HostTensor, type StateDict, type StorageOptions, hostTensor } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";

export interface ManagerRunOptions {
  /** A fresh, empty root URL for each test. */
  readonly url: () => string;
  /** What the storage needs (endpoint, credentials, test-server workarounds). */
  readonly storageOptions?: () => StorageOptions;
  readonly timeoutMs?: number;
}

/** A run's state at `step`: 4 MiB of float32 and a few small entries, each value telling steps apart. */
export function runState(step: number): StateDict {
  const w = hostTensor("float32", [1 << 20]);
  for (let i = 0; i < w.data.length; i += 4099) w.data[i] = step + i;
  return {
    model: { w, b: hostTensor("int64", [3], BigInt64Array.of(BigInt(step), -1n, 2n ** 40n)) },
    optim: { m: hostTensor("bfloat16", [16], new Uint16Array(16).fill(step)) },
    rng: Uint8Array.of(step, 7),
    step,
  };
}

/** Whether two states hold the same values, compared byte for byte (much faster than a deep equal of large arrays). */
export function sameState(a: StateDict, b: StateDict): boolean {
  const flat = (v: unknown): unknown =>
    ArrayBuffer.isView(v)
      ? Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64")
      : v && typeof v === "object"
        ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, flat(x)]))
        : typeof v === "bigint"
          ? String(v)
          : v;
  return JSON.stringify(flat(a)) === JSON.stringify(flat(b));
}

/**
 * A whole CheckpointManager run over one storage: save and saveAsync on the interval,
 * retention, listing from a new manager, metadata, and bit-exact restores, in place and
 * without a target. A storage package runs it against its real test server.
 */
export function managerRunSuite(name: string, options: ManagerRunOptions): void {
  describe(`CheckpointManager run: ${name}`, { timeout: options.timeoutMs ?? 120_000 }, () => {
    it("saves on the interval (sync and async), keeps the newest by retention, lists and restores bit-exactly", async () => {
      const url = options.url();
      const storageOptions = options.storageOptions?.() ?? {};
      const mgr = new CheckpointManager(url, 10, {
        maxToKeep: 2,
        keepPeriod: 20,
        storageOptions,
        checkpointOnPreemption: false,
      });
      const committed: number[] = [];
      mgr.on("committed", ({ step }) => committed.push(step));
      for (let step = 0; step <= 50; step++) {
        if (!mgr.shouldSave(step)) continue;
        const saved =
          step % 20 === 0
            ? await mgr.save(step, runState(step), { metrics: { loss: 1 / (step + 1) } })
            : await mgr.saveAsync(step, runState(step));
        expect(saved).toBe(true);
      }
      await mgr.join();
      expect(committed).toEqual([0, 10, 20, 30, 40, 50]);
      // Newest two (40, 50) plus every 20th step.
      expect(await mgr.allSteps()).toEqual([0, 20, 40, 50]);
      await mgr.close();

      const reader = new CheckpointManager(url, 10, { readOnly: true, storageOptions });
      expect(await reader.latestStep()).toBe(50);
      expect((await reader.metadata(20)).metrics).toEqual({ loss: 1 / 21 });
      for (const step of await reader.allSteps())
        expect(sameState(await reader.restore(step), runState(step)), `step ${step}`).toBe(true);
      const target = runState(0);
      const w = (target.model as { w: HostTensor }).w;
      await reader.restore(40, target);
      expect((target.model as { w: HostTensor }).w).toBe(w);
      expect(sameState(target, runState(40))).toBe(true);
      await expect(reader.restore(10, runState(0))).rejects.toMatchObject({
        code: "not_found",
        message: expect.stringContaining("committed steps: 0, 20, 40, 50"),
      });
      await reader.close();
    });
  });
}
