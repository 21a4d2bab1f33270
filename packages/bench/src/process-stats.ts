import { readFileSync, writeFileSync } from "node:fs";

/**
 * What this process spent over an interval, beyond wall time: CPU, how long its main thread sat
 * runnable but waiting for a core (a busy machine), page faults (fresh memory), and the peak RSS
 * reached meanwhile. Linux only for the last three; elsewhere they read 0.
 */
export interface ProcessSpent {
  readonly seconds: number;
  readonly userSeconds: number;
  readonly systemSeconds: number;
  /** Main thread: seconds on a core, and seconds runnable but waiting for one (`/proc/thread-self/schedstat`). */
  readonly mainOnCpuSeconds: number;
  readonly mainWaitSeconds: number;
  readonly minorFaults: number;
  readonly majorFaults: number;
  /** Bytes read from the block device (`/proc/self/io` read_bytes): 0 when everything came from the page cache. */
  readonly deviceReadBytes: number;
  /** Highest RSS during the interval, in bytes (the kernel's high-water mark, reset at its start where Linux allows). */
  readonly peakRss: number;
}

interface Sample {
  readonly at: number;
  readonly cpu: NodeJS.CpuUsage;
  readonly sched: readonly [number, number];
  readonly faults: readonly [number, number];
  readonly ioBytes: number;
}

function readOr<T>(read: () => T, fallback: T): T {
  try {
    return read();
  } catch {
    return fallback;
  }
}

function sample(): Sample {
  const sched = readOr(
    () => {
      const [run, wait] = readFileSync("/proc/thread-self/schedstat", "latin1").split(" ").map(Number);
      return [run!, wait!] as const;
    },
    [0, 0] as const,
  );
  const faults = readOr(
    () => {
      const fields = readFileSync("/proc/self/stat", "latin1").split(") ")[1]!.split(" ");
      return [Number(fields[7]), Number(fields[9])] as const;
    },
    [0, 0] as const,
  );
  const ioBytes = readOr(
    () => Number(/^read_bytes: (\d+)$/m.exec(readFileSync("/proc/self/io", "latin1"))?.[1] ?? 0),
    0,
  );
  return { at: performance.now(), cpu: process.cpuUsage(), sched, faults, ioBytes };
}

const napping = new Int32Array(new SharedArrayBuffer(4));

/**
 * CPU seconds this thread has run (`/proc/thread-self/schedstat`), NaN where Linux cannot say. A
 * 10 µs sleep first: the kernel brings a running thread's count up to date only when it is
 * switched out or at a tick, so without it the figure lags by up to a tick (4 ms here).
 */
export function threadCpuSeconds(): number {
  Atomics.wait(napping, 0, 0, 0.01);
  return readOr(() => Number(readFileSync("/proc/thread-self/schedstat", "latin1").split(" ", 1)[0]) / 1e9, NaN);
}

/** The kernel's peak RSS of this process so far (VmHWM), in bytes; `maxRSS` where /proc cannot say. */
function peakRss(): number {
  const kib = readOr(() => Number(/^VmHWM:\s+(\d+) kB$/m.exec(readFileSync("/proc/self/status", "latin1"))?.[1]), NaN);
  return Number.isFinite(kib) ? kib * 1024 : process.resourceUsage().maxRSS * 1024;
}

/** Resets the peak RSS to the current RSS (`clear_refs` 5), so the next reading is the peak of what follows. */
function resetPeakRss(): void {
  readOr(() => writeFileSync("/proc/self/clear_refs", "5"), undefined);
}

/** Runs `work` and says what it spent (see `ProcessSpent`). */
export async function measured(work: () => Promise<unknown>): Promise<ProcessSpent> {
  resetPeakRss();
  const before = sample();
  await work();
  const after = sample();
  return {
    seconds: (after.at - before.at) / 1000,
    userSeconds: (after.cpu.user - before.cpu.user) / 1e6,
    systemSeconds: (after.cpu.system - before.cpu.system) / 1e6,
    mainOnCpuSeconds: (after.sched[0] - before.sched[0]) / 1e9,
    mainWaitSeconds: (after.sched[1] - before.sched[1]) / 1e9,
    minorFaults: after.faults[0] - before.faults[0],
    majorFaults: after.faults[1] - before.faults[1],
    deviceReadBytes: after.ioBytes - before.ioBytes,
    peakRss: peakRss(),
  };
}
