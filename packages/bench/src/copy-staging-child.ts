// One process of the copy-staging suite: the async-training state (1 GiB of tfjs tensors on the
// cpu backend; 16 MiB in a quick run) saved again and again to file:// by a manager with copy
// staging. After a first save (which readies the staging pool and the upload worker) and a second
// (the first staged one, which makes the pool's buffers known here), each of CAIRN_BENCH_SAVES
// (default 7; 2 quick) turns takes four samples, the order rotated every turn, each after three
// training steps:
//   save      how long `saveAsync` blocks, then the wait until it committed (not timed);
//   floor     what copy staging cannot go below on this thread: every tensor's `data()` awaited
//             in turn, each followed by a copy of its bytes (`Uint8Array.set`) into resident
//             page-aligned shared memory allocated at start-up (where the upload worker can read
//             them, as staging segments are);
//   poolCopy  the same loop into the staging pool's own buffers, each tensor where staging puts
//             it: what copy staging cannot go below in the memory it has (the same copy runs
//             slower in some memory than in other on this VM: docs/benchmarks.md);
//   sync      a synchronous `save` of the same state (the other baseline).
// Each sample is timed as wall time and as this thread's CPU time, which a busy machine skews far
// less. Then, unpaired, the parts of the floor: `data()` alone; the copy into the same shared
// memory with libc's memcpy (Buffer's fill), which V8's `set` into shared memory is not, but whose
// speed depends on where source and target sit in their pages (docs/benchmarks.md);
// `Uint8Array.set` into plain memory; the floor's copy into shared memory allocated after the
// first save, as the staging pool's is (the same copy runs slower in memory allocated later in
// the process: docs/benchmarks.md); the pool floor's loop copying by memcpy instead of `set`
// (each large tensor at the page offset staging gives it, where glibc's memcpy was 3× slower than
// `set` on one machine and 2× faster on another: docs/benchmarks.md); and the limits, no tfjs: the
// state's byte count copied in one call from resident plain memory into resident shared memory,
// by libc's memcpy (this machine's limit: a placement it copies fast at) and by `set`
// (JavaScript's limit into memory a worker reads).
import { Buffer } from "node:buffer";
import { StagingPool } from "@cairn/core";
import { pageAlignedSharedBytes } from "@cairn/core/storage";
import { CheckpointManager } from "@cairn/manager";
import { type Variable, fill } from "@tensorflow/tfjs";
import { threadCpuSeconds } from "./process-stats.js";
import { sendResult } from "./support.js";
import { trainingState, trainer } from "./tfjs-training.js";

/** One sample: wall and this thread's CPU, in ms. */
export interface Spent {
  readonly wallMs: number;
  readonly cpuMs: number;
}

export interface CopyStagingRun {
  readonly bytes: number;
  /** One per turn, taken side by side. */
  readonly save: Spent[];
  readonly floor: Spent[];
  readonly poolCopy: Spent[];
  readonly sync: Spent[];
  /** The floor's parts, one per turn after the three samples. */
  readonly dataOnly: Spent[];
  readonly memcpyShared: Spent[];
  readonly setPlain: Spent[];
  readonly floorLateMemory: Spent[];
  /** `poolCopy`'s loop copying with libc's memcpy (Buffer's fill) rather than `set`. */
  readonly poolMemcpy: Spent[];
  /** The limits: the same byte count in one call, plain into shared memory, memcpy and `set`. */
  readonly memcpyLimit: Spent[];
  readonly setLimit: Spent[];
}

const [root] = process.argv.slice(2) as [string];
const SAVES = Number(process.env.CAIRN_BENCH_SAVES ?? (process.env.CAIRN_BENCH_QUICK === "1" ? 2 : 7));
const { state, bytes } = await trainingState();
const trainStep = trainer();
for (let i = 0; i < 5; i++) trainStep();

async function timed(work: () => Promise<unknown>): Promise<Spent> {
  const cpu = threadCpuSeconds();
  const started = performance.now();
  await work();
  const wallMs = performance.now() - started;
  return { wallMs, cpuMs: (threadCpuSeconds() - cpu) * 1000 };
}

const shared = pageAlignedSharedBytes(bytes).fill(1);
const plain = new Uint8Array(bytes).fill(1);
const memcpy = (into: Uint8Array, at: number, from: Uint8Array): void =>
  void Buffer.from(into.buffer, into.byteOffset + at, from.byteLength).fill(from);
