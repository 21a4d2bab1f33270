import { Worker } from "node:worker_threads";
import type { OpenedCheckpoint } from "../storage/checkpoint-location.js";
import { CheckpointError } from "../errors.js";
import { type Leaf, hostDataOf } from "../state/leaf.js";
import type { ProcessGroup } from "../process-group.js";
import type { SaveOptions, SaveResult } from "../save/save-options.js";
import { type FromUploadWorker, type ToUploadWorker, errorFromWire, errorToWire } from "./upload-protocol.js";

/**
 * Loads the worker's module. From built output that is `upload-worker.js`. When Cairn runs
 * from its TypeScript sources (its own tests and tools, under vitest or the tsx CLI) a worker
 * gets no TypeScript loader from its parent, so it registers tsx itself, and resolves packages
 * with the `@cairn/source` condition as the caller does.
 */
const BOOTSTRAP = `
const { parentPort, workerData } = require("node:worker_threads");
(async () => {
  if (workerData.tsx) (await import(workerData.tsx)).register();
  await import(workerData.entry);
})().catch((error) => parentPort.postMessage({ type: "fatal", message: String((error && error.stack) || error) }));
`;

function spawnUploadWorker(): Worker {
  const here = import.meta.url;
  if (!here.endsWith(".ts"))
    return new Worker(BOOTSTRAP, { eval: true, workerData: { entry: new URL("./upload-worker.js", here).href } });
  const execArgv = process.execArgv.some((arg) => arg.includes("@cairn/source"))
    ? process.execArgv
    : [...process.execArgv, "--conditions=@cairn/source"];
  // The ESM entry of tsx's API: its CommonJS one cannot register from a worker whose parent already runs tsx.
  const tsx = import.meta.resolve("tsx/esm/api");
  return new Worker(BOOTSTRAP, {
    eval: true,
    workerData: { entry: new URL("./upload-worker.ts", here).href, tsx },
    execArgv,
  });
}

type Written = Omit<SaveResult, "seconds">;

interface Job {
  readonly group: ProcessGroup;
  readonly resolve: (result: Written) => void;
  readonly reject: (error: unknown) => void;
  readonly cleanup: () => void;
}

function shared(leaf: Leaf): boolean {
  return leaf.kind === "value" || hostDataOf(leaf)?.buffer instanceof SharedArrayBuffer;
}

/**
 * Whether a save can be planned, written and committed by the upload worker: the storage says
 * how another thread opens it, every byte to write is in shared memory (what copy staging
 * produces), so the worker reads the staged buffers in place, and the plan is the default
 * planner's. Tensors held by reference live in tfjs's memory, and a custom planner is an object,
 * both of which only the calling thread can use.
 */
export function canUploadInWorker(leaves: readonly Leaf[], location: OpenedCheckpoint, options: SaveOptions): boolean {
  return location.storage.portable !== undefined && options.planner === undefined && leaves.every(shared);
}

/**
 * The worker thread that plans, writes and commits background saves: one per process, spawned
 * on first use, holding the process open only while it has jobs. Each job runs `planAndCommit`
 * there, on an event loop of its own: every file-system completion of a save then costs the
 * training thread nothing, where on the training thread each one waits for the training loop
 * to yield (once per step). The calling thread keeps the process group; the worker's
 * collectives are forwarded to it, and an abort of the caller's signal aborts the job.
 */
class UploadThread {
  #worker: Worker | undefined;
  /** Resolves once the current worker has loaded its code (or is gone). */
  #ready: Promise<void> = Promise.resolve();
  #markReady: () => void = () => undefined;
  readonly #jobs = new Map<number, Job>();
  #next = 0;

