import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { Worker, isMainThread } from "node:worker_threads";
import { CheckpointError } from "../errors.js";
import { CRC32C_WORKER_MODULE, CRC32C_WORKER_REGIONS } from "../format/crc32c.js";
import {
  type BlockChecksums,
  type RegionChecksums,
  type RegionPieces,
  checksumsHere,
  contentHashingOn,
  hexDigests,
} from "./checksums-here.js";

export {
  type BlockChecksums,
  type RegionChecksums,
  type RegionPieces,
  hexDigests,
  setContentHashing,
} from "./checksums-here.js";

/**
 * The worker is plain CommonJS evaluated from a string, so it runs the same under vitest, tsx
 * and built output; it loads the calling thread's CRC32C module (@cairn/crc32c-native, else
 * @node-rs/crc32) and XXH3-128 from the paths the main thread resolved: the addon's
 * `regionChecksums` for whole chunks where the main thread trusted it; xxhash-addon and hash-wasm
 * (small inputs, and where xxhash-addon does not load) otherwise and for chunks hashed in pieces.
 * Each chunk's blocks are CRC'd and fed to its XXH3-128 one block at a time, so each byte is read from memory once.
 */
/**
 * Inputs up to this size are hashed by the WebAssembly XXH3-128 even where the native one loads:
 * a native call costs about 1 µs for a 1 KiB chunk (most of it making the digest's Buffer), the
 * WebAssembly one 0.4 µs through `lean` (0.75 through hash-wasm's wrapper); from about 3–4 KiB the
 * native one's AVX2 wins (18 against 4.3 GB/s). docs/benchmarks.md, "Content hashes".
 */
const WASM_BELOW = 2048;

/** The largest input the lean WebAssembly path takes: hash-wasm's input buffer holds 16 KiB. */
const LEAN_MAX = 4096;

export const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const kernel = require(workerData.crc32);
const { crc32c } = kernel;
/**
 * @cairn/crc32c-native's CRC32Cs and XXH3-128s of many whole chunks in one call (about 0.06 µs of
 * XXH3 a 1 KiB chunk, against 0.45 µs a call to the WebAssembly), where the main thread trusted it.
 */
const native = workerData.regions ? kernel.regionChecksums : undefined;
/**
 * A one-shot XXH3-128 of inputs up to ${LEAN_MAX} bytes that calls hash-wasm's WebAssembly exports
 * directly: its wrapper's init/update/digest make two views and a new ArrayBuffer per digest, half
 * the cost of hashing 1 KiB. Its module comes from the build's embedded base64 (the package ships
 * no .wasm file); used only if it gives the wrapper's digests on every XXH3 length class, else undefined.
 */
