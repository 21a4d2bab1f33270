// How save, load and metadata scale with the number of tensors: 1k/10k/100k float32 tensors of
// 1 KiB keyed like a real model (`model.layers.123.mlp.w`), against one file holding all their
// bytes plus a JSON index of them, written (fsynced) and read back with node:fs in the same run.
// A training loop saves again and again: each side first saves and loads unmeasured, as many
// times as 20k tensors take, so a round measures that steady state, not the first calls'
// compiling (the bench runs TypeScript source through tsx) and the checksum workers' start. Each
// round's process CPU time (every thread) is kept beside its wall time: on a busy machine the
// steadier figure. The save is also measured against its format's floor: the same content as Cairn's (a safetensors header, each tensor's CRC32C and
// XXH3-128, metadata with each key path, dtype, shape, place and sums) written by node:fs with
// JSON.stringify and native checksums. A save reuses what an earlier save of the same structure planned (the
// plan cache): the first save of each count, and saves planned without the cache, are reported beside it.
import { link, mkdir, open, readFile, rename, rm, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import { DefaultSavePlanner, type HostTensor, type StateDict, hostTensor, load, save } from "@cairn/core";
import { crc32c, loadXxh128 } from "@cairn/core/format";
import "@cairn/storage-local";
import { report } from "../report.js";
import { KiB, median, quick, range, rounds, timed, warmCache, withTempDir } from "../support.js";

const suite = "tensors";
const counts = quick ? [1_000, 10_000] : [1_000, 10_000, 100_000];
const ROUNDS = rounds(5);
/** Issue 34's targets for the save ratio by tensor count (issue 22's 2× for 100k). */
const SAVE_TARGETS: Record<number, number> = { 1_000: 3, 10_000: 2, 100_000: 2 };
/** Issue 34's target for the warm load of 100k tensors. */
const LOAD_TARGETS: Record<number, number> = { 100_000: 2 };

/** Wall and process CPU seconds of `fn`. */
async function measured(fn: () => Promise<unknown>): Promise<{ wall: number; cpu: number }> {
  const cpu = process.cpuUsage();
  const wall = await timed(fn);
  const used = process.cpuUsage(cpu);
  return { wall, cpu: (used.user + used.system) / 1e6 };
}
const ELEMENTS = KiB / 4;

/** `count` tensors as `model.layers.<i>.mlp.w`, each 1 KiB of float32; filled with `seed` so a load can be checked. */
function modelState(count: number, seed: number): { state: StateDict; tensors: HostTensor[] } {
  const tensors: HostTensor[] = [];
  const layers = Array.from({ length: count }, (_, i) => {
    const w = hostTensor("float32", [ELEMENTS], new Float32Array(ELEMENTS).fill(seed + i));
    tensors.push(w);
    return { mlp: { w } };
  });
  return { state: { model: { layers } }, tensors };
}

/** The baseline's save: every tensor's bytes back to back in one file, then a JSON index of name → [offset, length], both fsynced. */
async function writeOneFile(dir: string, tensors: readonly HostTensor[]): Promise<void> {
  const index: Record<string, [number, number]> = {};
  const data = await open(join(dir, "data.bin"), "w");
  const buffers: Uint8Array[] = [];
  let at = 0;
  tensors.forEach((t, i) => {
    const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    index[`model.layers.${i}.mlp.w`] = [at, bytes.byteLength];
    buffers.push(bytes);
    at += bytes.byteLength;
  });
  await data.writev(buffers);
  await data.sync();
  await data.close();
  const json = await open(join(dir, "index.json"), "w");
  await json.writeFile(JSON.stringify({ dtype: "float32", shape: [ELEMENTS], tensors: index }));
  await json.sync();
  await json.close();
}

const xxh = await loadXxh128();

async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, "r");
  await handle.sync();
  await handle.close();
}

/**
 * The floor of a save in Cairn's format: its content made the simplest native way, one CRC32C
 * and one XXH3-128 call per tensor on this thread, and Cairn's durable steps: the data file
 * (safetensors header, then the bytes) written to a temporary name, fsynced, renamed and its
 * directory fsynced, beside metadata.json written to a temporary name and fsynced; then linked
 * into place and the directory fsynced again.
 */
