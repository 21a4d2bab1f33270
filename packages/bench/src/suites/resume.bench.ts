// Time to resume (issue 39): a job restarted after preemption initialises its state, then a fresh
// manager's latestStep() + restore(). Each size is saved by one process; then each of 10 fresh
// processes restores it once, beside the plain reads of the same files into the same memory
// (cat-style, in the same process, the order alternating), with the page cache warm and, as
// root, dropped; one more process restores 5 times in a row. Medians and worst cases; peak RSS
// over the state during a restore.
import { fileURLToPath } from "node:url";
import { report } from "../report.js";
import type { ProcessSpent } from "../process-stats.js";
import type { ResumeRun, SequenceRun } from "../resume/resume-child.js";
import { GiB, MiB, dropCaches, median, quick, runChild, warmCache, withTempDir } from "../support.js";

const SUITE = "resume";
const CHILD = fileURLToPath(new URL("../resume/resume-child.ts", import.meta.url));
const TENSOR_BYTES = quick ? 16 * MiB : 64 * MiB;
const SIZES = quick ? [64 * MiB, 128 * MiB] : [GiB, 4 * GiB];
const PROCESSES = quick ? 3 : 10;
const SEQUENCE = 5;
/** Issue 39's bound on peak RSS over the state during a restore. */
const RSS_LIMIT_MIB = 128;

const label = (bytes: number): string =>
  `${bytes >= GiB ? `${bytes / GiB} GiB` : `${bytes / MiB} MiB`} (${bytes / TENSOR_BYTES} x ${TENSOR_BYTES / MiB} MiB)`;
const round3 = (x: number): number => +x.toPrecision(3);
const secondsOf = (runs: readonly ProcessSpent[]): number[] => runs.map((r) => round3(r.seconds));

/** Where the time of each restore went, for the JSON: CPU, waiting for a core, fresh pages, device reads. */
function spentDetails(runs: readonly ProcessSpent[]): Record<string, number[]> {
  return {
    seconds: secondsOf(runs),
    cpuSeconds: runs.map((r) => round3(r.userSeconds + r.systemSeconds)),
    mainWaitSeconds: runs.map((r) => round3(r.mainWaitSeconds)),
    minorFaults: runs.map((r) => r.minorFaults),
    deviceReadMiB: runs.map((r) => Math.round(r.deviceReadBytes / MiB)),
  };
}

async function resumeRuns(root: string, tensors: number, cache: "warm" | "cold"): Promise<ResumeRun[]> {
  const runs: ResumeRun[] = [];
  for (let p = 0; p < PROCESSES; p++) {
    if (cache === "warm") await warmCache(root);
    const order = p % 2 === 0 ? "restore-first" : "reads-first";
    const run = await runChild<ResumeRun>(CHILD, ["resume", root, String(tensors), String(TENSOR_BYTES), order, cache]);
    runs.push(run.result);
    console.log(
      `  ${cache} process ${p + 1}: restore ${run.result.restore.seconds.toFixed(3)} s (CPU ${(run.result.restore.userSeconds + run.result.restore.systemSeconds).toFixed(3)} s, waiting for a core ${run.result.restore.mainWaitSeconds.toFixed(3)} s), plain reads ${run.result.reads.seconds.toFixed(3)} s`,
    );
  }
  return runs;
}

function reportResumes(what: string, cache: "warm" | "cold", runs: readonly ResumeRun[]): void {
  const restores = runs.map((r) => r.restore.seconds);
  const reads = runs.map((r) => r.reads.seconds);
  const warm = cache === "warm";
  const extra = {
    processes: runs.length,
    ...spentDetails(runs.map((r) => r.restore)),
    readsSeconds: secondsOf(runs.map((r) => r.reads)),
    readsCpuSeconds: runs.map((r) => round3(r.reads.userSeconds + r.reads.systemSeconds)),
  };
  report({
    suite: SUITE,
    name: `resume ${what}, ${cache} cache: latestStep() + restore() in a fresh process (median of ${runs.length})`,
    value: median(restores),
    unit: "s",
    baseline: {
      name: "plain reads of the same files into the same memory, same processes (median)",
      value: median(reads),
    },
    ratio: median(restores) / median(reads),
    better: "lower",
    ...(warm ? { target: 2 } : {}),
    extra,
  });
  if (warm) {
    // Every block is checked on the thread that owns the targets: its CRC32C of the same bytes
    // bounds the restore from below, whatever the plain reads take.
    const crc = median(runs.map((r) => r.crcSeconds));
    report({
      suite: SUITE,
      name: `resume ${what}, warm cache: median restore against its limit`,
      value: median(restores),
      unit: "s",
      baseline: { name: "one thread's CRC32C of the same bytes, same processes (median)", value: crc },
      ratio: crc / median(restores),
      better: "higher",
      target: 0.8,
      extra: { crcSeconds: runs.map((r) => round3(r.crcSeconds)) },
    });
  }
  report({
    suite: SUITE,
    name: `resume ${what}, ${cache} cache: worst of ${runs.length} fresh processes`,
    value: Math.max(...restores),
    unit: "s",
    baseline: { name: "their median", value: median(restores) },
    ratio: Math.max(...restores) / median(restores),
    better: "lower",
    ...(warm ? { target: 1.5 } : {}),
    extra: { worstPlainReads: Math.max(...reads), medianPlainReads: median(reads) },
  });
}

const canDrop = await dropCaches();
if (!canDrop) console.log("not root: the cold-cache rows are left out");
for (const size of SIZES) {
  const tensors = size / TENSOR_BYTES;
  const what = label(size);
  console.log(`${what}: ${PROCESSES} fresh processes per cache state`);
  await withTempDir(async (root) => {
    await runChild(CHILD, ["save", root, String(tensors), String(TENSOR_BYTES)]);
    const warm = await resumeRuns(root, tensors, "warm");
    reportResumes(what, "warm", warm);
    const peaks = warm.map((r) => (r.restore.peakRss - size) / MiB);
    if (canDrop) reportResumes(what, "cold", await resumeRuns(root, tensors, "cold"));
    await warmCache(root);
    const sequence = (
      await runChild<SequenceRun>(CHILD, ["sequence", root, String(tensors), String(TENSOR_BYTES), String(SEQUENCE)])
    ).result.restores;
    const times = sequence.map((r) => r.seconds);
    console.log(`  ${SEQUENCE} restores in one process: ${times.map((t) => t.toFixed(3)).join(", ")} s`);
    report({
      suite: SUITE,
      name: `resume ${what}, warm cache: slowest of ${SEQUENCE} restores in one process`,
      value: Math.max(...times),
      unit: "s",
      baseline: { name: "the fastest of them", value: Math.min(...times) },
      ratio: Math.max(...times) / Math.min(...times),
      better: "lower",
      target: 1.5,
      extra: spentDetails(sequence),
    });
    peaks.push(...sequence.map((r) => (r.peakRss - size) / MiB));
    const peak = Math.max(...peaks);
    report({
      suite: SUITE,
      name: `peak RSS over the state during a restore, ${what}`,
      value: round3(peak),
      unit: "MiB",
      baseline: { name: "issue 39's limit", value: RSS_LIMIT_MIB },
      ratio: peak / RSS_LIMIT_MIB,
      better: "lower",
      target: 1,
      extra: { perRestoreMiB: peaks.map(Math.round) },
    });
  }, "cairn-resume-");
}
