// Saves and loads a 1 GiB checkpoint through gs:// on the local Cloud Storage emulator, beside the
// SDK's own `file.save` and ranged `createReadStream` of the same bytes at the same concurrency,
// in the same run. Prints MB/s, the ratio to the SDK and the peak RSS above the state's own memory.
// The emulator runs in a child process: in-process, its copies of every upload would swamp RSS.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { type HostTensor, crc32c, hostTensor, load, openStorage, save } from "@cairn/core";
import { Storage } from "@google-cloud/storage";
import PQueue from "p-queue";
import "../src/index.js";

const TENSORS = 4;
const TENSOR_BYTES = 256 << 20; // 4 × 256 MiB = 1 GiB, one data file per tensor
const CONCURRENCY = 4; // files written at once, ranges read at once: the same for Cairn and the SDK
const READ_BYTES = 64 << 20; // bytes per ranged read, for both
const MB = 1e6;

async function startEmulatorProcess(): Promise<{ host: string; stop: () => Promise<unknown> }> {
  const entry = fileURLToPath(new URL("./gcs-emulator-process.ts", import.meta.url));
  const child = spawn(process.execPath, ["--import", "tsx", "--conditions=@cairn/source", entry], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const info = await new Promise<{ host: string }>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once("line", (line) => resolve(JSON.parse(line) as { host: string }));
    child.once("exit", (code) => reject(new Error(`the emulator process exited with ${code} before it was ready`)));
  });
  return { host: info.host, stop: () => (child.stdin!.end(), exited) };
}

/** Runs `work`, sampling RSS, and reports seconds and the peak RSS above what it was before. */
async function measure(work: () => Promise<void>): Promise<{ seconds: number; peakRssMB: number }> {
  globalThis.gc?.();
  const base = process.memoryUsage().rss;
  let peak = base;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
  const started = performance.now();
  await work();
  const seconds = (performance.now() - started) / 1000;
  clearInterval(timer);
  peak = Math.max(peak, process.memoryUsage().rss);
  return { seconds, peakRssMB: (peak - base) / MB };
}

const emulator = await startEmulatorProcess();
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
  // The adapter alone (no core load: no block checksums, no copy into the target's layout), reading the
  // same ranges of Cairn's data files: separates the adapter's cost from core's.
  const adapterLoad = (round: number) =>
    measure(async () => {
      const storage = await openStorage(`${url}-${round}`, storageOptions);
      const files: { path: string; size: number }[] = [];
      for await (const o of storage.list("")) if (o.path.endsWith(".safetensors")) files.push(o);
      const queue = new PQueue({ concurrency: CONCURRENCY });
      const reads: Promise<unknown>[] = [];
      for (const f of files) for (let at = 0; at < f.size; at += READ_BYTES) reads.push(queue.add(() => storage.read(f.path, { offset: at, length: READ_BYTES }).then(() => undefined)));
      await Promise.all(reads);
      await storage.close();
    });
  const check = (who: string): void => {
    if (tensors.some((t, i) => crc32c(new Uint8Array(t.data.buffer)) !== sums[i])) throw new Error(`${who} read back other bytes than were saved`);
  };

  // Two rounds, alternating who goes first, so a warm or cold emulator favours neither; the faster round counts.
  const best = (a: { seconds: number; peakRssMB: number }, b: { seconds: number; peakRssMB: number }) => ({
    seconds: Math.min(a.seconds, b.seconds),
    peakRssMB: Math.max(a.peakRssMB, b.peakRssMB),
  });
  const results = { sdkSave: [] as Awaited<ReturnType<typeof measure>>[], cairnSave: [] as Awaited<ReturnType<typeof measure>>[], sdkLoad: [] as Awaited<ReturnType<typeof measure>>[], cairnLoad: [] as Awaited<ReturnType<typeof measure>>[] };
  for (const round of [0, 1]) {
    const order = round === 0 ? (["sdk", "cairn"] as const) : (["cairn", "sdk"] as const);
    for (const who of order) results[`${who}Save`].push(await (who === "sdk" ? sdkSave : cairnSave)(round));
    for (const who of order) {
      results[`${who}Load`].push(await (who === "sdk" ? sdkLoad : cairnLoad)(round));
      check(who);
    }
  }
  const adapterOnly = best(await adapterLoad(0), await adapterLoad(1));
  const [sdkSaved, cairnSaved, sdkLoaded, cairnLoaded] = (["sdkSave", "cairnSave", "sdkLoad", "cairnLoad"] as const).map((k) => best(results[k][0]!, results[k][1]!));

  const row = (name: string, m: { seconds: number; peakRssMB: number }, base?: { seconds: number }) =>
    `${name.padEnd(34)} ${(total / MB / m.seconds).toFixed(0).padStart(6)} MB/s ${base ? `${(base.seconds / m.seconds).toFixed(2)}x`.padStart(6) : "     -"}  peak RSS +${m.peakRssMB.toFixed(0)} MB`;
  console.log(`gs:// on the firebase-tools emulator (child process), ${total / 2 ** 30} GiB in ${TENSORS} files, concurrency ${CONCURRENCY}, reads of ${READ_BYTES / 2 ** 20} MiB`);
  console.log(row("SDK file.save (baseline)", sdkSaved!));
  console.log(row("cairn save gs://", cairnSaved!, sdkSaved));
  console.log(row("SDK ranged createReadStream", sdkLoaded!));
  console.log(row("cairn load gs://", cairnLoaded!, sdkLoaded));
  console.log(row("  adapter ranged reads alone", adapterOnly, sdkLoaded));
  for (const [k, v] of Object.entries(results)) console.log(`  ${k}: ${v.map((m) => `${m.seconds.toFixed(1)} s`).join(", ")}`);
} finally {
  await emulator.stop();
}
