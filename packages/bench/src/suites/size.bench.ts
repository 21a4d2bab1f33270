// How save and load scale with the state's size (256 MiB, 1 GiB, 4 GiB in 64 MiB tensors):
// throughput against node:fs writing (+ fsync) and reading the same bytes in Cairn's layout,
// and peak RSS over the state's size, each phase in its own process, rounds alternating.
import { join } from "node:path";
import { CRC32C_IMPLEMENTATION } from "@cairn/core/format";
import { type PhaseRun, PhaseRuns, nodePhaseRun, reportRates } from "../local/phases.js";
import { type StateSpec, describeState, stateSpec } from "../local/state-spec.js";
import { report } from "../report.js";
import { median, quick, rounds, warmCache, withTempDir } from "../support.js";

const suite = "size";
const specs: StateSpec[] = quick
  ? [stateSpec(2, 8), stateSpec(4, 8)]
  : [stateSpec(4, 64), stateSpec(16, 64), stateSpec(64, 64)];
const n = rounds(3);

for (const spec of specs) {
  const what = describeState(spec);
  const runs = new PhaseRuns();
  console.log(`${what}, ${n} round(s)`);
  for (let round = 0; round < n; round++) {
    await withTempDir(async (dir) => {
      const cairn = join(dir, "cairn");
      const fs = join(dir, "fs");
      runs.add("cairn-save", await nodePhaseRun("cairn-save", spec, cairn));
      runs.add("fs-write", await nodePhaseRun("fs-write", spec, cairn, fs));
      const loads: [string, () => Promise<PhaseRun>][] = [
        ["cairn-load", () => nodePhaseRun("cairn-load", spec, cairn)],
        ["fs-read", () => nodePhaseRun("fs-read", spec, cairn, fs)],
      ];
      for (const [phase, run] of round % 2 === 0 ? loads : loads.reverse()) {
        await warmCache(dir);
        runs.add(phase, await run());
      }
    });
  }
  reportRates(runs, {
    suite,
    name: `save ${what}`,
    cairn: "cairn-save",
    baseline: "fs-write",
    baselineName: "node:fs write + fsync",
  });
  reportRates(runs, {
    suite,
    name: `warm load ${what}`,
    cairn: "cairn-load",
    baseline: "fs-read",
    baselineName: "node:fs read into place",
  });
  // What a verified warm load cannot avoid: copying every byte out of the page cache (node:fs
  // reading into place, its CPU) and one CRC32C of it (one thread's CPU for the same bytes). CPU
  // time, which a busy machine skews far less than wall time; 2 cores share that work at best.
  const cpu = (phase: string, field: "cpuSeconds" | "crcCpuSeconds"): number[] => runs.get(phase).map((r) => r[field]!);
  const readCpu = median(cpu("fs-read", "cpuSeconds"));
  const crcCpu = median(cpu("cairn-load", "crcCpuSeconds"));
  const cairnCpu = median(cpu("cairn-load", "cpuSeconds"));
  const round4 = (xs: number[]): number[] => xs.map((x) => +x.toFixed(4));
  report({
    suite,
    name: `warm load ${what}, every block verified: CPU against the copy and CRC32C it cannot avoid`,
    value: cairnCpu,
    unit: "CPU s",
    baseline: {
      name: "node:fs reading into place + one thread's CRC32C of the same bytes, CPU",
      value: readCpu + crcCpu,
    },
    ratio: cairnCpu / (readCpu + crcCpu),
    better: "lower",
    extra: {
      // With the copy and the checks spread evenly over both cores and node:fs's read keeping both
      // busy (as on a quiet machine), the most a verified load can reach against node:fs reading into place.
      ceilingAgainstFsRead: +(readCpu / (readCpu + crcCpu)).toFixed(3),
      // Which CRC32C the loads ran (the phases' processes load core from the same install).
      crc32cKernel: CRC32C_IMPLEMENTATION,
      readCpuSeconds: round4(cpu("fs-read", "cpuSeconds")),
      crcCpuSeconds: round4(cpu("cairn-load", "crcCpuSeconds")),
      cairnCpuSeconds: round4(cpu("cairn-load", "cpuSeconds")),
      crcSeconds: round4(runs.get("cairn-load").map((r) => r.crcSeconds!)),
    },
  });
  for (const [op, cairn, baseline] of [
    ["save", "cairn-save", "fs-write"],
    ["load", "cairn-load", "fs-read"],
  ] as const) {
    const value = runs.rssOverState(cairn);
    const base = runs.rssOverState(baseline);
    report({
      suite,
      name: `peak RSS over state, ${op} ${what}`,
      value,
      unit: "MiB",
      baseline: { name: `node:fs ${op === "save" ? "write" : "read"}`, value: base },
      ratio: value / base,
      better: "lower",
      extra: { cairnPeakRssMiB: +Math.max(...runs.get(cairn).map((r) => r.peakRss / 2 ** 20)).toFixed(1) },
    });
  }
}
