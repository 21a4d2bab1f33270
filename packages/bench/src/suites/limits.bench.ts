// The machine's limits that load and save figures are judged against (issue 34): CRC32C (core's
// native one: @cairn/crc32c-native where it built, `crc32cKernel` in the JSON) on one thread and
// on every core at once, XXH3-128 (the content hash), one checksum call for a 1 KiB tensor, memcpy
// on one thread, the disk's write speed with several writers at once against the same writes one
// after another, and its read speed with several readers at once against one `dd` reading the
// same files one after another, cold (as root: the page cache dropped) and warm. Throughput in
// MiB/s over resident memory.
import { availableParallelism } from "node:os";
import { open, rm } from "node:fs/promises";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { CRC32C_IMPLEMENTATION, CRC32C_WORKER_MODULE, crc32c, loadXxh128 } from "@cairn/core/format";
import { alignedBytes, ddRead, directWrite, fillRandom } from "../disk.js";
import { report } from "../report.js";
import { GiB, KiB, MiB, dropCaches, median, quick, rounds, withTempDir } from "../support.js";

const SUITE = "limits";
const BYTES = quick ? 128 * MiB : GiB;
/** As a load verifies: one call per 1 MiB block. */
const BLOCK = MiB;
const FILES = 4;
const READ_BYTES = 8 * MiB;
const ROUNDS = rounds(5);
const CORES = availableParallelism();

const rate = (bytes: number, seconds: number): number => bytes / MiB / seconds;

/** Seconds for one pass of `fn` (wall, and CPU of the whole process), medians of ROUNDS passes after one warm-up. */
async function best(fn: () => void | Promise<void>): Promise<{ wall: number; cpu: number }> {
  await fn();
  const wall: number[] = [];
  const cpu: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const started = performance.now();
    const used = process.cpuUsage();
    await fn();
    const spent = process.cpuUsage(used);
    wall.push((performance.now() - started) / 1000);
    cpu.push((spent.user + spent.system) / 1e6);
  }
  return { wall: median(wall), cpu: median(cpu) };
}

function crcAll(bytes: Uint8Array): void {
  for (let at = 0; at < bytes.byteLength; at += BLOCK) crc32c(bytes.subarray(at, at + BLOCK));
}

