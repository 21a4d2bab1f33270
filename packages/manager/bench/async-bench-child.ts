// One run of the async-save benchmark, in its own process (so peak RSS is its own):
//   <mode> <root>   mode: sync | copy | reference
// A 1 GiB state dict of tfjs tensors (three 256 MiB and 2,000 small ones) is saved again and
// again, as a training job saves. The first save also allocates the staging pool and starts the
// upload worker thread; only how long it blocked is reported. The next CAIRN_BENCH_SAVES (default
// 5) are measured, each after ten idle training steps: how long the call blocked and when the
// checkpoint committed (medians), and the mean step time of a small tfjs training loop over
// every idle step and over every step while a save was in flight (until its `committed` event).
// One save is in flight for only a handful of steps, too few to resolve a 10 % difference on
// this machine; five give some thirty.
import * as tf from "@tensorflow/tfjs";
import { CheckpointManager } from "@cairn/manager";
import { median } from "./bench-support.js";

const [mode, root] = process.argv.slice(2) as ["sync" | "copy" | "reference", string];
await tf.setBackend("cpu");
const MiB = 1 << 20;

const state: Record<string, tf.Tensor> = {};
for (let i = 0; i < 3; i++) state[`large${i}`] = tf.variable(tf.fill([(256 * MiB) / 4], i + 0.5));
for (let i = 0; i < 2000; i++) state[`small${i}`] = tf.variable(tf.fill([Math.floor((256 * MiB) / 2000 / 4)], i));
const bytes = Object.values(state).reduce((n, t) => n + t.size * 4, 0);

const model = tf.sequential({ layers: [tf.layers.dense({ units: 256, inputShape: [256], activation: "relu" }), tf.layers.dense({ units: 1 })] });
const optimizer = tf.train.adam(0.001);
const x = tf.randomNormal([256, 256]);
const y = tf.randomNormal([256, 1]);
function trainStep(): void {
  const loss = optimizer.minimize(() => tf.losses.meanSquaredError(y, model.predict(x) as tf.Tensor) as tf.Scalar, true);
  if (loss) loss.dispose();
}
/** Mean ms per training step over `steps`, or until `until` settles (at least `steps`). */
async function stepTime(steps: number, until?: Promise<unknown>): Promise<{ ms: number; steps: number }> {
  let settled = until === undefined;
  void until?.then(() => (settled = true));
  const started = performance.now();
  let n = 0;
  while (n < steps || !settled) {
    trainStep();
    n++;
    // Let I/O callbacks run between steps, as a real training loop awaiting data would.
    await new Promise((r) => setImmediate(r));
  }
  return { ms: (performance.now() - started) / n, steps: n };
}
for (let i = 0; i < 5; i++) trainStep();
const idle = await stepTime(40);

const SAVES = Number(process.env.CAIRN_BENCH_SAVES ?? 5);
const manager = new CheckpointManager(root, 1, { staging: mode === "reference" ? "reference" : "copy", checkpointOnPreemption: false, maxToKeep: 2 });
const committed = new Map<number, () => void>();
let committedAt = 0;
manager.on("committed", ({ step }) => {
  committedAt = performance.now();
  committed.get(step)?.();
});
const first = performance.now();
if (mode === "sync") await manager.save(0, state, { force: true });
else await manager.saveAsync(0, state, { force: true });
const firstBlockedMs = performance.now() - first;
await manager.join();
const blocked: number[] = [];
const seconds: number[] = [];
let idleMs = idle.ms * idle.steps;
let idleSteps = idle.steps;
let busyMs = 0;
let busySteps = 0;
for (let step = 1; step <= SAVES; step++) {
  // Idle steps before each save, so a drift in the machine's speed during the run shows on both sides.
  const before = await stepTime(10);
  idleMs += before.ms * before.steps;
  idleSteps += before.steps;
  const done = new Promise<void>((resolve) => committed.set(step, resolve));
  const started = performance.now();
  if (mode === "sync") {
    await manager.save(step, state);
    blocked.push(performance.now() - started);
    committedAt = performance.now();
  } else {
    await manager.saveAsync(step, state);
    blocked.push(performance.now() - started);
    // Steps until the commit: after it the manager's bookkeeping (retention) still runs on this
    // thread until join() resolves, but the save is no longer in flight.
    const busy = await stepTime(1, done);
    busyMs += busy.ms * busy.steps;
    busySteps += busy.steps;
    await manager.join();
  }
  seconds.push((committedAt - started) / 1000);
}
await manager.close();
const blockedMs = median(blocked);
const totalSeconds = median(seconds);
process.stdout.write(
  JSON.stringify({
    mode,
    bytes,
    saves: SAVES,
    firstBlockedMs,
    blockedMs,
    totalSeconds,
    backgroundMBps: bytes / MiB / (totalSeconds - blockedMs / 1000),
    idleStepMs: idleMs / idleSteps,
    busyStepMs: busySteps > 0 ? busyMs / busySteps : undefined,
    busySteps,
    peakRss: process.resourceUsage().maxRSS * 1024,
  }),
);