async function writeCairnContent(dir: string, tensors: readonly HostTensor[]): Promise<void> {
  const header: Record<string, unknown> = {};
  const entries: unknown[] = [];
  const hashes = new Uint8Array(16 * tensors.length);
  const buffers: Uint8Array[] = [new Uint8Array(0)];
  let at = 0;
  tensors.forEach((t, i) => {
    const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    const end = at + bytes.byteLength;
    header[`model.layers.${i}.mlp.w`] = { dtype: "F32", shape: [ELEMENTS], data_offsets: [at, end] };
    xxh.hashInto(bytes, hashes, 16 * i);
    const chunk = { file: 0, offset: at, length: bytes.byteLength, crc32c: [crc32c(bytes)] };
    entries.push({ key: ["model", "layers", i, "mlp", "w"], dtype: "float32", shape: [ELEMENTS], chunks: [chunk] });
    buffers.push(bytes);
    at = end;
  });
  header.__metadata__ = { format: "cairn/2" };
  const json = JSON.stringify(header);
  const padded = json + " ".repeat((8 - (json.length % 8)) % 8);
  const head = Buffer.alloc(8 + padded.length);
  head.writeBigUInt64LE(BigInt(padded.length), 0);
  head.write(padded, 8, "latin1");
  buffers[0] = head;
  const temp = join(dir, ".data.tmp");
  const data = await open(temp, "w");
  await data.writev(buffers);
  const dataSynced = (async () => {
    await data.sync();
    await data.close();
    await rename(temp, join(dir, "data.safetensors"));
    await syncDirectory(dir);
  })();
  const metadata = JSON.stringify({
    files: [{ name: "data.safetensors", headerCrc32c: crc32c(head) }],
    entries,
    hashes: Buffer.from(hashes.buffer).toString("base64"),
  });
  const metadataTemp = join(dir, ".metadata.tmp");
  const handle = await open(metadataTemp, "w");
  await handle.writeFile(metadata);
  await handle.sync();
  await handle.close();
  await dataSynced;
  await link(metadataTemp, join(dir, "metadata.json"));
  await syncDirectory(dir);
  await unlink(metadataTemp);
}

/** The baseline's load: the index and the data file read whole, each tensor copied into its target. */
async function readOneFile(dir: string, targets: readonly HostTensor[]): Promise<void> {
  const index = JSON.parse(await readFile(join(dir, "index.json"), "utf8")) as {
    tensors: Record<string, [number, number]>;
  };
  const data = await readFile(join(dir, "data.bin"));
  targets.forEach((t, i) => {
    const [offset, length] = index.tensors[`model.layers.${i}.mlp.w`]!;
    new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength).set(data.subarray(offset, offset + length));
  });
}

/** Rounds, wall ranges and the median CPU seconds of both sides with their ratio. */
function cpuExtra(
  wall: number[],
  baseWall: number[],
  cpu: number[],
  baseCpu: number[],
): Record<string, number | readonly number[]> {
  return {
    rounds: ROUNDS,
    range: range(wall),
    baselineRange: range(baseWall),
    cpuSeconds: +median(cpu).toFixed(4),
    baselineCpuSeconds: +median(baseCpu).toFixed(4),
    cpuRatio: +(median(cpu) / median(baseCpu)).toFixed(2),
  };
}

function check(targets: readonly HostTensor[], seed: number): void {
  targets.forEach((t, i) => {
    if (t.data[0] !== seed + i || t.data[ELEMENTS - 1] !== seed + i) throw new Error(`tensor ${i} did not load`);
  });
}

