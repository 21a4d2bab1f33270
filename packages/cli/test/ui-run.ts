// A run for the `cairn ui` tests, written through a real tiered, incremental CheckpointManager:
// metrics, one tensor holding a NaN, keys holding HTML, and (on request) a damaged step.
import { readFile, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type StateDict, hostTensor, readMetadata } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { tempDir } from "./helpers.js";

/** Keys a page must show as text: run as HTML they would set `window.pwned`. */
export const HOSTILE_KEYS = [
  '<script>window.pwned = "script"</script>',
  "<img src=x onerror=\"window.pwned = 'img'\">",
];
/** A metric whose name is HTML too. */
export const HOSTILE_METRIC = "<b>acc</b>";
export const STEPS = [10, 20, 30, 40, 50, 60];

/** The float16 bits of 1, 2, 3 and (from step 60 on) 5 instead of 4. */
function half(step: number): Uint16Array {
  return new Uint16Array([0x3c00, 0x4000, 0x4200, step >= 60 ? 0x4500 : 0x4400]);
}

/** The state saved at `step`: "frozen" never changes (later steps reference it), "w" and (at 60) "half" change. */
export function runState(step: number): StateDict {
  return {
    frozen: hostTensor("float32", [4096], new Float32Array(4096).fill(0.5)),
    w: hostTensor(
      "float32",
      [8, 8],
      Float32Array.from({ length: 64 }, (_, i) => i / 8 + step),
    ),
    half: hostTensor("float16", [4], half(step)),
    nonfinite: hostTensor(
      "float32",
      [16],
      Float32Array.from({ length: 16 }, (_, i) => (i === 3 ? NaN : i)),
    ),
    [HOSTILE_KEYS[0]!]: hostTensor("float32", [2], new Float32Array([1, 2])),
    [HOSTILE_KEYS[1]!]: { lr: 0.01 },
  };
}

export function loss(step: number): number {
  return 2 / step;
}

export interface UiRun {
  readonly tiers: readonly [string, string];
}

/**
 * Saves steps 10…60 (incremental, metrics loss and HOSTILE_METRIC) through a manager with two
 * file:// tiers: tier 0 keeps the newest 3, tier 1 takes every 20th step and keeps them all.
 */
export async function writeUiRun(): Promise<UiRun> {
  const dir = await tempDir();
  const tiers = [join(dir, "fast"), join(dir, "slow")] as const;
  const manager = new CheckpointManager([...tiers], 10, {
    incremental: true,
    maxToKeep: 3,
    tiers: [undefined, { every: 20 }],
    checkpointOnPreemption: false,
  });
  for (const step of STEPS)
    await manager.save(step, runState(step), { metrics: { loss: loss(step), [HOSTILE_METRIC]: step / 100 } });
  await manager.close();
  return { tiers };
}

/** The steps of a tier by what is on disk: step directories, committed when they hold a metadata.json. */
export async function stepsOnDisk(tier: string): Promise<Map<number, "committed" | "uncommitted" | "referenced">> {
  const steps = new Map<number, "committed" | "uncommitted" | "referenced">();
  const files = new Map<string, string[]>();
  for (const entry of await readdir(tier, { withFileTypes: true })) {
    if (!entry.isDirectory() || !/^\d+$/.test(entry.name)) continue;
    files.set(entry.name, await readdir(join(tier, entry.name)));
  }
  // Files of other steps the committed ones use: a directory of nothing else is "referenced".
  const used = new Set<string>();
  for (const [name, names] of files)
    if (names.includes("metadata.json"))
      for (const [file, info] of Object.entries((await readMetadata(join(tier, name))).files))
        if (info.dir !== undefined) used.add(`${info.dir}/${file}`);
  for (const [name, names] of files) {
    const state = names.includes("metadata.json")
      ? "committed"
      : names.every((f) => used.has(`${name}/${f}`))
        ? "referenced"
        : "uncommitted";
    steps.set(Number(name), state);
  }
  return steps;
}

/** Flips a byte inside tensor `key`'s first chunk of `step` on `tier`; returns the data file it damaged. */
export async function damage(tier: string, step: number, key: string): Promise<string> {
  const metadata = await readMetadata(join(tier, String(step)));
  const entry = metadata.entries.find((e) => e.key.length === 1 && e.key[0] === key);
  if (entry?.kind !== "tensor") throw new Error(`no tensor ${key} in step ${step}`);
  const chunk = entry.chunks[0]!;
  const file = metadata.files[chunk.file]!;
  const path = join(tier, file.dir ?? String(step), chunk.file);
  const bytes = await readFile(path);
  bytes[chunk.byteOffset + 1]! ^= 0x10;
  await writeFile(path, bytes);
  return chunk.file;
}
