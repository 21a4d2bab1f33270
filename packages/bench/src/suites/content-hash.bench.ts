// What the content hash (XXH3-128 of every chunk, format 2.2) costs a full save: the same save
// with both hashes and with CRC32C alone (core's `setContentHashing(false)`, as Cairn saved before
// 2.2), taken in turns on the same disk, at 256 MiB (16 tensors of 16 MiB) and at 100k tensors of
// 1 KiB. Wall time is the target's figure; the process's CPU time (main thread and checksum
// workers) is kept beside it, since it shows the hash's cost on a busy machine.
import { type HostTensor, type StateDict, hostTensor, save } from "@cairn/core";
import { setContentHashing } from "@cairn/core/testing";
import "@cairn/storage-local";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { report } from "../report.js";
import { KiB, MiB, median, quick, range, rounds, withTempDir } from "../support.js";

const suite = "content-hash";
// 15, not 7: a median of 7 moved the 100k row's ratio by ±7 % between runs of the same code,
// more than the 5 % the target allows (docs/benchmarks.md, hash34f).
const ROUNDS = rounds(15);

/** Every element set, so no page is left untouched for the save to fault in. */
function filled(elements: number, seed: number): HostTensor {
  const data = new Float32Array(elements);
  for (let i = 0; i < elements; i++) data[i] = seed + i * 0.5;
  return hostTensor("float32", [elements], data);
}

const states: { label: string; state: StateDict }[] = [
  {
    label: quick ? "32 MiB in 16 tensors" : "256 MiB in 16 tensors",
    state: { model: Array.from({ length: 16 }, (_, i) => filled((quick ? 2 * MiB : 16 * MiB) / 4, i)) },
  },
  {
    label: quick ? "10k tensors of 1 KiB" : "100k tensors of 1 KiB",
    state: {
      model: {
        layers: Array.from({ length: quick ? 10_000 : 100_000 }, (_, i) => ({ mlp: { w: filled(KiB / 4, i) } })),
      },
    },
  },
];

/** One save's wall and CPU seconds (CPU of the whole process: the checksum workers included). */
async function measuredSave(state: StateDict, dir: string, hashes: boolean): Promise<{ wall: number; cpu: number }> {
  setContentHashing(hashes);
  try {
    const cpu = process.cpuUsage();
    const started = performance.now();
    await save(state, dir);
    const wall = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    return { wall, cpu: (used.user + used.system) / 1e6 };
  } finally {
    setContentHashing(true);
    await rm(dir, { recursive: true, force: true });
  }
}

await withTempDir(async (root) => {
  for (const { label, state } of states) {
    const runs = { both: [] as { wall: number; cpu: number }[], crc: [] as { wall: number; cpu: number }[] };
    // One of each first: code, workers and packing memory warm for both.
    await measuredSave(state, join(root, "warm-both"), true);
    await measuredSave(state, join(root, "warm-crc"), false);
    for (let round = 0; round < ROUNDS; round++) {
      for (const which of round % 2 === 0 ? (["both", "crc"] as const) : (["crc", "both"] as const))
        runs[which].push(await measuredSave(state, join(root, `${which}-${round}`), which === "both"));
    }
    const wall = { both: median(runs.both.map((r) => r.wall)), crc: median(runs.crc.map((r) => r.wall)) };
    const cpu = { both: median(runs.both.map((r) => r.cpu)), crc: median(runs.crc.map((r) => r.cpu)) };
    // Each round's two saves ran next to each other: the median of their ratios, beside the ratio of medians.
    const paired = median(runs.both.map((r, i) => r.wall / runs.crc[i]!.wall));
    const extra = {
      rounds: ROUNDS,
      pairedRatio: paired,
      bothRange: range(runs.both.map((r) => r.wall)),
      crcRange: range(runs.crc.map((r) => r.wall)),
    };
    report({
      suite,
      name: `full save with CRC32C + XXH3-128 of every chunk, ${label}`,
      value: wall.both,
      unit: "s",
      baseline: { name: "the same save with CRC32C alone, in turns", value: wall.crc },
      ratio: wall.both / wall.crc,
      better: "lower",
      target: 1.05,
      extra,
    });
    report({
      suite,
      name: `CPU time of a full save with CRC32C + XXH3-128, ${label}`,
      value: cpu.both,
      unit: "CPU s",
      baseline: { name: "the same save with CRC32C alone, in turns", value: cpu.crc },
      ratio: cpu.both / cpu.crc,
      better: "lower",
      extra: {
        rounds: ROUNDS,
        bothRange: range(runs.both.map((r) => r.cpu)),
        crcRange: range(runs.crc.map((r) => r.cpu)),
      },
    });
  }
});