/** CRC32C of `bytes` split over `threads` worker threads at once (each its share, 1 MiB a call): seconds, once they are all loaded. */
async function crcOnThreads(bytes: Uint8Array, threads: number): Promise<{ wall: number; cpu: number }> {
  const share = Math.ceil(bytes.byteLength / threads / BLOCK) * BLOCK;
  // The module core's checksum workers load (the bench depends on neither CRC32C package).
  const crcModule = CRC32C_WORKER_MODULE;
  const source = `
    const { parentPort, workerData } = require("node:worker_threads");
    const { crc32c } = require(workerData.crcModule);
    const bytes = new Uint8Array(workerData.buffer, workerData.start, workerData.length);
    parentPort.on("message", () => {
      for (let at = 0; at < bytes.byteLength; at += ${BLOCK}) crc32c(bytes.subarray(at, at + ${BLOCK}));
      parentPort.postMessage("done");
    });
    parentPort.postMessage("ready");`;
  const workers = Array.from({ length: threads }, (_, i) => {
    const start = Math.min(bytes.byteLength, i * share);
    return new Worker(source, {
      eval: true,
      workerData: { buffer: bytes.buffer, start, length: Math.min(share, bytes.byteLength - start), crcModule },
    });
  });
  const next = (w: Worker): Promise<unknown> => new Promise((resolve) => w.once("message", resolve));
  try {
    await Promise.all(workers.map(next));
    return await best(() => Promise.all(workers.map((w) => (w.postMessage("go"), next(w)))).then(() => undefined));
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}

/** Reads each file front to back in 8 MiB reads into a touched buffer of its own, all files at once. */
async function parallelRead(paths: readonly string[], into: readonly Uint8Array[]): Promise<void> {
  await Promise.all(
    paths.map(async (path, i) => {
      const handle = await open(path, "r");
      try {
        const buffer = into[i]!;
        for (let at = 0; ; at += READ_BYTES) {
          const { bytesRead } = await handle.read(buffer, 0, READ_BYTES, at);
          if (bytesRead === 0) break;
        }
      } finally {
        await handle.close();
      }
    }),
  );
}

const data = alignedBytes(BYTES);
fillRandom(data);
const other = new Uint8Array(BYTES).fill(1);
const size = `${BYTES / MiB} MiB`;

const memcpy = await best(() => {
  for (let at = 0; at < BYTES; at += READ_BYTES) other.set(data.subarray(at, at + READ_BYTES), at);
});
const crcOne = await best(() => crcAll(data));
const crcCores = await crcOnThreads(data, CORES);
/** Wall-time rate, with the rate per CPU-second beside it: on a busy machine the second is the machine's. */
const rates = (t: { wall: number; cpu: number }) => ({
  value: rate(BYTES, t.wall),
  extra: {
    mibPerCpuSecond: Math.round(rate(BYTES, t.cpu)),
    seconds: +t.wall.toFixed(4),
    cpuSeconds: +t.cpu.toFixed(4),
  },
});
/** As `rates`, naming the CRC32C kernel measured. */
const crcRates = (t: { wall: number; cpu: number }) => {
  const { value, extra } = rates(t);
  return { value, extra: { ...extra, crc32cKernel: CRC32C_IMPLEMENTATION } };
};
report({ suite: SUITE, name: `memcpy, one thread, ${size} between resident buffers`, unit: "MiB/s", ...rates(memcpy) });
report({
  suite: SUITE,
  name: `CRC32C (core's native), one thread, ${size} in 1 MiB blocks`,
  unit: "MiB/s",
  ...crcRates(crcOne),
  baseline: { name: "memcpy, one thread", value: rate(BYTES, memcpy.wall) },
  ratio: memcpy.wall / crcOne.wall,
  better: "higher",
});
report({
  suite: SUITE,
  name: `CRC32C, ${CORES} threads at once (every core), ${size}`,
  unit: "MiB/s",
  ...crcRates(crcCores),
  baseline: { name: "CRC32C, one thread", value: rate(BYTES, crcOne.wall) },
  ratio: crcOne.wall / crcCores.wall,
  better: "higher",
});

// The content hash a save computes with the CRC32C (format 2.2), streamed in the same 1 MiB blocks.
const xxh = await loadXxh128();
const xxhOne = await best(async () => {
  const stream = await xxh.stream();
  for (let at = 0; at < BYTES; at += BLOCK) stream.update(data.subarray(at, at + BLOCK));
  stream.digest();
});
report({
  suite: SUITE,
  name: `XXH3-128 (${xxh.implementation}), one thread, ${size} in 1 MiB blocks`,
  unit: "MiB/s",
  ...rates(xxhOne),
  baseline: { name: "CRC32C, one thread", value: rate(BYTES, crcOne.wall) },
  ratio: crcOne.wall / xxhOne.wall,
  better: "higher",
});
// A small tensor's checksums are one call each: what 100k tensors of 1 KiB cost the checksum workers.
const small = data.subarray(0, KiB);
const CALLS = 100_000;
for (const [label, fn] of [
  ["CRC32C", () => crc32c(small)],
  [`XXH3-128 (${xxh.implementation})`, () => xxh.hash(small)],
] as const) {
  const t = await best(() => {
    for (let i = 0; i < CALLS; i++) fn();
  });
  report({
    suite: SUITE,
    name: `${label} of one 1 KiB input, one thread, per call`,
    value: (t.wall / CALLS) * 1e6,
    unit: "µs",
    extra: { calls: CALLS, cpuMicroseconds: +((t.cpu / CALLS) * 1e6).toFixed(3) },
  });
}

await withTempDir(async (dir) => {
  // The disk with several writers at once, as a save's files go out: O_DIRECT 16 MiB writes + fsync each.
  const written: Record<"sequential" | "parallel", number[]> = { sequential: [], parallel: [] };
  for (let r = 0; r < ROUNDS; r++) {
    for (const how of r % 2 === 0 ? (["sequential", "parallel"] as const) : (["parallel", "sequential"] as const)) {
      const targets = Array.from({ length: FILES }, (_, i) => join(dir, `w${r}-${how}-${i}`));
      const share = BYTES / FILES;
      const piece = (i: number): Uint8Array => data.subarray(i * share, (i + 1) * share);
      const started = performance.now();
      if (how === "parallel") await Promise.all(targets.map((t, i) => directWrite(t, piece(i))));
      else for (const [i, t] of targets.entries()) await directWrite(t, piece(i));
      written[how].push((performance.now() - started) / 1000);
      await Promise.all(targets.map((t) => rm(t)));
    }
  }
  report({
    suite: SUITE,
    name: `disk, write + fsync of ${size} in ${FILES} files by ${FILES} writers at once (O_DIRECT, 16 MiB writes)`,
    value: rate(BYTES, median(written.parallel)),
    unit: "MiB/s",
    baseline: { name: "the same writes, one file after another", value: rate(BYTES, median(written.sequential)) },
    ratio: median(written.sequential) / median(written.parallel),
    better: "higher",
    extra: {
      rounds: ROUNDS,
      secondsParallel: written.parallel.map((s) => +s.toFixed(4)),
      secondsSequential: written.sequential.map((s) => +s.toFixed(4)),
    },
  });

  const paths = Array.from({ length: FILES }, (_, i) => join(dir, `file-${i}`));
  const share = BYTES / FILES;
  for (const [i, path] of paths.entries()) await directWrite(path, data.subarray(i * share, (i + 1) * share));
  const buffers = paths.map(() => new Uint8Array(READ_BYTES).fill(1));
  const timed = async (fn: () => void | Promise<void>): Promise<number> => {
    const started = performance.now();
    await fn();
    return (performance.now() - started) / 1000;
  };
  for (const cache of ["cold", "warm"] as const) {
    const dd: number[] = [];
    const parallel: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      // Alternating which goes first; cold: each from a dropped page cache, warm: after a read of every file.
      for (const who of r % 2 === 0 ? (["dd", "parallel"] as const) : (["parallel", "dd"] as const)) {
        if (cache === "cold" && !(await dropCaches()))
          return console.log("not root: the disk's cold reads are left out");
        if (cache === "warm") ddRead(paths);
        if (who === "dd") dd.push(await timed(() => ddRead(paths)));
        else parallel.push(await timed(() => parallelRead(paths, buffers)));
      }
    }
    report({
      suite: SUITE,
      name: `disk, ${cache} read of ${size} in ${FILES} files by ${FILES} node:fs readers at once (8 MiB reads)`,
      value: rate(BYTES, median(parallel)),
      unit: "MiB/s",
      baseline: { name: "dd bs=16M of the same files, one after another", value: rate(BYTES, median(dd)) },
      ratio: median(dd) / median(parallel),
      better: "higher",
      extra: {
        rounds: ROUNDS,
        secondsParallel: parallel.map((s) => +s.toFixed(4)),
        secondsDd: dd.map((s) => +s.toFixed(4)),
      },
    });
  }
}, "cairn-limits-");

