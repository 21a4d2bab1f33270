import { promises as nodeFs } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setImmediate as nextTurn } from "node:timers/promises";
import {
  CheckpointError,
  DefaultSavePlanner,
  type HostTensor,
  type StateDict,
  hostTensor,
  load,
  openStorage,
  readMetadata,
  save,
} from "@cairn/core";
import { blockChecksums, loadXxh128 } from "@cairn/core/format";
import type { RetryPolicy, StorageAdapter, WriteBody, WriteOptions } from "@cairn/core/storage";
import { seededRandom } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { FsStorageAdapter } from "./fs-storage-adapter.js";
import type { FileHandleLike, FsPromisesLike } from "./fs-like.js";

const roots: string[] = [];
afterAll(async () => {
  await Promise.all(roots.map((d) => rm(d, { recursive: true, force: true })));
});

/** file:// that records every `onWritten` mark of every write, by path. */
class RecordingAdapter extends FsStorageAdapter {
  readonly marks = new Map<string, number[]>();
  override write(path: string, body: WriteBody, options: WriteOptions = {}): Promise<void> {
    const marks: number[] = [];
    this.marks.set(path, marks);
    const told = options.onWritten;
    return super.write(path, body, {
      ...options,
      ...(told ? { onWritten: (bytes: number) => (marks.push(bytes), told(bytes)) } : {}),
    });
  }
}

const DTYPES = ["float32", "int8", "int32", "float64", "uint8", "int16"] as const;
const SIZE = { float32: 4, int8: 1, int32: 4, float64: 8, uint8: 1, int16: 2 } as const;

/**
 * Many small tensors of mixed element sizes (so some start off their element alignment in the
 * file), some empty, and a few bigger than a window (8 MiB) with 2-D shapes whose block sizes
 * differ; bytes from the seed. A compact state has 40 small tensors and one big one of 8-10 MiB.
 */
function randomState(seed: number, compact = false): Record<string, HostTensor> {
  const random = seededRandom(seed);
  const sd: Record<string, HostTensor> = {};
  const fill = (t: HostTensor): HostTensor => {
    const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    for (let i = 0; i < bytes.length; i += 4) {
      const word = (random() * 2 ** 32) >>> 0;
      for (let b = 0; b < 4 && i + b < bytes.length; b++) bytes[i + b] = (word >>> (8 * b)) & 0xff;
    }
    return t;
  };
  const small = compact ? 40 : 100 + Math.floor(random() * 400);
  for (let i = 0; i < small; i++) {
    const dtype = DTYPES[Math.floor(random() * DTYPES.length)]!;
    const elements = random() < 0.05 ? 0 : 1 + Math.floor(random() * (random() < 0.2 ? 300_000 : 3_000));
    sd[`small.${i}`] = fill(hostTensor(dtype, [elements]));
  }
  const big = compact ? 1 : 1 + Math.floor(random() * 3);
  for (let i = 0; i < big; i++) {
    const rows = [1, 3, 64, 1000][Math.floor(random() * 4)]!;
    const bytes = (8 << 20) + Math.floor(random() * ((compact ? 2 : 12) << 20));
    const dtype = random() < 0.3 ? "int8" : "float32";
    sd[`big.${i}`] = fill(hostTensor(dtype, [rows, Math.ceil(bytes / SIZE[dtype] / rows)]));
  }
  return sd;
}

const bytesOf = (t: HostTensor): Uint8Array => new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);

/** The checkpoint at `path` holds each tensor's own block CRC32Cs and content hash, and loads back bit-exact. */
async function expectSavedRight(storage: StorageAdapter, path: string, sd: Record<string, HostTensor>): Promise<void> {
  const xxh = await loadXxh128();
  const written = await readMetadata({ storage, path });
  for (const entry of written.entries) {
    if (entry.kind !== "tensor") continue;
    const bytes = bytesOf(sd[entry.key.join(".")]!);
    const [chunk] = entry.chunks;
    expect(chunk!.crc32c, entry.key.join(".")).toEqual(blockChecksums(bytes, chunk!.blockSize));
    expect(chunk!.hash, entry.key.join(".")).toBe(xxh.hash(bytes));
  }
  const target: StateDict = {};
  for (const [key, t] of Object.entries(sd)) target[key] = hostTensor(t.dtype, t.shape);
  await load(target, { storage, path });
  for (const [key, t] of Object.entries(sd))
    expect(Buffer.compare(bytesOf(target[key] as HostTensor), bytesOf(t)), `${path} ${key}`).toBe(0);
}

