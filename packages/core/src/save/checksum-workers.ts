import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { Worker, isMainThread } from "node:worker_threads";
import { crc32c } from "../format/crc32c.js";

/**
 * The worker is plain CommonJS evaluated from a string, so it runs the same under vitest, tsx
 * and built output; it loads @node-rs/crc32 from the path the main thread resolved.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const { crc32c } = require(workerData.crc32);
parentPort.on("message", ({ id, parts, regions }) => {
  if (regions) {
    const { buffer, starts, lengths, blockSizes, count } = regions;
    const bytes = Buffer.from(buffer);
    const sums = new Uint32Array(count);
    let n = 0;
    for (let i = 0; i < starts.length; i++) {
      const start = starts[i], end = start + lengths[i], blockSize = blockSizes[i];
      for (let at = start; at < end; at += blockSize) sums[n++] = crc32c(bytes.subarray(at, Math.min(at + blockSize, end))) >>> 0;
    }
    parentPort.postMessage({ id, sums }, [sums.buffer]);
    return;
  }
  const sums = parts.map(({ buffer, offset, length, blockSize }) => {
    const bytes = Buffer.from(buffer, offset, length);
    const out = new Array(Math.ceil(length / blockSize));
    for (let b = 0; b < out.length; b++) out[b] = crc32c(bytes.subarray(b * blockSize, Math.min((b + 1) * blockSize, length))) >>> 0;
    return out;
  });
  parentPort.postMessage({ id, sums });
});
`;

/**
 * Checksumming of bytes not in shared memory yields to the event loop after this many bytes:
 * about 2.5 ms of work, short enough not to stall training, long enough that a background save
 * progresses even when the training loop lets the event loop run only once per step.
 */
const SLICE_BYTES = 16 << 20;

interface Job {
  readonly worker: Worker;
  readonly resolve: (sums: never) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * CRC32C of each block of a buffer, off the training thread where possible. On the main
 * thread, bytes in a SharedArrayBuffer (what staging copies into) are hashed by worker threads
 * without being copied; other bytes, and every byte on a worker thread, are hashed on the
 * calling thread in slices of a few MiB between which the event loop runs, so no save ever
 * holds the main thread for long.
 */
class ChecksumWorkers {
  #workers: Worker[] = [];
  readonly #jobs = new Map<number, Job>();
  readonly #busy = new Map<Worker, number>();
  #next = 0;
  #turn = 0;

  #spawn(): Worker[] {
    if (this.#workers.length > 0) return this.#workers;
    const count = Math.max(1, Math.min(4, availableParallelism() - 1));
    const crc32 = createRequire(import.meta.url).resolve("@node-rs/crc32");
    for (let i = 0; i < count; i++) {
      const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { crc32 } });
      // Idle workers must not keep a finished program alive; busy ones must (see #track).
      worker.unref();
      worker.on("message", ({ id, sums }: { id: number; sums: number[][] | Uint32Array }) => {
        const job = this.#jobs.get(id);
        this.#jobs.delete(id);
        if (job) this.#track(job.worker, -1);
        job?.resolve(sums as never);
      });
      worker.on("error", (error) => this.#failAll(error));
      worker.on("exit", () => {
        this.#workers = this.#workers.filter((w) => w !== worker);
      });
      this.#workers.push(worker);
    }
    return this.#workers;
  }

  /** Refs a worker while it has jobs, so a program awaiting only checksums does not exit early. */
  #track(worker: Worker, delta: number): void {
    const busy = (this.#busy.get(worker) ?? 0) + delta;
    this.#busy.set(worker, busy);
    if (busy === 1 && delta === 1) worker.ref();
    if (busy === 0) worker.unref();
  }

  #failAll(error: unknown): void {
    for (const job of this.#jobs.values()) {
      this.#track(job.worker, -1);
      job.reject(error);
    }
    this.#jobs.clear();
  }

  /**
   * The block checksums of many regions of one shared memory (region i: `lengths[i]` bytes from
   * `starts[i]`, in blocks of `blockSizes[i]`), all in one worker round trip with no object per
   * region: every region's sums in order, `ceil(length / blockSize)` each.
   */
  regionChecksums(
    memory: SharedArrayBuffer,
    starts: Float64Array,
    lengths: Float64Array,
    blockSizes: Float64Array,
  ): Promise<Uint32Array> {
    let count = 0;
    for (let i = 0; i < starts.length; i++) count += Math.ceil(lengths[i]! / blockSizes[i]!);
    const workers = this.#spawn();
    const worker = workers[this.#turn++ % workers.length]!;
    const id = this.#next++;
    return new Promise<Uint32Array>((resolve, reject) => {
      this.#jobs.set(id, { worker, resolve: resolve as (sums: never) => void, reject });
      this.#track(worker, 1);
      worker.postMessage({ id, regions: { buffer: memory, starts, lengths, blockSizes, count } }, [
        starts.buffer as ArrayBuffer,
        lengths.buffer as ArrayBuffer,
        blockSizes.buffer as ArrayBuffer,
      ]);
    });
  }

  /**
   * The block checksums of several buffers, each with its own block size. When all are in shared memory, one worker hashes
   * them in one round trip (a background save makes as few event-loop round trips as it can,
   * since a busy training loop may grant it only one per step).
   */
  async blockChecksums(parts: readonly Uint8Array[], blockSizes: readonly number[]): Promise<number[][]> {
    // Off the main thread (the upload worker) hashing in place costs the training loop nothing.
    const shared = isMainThread && parts.every((p) => p.buffer instanceof SharedArrayBuffer);
    if (shared && parts.some((p) => p.byteLength > 0)) {
      const workers = this.#spawn();
      const worker = workers[this.#turn++ % workers.length]!;
      const id = this.#next++;
      return new Promise<number[][]>((resolve, reject) => {
        this.#jobs.set(id, { worker, resolve: resolve as (sums: never) => void, reject });
        this.#track(worker, 1);
        worker.postMessage({
          id,
          parts: parts.map((p, i) => ({
            buffer: p.buffer,
            offset: p.byteOffset,
            length: p.byteLength,
            blockSize: blockSizes[i],
          })),
        });
      });
    }
    const all: number[][] = [];
    let sinceYield = 0;
    for (const [i, bytes] of parts.entries()) {
      const blockSize = blockSizes[i]!;
      const sums: number[] = [];
      for (let start = 0; start < bytes.byteLength; start += blockSize) {
        const end = Math.min(start + blockSize, bytes.byteLength);
        // A buffer of one block is hashed as it is: a view per 1 KiB tensor costs more than its hash.
        sums.push(crc32c(start === 0 && end === bytes.byteLength ? bytes : bytes.subarray(start, end)));
        sinceYield += end - start;
        if (sinceYield >= SLICE_BYTES) {
          sinceYield = 0;
          await new Promise((r) => setImmediate(r));
        }
      }
      all.push(sums);
    }
    return all;
  }
}

const workers = new ChecksumWorkers();

/** CRC32C of each `blockSizes[i]` block of each buffer `parts[i]`, off the calling thread where the bytes are shared. */
export function blockChecksumsAsync(parts: readonly Uint8Array[], blockSizes: readonly number[]): Promise<number[][]> {
  return workers.blockChecksums(parts, blockSizes);
}

/** `ChecksumWorkers.regionChecksums`: many regions of one shared memory hashed on a worker thread in one round trip. */
export function regionChecksumsAsync(
  memory: SharedArrayBuffer,
  starts: Float64Array,
  lengths: Float64Array,
  blockSizes: Float64Array,
): Promise<Uint32Array> {
  return workers.regionChecksums(memory, starts, lengths, blockSizes);
}
