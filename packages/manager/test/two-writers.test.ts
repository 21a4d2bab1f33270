import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type StateDict, type StorageAdapter, hostTensor, openStorage } from "@cairn/core";
import { FaultyStorageAdapter, runTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import type { ManagerEvents } from "../src/events/manager-events.js";

const WRITER = fileURLToPath(new URL("./fixtures/writer-child.ts", import.meta.url));
const dirs: string[] = [];
afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

async function fileRoot(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-two-writers-"));
  dirs.push(dir);
  return `file://${dir}/run`;
}

function state(step: number): StateDict {
  return { w: hostTensor("float32", [1024], new Float32Array(1024).fill(step)), step };
}

/** Saves every `stride`-th step from `from` and collects every rejection and error event instead of throwing. */
async function writeSteps(
  mgr: CheckpointManager,
  from: number,
  to: number,
  stride: number,
  failures: unknown[],
): Promise<void> {
  for (let step = from; step < to; step += stride)
    await mgr.saveAsync(step, state(step)).catch((e: unknown) => failures.push(e));
}

/** Another manager, at the worst moment: it deletes a step right after this one listed it and before it reads the step's metadata. */
class DeletedUnderfoot extends FaultyStorageAdapter {
  readonly #other: CheckpointManager;
  readonly #victims: Set<number>;

  constructor(inner: StorageAdapter, other: CheckpointManager, victims: number[]) {
    super(inner);
    this.#other = other;
    this.#victims = new Set(victims);
  }

  override async read(
    path: string,
    range?: Parameters<StorageAdapter["read"]>[1],
    options?: Parameters<StorageAdapter["read"]>[2],
  ): Promise<Uint8Array> {
    const step = Number(path.split("/")[0]);
    if (path.endsWith("/metadata.json") && this.#victims.delete(step)) await this.#other.delete(step);
    return super.read(path, range, options);
  }
}

describe("two managers writing under one root", () => {
  it("treat a step the other deleted between listing and reading as gone: no save fails, nothing is reported", async () => {
    const inner = await openStorage(`memory://two-writers/${process.pid}-underfoot`);
    const other = new CheckpointManager(inner, 1);
    await other.save(1, state(1));
    await other.save(2, state(2));
    const mgr = new CheckpointManager(new DeletedUnderfoot(inner, other, [1, 2]), 1, { maxToKeep: 1 });
    const errors: ManagerEvents["error"][] = [];
    mgr.on("error", (e) => errors.push(e));
    expect(await mgr.save(3, state(3))).toBe(true);
    expect(await mgr.save(4, state(4))).toBe(true);
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
    expect(errors).toEqual([]);
    // Its deletions listed the root (to mark what every step uses) while mgr was saving: what mgr did since shows after a reload.
    await other.reload();
    expect(await other.allSteps()).toEqual([4]);
    await other.close();
  });

  it(
    "interleaved in one process on file://: no save rejects, nothing is reported, and maxToKeep holds at the end",
    { timeout: 60_000 },
    async () => {
      const root = await fileRoot();
      const options = { maxToKeep: 2, maxPendingAsync: 2, checkpointOnPreemption: false };
      const a = new CheckpointManager(root, 1, options);
      const b = new CheckpointManager(root, 1, options);
      const failures: unknown[] = [];
      for (const mgr of [a, b]) mgr.on("error", (e) => failures.push(e));
      await Promise.all([writeSteps(a, 0, 120, 2, failures), writeSteps(b, 1, 120, 2, failures)]);
      for (const mgr of [a, b]) expect(await mgr.close()).toEqual({ retentionFailures: [] });
      expect(failures).toEqual([]);
      const after = new CheckpointManager(root, 1, { maxToKeep: 2, checkpointOnPreemption: false });
      await after.save(120, state(120));
      expect(await after.allSteps()).toEqual([119, 120]);
      expect((await after.restore(119)).step).toBe(119);
      await after.close();
    },
  );

  it("in two processes on file://: neither sees a save or retention fail", { timeout: 120_000 }, async () => {
    const root = await fileRoot();
    const mgr = new CheckpointManager(root, 1, { maxToKeep: 2, maxPendingAsync: 2, checkpointOnPreemption: false });
    const failures: unknown[] = [];
    mgr.on("error", (e) => failures.push(e));
    const [child] = await Promise.all([
      runTypeScript(WRITER, [root, "1", "160", "2", "2"]),
      writeSteps(mgr, 0, 160, 2, failures),
    ]);
    expect(child.code, child.stderr).toBe(0);
    const line = child.stdout.split("\n").find((l) => l.startsWith("RESULT "));
    expect(JSON.parse(line!.slice(7))).toEqual({ failures: [], retentionFailures: 0 });
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
    expect(failures).toEqual([]);
    const steps = await new CheckpointManager(root, 1, { readOnly: true }).allSteps();
    // The last pass of either writer saw both newest steps (no pass deletes a step newer than ones it keeps).
    expect(steps).toEqual(expect.arrayContaining([158, 159]));
    expect(steps.length).toBeLessThanOrEqual(4);
  });
});