await withTempDir(async (dir) => {
  const loadTimes = new Map<number, { cairn: number; baseline: number }>();
  for (const count of counts) {
    const { state, tensors } = modelState(count, 1);
    const target = modelState(count, 0);
    type Times = {
      save: number[];
      saveBase: number[];
      saveFloor: number[];
      saveUncached: number[];
      load: number[];
      loadBase: number[];
    };
    const times: Times = { save: [], saveBase: [], saveFloor: [], saveUncached: [], load: [], loadBase: [] };
    const cpu: Times = { save: [], saveBase: [], saveFloor: [], saveUncached: [], load: [], loadBase: [] };
    /** This structure's first save, which plans it (a measured round reuses that plan: the plan cache). */
    let first: { wall: number; cpu: number } | undefined;
    let metadataBytes = 0;
    let indexBytes = 0;
    const warmUps = Math.max(1, Math.ceil(20_000 / count));
    for (let round = -warmUps; round < ROUNDS; round++) {
      const cairn = join(dir, `cairn-${count}-${round}`);
      const base = join(dir, `base-${count}-${round}`);
      await mkdir(base, { recursive: true });
      const keep = (phase: keyof Times, m: { wall: number; cpu: number }): void => {
        if (round < 0) return; // a warm-up round
        times[phase].push(m.wall);
        cpu[phase].push(m.cpu);
      };
      // In turns, so both see the same disk and cache.
      keep("saveBase", await measured(() => writeOneFile(base, tensors)));
      const saved = await measured(() => save(state, cairn));
      first ??= saved;
      keep("save", saved);
      metadataBytes = (await stat(join(cairn, "metadata.json"))).size;
      indexBytes = (await stat(join(base, "index.json"))).size;
      // Warm, both: Cairn writes data files with O_DIRECT, which leaves none of them in the page cache.
      await warmCache(base);
      await warmCache(cairn);
      keep("loadBase", await measured(() => readOneFile(base, target.tensors)));
      check(target.tensors, 1);
      for (const t of target.tensors) (t.data as Float32Array).fill(0);
      keep("load", await measured(() => load(target.state, cairn)));
      check(target.tensors, 1);
      for (const t of target.tensors) (t.data as Float32Array).fill(0);
    }
    // The floor in rounds of its own, after the others: its garbage left out of their rounds (a
    // major collection is paid by whichever call meets it, so a call placed among them moves it).
    for (let round = -warmUps; round < ROUNDS; round++) {
      const floor = join(dir, `floor-${count}-${round}`);
      await mkdir(floor, { recursive: true });
      const m = await measured(() => writeCairnContent(floor, tensors));
      if (round >= 0) {
        times.saveFloor.push(m.wall);
        cpu.saveFloor.push(m.cpu);
      }
      await rm(floor, { recursive: true });
    }
    // Saves planned from scratch, as a first save of a structure is, in rounds of their own as the floor's.
    for (let round = -1; round < ROUNDS; round++) {
      const fresh = join(dir, `fresh-${count}-${round}`);
      const planner = new DefaultSavePlanner({ cachePlans: false });
      const m = await measured(() => save(state, { checkpointId: fresh, planner }));
      if (round >= 0) {
        times.saveUncached.push(m.wall);
        cpu.saveUncached.push(m.cpu);
      }
      await rm(fresh, { recursive: true });
    }
    const label = `${count.toLocaleString("en")} tensors of 1 KiB`;
    const saveS = median(times.save);
    const saveBase = median(times.saveBase);
    report({
      suite,
      name: `save, ${label}`,
      value: saveS,
      unit: "s",
      baseline: { name: "node:fs one file + JSON index, fsynced", value: saveBase },
      ratio: saveS / saveBase,
      better: "lower",
      ...(SAVE_TARGETS[count] === undefined ? {} : { target: SAVE_TARGETS[count] }),
      extra: {
        ...cpuExtra(times.save, times.saveBase, cpu.save, cpu.saveBase),
        // The structure's first save in this process (cold code, plan made), and steady saves planned without the cache.
        firstSaveSeconds: +first!.wall.toFixed(4),
        firstSaveCpuSeconds: +first!.cpu.toFixed(4),
        uncachedPlanSeconds: +median(times.saveUncached).toFixed(4),
        uncachedPlanCpuSeconds: +median(cpu.saveUncached).toFixed(4),
        uncachedPlanRatio: +(median(times.saveUncached) / saveBase).toFixed(2),
      },
    });
    const saveFloor = median(times.saveFloor);
    report({
      suite,
      name: `save against its format's floor, ${label}`,
      value: saveS,
      unit: "s",
      baseline: {
        name: "node:fs writing Cairn's content (JSON.stringify, native checksums), same syncs",
        value: saveFloor,
      },
      ratio: saveS / saveFloor,
      better: "lower",
      extra: cpuExtra(times.save, times.saveFloor, cpu.save, cpu.saveFloor),
    });
    const loadS = median(times.load);
    const loadBase = median(times.loadBase);
    loadTimes.set(count, { cairn: loadS, baseline: loadBase });
    report({
      suite,
      name: `warm load into the targets, ${label}`,
      value: loadS,
      unit: "s",
      baseline: { name: "node:fs read of one file + JSON index, copied into the targets", value: loadBase },
      ratio: loadS / loadBase,
      better: "lower",
      ...(LOAD_TARGETS[count] === undefined ? {} : { target: LOAD_TARGETS[count] }),
      extra: {
        ...cpuExtra(times.load, times.loadBase, cpu.load, cpu.loadBase),
        microsecondsPerTensor: +((loadS / count) * 1e6).toFixed(2),
      },
    });
    report({
      suite,
      name: `metadata.json bytes per tensor, ${label}`,
      value: metadataBytes / count,
      unit: "B/tensor",
      baseline: { name: "issue 22's limit", value: 100 },
      ratio: metadataBytes / count / 100,
      better: "lower",
      target: 1.0,
      extra: { metadataBytes, baselineIndexBytesPerTensor: +(indexBytes / count).toFixed(1) },
    });
  }
  // Linear load: ten times the tensors should cost ten times the time, as it does for the baseline.
  for (let i = 1; i < counts.length; i++) {
    const small = loadTimes.get(counts[i - 1]!)!;
    const big = loadTimes.get(counts[i]!)!;
    const growth = big.cairn / small.cairn;
    const factor = counts[i]! / counts[i - 1]!;
    report({
      suite,
      name: `load time growth, ${counts[i - 1]!.toLocaleString("en")} → ${counts[i]!.toLocaleString("en")} tensors`,
      value: growth,
      unit: "x",
      baseline: { name: `${factor}x (linear)`, value: factor },
      ratio: growth / factor,
      better: "lower",
      target: 1.25,
      extra: { baselineGrowth: +(big.baseline / small.baseline).toFixed(2) },
    });
  }
});
