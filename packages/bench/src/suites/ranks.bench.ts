// Scaling over ranks on file://: 1, 2 and 4 ranks (processes on the TCP process group, started by
// launchRanks as cairn-run does) save 1 GiB (four [16384, 4096] float32 tensors, row-sharded) and
// load it back from a cold page cache; the baseline is as many node:fs processes writing the
// same bytes with fsync (four files each, so each reads with four reads in flight, as a rank's
// load does at most), then reading those files back. Each side reads its own files (on this VM the host caches the virtual disk: whichever side
// read a file second found it there), written in the same round, with the page cache dropped
// before each; the order of the sides alternates from round to round over an even number of
// rounds. Aggregate MB/s, Cairn / baseline.
import { spawn } from "node:child_process";
import { mkdir, readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { PassThrough } from "node:stream";
import { fileURLToPath } from "node:url";
import { launchRanks } from "@cairn/distributed";
import { report } from "../report.js";
import { MiB, dropCaches, median, quick, range, rounds, withTempDir } from "../support.js";

const SUITE = "ranks";
const RANK = fileURLToPath(new URL("../ranks/rank.ts", import.meta.url));
const WORKER = fileURLToPath(new URL("../ranks/fs-worker.ts", import.meta.url));
const TENSORS = 4;
const ROWS = quick ? 1024 : 16384;
const TOTAL = TENSORS * ROWS * 4096 * 4;
const WORLDS = [1, 2, 4] as const;

/** What one side took: wall seconds, and CPU seconds of all its processes over that time. */
interface Took {
  readonly seconds: number;
  readonly cpu: number;
}

/** Runs `worldSize` ranks of rank.ts; rank 0 times the operation between two barriers. */
async function cairn(mode: "save" | "load", worldSize: number, url: string): Promise<Took> {
  let out = "";
  const stdout = new PassThrough().on("data", (d: Buffer) => (out += d.toString()));
  const result = await launchRanks({ nprocPerNode: worldSize, command: [RANK, mode, url, String(ROWS)], stdout });
  const line = out.split("\n").find((l) => l.includes("RESULT "));
  if (result.exitCode !== 0 || !line)
    throw new Error(`${mode} with ${worldSize} rank(s) failed (exit ${result.exitCode}):\n${out}`);
  const cpu = out
    .split("\n")
    .filter((l) => l.includes("CPU "))
    .map((l) => (JSON.parse(l.slice(l.indexOf("CPU ") + 4)) as { seconds: number }).seconds);
  if (cpu.length !== worldSize) throw new Error(`${mode} with ${worldSize} rank(s): ${cpu.length} CPU lines:\n${out}`);
  const { seconds } = JSON.parse(line.slice(line.indexOf("RESULT ") + 7)) as { seconds: number };
  return { seconds, cpu: cpu.reduce((a, b) => a + b, 0) };
}

/** Starts one fs-worker per argument list, lets them all go at once when ready; seconds from the first start to the last end. */
async function workers(argLists: readonly string[][]): Promise<Took> {
  const children = argLists.map((args) => {
    const child = spawn(process.execPath, [...process.execArgv, WORKER, ...args], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
    const next = async (): Promise<string> => {
      const line = await lines.next();
      if (line.done) throw new Error(`fs-worker ${args.join(" ")} exited early (code ${child.exitCode})`);
      return line.value;
    };
    return { child, next };
  });
  await Promise.all(children.map((c) => c.next()));
  for (const c of children) c.child.stdin!.write("go\n");
  const times = await Promise.all(
    children.map(async (c) => JSON.parse(await c.next()) as { start: number; end: number; cpu: number }),
  );
  await Promise.all(
    children.map((c) =>
      c.child.exitCode === null ? new Promise((resolve) => c.child.once("exit", resolve)) : undefined,
    ),
  );
  return {
    seconds: (Math.max(...times.map((t) => t.end)) - Math.min(...times.map((t) => t.start))) / 1000,
    cpu: times.reduce((sum, t) => sum + t.cpu, 0),
  };
}

/** The baseline's files, one list per reader (the writer that wrote them). */
async function baselineFiles(dir: string, n: number): Promise<string[][]> {
  const files = (await readdir(dir)).filter((f) => f.endsWith(".bin")).sort();
  return Array.from({ length: n }, (_, w) => files.filter((f) => f.startsWith(`w${w}-`)).map((f) => join(dir, f)));
}

/** Bytes in the files of `dir` ending in `suffix`: both sides must read as many bytes. */
async function bytesIn(dir: string, suffix: string): Promise<number> {
  const files = (await readdir(dir)).filter((f) => f.endsWith(suffix));
  return (await Promise.all(files.map(async (f) => (await stat(join(dir, f))).size))).reduce((a, b) => a + b, 0);
}

const cold = await dropCaches();
const seconds = new Map<string, number[]>();
const cpuSeconds = new Map<string, number[]>();
const add = (key: string, took: Took): void => {
  seconds.set(key, [...(seconds.get(key) ?? []), took.seconds]);
  cpuSeconds.set(key, [...(cpuSeconds.get(key) ?? []), took.cpu]);
};
// Even, so each side reads first in half the rounds.
const n = rounds(4);
for (let round = 0; round < n; round++) {
  await withTempDir(async (root) => {
    for (const ranks of WORLDS) {
      const dir = join(root, `r${ranks}`);
      const baseDir = join(root, `fs${ranks}`);
      await mkdir(baseDir);
      const order = round % 2 === 0 ? (["cairn", "fs"] as const) : (["fs", "cairn"] as const);
      for (const who of order) {
        if (who === "cairn") add(`save cairn ${ranks}`, await cairn("save", ranks, `file://${dir}`));
        else
          add(
            `save fs ${ranks}`,
            await workers(
              Array.from({ length: ranks }, (_, w) => [
                "write",
                baseDir,
                String(w),
                String(TENSORS),
                String(TOTAL / TENSORS / ranks),
              ]),
            ),
          );
      }
      const readers = await baselineFiles(baseDir, ranks);
      const bytes = { cairn: await bytesIn(dir, ".safetensors"), fs: await bytesIn(baseDir, ".bin") };
      // Cairn's data files hold a safetensors header each beside the tensors' bytes.
      if (bytes.fs !== TOTAL || bytes.cairn < TOTAL || bytes.cairn > TOTAL + MiB)
        throw new Error(`the two sides would read different amounts: ${JSON.stringify(bytes)}`);
      for (const who of order) {
        if (cold) await dropCaches();
        if (who === "cairn") add(`load cairn ${ranks}`, await cairn("load", ranks, `file://${dir}`));
        else add(`load fs ${ranks}`, await workers(readers.map((files) => ["read", ...files])));
      }
      const last = (key: string): string =>
        `${(TOTAL / 1e6 / seconds.get(key)!.at(-1)!).toFixed(0)} MB/s (${cpuSeconds.get(key)!.at(-1)!.toFixed(2)} CPU s)`;
      console.log(
        `round ${round + 1}, ${ranks} rank(s): ${["save", "load"].map((op) => `${op} ${last(`${op} cairn ${ranks}`)} vs ${last(`${op} fs ${ranks}`)}`).join(", ")}`,
      );
    }
  }, "cairn-ranks-");
}

const mbps = (s: readonly number[]): number[] => s.map((x) => TOTAL / 1e6 / x);
const size = `${TOTAL / MiB} MiB (${TENSORS} x [${ROWS}, 4096] float32, row-sharded)`;
for (const op of ["save", "load"] as const) {
  const one = median(mbps(seconds.get(`${op} cairn 1`)!));
  for (const ranks of WORLDS) {
    const c = mbps(seconds.get(`${op} cairn ${ranks}`)!);
    const b = mbps(seconds.get(`${op} fs ${ranks}`)!);
    report({
      suite: SUITE,
      name: `${op} ${size}, ${ranks} rank(s), aggregate${op === "load" ? (cold ? ", cold cache" : ", warm cache") : ""}`,
      value: median(c),
      unit: "MB/s",
      baseline: {
        name: `${ranks} node:fs ${op === "save" ? "writers (write + fsync)" : "readers of the same bytes in their own files"}`,
        value: median(b),
      },
      ratio: median(c) / median(b),
      better: "higher",
      extra: {
        rounds: n,
        cairnMBps: range(c).map(Math.round),
        baselineMBps: range(b).map(Math.round),
        cairnVsOneRank: Number((median(c) / one).toFixed(2)),
        // CPU seconds of every process of a side while it ran (libuv's threads included): on 2
        // cores, several ranks or readers that each have the disk to spare are bound by it.
        cairnCpuSeconds: Number(median(cpuSeconds.get(`${op} cairn ${ranks}`)!).toFixed(3)),
        baselineCpuSeconds: Number(median(cpuSeconds.get(`${op} fs ${ranks}`)!).toFixed(3)),
      },
    });
  }
}
