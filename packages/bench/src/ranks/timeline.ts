// The ranks suite's cold load as a timeline (docs/benchmarks.md, "one rank's timeline"): saves
// 1 GiB with N ranks, writes the node:fs readers' files, then in turns, page cache dropped before
// each, loads it with N timeline-rank.ts processes and reads it with N fs-worker.ts readers, and
// prints when each event happened, in ms after the ranks' first barrier (where the suite's clock
// starts) or the readers' start. Root only (drop_caches).
// usage: node --import tsx --conditions=@cairn/source timeline.ts <ranks> [rounds]
import { spawn } from "node:child_process";
import { open, readdir } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { fileURLToPath } from "node:url";
import { launchRanks } from "@cairn/distributed";
import { dropCaches, withTempDir } from "../support.js";

const here = (name: string): string => fileURLToPath(new URL(`./${name}`, import.meta.url));
const ROWS = 16384;
const TOTAL = 4 * ROWS * 4096 * 4;
const ranks = Number(process.argv[2]);
const rounds = Number(process.argv[3] ?? 2);
if (![1, 2, 4].includes(ranks) || !(rounds > 0)) throw new Error("usage: timeline.ts 1|2|4 [rounds]");

async function ranksLoad(dir: string): Promise<void> {
  let out = "";
  const stdout = new PassThrough().on("data", (d: Buffer) => (out += d.toString()));
  const result = await launchRanks({
    nprocPerNode: ranks,
    command: [here("timeline-rank.ts"), `file://${dir}`, String(ROWS)],
    stdout,
  });
  const lines = out
    .split("\n")
    .filter((l) => l.includes("TIMELINE "))
    .map(
      (l) =>
        JSON.parse(l.slice(l.indexOf("TIMELINE ") + 9)) as {
          rank: number;
          at: Record<string, number>;
          cpu: Record<string, number>;
          reads: number;
        },
    );
  if (result.exitCode !== 0 || lines.length !== ranks)
    throw new Error(`load failed (exit ${result.exitCode}):\n${out}`);
  const zero = Math.min(...lines.map((l) => l.at.barrier!));
  for (const { rank, at, cpu, reads } of lines.sort((a, b) => a.rank - b.rank)) {
    const events = Object.entries(at)
      .sort((a, b) => a[1] - b[1])
      .map(([k, v]) => `${k} ${(v - zero).toFixed(0)}`);
    const cpus = Object.entries(cpu).map(([k, v]) => `${k} ${v.toFixed(0)}`);
    console.log(`cairn rank ${rank}/${ranks}: ${events.join(", ")}; CPU ms at ${cpus.join(", ")}; ${reads} reads`);
  }
}

async function readersRead(files: string[][]): Promise<void> {
  const children = files.map((list) => {
    const child = spawn(process.execPath, [...process.execArgv, here("fs-worker.ts"), "read", ...list], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    let out = "";
    const ready = new Promise<void>((resolve) =>
      child.stdout.on("data", (d: Buffer) => (out += d.toString()) === "ready\n" && resolve()),
    );
    const exited = new Promise((resolve) => child.once("exit", resolve));
    return { child, ready, exited, out: () => out };
  });
  // All at once, as the suite starts them.
  await Promise.all(children.map((c) => c.ready));
  for (const c of children) c.child.stdin.end("go\n");
  await Promise.all(children.map((c) => c.exited));
  const times = children.map((c) => JSON.parse(c.out().split("\n")[1]!) as { start: number; end: number; cpu: number });
  const zero = Math.min(...times.map((t) => t.start));
  for (const [i, t] of times.entries())
    console.log(
      `node:fs reader ${i}/${ranks}: start ${(t.start - zero).toFixed(0)}, end ${(t.end - zero).toFixed(0)}; CPU ms ${(t.cpu * 1000).toFixed(0)}`,
    );
}

await withTempDir(async (root) => {
  const saved = await launchRanks({
    nprocPerNode: ranks,
    command: [here("rank.ts"), "save", `file://${root}/cairn`, String(ROWS)],
    stdout: new PassThrough().resume(),
  });
  if (saved.exitCode !== 0) throw new Error("save failed");
  const data = new Uint8Array(TOTAL / ranks / 4).fill(1);
  const files = Array.from({ length: ranks }, (_, r) => [0, 1, 2, 3].map((f) => join(root, `r${r}-f${f}.bin`)));
  for (const path of files.flat()) {
    const handle = await open(path, "wx");
    await handle.write(data);
    await handle.sync().finally(() => handle.close());
  }
  console.log(`${(await readdir(root)).length - 1} reader files; ${ranks} rank(s), 1 GiB, cold`);
  for (let round = 0; round < rounds; round++) {
    if (!(await dropCaches())) throw new Error("cannot drop the page cache (root only)");
    await ranksLoad(join(root, "cairn"));
    await dropCaches();
    await readersRead(files);
  }
}, "cairn-timeline-");
