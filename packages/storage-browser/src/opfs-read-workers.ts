// Web Workers that read ranges of OPFS files and CRC32C their blocks where the bytes land, so a
// load's reads and checksums leave the page's thread; the bytes come back transferred, not copied.
// Their code is this module's `workerMain` with core's JavaScript CRC32C, run from a Blob URL.
import { CRC32C_JS_SOURCE } from "@cairn/core/format";

interface ReadRequest {
  readonly id: number;
  readonly file: File;
  readonly start: number;
  readonly end: number;
  /** CRC32C every this many bytes of the range; 0: none. */
  readonly blockSize: number;
}

type ReadReply =
  | { readonly id: number; readonly ok: true; readonly buffer: ArrayBuffer; readonly sums?: Uint32Array }
  | { readonly id: number; readonly ok: false; readonly error: { name: string; message: string } };

/** Runs in a worker, given the CRC32C function: answers every request once, bytes and sums transferred. */
function workerMain(crc32c: (bytes: Uint8Array) => number): void {
  const scope = self as unknown as {
    onmessage: ((event: { data: ReadRequest }) => void) | null;
    postMessage(message: ReadReply, transfer: Transferable[]): void;
  };
  scope.onmessage = async ({ data }) => {
    try {
      const buffer = await data.file.slice(data.start, data.end).arrayBuffer();
      if (data.blockSize <= 0) {
        scope.postMessage({ id: data.id, ok: true, buffer }, [buffer]);
        return;
      }
      const bytes = new Uint8Array(buffer);
      const sums = new Uint32Array(Math.ceil(bytes.byteLength / data.blockSize));
      for (let i = 0; i < sums.length; i++)
        sums[i] = crc32c(bytes.subarray(i * data.blockSize, (i + 1) * data.blockSize));
      scope.postMessage({ id: data.id, ok: true, buffer, sums }, [buffer, sums.buffer]);
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
      const source = `(${workerMain.toString()})((${CRC32C_JS_SOURCE})());`;
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
   * Bytes `[start, end)` of `file` in a buffer of their own, with the CRC32C of every `blockSize`
   * bytes when it is positive. Rejects `ReadWorkersUnavailable` when the workers broke down.
   */
  read(file: File, start: number, end: number, blockSize: number): Promise<{ bytes: Uint8Array; sums?: Uint32Array }> {
    if (this.#broken) return Promise.reject(new ReadWorkersUnavailable("the OPFS read workers broke down"));
    const worker = this.#workers.reduce((a, b) => (this.#load.get(b)! < this.#load.get(a)! ? b : a));
    const id = this.#next++;
    const bytes = end - start;
    this.#load.set(worker, this.#load.get(worker)! + bytes);
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, { bytes, worker, resolve, reject });
      worker.postMessage({ id, file, start, end, blockSize } satisfies ReadRequest);
    });
  }

  #settle(reply: ReadReply): void {
    const waiting = this.#waiting.get(reply.id);
    if (!waiting) return;
    this.#waiting.delete(reply.id);
    this.#load.set(waiting.worker, this.#load.get(waiting.worker)! - waiting.bytes);
    if (!reply.ok) waiting.reject(Object.assign(new Error(reply.error.message), { name: reply.error.name }));
    else waiting.resolve({ bytes: new Uint8Array(reply.buffer), ...(reply.sums ? { sums: reply.sums } : {}) });
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