  run(leaves: readonly Leaf[], location: OpenedCheckpoint, options: SaveOptions): Promise<Written> {
    const worker = this.#spawn();
    const job = this.#next++;
    const { group, storage } = location;
    return new Promise<Written>((resolve, reject) => {
      const onAbort = (): void => this.#post({ type: "abort", job });
      options.signal?.addEventListener("abort", onAbort, { once: true });
      this.#jobs.set(job, {
        group,
        resolve,
        reject,
        cleanup: () => options.signal?.removeEventListener("abort", onAbort),
      });
      if (this.#jobs.size === 1) worker.ref();
      this.#post({
        type: "save",
        job,
        storage: storage.portable!,
        dir: location.dir,
        where: location.where,
        rank: group.rank,
        worldSize: group.worldSize,
        leaves,
        options: {
          blockSize: options.blockSize,
          concurrency: options.concurrency,
          retry: options.retry,
          metadata: options.metadata,
          incremental: options.incremental,
        },
      });
      if (options.signal?.aborted) onAbort();
    });
  }

  start(): void {
    this.#spawn();
  }

  /** Resolves once the worker (if one was started) has loaded its code, holding the process open meanwhile. */
  async ready(): Promise<void> {
    const worker = this.#worker;
    if (!worker) return;
    worker.ref();
    try {
      await this.#ready;
    } finally {
      if (this.#jobs.size === 0 && this.#worker === worker) worker.unref();
    }
  }

  #post(message: ToUploadWorker): void {
    this.#worker?.postMessage(message);
  }

  #spawn(): Worker {
    if (this.#worker) return this.#worker;
    const worker = spawnUploadWorker();
    this.#ready = new Promise<void>((resolve) => (this.#markReady = resolve));
    worker.on("message", (message: FromUploadWorker) => this.#receive(message));
    worker.on("error", (error) => this.#failAll(worker, error.message));
    worker.on("exit", (code) => this.#failAll(worker, `it exited with code ${code}`));
    worker.unref();
    this.#worker = worker;
    return worker;
  }

  #receive(message: FromUploadWorker): void {
    if (message.type === "ready") {
      this.#markReady();
      return;
    }
    if (message.type === "fatal") {
      const worker = this.#worker;
      if (worker) {
        this.#failAll(worker, message.message);
        void worker.terminate();
      }
      return;
    }
    const job = this.#jobs.get(message.job);
    if (!job) return;
    if (message.type === "collective") {
      void this.#collective(job.group, message);
      return;
    }
    this.#finish(message.job);
    if (message.type === "done") job.resolve(message.result);
    else job.reject(errorFromWire(message.error));
  }

  async #collective(group: ProcessGroup, message: Extract<FromUploadWorker, { type: "collective" }>): Promise<void> {
    try {
      const value =
        message.op === "allGather"
          ? await group.allGather(message.value)
          : message.op === "broadcast"
            ? await group.broadcast(message.value, message.root)
            : await group.barrier();
      this.#post({ type: "collective", call: message.call, ok: true, value });
    } catch (error) {
      this.#post({ type: "collective", call: message.call, ok: false, error: errorToWire(error) });
    }
  }

  #finish(job: number): void {
    this.#jobs.get(job)?.cleanup();
    this.#jobs.delete(job);
    if (this.#jobs.size === 0) this.#worker?.unref();
  }

  /** The worker is gone or unusable: its jobs fail (their files are left to the manager's leftover cleanup), and the next job spawns a new one. */
  #failAll(worker: Worker, why: string): void {
    if (this.#worker !== worker) return;
    this.#worker = undefined;
    this.#markReady();
    for (const [id, job] of [...this.#jobs]) {
      this.#finish(id);
      job.reject(
        new CheckpointError(
          "storage",
          `the upload worker thread failed (${why}); nothing was committed. Pass uploadWorker: false to write from the calling thread`,
        ),
      );
    }
  }
}

const uploads = new UploadThread();

/**
 * Starts the upload worker thread ahead of the first background save, so that save does not
 * wait for the thread to load its code (a manager calls it when constructed for such saves).
 * Idempotent; an idle worker does not keep the process alive.
 */
export function startUploadWorker(): void {
  uploads.start();
}

/** Resolves once a started upload worker has loaded its code (or failed: the first job reports that); at once if none was started. */
export function uploadWorkerReady(): Promise<void> {
  return uploads.ready();
}

/** `planAndCommit`, run on the upload worker thread; call only when `canUploadInWorker` says so. */
export function uploadInWorker(
  leaves: readonly Leaf[],
  location: OpenedCheckpoint,
  options: SaveOptions,
): Promise<Written> {
  return uploads.run(leaves, location, options);
}
