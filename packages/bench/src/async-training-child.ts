// One run of the async-training suite, in its own process (so peak RSS is its own):
//   <mode> <root>   mode: sync | copy | reference | rawfs | rawfs-direct | overlap
// rawfs and rawfs-direct are baselines without Cairn: the same bytes, in one buffer, written to
// one file per save with node:fs by a worker thread of its own (write in 64 MiB calls, then
// fsync): through the page cache, or with O_DIRECT from page-aligned memory as Cairn's file://
// writes. Their step times show what writing 1 GiB at all costs the training loop here.
// overlap is the best a reference-staging design could hope for when it overlaps the copy with
// the writes: the training thread copies the tensors into that buffer, paced as Cairn's
// background copy but for OVERLAP_SHARE of each turn, and the worker (at nice 19, as Cairn's
// upload worker) writes each 4 MiB with O_DIRECT as soon as it lands; no checksums, header,
// plan or commit.
// A 1 GiB state dict of tfjs tensors (three 256 MiB and 2,000 small ones) is saved again and
// again, as a training job saves. The first save also allocates the staging pool and starts the
// upload worker thread; only how long it blocked is reported. The next CAIRN_BENCH_SAVES (default
// 5) are measured, each after ten idle training steps: how long the call blocked and when the
// checkpoint committed (medians), and the mean step time of a small tfjs training loop over
// every idle step and over every step while a save was in flight (until its `committed` event),
// and, from that event, how long the training thread spent in reference staging's background
// copy (median). (Copy staging's blocking against its floor: the copy-staging suite.)
// One save is in flight for only a handful of steps, too few to resolve a 10 % difference on
// this machine; five give some thirty.
import { rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { pageAlignedSharedBytes } from "@cairn/core/storage";
import { CheckpointManager } from "@cairn/manager";
import { median, sendResult } from "./support.js";
import { trainingState, trainer } from "./tfjs-training.js";

const [mode, root] = process.argv.slice(2) as [
  "sync" | "copy" | "reference" | "rawfs" | "rawfs-direct" | "overlap",
  string,
];
const MiB = 1 << 20;
const { state, bytes } = await trainingState();
const trainStep = trainer();
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
/** Idle steps before each save (and four times as many before the first): fewer in a quick run. */
const IDLE = process.env.CAIRN_BENCH_QUICK === "1" ? 3 : 10;
const idle = await stepTime(4 * IDLE);

const SAVES = Number(process.env.CAIRN_BENCH_SAVES ?? (process.env.CAIRN_BENCH_QUICK === "1" ? 2 : 5));
let committedAt = 0;
/** Per step: ms the training thread spent in reference staging's background copy (the manager's `committed` event). */
const copyMs = new Map<number, number>();

/** overlap: the share of each event-loop turn its copy works for (Cairn's background copy: 0.1). */
const OVERLAP_SHARE = Number(process.env.OVERLAP_SHARE ?? 0.2);

/**
 * overlap's copy: every tensor into `into`, 4 MiB at a time, each turn working for OVERLAP_SHARE
 * of the time the thread was away (as Cairn's Pace), publishing in `landed` how far it got.
 */
async function copyPaced(into: Uint8Array, landed: Int32Array, step: number): Promise<void> {
  let until = 0;
  const pause = async (): Promise<void> => {
    const yielded = performance.now();
    await new Promise((resolve) => setImmediate(resolve));
    const resumed = performance.now();
    until = resumed + (resumed - yielded) * OVERLAP_SHARE;
  };
  await pause();
  let at = 0;
  let ms = 0;
  for (const t of Object.values(state)) {
    const data = (await t.data()) as Float32Array;
    const source = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    for (let piece = 0; piece < source.byteLength; piece += 4 * MiB) {
      const started = performance.now();
      into.set(source.subarray(piece, piece + 4 * MiB), at + piece);
      ms += performance.now() - started;
      Atomics.store(landed, 0, at + Math.min(piece + 4 * MiB, source.byteLength));
      Atomics.notify(landed, 0);
      if (performance.now() >= until) await pause();
    }
    at += source.byteLength;
  }
  copyMs.set(step, ms);
}

/** One save: resolves when the call returns (training may go on), with when it is committed. */
type SaveOnce = (step: number, force?: boolean) => Promise<{ committed: Promise<void> }>;
let saveOnce: SaveOnce;
let settle: () => Promise<void>;
let close: () => Promise<void>;

if (mode === "rawfs" || mode === "rawfs-direct" || mode === "overlap") {
  const direct = mode !== "rawfs";
  const overlap = mode === "overlap";
  // O_DIRECT writes whole pages: the buffer is rounded up, the file cut back to size.
  const all = direct
    ? pageAlignedSharedBytes(Math.ceil(bytes / 4096) * 4096)
    : new Uint8Array(new SharedArrayBuffer(bytes));
  if (!overlap) {
    let at = 0;
    for (const t of Object.values(state)) {
      const data = t.dataSync() as Float32Array;
      all.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), at);
      at += data.byteLength;
    }
  }
  /** overlap: bytes of this save copied so far; the worker writes up to there. */
  const landed = new Int32Array(new SharedArrayBuffer(4));
  const writer = new Worker(
    `const { parentPort } = require("node:worker_threads");
     const fs = require("node:fs");
     if (${overlap}) require("node:os").setPriority(Number(fs.readFileSync("/proc/thread-self/stat", "utf8").split(" ", 1)[0]), 19);
     parentPort.on("message", ({ path, buffer, size, direct, landed }) => {
       const view = new Uint8Array(buffer);
       const fd = fs.openSync(path, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | (direct ? fs.constants.O_DIRECT : 0));
       for (let at = 0; at < view.length; ) {
         let ready = view.length;
         if (landed) {
           const copied = new Int32Array(landed);
           // Wait for a whole 4 MiB piece, or the rest.
           while ((ready = Atomics.load(copied, 0)) < size && ready < at + (4 << 20)) Atomics.wait(copied, 0, ready);
           ready = ready >= size ? view.length : Math.floor(ready / 4096) * 4096;
         }
         at += fs.writeSync(fd, view, at, Math.min(landed ? 4 << 20 : 64 << 20, ready - at), at);
       }
       if (direct) fs.ftruncateSync(fd, size);
       fs.fsyncSync(fd);
       fs.closeSync(fd);
       parentPort.postMessage("done");
     });`,
    { eval: true },
  );
  const dir = fileURLToPath(root);
  let previous: string | undefined;
  saveOnce = async (step) => {
    const path = `${dir}-${step}.bin`;
    const committed = new Promise<void>((resolve) =>
      writer.once("message", () => {
        committedAt = performance.now();
        if (previous !== undefined) rmSync(previous, { force: true });
        previous = path;
        resolve();
      }),
    );
    Atomics.store(landed, 0, 0);
    writer.postMessage({ path, buffer: all.buffer, size: bytes, direct, landed: overlap ? landed.buffer : undefined });
    if (overlap) void copyPaced(all, landed, step);
    return { committed };
  };
  settle = async () => undefined;
  close = async () => {
    await writer.terminate();
    if (previous !== undefined) rmSync(previous, { force: true });
  };
} else {
  const manager = new CheckpointManager(root, 1, {
    staging: mode === "reference" ? "reference" : "copy",
    checkpointOnPreemption: false,
    maxToKeep: 2,
  });
  const commits = new Map<number, () => void>();
  manager.on("committed", ({ step, backgroundCopySeconds }) => {
    committedAt = performance.now();
    copyMs.set(step, backgroundCopySeconds * 1000);
    commits.get(step)?.();
  });
  saveOnce = async (step, force = false) => {
    const committed = new Promise<void>((resolve) => commits.set(step, resolve));
    if (mode === "sync") {
      await manager.save(step, state, { force });
      committedAt = performance.now();
    } else {
      await manager.saveAsync(step, state, { force });
    }
    return { committed };
  };
  // After the commit the manager's bookkeeping (retention) still runs on this thread until
  // join() resolves, but the save is no longer in flight.
  settle = async () => {
    await manager.join();
  };
  close = async () => {
    await manager.close();
  };
}

