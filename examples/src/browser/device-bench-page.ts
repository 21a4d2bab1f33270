// The webgl suite's page (packages/bench/src/suites/webgl.bench.ts): on tfjs's webgl backend, how
// long saveAsync holds the training loop against a synchronous save, how long a training step
// takes with a save in flight against an idle one, with copy and with reference staging.
// Everything is timed in the page (performance.now), the baselines in the same page and run.
import * as tf from "@tensorflow/tfjs";
import { exposeToTests } from "@cairn/browser-testing/page";
import type { StagingStrategy } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import "@cairn/storage-browser";
import { Training, type TrainingShape, useBackend } from "./training.js";

async function setUp(backend: string): Promise<{ backend: string; userAgent: string }> {
  return { backend: await useBackend(backend), userAgent: navigator.userAgent };
}

/** Bytes of a training state (weights and Adam's two slots). */
function stateBytes(run: Training): number {
  return run.model.getWeights().reduce((sum, w) => sum + w.size * 4, 0) * 3;
}

let runs = 0;
function manager(staging: StagingStrategy): CheckpointManager {
  return new CheckpointManager(`opfs://bench-webgl/run-${runs++}`, 1, {
    staging,
    maxToKeep: 1,
    checkpointOnPreemption: false,
  });
}

/**
 * Per round, after a training step each: a synchronous save (manager.save, resolving once
 * committed), a saveAsync with copy staging and one with reference staging, each timed to its
 * return and then joined untimed; one manager each, kept across rounds (staging buffers reused,
 * as in a training run). Seconds per round.
 */
async function blocking(options: { shape: TrainingShape; rounds: number }): Promise<{
  bytes: number;
  sync: number[];
  copy: number[];
  reference: number[];
}> {
  const run = new Training(options.shape);
  const result = { bytes: stateBytes(run), sync: [] as number[], copy: [] as number[], reference: [] as number[] };
  const managers = { sync: manager("copy"), copy: manager("copy"), reference: manager("reference") };
  let step = 0;
  const timed = async (how: keyof typeof managers): Promise<number> => {
    await run.step();
    const state = await run.stateDict();
    const started = performance.now();
    if (how === "sync") await managers[how].save(++step, state);
    else await managers[how].saveAsync(++step, state);
    const seconds = (performance.now() - started) / 1000;
    await managers[how].join();
    return seconds;
  };
  // One of each first, unmeasured: shaders compiled, staging buffers and OPFS's worker made.
  for (const how of ["sync", "copy", "reference"] as const) await timed(how);
  for (let round = 0; round < options.rounds; round++)
    for (const how of round % 2 === 0
      ? (["sync", "copy", "reference"] as const)
      : (["reference", "copy", "sync"] as const))
      result[how].push(await timed(how));
  await Promise.all(Object.values(managers).map((m) => m.close()));
  run.dispose();
  return result;
}

/**
 * Trains `steps` steps with a saveAsync every `every`, timing each step (forward, backward,
 * update and reading the loss); a step is "in flight" when a save had returned and was not yet
 * committed as it began. Seconds per step, by kind.
 */
async function stepTimes(options: {
  shape: TrainingShape;
  staging: StagingStrategy;
  steps: number;
  every: number;
}): Promise<{ idle: number[]; inFlight: number[]; saves: number }> {
  const run = new Training(options.shape);
  for (let i = 0; i < 3; i++) await run.step();
  const result = { idle: [] as number[], inFlight: [] as number[], saves: 0 };
  const saving = manager(options.staging);
  let pending = 0;
  saving.on("committed", () => pending--);
  for (let step = 1; step <= options.steps; step++) {
    const busy = pending > 0;
    const started = performance.now();
    await run.step();
    (busy ? result.inFlight : result.idle).push((performance.now() - started) / 1000);
    if (step % options.every === 0) {
      await saving.saveAsync(step, await run.stateDict());
      pending++;
      result.saves++;
    }
  }
  await saving.close();
  run.dispose();
  return result;
}

async function clear(): Promise<void> {
  await (await navigator.storage.getDirectory()).removeEntry("bench-webgl", { recursive: true }).catch(() => undefined);
}

/** What tf.memory() says of the device now (the suite reports it beside the staging figures). */
function deviceMemory(): { numTensors: number; numBytesInGPU: number } {
  const m = tf.memory() as tf.MemoryInfo & { numBytesInGPU?: number };
  return { numTensors: m.numTensors, numBytesInGPU: m.numBytesInGPU ?? -1 };
}

exposeToTests({ setUp, blocking, stepTimes, clear, deviceMemory });
