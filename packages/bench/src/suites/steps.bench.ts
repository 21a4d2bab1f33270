// How a manager scales with the steps already under its root: a save (1 MiB state, save + its
// retention pass) on a root of N committed steps against the same on an empty root, with and
// without maxToKeep, in turns on fresh pairs of roots each round; opening a manager on 2,000 steps
// against a node:fs readdir; and one retention pass deleting all but 5 of 2,000 steps against
// node:fs rm of the same directories.
import { cp, mkdir, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { type StateDict, hostTensor } from "@cairn/core";
import { CheckpointManager, type CheckpointManagerOptions } from "@cairn/manager";
import { report } from "../report.js";
import { MiB, median, quick, range, rounds, timed, withTempDir } from "../support.js";

const suite = "steps";
const counts = quick ? [10, 100] : [10, 100, 1000, 2000];
const largest = counts.at(-1)!;
/** Timed saves per root, after one untimed save that lists the root and reads what retention needs. */
const saves = quick ? 5 : 25;
/** Fresh pairs of roots per row: a save takes 2–5 ms, so one pair's 25 saves in turns cannot tell 1.1× from 1×. */
const pairs = rounds(4);
const KEEP = 5;

function state(step: number, bytes: number): StateDict {
  return { w: hostTensor("float32", [bytes / 4], new Float32Array(bytes / 4).fill(step)), step };
}

const managerOptions: CheckpointManagerOptions = { checkpointOnPreemption: false };

/**
 * A root holding steps 0..count-1, copied with node:fs cp from a template root whose steps Cairn
 * saved (a 4 KiB state each): one step copied under other numbers would be refused as not theirs.
 */
async function populate(template: string, root: string, count: number): Promise<void> {
  await mkdir(root, { recursive: true });
  const copies: Promise<void>[] = [];
  for (let step = 0; step < count; step++)
    copies.push(cp(join(template, String(step)), join(root, String(step)), { recursive: true }));
  await Promise.all(copies);
}

/** One timed save: wall seconds, and this process's CPU seconds (user + system, every thread) meanwhile. */
interface SaveTime {
  readonly seconds: number;
  readonly cpuSeconds: number;
}

/** A manager saving 1 MiB states on `root` (a path, or a URL) from step `first` on, each `save()` + `join()` (its retention pass included) timed. */
async function saver(
  root: string,
  first: number,
  options: CheckpointManagerOptions,
): Promise<{ next: () => Promise<SaveTime>; close: () => Promise<unknown> }> {
  const mgr = new CheckpointManager(root.includes("://") ? root : `file://${root}`, 1, {
    ...managerOptions,
    ...options,
  });
  let step = first;
  const next = async (): Promise<SaveTime> => {
    const cpu = process.cpuUsage();
    const seconds = await timed(async () => {
      await mgr.save(step, state(step++, MiB));
      await mgr.join();
    });
    const used = process.cpuUsage(cpu);
    return { seconds, cpuSeconds: (used.user + used.system) / 1e6 };
  };
  // Untimed: the first save lists the root and reads what retention needs.
  await next();
  return { next, close: () => mgr.close() };
}

/**
 * Each timed save on a root of `count` steps and on an empty root, taken in turns so both see the
 * same disk, on `pairs` fresh pairs of roots (so every pair's roots grow by the same `saves` steps).
 */
async function pairedSaveTimes(
  fresh: (count: number) => Promise<string>,
  count: number,
  options: (count: number) => CheckpointManagerOptions,
): Promise<[SaveTime[][], SaveTime[][]]> {
  const times: [SaveTime[][], SaveTime[][]] = [[], []];
  for (let pair = 0; pair < pairs; pair++) {
    const full = await saver(await fresh(count), count, options(count));
    const empty = await saver(await fresh(0), 0, options(0));
    const these: [SaveTime[], SaveTime[]] = [[], []];
    for (let i = 0; i < saves; i++) {
      const order = (pair * saves + i) % 2 === 0 ? [0, 1] : [1, 0];
      for (const which of order) these[which]!.push(await (which === 0 ? full : empty).next());
    }
    await full.close();
    await empty.close();
    times[0].push(these[0]);
    times[1].push(these[1]);
  }
  return times;
}

/** Reports saves on a populated root against the same saves on an empty one, taken in turns: medians over every pair's saves. */
function reportSaves(name: string, perPair: SaveTime[][], emptyPerPair: SaveTime[][]): void {
  const seconds = (ts: SaveTime[]): number[] => ts.map((t) => t.seconds);
  const cpu = (ts: SaveTime[]): number[] => ts.map((t) => t.cpuSeconds);
  const times = seconds(perPair.flat());
  const empty = seconds(emptyPerPair.flat());
  const value = median(times);
  const baseline = median(empty);
  report({
    suite,
    name,
    value,
    unit: "s",
    baseline: { name: "same on an empty root, in turns", value: baseline },
    ratio: value / baseline,
    better: "lower",
    target: 1.1,
    extra: {
      saves: times.length,
      pairs: perPair.length,
      range: range(times),
      emptyRange: range(empty),
      minRatio: +(Math.min(...times) / Math.min(...empty)).toFixed(3),
      pairRatios: perPair.map((ts, i) => +(median(seconds(ts)) / median(seconds(emptyPerPair[i]!))).toFixed(3)),
      cpuRatio: +(median(cpu(perPair.flat())) / median(cpu(emptyPerPair.flat()))).toFixed(3),
    },
  });
}

await withTempDir(async (dir) => {
  const template = join(dir, "template");
  const writer = new CheckpointManager(`file://${template}`, 1, managerOptions);
  for (let step = 0; step < Math.max(...counts); step++) await writer.save(step, state(step, 4096));
  await writer.close();
  let root = 0;
  const fresh = async (count: number): Promise<string> => {
    const path = join(dir, `root-${root++}`);
    await populate(template, path, count);
    return path;
  };

  for (const [label, options] of [
    ["no retention option", (): CheckpointManagerOptions => ({})],
    [`maxToKeep N + ${KEEP}`, (count: number): CheckpointManagerOptions => ({ maxToKeep: count + KEEP })],
  ] as const) {
    for (const count of counts) {
      reportSaves(
        `save 1 MiB + join, ${label}, root of ${count} steps`,
        ...(await pairedSaveTimes(fresh, count, options)),
      );
    }
  }

  // The same on memory://, where no disk noise hides the manager's own cost (steps saved by Cairn).
  let memoryRoots = 0;
  const memoryRoot = async (count: number): Promise<string> => {
    const url = `memory://bench-steps/${process.pid}-${memoryRoots++}`;
    const writer = new CheckpointManager(url, 1, managerOptions);
    for (let step = 0; step < count; step++) await writer.save(step, state(step, 4096));
    await writer.close();
    return url;
  };
  for (const count of counts) {
    reportSaves(
      `save 1 MiB + join on memory://, root of ${count} steps`,
      ...(await pairedSaveTimes(memoryRoot, count, () => ({}))),
    );
  }

  // Opening: a new manager's first latestStep() lists the root once and reads one metadata.json.
  const big = await fresh(largest);
  const open = await timed(async () => {
    const mgr = new CheckpointManager(`file://${big}`, 1, { readOnly: true });
    if ((await mgr.latestStep()) !== largest - 1) throw new Error("latestStep() missed the newest step");
    await mgr.close();
  });
  const listing = await timed(async () => {
    const names = await readdir(big);
    if (Math.max(...names.map(Number)) !== largest - 1) throw new Error("readdir missed the newest step");
  });
  report({
    suite,
    name: `open a manager on ${largest} steps (first latestStep())`,
    value: open,
    unit: "s",
    baseline: { name: "node:fs readdir of the root", value: listing },
    ratio: open / listing,
    better: "lower",
  });

  // Retention: a new manager with maxToKeep 5 reads what retention needs (one listing, every
  // step's metadata.json), then saves once on the same root; that save's pass deletes the rest.
  const doomed = largest + 1 - KEEP;
  const mgr = new CheckpointManager(`file://${big}`, 1, { ...managerOptions, maxToKeep: KEEP });
  const reading = await timed(() => mgr.allSteps());
  const pass = await timed(async () => {
    await mgr.save(largest, state(largest, MiB));
    const { retentionFailures } = await mgr.join();
    if (retentionFailures.length > 0 || (await readdir(big)).length !== KEEP)
      throw new Error("retention did not delete every step it should");
  });
  await mgr.close();
  const baseRoot = await fresh(largest);
  const emptySaver = await saver(await fresh(0), 0, {});
  const emptySaves: number[] = [];
  for (let i = 0; i < saves; i++) emptySaves.push((await emptySaver.next()).seconds);
  await emptySaver.close();
  const emptySave = median(emptySaves);
  const removal = await timed(async () => {
    const names = (await readdir(baseRoot)).sort((a, b) => Number(a) - Number(b)).slice(0, doomed);
    await Promise.all(names.map((name) => rm(join(baseRoot, name), { recursive: true })));
  });
  report({
    suite,
    name: `save 1 MiB + retention pass deleting ${doomed} of ${largest + 1} steps`,
    value: pass,
    unit: "s",
    baseline: { name: "a save on an empty root + node:fs rm of the same directories", value: emptySave + removal },
    ratio: pass / (emptySave + removal),
    better: "lower",
    extra: {
      perStepMs: +(((pass - emptySave) / doomed) * 1000).toFixed(3),
      nodeFsPerStepMs: +((removal / doomed) * 1000).toFixed(3),
      listAndReadMetadataSeconds: +reading.toFixed(3),
    },
  });
});
