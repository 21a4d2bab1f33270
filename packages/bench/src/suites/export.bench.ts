// `cairn export --hf` against `cairn cp` of the same checkpoint (issue 36): a 4 GiB state in
// 1 GiB shards, and a column-sharded one (three column chunks per tensor, as three ranks save
// them), each phase in its own process: throughput against cp with and without its read-back,
// and peak RSS over the process's baseline against the issue's 1.25 GiB. Rounds alternate the order.
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { report } from "../report.js";
import { GiB, MiB, median, quick, range, rounds, runChild, warmCache, withTempDir } from "../support.js";

const suite = "export";
const phase = fileURLToPath(new URL("../export/export-phase.ts", import.meta.url));
const n = rounds(3);
/** Issue 36's bound on an export's peak RSS over the process's baseline. */
const RSS_LIMIT_MIB = 1280;

interface Run {
  readonly bytes: number;
  readonly seconds: number;
  readonly cpuSeconds: number;
  readonly baselineRss: number;
  readonly minorFaults: number;
  readonly peakRss: number;
}

const cases = [
  { layout: "whole", tensors: quick ? 4 : 16, mib: quick ? 16 : 256, shard: quick ? 16 * MiB : GiB },
  { layout: "columns", tensors: quick ? 2 : 8, mib: quick ? 16 : 128, shard: quick ? 16 * MiB : 256 * MiB },
] as const;

const steps: readonly [string, (source: string, out: string, shard: number) => string[]][] = [
  ["export", (source, out, shard) => ["export", source, out, String(shard)]],
  ["cp", (source, out) => ["cp", source, out, "read-back"]],
  ["cp --no-read-back", (source, out) => ["cp", source, out, "no-read-back"]],
];

for (const c of cases) {
  const total = c.tensors * c.mib;
  const what = `${total >= 1024 ? `${total / 1024} GiB` : `${total} MiB`} (${c.tensors} x ${c.mib} MiB float32${c.layout === "columns" ? ", each in 3 column chunks" : ""}), shards of ${c.shard / MiB} MiB`;
  console.log(`${what}, ${n} round(s)`);
  const runs = new Map<string, Run[]>(steps.map(([name]) => [name, []]));
  await withTempDir(async (dir) => {
    const source = join(dir, "ckpt");
    await runChild(phase, ["make", source, c.layout, String(c.tensors), String(c.mib)]);
    for (let round = 0; round < n; round++) {
      for (const [name, args] of round % 2 === 0 ? steps : [...steps].reverse()) {
        const out = join(dir, "out");
        await warmCache(source);
        const run = await runChild<Omit<Run, "peakRss">>(phase, args(source, out, c.shard));
        const r = { ...run.result, peakRss: run.peakRss };
        runs.get(name)!.push(r);
        console.log(
          `  ${name.padEnd(18)} ${(r.bytes / MiB / r.seconds).toFixed(0).padStart(6)} MiB/s  ${r.seconds.toFixed(2)} s  cpu ${r.cpuSeconds.toFixed(2)} s  peak RSS ${((r.peakRss - r.baselineRss) / MiB).toFixed(0)} MiB over ${(r.baselineRss / MiB).toFixed(0)} MiB`,
        );
        await rm(out, { recursive: true, force: true });
      }
    }
  });
  const rate = (name: string): number => median(runs.get(name)!.map((r) => r.bytes / MiB / r.seconds));
  const seconds = (name: string): number[] => runs.get(name)!.map((r) => +r.seconds.toFixed(3));
  for (const baseline of ["cp", "cp --no-read-back"]) {
    report({
      suite,
      name: `export --hf ${what}`,
      value: rate("export"),
      unit: "MiB/s",
      baseline: { name: `cairn ${baseline} of the same checkpoint`, value: rate(baseline) },
      ratio: rate("export") / rate(baseline),
      better: "higher",
      ...(baseline === "cp" ? { target: 0.8 } : {}),
      extra: {
        rounds: n,
        exportSeconds: seconds("export"),
        baselineSeconds: seconds(baseline),
        exportSecondsRange: range(seconds("export")),
        baselineSecondsRange: range(seconds(baseline)),
        exportCpuSeconds: median(runs.get("export")!.map((r) => r.cpuSeconds)),
        baselineCpuSeconds: median(runs.get(baseline)!.map((r) => r.cpuSeconds)),
        exportMinorFaults: median(runs.get("export")!.map((r) => r.minorFaults)),
        baselineMinorFaults: median(runs.get(baseline)!.map((r) => r.minorFaults)),
      },
    });
  }
  const peaks = runs.get("export")!.map((r) => (r.peakRss - r.baselineRss) / MiB);
  const peak = Math.max(...peaks);
  report({
    suite,
    name: `peak RSS over the process's baseline during export --hf, ${what}`,
    value: peak,
    unit: "MiB",
    baseline: { name: "issue 36's limit", value: RSS_LIMIT_MIB },
    ratio: peak / RSS_LIMIT_MIB,
    better: "lower",
    target: 1,
    extra: {
      peaksMiB: peaks.map((p) => +p.toFixed(1)),
      cpPeaksMiB: runs.get("cp")!.map((r) => +((r.peakRss - r.baselineRss) / MiB).toFixed(1)),
      processBaselineMiB: +(median(runs.get("export")!.map((r) => r.baselineRss)) / MiB).toFixed(1),
    },
  });
}
