// Saves and loads a 1 GiB checkpoint through gs:// on the local Cloud Storage emulator, beside the
// SDK's own `file.save` and ranged `createReadStream` of the same bytes at the same concurrency,
// in the same run. Prints MB/s, the ratio to the SDK and the peak RSS above the state's own memory.
// The emulator runs in a child process: in-process, its copies of every upload would swamp RSS.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { type HostTensor, hostTensor, load, openStorage, save } from "@cairn/core";
import { crc32c } from "@cairn/core/format";
import { Storage } from "@google-cloud/storage";
import PQueue from "p-queue";
import { type MeasuredWork, measureWork } from "@cairn/core/testing";
import "../src/index.js";

const TENSORS = 4;
const TENSOR_BYTES = 256 << 20; // 4 × 256 MiB = 1 GiB, one data file per tensor
const CONCURRENCY = 4; // files written at once, ranges read at once: the same for Cairn and the SDK
const READ_BYTES = 64 << 20; // bytes per ranged read, for both
const MB = 1e6;
/** Rounds of every measurement, alternating who goes first; the median counts. */
const ROUNDS = Number(process.env["BENCH_ROUNDS"] ?? 3);

async function startEmulatorProcess(): Promise<{ host: string; pid: number; stop: () => Promise<unknown> }> {
  const entry = fileURLToPath(new URL("./gcs-emulator-process.ts", import.meta.url));
  const child = spawn(process.execPath, ["--import", "tsx", "--conditions=@cairn/source", entry], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const info = await new Promise<{ host: string }>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once("line", (line) => resolve(JSON.parse(line) as { host: string }));
    child.once("exit", (code) => reject(new Error(`the emulator process exited with ${code} before it was ready`)));
  });
  return { host: info.host, pid: child.pid!, stop: () => (child.stdin!.end(), exited) };
}


const emulator = await startEmulatorProcess();

/** Runs `work`, measuring seconds, the peak RSS rise and the CPU of this process and the emulator. */
const measure = (work: () => Promise<void>): Promise<MeasuredWork> => measureWork(emulator.pid, work);

