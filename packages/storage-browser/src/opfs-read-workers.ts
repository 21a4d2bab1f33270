// Web Workers that read ranges of OPFS files and CRC32C their blocks where the bytes land, so a
// load's reads and checksums leave the page's thread; the bytes come back transferred, not copied.
// Their code is this module's `workerMain` with core's WebAssembly CRC32C (its JavaScript one where
// WebAssembly cannot be compiled), run from a Blob URL.
import { CRC32C_JS_SOURCE, CRC32C_TABLES_SOURCE, CRC32C_WASM_BYTES, CRC32C_WASM_SOURCE } from "@cairn/core/format";

interface ReadRequest {
  readonly id: number;
  /** The snapshot the read is of: what it returns, whichever way it reads. */
  readonly file: File;
  /** The file's handle, to read through a read-only sync access handle; without it, `file` is sliced. */
  readonly handle?: FileSystemFileHandle;
  readonly start: number;
  readonly end: number;
  /** CRC32C every this many bytes of the range; 0: none. */
  readonly blockSize: number;
  /** Memory to read into (at least `end - start` bytes), transferred there and back; else a new buffer. */
  readonly buffer?: ArrayBuffer;
}

type ReadReply =
  | {
      readonly id: number;
      readonly ok: true;
      readonly buffer: ArrayBuffer;
      /** Bytes read, from the buffer's start. */
      readonly length: number;
      /** Whether it read through a sync access handle (else it sliced the snapshot). */
      readonly locked: boolean;
      /** Whether its sums, if any, came from WebAssembly (else JavaScript). */
      readonly wasm: boolean;
      readonly sums?: Uint32Array;
    }
  | { readonly id: number; readonly ok: false; readonly error: { name: string; message: string } };

/** A sync access handle's reads, which TypeScript's DOM types declare without the `mode` option. */
type SyncReader = { read(into: Uint8Array, options: { at: number }): number; close(): void };
type OpenSync = (options: { mode: "read-only" }) => Promise<SyncReader>;

/**
 * Runs in a worker, given the CRC32C function (and whether it is WebAssembly's): answers every request once, bytes and sums
 * transferred. Reads through a read-only sync access handle (a pread into the given memory, at
 * about a third of the CPU of `File.slice().arrayBuffer()`, docs/benchmarks.md), checked under its
 * lock to still be the snapshot asked for; where that handle cannot be had (a writer holds the
 * file, the browser has no read-only mode) or the file changed, slices the snapshot as before.
 */
function workerMain(crc32c: (bytes: Uint8Array) => number, wasm: boolean): void {
  const scope = self as unknown as {
    onmessage: ((event: { data: ReadRequest }) => void) | null;
    postMessage(message: ReadReply, transfer: Transferable[]): void;
  };
  const readLocked = async (data: ReadRequest): Promise<Uint8Array | undefined> => {
    let access: SyncReader;
    try {
      access = await (data.handle as unknown as { createSyncAccessHandle: OpenSync }).createSyncAccessHandle({
        mode: "read-only",
      });
    } catch {
      return undefined;
    }
    try {
      // No one writes the file while the handle is open: if it is the snapshot now, it stays so for the read.
      const now = await data.handle!.getFile();
      if (now.size !== data.file.size || now.lastModified !== data.file.lastModified) return undefined;
      const length = data.end - data.start;
      const bytes = new Uint8Array(data.buffer ?? new ArrayBuffer(length), 0, length);
      let done = 0;
      for (let n = 1; done < length && n > 0; done += n)
        n = access.read(bytes.subarray(done), { at: data.start + done });
      return bytes.subarray(0, done);
    } finally {
      access.close();
    }
  };
  scope.onmessage = async ({ data }) => {
    try {
      const read = data.handle ? await readLocked(data) : undefined;
      const bytes = read ?? new Uint8Array(await data.file.slice(data.start, data.end).arrayBuffer());
      const [buffer, length, locked] = [bytes.buffer as ArrayBuffer, bytes.byteLength, read !== undefined];
      if (data.blockSize <= 0) {
        scope.postMessage({ id: data.id, ok: true, buffer, length, locked, wasm }, [buffer]);
        return;
      }
      const sums = new Uint32Array(Math.ceil(bytes.byteLength / data.blockSize));
      for (let i = 0; i < sums.length; i++)
        sums[i] = crc32c(bytes.subarray(i * data.blockSize, (i + 1) * data.blockSize));
      scope.postMessage({ id: data.id, ok: true, buffer, length, locked, wasm, sums }, [buffer, sums.buffer]);
    } catch (error) {
      const { name, message } = (error ?? {}) as { name?: unknown; message?: unknown };
      scope.postMessage(
        { id: data.id, ok: false, error: { name: String(name ?? "Error"), message: String(message) } },
        [],
      );
    }
  };
}

/** The workers could not be used (none started, a CSP refused blob: workers, one crashed): read on the page instead. */
export class ReadWorkersUnavailable extends Error {}

interface Waiting {
  readonly bytes: number;
  readonly worker: Worker;
  resolve(result: { bytes: Uint8Array; sums?: Uint32Array }): void;
  reject(error: unknown): void;
}

