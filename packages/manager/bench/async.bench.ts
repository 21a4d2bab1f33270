// `pnpm bench` for background saves: a 1 GiB state dict of tfjs tensors on file://, saved by a
// synchronous `save` and by `saveAsync` with each staging strategy, each in its own process, in
// the same run. Prints how long each call blocked training (and the ratio to the synchronous
// save), background throughput against the synchronous save, peak RSS, and the step time of a
// tfjs training loop (cpu backend) without and with the save in flight.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript } from "@cairn/core/testing";

const child = fileURLToPath(new URL("./async-bench-child.ts", import.meta.url));
const MiB = 1 << 20;

interface Run {
  mode: string;
  bytes: number;
  blockedMs: number;
  totalSeconds: number;
  backgroundMBps: number;
  idleStepMs: number;
  busyStepMs?: number;
  busySteps?: number;
  peakRss: number;
}

const runs: Run[] = [];
for (const mode of ["sync", "copy", "reference"]) {
  const dir = await mkdtemp(join(tmpdir(), "cairn-async-bench-"));
  try {
    const result = await runTypeScript(child, [mode, `file://${dir}/run`]);
    if (result.code !== 0) throw new Error(`${mode} failed:\n${result.stderr}`);
    const run = JSON.parse(result.stdout) as Run;
    runs.push(run);
    console.log(`${mode}: ${JSON.stringify(run)}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
const sync = runs[0]!;
const syncMBps = sync.bytes / MiB / sync.totalSeconds;
console.log(`\nasync saves, ${(sync.bytes / MiB).toFixed(0)} MiB of tfjs tensors to file:// (MB/s = MiB/s)`);
console.log("| save | blocks training | vs sync save | committed after | background MB/s | vs sync MB/s | train step idle → during | slowdown | peak RSS |");
console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const r of runs) {
  const background = r.mode === "sync" ? syncMBps : r.backgroundMBps;
  const during = r.busyStepMs === undefined ? "–" : `${r.idleStepMs.toFixed(1)} → ${r.busyStepMs.toFixed(1)} ms (${r.busySteps} steps)`;
  const slowdown = r.busyStepMs === undefined ? "–" : `${((r.busyStepMs / r.idleStepMs - 1) * 100).toFixed(0)} %`;
  console.log(
    `| ${r.mode === "sync" ? "save (sync)" : `saveAsync, ${r.mode} staging`} | ${r.blockedMs.toFixed(0)} ms | ${((r.blockedMs / sync.blockedMs) * 100).toFixed(1)} % | ${r.totalSeconds.toFixed(2)} s | ${background.toFixed(0)} | ${(background / syncMBps).toFixed(2)}x | ${during} | ${slowdown} | ${(r.peakRss / MiB).toFixed(0)} MiB |`,
  );
}
