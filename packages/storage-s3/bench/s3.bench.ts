// Saves and loads a 1 GiB checkpoint (CAIRN_BENCH_GIB to change) through s3:// on fauxqs, beside the SDK's own
// `@aws-sdk/lib-storage` Upload and plain ranged GetObject of the same bytes with the same
// concurrency, in the same run. fauxqs runs in a child process, so the RSS measured here is
// the client's alone. Run: pnpm --filter @cairn/storage-s3 bench
import { Readable } from "node:stream";
import { DeleteObjectCommand, GetObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import { type HostTensor, hostTensor, load, openStorage, save } from "@cairn/core";
import { crc32c } from "@cairn/core/format";
import "../src/index.js";
import type { S3StorageOptions } from "../src/open-s3-storage.js";
import { startFauxqsProcess } from "../test/start-fauxqs.js";
import { type MeasuredWork, measureWork } from "@cairn/core/testing";

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";

const MiB = 1 << 20;
/** 1 GiB by default; CAIRN_BENCH_GIB=2 shows whether memory grows with the checkpoint (it should not). */
const TOTAL = Number(process.env.CAIRN_BENCH_GIB ?? 1) * 1024 * MiB;
const TENSORS = 16;
/** Parts of 8 MiB: fauxqs refuses request bodies over 11 MiB. */
const PART = 8 * MiB;
/** Part requests in flight, for Cairn (adapter-wide) and for the baselines (summed over files). */
const CONCURRENCY = 8;
/** Core's default: a rank writes its tensors into this many files in parallel. */
const FILES = 4;
const BUCKET = "bench";


/** Tensors with every page touched, so loading into them measures transfer, not page faults. */
function tensors(fill: boolean): HostTensor<"float32">[] {
  return Array.from({ length: TENSORS }, (_, t) => {
    const data = new Float32Array(TOTAL / TENSORS / 4).fill(-1);
    if (fill) for (let i = 0; i < data.length; i += 1024) data[i] = t * 1e6 + i;
    return hostTensor("float32", [data.length / 1024, 1024], data);
  });
}

const bytesOf = (t: HostTensor): Uint8Array => new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);

