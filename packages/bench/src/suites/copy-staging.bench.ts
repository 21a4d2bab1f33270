// Copy staging of tfjs tensors (issue 34): how long `saveAsync` blocks training against what it
// cannot go below on the same thread, `data()` of every tensor plus a copy of its bytes into
// shared memory (allocated at start-up, and the staging pool's own buffers; in each turn the
// faster of `set` and memcpy, as staging chooses), each save paired with floor samples and a
// synchronous save taken beside it, and the limits below any floor: the state's bytes copied in
// one memcpy, and in one `set` into shared memory (see copy-staging-child.ts), in
// CAIRN_BENCH_ROUNDS processes (default 2; 1 quick) of 7 turns.
// Judged in this thread's CPU time, which load barely moves, and in wall time. A few minutes.
import { fileURLToPath } from "node:url";
import type { CopyStagingRun, Spent } from "../copy-staging-child.js";
import { report } from "../report.js";
import { MiB, median, rounds as roundsOf, runChild, withTempDir } from "../support.js";

const SUITE = "copy-staging";
const child = fileURLToPath(new URL("../copy-staging-child.ts", import.meta.url));
const ROUNDS = roundsOf(2);

const runs: CopyStagingRun[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const run = await withTempDir(
    async (dir) => (await runChild<CopyStagingRun>(child, [`file://${dir}/run`])).result,
    "cairn-bench-copy-staging-",
  );
  const row = (name: string, xs: Spent[]): string =>
    `${name.padEnd(12)} wall ${xs.map((x) => x.wallMs.toFixed(0)).join(" ")} ms; cpu ${xs.map((x) => x.cpuMs.toFixed(0)).join(" ")} ms`;
  console.log(`round ${round + 1}:`);
  for (const kind of [
    "save",
    "floor",
    "poolCopy",
    "sync",
    "dataOnly",
    "memcpyShared",
    "setPlain",
    "floorLateMemory",
    "poolMemcpy",
    "memcpyLimit",
    "setLimit",
  ] as const)
    console.log(`  ${row(kind, run[kind])}`);
  runs.push(run);
}

const all = (kind: keyof Omit<CopyStagingRun, "bytes">): Spent[] => runs.flatMap((r) => r[kind]);
const med = (kind: keyof Omit<CopyStagingRun, "bytes">, of: keyof Spent): number => median(all(kind).map((s) => s[of]));
/**
 * A floor per turn: the faster of its loop by `set` (taken beside the save) and by memcpy (later in
 * the same turn), as staging copies by whichever of the two this process measured faster
 * (core's stage/copy-bytes.ts), so a floor by `set` alone would not be one where memcpy is faster.
 */
const floors = {
  floor: (of: keyof Spent): number[] => all("floor").map((s, i) => Math.min(s[of], all("memcpyShared")[i]![of])),
  poolCopy: (of: keyof Spent): number[] => all("poolCopy").map((s, i) => Math.min(s[of], all("poolMemcpy")[i]![of])),
};
const medFloor = (floor: keyof typeof floors, of: keyof Spent): number => median(floors[floor](of));
/** Each save over the floor (`floor` or `poolCopy`) of its turn. */
const paired = (of: keyof Spent, floor: keyof typeof floors = "floor"): number[] => {
  const turn = floors[floor](of);
  return all("save").map((s, i) => s[of] / turn[i]!);
};
const state = `${(runs[0]!.bytes / MiB).toFixed(0)} MiB of tfjs tensors`;
const floorName =
  "data() of every tensor + a copy into resident shared memory (the faster of set and memcpy), taken beside each save";
const extra = (of: keyof Spent): Record<string, number | string> => ({
  samples: all("save").length,
  pairedRatioMedian: +median(paired(of)).toFixed(3),
  pairedRatios: paired(of)
    .map((r) => r.toFixed(2))
    .join(" "),
  floorBySetMs: +med("floor", of).toFixed(1),
  dataOnlyMs: +med("dataOnly", of).toFixed(1),
  memcpyIntoSharedMs: +med("memcpyShared", of).toFixed(1),
  setIntoPlainMs: +med("setPlain", of).toFixed(1),
  floorIntoLaterMemoryMs: +med("floorLateMemory", of).toFixed(1),
});
for (const [of, what] of [
  ["cpuMs", "main-thread CPU"],
  ["wallMs", "wall time"],
] as const) {
  report({
    suite: SUITE,
    name: `saveAsync, copy staging: blocks training vs its floor (${what}), ${state}`,
    value: med("save", of) / 1000,
    unit: "s",
    baseline: { name: floorName, value: medFloor("floor", of) / 1000 },
    ratio: med("save", of) / medFloor("floor", of),
    better: "lower",
    target: 1.1,
    extra: extra(of),
  });
}
// The same copies into the staging pool's own buffers: the floor in the memory staging has.
const poolFloorName =
  "data() of every tensor + a copy into the staging pool's own buffers (the faster of set and memcpy), taken beside each save";
