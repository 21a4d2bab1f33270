// Background saves on file://: how long `saveAsync` blocks the caller, the first one on a fresh
// manager (after `prepare()`, and without it) and the steady ones after it, against a synchronous
// `save` of the same state. Each size runs in child processes of its own (fresh manager, its own
// peak RSS): one calls `prepare(state)` before its first saveAsync, one does not, and one's first
// call is a `save` (the baseline for a first saveAsync: both pay a fresh process's first save).
// The state is 16 float32 host tensors.
import { fileURLToPath } from "node:url";
import { type StateDict, hostTensor } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { report } from "../report.js";
import { GiB, MiB, median, quick, range, rounds, runChild, sendResult, withTempDir } from "../support.js";

const SUITE = "async";
const TENSORS = 16;
/** Steady saves measured per child, after the first. */
const STEADY = quick ? 3 : 5;

interface ChildResult {
  /** Seconds `prepare()` took (0 when not called). */
  readonly prepare: number;
  /** Seconds the first `saveAsync` blocked. */
  readonly first: number;
  /** Seconds each later `saveAsync` blocked. */
  readonly steady: readonly number[];
  /** Seconds each synchronous `save` took. */
  readonly sync: readonly number[];
  /** Seconds a plain memcpy (`Uint8Array.set`) of every tensor into resident memory took: the floor of copy staging. */
  readonly memcpy: number;
}

type Variant = "prepared" | "unprepared" | "sync-first";

/** One child: a fresh manager saving `bytes` of state with `saveAsync` then `save`, or (sync-first) with `save` once. */
async function child(bytes: number, variant: Variant): Promise<void> {
  const elements = bytes / TENSORS / 4;
  const state: StateDict = {};
  for (let i = 0; i < TENSORS; i++)
    state[`t${i}`] = hostTensor("float32", [elements], new Float32Array(elements).fill(i + 0.5));
  await withTempDir(async (dir) => {
    const manager = new CheckpointManager(`file://${dir}`, 1, { maxToKeep: 2, checkpointOnPreemption: false });
    const seconds = async (work: () => Promise<unknown>): Promise<number> => {
      const started = performance.now();
      await work();
      return (performance.now() - started) / 1000;
    };
    if (variant === "sync-first") {
      const first = await seconds(() => manager.save(0, state));
      await manager.close();
      sendResult({ prepare: 0, first, steady: [], sync: [first], memcpy: 0 } satisfies ChildResult);
      return;
    }
    const prepare = variant === "prepared" ? await seconds(() => manager.prepare(state)) : 0;
    const first = await seconds(() => manager.saveAsync(0, state));
    await manager.join();
    const steady: number[] = [];
    const sync: number[] = [];
    for (let step = 1; step <= STEADY; step++) {
      steady.push(await seconds(() => manager.saveAsync(step, state)));
      await manager.join();
    }
    for (let step = STEADY + 1; step <= STEADY + 3; step++) sync.push(await seconds(() => manager.save(step, state)));
    await manager.close();
    const scratch = new Uint8Array(bytes / TENSORS).fill(1);
    const copyAll = (): void =>
      Object.values(state).forEach((t) => scratch.set(new Uint8Array((t as { data: Float32Array }).data.buffer)));
    copyAll();
    const copies: number[] = [];
    for (let i = 0; i < 3; i++) copies.push(await seconds(async () => copyAll()));
    const memcpy = median(copies);
    sendResult({ prepare, first, steady, sync, memcpy } satisfies ChildResult);
  }, "cairn-bench-async-");
}

