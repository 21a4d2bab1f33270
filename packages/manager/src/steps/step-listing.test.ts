import { type HostTensor, type StorageAdapter, hostTensor, openStorage, readMetadata } from "@cairn/core";
import { METADATA_FILE } from "@cairn/core/format";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { mkdtemp, writeFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import { StepListingCache, listSteps } from "./step-listing.js";

const TENSORS = 32;
const ELEMENTS = 4096;
/** Bytes of every tensor of `runState`: what one step restores. */
const STATE_BYTES = TENSORS * ELEMENTS * 4;

/** A state of many tensors of which each step changes two, so an incremental step uses parts of several earlier steps' files. */
function runState(step: number, tensors: Record<string, HostTensor>): Record<string, HostTensor> {
  for (const k of [step % TENSORS, (step * 7 + 3) % TENSORS])
    tensors[`t${k}`] = hostTensor("float32", [ELEMENTS], new Float32Array(ELEMENTS).fill(step * 1000 + k));
  return { ...tensors };
}

const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

async function tempRoot(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-listing-"));
  dirs.push(dir);
  return join(dir, "run");
}

/** An incremental run of 12 steps with `maxToKeep: 3`: steps 10–12 are kept, some deleted steps' files stay for them. */
async function incrementalRun(): Promise<string> {
  const root = await tempRoot();
  const mgr = new CheckpointManager(root, 1, { incremental: true, maxToKeep: 3, checkpointOnPreemption: false });
  const tensors: Record<string, HostTensor> = {};
  for (let k = 0; k < TENSORS; k++) tensors[`t${k}`] = hostTensor("float32", [ELEMENTS], new Float32Array(ELEMENTS));
  for (let step = 1; step <= 12; step++) await mgr.save(step, runState(step, tensors), { metrics: { loss: 1 / step } });
  expect(await mgr.close()).toEqual({ retentionFailures: [] });
  return root;
}

/** Counts reads of metadata.json through an adapter (one that fails nothing). */
function counting(storage: StorageAdapter): { storage: FaultyStorageAdapter; reads: () => number } {
  const wrapped = new FaultyStorageAdapter(storage);
  return { storage: wrapped, reads: () => wrapped.calls.read.filter((p) => p.endsWith(METADATA_FILE)).length };
}

describe("listSteps: a root as cairn ls, ui and doctor show it", () => {
  it("lists deleted steps whose files kept incremental steps use as referenced, never as uncommitted", async () => {
    const root = await incrementalRun();
    const storage = await openStorage(root);
    const { steps } = await listSteps(storage);
    await storage.close();
    const committed = steps.filter((s) => s.state === "committed").map((s) => s.step);
    expect(committed).toEqual([10, 11, 12]);
    const referenced = steps.filter((s) => s.state === "referenced");
    expect(referenced.length).toBeGreaterThan(0);
    expect(steps.filter((s) => s.state === "uncommitted")).toEqual([]);
    for (const s of referenced) {
      expect(s.committed).toBe(false);
      expect(s.referencedBy.length).toBeGreaterThan(0);
      expect(s.referencedBy.every((user) => committed.includes(user))).toBe(true);
    }
    // Written plus referenced is the state a restore reads (plus headers and metadata.json), not a folder's share of it.
    for (const step of committed) {
      const s = steps.find((x) => x.step === step)!;
      expect(s.referencedBytes).toBeGreaterThan(0);
      expect(s.bytes).toBeLessThan(STATE_BYTES / 4);
      expect(s.bytes + s.referencedBytes).toBeGreaterThanOrEqual(STATE_BYTES);
      expect(s.bytes + s.referencedBytes).toBeLessThan(STATE_BYTES * 1.1);
      expect(s.metrics).toEqual({ loss: 1 / step });
    }
    // A kept step another kept step uses says so.
    const users = new Map(steps.map((s) => [s.step, s.referencedBy]));
    const metadata = await readMetadata(join(root, "12"));
    for (const file of Object.values(metadata.files))
      if (file.dir !== undefined) expect(users.get(Number(file.dir))).toContain(12);
  });

  it("a step directory holding a file no committed step uses is an uncommitted leftover, even beside referenced files", async () => {
    const root = await incrementalRun();
    const storage = await openStorage(root);
    const referenced = (await listSteps(storage)).steps.find((s) => s.state === "referenced")!;
    await writeFile(join(root, String(referenced.step), "data-r0-stray.safetensors"), "stray");
    await writeFile(join(root, "13-not-a-step"), "x");
    const { steps, others } = await listSteps(storage);
    await storage.close();
    const again = steps.find((s) => s.step === referenced.step)!;
    expect(again.state).toBe("uncommitted");
    expect(again.referencedBy).toEqual(referenced.referencedBy);
    expect(again.objects).toBe(referenced.objects + 1);
    expect(others).toBe(1);
  });

  it("with a cache, a listing reads again only the metadata.json that changed", async () => {
    const root = await tempRoot();
    const writer = new CheckpointManager(root, 1, { incremental: true, checkpointOnPreemption: false });
    for (const step of [1, 2, 3])
      await writer.save(step, { w: hostTensor("float32", [4]) }, { metrics: { loss: step } });
    await writer.close();
    const { storage, reads } = counting(await openStorage(root));
    const cache = new StepListingCache();
    const first = await listSteps(storage, { cache });
    expect(reads()).toBe(3);
    expect(await listSteps(storage, { cache })).toEqual(first);
    expect(reads()).toBe(3);
    const manager = new CheckpointManager(root, 1, { incremental: true, checkpointOnPreemption: false });
    await manager.save(4, { w: hostTensor("float32", [2]) }, { metrics: { loss: 0.25 } });
    await manager.close();
    const again = await listSteps(storage, { cache });
    expect(reads()).toBe(4);
    expect(again.steps.map((s) => s.step)).toEqual([1, 2, 3, 4]);
    expect(again.steps[3]!.metrics).toEqual({ loss: 0.25 });
    await storage.close();
  });
});