async function main(): Promise<void> {
  const server = await startFauxqsProcess([BUCKET]);
  const client = new S3Client({ endpoint: server.endpoint, region: "us-east-1", forcePathStyle: true, credentials: { accessKeyId: "bench", secretAccessKey: "bench" } });
  try {
    const s3: S3StorageOptions = {
      endpoint: server.endpoint,
      region: "us-east-1",
      forcePathStyle: true,
      credentials: { accessKeyId: "bench", secretAccessKey: "bench" },
      partSize: PART,
      concurrency: CONCURRENCY,
      // fauxqs stores an empty object when CompleteMultipartUpload lists part checksums, so parts
      // carry the SDK's default checksum instead of Cairn's CRC32C, exactly like the baseline's.
      checksums: { put: true, multipart: false },
    };
    const storageOptions = { s3 };
    const source = tensors(true);
    const state = Object.fromEntries(source.map((t, i) => [`layer${i}`, t]));
    const files = Array.from({ length: FILES }, (_, f) => source.filter((_, i) => i % FILES === f));

    const cairnSave = await measureWork(server.pid, async () => {
      await save(state, { checkpointId: `s3://${BUCKET}/cairn`, storageOptions, concurrency: FILES });
    });
    const sdkUpload = await measureWork(server.pid, async () => {
      await Promise.all(
        files.map((group, f) =>
          new Upload({
            client,
            params: { Bucket: BUCKET, Key: `sdk/file-${f}`, Body: Readable.from(group.map(bytesOf)) },
            partSize: PART,
            queueSize: CONCURRENCY / FILES,
          }).done(),
        ),
      );
    });

    const target = tensors(false);
    const into = Object.fromEntries(target.map((t, i) => [`layer${i}`, t]));
    const cairnLoad = await measureWork(server.pid, async () => {
      await load(into, { checkpointId: `s3://${BUCKET}/cairn`, storageOptions, concurrency: CONCURRENCY });
    });
    for (let i = 0; i < TENSORS; i++) {
      if (!Buffer.from(bytesOf(target[i]!)).equals(Buffer.from(bytesOf(source[i]!)))) throw new Error(`layer${i} did not round-trip`);
    }

    // The adapter's reads alone (no checksum verification), into a touched buffer per worker as
    // core's load reads into its targets (ReadOptions.into), to tell the adapter's share of a load
    // from core's.
    const adapter = await openStorage(`s3://${BUCKET}/cairn`, storageOptions);
    const dataFiles: { path: string; size: number }[] = [];
    for await (const o of adapter.list("")) if (o.path.endsWith(".safetensors")) dataFiles.push(o);
    const scratch = Array.from({ length: CONCURRENCY }, () => new Uint8Array(2 * PART).fill(1));
    const adapterReads = await measureWork(server.pid, async () => {
      const ranges = dataFiles.flatMap((o) => Array.from({ length: Math.ceil(o.size / (2 * PART)) }, (_, r) => ({ path: o.path, offset: r * 2 * PART })));
      let next = 0;
      const worker = async (into: Uint8Array): Promise<void> => {
        while (next < ranges.length) {
          const { path, offset } = ranges[next++]!;
          await adapter.read(path, { offset, length: 2 * PART }, { into });
        }
      };
      await Promise.all(scratch.map(worker));
    });
    await adapter.close();

    const fileSize = TOTAL / FILES;
    const sink = tensors(false).map(bytesOf);
    const sdkGet = await measureWork(server.pid, async () => {
      const ranges = Array.from({ length: FILES }, (_, f) => Array.from({ length: fileSize / PART }, (_, r) => ({ f, offset: r * PART }))).flat();
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < ranges.length) {
          const { f, offset } = ranges[next++]!;
          const response = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: `sdk/file-${f}`, Range: `bytes=${offset}-${offset + PART - 1}` }));
          const bytes = await response.Body!.transformToByteArray();
          const at = f * fileSize + offset;
          sink[Math.floor(at / (TOTAL / TENSORS))]!.set(bytes, at % (TOTAL / TENSORS));
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    });
    for (let f = 0; f < FILES; f++) await client.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: `sdk/file-${f}` }));

    // What verifying every block costs a load here: core's CRC32C over the same bytes, in memory.
    const crcStarted = performance.now();
    for (const t of target) crc32c(bytesOf(t));
    const crcSeconds = (performance.now() - crcStarted) / 1000;

    const mbps = (s: number): number => TOTAL / 1e6 / s;
    const row = (name: string, m: MeasuredWork, baseline?: { seconds: number }): string =>
      `| ${name} | ${m.seconds.toFixed(2)} | ${mbps(m.seconds).toFixed(0)} | ${baseline ? (baseline.seconds / m.seconds).toFixed(2) : "1.00"} | ${(m.peakRiseBytes / MiB).toFixed(0)} | ${m.clientCpu.toFixed(1)} | ${m.serverCpu.toFixed(1)} |`;
    console.log(`${TOTAL / 1024 / MiB} GiB in ${TENSORS} float32 tensors (${FILES} files), fauxqs 1.9.2 in a child process on 127.0.0.1, part ${PART / MiB} MiB, ${CONCURRENCY} parts in flight, Node ${process.version}`);
    console.log(`bound on buffered parts: concurrency x part size = ${(CONCURRENCY * PART) / MiB} MiB`);
    console.log("| what | seconds | MB/s | ratio to SDK | peak RSS rise (MiB) | client CPU s | server CPU s |");
    console.log("|---|---|---|---|---|---|---|");
    console.log(row("save via s3:// (Cairn)", cairnSave, sdkUpload));
    console.log(row("lib-storage Upload (baseline)", sdkUpload));
    console.log(row("load via s3:// (Cairn)", cairnLoad, sdkGet));
    console.log(row("ranged GetObject (baseline)", sdkGet));
    console.log(row("s3:// adapter reads alone, 16 MiB ranges", adapterReads, sdkGet));
    console.log(`CRC32C of the same ${TOTAL / 1024 / MiB} GiB in memory (what a load's verification costs): ${crcSeconds.toFixed(2)} s`);
  } finally {
    client.destroy();
    await server.stop();
  }
}

await main();
