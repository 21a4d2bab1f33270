import { execFileSync, spawn } from "node:child_process";
import { mkdtemp, open, readdir, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(import.meta.url);

export const KiB = 1 << 10;
export const MiB = 1 << 20;
export const GiB = 1 << 30;

/** True for a smoke run (`CAIRN_BENCH_QUICK=1`): small sizes, one round, under a minute. */
export const quick = process.env.CAIRN_BENCH_QUICK === "1";

/** Rounds per figure: `CAIRN_BENCH_ROUNDS`, else 1 in a quick run and `full` otherwise. */
export function rounds(full = 3): number {
  const given = Number(process.env.CAIRN_BENCH_ROUNDS);
  return quick ? 1 : Number.isInteger(given) && given > 0 ? given : full;
}

/** Empties the kernel's page cache so a read goes to disk; false where this process may not (not root, not Linux). */
export async function dropCaches(): Promise<boolean> {
  try {
    execFileSync("sync");
    await writeFile("/proc/sys/vm/drop_caches", "3");
    return true;
  } catch {
    return false;
  }
}

/**
 * Reads every file under `dir` once, so a following load finds it in the page cache: Cairn writes
 * data files with O_DIRECT, which leaves nothing cached, where a buffered write leaves it all.
 */
export async function warmCache(dir: string): Promise<void> {
  const buffer = new Uint8Array(16 * MiB);
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    const handle = await open(join(entry.parentPath, entry.name), "r");
    try {
      while ((await handle.read(buffer, 0, buffer.byteLength)).bytesRead > 0);
    } finally {
      await handle.close();
    }
  }
}

/** The upper median: the middle value, or the higher of the two middle ones. */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) throw new Error("median of no values");
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
}

/** Smallest and largest value, for the range reported beside a median. */
export function range(xs: readonly number[]): [number, number] {
  return [Math.min(...xs), Math.max(...xs)];
}

/**
 * Where benchmarks write: `CAIRN_BENCH_DIR`, else the OS temp dir. It must be on the disk being
 * measured (not tmpfs), or the baselines measure memory.
 */
export function benchRoot(): string {
  return process.env.CAIRN_BENCH_DIR ?? tmpdir();
}

/** Runs `fn` with a fresh directory under `benchRoot()`, removed afterwards whatever happens. */
export async function withTempDir<T>(fn: (dir: string) => Promise<T>, prefix = "cairn-bench-"): Promise<T> {
  const dir = await mkdtemp(join(benchRoot(), prefix));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Times one call of `fn`, in seconds. */
export async function timed(fn: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await fn();
  return (performance.now() - started) / 1000;
}

/** The line prefix a child prints its result after; any other output passes through. */
const RESULT_PREFIX = "CAIRN_BENCH_CHILD ";

/** What a child phase sends back: its own JSON plus its peak RSS in bytes. */
export interface ChildRun<T> {
  readonly result: T;
  readonly peakRss: number;
}

/**
 * Called once by a child phase (a TypeScript script run by `runChild`) to send `result` back with
 * this process's peak RSS. A Python child prints the same line itself (see `pythonResultLine`).
 */
export function sendResult(result: unknown): void {
  const peakRss = process.resourceUsage().maxRSS * 1024;
  process.stdout.write(`\n${RESULT_PREFIX}${JSON.stringify({ result, peakRss })}\n`);
}

/** Python source defining `send_result(obj)`, the counterpart of `sendResult` for Python children. */
export const pythonResultLine = `
import json as _json, resource as _resource, sys as _sys
def send_result(obj):
    rss = _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss * 1024
    _sys.stdout.write("\\n${RESULT_PREFIX}" + _json.dumps({"result": obj, "peakRss": rss}) + "\\n")
    _sys.stdout.flush()
`;

export interface RunChildOptions {
  /** Added to this process's environment; a variable given as undefined is removed. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly cwd?: string;
}

/**
 * Runs one phase in its own process, so its peak RSS is its own: a `.ts` script under Node with
 * tsx and the `@cairn/source` condition, or any `command` (e.g. python3). The child's stderr and
 * non-result stdout are forwarded to this process's stderr; rejects when it exits non-zero or
 * sends no result.
 */
export async function runChild<T>(
  command: string,
  args: readonly string[] = [],
  options: RunChildOptions = {},
): Promise<ChildRun<T>> {
  const [file, argv] = command.endsWith(".ts")
    ? [process.execPath, ["--import", require.resolve("tsx"), "--conditions=@cairn/source", command, ...args]]
    : [command, [...args]];
  const env = Object.fromEntries(
    Object.entries({ ...process.env, ...options.env }).filter(([, v]) => v !== undefined),
  ) as NodeJS.ProcessEnv;
  const child = spawn(file, argv, { cwd: options.cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
    process.stderr.write(d);
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (c) => resolve(c));
  });
  const lines = stdout.split("\n");
  const line = lines.findLast((l) => l.startsWith(RESULT_PREFIX));
  const rest = lines.filter((l) => l !== line && l.trim() !== "").join("\n");
  if (rest) process.stderr.write(`${rest}\n`);
  if (code !== 0 || line === undefined) {
    throw new Error(
      `${command} ${args.join(" ")} ${code !== 0 ? `exited with ${code}` : "sent no result"}\n${stderr.slice(-4000)}`,
    );
  }
  return JSON.parse(line.slice(RESULT_PREFIX.length)) as ChildRun<T>;
}

/**
 * The first Python that imports every module in `modules` (Debian's /usr/bin/python3 carries
 * torch; the python3 on PATH may not), or undefined when none does.
 */
export function pythonWith(...modules: string[]): string | undefined {
  for (const python of ["/usr/bin/python3", "python3"]) {
    try {
      execFileSync(python, ["-c", modules.map((m) => `import ${m}`).join("; ")], { stdio: "ignore", timeout: 120_000 });
      return python;
    } catch {
      continue;
    }
  }
  return undefined;
}
