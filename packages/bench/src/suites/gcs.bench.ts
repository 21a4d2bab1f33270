// gs:// against the SDK's own transfer of the same bytes, on the Cloud Storage emulator the tests
// use (firebase-tools), in a child process on 127.0.0.1: Cairn's save vs @google-cloud/storage
// `file.save` (a resumable upload, its default), Cairn's load vs parallel ranged `file.download`
// into the same tensors; then the requests each makes for one save and one load, counted by a
// proxy in front of a second, in-process emulator.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { type StorageOptions, load, save } from "@cairn/core";
import "@cairn/storage-gcs";
import { startGcsTestServer } from "@cairn/storage-gcs/testing";
import { type Bucket, Storage } from "@google-cloud/storage";
import {
  READ_BYTES,
  TENSORS,
  TOTAL,
  bytesOf,
  countRequests,
  movedState,
  rangedReads,
  reportRate,
  reportRequests,
  timeSavesAndLoads,
} from "../remote-support.js";
import { MiB, rounds } from "../support.js";

const SUITE = "gcs";
const BUCKET = "cairn-bench";
const PROJECT = "demo-cairn";
const size = `${TOTAL / MiB} MiB in ${TENSORS} tensors`;

async function startEmulatorProcess(): Promise<{ host: string; pid: number; stop: () => Promise<unknown> }> {
  const entry = fileURLToPath(new URL("../servers/gcs-emulator-process.ts", import.meta.url));
  const tsx = createRequire(import.meta.url).resolve("tsx");
  const child = spawn(process.execPath, ["--import", tsx, "--conditions=@cairn/source", entry], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const info = await new Promise<{ host: string }>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once("line", (line) => resolve(JSON.parse(line) as { host: string }));
    child.once("exit", (code) => reject(new Error(`the emulator process exited with ${code} before it was ready`)));
  });
  return { host: info.host, pid: child.pid!, stop: () => (child.stdin!.end(), exited) };
}

const moved = movedState();
const { source, state, target, into } = moved;

const sdkSave = (bucket: Bucket, prefix: string): Promise<unknown> =>
  Promise.all(
    source.map((t, i) =>
      bucket.file(`${prefix}/t${i}`).save(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)),
    ),
  );

const sdkLoad = (bucket: Bucket, prefix: string): Promise<void> =>
  rangedReads(TENSORS, async (o, offset, length) => {
    const [bytes] = await bucket.file(`${prefix}/t${o}`).download({ start: offset, end: offset + length - 1 });
    bytesOf(target[o]!).set(bytes, offset);
  });

/** Names a JSON-API request by what it does; the session URL of a resumable upload carries `upload_id`. */
function classify(r: { method: string; url: string }): string | undefined {
  const url = new URL(r.url, "http://x");
  const type = url.searchParams.get("uploadType");
  if (r.method === "POST" && type) return `upload (${type})`;
  if (r.method === "PUT" && url.searchParams.has("upload_id")) return "resumable upload body";
  if (r.method === "GET" && url.searchParams.get("alt") === "media") return "media GET";
  if (r.method === "GET" && /\/o\/?$/.test(url.pathname)) return "list";
  if (r.method === "GET") return "metadata GET";
  if (r.method === "DELETE") return "delete";
  return undefined;
}

const emulator = await startEmulatorProcess();
const storage = new Storage({ projectId: PROJECT, apiEndpoint: emulator.host });
const storageOptions: StorageOptions = { gs: { apiEndpoint: emulator.host, projectId: PROJECT } };
try {
  const bucket = storage.bucket(BUCKET);
  const { saves, loads } = await timeSavesAndLoads(moved, rounds(3), {
    serverPid: emulator.pid,
    cairnUrl: (r) => `gs://${BUCKET}/cairn-${r}`,
    storageOptions,
    sdkSave: (r) => sdkSave(bucket, `sdk-${r}`),
    sdkLoad: (r) => sdkLoad(bucket, `sdk-${r}`),
    sdkLoadName: "ranged file.download",
  });
  reportRate(SUITE, `save ${size} to gs:// (emulator)`, "file.save (resumable upload)", saves);
  reportRate(
    SUITE,
    `load ${size} from gs:// (emulator)`,
    `ranged file.download, ${READ_BYTES / MiB} MiB x 8 in flight`,
    loads,
  );
} finally {
  await emulator.stop();
}

// Untimed: the same save and load once more, through the test server's counting proxy.
const server = await startGcsTestServer({ bucket: BUCKET });
try {
  const counted = new Storage({ projectId: PROJECT, apiEndpoint: server.proxy.url }).bucket(BUCKET);
  // The requests of one whole attempt: a reused keep-alive socket the proxy just closed fails the
  // SDK's resumable-session POST (which it does not retry), and then the attempt is made again.
  const countOf = async (work: () => Promise<unknown>): Promise<Record<string, number>> => {
    for (let attempt = 1; ; attempt++) {
      server.proxy.requests.length = 0;
      try {
        await work();
        return countRequests(server.proxy.requests, classify);
      } catch (error) {
        if (attempt === 3 || (error as { code?: string }).code !== "ECONNRESET") throw error;
      }
    }
  };
  const url = server.location("cairn");
  const cairnSaveCount = await countOf(() => save(state, { checkpointId: url, storageOptions: server.storageOptions }));
  const sdkSaveCount = await countOf(() => sdkSave(counted, "sdk-count"));
  const cairnLoadCount = await countOf(() => load(into, { checkpointId: url, storageOptions: server.storageOptions }));
  const sdkLoadCount = await countOf(() => sdkLoad(counted, "sdk-count"));
  reportRequests(SUITE, `requests per save, ${size}`, "file.save", cairnSaveCount, sdkSaveCount);
  reportRequests(SUITE, `requests per load, ${size}`, "ranged file.download", cairnLoadCount, sdkLoadCount);
} finally {
  await server.stop();
}
