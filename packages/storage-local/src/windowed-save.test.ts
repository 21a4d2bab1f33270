import { promises as nodeFs } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
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
import type { WriteBody, WriteOptions } from "@cairn/core/storage";
import { seededRandom } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { FsStorageAdapter } from "./fs-storage-adapter.js";
import type { FsPromisesLike } from "./fs-like.js";

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
 * differ; bytes from the seed.
 */
function randomState(seed: number): Record<string, HostTensor> {
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
  const small = 100 + Math.floor(random() * 400);
  for (let i = 0; i < small; i++) {
    const dtype = DTYPES[Math.floor(random() * DTYPES.length)]!;
    const elements = random() < 0.05 ? 0 : 1 + Math.floor(random() * (random() < 0.2 ? 300_000 : 3_000));
    sd[`small.${i}`] = fill(hostTensor(dtype, [elements]));
  }
  const big = 1 + Math.floor(random() * 3);
  for (let i = 0; i < big; i++) {
    const rows = [1, 3, 64, 1000][Math.floor(random() * 4)]!;
    const bytes = (8 << 20) + Math.floor(random() * (12 << 20));
    const dtype = random() < 0.3 ? "int8" : "float32";
    sd[`big.${i}`] = fill(hostTensor(dtype, [rows, Math.ceil(bytes / SIZE[dtype] / rows)]));
  }
  return sd;
}

const bytesOf = (t: HostTensor): Uint8Array => new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);

describe("file:// saves through windows of page-aligned memory", () => {
  it("store the same block CRC32Cs and content hashes as the bytes' own, and load back, over seeded states", async () => {
    const xxh = await loadXxh128();
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
      for (const entry of written.entries) {
        if (entry.kind !== "tensor") continue;
        const bytes = bytesOf(sd[entry.key.join(".")]!);
        const [chunk] = entry.chunks;
        expect(chunk!.crc32c, entry.key.join(".")).toEqual(blockChecksums(bytes, chunk!.blockSize));
        expect(chunk!.hash, entry.key.join(".")).toBe(xxh.hash(bytes));
      }
      // Every data file reported its progress, never backwards, up to its end.
      for (const [name, file] of Object.entries(written.files)) {
        const marks = storage.marks.get(`run/1/${name}`)!;
        expect(marks.length, name).toBeGreaterThan(0);
        expect(marks, name).toEqual([...marks].sort((a, b) => a - b));
        expect(marks.at(-1), name).toBe(file.size);
      }

      const target: StateDict = {};
      for (const [key, t] of Object.entries(sd)) target[key] = hostTensor(t.dtype, t.shape);
      await load(target, { storage, path: "run/1" });
      for (const [key, t] of Object.entries(sd))
        expect(Buffer.compare(bytesOf(target[key] as HostTensor), bytesOf(t)), key).toBe(0);
      await storage.close();
      await memory.close();
    }
  }, 120_000);
});
