// The webgl test page (issue 38): a small model trained on tfjs's webgl backend (in headless
// Chromium, SwiftShader's WebGL2), checkpointed with saveAsync while training goes on mutating the
// same variables on the device. The Node-side tests (device.test.ts) and the webgl benchmark
// (packages/bench/src/suites/webgl.bench.ts) call what it exposes.
import * as tf from "@tensorflow/tfjs";
import { exposeToTests } from "@cairn/browser-testing/page";
import type { StagingStrategy } from "@cairn/core";
import { type StorageAdapter, type WriteBody, type WriteOptions, openStorage } from "@cairn/core/storage";
import { CheckpointManager } from "@cairn/manager";
import "@cairn/storage-browser";
import { Training, type TrainingShape, useBackend } from "./training.js";

/** The backend asked for, and what tfjs's own WebGL context runs on (a silent fall-back to cpu shows here). */
async function backend(name: string): Promise<{ backend: string; renderer: string | null; float32: boolean }> {
  const used = await useBackend(name);
  const gl = (tf.backend() as { gpgpu?: { gl?: WebGL2RenderingContext } }).gpgpu?.gl;
  const info = gl?.getExtension("WEBGL_debug_renderer_info");
  return {
    backend: used,
    renderer: gl && info ? String(gl.getParameter(info.UNMASKED_RENDERER_WEBGL)) : null,
    float32: used === "webgl" && tf.env().getBool("WEBGL_RENDER_FLOAT32_ENABLED"),
  };
}

interface RunOptions {
  readonly root: string;
  readonly steps: number;
  readonly every: number;
  readonly staging?: StagingStrategy;
  readonly shape?: TrainingShape;
}

/** Trains `steps` steps saving nothing, reading the state's checksum every `every` steps: what the saves must hold. */
async function uninterrupted(options: Omit<RunOptions, "root">): Promise<Record<number, string>> {
  const run = new Training(options.shape);
  const checksums: Record<number, string> = {};
  for (let step = 1; step <= options.steps; step++) {
    await run.step();
    if (step % options.every === 0) checksums[step] = await run.stateChecksum();
  }
  run.dispose();
  return checksums;
}

/**
 * Storage whose data-file writes wait until training went `hold` steps past the newest saveAsync
 * (or ended): every save is still in flight while training mutates the variables it saved.
 */
class HeldWrites {
  trained = 0;
  #savedAt = 0;
  #finished = false;
  #waiting: (() => void)[] = [];

  constructor(readonly hold: number) {}

  saving(): void {
    this.#savedAt = this.trained;
  }

  stepped(): void {
    this.trained++;
    this.#release();
  }

  finished(): void {
    this.#finished = true;
    this.#release();
  }

