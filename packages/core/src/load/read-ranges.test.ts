import { describe, expect, it } from "vitest";
import { bytesOf } from "../state/dtypes.js";
import { cancelledError } from "../errors.js";
import { load } from "./load.js";
import { readMetadata } from "./read-metadata.js";
import type { CheckpointMetadata } from "../format/metadata.js";
import { save } from "../save/save.js";
import { DefaultSavePlanner } from "../plan/default-save-planner.js";
import { type HostTensor, hostTensor } from "../state/tensors.js";
import { ReadTarget } from "../storage/read-target.js";
import { blockChecksums } from "../format/crc32c.js";
import {
  type ByteRange,
  type ObjectInfo,
  type ReadOptions,
  type StorageAdapter,
  type WriteBody,
  notFound,
} from "../storage/storage-adapter.js";

interface RecordedRead {
  readonly path: string;
  readonly offset: number;
  readonly length: number;
  readonly head?: Uint8Array;
  readonly into?: Uint8Array;
}

/** Objects in a Map, every ranged read recorded; `remote` decides how core plans its reads. */
class RecordingStorageAdapter implements StorageAdapter {
  readonly protocol = "test";
  readonly root = "test://";
  readonly remote: boolean;
  readonly objects = new Map<string, Uint8Array>();
  readonly reads: RecordedRead[] = [];
  /** Bytes damaged on the way, not in storage: the last byte a data read returns is flipped on its first read, or on every read. */
  wireDamage: "none" | "first" | "every" = "none";
  /** Called before each ranged read, which then honours its signal as adapters do. */
  beforeRead: () => void = () => undefined;

  constructor(remote: boolean) {
    this.remote = remote;
  }

  async read(path: string, range?: ByteRange, options: ReadOptions = {}): Promise<Uint8Array> {
    const data = this.objects.get(path);
    if (!data) throw notFound(this.protocol, path, this.root);
    if (range) {
      this.beforeRead();
      if (options.signal?.aborted) throw cancelledError(options.signal, `[test] reading ${path}`);
    }
    const again = this.reads.some((r) => r.path === path && r.offset === range?.offset);
    if (range)
      this.reads.push({
        path,
        ...range,
        ...(options.head ? { head: options.head } : {}),
        ...(options.into ? { into: options.into } : {}),
      });
    const start = Math.min(range?.offset ?? 0, data.byteLength);
    const end = range ? Math.min(data.byteLength, start + range.length) : data.byteLength;
    const target = new ReadTarget(end - start, options);
    target.set(data.subarray(start, end), 0);
    const result = target.result(end - start);
    const damaged = path.includes("data-") && (this.wireDamage === "every" || (this.wireDamage === "first" && !again));
    const last = result.byteLength > 0 ? result : options.head;
    if (damaged && last && last.byteLength > 0) last[last.byteLength - 1] = last[last.byteLength - 1]! ^ 0x01;
    return result;
  }

  async write(path: string, body: WriteBody): Promise<void> {
    const parts: Uint8Array[] = [];
    for await (const part of body instanceof Uint8Array ? [body] : body) parts.push(part.slice());
    this.objects.set(path, Buffer.concat(parts));
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    const data = this.objects.get(path);
    return data ? { path, size: data.byteLength } : null;
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    for (const [path, data] of this.objects) if (path.startsWith(prefix)) yield { path, size: data.byteLength };
  }

  async delete(path: string): Promise<void> {
    this.objects.delete(path);
  }

  async close(): Promise<void> {}

  /** Copies every object into `other` (the same checkpoint behind another adapter). */
  copyTo(other: RecordingStorageAdapter): void {
    for (const [path, data] of this.objects) other.objects.set(path, data.slice());
  }

  dataReads(): RecordedRead[] {
    return this.reads.filter((r) => r.path.includes("data-"));
  }
}

function filled(shape: number[], seed: number): HostTensor<"float32"> {
  const t = hostTensor("float32", shape);
  for (let i = 0; i < t.data.length; i++) t.data[i] = seed + i;
  return t;
}

/** a (16 KiB), b (2 MiB), c (16 KiB), d (64 KiB): leaves in this order, in one file or spread over several. */
function state(): Record<string, HostTensor<"float32">> {
  return { a: filled([64, 64], 1), b: filled([512, 1024], 2), c: filled([64, 64], 3), d: filled([128, 128], 4) };
}

function same(a: HostTensor, b: HostTensor): boolean {
  return Buffer.from(bytesOf(a.data)).equals(bytesOf(b.data));
}

