import { readFileSync } from "node:fs";

/** CPU seconds (user + system) a process has used so far, from /proc (Linux); NaN elsewhere. */
export function cpuSecondsOf(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return Number.NaN;
  }
}

/** What one benchmark step cost: wall time, this process's peak RSS above its level before, and CPU of both sides. */
export interface MeasuredWork {
  readonly seconds: number;
  readonly peakRiseBytes: number;
  /** CPU seconds of this process and of the server's during the step: which side was busy. */
  readonly clientCpu: number;
  readonly serverCpu: number;
}

/** Runs `work`, sampling this process's RSS, and measures it and the CPU a server process (`serverPid`) used meanwhile. */
export async function measureWork(serverPid: number, work: () => Promise<void>): Promise<MeasuredWork> {
  globalThis.gc?.();
  const before = process.memoryUsage.rss();
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 10);
  const cpu = process.cpuUsage();
  const serverCpu = cpuSecondsOf(serverPid);
  const started = performance.now();
  await work();
  const seconds = (performance.now() - started) / 1000;
  clearInterval(sampler);
  peak = Math.max(peak, process.memoryUsage.rss());
  const used = process.cpuUsage(cpu);
  return {
    seconds,
    peakRiseBytes: peak - before,
    clientCpu: (used.user + used.system) / 1e6,
    serverCpu: cpuSecondsOf(serverPid) - serverCpu,
  };
}