describe("file:// saves through windows of page-aligned memory", () => {
  it("store the same block CRC32Cs and content hashes as the bytes' own, and load back, over seeded states", async () => {
    for (const seed of [1, 2, 3, 4]) {
      const sd = randomState(seed);
      const root = await mkdtemp(join(tmpdir(), "cairn-windows-"));
      roots.push(root);
      const storage = new RecordingAdapter("file", root, nodeFs as unknown as FsPromisesLike, root, {
        syncDirectories: true,
        directIo: true,
      });
      // Files of several windows, small and big tensors mixed in one file and alone.
      const planner = new DefaultSavePlanner({ minFileBytes: seed % 2 === 0 ? 0 : 24 << 20 });
      const blockSize = [1 << 20, 64 << 10, 4 << 20, 1024][seed - 1]!;
      await save(sd, { storage, path: "run/1", planner, blockSize });
      // The same state through memory://, which reports no progress: files go out the plain way.
      const memory = await openStorage(`memory://windows-${seed}/root`);
      await save(sd, { storage: memory, path: "run/1", planner, blockSize });

      const written = await readMetadata({ storage, path: "run/1" });
      const plain = await readMetadata({ storage: memory, path: "run/1" });
      // Data file names carry a save's id: everything else must be the same.
      const anonymous = (m: typeof written): unknown =>
        JSON.parse(JSON.stringify(m.entries).replace(/data-r0-(\d+)-[0-9a-f]+/g, "data-r0-$1"));
      expect(anonymous(written)).toEqual(anonymous(plain));
      // Every data file reported its progress, never backwards, up to its end.
      for (const [name, file] of Object.entries(written.files)) {
        const marks = storage.marks.get(`run/1/${name}`)!;
        expect(marks.length, name).toBeGreaterThan(0);
        expect(marks, name).toEqual([...marks].sort((a, b) => a - b));
        expect(marks.at(-1), name).toBe(file.size);
      }
      await expectSavedRight(storage, "run/1", sd);
      await storage.close();
      await memory.close();
    }
  }, 120_000);
});

/**
 * file:// whose data files' writes go wrong: the first attempt of each fails (transient) after
 * `failAfterParts` parts, or `abort` is called once `abortAfterParts` parts of files under
 * `abortUnder` went out. Counts attempts by path.
 */
