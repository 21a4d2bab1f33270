// The opfs suite's page: Cairn's save and load of a state on opfs:// against raw OPFS writes and
// reads of the same bytes, in the same page and round, each phase a call of its own (the suite
// measures CPU around each). Raw write: a Web Worker (sync access
// handles exist only there) writes the tensors' bytes as FILES files, all handed to it by
// postMessage at once (a copy, as the adapter's are). Raw read: File.arrayBuffer() of every file at
// once, copied into preallocated tensors (where Cairn's load reads in place and checks every block).
import { exposeToTests } from "@cairn/browser-testing/page";
import { type StateDict, hostTensor, load, save } from "@cairn/core";
import { crc32c } from "@cairn/core/format";
import "@cairn/storage-browser";

const FILES = 4;
const DIR = "bench-opfs";

/** The raw side's worker: writes a file's parts through a sync access handle, or reads a range through a read-only one. */
function rawWorker(): void {
  type Sync = {
    read(b: Uint8Array, o: { at: number }): number;
    write(b: Uint8Array, o: { at: number }): number;
    truncate(n: number): void;
    flush(): void;
    close(): void;
  };
  type Request =
    | { id: number; kind: "write"; name: string; parts: Uint8Array[] }
    | { id: number; kind: "read"; name: string; start: number; end: number; buffer: ArrayBuffer };
  const scope = self as unknown as {
    onmessage: ((event: { data: Request }) => void) | null;
    postMessage(message: unknown, transfer?: Transferable[]): void;
  };
  scope.onmessage = async ({ data }) => {
    try {
      let dir = await navigator.storage.getDirectory();
      dir = await (
        await dir.getDirectoryHandle("bench-opfs", { create: true })
      ).getDirectoryHandle("raw", {
        create: true,
      });
      const file = (await dir.getFileHandle(data.name, { create: data.kind === "write" })) as unknown as {
        createSyncAccessHandle(options?: { mode: "read-only" }): Promise<Sync>;
      };
      if (data.kind === "read") {
        const handle = await file.createSyncAccessHandle({ mode: "read-only" });
        const bytes = new Uint8Array(data.buffer, 0, data.end - data.start);
        for (let done = 0, n = 1; done < bytes.byteLength && n > 0; done += n)
          n = handle.read(bytes.subarray(done), { at: data.start + done });
        handle.close();
        scope.postMessage({ id: data.id, ok: true, buffer: data.buffer }, [data.buffer]);
        return;
      }
      const handle = await file.createSyncAccessHandle();
      handle.truncate(0);
      let at = 0;
      for (const part of data.parts) {
        for (let done = 0; done < part.byteLength;) {
          const n = handle.write(part.subarray(done), { at });
          done += n;
          at += n;
        }
      }
      handle.flush();
      handle.close();
      scope.postMessage({ id: data.id, ok: true });
    } catch (error) {
      scope.postMessage({ id: data.id, ok: false, error: String(error) });
    }
  };
}

/** Raw workers: as many as Cairn's read workers (one per core, at most 4); the first also writes. */
let workers: Worker[] = [];
const pending = new Map<number, { resolve(reply: { buffer?: ArrayBuffer }): void; reject(error: Error): void }>();
let nextId = 0;
function rawCall(worker: number, message: object, transfer: Transferable[] = []): Promise<{ buffer?: ArrayBuffer }> {
  if (workers.length === 0) {
    const url = URL.createObjectURL(new Blob([`(${rawWorker.toString()})()`], { type: "text/javascript" }));
    const count = Math.max(1, Math.min(4, navigator.hardwareConcurrency || 2));
    workers = Array.from({ length: count }, () => new Worker(url));
    for (const w of workers)
      w.onmessage = ({ data }: MessageEvent<{ id: number; ok: boolean; error?: string; buffer?: ArrayBuffer }>) => {
        const waiting = pending.get(data.id);
        pending.delete(data.id);
        if (data.ok) waiting?.resolve(data);
        else waiting?.reject(new Error(data.error));
      };
  }
  const id = nextId++;
  const done = new Promise<{ buffer?: ArrayBuffer }>((resolve, reject) => pending.set(id, { resolve, reject }));
  workers[worker % workers.length]!.postMessage({ id, ...message }, transfer);
  return done;
}

/** Hands a file's parts to the worker (copied by postMessage); resolves once written and flushed. */
async function writeRaw(name: string, parts: Uint8Array[]): Promise<void> {
  await rawCall(0, { kind: "write", name, parts });
}

/** Buffers the raw sync reads read into, made and touched once: reads of 8 MiB, as Cairn's load issues. */
const SYNC_READ = 8 << 20;
const SYNC_LANES = 8;
let readBuffers: ArrayBuffer[] = [];

let source: Float32Array[] = [];
let target: Float32Array[] = [];

/** Fills `count` tensors of `bytes` (every page touched) and as many zeroed targets. */
function prepare(count: number, bytes: number): { userAgent: string } {
  source = Array.from({ length: count }, (_, t) => {
    const data = new Float32Array(bytes / 4);
    for (let i = 0; i < data.length; i++) data[i] = t + i * 0.25;
    return data;
  });
  target = Array.from({ length: count }, () => new Float32Array(bytes / 4).fill(-1));
  readBuffers = Array.from({ length: SYNC_LANES }, () => new Uint8Array(SYNC_READ).fill(1).buffer);
  return { userAgent: navigator.userAgent };
}

