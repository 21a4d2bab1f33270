// `pnpm bench [suite...]`: runs the suites (all of src/suites, or those named) one after another,
// prints one table of ratios and writes bench-results/latest.json (quick.json for a smoke run).
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type BenchRun, runSuites } from "./runner.js";
import { GiB, MiB } from "./support.js";
import { ratioTable } from "./table.js";

const repo = fileURLToPath(new URL("../../../", import.meta.url));
const quick = process.env.CAIRN_BENCH_QUICK === "1";
const out = process.env.CAIRN_BENCH_RESULTS ?? join(repo, "bench-results", quick ? "quick.json" : "latest.json");
const startedAt = new Date().toISOString();
const previous = await readFile(out, "utf8").then(
  (t) => JSON.parse(t) as BenchRun,
  () => undefined,
);

const run = await runSuites({
  suitesDir: fileURLToPath(new URL("./suites/", import.meta.url)),
  names: process.argv.slice(2),
  quick,
  diskBytes: quick ? 256 * MiB : GiB,
  ...(previous ? { previous } : {}),
});
await mkdir(dirname(out), { recursive: true });
await writeFile(out, `${JSON.stringify(run, null, 2)}\n`);

const disk = run.machine.disk;
console.log(`\n${run.machine.cpu}, ${run.machine.cores} cores, ${run.machine.ramGiB} GiB, Node ${run.machine.node}`);
if (disk)
  console.log(
    `disk: direct write + fsync ${disk.directWriteFsync.toFixed(0)} MiB/s, cold read ${disk.coldRead.toFixed(0)} MiB/s, warm read ${disk.warmRead.toFixed(0)} MiB/s`,
  );
console.log(`\n${ratioTable(run.results)}\n\nwritten to ${out}`);
const failed = run.suites.filter((s) => !s.ok && s.date >= startedAt);
for (const s of failed) console.error(`suite ${s.suite} failed: ${s.error}`);
process.exitCode = failed.length > 0 ? 1 : 0;