class FaultyWritesAdapter extends FsStorageAdapter {
  failAfterParts = -1;
  abortUnder = "";
  abortAfterParts = -1;
  abort?: () => void;
  readonly attempts = new Map<string, number>();
  #abortParts = 0;
  override write(path: string, body: WriteBody, options: WriteOptions = {}): Promise<void> {
    if (!path.includes("/data-") || body instanceof Uint8Array) return super.write(path, body, options);
    const attempt = (this.attempts.get(path) ?? 0) + 1;
    this.attempts.set(path, attempt);
    const failAt = attempt === 1 ? this.failAfterParts : -1;
    const aborting = this.abortUnder !== "" && path.startsWith(this.abortUnder);
    const parts = async function* (this: FaultyWritesAdapter): AsyncGenerator<Uint8Array> {
      let k = 0;
      for await (const part of body) {
        if (k++ === failAt)
          throw new CheckpointError("storage", "injected transient failure", { context: { transient: true } });
        if (aborting && this.#abortParts++ === this.abortAfterParts) this.abort?.();
        yield part;
      }
    };
    return super.write(path, parts.call(this), options);
  }
}

/**
 * node:fs whose writes each finish after a few turns (so out of order), and fail with EIO: the
 * first write past offset 0, then one in four of them at random, 4 failures in all.
 */
function outOfOrderFs(random: () => number): { fs: FsPromisesLike; failed: () => number } {
  const base = nodeFs as unknown as FsPromisesLike;
  let failures = 0;
  const fs: FsPromisesLike = {
    ...base,
    open: async (path, flags, mode) => {
      const handle = await base.open(path, flags, mode);
      const write: FileHandleLike["write"] = async (buffer, offset, length, position) => {
        for (let turns = Math.floor(random() * 4); turns > 0; turns--) await nextTurn();
        if ((position ?? 0) > 0 && failures < 4 && (failures === 0 || random() < 0.25)) {
          failures++;
          throw Object.assign(new Error("EIO: i/o error, write"), { code: "EIO" });
        }
        return handle.write(buffer, offset, length, position);
      };
      // The handle as it is, but for its writes.
      return new Proxy(handle, {
        get: (target, key) => {
          if (key === "write") return write;
          const value: unknown = Reflect.get(target, key);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
    },
  };
  return { fs, failed: () => failures };
}

const quickRetry: Partial<RetryPolicy> = { maxAttempts: 10, baseDelayMs: 1, maxDelayMs: 2 };

async function faultyAdapter(): Promise<FaultyWritesAdapter> {
  const root = await mkdtemp(join(tmpdir(), "cairn-windows-"));
  roots.push(root);
  return new FaultyWritesAdapter("file", root, nodeFs as unknown as FsPromisesLike, root, {
    syncDirectories: false,
    directIo: true,
  });
}
const retried = (storage: FaultyWritesAdapter): boolean => [...storage.attempts.values()].some((n) => n > 1);

describe("file:// saves through windows, when writes fail, abort or finish out of order", () => {
  it("a data file's write that fails before or after its first window went out is packed and written again", async () => {
    for (const failAfterParts of [0, 1]) {
      const storage = await faultyAdapter();
      storage.failAfterParts = failAfterParts;
      const sd = randomState(10 + failAfterParts, true);
      const planner = new DefaultSavePlanner({ minFileBytes: 64 << 20 });
      await save(sd, { storage, path: "r/1", retry: quickRetry, planner });
      expect(retried(storage)).toBe(true);
      await expectSavedRight(storage, "r/1", sd);
    }
  });

  it("saves at once share the windows: retried file:// saves of odd block sizes, a memory:// save and a load", async () => {
    const storage = await faultyAdapter();
    const before = randomState(20, true);
    await save(before, { storage, path: "c/before" });
    storage.failAfterParts = 1;
    const memory = await openStorage("memory://windows-at-once/root");
    const sds = [21, 22, 23, 24].map((seed) => randomState(seed, true));
    const target: StateDict = {};
    for (const [key, t] of Object.entries(before)) target[key] = hostTensor(t.dtype, t.shape);
    // Blocks smaller than a page, of a page, and bigger than a window (8 MiB).
    await Promise.all([
      ...[512, 4096, 32 << 20].map((blockSize, i) =>
        save(sds[i]!, { storage, path: `c/${i}`, retry: quickRetry, blockSize }),
      ),
      save(sds[3]!, { storage: memory, path: "c/3" }),
      load(target, { storage, path: "c/before" }),
    ]);
    expect(retried(storage)).toBe(true);
    for (const [key, t] of Object.entries(before))
      expect(Buffer.compare(bytesOf(target[key] as HostTensor), bytesOf(t)), key).toBe(0);
    for (const i of [0, 1, 2]) await expectSavedRight(storage, `c/${i}`, sds[i]!);
    await expectSavedRight(memory, "c/3", sds[3]!);
    await memory.close();
  });

  it("a save aborted part way gives its windows back: a save beside it and the next one are right", async () => {
    for (const abortAfterParts of [0, 1]) {
      const storage = await faultyAdapter();
      const controller = new AbortController();
      storage.abortUnder = "a/1/";
      storage.abortAfterParts = abortAfterParts;
      storage.abort = () => controller.abort(new Error("injected abort"));
      const beside = randomState(40 + abortAfterParts, true);
      const [aborted] = await Promise.allSettled([
        save(randomState(30 + abortAfterParts, true), { storage, path: "a/1", signal: controller.signal }),
        save(beside, { storage, path: "a/2" }),
      ]);
      expect(aborted.status).toBe("rejected");
      await expectSavedRight(storage, "a/2", beside);
      const next = randomState(50 + abortAfterParts, true);
      await save(next, { storage, path: "a/3" });
      await expectSavedRight(storage, "a/3", next);
    }
  });

  it("an incremental save writes its changed tensors through windows", async () => {
    const storage = await faultyAdapter();
    const sd = randomState(60, true);
    await save(sd, { storage, path: "i/1" });
    const random = seededRandom(61);
    const changed: Record<string, HostTensor> = { ...sd };
    for (const [key, t] of Object.entries(sd)) {
      if (random() < 0.5 && !key.startsWith("big.")) continue;
      const copy = hostTensor(t.dtype, t.shape);
      bytesOf(copy).set(bytesOf(t));
      if (copy.data.byteLength > 0) bytesOf(copy)[Math.floor(random() * copy.data.byteLength)]! ^= 0x5a;
      changed[key] = copy;
    }
    await save(changed, { storage, path: "i/2", incremental: { base: "1" } });
    await expectSavedRight(storage, "i/2", changed);
    await expectSavedRight(storage, "i/1", sd);
  });

  for (const directIo of [true, false])
    it(`saves at once through an fs whose writes finish out of order and fail now and then (directIo: ${directIo})`, async () => {
      const root = await mkdtemp(join(tmpdir(), "cairn-windows-"));
      roots.push(root);
      const { fs, failed } = outOfOrderFs(seededRandom(directIo ? 70 : 71));
      const storage = new FsStorageAdapter("file", root, fs, root, { syncDirectories: false, directIo });
      const sds = [72, 73].map((seed) => randomState(seed, true));
      const planner = new DefaultSavePlanner({ minFileBytes: 40 << 20 });
      await Promise.all(
        sds.map((sd, i) =>
          save(sd, { storage, path: `j/${i}`, retry: quickRetry, planner, blockSize: [4096, 1 << 20][i] }),
        ),
      );
      expect(failed()).toBeGreaterThan(0);
      for (const [i, sd] of sds.entries()) await expectSavedRight(storage, `j/${i}`, sd);
    });
});
