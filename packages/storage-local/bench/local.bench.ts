// `pnpm bench` for file://: saves and loads a 1 GiB state dict (three 256 MiB tensors and
// 2,000 small ones) with Cairn, beside node:fs writing and reading the same bytes into the
// same files, fsynced the same way, in the same run. Prints MB/s, the ratio to the baseline
// and peak RSS. Each phase runs in its own process; rounds alternate Cairn and node:fs.
// Loads are measured from a warm page cache (every file read once first: Cairn's O_DIRECT save
// leaves nothing cached) and, where this process may drop the kernel's caches (root on Linux),
// from a cold one, as a restore on a fresh machine would be.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { dropCaches, median, warmCache } from "./bench-support.js";
import { runTypeScript } from "@cairn/core/testing";

const child = fileURLToPath(new URL("./local-bench-child.ts", import.meta.url));
const rounds = Number(process.env.CAIRN_BENCH_ROUNDS ?? 3);
const MiB = 1 << 20;

interface Phase {
  phase: string;
  bytes: number;
  seconds: number;
  baselineRss: number;
  peakRss: number;
}

async function run(phase: string, cairnDir: string, fsDir: string): Promise<Phase> {
  const result = await runTypeScript(child, [phase, cairnDir, fsDir]);
  if (result.code !== 0) throw new Error(`${phase} failed:\n${result.stderr}`);
  return JSON.parse(result.stdout) as Phase;
}

const cold = await dropCaches();
const phases = ["cairn-save", "fs-write", "cairn-load:warm", "fs-read:warm", ...(cold ? ["cairn-load:cold", "fs-read:cold"] : [])];
const results = new Map<string, Phase[]>(phases.map((p) => [p, []]));
for (let round = 0; round < rounds; round++) {
  const root = await mkdtemp(join(tmpdir(), "cairn-bench-"));
  try {
    for (const phase of phases) {
      if (phase.endsWith(":cold")) await dropCaches();
      if (phase.endsWith(":warm")) await warmCache(root);
      const r = await run(phase, join(root, "cairn"), root);
      results.get(phase)!.push(r);
      console.log(`round ${round + 1}: ${phase.padEnd(16)} ${(r.bytes / MiB / r.seconds).toFixed(0).padStart(6)} MB/s  peak RSS ${Math.round(r.peakRss / MiB)} MiB`);
    }
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

const rate = (phase: string): number => median(results.get(phase)!.map((r) => r.bytes / MiB / r.seconds));
const peak = (phase: string): number => Math.max(...results.get(phase)!.map((r) => r.peakRss)) / MiB;
const size = results.get("cairn-save")![0]!.bytes / MiB;
console.log(`\nfile:// benchmark: ${size.toFixed(0)} MiB state dict (3 x 256 MiB + 2,000 small tensors), median of ${rounds} rounds (MB/s = MiB/s)`);
console.log(`| operation | Cairn MB/s | node:fs MB/s | ratio | Cairn peak RSS |`);
console.log(`| --- | ---: | ---: | ---: | ---: |`);
const rows: [string, string, string][] = [["save (fsync)", "cairn-save", "fs-write"], ["load, warm cache", "cairn-load:warm", "fs-read:warm"]];
if (cold) rows.push(["load, cold cache", "cairn-load:cold", "fs-read:cold"]);
for (const [label, cairn, fs] of rows) {
  console.log(`| ${label} | ${rate(cairn).toFixed(0)} | ${rate(fs).toFixed(0)} | ${(rate(cairn) / rate(fs)).toFixed(2)}x | ${peak(cairn).toFixed(0)} MiB |`);
}
if (!cold) console.log("(cold-cache loads skipped: this process may not write /proc/sys/vm/drop_caches)");
console.log(`peak RSS during save: ${peak("cairn-save").toFixed(0)} MiB (state dict ${size.toFixed(0)} MiB; target <= ${(size + 256).toFixed(0)} MiB)`);
