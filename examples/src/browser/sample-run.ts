// The checkpoint the browser demo's "load from URL" button finds at /sample-run: a few steps of the
// demo's model trained in Node (tfjs's cpu backend), saved and published for HTTP (cairn-index.json).
import "@cairn/storage-local";
import { CheckpointManager } from "@cairn/manager";
import { publishStep } from "@cairn/storage-http";
import { Training, useBackend } from "./training.js";

/** Trains `steps` steps into the directory `root`, saves and publishes the last: its weights checksum. */
export async function publishSampleRun(root: string, steps = 10): Promise<{ step: number; checksum: string }> {
  await useBackend("cpu");
  const run = new Training();
  const manager = new CheckpointManager(root, steps, { checkpointOnPreemption: false });
  try {
    for (let step = 1; step <= steps; step++) await run.step();
    await manager.save(steps, await run.stateDict(), { force: true });
    await manager.close();
    await publishStep(root, steps);
    return { step: steps, checksum: await run.weightsChecksum() };
  } finally {
    run.dispose();
  }
}