function lean(wrapper) {
  try {
    const text = require("node:fs").readFileSync(workerData.hashWasm, "utf8");
    const wasm = Buffer.from(/data:"([A-Za-z0-9+/]+={0,2})"/.exec(text)[1], "base64");
    const { exports: e } = new WebAssembly.Instance(new WebAssembly.Module(wasm), {});
    const at = e.Hash_GetBuffer();
    let memory, seed;
    const views = () => {
      memory = new Uint8Array(e.memory.buffer, at, ${LEAN_MAX});
      seed = new Uint32Array(e.memory.buffer, at, 2);
    };
    views();
    const one = (bytes, out, to) => {
      if (memory.byteLength === 0) views(); // the memory grew, which detaches views of it
      seed[0] = 0; // Hash_Init reads the 64-bit seed from the input buffer
      seed[1] = 0;
      e.Hash_Init();
      memory.set(bytes);
      e.Hash_Update(bytes.length);
      e.Hash_Final();
      for (let i = 0; i < 16; i++) out[to + i] = memory[i];
    };
    const probe = new Uint8Array(${LEAN_MAX}).map((_, i) => (i * 167 + 13) & 255);
    const mine = new Uint8Array(16);
    const theirs = new Uint8Array(16);
    for (const n of [0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1000, 1024, 1025, ${LEAN_MAX}]) {
      one(probe.subarray(0, n), mine, 0);
      wrapper(probe.subarray(0, n), theirs, 0);
      if (!mine.every((b, i) => b === theirs[i])) return undefined;
    }
    return one;
  } catch {
    return undefined;
  }
}
const hasher = (async () => {
  // hash-wasm's WebAssembly: the fallback, and faster than a native call for small inputs (no Buffer per digest).
  const h = await require(workerData.hashWasm).createXXHash128();
  const wrapped = (bytes, out, at) => { h.init(); h.update(bytes); out.set(h.digest("binary"), at); };
  const small = workerData.lean === false ? undefined : lean(wrapped);
  const wasm = {
    lean: small !== undefined,
    one: (bytes, out, at) => (small && bytes.length <= ${LEAN_MAX} ? small(bytes, out, at) : wrapped(bytes, out, at)),
    begin: () => h.init(),
    update: (bytes) => h.update(bytes),
    end: (out, at) => out.set(h.digest("binary"), at),
    // A chunk hashed over several messages: its state saved between them (one WebAssembly instance serves all).
    open: () => {
      let state;
      const resume = () => (state ? h.load(state) : h.init());
      return {
        update: (bytes) => { resume(); h.update(bytes); state = h.save(); },
        end: (out, at) => { resume(); out.set(h.digest("binary"), at); },
      };
    },
  };
  try {
    const { XXHash128 } = require(workerData.xxhashAddon);
    const seed = new Uint8Array(8);
    const state = new XXHash128(seed);
    XXHash128.hash(seed);
    return {
      lean: wasm.lean,
      one: (bytes, out, at) => (bytes.length <= ${WASM_BELOW} ? wasm.one(bytes, out, at) : out.set(XXHash128.hash(bytes), at)),
      begin: () => state.reset(),
      update: (bytes) => state.update(bytes),
      end: (out, at) => out.set(state.digest(), at),
      open: () => {
        const own = new XXHash128(seed);
        return { update: (bytes) => own.update(bytes), end: (out, at) => out.set(own.digest(), at) };
      },
    };
  } catch {
    return wasm;
  }
})();
/** CRC32C of each block of bytes[start, end) into sums from n, its XXH3-128 into hashes at 16 * k (if hashes); the next n. */
function region(xxh, bytes, start, end, blockSize, sums, n, hashes, k) {
  if (end - start <= blockSize) {
    const all = bytes.subarray(start, end);
    if (end > start) sums[n++] = crc32c(all) >>> 0;
    if (hashes) xxh.one(all, hashes, 16 * k);
    return n;
  }
  if (hashes) xxh.begin();
  for (let at = start; at < end; at += blockSize) {
    const block = bytes.subarray(at, Math.min(at + blockSize, end));
    sums[n++] = crc32c(block) >>> 0;
    if (hashes) xxh.update(block);
  }
  if (hashes) xxh.end(hashes, 16 * k);
  return n;
}
/** Chunks hashed piece by piece over several messages (always sent to this same worker), by stream id. */
const streams = new Map();
/** As region, for a piece of a chunk: flags 1 = its first piece (a new stream), 2 = its last (the digest into hashes at 16 * k). */
function piece(xxh, bytes, start, end, blockSize, sums, n, hashes, k, id, flags) {
  if (flags & 1) streams.set(id, hashes ? xxh.open() : null);
  if (!streams.has(id)) throw new Error("piece of an unknown stream " + id);
  const stream = streams.get(id);
  for (let at = start; at < end; at += blockSize) {
    const block = bytes.subarray(at, Math.min(at + blockSize, end));
    sums[n++] = crc32c(block) >>> 0;
    if (stream) stream.update(block);
  }
  if (flags & 2) {
    if (stream) stream.end(hashes, 16 * k);
    streams.delete(id);
  }
  return n;
}
parentPort.on("message", async ({ id, parts, regions, withHashes, info }) => {
  try {
    await answer(id, parts, regions, withHashes, info);
  } catch (error) {
    // This job fails alone: the worker keeps serving the others, and drops the hash state of
    // every chunk this message carried a piece of (its later pieces then fail as unknown).
    if (regions && regions.streamIds) for (const s of regions.streamIds) if (s > 0) streams.delete(s);
    parentPort.postMessage({ id, failed: String((error && error.stack) || error) });
  }
});
async function answer(id, parts, regions, withHashes, info) {
  const xxh = await hasher;
  // Which XXH3 paths this worker took (for tests): lean = small inputs through lean(), native = whole chunks through the addon.
  if (info) return parentPort.postMessage({ id, lean: xxh.lean, native: native !== undefined });
  if (regions) {
    const { buffer, starts, lengths, blockSizes, count, streamIds, flags } = regions;
    const bytes = Buffer.from(buffer);
    const sums = new Uint32Array(count);
    const hashes = withHashes ? new Uint8Array(16 * starts.length) : undefined;
    let n = 0;
    const isPiece = (r) => streamIds !== undefined && streamIds[r] > 0;
    for (let i = 0; i < starts.length; ) {
      if (native && !isPiece(i)) {
        // A run of whole chunks: one native call.
        let j = i + 1;
        while (j < starts.length && !isPiece(j)) j++;
        const h = hashes && hashes.subarray(16 * i, 16 * j);
        n += native(bytes, starts.subarray(i, j), lengths.subarray(i, j), blockSizes.subarray(i, j), sums.subarray(n), h);
        i = j;
        continue;
      }
      const end = starts[i] + lengths[i];
      n = isPiece(i)
        ? piece(xxh, bytes, starts[i], end, blockSizes[i], sums, n, hashes, i, streamIds[i], flags[i])
        : region(xxh, bytes, starts[i], end, blockSizes[i], sums, n, hashes, i);
      i++;
    }
    parentPort.postMessage({ id, sums, hashes }, hashes ? [sums.buffer, hashes.buffer] : [sums.buffer]);
    return;
  }
  const hashes = withHashes ? new Uint8Array(16 * parts.length) : undefined;
  const sums = native
    ? partsNatively(parts, hashes)
    : parts.map(({ buffer, offset, length, blockSize }, k) => {
        const out = new Array(Math.ceil(length / blockSize));
        region(xxh, Buffer.from(buffer, offset, length), 0, length, blockSize, out, 0, hashes, k);
        return out;
      });
  parentPort.postMessage({ id, sums, hashes }, hashes ? [hashes.buffer] : []);
}
/** Each part's block sums (and its XXH3-128 into hashes): one native call for each run of parts of the same memory. */
function partsNatively(parts, hashes) {
  const sums = new Array(parts.length);
  for (let i = 0; i < parts.length; ) {
    let j = i + 1;
    while (j < parts.length && parts[j].buffer === parts[i].buffer) j++;
    const run = parts.slice(i, j);
    const counts = run.map((p) => Math.ceil(p.length / p.blockSize));
    const flat = new Uint32Array(counts.reduce((a, b) => a + b, 0));
    const field = (name) => Float64Array.from(run, (p) => p[name]);
    native(new Uint8Array(parts[i].buffer), field("offset"), field("length"), field("blockSize"), flat, hashes && hashes.subarray(16 * i, 16 * j));
    for (let k = 0, at = 0; k < run.length; at += counts[k++]) sums[i + k] = Array.from(flat.subarray(at, at + counts[k]));
    i = j;
  }
  return sums;
}
`;

/**
 * Checksumming of bytes not in shared memory yields to the event loop after this many bytes:
 * about 2.5 ms of work, short enough not to stall training, long enough that a background save
 * progresses even when the training loop lets the event loop run only once per step.
 */
const SLICE_BYTES = 16 << 20;

/** Where the worker loads its modules from (the main thread resolves them; the worker only requires paths). */
export function workerModules(): { crc32: string; regions: boolean; hashWasm: string; xxhashAddon?: string } {
  const require = createRequire(import.meta.url);
  const crc32 = CRC32C_WORKER_MODULE;
  const regions = CRC32C_WORKER_REGIONS;
  // The one algorithm's build (20 KB), not the package's index, which holds every hash-wasm binary.
  const hashWasm = require.resolve("hash-wasm/dist/xxhash128.umd.min.js");
  try {
    return { crc32, regions, hashWasm, xxhashAddon: require.resolve("xxhash-addon") };
  } catch {
    // An optional dependency: where it did not install, the workers use hash-wasm.
    return { crc32, regions, hashWasm };
  }
}

interface Job {
  readonly worker: Worker;
  readonly resolve: (result: never) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * CRC32C of each block of a buffer and XXH3-128 of the whole, in one pass, off the training
 * thread where possible. On the main thread, bytes in a SharedArrayBuffer (what staging copies
 * into) are hashed by worker threads without being copied; other bytes, and every byte on a
 * worker thread, are hashed on the calling thread in slices of a few MiB between which the
 * event loop runs, so no save ever holds the main thread for long.
 */
class ChecksumWorkers {
  #workers: Worker[] = [];
  readonly #jobs = new Map<number, Job>();
  readonly #busy = new Map<Worker, number>();
  #next = 0;
  #turn = 0;
  /** How many workers the pool keeps: asked of the system once, not at every job. */
  #count: number | undefined;

  /** Starts the workers now (each loads its modules, about 50 ms), if they are not running. */
  start(): void {
    this.#spawn();
  }

  /** The workers, topped up to their count: one that died is replaced at the next job. */
  #spawn(): Worker[] {
    const count = (this.#count ??= Math.max(1, Math.min(4, availableParallelism() - 1)));
    if (this.#workers.length >= count) return this.#workers;
    const workerData = workerModules();
    while (this.#workers.length < count) {
      const worker = new Worker(WORKER_SOURCE, { eval: true, workerData });
      // Idle workers must not keep a finished program alive; busy ones must (see #track).
      worker.unref();
      worker.on("message", (result: { id: number; failed?: string }) => {
        const job = this.#jobs.get(result.id);
        if (!job) return;
        this.#jobs.delete(result.id);
        this.#track(job.worker, -1);
        if (result.failed === undefined) job.resolve(result as never);
        else job.reject(workerFailure(result.failed));
      });
      // A worker that dies fails its own jobs, not the other workers'.
      worker.on("error", (error) => this.#retire(worker, error));
      worker.on("exit", (code) => this.#retire(worker, `exited with code ${code}`));
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

  /** Takes a dead worker out of the pool and fails the jobs it held (an exit after an error finds none left). */
  #retire(worker: Worker, why: unknown): void {
    this.#workers = this.#workers.filter((w) => w !== worker);
    this.#busy.delete(worker);
    for (const [id, job] of this.#jobs) {
      if (job.worker !== worker) continue;
      this.#jobs.delete(id);
      job.reject(workerFailure(why));
    }
  }

  /** Posts to the next worker in turn, or with `affinity` always to the same one (a chunk hashed over several messages). */
  #post<T>(message: Record<string, unknown>, transfer: ArrayBuffer[], affinity?: number): Promise<T> {
    const workers = this.#spawn();
    const worker = workers[(affinity ?? this.#turn++) % workers.length]!;
    const id = this.#next++;
    return new Promise<T>((resolve, reject) => {
      this.#jobs.set(id, { worker, resolve: resolve as (result: never) => void, reject });
      this.#track(worker, 1);
      worker.postMessage({ id, ...message }, transfer);
    });
  }

  /**
   * The block checksums of many regions of one shared memory (region i: `lengths[i]` bytes from
   * `starts[i]`, in blocks of `blockSizes[i]`), all in one worker round trip with no object per
   * region: every region's sums in order, `ceil(length / blockSize)` each, and with `withHashes`
   * each region's XXH3-128. With `pieces`, regions may be pieces of chunks hashed over several
   * calls (`RegionPieces`).
   */
  async regionChecksums(
    memory: SharedArrayBuffer,
    starts: Float64Array,
    lengths: Float64Array,
    blockSizes: Float64Array,
    withHashes: boolean,
    pieces?: RegionPieces,
  ): Promise<RegionChecksums> {
    let count = 0;
    for (let i = 0; i < starts.length; i++) count += Math.ceil(lengths[i]! / blockSizes[i]!);
    const transfer = [starts.buffer as ArrayBuffer, lengths.buffer as ArrayBuffer, blockSizes.buffer as ArrayBuffer];
    if (pieces) transfer.push(pieces.streamIds.buffer as ArrayBuffer, pieces.flags.buffer as ArrayBuffer);
    const regions = { buffer: memory, starts, lengths, blockSizes, count };
    const { sums, hashes } = await this.#post<{ sums: Uint32Array; hashes?: Uint8Array }>(
      { regions: pieces ? { ...regions, streamIds: pieces.streamIds, flags: pieces.flags } : regions, withHashes },
      transfer,
      pieces?.affinity,
    );
    return hashes ? { sums, hashes } : { sums };
  }

  /**
   * The block checksums of several buffers, each with its own block size, and with `withHashes`
   * each buffer's XXH3-128. When all are in shared memory, one worker hashes them in one round
   * trip (a background save makes as few event-loop round trips as it can, since a busy training
   * loop may grant it only one per step).
   */
  async blockChecksums(
    parts: readonly Uint8Array[],
    blockSizes: readonly number[],
    withHashes: boolean,
  ): Promise<BlockChecksums> {
    // Off the main thread (the upload worker) hashing in place costs the training loop nothing.
    const shared = isMainThread && parts.every((p) => p.buffer instanceof SharedArrayBuffer);
    if (shared && parts.some((p) => p.byteLength > 0)) {
      const { sums, hashes } = await this.#post<{ sums: number[][]; hashes?: Uint8Array }>(
        {
          parts: parts.map((p, i) => ({
            buffer: p.buffer,
            offset: p.byteOffset,
            length: p.byteLength,
            blockSize: blockSizes[i],
          })),
          withHashes,
        },
        [],
      );
      return hashes ? { sums, hashes: hexDigests(hashes, parts.length) } : { sums };
    }
    return checksumsHere(parts, blockSizes, withHashes, SLICE_BYTES);
  }
}

/** A checksum worker's failure, as the one job it fails sees it. */
function workerFailure(why: unknown): CheckpointError {
  const detail = why instanceof Error ? why.message : String(why).split("\n")[0];
  return new CheckpointError("storage", `a checksum worker failed: ${detail}`, { cause: why });
}

const workers = new ChecksumWorkers();

/** Starts the checksum workers ahead of their first use, so their start overlaps other work. */
export function startChecksumWorkers(): void {
  workers.start();
}

/**
 * CRC32C of each `blockSizes[i]` block of each buffer `parts[i]`, and (unless `withHashes` is
 * false) each buffer's XXH3-128, off the calling thread where the bytes are shared.
 */
export function blockChecksumsAsync(
  parts: readonly Uint8Array[],
  blockSizes: readonly number[],
  withHashes = contentHashingOn(),
): Promise<BlockChecksums> {
  return workers.blockChecksums(parts, blockSizes, withHashes);
}

/** `ChecksumWorkers.regionChecksums`: many regions of one shared memory hashed on a worker thread in one round trip. */
export function regionChecksumsAsync(
  memory: SharedArrayBuffer,
  starts: Float64Array,
  lengths: Float64Array,
  blockSizes: Float64Array,
  withHashes = contentHashingOn(),
  pieces?: RegionPieces,
): Promise<RegionChecksums> {
  return workers.regionChecksums(memory, starts, lengths, blockSizes, withHashes, pieces);
}
