// The upload worker's entry (see upload-thread.ts): writes a rank's data files from shared
// memory and commits, on this thread's own event loop, so a training loop that yields once per
// step does not pace the save. Collectives are forwarded to the thread that owns the group.
import { readFileSync } from "node:fs";
import { setPriority } from "node:os";
import { parentPort } from "node:worker_threads";
import type { OpenedCheckpoint } from "../storage/checkpoint-location.js";
import { CheckpointError } from "../errors.js";
import { type ProcessGroup, SingleProcessGroup } from "../process-group.js";
import { planAndCommit } from "../save/save.js";
import { DEFAULT_BLOCK_SIZE } from "../format/metadata.js";
import { withStagingSums } from "./staging-sums.js";
import type { PortableStorage, StorageAdapter } from "../storage/storage-adapter.js";
import {
  type FromUploadWorker,
  type ToUploadWorker,
  type UploadJob,
  errorFromWire,
  errorToWire,
} from "./upload-protocol.js";

const port = parentPort;
if (!port) throw new Error("upload-worker.ts runs only as a worker thread");

/**
 * Nice 19 for this thread alone (Linux nice values are per thread; its id is the first field of
 * /proc/thread-self/stat), so where cores are few the training thread wins every contest for a
 * core. Elsewhere the thread keeps its priority.
 */
function yieldToTraining(): void {
  try {
    setPriority(Number(readFileSync("/proc/thread-self/stat", "utf8").split(" ", 1)[0]), 19);
  } catch {
    // No /proc (not Linux), or setpriority refused: nothing to gain that is worth failing a save for.
  }
}
yieldToTraining();

const aborts = new Map<number, AbortController>();
const calls = new Map<number, { resolve: (value: unknown) => void; reject: (error: unknown) => void }>();
let nextCall = 0;

function send(message: FromUploadWorker): void {
  port!.postMessage(message);
}

/** The main thread's group for one job, reached by messages. */
class ForwardedGroup implements ProcessGroup {
  readonly #job: number;
  readonly rank: number;
  readonly worldSize: number;

  constructor(job: number, rank: number, worldSize: number) {
    this.#job = job;
    this.rank = rank;
    this.worldSize = worldSize;
  }

  allGather<T>(value: T): Promise<T[]> {
    return this.#call("allGather", value) as Promise<T[]>;
  }

  broadcast<T>(value: T | undefined, root = 0): Promise<T> {
    return this.#call("broadcast", value, root) as Promise<T>;
  }

  async barrier(): Promise<void> {
    await this.#call("barrier");
  }

  #call(op: "allGather" | "broadcast" | "barrier", value?: unknown, root?: number): Promise<unknown> {
    const call = nextCall++;
    return new Promise((resolve, reject) => {
      calls.set(call, { resolve, reject });
      send({ type: "collective", job: this.#job, call, op, value, root });
    });
  }
}

async function openPortable(portable: PortableStorage): Promise<StorageAdapter> {
  const factory = ((await import(portable.module)) as Record<string, unknown>)[portable.factory];
  if (typeof factory !== "function") {
    throw new CheckpointError(
      "storage",
      `${portable.module} has no export ${portable.factory}, which the adapter named to open ${portable.url} in a worker thread`,
    );
  }
  return (factory as (url: URL) => StorageAdapter | Promise<StorageAdapter>)(new URL(portable.url));
}

async function run(job: UploadJob): Promise<void> {
  const controller = new AbortController();
  aborts.set(job.job, controller);
  let storage: StorageAdapter | undefined;
  let reply: FromUploadWorker;
  try {
    storage = await openPortable(job.storage);
    const group = job.worldSize === 1 ? new SingleProcessGroup() : new ForwardedGroup(job.job, job.rank, job.worldSize);
    const location: OpenedCheckpoint = {
      storage,
      dir: job.dir,
      where: job.where,
      group,
      release: async () => undefined,
    };
    // The copies' sums, taken here as the job arrives unless the calling thread took them (see withStagingSums).
    const leaves = await withStagingSums(job.leaves, job.options.blockSize ?? DEFAULT_BLOCK_SIZE);
    const result = await planAndCommit(leaves, location, { ...job.options, signal: controller.signal });
    reply = { type: "done", job: job.job, result };
  } catch (error) {
    reply = { type: "failed", job: job.job, error: errorToWire(error) };
  }
  aborts.delete(job.job);
  await storage?.close().catch(() => undefined);
  send(reply);
}

port.on("message", (message: ToUploadWorker) => {
  if (message.type === "save") {
    void run(message);
  } else if (message.type === "abort") {
    aborts.get(message.job)?.abort(new Error("aborted by the caller"));
  } else {
    const pending = calls.get(message.call);
    calls.delete(message.call);
    if (message.ok) pending?.resolve(message.value);
    else pending?.reject(errorFromWire(message.error));
  }
});
send({ type: "ready" });
