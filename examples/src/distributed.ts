// Distributed checkpointing with N local ranks, as torchrun would start them:
//   pnpm cairn-run --nproc-per-node 2 examples/src/distributed.ts [--path DIR] [--steps N]
// Each rank holds its rows of an embedding table (sharded) and a copy of a small head
// (replicated, written once). A CheckpointManager with the process group saves every 5 steps
// in the background, keeps 2, and resumes from the latest step when run again. A SIGTERM to
// cairn-run (or to any rank) makes every rank checkpoint at one agreed step and stop. At the
// end the latest step is loaded column-sharded, under renamed keys, with a custom LoadPlanner.
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { type HostTensor, hostTensor, layoutBoxes, load, shardedTensor } from "@cairn/core";
import { initProcessGroup } from "@cairn/distributed";
import "@cairn/storage-local";
import { CheckpointManager } from "@cairn/manager";
import { RenamingLoadPlanner } from "./renaming-load-planner.js";

const { values } = parseArgs({
  options: { path: { type: "string", default: "checkpoints/distributed" }, steps: { type: "string", default: "23" } },
});
const root = resolve(values.path);
const group = await initProcessGroup();
const { rank, worldSize } = group;
const SHAPE = [1000, 64];

const [mine] = layoutBoxes("rows", rank, worldSize, SHAPE);
const rows = hostTensor("float32", mine!.sizes);
const state = {
  model: {
    embedding: shardedTensor("float32", SHAPE, [{ offsets: mine!.offsets, tensor: rows }]),
    head: hostTensor("float32", [64]),
  },
  step: 0,
};

const manager = new CheckpointManager(root, 5, { processGroup: group, maxToKeep: 2 });
const latest = await manager.latestStep();
if (latest !== undefined) {
  await manager.restore(latest, state);
  if (rank === 0) console.log(`resumed from step ${latest}`);
}
console.log(`rank ${rank} of ${worldSize}: training from step ${state.step + 1}`);
for (let step = state.step + 1; step <= state.step + Number(values.steps); step++) {
  // A stand-in for a training step: every value becomes the step number.
  rows.data.fill(step);
  state.model.head.data.fill(step);
  await manager.saveAsync(step, { ...state, step });
  if (manager.reachedPreemption(step)) {
    console.log(`preempted: checkpointed step ${step}, stopping`);
    break;
  }
  await new Promise((r) => setTimeout(r, 20));
}
await manager.join();
const steps = await manager.allSteps();
if (rank === 0) console.log(`steps on ${root}: ${steps.join(", ")}`);

// Any other sharding loads it: here columns, into a model whose `model.*` keys are now `encoder.*`.
const last = steps.at(-1)!;
const [cols] = layoutBoxes("cols", rank, worldSize, SHAPE);
const columns = hostTensor("float32", cols!.sizes);
const renamed = {
  encoder: {
    embedding: shardedTensor("float32", SHAPE, [{ offsets: cols!.offsets, tensor: columns }]),
    head: hostTensor("float32", [64]),
  },
};
const result = await load(renamed, {
  checkpointId: `${root}/${last}`,
  processGroup: group,
  planner: new RenamingLoadPlanner({ encoder: "model" }),
});
const ok = (t: HostTensor): boolean => t.data.every((v) => v === last);
console.log(
  `rank ${rank}: columns ${cols!.offsets[1]}..${cols!.offsets[1]! + cols!.sizes[1]!} of step ${last} loaded (${result.bytesRead} bytes read), values ${ok(columns) && ok(renamed.encoder.head) ? "correct" : "WRONG"}`,
);
await manager.close();
await group.close();
