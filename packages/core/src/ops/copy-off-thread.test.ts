import { describe, expect, it, vi } from "vitest";
import { load } from "../load/load.js";
import { readMetadata } from "../load/read-metadata.js";
import { save } from "../save/save.js";
import { DefaultSavePlanner } from "../plan/default-save-planner.js";
import { hostTensor } from "../state/tensors.js";
import type { ByteRange, ReadOptions } from "../storage/storage-adapter.js";
import type * as Crc32c from "../format/crc32c.js";
import { MapStorage } from "../../test/map-storage.js";
import { copyCheckpoint } from "./copy-checkpoint.js";

/** Bytes hashed by the calling thread's crc32c (the checksum workers load @node-rs/crc32 themselves). */
const hashed = vi.hoisted(() => ({ bytes: 0 }));
vi.mock("../format/crc32c.js", async (original) => {
  const real = await original<typeof Crc32c>();
  return {
    ...real,
    crc32c: (bytes: Uint8Array, initial?: number) => {
      hashed.bytes += bytes.byteLength;
      return real.crc32c(bytes, initial);
    },
  };
});

/** MapStorage that reads into `ReadOptions.into` when given one, as file://, s3:// and gs:// do; it records the shared ones. */
class InPlaceStorage extends MapStorage {
  sharedReads = 0;
  override async read(path: string, range?: ByteRange, options?: ReadOptions): Promise<Uint8Array> {
    const bytes = await super.read(path, range);
    if (!options?.into) return bytes;
    if (options.into.buffer instanceof SharedArrayBuffer) this.sharedReads++;
    options.into.set(bytes);
    return options.into.subarray(0, bytes.byteLength);
  }
}

/** Three 256 KiB tensors in three data files, blocks of 64 KiB. */
async function source(): Promise<{ storage: InPlaceStorage; dataBytes: number }> {
  const storage = new InPlaceStorage();
  const tensor = (seed: number) => {
    const t = hostTensor("float32", [256, 256]);
    t.data.forEach((_, i) => (t.data[i] = seed * 1e6 + i));
    return t;
  };
  await save(
    { a: tensor(1), b: tensor(2), c: tensor(3) },
    {
      storage,
      path: "ckpt",
      blockSize: 64 << 10,
      concurrency: 3,
      planner: new DefaultSavePlanner({ minFileBytes: 0 }),
    },
  );
  return { storage, dataBytes: 3 * 256 * 256 * 4 };
}

describe("copyCheckpoint with offThread", () => {
  it("hashes every chunk on the checksum workers, the copy and its read-back, and copies the same bytes", async () => {
    const { storage, dataBytes } = await source();
    const metadata = await readMetadata({ storage, path: "ckpt" });
    hashed.bytes = 0;
    await copyCheckpoint(
      { storage, dir: "ckpt", metadata, where: "map://ckpt" },
      { storage, dir: "copy", where: "map://copy" },
      { offThread: true, readBack: true },
    );
    // The calling thread hashed the data files' headers and metadata.json only.
    expect(hashed.bytes).toBeLessThan(dataBytes / 100);
    expect(storage.sharedReads).toBeGreaterThanOrEqual(6);
    expect(await load({ storage, path: "copy" })).toEqual(await load({ storage, path: "ckpt" }));

    // The same copy without it hashes every byte twice (read and read back) on the calling thread.
    hashed.bytes = 0;
    await copyCheckpoint(
      { storage, dir: "ckpt", metadata, where: "map://ckpt" },
      { storage, dir: "copy2", where: "map://copy2" },
      { readBack: true },
    );
    expect(hashed.bytes).toBeGreaterThanOrEqual(2 * dataBytes);
  });

  it("still finds a flipped byte: corrupt, and nothing is left at the destination", async () => {
    const { storage } = await source();
    const metadata = await readMetadata({ storage, path: "ckpt" });
    const file = Object.keys(metadata.files).sort()[1]!;
    const bytes = storage.objects.get(`ckpt/${file}`)!;
    bytes[bytes.byteLength - 5]! ^= 0x02;
    await expect(
      copyCheckpoint(
        { storage, dir: "ckpt", metadata, where: "map://ckpt" },
        { storage, dir: "copy", where: "map://copy" },
        { offThread: true },
      ),
    ).rejects.toMatchObject({ code: "corrupt", message: expect.stringContaining(`checksum mismatch in ${file}`) });
    for await (const o of storage.list("copy/")) expect.unreachable(o.path);
  });
});