function emptyLike(
  s: Record<string, HostTensor<"float32">>,
  keys = Object.keys(s),
): Record<string, HostTensor<"float32">> {
  return Object.fromEntries(keys.map((k) => [k, hostTensor("float32", s[k]!.shape)]));
}

async function saved(concurrency: number): Promise<{
  storage: RecordingStorageAdapter;
  metadata: CheckpointMetadata;
  saved: Record<string, HostTensor<"float32">>;
}> {
  const storage = new RecordingStorageAdapter(false);
  const s = state();
  // Spread over `concurrency` files, however small: the header and range reads of several files are the point.
  await save(s, { storage, path: "ckpt", concurrency, planner: new DefaultSavePlanner({ minFileBytes: 0 }) });
  return { storage, metadata: await readMetadata({ storage, path: "ckpt" }), saved: s };
}

/** The same checkpoint behind a fresh adapter that says whether it is remote, with no reads recorded yet. */
function behind(storage: RecordingStorageAdapter, remote: boolean): RecordingStorageAdapter {
  const copy = new RecordingStorageAdapter(remote);
  storage.copyTo(copy);
  return copy;
}

function chunkOf(metadata: CheckpointMetadata, key: string): { file: string; byteOffset: number } {
  const entry = metadata.entries.find((e) => e.key[0] === key);
  if (entry?.kind !== "tensor") throw new Error(`no tensor ${key}`);
  return entry.chunks[0]!;
}

function flipByte(storage: RecordingStorageAdapter, file: string, offset: number): void {
  const bytes = storage.objects.get(`ckpt/${file}`)!;
  bytes[offset] = bytes[offset]! ^ 0x01;
}

// maxReadBytes of one block keeps b a range of its own (it is read straight into its target, in one piece).
const LOAD = { path: "ckpt", maxReadBytes: 1 << 20 };