const set = (into: Uint8Array, at: number, from: Uint8Array): void => into.set(from, at);
/** Every tensor's `data()` awaited in turn, each copied by `copy` into `into` (or not at all). */
async function readAll(into?: Uint8Array, copy = set): Promise<void> {
  let at = 0;
  for (const t of Object.values(state)) {
    const data = (await t.data()) as Float32Array;
    if (into) copy(into, at, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    at += data.byteLength;
  }
}

/**
 * The staging pool's buffers as the manager's last staged save took them, in its layout: one per
 * data file, each starting with the file's header. The manager keeps its pool to itself, so its
 * `acquire` is watched.
 */
let poolBuffers: readonly Uint8Array[] = [];
const acquire = StagingPool.prototype.acquire;
StagingPool.prototype.acquire = async function (this: StagingPool, ...args: Parameters<StagingPool["acquire"]>) {
  const buffers = await acquire.apply(this, args);
  poolBuffers = buffers;
  return buffers;
};
/** Where a safetensors file's data starts: after its 8-byte header length and the header. */
const dataStart = (file: Uint8Array): number =>
  8 + Number(new DataView(file.buffer, file.byteOffset, 8).getBigUint64(0, true));
/** `readAll` into the pool's buffers, each tensor after the one before, as the default planner's files hold them. */
async function readAllIntoPool(copy = set): Promise<void> {
  let file = 0;
  let at = dataStart(poolBuffers[0]!);
  for (const t of Object.values(state)) {
    const data = (await t.data()) as Float32Array;
    while (at + data.byteLength > poolBuffers[file]!.byteLength) {
      if (++file === poolBuffers.length) throw new Error("the staging pool's buffers are not laid out as expected");
      at = dataStart(poolBuffers[file]!);
    }
    copy(poolBuffers[file]!, at, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    at += data.byteLength;
  }
}

const manager = new CheckpointManager(root, 1, { staging: "copy", checkpointOnPreemption: false, maxToKeep: 2 });
await manager.saveAsync(0, state, { force: true });
await manager.join();
const late = pageAlignedSharedBytes(bytes).fill(1);
/** Training moves the weights between saves (a save of unchanged weights is warned about). */
const touched = state.small0 as Variable;
let step = 0;
touched.assign(fill(touched.shape, -1));
await manager.saveAsync(++step, state);
await manager.join();
if (poolBuffers.length === 0) throw new Error("saveAsync staged nothing into the staging pool");

const run: CopyStagingRun = {
  bytes,
  save: [],
  floor: [],
  poolCopy: [],
  sync: [],
  dataOnly: [],
  memcpyShared: [],
  setPlain: [],
  floorLateMemory: [],
  poolMemcpy: [],
  memcpyLimit: [],
  setLimit: [],
};
const samples: Record<"save" | "floor" | "poolCopy" | "sync", () => Promise<Spent>> = {
  save: async () => {
    const spent = await timed(() => manager.saveAsync(++step, state));
    await manager.join();
    return spent;
  },
  floor: () => timed(() => readAll(shared)),
  poolCopy: () => timed(() => readAllIntoPool()),
  sync: () => timed(() => manager.save(++step, state)),
};
const order = ["save", "floor", "poolCopy", "sync"] as const;
for (let turn = 0; turn < SAVES; turn++) {
  for (let k = 0; k < order.length; k++) {
    const kind = order[(turn + k) % order.length]!;
    for (let i = 0; i < 3; i++) trainStep();
    touched.assign(fill(touched.shape, turn * order.length + k + 1));
    run[kind].push(await samples[kind]());
  }
  run.dataOnly.push(await timed(() => readAll()));
  run.memcpyShared.push(await timed(() => readAll(shared, memcpy)));
  run.setPlain.push(await timed(() => readAll(plain)));
  run.floorLateMemory.push(await timed(() => readAll(late)));
  run.poolMemcpy.push(await timed(() => readAllIntoPool(memcpy)));
  run.memcpyLimit.push(await timed(async () => memcpy(shared, 0, plain)));
  run.setLimit.push(await timed(async () => set(shared, 0, plain)));
}
await manager.close();
sendResult(run);