async function measure(bytes: number, label: string): Promise<void> {
  const runs: {
    prepared: ChildResult;
    unprepared: ChildResult;
    syncFirst: number;
    rss: number;
    rssUnprepared: number;
  }[] = [];
  const run = (variant: Variant) =>
    runChild<ChildResult>(fileURLToPath(import.meta.url), ["child", String(bytes), variant]);
  for (let r = 0; r < rounds(2); r++) {
    const prepared = await run("prepared");
    const unprepared = await run("unprepared");
    const syncFirst = await run("sync-first");
    runs.push({
      prepared: prepared.result,
      unprepared: unprepared.result,
      syncFirst: syncFirst.result.first,
      rss: prepared.peakRss,
      rssUnprepared: unprepared.peakRss,
    });
  }
  const first = runs.map((r) => r.prepared.first);
  const steady = runs.flatMap((r) => r.prepared.steady);
  const sync = runs.flatMap((r) => [...r.prepared.sync, ...r.unprepared.sync]);
  const firstUnprepared = runs.map((r) => r.unprepared.first);
  const syncFirst = runs.map((r) => r.syncFirst);
  const rss = runs.map((r) => r.rss / MiB);
  const seconds = (xs: readonly number[]): string =>
    range(xs)
      .map((x) => x.toFixed(3))
      .join("–");
  const extra = {
    rounds: runs.length,
    firstRange: seconds(first),
    steadyRange: seconds(steady),
    syncRange: seconds(sync),
    prepareSeconds: median(runs.map((r) => r.prepared.prepare)),
    peakRssMiB: median(rss),
  };
  const ratioOf = (value: number, baseline: number) => ({ value, ratio: value / baseline });
  report({
    suite: SUITE,
    name: `first saveAsync after prepare(), fresh manager, ${label}`,
    ...ratioOf(median(first), median(steady)),
    unit: "s",
    baseline: { name: "steady saveAsync (median)", value: median(steady) },
    better: "lower",
    target: 1.5,
    extra,
  });
  report({
    suite: SUITE,
    name: `steady saveAsync blocking, ${label}`,
    ...ratioOf(median(steady), median(sync)),
    unit: "s",
    baseline: { name: "synchronous save (median)", value: median(sync) },
    better: "lower",
    target: 0.15,
    extra,
  });
  const memcpy = median(runs.map((r) => r.prepared.memcpy));
  report({
    suite: SUITE,
    name: `steady saveAsync blocking vs a plain memcpy of the same bytes, ${label}`,
    ...ratioOf(median(steady), memcpy),
    unit: "s",
    baseline: { name: "Uint8Array.set of every tensor into resident memory", value: memcpy },
    better: "lower",
    extra: { memcpyVsSyncSave: memcpy / median(sync), memcpyGBps: bytes / memcpy / 1e9 },
  });
  report({
    suite: SUITE,
    name: `first saveAsync without prepare(), fresh manager, ${label}`,
    ...ratioOf(median(firstUnprepared), median(syncFirst)),
    unit: "s",
    baseline: { name: "first synchronous save, fresh manager", value: median(syncFirst) },
    better: "lower",
    target: 1,
    extra: {
      rounds: runs.length,
      firstRange: seconds(firstUnprepared),
      syncFirstRange: seconds(syncFirst),
      steadySync: median(sync),
      secondSaveAsync: median(runs.map((r) => r.unprepared.steady[0]!)),
      peakRssMiB: median(runs.map((r) => r.rssUnprepared / MiB)),
    },
  });
  report({
    suite: SUITE,
    name: `peak RSS, saveAsync after prepare() then save, ${label}`,
    ...ratioOf(median(rss), bytes / MiB),
    unit: "MiB",
    baseline: { name: "state size", value: bytes / MiB },
    better: "lower",
    extra: {
      rounds: runs.length,
      rssRange: range(rss)
        .map((x) => x.toFixed(0))
        .join("–"),
    },
  });
}

const [role, bytesArg, variant] = process.argv.slice(2);
if (role === "child") {
  await child(Number(bytesArg), variant as Variant);
} else {
  const sizes: [number, string][] = quick
    ? [
        [16 * MiB, "16 MiB"],
        [64 * MiB, "64 MiB"],
      ]
    : [
        [256 * MiB, "256 MiB"],
        [4 * GiB, "4 GiB"],
      ];
  for (const [bytes, label] of sizes) await measure(bytes, `${label} in ${TENSORS} tensors`);
}