const first = performance.now();
const firstSave = await saveOnce(0, true);
const firstBlockedMs = performance.now() - first;
await firstSave.committed;
await settle();
const blocked: number[] = [];
const seconds: number[] = [];
let idleMs = idle.ms * idle.steps;
let idleSteps = idle.steps;
let busyMs = 0;
let busySteps = 0;
for (let step = 1; step <= SAVES; step++) {
  // Idle steps before each save, so a drift in the machine's speed during the run shows on both sides.
  const before = await stepTime(IDLE);
  idleMs += before.ms * before.steps;
  idleSteps += before.steps;
  const started = performance.now();
  const { committed } = await saveOnce(step);
  blocked.push(performance.now() - started);
  if (mode !== "sync") {
    const busy = await stepTime(1, committed);
    busyMs += busy.ms * busy.steps;
    busySteps += busy.steps;
  }
  await committed;
  await settle();
  seconds.push((committedAt - started) / 1000);
}
await close();
const peakRss = process.resourceUsage().maxRSS * 1024;

const blockedMs = median(blocked);
const totalSeconds = median(seconds);
sendResult({
  mode,
  bytes,
  saves: SAVES,
  firstBlockedMs,
  blockedMs,
  totalSeconds,
  backgroundMBps: bytes / MiB / (totalSeconds - blockedMs / 1000),
  backgroundCopyMs: copyMs.size > 0 ? median([...copyMs].filter(([step]) => step > 0).map(([, ms]) => ms)) : undefined,
  idleStepMs: idleMs / idleSteps,
  busyStepMs: busySteps > 0 ? busyMs / busySteps : undefined,
  busySteps,
  peakRss,
});
