import { Worker } from "node:worker_threads";

/**
 * Touches one byte per page with an atomic `or 0` (a write that changes nothing, so it is safe
 * on memory another thread uses): the kernel then maps every page, and nobody pays for it later.
 */
const TOUCH = `
const { parentPort } = require("node:worker_threads");
parentPort.on("message", ({ id, buffers, page }) => {
  for (const buffer of buffers) {
    const view = new Uint8Array(buffer);
    for (let at = 0; at < view.length; at += page) Atomics.or(view, at, 0);
  }
  parentPort.postMessage(id);
});
`;

/** The smallest page size a kernel uses; touching more often costs little, less often would miss pages. */
const PAGE = 4096;

/**
 * A thread that makes fresh shared memory resident, so the first copy into it runs at memcpy
 * speed instead of taking a page fault every 4 KiB on the calling (training) thread. Spawned on
 * first use; an idle one does not keep the process alive.
 */
class PrefaultThread {
  #worker: Worker | undefined;
  readonly #waiting = new Map<number, { resolve: () => void; reject: (error: unknown) => void }>();
  #next = 0;

  run(buffers: readonly SharedArrayBuffer[]): Promise<void> {
    const worker = this.#spawn();
    const id = this.#next++;
    return new Promise<void>((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject });
      if (this.#waiting.size === 1) worker.ref();
      worker.postMessage({ id, buffers, page: PAGE });
    });
  }

  #spawn(): Worker {
    if (this.#worker) return this.#worker;
    const worker = new Worker(TOUCH, { eval: true });
    worker.on("message", (id: number) => this.#settle(id));
    worker.on("error", (error) => this.#failAll(worker, error));
    worker.on("exit", (code) => this.#failAll(worker, new Error(`the prefault thread exited with code ${code}`)));
    worker.unref();
    this.#worker = worker;
    return worker;
  }

  #settle(id: number, error?: unknown): void {
    const waiting = this.#waiting.get(id);
    this.#waiting.delete(id);
    if (this.#waiting.size === 0) this.#worker?.unref();
    if (error === undefined) waiting?.resolve();
    else waiting?.reject(error);
  }

  #failAll(worker: Worker, error: unknown): void {
    if (this.#worker !== worker) return;
    this.#worker = undefined;
    for (const id of [...this.#waiting.keys()]) this.#settle(id, error);
  }
}

const thread = new PrefaultThread();

/** Makes every page of `buffers` resident, from another thread; resolves once done. */
export function prefault(buffers: readonly Uint8Array[]): Promise<void> {
  const shared = [...new Set(buffers.map((b) => b.buffer))].filter(
    (b): b is SharedArrayBuffer => b instanceof SharedArrayBuffer,
  );
  return shared.length === 0 ? Promise.resolve() : thread.run(shared);
}