describe("readRanges: where each data file's header is read", () => {
  it("remote storage: one request per range read, each file's header read in its first range's request", async () => {
    const { storage, metadata, saved: s } = await saved(2);
    const files = Object.keys(metadata.files);
    expect(files.length).toBe(2);
    const local = behind(storage, false);
    await load(emptyLike(s), { ...LOAD, storage: local });
    const rangeReads = local
      .dataReads()
      .filter((r) => !(r.offset === 0 && r.length === 8 + metadata.files[r.path.slice(5)]!.headerLength));
    expect(local.dataReads().length).toBe(rangeReads.length + files.length);

    const remote = behind(storage, true);
    const target = emptyLike(s);
    const result = await load(target, { ...LOAD, storage: remote });
    const reads = remote.dataReads();
    expect(reads.length).toBe(rangeReads.length);
    for (const file of files) {
      const first = reads.filter((r) => r.path === `ckpt/${file}`).sort((x, y) => x.offset - y.offset)[0]!;
      expect(first.offset).toBe(0);
      expect(first.head!.byteLength).toBeGreaterThanOrEqual(8 + metadata.files[file]!.headerLength);
      expect(reads.filter((r) => r.path === `ckpt/${file}` && r.head).length).toBe(1);
    }
    for (const key of Object.keys(s)) expect(same(target[key]!, s[key]!)).toBe(true);
    // Bytes read count the headers either way.
    const localResult = await load(emptyLike(s), { ...LOAD, storage: behind(storage, false) });
    expect(result.bytesRead).toBe(localResult.bytesRead);
  });

  it("local storage: each header in a small read of its own, ranges straight into their targets, no head", async () => {
    const { storage, metadata, saved: s } = await saved(1);
    const local = behind(storage, false);
    const target = emptyLike(s);
    await load(target, { ...LOAD, storage: local });
    const [file] = Object.keys(metadata.files);
    const reads = local.dataReads();
    expect(reads.filter((r) => r.head)).toEqual([]);
    expect(reads.filter((r) => r.offset === 0)).toEqual([
      { path: `ckpt/${file}`, offset: 0, length: 8 + metadata.files[file!]!.headerLength },
    ]);
    const b = reads.find((r) => r.offset === chunkOf(metadata, "b").byteOffset)!;
    expect(b.into!.buffer).toBe(bytesOf(target["b"]!.data).buffer);
    for (const key of Object.keys(s)) expect(same(target[key]!, s[key]!)).toBe(true);
  });

  it("remote storage: a first range a little past the header takes the gap along; one far past it leaves the header a read of its own", async () => {
    const { storage, metadata, saved: s } = await saved(1);
    const [file] = Object.keys(metadata.files);
    const headerEnd = 8 + metadata.files[file!]!.headerLength;
    expect(chunkOf(metadata, "b").byteOffset).toBeGreaterThan(headerEnd);

    const near = behind(storage, true);
    const b = emptyLike(s, ["b"]);
    await load(b, { ...LOAD, storage: near });
    expect(near.dataReads().map((r) => ({ offset: r.offset, head: r.head?.byteLength }))).toEqual([
      { offset: 0, head: chunkOf(metadata, "b").byteOffset },
    ]);
    expect(same(b["b"]!, s["b"]!)).toBe(true);

    const far = behind(storage, true);
    const c = emptyLike(s, ["c"]);
    await load(c, { ...LOAD, storage: far });
    expect(
      far
        .dataReads()
        .map((r) => ({ offset: r.offset, length: r.length, head: r.head }))
        .sort((x, y) => x.offset - y.offset),
    ).toEqual([
      { offset: 0, length: headerEnd, head: undefined },
      { offset: chunkOf(metadata, "c").byteOffset, length: 64 * 64 * 4, head: undefined },
    ]);
    expect(same(c["c"]!, s["c"]!)).toBe(true);
  });

  it.each([false, true])(
    "a flipped byte in a data file's header is corrupt, naming the file (remote: %s)",
    async (remote) => {
      const { storage, metadata, saved: s } = await saved(2);
      const file = chunkOf(metadata, "a").file;
      const damaged = behind(storage, remote);
      flipByte(damaged, file, 8 + Math.floor(metadata.files[file]!.headerLength / 2));
      const error = await load(emptyLike(s), { ...LOAD, storage: damaged }).catch((e: unknown) => e);
      expect(error).toMatchObject({
        code: "corrupt",
        context: { file },
        message: `${file}: its safetensors header does not match the checksum in metadata.json; the file is damaged`,
      });
      expect(damaged.dataReads().some((r) => r.head)).toBe(remote);
    },
  );

  it("a truncated data file gives the same error, local or remote", async () => {
    const { storage, metadata, saved: s } = await saved(1);
    const file = chunkOf(metadata, "a").file;
    const headerEnd = 8 + metadata.files[file]!.headerLength;
    const path = `ckpt/${file}`;
    // Inside the first range, between the header and the first range, inside the header.
    for (const end of [chunkOf(metadata, "a").byteOffset + 100, headerEnd, headerEnd - 10]) {
      const messages: unknown[] = [];
      for (const remote of [false, true]) {
        const cut = behind(storage, remote);
        cut.objects.set(path, cut.objects.get(path)!.subarray(0, end));
        messages.push(await load(emptyLike(s), { ...LOAD, storage: cut }).catch((e: unknown) => e));
      }
      expect(messages[0]).toMatchObject({ code: "corrupt", context: { file } });
      expect(messages[1]).toMatchObject({ code: "corrupt", message: (messages[0] as Error).message });
    }
  });
});

describe("readRanges: damage on the wire", () => {
  /** How many times each data range (path and offset) was read. */
  const readsPerRange = (storage: RecordingStorageAdapter): number[] => {
    const counts = new Map<string, number>();
    for (const r of storage.dataReads())
      counts.set(`${r.path}@${r.offset}`, (counts.get(`${r.path}@${r.offset}`) ?? 0) + 1);
    return [...new Set(counts.values())];
  };

  it("remote storage: a range that fails its checksum once is read again, and the load succeeds", async () => {
    const { storage, saved: s } = await saved(2);
    const remote = behind(storage, true);
    remote.wireDamage = "first";
    const target = emptyLike(s);
    await load(target, { ...LOAD, storage: remote });
    for (const key of Object.keys(s)) expect(same(target[key]!, s[key]!)).toBe(true);
    expect(readsPerRange(remote)).toEqual([2]);
  });

  it("remote storage: damage that persists is corrupt after one more read", async () => {
    const { storage, saved: s } = await saved(2);
    const remote = behind(storage, true);
    remote.wireDamage = "every";
    await expect(load(emptyLike(s), { ...LOAD, storage: remote, concurrency: 1 })).rejects.toMatchObject({
      code: "corrupt",
    });
    expect(readsPerRange(remote)).toEqual([2]);
  });

  it("local storage: a checksum mismatch is corrupt at once, never read again", async () => {
    const { storage, saved: s } = await saved(2);
    const local = behind(storage, false);
    local.wireDamage = "first";
    await expect(load(emptyLike(s), { ...LOAD, storage: local, concurrency: 1 })).rejects.toMatchObject({
      code: "corrupt",
    });
    expect(readsPerRange(local)).toEqual([1]);
  });
});

