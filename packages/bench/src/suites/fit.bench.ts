// What checkpointing costs a model.fitDataset run: the same training (a 64 MiB model with Adam, so
// a 192 MiB checkpoint, 150 batches on tfjs's wasm backend) with cairnCheckpoint saving every 50
// batches to file:// and without it, each run in its own process, in turns (the order flips every
// round). The figure is the training call's wall time (target ≤ 1.05×); its main thread's CPU
// time, which a busy machine skews less, is reported beside it. See fit-child.ts.
import { fileURLToPath } from "node:url";
import { report } from "../report.js";
import { MiB, median, range, rounds, runChild, withTempDir } from "../support.js";

const suite = "fit";
const ROUNDS = rounds(3);
const child = fileURLToPath(new URL("../fit-child.ts", import.meta.url));

interface Run {
  seconds: number;
  mainCpuSeconds: number;
  mainWaitSeconds: number;
  steps: number;
  every: number;
  weightBytes: number;
  closeSeconds: number;
  saves: number;
}

const runs: Record<"plain" | "cairn", Run[]> = { plain: [], cairn: [] };
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? (["plain", "cairn"] as const) : (["cairn", "plain"] as const);
  for (const mode of order) {
    const run = await withTempDir(
      async (dir) => (await runChild<Run>(child, [mode, `file://${dir}/run`])).result,
      "cairn-bench-fit-",
    );
    console.log(`round ${round + 1} ${mode}: ${JSON.stringify(run)}`);
    runs[mode].push(run);
  }
}

const { steps, every, weightBytes, saves } = runs.cairn[0]!;
const label = `fitDataset, ${(weightBytes / MiB).toFixed(0)} MiB model + Adam, ${steps} batches, saves every ${every} batches (${saves} saves)`;
const ratios = (key: "seconds" | "mainCpuSeconds"): number[] => runs.cairn.map((r, i) => r[key] / runs.plain[i]![key]);
for (const [key, what, target] of [
  ["seconds", "training time", 1.05],
  ["mainCpuSeconds", "training thread's CPU time", undefined],
] as const) {
  const value = median(runs.cairn.map((r) => r[key]));
  const baseline = median(runs.plain.map((r) => r[key]));
  report({
    suite,
    name: `${label}: ${what}`,
    value,
    unit: "s",
    baseline: { name: "the same run without cairnCheckpoint", value: baseline },
    ratio: value / baseline,
    better: "lower",
    ...(target === undefined ? {} : { target }),
    extra: {
      rounds: ROUNDS,
      roundRatios: ratios(key),
      ratioRange: range(ratios(key)),
      mainWaitSeconds: median(runs.cairn.map((r) => r.mainWaitSeconds)),
      closeSeconds: median(runs.cairn.map((r) => r.closeSeconds)),
    },
  });
}