// What reading tfjs tensors costs a save that copies them out (copy staging, the async-training
// suite): tfjs's data() of every tensor of the async-training state (three quarters in 3 tensors,
// a quarter in 2,000), on the cpu backend, against a memcpy of the same bytes. On this backend
// data() hands out the backend's own arrays, so the copy staging makes is the memcpy.
{
  const tf = await import("@tensorflow/tfjs");
  await tf.setBackend("cpu");
  const quarter = BYTES / 4;
  const tensors = [
    ...Array.from({ length: 3 }, (_, i) => tf.variable(tf.fill([quarter / 4], i + 0.5))),
    ...Array.from({ length: 2000 }, (_, i) => tf.variable(tf.fill([Math.floor(quarter / 2000 / 4)], i))),
  ];
  const tensorBytes = tensors.reduce((n, t) => n + t.size * 4, 0);
  let arrays: ArrayBufferView[] = [];
  const read = await best(async () => {
    arrays = (await Promise.all(tensors.map((t) => t.data()))) as ArrayBufferView[];
  });
  const readSync = await best(() => {
    for (const t of tensors) t.dataSync();
  });
  const copy = await best(() => {
    let at = 0;
    for (const a of arrays) {
      other.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), at);
      at += a.byteLength;
    }
  });
  const own = (await tensors[0]!.data()) === (await tensors[0]!.data());
  report({
    suite: SUITE,
    name: `tfjs data() of ${tensors.length} tensors (cpu backend), ${(tensorBytes / MiB).toFixed(0)} MiB`,
    value: read.wall * 1000,
    unit: "ms",
    baseline: { name: "memcpy of the same bytes", value: copy.wall * 1000 },
    ratio: read.wall / copy.wall,
    better: "lower",
    extra: {
      dataSyncMs: +(readSync.wall * 1000).toFixed(2),
      cpuMs: +(read.cpu * 1000).toFixed(2),
      returnsBackendArrays: String(own),
    },
  });
  for (const t of tensors) t.dispose();
}