report({
  suite: SUITE,
  name: `saveAsync, copy staging: blocks training vs its floor in its own buffers (main-thread CPU), ${state}`,
  value: med("save", "cpuMs") / 1000,
  unit: "s",
  baseline: { name: poolFloorName, value: medFloor("poolCopy", "cpuMs") / 1000 },
  ratio: med("save", "cpuMs") / medFloor("poolCopy", "cpuMs"),
  better: "lower",
  target: 1.1,
  extra: {
    pairedRatioMedian: +median(paired("cpuMs", "poolCopy")).toFixed(3),
    pairedRatios: paired("cpuMs", "poolCopy")
      .map((r) => r.toFixed(2))
      .join(" "),
    poolCopyVsFloor: +(medFloor("poolCopy", "cpuMs") / medFloor("floor", "cpuMs")).toFixed(3),
    poolCopyWallMs: +medFloor("poolCopy", "wallMs").toFixed(1),
    // The pool floor's loop by `set` and by memcpy: which copy is faster on this machine.
    poolSetMs: +med("poolCopy", "cpuMs").toFixed(1),
    poolMemcpyMs: +med("poolMemcpy", "cpuMs").toFixed(1),
    poolMemcpyVsPoolCopy: +(med("poolMemcpy", "cpuMs") / med("poolCopy", "cpuMs")).toFixed(3),
  },
});
// A synchronous save blocks for its writes too, which are not this thread's CPU: wall time.
report({
  suite: SUITE,
  name: `saveAsync, copy staging: blocks training vs a synchronous save, ${state}`,
  value: med("save", "wallMs") / 1000,
  unit: "s",
  baseline: { name: "synchronous save, taken beside each saveAsync", value: med("sync", "wallMs") / 1000 },
  ratio: med("save", "wallMs") / med("sync", "wallMs"),
  better: "lower",
  target: 0.08,
  extra: {
    floorVsSyncSave: +(medFloor("floor", "wallMs") / med("sync", "wallMs")).toFixed(4),
    poolCopyVsSyncSave: +(medFloor("poolCopy", "wallMs") / med("sync", "wallMs")).toFixed(4),
    syncCpuSeconds: +(med("sync", "cpuMs") / 1000).toFixed(3),
  },
});
// The limits under every floor, in the same processes: the state's byte count copied in one call
// between resident buffers, no tfjs; memcpy is this machine's, `set` into shared memory
// JavaScript's into memory the upload worker can read.
const limits = {
  memcpyMs: +med("memcpyLimit", "cpuMs").toFixed(1),
  setIntoSharedMs: +med("setLimit", "cpuMs").toFixed(1),
  dataOnlyMs: +med("dataOnly", "cpuMs").toFixed(1),
};
report({
  suite: SUITE,
  name: `copy staging's limit: one memcpy of the state's bytes vs a synchronous save, ${state}`,
  value: med("memcpyLimit", "wallMs") / 1000,
  unit: "s",
  baseline: { name: "synchronous save, taken beside each saveAsync", value: med("sync", "wallMs") / 1000 },
  ratio: med("memcpyLimit", "wallMs") / med("sync", "wallMs"),
  better: "lower",
  extra: {
    ...limits,
    setIntoSharedVsSyncSave: +(med("setLimit", "wallMs") / med("sync", "wallMs")).toFixed(4),
    setIntoSharedPlusDataVsSyncSave: +(
      (med("setLimit", "wallMs") + med("dataOnly", "wallMs")) /
      med("sync", "wallMs")
    ).toFixed(4),
  },
});
report({
  suite: SUITE,
  name: `saveAsync, copy staging: blocks training vs one memcpy of its bytes (main-thread CPU), ${state}`,
  value: med("save", "cpuMs") / 1000,
  unit: "s",
  baseline: {
    name: "one memcpy of the state's bytes between resident buffers",
    value: med("memcpyLimit", "cpuMs") / 1000,
  },
  ratio: med("save", "cpuMs") / med("memcpyLimit", "cpuMs"),
  better: "lower",
  extra: {
    ...limits,
    vsSetIntoShared: +(med("save", "cpuMs") / med("setLimit", "cpuMs")).toFixed(3),
    vsSetIntoSharedPlusData: +(med("save", "cpuMs") / (med("setLimit", "cpuMs") + med("dataOnly", "cpuMs"))).toFixed(3),
  },
});
