import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { report } from "../report.js";
import { MiB, median, pythonResultLine, range, runChild } from "../support.js";
import type { StateSpec } from "./state-spec.js";

const nodePhase = fileURLToPath(new URL("./local-phase.ts", import.meta.url));
const pythonPhase = fileURLToPath(new URL("./torch_phase.py", import.meta.url));

/** One phase's run: its own timing and peak RSS, from its own process. */
export interface PhaseRun {
  readonly bytes: number;
  readonly seconds: number;
  readonly cpuSeconds: number;
  readonly peakRss: number;
  /** cairn-load only: seconds of one thread's CRC32C of the same bytes, in the same process. */
  readonly crcSeconds?: number;
  /** cairn-load only: the process's CPU seconds over that CRC32C (one thread: its CPU time, which a busy machine skews less). */
  readonly crcCpuSeconds?: number;
  /** Node phases: the timed region's system CPU, main-thread CPU (Linux) and minor page faults. */
  readonly systemCpuSeconds?: number;
  readonly mainThreadCpuSeconds?: number;
  readonly minorFaults?: number;
  /**
   * Write phases on Linux: write requests and bytes the device completed in the timed region, the
   * whole device's (other writers count too): the size of the requests the writes reach it in.
   */
  readonly deviceWriteRequests?: number;
  readonly deviceWriteBytes?: number;
}

/** Runs a phase of `local-phase.ts` (Cairn, node:fs, safetensors-style, direct write, dd read). */
export async function nodePhaseRun(
  phase: string,
  spec: StateSpec,
  cairnDir: string,
  otherDir?: string,
): Promise<PhaseRun> {
  const run = await runChild<Omit<PhaseRun, "peakRss">>(nodePhase, [
    phase,
    JSON.stringify(spec),
    cairnDir,
    ...(otherDir ? [otherDir] : []),
  ]);
  return { ...run.result, peakRss: run.peakRss };
}

/** Runs a phase of `torch_phase.py` (torch.save/load, DCP, safetensors) with `python`. */
export async function pythonPhaseRun(python: string, phase: string, spec: StateSpec, path: string): Promise<PhaseRun> {
  const source = await readFile(pythonPhase, "utf8");
  const run = await runChild<Omit<PhaseRun, "peakRss">>(python, [
    "-c",
    `${pythonResultLine}\n${source}`,
    phase,
    JSON.stringify(spec),
    path,
  ]);
  return { ...run.result, peakRss: run.peakRss };
}

/** Every run of each phase, by phase name, across rounds. */
export class PhaseRuns {
  private readonly runs = new Map<string, PhaseRun[]>();

  add(phase: string, run: PhaseRun): void {
    const list = this.runs.get(phase) ?? [];
    list.push(run);
    this.runs.set(phase, list);
    const main = run.mainThreadCpuSeconds === undefined ? "" : ` (main ${run.mainThreadCpuSeconds.toFixed(3)})`;
    const faults = run.minorFaults === undefined ? "" : `  ${run.minorFaults} faults`;
    console.log(
      `  ${phase.padEnd(24)} ${(run.bytes / MiB / run.seconds).toFixed(0).padStart(6)} MiB/s  ${run.seconds.toFixed(3)} s  CPU ${run.cpuSeconds.toFixed(3)} s${main}${faults}  peak RSS ${(run.peakRss / MiB).toFixed(0)} MiB`,
    );
  }

  has(phase: string): boolean {
    return (this.runs.get(phase)?.length ?? 0) > 0;
  }

  get(phase: string): readonly PhaseRun[] {
    const list = this.runs.get(phase);
    if (!list?.length) throw new Error(`no runs of ${phase}`);
    return list;
  }

  /** Median throughput in MiB/s. */
  rate(phase: string): number {
    return median(this.get(phase).map((r) => r.bytes / MiB / r.seconds));
  }

  seconds(phase: string): number[] {
    return this.get(phase).map((r) => +r.seconds.toFixed(4));
  }

  /** Median CPU seconds of the timed regions. */
  cpuSeconds(phase: string): number {
    return +median(this.get(phase).map((r) => r.cpuSeconds)).toFixed(3);
  }

  /** Median minor page faults of the timed regions, when the phase reports them. */
  minorFaults(phase: string): number | undefined {
    const faults = this.get(phase).flatMap((r) => (r.minorFaults === undefined ? [] : [r.minorFaults]));
    return faults.length > 0 ? median(faults) : undefined;
  }

  /** Median device write requests per GiB the device wrote in the timed regions, when the phase reports them. */
  deviceRequestsPerGiB(phase: string): number | undefined {
    const rates = this.get(phase).flatMap((r) =>
      r.deviceWriteRequests && r.deviceWriteBytes ? [r.deviceWriteRequests / (r.deviceWriteBytes / (1 << 30))] : [],
    );
    return rates.length > 0 ? Math.round(median(rates)) : undefined;
  }

  /** Highest peak RSS over the state's bytes, in MiB. */
  rssOverState(phase: string): number {
    return Math.max(...this.get(phase).map((r) => (r.peakRss - r.bytes) / MiB));
  }
}

export interface Comparison {
  readonly suite: string;
  readonly name: string;
  readonly cairn: string;
  readonly baseline: string;
  readonly baselineName: string;
  readonly target?: number;
}

const faults = (key: string, value: number | undefined): Record<string, number> =>
  value === undefined ? {} : { [key]: value };

/** Reports Cairn's median throughput against the baseline's (higher is better), with the ranges and peak RSS. */
export function reportRates(runs: PhaseRuns, c: Comparison): void {
  const value = runs.rate(c.cairn);
  const baseline = runs.rate(c.baseline);
  report({
    suite: c.suite,
    name: c.name,
    value,
    unit: "MiB/s",
    baseline: { name: c.baselineName, value: baseline },
    ratio: value / baseline,
    better: "higher",
    ...(c.target === undefined ? {} : { target: c.target }),
    extra: {
      rounds: runs.get(c.cairn).length,
      cairnSeconds: runs.seconds(c.cairn),
      baselineSeconds: runs.seconds(c.baseline),
      cairnSecondsRange: range(runs.seconds(c.cairn)),
      baselineSecondsRange: range(runs.seconds(c.baseline)),
      cairnCpuSeconds: runs.cpuSeconds(c.cairn),
      baselineCpuSeconds: runs.cpuSeconds(c.baseline),
      ...faults("cairnMinorFaults", runs.minorFaults(c.cairn)),
      ...faults("baselineMinorFaults", runs.minorFaults(c.baseline)),
      ...faults("cairnDeviceRequestsPerGiB", runs.deviceRequestsPerGiB(c.cairn)),
      ...faults("baselineDeviceRequestsPerGiB", runs.deviceRequestsPerGiB(c.baseline)),
      cairnPeakRssOverStateMiB: +runs.rssOverState(c.cairn).toFixed(1),
      baselinePeakRssOverStateMiB: +runs.rssOverState(c.baseline).toFixed(1),
    },
  });
}