/** Hashes each ranged read's blocks where asked (`ReadOptions.blockChecksums`), as OPFS does in its read workers: right, wrong or too few. */
class HashingStorageAdapter extends RecordingStorageAdapter {
  sums: "right" | "wrong" | "short" = "right";
  readonly asked: number[] = [];

  override async read(path: string, range?: ByteRange, options: ReadOptions = {}): Promise<Uint8Array> {
    const bytes = await super.read(path, range, options);
    const request = options.blockChecksums;
    if (request) {
      this.asked.push(request.blockSize);
      const sums = Uint32Array.from(blockChecksums(bytes, request.blockSize));
      if (this.sums === "wrong") sums[0] = sums[0]! ^ 1;
      request.onChecksums(this.sums === "short" ? sums.subarray(1) : sums);
    }
    return bytes;
  }
}

describe("readRanges: block checksums computed by the adapter", () => {
  async function hashing(sums: HashingStorageAdapter["sums"]) {
    const { storage, metadata, saved: s } = await saved(1);
    const adapter = new HashingStorageAdapter(false);
    storage.copyTo(adapter);
    adapter.sums = sums;
    return { adapter, metadata, s };
  }

  it("are asked for, per block of the chunk, on reads straight into a target, and a load with them is whole", async () => {
    const { adapter, metadata, s } = await hashing("right");
    const target = emptyLike(s);
    await load(target, { ...LOAD, storage: adapter });
    const b = metadata.entries.find((e) => e.key[0] === "b");
    expect(adapter.asked.length).toBeGreaterThan(0);
    expect(new Set(adapter.asked)).toEqual(new Set([b?.kind === "tensor" ? b.chunks[0]!.blockSize : -1]));
    for (const key of Object.keys(s)) expect(same(target[key]!, s[key]!)).toBe(true);
  });

  it("are what is checked: sums that disagree with the checkpoint fail the load as corrupt", async () => {
    const { adapter, s } = await hashing("wrong");
    await expect(load(emptyLike(s), { ...LOAD, storage: adapter })).rejects.toMatchObject({ code: "corrupt" });
  });

  it("are ignored when there is not one per block: core hashes the bytes itself and finds the damage", async () => {
    const { adapter, metadata, s } = await hashing("short");
    const { file, byteOffset } = chunkOf(metadata, "b");
    await load(emptyLike(s), { ...LOAD, storage: adapter });
    flipByte(adapter, file, byteOffset + 5);
    await expect(load(emptyLike(s), { ...LOAD, storage: adapter })).rejects.toMatchObject({ code: "corrupt" });
  });
});

describe("a cancelled load", () => {
  it("says the load was cancelled, not that nothing was committed, whichever layer saw the abort", async () => {
    const { storage, saved: s } = await saved(1);
    for (const remote of [false, true]) {
      const source = behind(storage, remote);
      const controller = new AbortController();
      source.beforeRead = () => controller.abort(new Error("stop"));
      for (const call of [
        () => load(emptyLike(s), { ...LOAD, storage: source, signal: controller.signal }),
        () => load({ ...LOAD, storage: source, signal: controller.signal }),
      ]) {
        const error = await call().catch((e: unknown) => e);
        expect(error).toMatchObject({ code: "cancelled", message: "the load was cancelled" });
      }
    }
  });
});

describe("readRanges: staging for reads that cannot land in place", () => {
  it("is memory kept for the process: a second load stages in the buffers the first one used", async () => {
    const { storage, saved: s } = await saved(1);
    const stagingOf = async (): Promise<Set<ArrayBufferLike>> => {
      const remote = behind(storage, true);
      const target = emptyLike(s);
      await load(target, { ...LOAD, storage: remote });
      for (const key of Object.keys(s)) expect(same(target[key]!, s[key]!)).toBe(true);
      const targets = new Set<ArrayBufferLike>(Object.values(target).map((t) => t.data.buffer));
      return new Set(remote.dataReads().flatMap((r) => (r.into && !targets.has(r.into.buffer) ? [r.into.buffer] : [])));
    };
    const first = await stagingOf();
    expect(first.size).toBeGreaterThan(0);
    const second = await stagingOf();
    expect([...second].every((buffer) => first.has(buffer))).toBe(true);
  });
});