function asState(tensors: Float32Array[]): StateDict {
  return { model: tensors.map((data) => hostTensor("float32", [data.length], data)) };
}

function bytesOf(data: Float32Array): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

async function clear(): Promise<void> {
  await (await navigator.storage.getDirectory()).removeEntry(DIR, { recursive: true }).catch(() => undefined);
  clearTargets();
}

function clearTargets(): void {
  for (const t of target) t.fill(-1);
}

function checkTargets(what: string): void {
  for (let t = 0; t < source.length; t++) {
    const a = source[t]!;
    const b = target[t]!;
    for (let i = 0; i < a.length; i += 997) if (a[i] !== b[i]) throw new Error(`${what}: tensor ${t} differs at ${i}`);
    if (a[a.length - 1] !== b[b.length - 1]) throw new Error(`${what}: tensor ${t} differs at its end`);
  }
}

const RAW = "raw";
const CAIRN = `opfs://${DIR}/cairn`;

/** Seconds to write the tensors' bytes as FILES files through the worker's sync access handles. */
async function rawWrite(): Promise<number> {
  const perFile = source.length / FILES;
  // Every file handed over at once: the worker writes one while the page copies the next.
  const started = performance.now();
  await Promise.all(
    Array.from({ length: FILES }, (_, f) =>
      writeRaw(`part-${f}`, source.slice(f * perFile, (f + 1) * perFile).map(bytesOf)),
    ),
  );
  return (performance.now() - started) / 1000;
}

/** Seconds to read `rawWrite`'s files back (File.arrayBuffer of all at once) and copy them into the targets. */
async function rawRead(): Promise<number> {
  const perFile = source.length / FILES;
  const started = performance.now();
  const dir = await (await (await navigator.storage.getDirectory()).getDirectoryHandle(DIR)).getDirectoryHandle(RAW);
  await Promise.all(
    Array.from({ length: FILES }, async (_, f) => {
      const bytes = new Uint8Array(await (await (await dir.getFileHandle(`part-${f}`)).getFile()).arrayBuffer());
      for (let t = 0; t < perFile; t++) {
        const into = bytesOf(target[f * perFile + t]!);
        into.set(bytes.subarray(t * into.byteLength, (t + 1) * into.byteLength));
      }
    }),
  );
  const read = (performance.now() - started) / 1000;
  checkTargets("raw read");
  return read;
}

/**
 * Seconds to read `rawWrite`'s files back as Cairn's load does, unverified: ranges of 8 MiB read
 * through read-only sync access handles in the workers into reused buffers, transferred to the
 * page and back, copied into the targets on the page.
 */
async function rawSyncRead(): Promise<number> {
  const perFile = source.length / FILES;
  const fileBytes = perFile * bytesOf(source[0]!).byteLength;
  const reads: { f: number; start: number }[] = [];
  for (let f = 0; f < FILES; f++) for (let start = 0; start < fileBytes; start += SYNC_READ) reads.push({ f, start });
  const started = performance.now();
  let next = 0;
  await Promise.all(
    readBuffers.map(async (first, lane) => {
      let buffer = first;
      for (let i = next++; i < reads.length; i = next++) {
        const { f, start } = reads[i]!;
        const end = Math.min(fileBytes, start + SYNC_READ);
        const reply = await rawCall(lane, { kind: "read", name: `part-${f}`, start, end, buffer }, [buffer]);
        buffer = reply.buffer!;
        const bytes = new Uint8Array(buffer, 0, end - start);
        // Into the targets: tensors of the file, in order.
        for (let done = 0; done < bytes.byteLength;) {
          const at = start + done;
          const into = bytesOf(target[f * perFile + Math.floor(at / bytesOf(source[0]!).byteLength)]!);
          const offset = at % into.byteLength;
          const n = Math.min(into.byteLength - offset, bytes.byteLength - done);
          into.set(bytes.subarray(done, done + n), offset);
          done += n;
        }
      }
      readBuffers[lane] = buffer;
    }),
  );
  const read = (performance.now() - started) / 1000;
  checkTargets("raw sync read");
  return read;
}

async function cairnSave(): Promise<number> {
  const started = performance.now();
  await save(asState(source), CAIRN);
  return (performance.now() - started) / 1000;
}

async function cairnLoad(): Promise<number> {
  const started = performance.now();
  await load(asState(target), CAIRN);
  const read = (performance.now() - started) / 1000;
  checkTargets("Cairn's load");
  return read;
}

/** Seconds of the page's thread to CRC32C every byte once (what a load verifies), in 4 MiB slices. */
function checksumAll(): number {
  const started = performance.now();
  let crc = 0;
  for (const data of source) {
    const bytes = bytesOf(data);
    for (let at = 0; at < bytes.byteLength; at += 4 << 20) crc = crc32c(bytes.subarray(at, at + (4 << 20)), crc);
  }
  if (crc === 0.5) throw new Error("unreachable: keeps the loop");
  return (performance.now() - started) / 1000;
}

exposeToTests({ prepare, clear, clearTargets, rawWrite, rawRead, rawSyncRead, cairnSave, cairnLoad, checksumAll });