try {
  const tensors: HostTensor<"float32">[] = [];
  for (let t = 0; t < TENSORS; t++) {
    const values = new Float32Array(TENSOR_BYTES / 4);
    for (let i = 0; i < values.length; i += 1024) values[i] = t * 1e6 + i;
    tensors.push(hostTensor("float32", [values.length / 1024, 1024], values));
  }
  const sums = tensors.map((t) => crc32c(new Uint8Array(t.data.buffer)));
  const state = Object.fromEntries(tensors.map((t, i) => [`t${i}`, t]));
  const total = TENSORS * TENSOR_BYTES;
  const storageOptions = {
    gs: { apiEndpoint: emulator.host, projectId: "demo-cairn", parallelReadMinBytes: Number.MAX_SAFE_INTEGER },
  };
  const url = "gs://cairn-bench/run1/step-1";

  const cairnSave = (round: number) =>
    measure(async () => {
      await save(state, { checkpointId: `${url}-${round}`, storageOptions, concurrency: CONCURRENCY });
    });
  const cairnLoad = (round: number) =>
    measure(async () => {
      for (const t of tensors) t.data.fill(0);
      await load(state, { checkpointId: `${url}-${round}`, storageOptions, concurrency: CONCURRENCY, maxReadBytes: READ_BYTES, maxInflightBytes: CONCURRENCY * READ_BYTES });
    });

  // The SDK baseline: the same bytes, one object per tensor, CONCURRENCY at once, with the client's defaults.
  const bucket = new Storage({ projectId: "demo-cairn", apiEndpoint: emulator.host }).bucket("cairn-bench");
  const sdkSave = (round: number) =>
    measure(async () => {
      const queue = new PQueue({ concurrency: CONCURRENCY });
      await Promise.all(tensors.map((t, i) => queue.add(() => bucket.file(`sdk-${round}/t${i}`).save(Buffer.from(t.data.buffer)))));
    });
  // Cairn's load makes the same requests: one per range, each data file's header riding in its first one.
  const sdkLoad = (round: number) => measure(async () => {
    for (const t of tensors) t.data.fill(0);
    const queue = new PQueue({ concurrency: CONCURRENCY });
    const reads: Promise<void>[] = [];
    for (const [i, t] of tensors.entries()) {
      const target = new Uint8Array(t.data.buffer);
      for (let at = 0; at < TENSOR_BYTES; at += READ_BYTES) {
        reads.push(
          queue.add(async () => {
            let offset = at;
            for await (const chunk of bucket.file(`sdk-${round}/t${i}`).createReadStream({ start: at, end: at + READ_BYTES - 1, validation: false })) {
              target.set(chunk as Buffer, offset);
              offset += (chunk as Buffer).byteLength;
            }
          }),
        );
      }
    }
    await Promise.all(reads);
  });
  // The adapter alone (no core load: no header or block checksums), reading the same ranges of Cairn's
  // data files into buffers of its own (ReadOptions.into, as core's load does): separates the adapter's
  // cost from core's. The buffers are touched before, like the tensors a load fills.
  const scratch = Array.from({ length: CONCURRENCY }, () => new Uint8Array(READ_BYTES).fill(1));
  const adapterLoad = (round: number) =>
    measure(async () => {
      const storage = await openStorage(`${url}-${round}`, storageOptions);
      const files: { path: string; size: number }[] = [];
      for await (const o of storage.list("")) if (o.path.endsWith(".safetensors")) files.push(o);
      const queue = new PQueue({ concurrency: CONCURRENCY });
      const free = [...scratch];
      const reads: Promise<unknown>[] = [];
      for (const f of files) {
        for (let at = 0; at < f.size; at += READ_BYTES) {
          reads.push(
            queue.add(async () => {
              const into = free.pop()!;
              try {
                await storage.read(f.path, { offset: at, length: READ_BYTES }, { into });
              } finally {
                free.push(into);
              }
            }),
          );
        }
      }
      await Promise.all(reads);
      await storage.close();
    });
  const check = (who: string): void => {
    if (tensors.some((t, i) => crc32c(new Uint8Array(t.data.buffer)) !== sums[i])) throw new Error(`${who} read back other bytes than were saved`);
  };

  // Rounds alternate who goes first, so a warm or cold emulator favours neither; the median counts.
  const median = (runs: readonly MeasuredWork[]): MeasuredWork => {
    const sorted = [...runs].sort((x, y) => x.seconds - y.seconds);
    return { ...sorted[(sorted.length - 1) >> 1]!, peakRiseBytes: Math.max(...runs.map((r) => r.peakRiseBytes)) };
  };
  const results = { sdkSave: [] as MeasuredWork[], cairnSave: [] as MeasuredWork[], sdkLoad: [] as MeasuredWork[], cairnLoad: [] as MeasuredWork[], adapterLoad: [] as MeasuredWork[] };
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? (["sdk", "cairn"] as const) : (["cairn", "sdk"] as const);
    for (const who of order) results[`${who}Save`].push(await (who === "sdk" ? sdkSave : cairnSave)(round));
    for (const who of order) {
      results[`${who}Load`].push(await (who === "sdk" ? sdkLoad : cairnLoad)(round));
      check(who);
    }
    results.adapterLoad.push(await adapterLoad(round));
  }
  const [sdkSaved, cairnSaved, sdkLoaded, cairnLoaded, adapterOnly] = (
    ["sdkSave", "cairnSave", "sdkLoad", "cairnLoad", "adapterLoad"] as const
  ).map((k) => median(results[k]));
  // What verifying every block costs a load here: core's CRC32C over the same 1 GiB, in memory.
  const crcStarted = performance.now();
  for (const t of tensors) crc32c(new Uint8Array(t.data.buffer));
  const crcSeconds = (performance.now() - crcStarted) / 1000;

  const row = (name: string, m: MeasuredWork, base?: { seconds: number }) =>
    `${name.padEnd(34)} ${(total / MB / m.seconds).toFixed(0).padStart(6)} MB/s ${base ? `${(base.seconds / m.seconds).toFixed(2)}x`.padStart(6) : "     -"}  peak RSS +${(m.peakRiseBytes / MB).toFixed(0)} MB  cpu client ${m.clientCpu.toFixed(1)} s, emulator ${m.serverCpu.toFixed(1)} s`;
  console.log(`gs:// on the firebase-tools emulator (child process), ${total / 2 ** 30} GiB in ${TENSORS} files, concurrency ${CONCURRENCY}, reads of ${READ_BYTES / 2 ** 20} MiB, median of ${ROUNDS} rounds`);
  console.log(row("SDK file.save (baseline)", sdkSaved!));
  console.log(row("cairn save gs://", cairnSaved!, sdkSaved));
  console.log(row("SDK ranged createReadStream", sdkLoaded!));
  console.log(row("cairn load gs://", cairnLoaded!, sdkLoaded));
  console.log(row("  adapter ranged reads alone", adapterOnly!, sdkLoaded));
  console.log(`CRC32C of the same 1 GiB in memory (what a load's verification costs): ${crcSeconds.toFixed(2)} s`);
  for (const [k, v] of Object.entries(results)) {
    console.log(`  ${k}: ${v.map((m) => `${m.seconds.toFixed(1)} s (cpu ${m.clientCpu.toFixed(1)} + ${m.serverCpu.toFixed(1)})`).join(", ")}`);
  }
} finally {
  await emulator.stop();
}