  #open(): boolean {
    return this.#finished || this.trained >= this.#savedAt + this.hold;
  }

  #release(): void {
    if (!this.#open()) return;
    for (const resolve of this.#waiting.splice(0)) resolve();
  }

  wrap(storage: StorageAdapter): StorageAdapter {
    return {
      protocol: storage.protocol,
      root: storage.root,
      read: (path, range, options) => storage.read(path, range, options),
      write: async (path: string, body: WriteBody, options?: WriteOptions): Promise<void> => {
        if (path.endsWith(".safetensors") && !this.#open()) await new Promise<void>((r) => this.#waiting.push(r));
        return storage.write(path, body, options);
      },
      stat: (path) => storage.stat(path),
      list: (prefix) => storage.list(prefix),
      delete: (path) => storage.delete(path),
      close: () => storage.close(),
    };
  }
}

/**
 * Trains `steps` steps with a saveAsync every `every`, reading nothing of the state (a read would
 * leave a host copy in tfjs's cache, sparing reference staging its device read). Data files are
 * written only once training went `hold` steps on (default 2). For each step saved: the steps
 * trained between saveAsync's return and the commit.
 */
async function trainSaving(options: RunOptions & { hold?: number }): Promise<{ inFlight: Record<number, number> }> {
  const run = new Training(options.shape);
  const held = new HeldWrites(options.hold ?? 2);
  const manager = new CheckpointManager(held.wrap(await openStorage(options.root)), options.every, {
    staging: options.staging ?? "copy",
    checkpointOnPreemption: false,
  });
  const returned = new Map<number, number>();
  const inFlight: Record<number, number> = {};
  manager.on("committed", ({ step }) => (inFlight[step] = held.trained - returned.get(step)!));
  for (let step = 1; step <= options.steps; step++) {
    await run.step();
    held.stepped();
    if (manager.shouldSave(step)) {
      // Training does not move during saveAsync: the gate counts from here (the upload may begin before it returns).
      held.saving();
      await manager.saveAsync(step, await run.stateDict());
      returned.set(step, held.trained);
    }
  }
  held.finished();
  await manager.close();
  run.dispose();
  return { inFlight };
}

/** The checksum of `step` restored from `root` into a fresh model (or of the newest step). */
async function restored(
  root: string,
  step?: number,
  shape?: TrainingShape,
): Promise<{ step: number; checksum: string }> {
  const manager = new CheckpointManager(root, 1, { readOnly: true });
  const at = step ?? (await manager.latestStep());
  if (at === undefined) throw new Error(`no step in ${root}`);
  const run = new Training(shape);
  await run.restore(manager, at);
  await manager.close();
  const checksum = await run.stateChecksum();
  run.dispose();
  return { step: at, checksum };
}

/** Restores the newest step of `root` and trains on to `steps`, saving every `every`: the final checksum. */
async function resume(options: RunOptions): Promise<{ resumedFrom: number; checksum: string }> {
  const manager = new CheckpointManager(options.root, options.every, {
    staging: options.staging ?? "copy",
    checkpointOnPreemption: false,
  });
  const latest = await manager.latestStep();
  if (latest === undefined) throw new Error(`no step in ${options.root}`);
  const run = new Training(options.shape);
  await run.restore(manager, latest);
  for (let step = latest + 1; step <= options.steps; step++) {
    await run.step();
    if (manager.shouldSave(step)) await manager.saveAsync(step, await run.stateDict());
  }
  await manager.close();
  const checksum = await run.stateChecksum();
  run.dispose();
  return { resumedFrom: latest, checksum };
}

type Memory = Pick<tf.MemoryInfo, "numTensors" | "numBytes"> & {
  numBytesInGPU: number;
  numBytesInGPUAllocated: number;
};

function memory(): Memory {
  const m = tf.memory() as tf.MemoryInfo & { numBytesInGPU?: number; numBytesInGPUAllocated?: number };
  return {
    numTensors: m.numTensors,
    numBytes: m.numBytes,
    numBytesInGPU: m.numBytesInGPU ?? -1,
    numBytesInGPUAllocated: m.numBytesInGPUAllocated ?? -1,
  };
}

/**
 * `saves` saveAsyncs, one per training step, with tf.memory() read before each, once it returned
 * (copy staging: staged) and, for reference staging, once the save was written (`join`). What
 * differs from the level before is returned, save by save, beside the levels after a warm-up and
 * at the end.
 */
async function deviceMemory(options: { root: string; saves: number; staging: StagingStrategy }): Promise<{
  warm: Memory;
  end: Memory;
  /** Saves after which memory was not back at its level from before the save, with both levels. */
  notBack: { step: number; before: Memory; after: Memory }[];
  /** Tensors held by the longest-held staging (reference staging holds clones until written). */
  heldTensors: number;
}> {
  const run = new Training();
  const manager = new CheckpointManager(options.root, 1, {
    staging: options.staging,
    maxToKeep: 2,
    checkpointOnPreemption: false,
  });
  const warmUp = 3;
  for (let step = 1; step <= warmUp; step++) {
    await run.step();
    await manager.saveAsync(step, await run.stateDict());
  }
  await manager.join();
  const warm = memory();
  const notBack: { step: number; before: Memory; after: Memory }[] = [];
  let heldTensors = 0;
  const same = (a: Memory, b: Memory): boolean =>
    a.numTensors === b.numTensors && a.numBytes === b.numBytes && a.numBytesInGPU === b.numBytesInGPU;
  for (let step = warmUp + 1; step <= warmUp + options.saves; step++) {
    await run.step();
    const state = await run.stateDict();
    const before = memory();
    await manager.saveAsync(step, state);
    let after = memory();
    heldTensors = Math.max(heldTensors, after.numTensors - before.numTensors);
    if (options.staging === "reference") {
      await manager.join();
      after = memory();
    }
    if (!same(before, after)) notBack.push({ step, before, after });
  }
  await manager.close();
  const end = memory();
  run.dispose();
  return { warm, end, notBack, heldTensors };
}

exposeToTests({ backend, uninterrupted, trainSaving, restored, resume, deviceMemory });
