// `pnpm bench` for distributed checkpointing: saves and loads 1 GiB (four 256 MiB float32
// tensors, row-sharded) to file:// from 1, 2 and 4 local ranks started by cairn-run, and
// prints aggregate MB/s and the ratio to one rank, measured in the same run. Loads start
// from a cold page cache where this process may drop it (root on Linux). Then the 4-rank
// checkpoint is loaded by 3 ranks, row- and column-sharded: bytes read versus bytes needed.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { dropCaches, median } from "./bench-support.js";
import { runTypeScript } from "@cairn/core/testing";

const RANK = fileURLToPath(new URL("./distributed-bench-rank.ts", import.meta.url));
const CAIRN_RUN = fileURLToPath(new URL("../../distributed/src/cairn-run.ts", import.meta.url));
const rounds = Number(process.env.CAIRN_BENCH_ROUNDS ?? 2);
const MiB = 1 << 20;

interface Result {
  mode: string;
  layout: string;
  worldSize: number;
  seconds: number;
  bytes: number;
  bytesRead: number;
  needed: number;
  overhead: number;
}

async function launch(ranks: number, args: string[]): Promise<Result> {
  const out = await runTypeScript(CAIRN_RUN, ["--nproc-per-node", String(ranks), RANK, ...args]);
  const line = out.stdout.split("\n").find((l) => l.includes("RESULT "));
  if (out.code !== 0 || !line) throw new Error(`cairn-run failed (${out.code}):\n${out.stdout}\n${out.stderr}`);
  return JSON.parse(line.slice(line.indexOf("RESULT ") + 7)) as Result;
}

const cold = await dropCaches();
const rates = new Map<string, number[]>();
let reshard: Result[] = [];
for (let round = 0; round < rounds; round++) {
  const root = await mkdtemp(join(tmpdir(), "cairn-dist-bench-"));
  try {
    for (const ranks of [1, 2, 4]) {
      const url = `file://${root}/r${ranks}`;
      const saved = await launch(ranks, ["save", url]);
      if (cold) await dropCaches();
      const loaded = await launch(ranks, ["load", url, "rows"]);
      for (const r of [saved, loaded]) {
        const rate = r.bytes / MiB / r.seconds;
        rates.set(`${r.mode} ${ranks}`, [...(rates.get(`${r.mode} ${ranks}`) ?? []), rate]);
        console.log(`round ${round + 1}: ${r.mode} with ${ranks} rank(s): ${rate.toFixed(0)} MB/s aggregate`);
      }
    }
    reshard = [];
    for (const layout of ["rows", "cols"]) {
      if (cold) await dropCaches();
      const r = await launch(3, ["load", `file://${root}/r4`, layout]);
      reshard.push(r);
      console.log(`round ${round + 1}: load 4→3 ranks ${layout}: ${(r.bytes / MiB / r.seconds).toFixed(0)} MB/s, read ${(r.bytesRead / MiB).toFixed(1)} MiB for ${(r.needed / MiB).toFixed(1)} MiB needed`);
    }
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

console.log(`\n1 GiB to file://, row-sharded, median of ${rounds} round(s); loads from a ${cold ? "cold" : "warm"} page cache`);
console.log("| ranks | save MB/s | × one rank | load MB/s | × one rank |");
console.log("|---|---|---|---|---|");
for (const ranks of [1, 2, 4]) {
  const save = median(rates.get(`save ${ranks}`)!);
  const load = median(rates.get(`load ${ranks}`)!);
  console.log(`| ${ranks} | ${save.toFixed(0)} | ${(save / median(rates.get("save 1")!)).toFixed(2)} | ${load.toFixed(0)} | ${(load / median(rates.get("load 1")!)).toFixed(2)} |`);
}
console.log("\nResharding load of the 4-rank checkpoint into 3 ranks (last round; all ranks summed):");
for (const r of reshard) {
  console.log(
    `${r.layout}: read ${(r.bytesRead / MiB).toFixed(1)} MiB for ${(r.needed / MiB).toFixed(1)} MiB needed = ${(r.bytesRead / r.needed).toFixed(3)}× (${((r.bytesRead - r.overhead) / r.needed).toFixed(3)}× without metadata and headers)`,
  );
}
