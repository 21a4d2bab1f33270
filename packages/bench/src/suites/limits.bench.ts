// The machine's limits that load and save figures are judged against (issue 34): CRC32C (core's
// native one) on one thread and on every core at once, memcpy on one thread, and the disk's read
// speed with several readers at once against one `dd` reading the same files one after another,
// cold (as root: the page cache dropped) and warm. Throughput in MiB/s over resident memory.
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { open } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { crc32c } from "@cairn/core/format";
import { alignedBytes, ddRead, directWrite, fillRandom } from "../disk.js";
import { report } from "../report.js";
import { GiB, MiB, dropCaches, median, quick, rounds, withTempDir } from "../support.js";

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
  // Core's own CRC32C package, resolved from core (the bench does not depend on it).
  const crcModule = createRequire(fileURLToPath(import.meta.resolve("@cairn/core/format"))).resolve("@node-rs/crc32");
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
report({ suite: SUITE, name: `memcpy, one thread, ${size} between resident buffers`, unit: "MiB/s", ...rates(memcpy) });
report({
  suite: SUITE,
  name: `CRC32C (core's native), one thread, ${size} in 1 MiB blocks`,
  unit: "MiB/s",
  ...rates(crcOne),
  baseline: { name: "memcpy, one thread", value: rate(BYTES, memcpy.wall) },
  ratio: memcpy.wall / crcOne.wall,
  better: "higher",
});
report({
  suite: SUITE,
  name: `CRC32C, ${CORES} threads at once (every core), ${size}`,
  unit: "MiB/s",
  ...rates(crcCores),
  baseline: { name: "CRC32C, one thread", value: rate(BYTES, crcOne.wall) },
  ratio: crcOne.wall / crcCores.wall,
  better: "higher",
});

await withTempDir(async (dir) => {
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
