import { spawn } from "node:child_process";
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { cpus, loadavg, release, tmpdir, totalmem, version } from "node:os";
import { basename, join } from "node:path";
import { type DiskFigures, measureDisk } from "./disk.js";
import type { BenchResult } from "./report.js";

const require = createRequire(import.meta.url);

/** The machine a run measured, stored beside its results. */
export interface Machine {
  readonly cpu: string;
  readonly cores: number;
  readonly ramGiB: number;
  readonly kernel: string;
  readonly node: string;
  /** The 1-minute load average when the run started: other work on the machine skews every figure. */
  readonly loadAverage?: number;
  /** The benchmark disk, measured in the same run; absent when not asked for. */
  readonly disk?: DiskFigures;
}

/** One suite's process in a run. */
export interface SuiteRun {
  readonly suite: string;
  readonly date: string;
  readonly seconds: number;
  readonly ok: boolean;
  /** Why it failed: its exit code or signal. */
  readonly error?: string;
}

/** What `pnpm bench` writes: bench-results/latest.json. */
export interface BenchRun {
  readonly date: string;
  readonly quick: boolean;
  readonly machine: Machine;
  readonly suites: readonly SuiteRun[];
  readonly results: readonly BenchResult[];
}

export interface RunOptions {
  /** Folder of `<name>.bench.ts` suites. */
  readonly suitesDir: string;
  /** Suite names to run (`local` or `local.bench.ts`); all of them when empty. */
  readonly names?: readonly string[];
  readonly quick: boolean;
  /** Bytes of the disk measurement; none when 0. */
  readonly diskBytes: number;
  /** A previous run whose suites not run now are kept. */
  readonly previous?: BenchRun;
}

/** The suites in `dir`, by name, sorted; `names` picks some (an unknown one is an error). */
export async function findSuites(dir: string, names: readonly string[] = []): Promise<string[]> {
  const all = (await readdir(dir))
    .filter((f) => f.endsWith(".bench.ts"))
    .map((f) => f.slice(0, -".bench.ts".length))
    .sort();
  if (names.length === 0) return all;
  const wanted = names.map((n) => basename(n).replace(/\.bench\.ts$/, ""));
  const unknown = wanted.filter((n) => !all.includes(n));
  if (unknown.length > 0) throw new Error(`no suite ${unknown.join(", ")} in ${dir} (there are: ${all.join(", ")})`);
  return wanted;
}

export function describeMachine(disk?: DiskFigures): Machine {
  const cpu = cpus();
  return {
    cpu: cpu[0]?.model.trim() ?? "unknown",
    cores: cpu.length,
    ramGiB: +(totalmem() / 2 ** 30).toFixed(1),
    kernel: `${release()} ${version()}`,
    node: process.version,
    loadAverage: +loadavg()[0]!.toFixed(1),
    ...(disk ? { disk } : {}),
  };
}

/** Runs one suite in its own Node process (output passed through), collecting what it reports. */
async function runSuite(file: string, quick: boolean): Promise<{ run: SuiteRun; results: BenchResult[] }> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-bench-out-"));
  const out = join(dir, "results.jsonl");
  const date = new Date().toISOString();
  const started = performance.now();
  try {
    const env: NodeJS.ProcessEnv = { ...process.env, CAIRN_BENCH_OUT: out };
    if (quick) env.CAIRN_BENCH_QUICK = "1";
    else delete env.CAIRN_BENCH_QUICK;
    const child = spawn(process.execPath, ["--import", require.resolve("tsx"), "--conditions=@cairn/source", file], {
      stdio: ["ignore", "inherit", "inherit"],
      env,
    });
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.once("error", reject);
      child.once("close", (c, s) => resolve([c, s]));
    });
    const text = await readFile(out, "utf8").catch(() => "");
    const results = text
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => JSON.parse(l) as BenchResult);
    const ok = code === 0;
    const suite = basename(file).slice(0, -".bench.ts".length);
    const seconds = +((performance.now() - started) / 1000).toFixed(1);
    return {
      run: { suite, date, seconds, ok, ...(ok ? {} : { error: signal ? `killed by ${signal}` : `exit code ${code}` }) },
      results,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Measures the disk, then runs the suites one after another, each in its own process with
 * `CAIRN_BENCH_OUT` set, and returns every result; suites not run keep `previous`'s results.
 */
export async function runSuites(options: RunOptions): Promise<BenchRun> {
  const load = loadavg()[0]!;
  const names = await findSuites(options.suitesDir, options.names);
  const disk = options.diskBytes > 0 ? await measureDisk(options.diskBytes) : undefined;
  const runs: SuiteRun[] = [];
  const results: BenchResult[] = [];
  for (const name of names) {
    console.log(`\n== ${name}${options.quick ? " (quick)" : ""}`);
    const suite = await runSuite(join(options.suitesDir, `${name}.bench.ts`), options.quick);
    runs.push(suite.run);
    results.push(...suite.results);
  }
  const kept = options.previous && options.previous.quick === options.quick ? options.previous : undefined;
  const keptSuites = kept?.suites.filter((s) => !names.includes(s.suite)) ?? [];
  const keptResults = kept?.results.filter((r) => !names.includes(r.suite)) ?? [];
  return {
    date: new Date().toISOString(),
    quick: options.quick,
    machine: { ...describeMachine(disk ?? kept?.machine.disk), loadAverage: +load.toFixed(1) },
    suites: [...keptSuites, ...runs].sort((a, b) => a.suite.localeCompare(b.suite)),
    results: [...keptResults, ...results].sort((a, b) => a.suite.localeCompare(b.suite)),
  };
}
