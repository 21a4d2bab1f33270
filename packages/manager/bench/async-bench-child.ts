// One run of the async-save benchmark, in its own process (so peak RSS is its own):
//   <mode> <root>   mode: sync | copy | reference
// A 1 GiB state dict of tfjs tensors (three 256 MiB and 2,000 small ones) is saved twice, as a
// training job saves again and again. The first save also allocates the staging pool and starts
// the upload worker thread; only how long it blocked is reported. For the second, the child
// reports how long the call blocked, when the checkpoint committed, and the step time of a small
// tfjs training loop before the save and while it is in flight (until its `committed` event).
import * as tf from "@tensorflow/tfjs";
import { CheckpointManager } from "@cairn/manager";

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

const manager = new CheckpointManager(root, 1, { staging: mode === "reference" ? "reference" : "copy", checkpointOnPreemption: false });
let committedAt = 0;
let secondCommitted: () => void;
const second = new Promise<void>((resolve) => (secondCommitted = resolve));
manager.on("committed", ({ step }) => {
  committedAt = performance.now();
  if (step === 1) secondCommitted();
});
const first = performance.now();
if (mode === "sync") await manager.save(0, state, { force: true });
else await manager.saveAsync(0, state, { force: true });
const firstBlockedMs = performance.now() - first;
await manager.join();
const started = performance.now();
let blocked: number;
let busy: { ms: number; steps: number } | undefined;
if (mode === "sync") {
  await manager.save(1, state);
  blocked = performance.now() - started;
  committedAt = performance.now();
} else {
  await manager.saveAsync(1, state);
  blocked = performance.now() - started;
  // Steps until the commit: after it the manager's bookkeeping (retention) still runs on this
  // thread until join() resolves, but the save is no longer in flight.
  busy = await stepTime(1, second);
  await manager.join();
}
await manager.close();
const seconds = (committedAt - started) / 1000;
process.stdout.write(
  JSON.stringify({
    mode,
    bytes,
    firstBlockedMs,
    blockedMs: blocked,
    totalSeconds: seconds,
    backgroundMBps: bytes / MiB / ((committedAt - started - blocked) / 1000),
    idleStepMs: idle.ms,
    busyStepMs: busy?.ms,
    busySteps: busy?.steps,
    peakRss: process.resourceUsage().maxRSS * 1024,
  }),
);
