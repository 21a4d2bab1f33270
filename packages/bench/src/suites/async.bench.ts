// Background saves on file://: how long `saveAsync` blocks the caller, the first one on a fresh
// manager (after `prepare()`, and without it) and the steady ones after it, against a synchronous
// `save` of the same state. Each size runs in child processes of its own (fresh manager, its own
// peak RSS): one calls `prepare(state)` before its first saveAsync, one does not, and one's first
// call is a `save` (the baseline for a first saveAsync: both pay a fresh process's first save).
// The last two also run as extra pairs that make only that first call, in alternating order.
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
/**
 * Extra pairs of children that make only a first saveAsync without prepare() or a first save:
 * both are seconds of disk writes on a shared machine, so two of each cannot tell 1.04× from 1×.
 */
const FIRST_PAIRS = quick ? 1 : 3;

interface ChildResult {
  /** Seconds `prepare()` took (0 when not called). */
  readonly prepare: number;
  /** Seconds the first `saveAsync` (or, sync-first, `save`) blocked. */
  readonly first: number;
  /** CPU seconds (user + system, every thread) this process spent meanwhile. */
  readonly firstCpu: number;
  /** Seconds each later `saveAsync` blocked. */
  readonly steady: readonly number[];
  /** Seconds each synchronous `save` took. */
  readonly sync: readonly number[];
  /** Seconds a plain memcpy (`Uint8Array.set`) of every tensor into resident memory took: the floor of copy staging. */
  readonly memcpy: number;
}

type Variant = "prepared" | "unprepared" | "unprepared-first" | "sync-first";

/**
 * One child: a fresh manager saving `bytes` of state with `saveAsync` then `save`, or only once:
 * with `save` (sync-first) or with `saveAsync` without prepare() (unprepared-first).
 */
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
    const firstCall = async (work: () => Promise<unknown>): Promise<{ first: number; firstCpu: number }> => {
      const cpu = process.cpuUsage();
      const first = await seconds(work);
      const used = process.cpuUsage(cpu);
      return { first, firstCpu: (used.user + used.system) / 1e6 };
    };
    if (variant === "sync-first") {
      const { first, firstCpu } = await firstCall(() => manager.save(0, state));
      await manager.close();
      sendResult({ prepare: 0, first, firstCpu, steady: [], sync: [first], memcpy: 0 } satisfies ChildResult);
      return;
    }
    if (variant === "unprepared-first") {
      const { first, firstCpu } = await firstCall(() => manager.saveAsync(0, state));
      await manager.join();
      await manager.close();
      sendResult({ prepare: 0, first, firstCpu, steady: [], sync: [], memcpy: 0 } satisfies ChildResult);
      return;
    }
    const prepare = variant === "prepared" ? await seconds(() => manager.prepare(state)) : 0;
    const { first, firstCpu } = await firstCall(() => manager.saveAsync(0, state));
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
    sendResult({ prepare, first, firstCpu, steady, sync, memcpy } satisfies ChildResult);
  }, "cairn-bench-async-");
}

async function measure(bytes: number, label: string): Promise<void> {
  const runs: {
    prepared: ChildResult;
    unprepared: ChildResult;
    rss: number;
  }[] = [];
  const run = (variant: Variant) =>
    runChild<ChildResult>(fileURLToPath(import.meta.url), ["child", String(bytes), variant]);
  /** The first call of each unprepared child and of each sync-first child; the peak RSS of each full unprepared child. */
  const firstCalls = { unprepared: [] as ChildResult[], sync: [] as ChildResult[], rss: [] as number[] };
  /** The two children of a first-call pair, taken in alternating order so neither always follows the other. */
  const firstPair = async <T>(round: number, unprepared: () => Promise<T>): Promise<T> => {
    let result: T | undefined;
    for (const which of round % 2 === 0 ? ["unprepared", "sync"] : ["sync", "unprepared"]) {
      if (which === "sync") firstCalls.sync.push((await run("sync-first")).result);
      else result = await unprepared();
    }
    return result!;
  };
  for (let r = 0; r < rounds(2); r++) {
    const prepared = await run("prepared");
    const unprepared = await firstPair(r, () => run("unprepared"));
    firstCalls.unprepared.push(unprepared.result);
    firstCalls.rss.push(unprepared.peakRss);
    runs.push({
      prepared: prepared.result,
      unprepared: unprepared.result,
      rss: prepared.peakRss,
    });
  }
  for (let r = 0; r < FIRST_PAIRS; r++) {
    const unprepared = await firstPair(r + runs.length, () => run("unprepared-first"));
    firstCalls.unprepared.push(unprepared.result);
  }
  const first = runs.map((r) => r.prepared.first);
  const steady = runs.flatMap((r) => r.prepared.steady);
  const sync = runs.flatMap((r) => [...r.prepared.sync, ...r.unprepared.sync]);
  const firstUnprepared = firstCalls.unprepared.map((c) => c.first);
  const syncFirst = firstCalls.sync.map((c) => c.first);
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
      rounds: firstUnprepared.length,
      firstRange: seconds(firstUnprepared),
      syncFirstRange: seconds(syncFirst),
      firstCpuS: median(firstCalls.unprepared.map((c) => c.firstCpu)),
      syncFirstCpuS: median(firstCalls.sync.map((c) => c.firstCpu)),
      steadySync: median(sync),
      secondSaveAsync: median(runs.map((r) => r.unprepared.steady[0]!)),
      peakRssMiB: median(firstCalls.rss.map((rss) => rss / MiB)),
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
