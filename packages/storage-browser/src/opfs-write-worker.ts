// The Web Worker that writes OPFS files through sync access handles (allowed only in workers; they
// write straight to the file, with no swap file to copy at close as createWritable has). Its code
// is this module's `workerMain`, run from a Blob URL: self-contained, so any bundler ships it as is.

/** Messages to the worker: open a file handle, write bytes at the end, close (flushed) or abort. */
type ToWorker =
  | { readonly id: number; readonly op: "open"; readonly file: number; readonly handle: FileSystemFileHandle }
  | { readonly id: number; readonly op: "write"; readonly file: number; readonly bytes: Uint8Array }
  | { readonly id: number; readonly op: "close" | "abort"; readonly file: number };

type FromWorker =
  | { readonly id: number; readonly ok: true }
  | { readonly id: number; readonly ok: false; readonly error: { name: string; message: string } };

/** Runs in the worker. Files are written in order per file; every message is answered once. */
function workerMain(): void {
  interface SyncHandle {
    write(bytes: Uint8Array, options: { at: number }): number;
    flush(): void;
    close(): void;
    truncate(size: number): void;
  }
  const open = new Map<number, { handle: SyncHandle; at: number }>();
  const scope = self as unknown as {
    onmessage: ((event: { data: ToWorker }) => void) | null;
    postMessage(message: FromWorker): void;
  };
  const run = async (message: ToWorker): Promise<void> => {
    if (message.op === "open") {
      const file = message.handle as unknown as { createSyncAccessHandle?: () => Promise<SyncHandle> };
      if (typeof file.createSyncAccessHandle !== "function")
        throw Object.assign(new Error("no sync access handles here"), { name: "NotSupportedError" });
      const handle = await file.createSyncAccessHandle();
      handle.truncate(0);
      open.set(message.file, { handle, at: 0 });
      return;
    }
    const state = open.get(message.file);
    if (!state) return;
    if (message.op === "write") {
      const bytes = message.bytes;
      for (let done = 0; done < bytes.byteLength;) {
        const n = state.handle.write(bytes.subarray(done), { at: state.at });
        if (n <= 0) throw Object.assign(new Error("the file took no bytes"), { name: "QuotaExceededError" });
        done += n;
        state.at += n;
      }
      return;
    }
    open.delete(message.file);
    try {
      if (message.op === "close") state.handle.flush();
    } finally {
      state.handle.close();
    }
  };
  let queue: Promise<void> = Promise.resolve();
  scope.onmessage = (event) => {
    const message = event.data;
    queue = queue.then(() =>
      run(message).then(
        () => scope.postMessage({ id: message.id, ok: true }),
        (error: { name?: string; message?: string }) =>
          scope.postMessage({
            id: message.id,
            ok: false,
            error: { name: String(error?.name ?? "Error"), message: String(error?.message ?? error) },
          }),
      ),
    );
  };
}

/** A DOMException-like error from the worker, with the name the error mapping reads. */
function workerError(error: { name: string; message: string }): Error {
  return Object.assign(new Error(error.message), { name: error.name });
}

/** The page's side of the write worker: one per page, spawned on first use. */
export class OpfsWriteWorker {
  readonly #worker: Worker;
  readonly #waiting = new Map<number, { resolve: () => void; reject: (error: unknown) => void }>();
  #next = 0;
  #files = 0;

  private constructor(worker: Worker) {
    this.#worker = worker;
    worker.onmessage = (event: MessageEvent<FromWorker>) => {
      const reply = event.data;
      const waiting = this.#waiting.get(reply.id);
      this.#waiting.delete(reply.id);
      if (reply.ok) waiting?.resolve();
      else waiting?.reject(workerError(reply.error));
    };
    worker.onerror = (event) => this.#failAll(new Error(`the OPFS write worker failed: ${event.message}`));
  }

  static #shared: Promise<OpfsWriteWorker | undefined> | undefined;

  /**
   * The page's write worker, or undefined where there is none to be had (no Worker, a CSP that
   * refuses blob: workers, no sync access handles): writes then go through createWritable.
   */
  static shared(probe: FileSystemFileHandle): Promise<OpfsWriteWorker | undefined> {
    return (OpfsWriteWorker.#shared ??= OpfsWriteWorker.#spawn(probe));
  }

  static async #spawn(probe: FileSystemFileHandle): Promise<OpfsWriteWorker | undefined> {
    if (typeof Worker !== "function") return undefined;
    let writer: OpfsWriteWorker;
    try {
      const source = `(${workerMain.toString()})();`;
      const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
      writer = new OpfsWriteWorker(new Worker(url, { name: "cairn-opfs-writer" }));
      URL.revokeObjectURL(url);
    } catch {
      return undefined;
    }
    const file = writer.open(probe);
    try {
      await file.opened;
      await file.close();
      return writer;
    } catch {
      writer.#worker.terminate();
      return undefined;
    }
  }

  #call(message: Omit<ToWorker, "id">, transfer: Transferable[] = []): Promise<void> {
    const id = this.#next++;
    return new Promise<void>((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject });
      this.#worker.postMessage({ ...message, id }, transfer);
    });
  }

  #failAll(error: Error): void {
    for (const waiting of this.#waiting.values()) waiting.reject(error);
    this.#waiting.clear();
  }

  /** Opens `handle` for writing from its start (it is truncated). */
  open(handle: FileSystemFileHandle): OpfsWorkerFile {
    const file = this.#files++;
    const opened = this.#call({ op: "open", file, handle } as Omit<ToWorker, "id">);
    return {
      opened,
      // The worker gets its own copy, transferred: the caller's bytes stay usable at once.
      write: (bytes) => {
        const copy = bytes.slice();
        return this.#call({ op: "write", file, bytes: copy } as Omit<ToWorker, "id">, [copy.buffer]);
      },
      close: () => this.#call({ op: "close", file } as Omit<ToWorker, "id">),
      abort: () => this.#call({ op: "abort", file } as Omit<ToWorker, "id">),
    };
  }
}

/** One file being written by the worker; calls are queued in order there. */
export interface OpfsWorkerFile {
  readonly opened: Promise<void>;
  write(bytes: Uint8Array): Promise<void>;
  close(): Promise<void>;
  abort(): Promise<void>;
}