/** The page's read workers: as many as the machine has cores (at most 4), spawned on first use, each read sent to the least loaded. */
export class OpfsReadWorkers {
  readonly #workers: Worker[];
  readonly #load = new Map<Worker, number>();
  readonly #waiting = new Map<number, Waiting>();
  #next = 0;
  #broken = false;
  /** Reads answered so far: through a sync access handle, by slicing the snapshot, and hashed in WebAssembly. */
  readonly answered = { locked: 0, sliced: 0, hashedInWasm: 0 };

  private constructor(workers: Worker[]) {
    this.#workers = workers;
    for (const worker of workers) {
      this.#load.set(worker, 0);
      worker.onmessage = (event: MessageEvent<ReadReply>) => this.#settle(event.data);
      worker.onerror = () => this.#breakDown();
    }
  }

  static #shared: OpfsReadWorkers | undefined | null;

  /** The page's read workers; undefined where there are none (no Worker, or spawning one failed, or they broke down). */
  static shared(): OpfsReadWorkers | undefined {
    if (OpfsReadWorkers.#shared === undefined) OpfsReadWorkers.#shared = OpfsReadWorkers.#spawn();
    if (OpfsReadWorkers.#shared && OpfsReadWorkers.#shared.#broken) OpfsReadWorkers.#shared = null;
    return OpfsReadWorkers.#shared ?? undefined;
  }

  static #spawn(): OpfsReadWorkers | null {
    if (typeof Worker !== "function" || typeof Blob !== "function") return null;
    const count = Math.max(1, Math.min(4, globalThis.navigator?.hardwareConcurrency || 2));
    const workers: Worker[] = [];
    try {
      const wasm = `(${CRC32C_WASM_SOURCE})(new Uint8Array([${CRC32C_WASM_BYTES.join()}]), t)`;
      const main = `const wasm = ${wasm}; (${workerMain.toString()})(wasm ?? (${CRC32C_JS_SOURCE})(t), !!wasm);`;
      const source = `((t) => { ${main} })((${CRC32C_TABLES_SOURCE})());`;
      const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
      try {
        for (let i = 0; i < count; i++) workers.push(new Worker(url, { name: `cairn-opfs-reader-${i}` }));
      } finally {
        URL.revokeObjectURL(url);
      }
      return new OpfsReadWorkers(workers);
    } catch {
      for (const worker of workers) worker.terminate();
      return null;
    }
  }

  /**
   * Bytes `[start, end)` of `file` (read through `handle` where it can be), with the CRC32C of
   * every `blockSize` bytes when it is positive: in `into`'s buffer, transferred to the worker
   * and back, from its start (`into` is unusable meanwhile), else in a buffer of their own.
   * Rejects `ReadWorkersUnavailable` when the workers broke down.
   */
  read(
    file: File,
    handle: FileSystemFileHandle | undefined,
    start: number,
    end: number,
    blockSize: number,
    into?: ArrayBuffer,
  ): Promise<{ bytes: Uint8Array; sums?: Uint32Array }> {
    if (this.#broken) return Promise.reject(new ReadWorkersUnavailable("the OPFS read workers broke down"));
    const worker = this.#workers.reduce((a, b) => (this.#load.get(b)! < this.#load.get(a)! ? b : a));
    const id = this.#next++;
    const bytes = end - start;
    this.#load.set(worker, this.#load.get(worker)! + bytes);
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, { bytes, worker, resolve, reject });
      const request: ReadRequest = {
        id,
        file,
        start,
        end,
        blockSize,
        ...(handle ? { handle } : {}),
        ...(into ? { buffer: into } : {}),
      };
      try {
        worker.postMessage(request, into ? [into] : []);
      } catch (error) {
        this.#waiting.delete(id);
        this.#load.set(worker, this.#load.get(worker)! - bytes);
        reject(error);
      }
    });
  }

  #settle(reply: ReadReply): void {
    const waiting = this.#waiting.get(reply.id);
    if (!waiting) return;
    this.#waiting.delete(reply.id);
    this.#load.set(waiting.worker, this.#load.get(waiting.worker)! - waiting.bytes);
    if (reply.ok) this.answered[reply.locked ? "locked" : "sliced"]++;
    if (reply.ok && reply.sums && reply.wasm) this.answered.hashedInWasm++;
    if (!reply.ok) waiting.reject(Object.assign(new Error(reply.error.message), { name: reply.error.name }));
    else
      waiting.resolve({
        bytes: new Uint8Array(reply.buffer, 0, reply.length),
        ...(reply.sums ? { sums: reply.sums } : {}),
      });
  }

  /** A worker that fails to load or crashes fails every read in flight over to the page, and no read goes to any worker again. */
  #breakDown(): void {
    this.#broken = true;
    for (const worker of this.#workers) worker.terminate();
    for (const waiting of this.#waiting.values())
      waiting.reject(new ReadWorkersUnavailable("an OPFS read worker failed"));
    this.#waiting.clear();
  }
}
